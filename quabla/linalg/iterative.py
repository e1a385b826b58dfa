"""Krylov solvers: ``cg`` and ``gmres``, matrix-free, differentiated implicitly.

Each is one primitive with operands ``(b, x0, *consts)`` whose params hold the operator as a
sub-graph ``matvec: (x, *consts[:n_mv]) -> A x`` and the preconditioner ``precond: (x,
*consts[n_mv:]) -> M x``. The iteration is written once (``quabla.solvers.common``): in NumPy it
is the reference, traced it is the ``expand`` rule (a ``while_loop`` region) that back ends
compile. Derivatives never go through the iterations: the tangent ``x'`` solves
``A x' = b' - A'(x)``; the cotangent of ``b`` is the solution ``u`` of ``A^T u = x̄`` (a second
solve with the transposed operator: ``A`` itself for ``cg``, the matvec's VJP for ``gmres``),
and that of the operator's parameters is ``-u`` pulled back through the matvec at ``x``.
The operator must be linear in ``x``; the preconditioner is treated as constant.
"""

import numpy as np

from .. import ops
from ..array import Array
from ..core.primitives import Primitive, Zero, is_zero, register
from ..core.tracing import bind
from ..dtypes import float64
from ..solvers.common import (NUMPY, TRACED, Flat, apply_jvp, apply_vjp, as_float_array,
                              batch_sub, failure_info, graph_of, lead, operator_graph)

__all__ = ["cg", "gmres"]


# -- the iterations ---------------------------------------------------------------------------

def _lanes(b, nbatch):
    """The shape of a per-lane scalar: the batch axes, then size 1 for each axis of a lane."""
    return tuple(b.shape[:nbatch]) + (1,) * (len(b.shape) - nbatch)


def _operators(xp, consts, matvec, precond, n_mv):
    return (lambda v: xp.apply(matvec, v, *consts[:n_mv])[0],
            lambda v: xp.apply(precond, v, *consts[n_mv:])[0])


def _cg(xp, b, x0, consts, *, matvec, precond, n_mv, tol, atol, maxiter, nbatch):
    """Preconditioned conjugate gradients; a lane stops once ``|r|² <= max(tol² |b|², atol²)``."""
    A, M = _operators(xp, consts, matvec, precond, n_mv)

    def dot(u, v):
        return xp.lane_sum(u * v, nbatch)

    bound = xp.maximum(dot(b, b) * tol ** 2, atol ** 2)

    def active(state):
        _, r, _, _, _, k = state
        return xp.logical_and(dot(r, r) > bound, k < maxiter)

    def step(state):
        x, r, z, p, gamma, k = state
        on = active(state)
        ap = A(p)
        alpha = gamma / dot(p, ap)
        r1 = r - alpha * ap
        z1 = M(r1)
        gamma1 = dot(r1, z1)
        new = (x + alpha * p, r1, z1, z1 + (gamma1 / gamma) * p, gamma1)
        return tuple(xp.where(on, n, o) for n, o in zip(new, state)) + (k + xp.where(on, 1.0, 0.0),)

    r = b - A(x0)
    z = M(r)
    k0 = xp.const(np.zeros(_lanes(b, nbatch)))
    x, r, *_, k = xp.while_loop(active, step, (x0, r, z, z, dot(r, z), k0))
    return [x, xp.reshape(failure_info(xp, dot(r, r) <= bound, k), tuple(b.shape[:nbatch]))]


