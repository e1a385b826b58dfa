"""Per-primitive checks of the derivative and batching rules (DESIGN "Testing that means something").

For every differentiable primitive of ``PRIMITIVES`` (iterated, so a new primitive fails the
coverage test until it gets a case here), in float64 and float32:

- the JVP and the VJP against the central-difference Jacobian (computed in float64);
- the dot-product test ``<u, J v> == <J^T u, v>`` between ``qb.jvp`` and ``qb.vjp``;
- the rules' own derivatives: ``jvp(grad(<u, f>))`` against differences of ``grad(<u, f>)``;
- batching: ``vmap(f)(xs)`` equals stacking ``f(x)``, with every argument mapped, with each
  argument mapped alone (the others shared), and with the batch axis last (in/out_axes=-1);
  per-example gradients ``vmap(grad(<u, f>))`` equal the stacked gradients. A case's vmaps
  (one per pattern) are staged in one jitted program: one compile, each result checked.

Primitives without a derivative (comparisons, bool logic, bool reductions) get the batching
check only. solve, triangular_solve and cholesky take stacks of matrices (leading batch axes),
so their batched cases are vmapped over a second batch axis.

Each primitive is reached through the public ops, and the coverage test checks that the case's
traced graph really contains the primitive. Pow at its singular points (spec 000 §3.2, S1b) is
tested at the end.
"""

import dataclasses
import math

import numpy as np
import pytest

import quabla as qb
from quabla import ops as qb_ops
from quabla.core.primitives import PRIMITIVES

from helpers import EXACT_TOL, FD_TOL, assert_close, fd_jacobian, flat, staged_graph, traced_graph

DTYPES = [qb.float64, qb.float32]


@dataclasses.dataclass
class Case:
    """How to reach a primitive through the public API: ``fn`` over float arrays made by ``args``."""

    fn: object
    args: object          # rng -> list of float64 ndarrays (rounded to float32, see _data)
    name: str = ""
    smooth: bool = True   # second-order check is meaningful (no kinks near the data)
    reference: object = None  # the same map without rounding steps, for finite differences
    rounds: bool = False  # rounds through float32 inside, so identities hold to float32 only


def _u(shape, low=-1.0, high=1.0):
    return lambda rng: rng.uniform(low, high, shape)


def _args(*makers):
    return lambda rng: [m(rng) for m in makers]


def _distinct(shape, low=-2.0, high=2.0, gap=0.05):
    """Values at least ``gap`` apart (no ties for max/min/abs kinks)."""
    def make(rng):
        n = int(np.prod(shape))
        values = np.linspace(low, high, n)
        values = values + rng.uniform(-gap, gap, n) * 0.4
        rng.shuffle(values)
        values[np.abs(values) < gap] += 2 * gap
        return values.reshape(shape)
    return make


def _spd_factor(n, batch=()):
    return lambda rng: rng.uniform(-0.5, 0.5, batch + (n, n)) + np.eye(n)


def _square(n, batch=()):
    return lambda rng: rng.uniform(-0.5, 0.5, batch + (n, n)) + 3.0 * np.eye(n)


def _spd_cholesky(a):
    """cholesky of the positive definite a a^T + I/2 (of each matrix of a stack)."""
    swap = tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2)
    return qb.cholesky(a @ qb.transpose(a, swap) + 0.5 * qb.eye(a.shape[-1], dtype=a.dtype))


_SPREAD = np.diag([1.0, 2.0, 3.5])


def _spread(a):
    """``a`` plus the leading block of diag(1, 2, 3.5) of its shape (in its dtype)."""
    m, n = a.shape[-2:]
    return a + qb.array(_SPREAD[:m, :n], dtype=a.dtype)


def _separated(a):
    """A symmetric matrix (of each of a stack) with eigenvalues near 1, 2 and 3.5."""
    swap = tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2)
    return _spread(a + qb.transpose(a, swap))


MASK = np.array([[True, False, True], [False, False, True]])


def _pad_via_slice_vjp(ct):
    """pad is the transpose of slice: pull ``ct`` back through a strided slice."""
    zero = qb.zeros((3, 5), dtype=ct.dtype)
    _, pull = qb.vjp(lambda z: z[1:, ::2], zero)
    return pull(ct)[0]


def _cast_round_trip(x):
    other = qb.float32 if x.dtype is qb.float64 else qb.float64
    return qb.astype(qb.astype(x, other), x.dtype) * x


