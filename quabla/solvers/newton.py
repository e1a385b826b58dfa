"""``newton``: roots of square systems ``f(x, *args) = 0`` by Newton's method.

One primitive, operands ``(x0, *consts)``, params ``f: (x, *consts) -> f(x)`` as a sub-graph.
Each step solves with the dense Jacobian (the JVP of ``f`` batched over basis vectors, per lane),
written once for NumPy (the reference) and for the ``expand`` rule (a ``while_loop``).
Derivatives come from the implicit function theorem at the root ``x*``: ``x' = -J⁻¹ f_θ θ'``,
and the cotangents of the consts are ``-f_θᵀ J⁻ᵀ x̄``; ``x0`` gets none.
"""

import numpy as np

from .. import ops
from ..array import Tensor
from ..core.primitives import Primitive, Zero, is_zero, register
from ..core.tracing import bind
from ..dtypes import float32, float64
from ..transforms.jvp import jvp_graph
from .common import (NUMPY, TRACED, ConvergenceError, Flat, apply_jvp, apply_vjp, batch_sub,
                     failure_info, graph_of, lead, nan_unless, operator_graph)

__all__ = ["newton"]


def _jacobian_graph(f, nbatch):
    """``(x, *consts) -> J``: the Jacobian of each lane, [*batch, n, n] (n: a lane's size)."""
    shape = f.in_avals[0][0]
    lane = shape[nbatch:]
    n = int(np.prod(lane, dtype=np.int64))
    k = len(f.inputs)
    columns = batch_sub(jvp_graph(f, [True] + [False] * (k - 1)), [False] * k + [True], n)
    basis = np.eye(n).reshape((n,) + (1,) * nbatch + lane)
    batch = tuple(shape[:nbatch])

    def jac(x, *consts):
        e = ops.astype(ops.broadcast_to(Tensor.wrap(basis, False), (n,) + tuple(shape)), x.dtype)
        cols = TRACED.apply(columns, x, *consts, e)[1]  # [n, *shape]: column j is J e_j
        return [TRACED.first_to_last(ops.reshape(cols, (n,) + batch + (n,)))]

    return graph_of(jac, f)


def _flat(x, nbatch):
    return x.reshape(tuple(x.shape[:nbatch]) + (-1,)) if isinstance(x, np.ndarray) else \
        ops.reshape(x, tuple(x.shape[:nbatch]) + (int(np.prod(x.shape[nbatch:], dtype=np.int64)),))


def _newton(xp, x0, consts, *, f, tol, maxiter, nbatch):
    """Newton steps per lane until ``max|f(x)| <= tol`` or the step is at most
    ``tol (1 + max|x|)``; a lane that reaches ``maxiter`` steps (or NaN) is not converged: its
    info is the steps it took, at least 1."""
    jac = _jacobian_graph(f, nbatch)
    batch = tuple(x0.shape[:nbatch])

    def fun(x):
        return xp.apply(f, x, *consts)[0]

    def size(v):
        return xp.lane_max(xp.abs(v), nbatch)

    def active(state):
        x, fx, k, small = state
        return xp.logical_and(xp.logical_and(size(fx) > tol, small < 0.5), k < maxiter)

    def step(state):
        x, fx, k, small = state
        on = active(state)
        dx = xp.reshape(xp.solve(xp.apply(jac, x, *consts)[0], -_flat(fx, nbatch)), x.shape)
        x1 = x + dx
        new = (x1, fun(x1), k + 1.0, xp.where(size(dx) <= tol * (1.0 + size(x1)), 1.0, 0.0))
        return tuple(xp.where(on, n, o) for n, o in zip(new, state))

    lanes = batch + (1,) * (len(x0.shape) - nbatch)
    zero = xp.const(np.zeros(lanes))
    x, fx, k, small = xp.while_loop(active, step, (x0, fun(x0), zero, zero))
    residual = size(fx)
    info = failure_info(xp, xp.where(residual <= tol, 1.0, small) > 0.5, k)
    return [x, xp.reshape(info, batch), xp.reshape(residual, batch)]


def _shape(x0, *consts, nbatch, **params):
    batch = tuple(x0.shape[:nbatch])
    return [(tuple(x0.shape), x0.dtype, False), (batch, float64, False),
            (batch, x0.dtype, False)]


def _impl(x0, *consts, **params):
    return _newton(NUMPY, x0, consts, **params)


def _expand(x0, *consts, **params):
    return _newton(TRACED, x0, consts, **params)


def _jacobian_at(x, consts, f, nbatch):
    return TRACED.apply(_jacobian_graph(f, nbatch), x, *consts)[0]


