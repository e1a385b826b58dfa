"""einsum as NumPy spells it: repeated indices (diagonals), ellipses that broadcast across
operands of different ranks, axes of size 1 that broadcast, implicit outputs. Values against
np.einsum, gradients against finite differences, vmap against stacking, one compiled program
against eager values, and NumPy's ValueErrors for bad subscripts."""

import numpy as np
import pytest

import quabla as qb
from quabla.core.interpret import evaluate

from helpers import assert_close, fd_jacobian, np64, staged_graph

SPELLINGS = [
    ("ii->", (3, 3)),
    ("ii->i", (3, 3)),
    ("ii", (3, 3)),
    ("iij->j", (2, 2, 4)),
    ("iji->ij", (3, 2, 3)),
    ("iii->i", (2, 2, 2)),
    ("ij,jj->i", (2, 3), (3, 3)),
    ("ii,jj->ij", (2, 2), (3, 3)),
    ("...ij,...jk->...ik", (4, 1, 2, 3), (5, 3, 2)),
    ("...i,...i->...", (2, 3), (3,)),
    ("...ii->...i", (2, 3, 3)),
    ("i...i", (3, 2, 3)),
    ("...", (2, 3)),
    ("...ij->...ji", (2, 2, 3)),
    ("ij...,jk...->ik...", (2, 3, 4), (3, 2, 1)),
    ("a...,a...->...", (1, 3), (2, 1)),
    ("i,i", (1,), (3,)),
    ("ij,j->i", (2, 1), (3,)),
    ("bA", (2, 3)),
    ("i,j", (2,), (3,)),
    ("ij,jk,kl->il", (2, 3), (3, 4), (4, 2)),
    ("i->...", (2,)),
    (" ij -> ji ", (2, 3)),
]
CASES = [pytest.param(s, shapes, id=s.strip()) for s, *shapes in SPELLINGS]


def _operands(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, shape) for shape in shapes]


@pytest.fixture
def interpret(monkeypatch):
    """Transformed programs run on the reference interpreter: no compile per spelling."""
    monkeypatch.setenv("QUABLA_BACKEND", "interpret")