CASES = {
    "neg": [Case(lambda x: -x, _args(_u((2, 3))))],
    "sin": [Case(qb.sin, _args(_u((2, 3), -3, 3)))],
    "cos": [Case(qb.cos, _args(_u((2, 3), -3, 3)))],
    "exp": [Case(qb.exp, _args(_u((2, 3))))],
    "log": [Case(qb.log, _args(_u((2, 3), 0.3, 3.0)))],
    "log1p": [Case(qb.log1p, _args(_u((2, 3), -0.5, 2.0)))],
    "expm1": [Case(qb.expm1, _args(_u((2, 3))))],
    "tanh": [Case(qb.tanh, _args(_u((2, 3), -2, 2)))],
    "sqrt": [Case(qb.sqrt, _args(_u((2, 3), 0.3, 3.0)))],
    "abs": [Case(qb.abs, _args(_distinct((2, 3))), smooth=False)],
    "sign": [Case(lambda x: qb.sign(x) * qb.sin(x), _args(_distinct((2, 3))), smooth=False)],
    "logistic": [Case(qb.sigmoid, _args(_u((2, 3), -3, 3)))],
    "relu": [Case(qb.relu, _args(_distinct((6,))), smooth=False)],
    "softplus": [Case(qb.softplus, _args(_u((2, 3), -3, 3)))],
    "integer_pow": [
        Case(lambda x: x ** 3, _args(_u((2, 3), -2, 2)), "cube"),
        Case(qb.square, _args(_u((4,), -2, 2)), "square"),
    ],
    "add": [Case(lambda x, y: x + y, _args(_u((2, 3)), _u((2, 3))))],
    "sub": [Case(lambda x, y: x - y, _args(_u((2, 3)), _u((2, 3))))],
    "mul": [Case(lambda x, y: x * y, _args(_u((2, 3)), _u((2, 3))))],
    "div": [Case(lambda x, y: x / y, _args(_u((2, 3)), _u((2, 3), 0.5, 2.0)))],
    "pow": [
        Case(qb.power, _args(_u((2, 3), 0.3, 2.0), _u((2, 3), -1.5, 2.5)), "tensor"),
        Case(lambda x: x ** 2.5, _args(_u((5,), 0.3, 2.0)), "float exponent"),
        Case(lambda y: 1.7 ** y, _args(_u((5,), -1.0, 1.0)), "rpow"),
    ],
    "max": [
        Case(qb.maximum, _args(_distinct((2, 3)), _distinct((2, 3), -1.9, 2.1)), smooth=False),
        Case(lambda x: qb.maximum(x, 0.25), _args(_distinct((6,))), "scalar", smooth=False),
    ],
    "min": [Case(qb.minimum, _args(_distinct((2, 3)), _distinct((2, 3), -1.9, 2.1)), smooth=False)],
    "broadcast_in_dim": [
        Case(lambda x: qb.broadcast_to(x, (2, 3)) * 1.5, _args(_u((3,))), "rank"),
        Case(lambda x: qb.broadcast_to(x, (2, 3, 4)), _args(_u((3, 1))), "stretch"),
    ],
    "reshape": [Case(lambda x: qb.reshape(x, (3, 2)), _args(_u((2, 3))))],
    "transpose": [
        Case(qb.transpose, _args(_u((2, 3)))),
        Case(lambda x: qb.transpose(x, (1, 2, 0)), _args(_u((2, 3, 2))), "3d"),
    ],
    "slice": [
        Case(lambda x: x[1:, ::2], _args(_u((3, 5)))),
        Case(lambda x: x[..., 1], _args(_u((2, 3))), "index"),
    ],
    "pad": [Case(_pad_via_slice_vjp, _args(_u((2, 3))))],
    "rev": [
        Case(lambda x: x[::-1, ::-2] * x[1, 0], _args(_u((3, 5)))),
        Case(lambda x: x[..., ::-1], _args(_u((2, 3))), "last axis"),
    ],
    "concatenate": [
        Case(lambda x, y: qb.concat([x, y], axis=1), _args(_u((2, 3)), _u((2, 2)))),
        Case(lambda x, y: qb.stack([x, y]), _args(_u((3,)), _u((3,))), "stack"),
    ],
    "select": [
        Case(lambda x, y: qb.where(MASK, x, y), _args(_u((2, 3)), _u((2, 3)))),
        Case(lambda x: qb.where(x > 0.0, x * x, -x), _args(_distinct((2, 3))), "traced",
             smooth=False),
    ],
    "cast": [Case(_cast_round_trip, _args(_u((2, 3))), smooth=False,
                  reference=lambda x: x * x, rounds=True)],
    "reduce_sum": [
        Case(lambda x: qb.sum(x, axis=1), _args(_u((2, 3)))),
        Case(qb.mean, _args(_u((2, 3))), "mean"),
    ],
    "reduce_max": [
        Case(lambda x: qb.max(x, axis=0), _args(_distinct((3, 4))), smooth=False),
        Case(qb.max, _args(_distinct((5,))), "all", smooth=False),
    ],
    "reduce_min": [Case(lambda x: qb.min(x, axis=1), _args(_distinct((3, 4))), smooth=False)],
    "dot_general": [
        Case(qb.matmul, _args(_u((2, 3)), _u((3, 2))), "matmul"),
        Case(qb.matmul, _args(_u((2, 3)), _u((3,))), "matvec"),
        Case(lambda a, b: qb.einsum("bij,bjk->bik", a, b), _args(_u((2, 2, 3)), _u((2, 3, 2))),
             "batched einsum"),
        Case(lambda a, b: qb.einsum("ij,kj->ik", a, b), _args(_u((2, 3)), _u((2, 3))),
             "transposed einsum"),
        Case(lambda a, b: qb_ops.dot_general(a, b, ((2,), (0,)), ((1,), (1,))),
             _args(_u((3, 2, 4)), _u((4, 2, 2))), "batch in the middle"),
        Case(lambda a, b: qb_ops.dot_general(a, b, ((2, 0), (0, 2)), ((), ())),
             _args(_u((2, 3, 4)), _u((4, 2, 2))), "two unsorted contractions"),
        Case(lambda a, b: qb.einsum("jib,jk->bki", a, b), _args(_u((3, 2, 2)), _u((3, 4))),
             "permuted output"),
    ],
    "solve": [  # a lambda per case: each keeps its own trace cache (qb.solve's would overflow)
        Case(lambda a, b: qb.solve(a, b), _args(_square(3), _u((3,))), "vector"),
        Case(lambda a, b: qb.solve(a, b), _args(_square(3), _u((3, 2))), "matrix"),
        Case(lambda a, b: qb.solve(a, b), _args(_square(3, (2,)), _u((2, 3, 2))),
             "batched matrices"),
        Case(lambda a, b: qb.solve(a, b[..., None])[..., 0], _args(_square(3, (2,)), _u((2, 3))),
             "batched vectors"),
        Case(lambda a, b: qb.solve(a, b), _args(_square(3, (2,)), _u((3,))),
             "one vector for a stack"),
        Case(lambda a, b: qb.solve(a, b), _args(_square(2, (2, 1)), _u((3, 2, 1))),
             "broadcast batch axes"),
    ],
    "triangular_solve": [  # the other triangle of a is random: it must not be read
        Case(lambda a, b: qb.linalg.triangular_solve(a, b, lower=True),
             _args(_square(3), _u((3, 2))), "lower matrix"),
        Case(lambda a, b: qb.linalg.triangular_solve(a, b), _args(_square(3), _u((3,))),
             "upper vector"),
        Case(lambda a, b: qb.linalg.triangular_solve(a, b, lower=True, transpose_a=True),
             _args(_square(3, (2,)), _u((2, 3, 2))), "lower transposed batched matrices"),
        Case(lambda a, b: qb.linalg.triangular_solve(a, b, transpose_a=True),
             _args(_square(3, (2,)), _u((3,))), "upper transposed, one vector for a stack"),
        Case(lambda a, b: qb.linalg.triangular_solve(a, b[..., None], lower=True)[..., 0],
             _args(_square(3, (2,)), _u((2, 3))), "batched vectors"),
        Case(lambda a, b: qb.linalg.triangular_solve(a, b, transpose_a=True),
             _args(_square(2, (2, 1)), _u((3, 2, 1))), "broadcast batch axes"),
    ],
    "cholesky": [
        Case(_spd_cholesky, _args(_spd_factor(3))),
        Case(_spd_cholesky, _args(_spd_factor(3, (2,))), "batched"),
    ],
    "dynamic_index": [  # the index is a constant: no derivative in it
        Case(lambda x: x[qb.array(1.0)], _args(_u((3, 2))), "row"),
        Case(lambda x: x[:, qb.array(-1.0)] * x[qb.array(9.0), 0], _args(_u((3, 2))),
             "negative and clamped"),
    ],
    "dynamic_update_add": [
        Case(lambda x, v: qb_ops.bind("dynamic_update_add", x, qb.array(2.0), v),
             _args(_u((3, 2)), _u((2,))), "row"),
    ],
    # the decompositions (issue 25), each one packed array of its factors; inputs with
    # well-separated eigen- and singular values (their vectors' derivatives divide by the gaps)
    "slogdet": [
        Case(lambda a: qb_ops.bind("slogdet", a), _args(_square(3))),
        Case(lambda a: qb_ops.bind("slogdet", a), _args(_square(2, (2,))), "batched"),
    ],
    "eigh": [
        Case(lambda a: qb_ops.bind("eigh", _separated(a), lower=True, vectors=True),
             _args(_u((3, 3), -0.3, 0.3))),
        Case(lambda a: qb_ops.bind("eigh", _separated(a), lower=False, vectors=False),
             _args(_u((2, 3, 3), -0.3, 0.3)), "values batched"),
    ],
    "svd": [
        Case(lambda a: qb_ops.bind("svd", _spread(a), full_matrices=False,
                                   compute_uv=True), _args(_u((3, 2), -0.3, 0.3))),
        Case(lambda a: qb_ops.bind("svd", _spread(a), full_matrices=False,
                                   compute_uv=False), _args(_u((2, 3), -0.3, 0.3)), "values"),
    ],
    "qr": [
        Case(lambda a: qb_ops.bind("qr", _spread(a), complete=False),
             _args(_u((3, 2), -0.3, 0.3))),
    ],
    "sort": [  # distinct values: no ties, where the permutation (and derivative) jumps
        Case(lambda x: qb.sort(x, axis=0), _args(_distinct((4, 3))), "columns"),
        Case(lambda x: qb.quantile(x, [0.3, 0.5], axis=1), _args(_distinct((2, 5))),
             "quantiles"),
    ],
}