def _jvp(primals, tangents, outs, *, f, nbatch, **params):
    x0, *consts = primals
    x = outs[0]
    zeros = [Zero(o.shape, o.dtype) for o in outs[1:]]
    df = apply_jvp(f, [x, *consts], [None, *tangents[1:]])[0]
    if is_zero(df):
        return [Zero(x.shape, x.dtype)] + zeros
    dx = TRACED.solve(_jacobian_at(x, consts, f, nbatch), ops.negative(_flat(df, nbatch)))
    return [ops.reshape(dx, tuple(x.shape))] + zeros


def _vjp(cts, primals, outs, *, f, nbatch, **params):
    x0, *consts = primals
    x = outs[0]
    if is_zero(cts[0]):
        return [None] * len(primals)
    jac = _jacobian_at(x, consts, f, nbatch)
    jt = ops.transpose(jac, tuple(range(nbatch)) + (nbatch + 1, nbatch))
    u = ops.reshape(TRACED.solve(jt, _flat(cts[0], nbatch)), tuple(x.shape))
    wrt = [1 + k for k, c in enumerate(consts) if c.dtype.is_floating]
    grads = dict(zip(wrt, apply_vjp(f, [x, *consts], [ops.negative(u)], wrt)))
    return [None] + [grads.get(1 + k) for k in range(len(consts))]


def _batch(args, batched, size, *, f, nbatch, **params):
    x0 = args[0] if batched[0] else lead(args[0], size)
    outs = bind("newton", x0, *args[1:], f=batch_sub(f, [True] + list(batched[1:]), size),
                nbatch=nbatch + 1, **params)
    return outs, [True, True, True]


register(Primitive("newton", shape_rule=_shape, impl=_impl, jvp=_jvp, vjp=_vjp, batch=_batch,
                   multiple_results=True, foldable=False, expand=_expand))


# the default ``tol`` per dtype of ``x0``: float32's rounding never gets residuals or steps to
# 1e-10, and 1e-5 (about 80 float32 epsilons) stays above the noise of a float32 solve
DEFAULT_TOL = {float64: 1e-10, float32: 1e-5}


def newton(f, x0, *args, tol=None, maxiter=50, return_info=False):
    """A root of ``f(x, *args) = 0`` by Newton's method from ``x0``, with the dense Jacobian:
    ``x`` is an array or a pytree of arrays, and ``f(x)`` has its structure, shapes and dtypes
    (a pytree is solved as one vector of all its leaves). Converged when ``max|f(x)| <= tol``
    or a step is at most ``tol (1 + max|x|)``; ``tol`` defaults to 1e-10 for float64 and 1e-5
    when a leaf of ``x0`` is float32.

    Not converging within ``maxiter`` steps (or a singular Jacobian) is never silent: called
    eagerly it raises ``ConvergenceError`` with the steps taken and the residual; inside a
    transform (``jit``, ``grad``, ...) the result is NaN, and so are its derivatives.
    ``return_info=True`` returns ``(x, info)`` instead (``info`` 0 when converged, else the
    steps taken, at least 1), for a caller that checks it itself. Derivatives with respect to
    ``args`` and closed-over arrays come from the implicit function theorem (one solve with the
    Jacobian at the root); ``x0`` has none."""
    start = Flat(x0, "newton's x0")
    if tol is None:  # the loosest of the leaves': a float32 leaf rounds f(x) at float32's
        tol = max(DEFAULT_TOL[dtype] for _, dtype in start.avals)
    if int(maxiter) < 1 or float(tol) < 0:
        raise ValueError(f"newton: maxiter must be >= 1 and tol >= 0, got {maxiter}, {tol}")
    graph, consts, _ = operator_graph(start.function(f, "newton's f"), start.array, args,
                                      "newton's f")
    x, info, residual = bind("newton", start.array, *consts, f=graph, tol=float(tol),
                             maxiter=int(maxiter), nbatch=0)
    if return_info:
        return start.unflat(x), info
    if isinstance(info, Tensor):
        if float(np.asarray(info)) != 0:
            r = float(np.asarray(residual))
            why = (f"max|f(x)| = {r:.3e} > tol={tol}" if r == r else
                   "f(x) is NaN (a singular Jacobian or f undefined there)")
            raise ConvergenceError(f"newton did not converge: after {int(np.asarray(info))} "
                                   f"steps (maxiter={maxiter}) {why}")
        return start.unflat(x)
    return start.unflat(nan_unless(ops.equal(info, 0.0), x))