def _gmres(xp, b, x0, consts, *, matvec, precond, n_mv, tol, atol, restart, maxiter, nbatch):
    """Restarted GMRES, left-preconditioned (it minimises ``|M(b - A x)|``): Arnoldi with
    classical Gram-Schmidt applied twice, Givens rotations for the residual estimate, and an
    early exit of a cycle once every lane meets ``max(tol |M b|, atol)``. ``maxiter`` counts
    restart cycles, as in JAX."""
    A, M = _operators(xp, consts, matvec, precond, n_mv)
    m, lanes = restart, _lanes(b, nbatch)
    ones = (1,) * len(lanes)

    def norm(v):
        return xp.sqrt(xp.lane_sum(v * v, nbatch))

    def residual(x):
        return M(b - A(x))

    bound = xp.maximum(norm(M(b)) * tol, atol)
    eye = xp.const(np.eye(m).reshape((m, m) + ones))
    index = xp.const(np.arange(m, dtype=float).reshape((m,) + ones))

    def arnoldi(state, on_cycle):
        j, V, R, g, cs, sn, ncols = state
        on = xp.logical_and(on_cycle, xp.abs(xp.row(g, j)) > bound)
        w = M(A(xp.row(V, j)))
        h = 0.0
        for _ in range(2):  # CGS2: a second pass restores orthogonality
            hk = xp.lane_sum(V * w, nbatch + 1)
            w = w - xp.sum0(hk * V)
            h = h + hk
        hn = norm(w)
        col = xp.set_row(h, j + 1, hn)

        def rotate(i, col):  # the rotations of the earlier columns
            a, c = xp.row(col, i), xp.row(col, i + 1)
            ci, si = xp.row(cs, i), xp.row(sn, i)
            rotated = xp.set_row(xp.set_row(col, i, ci * a + si * c), i + 1, ci * c - si * a)
            return xp.where(i < j, rotated, col)

        col = xp.fori_loop(0, m, rotate, col)
        a, c = xp.row(col, j), xp.row(col, j + 1)
        rr = xp.sqrt(a * a + c * c)
        safe = xp.where(rr > 0, rr, 1.0)
        cj, sj = xp.where(rr > 0, a / safe, 1.0), c / safe
        col = xp.set_row(xp.set_row(col, j, rr), j + 1, 0.0 * rr)
        gj = xp.row(g, j)
        new = (xp.set_row(V, j + 1, xp.where(hn > 0, w / xp.where(hn > 0, hn, 1.0), 0.0)),
               xp.set_row(R, j, col[:m]),
               xp.set_row(xp.set_row(g, j, cj * gj), j + 1, -sj * gj),
               xp.set_row(cs, j, cj), xp.set_row(sn, j, sj), ncols + 1.0)
        return (j + 1.0,) + tuple(xp.where(on, n, o) for n, o in zip(new, state[1:]))

    def cycle(x, on_cycle):
        r = residual(x)
        beta = norm(r)
        v0 = xp.where(beta > 0, r / xp.where(beta > 0, beta, 1.0), 0.0)
        zeros = xp.zeros((m,) + lanes, b)
        V = xp.set_row(xp.zeros((m + 1,) + tuple(b.shape), b), 0, v0)
        g = xp.set_row(xp.zeros((m + 1,) + lanes, b), 0, beta)
        state = (xp.const(np.float64(0.0)), V, xp.zeros((m, m) + lanes, b), g, zeros, zeros,
                 xp.zeros(lanes, b))

        def more(s):
            j, _, _, g, *_ = s
            return xp.logical_and(j < m, xp.logical_and(on_cycle, xp.abs(xp.row(g, j)) > bound))

        _, V, R, g, _, _, ncols = xp.while_loop(more, lambda s: arnoldi(s, on_cycle), state)
        R = xp.where(xp.reshape(index, (m, 1) + ones) >= ncols, eye, R)  # unused columns: e_j
        g = xp.where(index < ncols, g[:m], 0.0)
        Rt = xp.swap01(R)  # Rt[i][k] = R_{i,k}

        def back(k, y):  # back substitution, last row first
            i = (m - 1) - k
            row = xp.row(Rt, i)
            yi = (xp.row(g, i) - xp.sum0(row * y)) / xp.row(xp.row(R, i), i)
            return xp.set_row(y, i, yi)

        y = xp.fori_loop(0, m, back, zeros)
        return x + xp.sum0(y * V[:m])

    def active(state):
        x, k, res = state
        return xp.logical_and(res > bound, k < maxiter)

    def step(state):
        x, k, res = state
        on = active(state)
        x1 = xp.where(on, cycle(x, on), x)
        return x1, k + xp.where(on, 1.0, 0.0), norm(residual(x1))

    k0 = xp.const(np.zeros(lanes))
    x, k, res = xp.while_loop(active, step, (x0, k0, norm(residual(x0))))
    return [x, xp.reshape(failure_info(xp, res <= bound, k), tuple(b.shape[:nbatch]))]