# -- the elementwise math and special functions of issue 24 -----------------------------------

def _off_whole(shape, low=-3.0, high=3.0, margin=0.1):
    """Values at least ``margin`` from a whole number (no jumps of floor, ceil, remainder)."""
    return lambda rng: np.floor(rng.uniform(low, high, shape)) + rng.uniform(margin, 1 - margin,
                                                                             shape)


def _off_half(shape, low=-3.0, high=3.0):
    """Values at least 0.1 from a half-integer (no jumps of round)."""
    return lambda rng: (np.floor(rng.uniform(low, high, shape)) + rng.uniform(0.1, 0.4, shape)
                        + 0.5 * rng.integers(0, 2, shape))


def _signed(shape, low, high):
    """Magnitudes in [low, high] with random signs."""
    return lambda rng: rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape)


def _quotient_pair(shape):
    """(x, y) with x / y at least 0.1 from a whole number, y of either sign."""
    def make(rng):
        y = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
        return [_off_whole(shape)(rng) * y, y]
    return make


CASES.update({
    "floor": [Case(lambda x: qb.floor(x) * x, _args(_off_whole((2, 3))))],
    "ceil": [Case(lambda x: qb.ceil(x) * x, _args(_off_whole((2, 3))))],
    "round": [
        Case(lambda x: qb.round(x) * x, _args(_off_half((2, 3)))),
        Case(lambda x: qb.round(x * 10.0, 1) + x, _args(_off_half((5,))), "decimals"),
    ],
    "remainder": [
        Case(lambda x, y: x % y, _quotient_pair((2, 3))),
        Case(lambda x: x % 1.5, _args(lambda rng: _off_whole((5,))(rng) * 1.5), "scalar"),
        Case(lambda y: 5.3 % y, _args(lambda rng: 5.3 / _off_whole((5,), 2.0, 6.0)(rng)),
             "rmod"),
    ],
    "floor_divide": [Case(lambda x, y: (x // y) * x + y, _quotient_pair((2, 3)))],
    "tan": [Case(qb.tan, _args(_u((2, 3), -1.2, 1.2)))],
    "asin": [Case(qb.arcsin, _args(_u((2, 3), -0.9, 0.9)))],
    "acos": [Case(qb.arccos, _args(_u((2, 3), -0.9, 0.9)))],
    "atan": [Case(qb.arctan, _args(_u((2, 3), -3, 3)))],
    "atan2": [
        Case(qb.arctan2, _args(_signed((2, 3), 0.2, 1.5), _u((2, 3), -1.5, 1.5))),
        Case(lambda y: qb.arctan2(0.7, y), _args(_u((5,), -1.5, 1.5)), "scalar"),
    ],
    "sinh": [Case(qb.sinh, _args(_u((2, 3), -2, 2)))],
    "cosh": [Case(qb.cosh, _args(_u((2, 3), -2, 2)))],
    "asinh": [Case(qb.arcsinh, _args(_u((2, 3), -3, 3)))],
    "acosh": [Case(qb.arccosh, _args(_u((2, 3), 1.2, 3.0)))],
    "atanh": [Case(qb.arctanh, _args(_u((2, 3), -0.9, 0.9)))],
    "log2": [Case(qb.log2, _args(_u((2, 3), 0.3, 3.0)))],
    "log10": [Case(qb.log10, _args(_u((2, 3), 0.3, 3.0)))],
    "exp2": [Case(qb.exp2, _args(_u((2, 3), -2, 2)))],
    "cbrt": [Case(qb.cbrt, _args(_signed((2, 3), 0.3, 2.0)))],
    "hypot": [Case(qb.hypot, _args(_signed((2, 3), 0.2, 2.0), _u((2, 3), -2, 2)))],
    "erf": [Case(qb.special.erf, _args(_u((2, 3), -2, 2)))],
    "erfc": [Case(qb.special.erfc, _args(_u((2, 3), -2, 2)))],
    "erf_inv": [Case(qb.special.erfinv, _args(_u((2, 3), -0.9, 0.9)))],
    "ndtri": [Case(qb.special.ndtri, _args(_u((2, 3), 0.05, 0.95)))],
    "lgamma": [
        Case(qb.special.gammaln, _args(_u((2, 3), 0.3, 4.0))),
        Case(qb.special.gammaln, _args(_u((4,), -2.8, -2.2)), "negative"),
    ],
    "digamma": [
        Case(qb.special.digamma, _args(_u((2, 3), 0.3, 4.0))),
        Case(qb.special.digamma, _args(_u((4,), -1.8, -1.2)), "negative"),
    ],
    "polygamma": [
        Case(lambda x: qb.special.polygamma(1, x), _args(_u((2, 3), 0.5, 3.0)), "trigamma"),
        Case(lambda x: qb.special.polygamma(2, x), _args(_u((4,), -1.8, -1.2)),
             "n=2 negative"),
    ],
    "xlogy": [Case(qb.special.xlogy, _args(_u((2, 3)), _u((2, 3), 0.3, 2.0)))],
    "xlog1py": [Case(qb.special.xlog1py, _args(_u((2, 3)), _u((2, 3), -0.5, 2.0)))],
})


# -- gather and scatter (issue 24): index arrays, x.at[...] -----------------------------------

def _index_values(shape, low, high):
    """Index values k + 0.25 (rounded down to k: the traced convention), in [low, high): out
    of range, negative and repeated ones among them."""
    return lambda rng: rng.integers(low, high, shape) + 0.25


def _apart(*shapes):
    """Arrays of the given shapes whose values are all at least 0.05 apart (no ties between
    x and the updates of min and max)."""
    def make(rng):
        values = _distinct((sum(int(np.prod(s)) for s in shapes),))(rng)
        out, start = [], 0
        for s in shapes:
            size = int(np.prod(s))
            out.append(values[start:start + size].reshape(s))
            start += size
        return out
    return make


def _with_indices(make, shape, n):
    """``make``'s (x, v) with traced index values for an axis of ``n`` between them."""
    def args(rng):
        x, v = make(rng)
        return [x, _index_values(shape, -n - 1, n + 2)(rng), v]
    return args


def _bind_scatter(mode, batch_dims=0):
    return lambda x, i, v: qb_ops.bind("scatter", x, i, v, batch_dims=batch_dims, mode=mode)


CASES.update({
    "gather": [
        Case(lambda x: x[qb.array([2.0, 0.0, 2.0, -1.0])], _args(_u((3, 2))), "rows"),
        Case(lambda x: x[:, [[1, 0], [2, 1]]], _args(_u((2, 3))), "second axis"),
        Case(lambda x: x[qb.array([0.0, 2.0, 2.0]), qb.array([[1.0], [-1.0]])],
             _args(_u((3, 2, 2))), "two broadcast index arrays"),
        Case(lambda x, i: qb_ops.bind("gather", x, i, batch_dims=1),
             lambda rng: [_u((2, 4, 3))(rng), _index_values((2, 3), -6, 7)(rng)],
             "traced indices, one batch axis"),
    ],
    "scatter": [
        Case(lambda x, v: x.at[qb.array([1.0, 0.0, 1.0])].add(v), _args(_u((3, 2)), _u((3, 2))),
             "add repeated rows"),
        Case(lambda x, v: x.at[[2, 0, 2]].set(v), _args(_u((3, 2)), _u((3, 2))),
             "set repeated rows"),
        Case(lambda x, v: x.at[:, [2, 0]].multiply(v), _args(_u((2, 3)), _u((2, 2))), "mul"),
        Case(lambda x, v: x.at[[1, 0, 1]].min(v), _apart((3, 2), (3, 2)), "min repeated rows"),
        Case(lambda x, v: x.at[[1, 0, 1]].max(v), _apart((3, 2), (3, 2)), "max repeated rows"),
        Case(_bind_scatter("add", 1),
             lambda rng: [_u((2, 3, 2))(rng), _index_values((2, 4), -4, 5)(rng), _u((2, 4, 2))(rng)],
             "traced indices add"),
        Case(_bind_scatter("set"),
             lambda rng: [_u((4, 2))(rng), _index_values((3,), -5, 6)(rng), _u((3, 2))(rng)],
             "traced indices set"),
        Case(_bind_scatter("max", 1), _with_indices(_apart((2, 4), (2, 3)), (2, 3), 4),
             "traced indices max"),
    ],
})

# Regions (multi-result primitives: cond, scan, while) and solvers (primitives with an
# ``expand`` rule) have files of their own: tests/test_control_autodiff.py,
# test_control_vmap.py, test_control_lowering.py and test_solvers.py. ``get`` only projects a
# result of a multi-result node.
def _has_own_tests(prim):
    return prim.multiple_results or prim.expand is not None or prim.name == "get"


# Batching of the primitives without a derivative is checked too (they appear in every graph).
NONDIFF_CASES = {
    "gt": lambda x, y: x > y, "ge": lambda x, y: x >= y, "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y, "eq": qb.equal, "ne": qb.not_equal,
    "isfinite": lambda x, y: qb.isfinite(x / y), "isnan": lambda x, y: qb.isnan(qb.log(x)),
    "and": lambda x, y: (x > 0.0) & (y > 0.0), "or": lambda x, y: (x > 0.0) | (y > 0.0),
    "not": lambda x, y: ~(x > y), "stop_gradient": lambda x, y: qb.stop_gradient(x * y),
    "reduce_or": lambda x, y: qb.any(x > y, axis=1), "reduce_and": lambda x, y: qb.all(x > y, axis=0),
    "isinf": lambda x, y: qb.isinf(x / qb.maximum(y, 0.0)),
}


def _differentiable():
    return sorted(n for n, p in PRIMITIVES.items() if p.differentiable and not _has_own_tests(p))


def _all_cases():
    out = []
    for name in _differentiable():
        for i, case in enumerate(CASES.get(name, [])):
            label = f"{name}-{case.name or i}"
            out.append(pytest.param(name, case, id=label))
    return out


def _data(case, seed=0):
    """The case's arguments, rounded to float32 so both dtypes see the same points exactly."""
    rng = np.random.default_rng(seed)
    return [np.asarray(a, dtype=np.float32).astype(np.float64) for a in case.args(rng)]


def _tensors(arrays, dtype):
    return [qb.array(a, dtype=dtype) for a in arrays]


def _directions(arrays, seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, a.shape).astype(np.float32).astype(np.float64) for a in arrays]


# -- coverage -----------------------------------------------------------------------------------

def test_table_covers_every_differentiable_primitive():
    missing = [n for n in _differentiable() if not CASES.get(n)]
    assert not missing, f"add a Case for the differentiable primitives {missing}"
    stale = sorted(set(CASES) - set(PRIMITIVES))
    assert not stale, f"cases for unknown primitives {stale}"


def test_nondifferentiable_primitives_are_marked_and_covered():
    nondiff = sorted(n for n, p in PRIMITIVES.items()
                     if not p.differentiable and not _has_own_tests(p))
    assert set(nondiff) >= {"gt", "eq", "and", "not", "reduce_or"}
    missing = [n for n in nondiff if n not in NONDIFF_CASES]
    assert not missing, f"add a batching case for the non-differentiable primitives {missing}"


@pytest.mark.parametrize("name, case", _all_cases())
def test_case_reaches_its_primitive(name, case):
    ops = {n.op for n in traced_graph(case.fn, *_tensors(_data(case), qb.float64)).nodes}
    assert name in ops, f"the {name} case traces to {sorted(ops)}"


@pytest.mark.parametrize("name", sorted(NONDIFF_CASES))
def test_nondiff_case_reaches_its_primitive(name):
    x, y = _tensors([np.ones((2, 3)), 2 * np.ones((2, 3))], qb.float64)
    ops = {n.op for n in traced_graph(NONDIFF_CASES[name], x, y).nodes}
    assert name in ops


# -- first order: JVP, VJP, dot-product test ----------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name, case", _all_cases())
def test_jvp_vjp_against_finite_differences(name, case, dtype):
    data = _data(case)
    jac = fd_jacobian(case.reference or case.fn, data)
    primals = _tensors(data, dtype)
    tangents = _tensors(_directions(data, 1), dtype)
    out, tangent_out = qb.jvp(case.fn, tuple(primals), tuple(tangents))
    assert out.dtype is dtype and tangent_out.dtype is dtype
    assert tangent_out.shape == out.shape
    tol = FD_TOL[dtype]
    assert_close(out, case.fn(*_tensors(data, qb.float64)), **tol)
    assert_close(flat(tangent_out), jac @ flat(tangents), **tol, err_msg="JVP")

    out2, pull = qb.vjp(case.fn, *primals)
    assert_close(out2, out, **EXACT_TOL[dtype])
    u = qb.array(np.random.default_rng(2).uniform(-1, 1, out.shape), dtype=dtype)
    cts = pull(u)
    assert isinstance(cts, tuple) and len(cts) == len(primals)
    for ct, p in zip(cts, primals):
        assert ct.shape == p.shape and ct.dtype is dtype
    assert_close(flat(cts), jac.T @ flat(u), **tol, err_msg="VJP")

    # the dot-product test: <u, J v> == <J^T u, v>
    lhs = float(np.dot(flat(u), flat(tangent_out)))
    rhs = float(np.dot(flat(cts), flat(tangents)))
    scale = max(1.0, float(np.abs(flat(u)).sum() * np.abs(flat(tangent_out)).max()))
    rtol = EXACT_TOL[qb.float32 if case.rounds else dtype]["rtol"]
    assert abs(lhs - rhs) <= rtol * 10 * scale, (lhs, rhs)


@pytest.mark.parametrize("name, case", [c for c in _all_cases() if c.values[1].smooth])
def test_second_order_rules(name, case):
    """jvp(grad(<u, f>)) against central differences of grad(<u, f>): the rules' own rules."""
    data = _data(case)
    u = qb.array(np.random.default_rng(3).uniform(-1, 1, np.shape(case.fn(*_tensors(data, qb.float64)))))
    n = len(data)

    def scalar(*xs):
        return qb.sum(case.fn(*xs) * u)

    g = qb.grad(scalar, argnums=tuple(range(n)))
    primals = tuple(_tensors(data, qb.float64))
    v = tuple(_tensors(_directions(data, 4), qb.float64))
    _, hv = qb.jvp(g, primals, v)
    eps = 1e-5
    plus = g(*[p + eps * t for p, t in zip(primals, v)])
    minus = g(*[p - eps * t for p, t in zip(primals, v)])
    expected = (flat(plus) - flat(minus)) / (2 * eps)
    assert_close(flat(hv), expected, rtol=1e-6, atol=1e-7)


# -- batching -----------------------------------------------------------------------------------

def _vmapped(fn, checks, dtype):
    """``vmap(fn, in_axes, out_axes=axis)(*arrays)`` for each ``(arrays, in_axes, axis)`` of
    ``checks``, all staged in one program (one compile instead of one per pattern)."""
    axes = [tuple(None if a is None else axis for a in in_axes) for _, in_axes, axis in checks]

    def every_pattern(*groups):
        return [qb.vmap(fn, in_axes=ax, out_axes=axis)(*group)
                for group, ax, (_, _, axis) in zip(groups, axes, checks)]
    results = qb.jit(every_pattern)(*[_tensors(arrays, dtype) for arrays, _, _ in checks])
    assert len(results) == len(checks)
    return results


def _check_vmap(fn, checks, dtype):
    """For each ``(arrays, in_axes, axis)`` of ``checks``: vmap(fn, in_axes)(*arrays) equals
    stacking fn over the examples; mapped arrays hold the examples along ``axis`` (given as
    in_axes and out_axes, so negative axes are covered too)."""
    for result, (arrays, in_axes, axis) in zip(_vmapped(fn, checks, dtype), checks):
        axes = tuple(None if a is None else axis for a in in_axes)
        size = next(a.shape[axis] for a, ax in zip(arrays, axes) if ax is not None)
        rows = []
        for b in range(size):
            example = [np.take(a, b, axis=axis) if ax is not None else a
                       for a, ax in zip(arrays, axes)]
            rows.append(np.asarray(fn(*_tensors(example, dtype))))
        expected = np.stack(rows, axis=axis)
        assert result.dtype is qb.asarray(rows[0]).dtype
        assert tuple(result.shape) == expected.shape
        if expected.dtype == np.bool_:
            np.testing.assert_array_equal(np.asarray(result), expected)
        else:
            assert_close(result, expected, **EXACT_TOL[dtype])


def _in_axes_patterns(n):
    """Every argument mapped, then each argument mapped alone (the others shared)."""
    yield (0,) * n
    if n > 1:
        for k in range(n):
            yield tuple(0 if i == k else None for i in range(n))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name, case", _all_cases())
def test_batching(name, case, dtype):
    examples = [_data(case, seed) for seed in range(3)]
    n = len(examples[0])
    checks = []
    for in_axes in _in_axes_patterns(n):
        arrays = [np.stack([ex[k] for ex in examples]) if ax == 0 else examples[0][k]
                  for k, ax in enumerate(in_axes)]
        checks.append((arrays, in_axes, 0))
    # the batch axis last, as in_axes=-1 and out_axes=-1
    arrays = [np.stack([ex[k] for ex in examples], axis=-1) for k in range(n)]
    checks.append((arrays, (0,) * n, -1))
    _check_vmap(case.fn, checks, dtype)


@pytest.mark.parametrize("name, case", _all_cases())
def test_batching_of_derivatives(name, case):
    """Per-example gradients: vmap(grad(<u, f>)) equals the stacked gradients."""
    examples = [_data(case, seed) for seed in range(3)]
    n = len(examples[0])
    u = qb.array(np.random.default_rng(6).uniform(
        -1, 1, np.shape(case.fn(*_tensors(examples[0], qb.float64)))))
    g = qb.grad(lambda *xs: qb.sum(case.fn(*xs) * u), argnums=tuple(range(n)))
    checks = []
    for in_axes in _in_axes_patterns(n):
        arrays = [np.stack([ex[k] for ex in examples]) if ax == 0 else examples[0][k]
                  for k, ax in enumerate(in_axes)]
        checks.append((arrays, in_axes, 0))
    for result, (arrays, in_axes, _) in zip(_vmapped(g, checks, qb.float64), checks):
        for b in range(3):
            example = [a[b] if ax == 0 else a for a, ax in zip(arrays, in_axes)]
            expected = g(*_tensors(example, qb.float64))
            assert_close(flat([r[b] for r in result]), flat(expected), **EXACT_TOL[qb.float64])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(NONDIFF_CASES))
def test_batching_nondifferentiable(name, dtype):
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (3, 2, 3))
    y = rng.uniform(-1, 1, (3, 2, 3))
    x[0, 0, 0] = y[0, 0, 0]  # a tie, so eq/ne/ge/le see both outcomes
    _check_vmap(NONDIFF_CASES[name], [([x, y], (0, 0), 0), ([x, y[0]], (0, None), 0)], dtype)