@pytest.mark.parametrize("dtype", [qb.float64, qb.float32])
@pytest.mark.parametrize("subscripts, shapes", CASES)
def test_values_match_numpy(subscripts, shapes, dtype):
    xs = [x.astype(dtype.numpy) for x in _operands(shapes)]
    got = qb.einsum(subscripts, *[qb.array(x, dtype=dtype) for x in xs])
    expected = np.einsum(subscripts, *xs)
    assert got.dtype is dtype and got.shape == expected.shape
    tol = 1e-12 if dtype is qb.float64 else 1e-5
    assert_close(got, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("subscripts, shapes", CASES)
def test_gradients_match_finite_differences(interpret, subscripts, shapes):
    xs = _operands(shapes)
    weights = qb.array(np.random.default_rng(1).uniform(-1, 1, np.einsum(subscripts, *xs).shape))
    loss = lambda *ops: qb.sum(qb.einsum(subscripts, *ops) * weights)
    grads = qb.grad(loss, argnums=tuple(range(len(xs))))(*[qb.array(x) for x in xs])
    expected = fd_jacobian(loss, xs)[0]
    got = np.concatenate([np64(g).reshape(-1) for g in grads])
    assert_close(got, expected, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("subscripts, shapes", CASES)
def test_vmap_matches_stacking(interpret, subscripts, shapes):
    xs = [qb.array(x) for x in _operands(shapes)]
    stacked = qb.array(np.random.default_rng(2).uniform(-1, 1, (3,) + tuple(shapes[0])))
    f = lambda first, *rest: qb.einsum(subscripts, first, *rest)
    batched = qb.vmap(f, in_axes=(0,) + (None,) * (len(xs) - 1))(stacked, *xs[1:])
    single = qb.stack([f(stacked[k], *xs[1:]) for k in range(3)])
    assert_close(batched, single, rtol=1e-13, atol=1e-13)
    if len(xs) > 1:  # every operand mapped
        others = [qb.stack([x * (k + 1.0) for k in range(3)]) for x in xs[1:]]
        batched = qb.vmap(f)(stacked, *others)
        single = qb.stack([f(stacked[k], *[o[k] for o in others]) for k in range(3)])
        assert_close(batched, single, rtol=1e-13, atol=1e-13)


def test_one_compiled_program_matches_eager():
    """Every spelling in one jitted function (one compile), and the gradient of their sum."""
    operands = [[qb.array(x) for x in _operands(shapes, seed=k)]
                for k, (_, *shapes) in enumerate(SPELLINGS)]

    def every(ops):
        return [qb.einsum(s, *o) for (s, *_), o in zip(SPELLINGS, ops)]

    for compiled, eager in zip(qb.jit(every)(operands), every(operands)):
        assert_close(compiled, eager, rtol=1e-13, atol=1e-13)
    grad = qb.jit(qb.grad(lambda ops: sum(qb.sum(qb.sin(r)) for r in every(ops))))
    leaves = [x.numpy() for o in operands for x in o]
    interpreted = evaluate(staged_graph(grad, operands), leaves)
    for compiled, reference in zip(qb.tree.flatten(grad(operands))[0], interpreted):
        assert_close(compiled, reference, rtol=1e-13, atol=1e-13)


def test_trace_is_a_strided_slice_of_existing_primitives():
    graph = staged_graph(qb.jit(lambda a: qb.einsum("ii->i", a)), qb.ones((4, 4)))
    ops = {n.op for n in graph.nodes} - {"input"}
    assert ops <= {"reshape", "slice", "transpose"}, ops
    hess = qb.hessian(lambda a: qb.einsum("ii->", a) ** 2)(qb.array(np.arange(4.0).reshape(2, 2)))
    assert_close(hess, 2.0 * np.einsum("ij,kl->ijkl", np.eye(2), np.eye(2)))


@pytest.mark.parametrize("subscripts, shapes", [
    ("i.j", [(2, 3)]),            # a '.' outside an ellipsis
    ("i....j", [(2, 3)]),
    ("i1", [(3, 3)]),             # not a letter
    ("ij->i->j", [(3, 2)]),       # two arrows
    ("ii", [(3, 2)]),             # a repeated index over axes of different sizes
    ("...i->i", [(2, 3)]),        # ellipsis axes the output drops
    ("i,i->ii", [(3,), (3,)]),    # a repeated output index
    ("i->j", [(3,)]),             # an output index no input has
    ("i,i", [(3,), (4,)]),        # sizes that do not broadcast
    ("i", [(2, 3)]),              # too few indices for the rank
    ("ijk", [(2, 3)]),            # too many
    ("i,i", [(3,)]),              # more terms than operands
    ("i", [(3,), (3,)]),          # more operands than terms
])
def test_bad_subscripts_raise_value_error_as_numpy(subscripts, shapes):
    arrays = [np.ones(s) for s in shapes]
    with pytest.raises(ValueError):
        np.einsum(subscripts, *arrays)
    with pytest.raises(ValueError, match="einsum"):
        qb.einsum(subscripts, *[qb.array(a) for a in arrays])


def test_subscripts_must_be_a_string_and_operands_given():
    with pytest.raises(TypeError, match="einsum"):
        qb.einsum(["i"], qb.ones(2))
    with pytest.raises(ValueError, match="einsum"):
        qb.einsum("i")


def test_products_with_a_scalar_are_multiplies_in_every_rule():
    """A full contraction's cotangent is a scalar; the VJP's products with it used to reach
    the Numba back end as rank-0 dot_generals and read a freed temporary (wrong gradients)."""
    from quabla.ops import dot_general

    def f(a, b, c, d):
        x = dot_general(qb.reshape(a, (3,)), qb.sum(b), ((), ()))
        y = dot_general(qb.reshape(c, (2,)), qb.sum(d), ((), ()))
        return qb.sum(qb.sin(x)) + qb.sum(qb.sin(y)) + qb.einsum("ij,ij->", a, a)

    args = [qb.array([[0.3, -0.2, 0.5]]), qb.array([[0.7], [0.1]]), qb.array([[0.2], [0.9]]),
            qb.array([0.4, -0.3, 0.6])]
    grad = qb.grad(f, argnums=(0, 1, 2, 3))
    compiled = qb.jit(grad)(*args)
    a, sb = np.asarray(args[0])[0], 0.8
    np.testing.assert_allclose(np.asarray(compiled[0])[0], np.cos(a * sb) * sb + 2 * a,
                               rtol=1e-13)
    for got, want in zip(compiled, grad(*args)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-13)