# -- the rule tables ----------------------------------------------------------------------------

def _transposed(graph):
    """``(u, *consts) -> A^T u`` for a linear ``graph: (x, *consts) -> A x``: its VJP at 0."""
    def fun(u, *consts):
        return apply_vjp(graph, [ops.multiply(u, 0.0), *consts], [u], [0])
    return graph_of(fun, graph)


def _linear_solver(name, iterate, symmetric):
    def shape_rule(b, x0, *consts, nbatch, **params):
        return [(tuple(b.shape), b.dtype, False), (tuple(b.shape[:nbatch]), float64, False)]

    def impl(b, x0, *consts, **params):
        return iterate(NUMPY, b, x0, consts, **params)

    def expand(b, x0, *consts, **params):
        return iterate(TRACED, b, x0, consts, **params)

    def jvp(primals, tangents, outs, *, matvec, n_mv, **params):
        b, x0, *consts = primals
        x, info = outs
        da = apply_jvp(matvec, [x, *consts[:n_mv]], [None, *tangents[2:2 + n_mv]])[0]
        rhs = tangents[0]
        if not is_zero(da):
            rhs = ops.negative(da) if is_zero(rhs) else ops.subtract(rhs, da)
        if is_zero(rhs):
            return [Zero(x.shape, x.dtype), Zero(info.shape, info.dtype)]
        dx, _ = bind(name, rhs, 0.0 * x, *consts, matvec=matvec, n_mv=n_mv, **params)
        return [dx, Zero(info.shape, info.dtype)]

    def vjp(cts, primals, outs, *, matvec, precond, n_mv, **params):
        b, x0, *consts = primals
        x = outs[0]
        if is_zero(cts[0]):
            return [None] * len(primals)
        transpose = (lambda g: g) if symmetric else _transposed
        u, _ = bind(name, cts[0], 0.0 * x, *consts, matvec=transpose(matvec),
                    precond=transpose(precond), n_mv=n_mv, **params)
        wrt = [1 + k for k, c in enumerate(consts[:n_mv]) if c.dtype.is_floating]
        grads = dict(zip(wrt, apply_vjp(matvec, [x, *consts[:n_mv]], [ops.negative(u)], wrt)))
        return [u, None] + [grads.get(1 + k) for k in range(n_mv)] + [None] * (len(consts) - n_mv)

    def batch(args, batched, size, *, matvec, precond, n_mv, nbatch, **params):
        b, x0, *consts = [a if f or k >= 2 else lead(a, size)
                          for k, (a, f) in enumerate(zip(args, batched))]
        flags = list(batched[2:])
        outs = bind(name, b, x0, *consts, matvec=batch_sub(matvec, [True] + flags[:n_mv], size),
                    precond=batch_sub(precond, [True] + flags[n_mv:], size), n_mv=n_mv,
                    nbatch=nbatch + 1, **params)
        return outs, [True, True]

    register(Primitive(name, shape_rule=shape_rule, impl=impl, jvp=jvp, vjp=vjp, batch=batch,
                       multiple_results=True, foldable=False, expand=expand))


_linear_solver("cg", _cg, symmetric=True)
_linear_solver("gmres", _gmres, symmetric=False)


# -- the functions users call -------------------------------------------------------------------