@pytest.mark.parametrize("in_axes", [(0, 0), (0, None), (None, 0)])
def test_vmap_of_solve_binds_one_batched_solve(in_axes):
    """A mapped solve or cholesky (rejected before, spec 000 "S4 as landed") is one primitive
    over the stack, the unmapped operand broadcast: no per-example unrolling."""
    rng = np.random.default_rng(8)
    a = _square(3, (4,))(rng)
    b = rng.uniform(-1, 1, (4, 3))
    args = [x if ax == 0 else x[0] for x, ax in zip((a, b), in_axes)]
    graph = staged_graph(qb.vmap(qb.solve, in_axes=in_axes), *_tensors(args, qb.float64))
    solves = [n for n in graph.nodes if n.op == "solve"]
    assert len(solves) == 1 and tuple(solves[0].shape) == (4, 3)
    graph = staged_graph(qb.vmap(_spd_cholesky), qb.array(a))
    assert [tuple(n.shape) for n in graph.nodes if n.op == "cholesky"] == [(4, 3, 3)]


# -- pow at its singular points (spec 000 §3.2, slice S1b) --------------------------------------

def _grad_x(y):
    return qb.grad(lambda x: qb.power(x, y))


def _grad_y(x):
    return qb.grad(lambda y: qb.power(x, y))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("y", [0.5, 0.0, -0.5, 0.999])