def _operator(A, b, what):
    """The matvec graph and its consts for an operator given as a function of a pytree like
    ``b``, an object with ``@`` (``A @ x``), or a matrix (for a single vector ``b``)."""
    operands = ()
    if A is None:
        fun = lambda x: x  # noqa: E731
    elif callable(A):
        fun = A
    elif hasattr(type(A), "__matmul__") and not isinstance(A, (Array, np.ndarray)):
        fun = lambda x: A @ x  # noqa: E731
    else:  # an operand, not a closed-over constant: the graph stays small
        a = as_float_array(A, what)
        n = b.array.shape[0] if b.single and b.array.ndim == 1 else None
        if n is None or tuple(a.shape) != (n, n):
            raise ValueError(f"{what}: a matrix operator must be [n, n] for b of shape [n]; got "
                             f"{list(a.shape)} and b {b}")
        fun, operands = (lambda x, a: ops.matmul(a, x)), (a,)
    graph, consts, _ = operator_graph(b.function(fun, what), b.array, operands, what)
    return graph, consts


def _solve(name, A, b, x0, tol, atol, maxiter, M, **extra):
    """Solve with ``b`` a ``Flat``: the primitive sees vectors, the user pytrees."""
    x0 = ops.multiply(b.array, 0.0) if x0 is None else b.flat(
        x0, f"{name}'s x0, like b,", ValueError)
    matvec, consts = _operator(A, b, f"{name}'s A")
    precond, pconsts = _operator(M, b, f"{name}'s M")
    if maxiter is None:
        maxiter = 10 * b.array.size
    if int(maxiter) < 0 or float(tol) < 0 or float(atol) < 0:
        raise ValueError(f"{name}: tol, atol and maxiter must be >= 0")
    x, info = bind(name, b.array, x0, *consts, *pconsts, matvec=matvec, precond=precond,
                   n_mv=len(consts), tol=float(tol), atol=float(atol), maxiter=int(maxiter),
                   nbatch=0, **extra)
    return b.unflat(x), info


def cg(A, b, x0=None, *, tol=1e-5, atol=0.0, maxiter=None, M=None):
    """Solve ``A x = b`` for symmetric positive definite ``A`` by conjugate gradients, as
    ``jax.scipy.sparse.linalg.cg``. ``b`` (and the start ``x0``, default zeros) is an array or
    a pytree of arrays; ``A`` (and the preconditioner ``M``) is a linear function ``x -> A x``
    of such a pytree (it may close over arrays and tracers), an object with ``@``, or a matrix
    (for a single vector ``b``). Stops when ``|b - A x| <= max(tol |b|, atol)`` (norms over
    all leaves) or after ``maxiter`` (default ``10 n``) iterations. Returns ``(x, info)``:
    ``x`` has ``b``'s structure; ``info`` is 0 when converged, else the number of iterations
    done (at least 1). Derivatives (in ``b`` and in what ``A`` closes over) solve one more
    system with ``A``."""
    return _solve("cg", A, Flat(b, "cg's b"), x0, tol, atol, maxiter, M)


def gmres(A, b, x0=None, *, tol=1e-5, atol=0.0, restart=20, maxiter=None, M=None):
    """Solve ``A x = b`` for a general square ``A`` by restarted GMRES, as
    ``jax.scipy.sparse.linalg.gmres``: ``A``, ``b``, ``x0`` and ``M`` as for ``cg``; Krylov
    spaces of ``restart`` vectors, at most ``maxiter`` restarts (default ``10 n``), until
    ``|M (b - A x)| <= max(tol |M b|, atol)``. Returns ``(x, info)``: ``info`` is 0 when
    converged, else the number of restarts done (at least 1). Derivatives solve one system
    with ``A^T`` (the operator's transpose, from its VJP)."""
    b = Flat(b, "gmres's b")
    restart = int(restart)
    if restart < 1:
        raise ValueError(f"gmres: restart must be >= 1, got {restart}")
    return _solve("gmres", A, b, x0, tol, atol, maxiter, M, restart=min(restart, b.array.size))