def test_pow_base_gradient_is_zero_at_zero_for_y_below_one(y, dtype):
    x0 = qb.array(0.0, dtype=dtype)
    g = _grad_x(qb.array(y, dtype=dtype))(x0)
    assert g.dtype is dtype and float(g) == 0.0
    assert np.isfinite(float(qb.grad(_grad_x(qb.array(y, dtype=dtype)))(x0)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pow_half_agrees_with_sqrt_at_the_origin(dtype):
    """Spec §3.2: the zero subgradient of sqrt at the origin, so pow(x, 0.5) and sqrt agree."""
    for x in (0.0, 4.0):
        xx = qb.array(x, dtype=dtype)
        for derivative in (qb.grad, lambda f: qb.grad(qb.grad(f))):
            a = derivative(qb.sqrt)(xx)
            b = derivative(lambda t: t ** 0.5)(xx)
            assert a.dtype is dtype and float(a) == float(b), (x, float(a), float(b))
    assert float(qb.grad(qb.sqrt)(qb.array(0.0))) == 0.0
    assert float(qb.grad(qb.sqrt)(qb.array(4.0))) == 0.25
    assert np.asarray(qb.grad(qb.norm)(qb.zeros(2))).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("y, first, second", [
    (1.0, 1.0, 0.0), (2.0, 0.0, 2.0), (3.0, 0.0, 0.0), (1.5, 0.0, 0.0), (2.5, 0.0, 0.0),
])
def test_pow_base_gradient_keeps_the_finite_limit_for_y_at_least_one(y, first, second, dtype):
    x0 = qb.array(0.0, dtype=dtype)
    yy = qb.array(y, dtype=dtype)
    assert float(_grad_x(yy)(x0)) == first
    assert float(qb.grad(_grad_x(yy))(x0)) == second
    _, hvp = qb.jvp(_grad_x(yy), (x0,), (qb.array(1.0, dtype=dtype),))
    assert float(hvp) == second


def test_x_squared_float_has_second_derivative_two_at_zero():
    f = lambda x: x ** 2.0
    x0 = qb.array(0.0)
    assert float(qb.grad(f)(x0)) == 0.0
    assert float(qb.grad(qb.grad(f))(x0)) == 2.0
    assert float(qb.jvp(qb.grad(f), (x0,), (qb.array(1.0),))[1]) == 2.0
    # and the same with a Python float argument (a float64 array in a differentiated position)
    assert float(qb.grad(qb.grad(f))(0.0)) == 2.0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("x", [0.0, -1.0, -2.5])
@pytest.mark.parametrize("y", [0.5, 1.0, 2.0, 3.0])
def test_pow_exponent_gradient_is_zero_for_nonpositive_base(x, y, dtype):
    xx, yy = qb.array(x, dtype=dtype), qb.array(y, dtype=dtype)
    g = _grad_y(xx)(yy)
    assert g.dtype is dtype and float(g) == 0.0
    assert float(qb.grad(_grad_y(xx))(yy)) == 0.0
    assert float(qb.jvp(_grad_y(xx), (yy,), (qb.array(1.0, dtype=dtype),))[1]) == 0.0


@pytest.mark.parametrize("x, y", [(0.0, 0.5), (0.0, 2.0), (0.0, 0.0), (-2.0, 2.0), (-2.0, 3.0),
                                  (0.0, 1.0), (-1.0, 0.5)])
def test_pow_hessian_is_finite_at_singular_points(x, y):
    """Where the value is finite, every second partial is finite (grad(grad) and jvp(grad))."""
    args = (qb.array(x), qb.array(y))
    value = float(qb.power(*args))
    f = lambda a, b: qb.power(a, b)
    g = qb.grad(f, argnums=(0, 1))
    for i in range(2):
        for j in range(2):
            h = qb.grad(lambda a, b: qb.grad(f, argnums=i)(a, b), argnums=j)(*args)
            if math.isfinite(value):
                assert math.isfinite(float(h)), (i, j, float(h))
    for t in [(1.0, 0.0), (0.0, 1.0), (1.0, 1.0)]:
        _, hv = qb.jvp(g, args, tuple(qb.array(c) for c in t))
        if math.isfinite(value):
            assert all(math.isfinite(float(c)) for c in hv), (t, hv)


def test_pow_value_conventions():
    """NaN for a negative base and non-integer exponent; 0 ** 0 == 1; integer floats exact."""
    assert math.isnan(float(qb.power(qb.array(-2.0), qb.array(0.5))))
    assert float(qb.power(qb.array(0.0), qb.array(0.0))) == 1.0
    assert float(qb.power(qb.array(-2.0), qb.array(3.0))) == -8.0
    traced = qb.jit(lambda x, y: x ** y)
    assert math.isnan(float(traced(qb.array(-2.0), qb.array(0.5))))
    assert float(traced(qb.array(0.0), qb.array(0.0))) == 1.0


def test_pow_gradients_away_from_singularities():
    x, y = 1.7, 2.3
    gx, gy = qb.grad(lambda a, b: a ** b, argnums=(0, 1))(qb.array(x), qb.array(y))
    assert_close(gx, y * x ** (y - 1))
    assert_close(gy, x ** y * math.log(x))
    # negative base, integer exponent: base gradient y x^(y-1), exponent gradient 0
    gx, gy = qb.grad(lambda a, b: a ** b, argnums=(0, 1))(qb.array(-2.0), qb.array(3.0))
    assert float(gx) == 12.0 and float(gy) == 0.0


def test_integer_pow_uses_its_own_primitive():
    """x ** 3 (a non-negative Python int) is integer_pow; 3.0, -1 and tensors are pow."""
    x = qb.array(1.5)
    assert "integer_pow" in {n.op for n in traced_graph(lambda a: a ** 3, x).nodes}
    for f in (lambda a: a ** 3.0, lambda a: a ** -1, lambda a: a ** a):
        ops = {n.op for n in traced_graph(f, x).nodes}
        assert "pow" in ops and "integer_pow" not in ops
    assert_close(qb.grad(lambda a: a ** -1)(x), -1 / 1.5 ** 2)
    assert float(qb.grad(qb.grad(lambda a: a ** 0))(x)) == 0.0
