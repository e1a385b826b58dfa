"""Rule tables of the linear-algebra primitives: dot_general, solve and cholesky."""

import numpy as np

from ... import ops
from ...array import Tensor
from ...errors import UnsupportedOperationError
from ..primitives import Primitive, Zero, is_zero, register
from ..tracing import bind


# -- dot_general ------------------------------------------------------------------------------

def _free(ndim, contract, batch):
    return tuple(d for d in range(ndim) if d not in contract and d not in batch)


def _dot_shape(lhs, rhs, *, dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers
    if lhs.dtype is not rhs.dtype or not lhs.dtype.is_floating:
        raise TypeError("dot_general needs floating operands of one dtype")
    if len(lc) != len(rc) or len(lb) != len(rb) or any(
        lhs.shape[a] != rhs.shape[b] for a, b in zip(lc + lb, rc + rb)
    ):
        raise ValueError(f"dot_general: {lhs.shape} and {rhs.shape} do not match on {dimension_numbers}")
    shape = (
        tuple(lhs.shape[d] for d in lb)
        + tuple(lhs.shape[d] for d in _free(lhs.ndim, lc, lb))
        + tuple(rhs.shape[d] for d in _free(rhs.ndim, rc, rb))
    )
    return shape, lhs.dtype, lhs._weak and rhs._weak


def dot_general_impl(lhs, rhs, *, dimension_numbers):
    """Transpose to (batch, free, contract) x (batch, contract, free) and use np.matmul."""
    (lc, rc), (lb, rb) = dimension_numbers
    lf, rf = _free(lhs.ndim, lc, lb), _free(rhs.ndim, rc, rb)
    size = lambda x, dims: int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
    bshape = tuple(lhs.shape[d] for d in lb)
    a = np.transpose(lhs, lb + lf + lc).reshape(size(lhs, lb), size(lhs, lf), size(lhs, lc))
    b = np.transpose(rhs, rb + rc + rf).reshape(size(rhs, rb), size(rhs, rc), size(rhs, rf))
    out = np.matmul(a, b)
    return out.reshape(bshape + tuple(lhs.shape[d] for d in lf) + tuple(rhs.shape[d] for d in rf))


def _dot_jvp(primals, tangents, out, *, dimension_numbers):
    lhs, rhs = primals
    tl, tr = tangents
    terms = []
    if not is_zero(tl):
        terms.append(bind("dot_general", tl, rhs, dimension_numbers=dimension_numbers))
    if not is_zero(tr):
        terms.append(bind("dot_general", lhs, tr, dimension_numbers=dimension_numbers))
    if not terms:
        return Zero(out.shape, out.dtype)
    return terms[0] if len(terms) == 1 else ops.add(terms[0], terms[1])


def _dot_vjp(ct, primals, out, *, dimension_numbers):
    lhs, rhs = primals
    (lc, rc), (lb, rb) = dimension_numbers
    lf, rf = _free(lhs.ndim, lc, lb), _free(rhs.ndim, rc, rb)
    nb, nlf, nrf = len(lb), len(lf), len(rf)
    ct_batch = tuple(range(nb))
    ct_lf = tuple(range(nb, nb + nlf))
    ct_rf = tuple(range(nb + nlf, nb + nlf + nrf))
    # d lhs: contract the cotangent with rhs over rhs's free axes -> (batch, lhs free, rhs contract)
    g_lhs = bind("dot_general", ct, rhs, dimension_numbers=((ct_rf, rf), (ct_batch, rb)))
    rc_sorted = tuple(sorted(rc))
    lhs_axes = lb + lf + tuple(lc[rc.index(r)] for r in rc_sorted)
    g_lhs = _to_order(g_lhs, lhs_axes)
    # d rhs: contract lhs with the cotangent over lhs's free axes -> (batch, lhs contract, rhs free)
    g_rhs = bind("dot_general", lhs, ct, dimension_numbers=((lf, ct_lf), (lb, ct_batch)))
    lc_sorted = tuple(sorted(lc))
    rhs_axes = rb + tuple(rc[lc.index(c)] for c in lc_sorted) + rf
    g_rhs = _to_order(g_rhs, rhs_axes)
    return [g_lhs, g_rhs]


def _to_order(value, axes):
    """``value``'s axis i is operand axis ``axes[i]``: transpose into operand order."""
    perm = tuple(int(i) for i in np.argsort(axes))
    if perm == tuple(range(len(perm))):
        return value
    return bind("transpose", value, permutation=perm)


def _dot_batch(args, batched, size, *, dimension_numbers):
    lhs, rhs = args
    bl, br = batched
    (lc, rc), (lb, rb) = dimension_numbers
    shift = lambda dims: tuple(d + 1 for d in dims)
    if bl and br:
        dn = ((shift(lc), shift(rc)), ((0,) + shift(lb), (0,) + shift(rb)))
        return bind("dot_general", lhs, rhs, dimension_numbers=dn), True
    if bl:
        dn = ((shift(lc), rc), (shift(lb), rb))
        out = bind("dot_general", lhs, rhs, dimension_numbers=dn)
        return _front(out, len(lb)), True
    dn = ((lc, shift(rc)), (lb, shift(rb)))
    out = bind("dot_general", lhs, rhs, dimension_numbers=dn)
    return _front(out, len(lb) + len(_free(lhs.ndim, lc, lb))), True


def _front(x, axis):
    if axis == 0:
        return x
    perm = (axis,) + tuple(d for d in range(x.ndim) if d != axis)
    return bind("transpose", x, permutation=perm)


register(Primitive(
    "dot_general", shape_rule=_dot_shape, impl=dot_general_impl,
    jvp=_dot_jvp, vjp=_dot_vjp, batch=_dot_batch,
))


# -- solve --------------------------------------------------------------------------------------

def _solve_shape(a, b):
    if a.dtype is not b.dtype or not a.dtype.is_floating:
        raise TypeError("solve needs floating operands of one dtype")
    return tuple(b.shape), b.dtype, a._weak and b._weak


def _solve_impl(a, b):
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        return np.full(b.shape, np.nan, b.dtype)


def _outer_like(u, x):
    """u x^T for vectors, u @ x^T for matrices: the shape of the matrix operand of solve."""
    if u.ndim == 1:
        return bind("dot_general", ops.reshape(u, (u.shape[0], 1)), ops.reshape(x, (1, x.shape[0])),
                    dimension_numbers=(((1,), (0,)), ((), ())))
    return bind("dot_general", u, x, dimension_numbers=(((1,), (1,)), ((), ())))


def _solve_jvp(primals, tangents, out, **params):
    a, b = primals
    ta, tb = tangents
    if is_zero(ta) and is_zero(tb):
        return Zero(out.shape, out.dtype)
    rhs = Zero(b.shape, b.dtype) if is_zero(tb) else tb
    if not is_zero(ta):
        ax = ops.matmul(ta, out)
        rhs = ops.negative(ax) if is_zero(rhs) else ops.subtract(rhs, ax)
    return bind("solve", a, rhs)


def _solve_vjp(ct, primals, out):
    a, b = primals
    gb = bind("solve", ops.transpose(a), ct)
    return [ops.negative(_outer_like(gb, out)), gb]


def _unbatchable(name):
    def batch(args, batched, size, **params):
        raise UnsupportedOperationError(
            f"vmap of {name} over a mapped operand is not supported yet", op=name
        )
    return batch


register(Primitive(
    "solve", shape_rule=_solve_shape, impl=_solve_impl,
    jvp=_solve_jvp, vjp=_solve_vjp, batch=_unbatchable("solve"),
))


# -- cholesky -------------------------------------------------------------------------------------

def _cholesky_impl(a):
    try:
        return np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        return np.full(a.shape, np.nan, a.dtype)


def _phi(x):
    """The lower triangle with the diagonal halved."""
    n = x.shape[0]
    weights = np.tril(np.ones((n, n))) - 0.5 * np.eye(n)
    return ops.multiply(x, Tensor._wrap(weights.astype(x.dtype.numpy)))


def _cholesky_jvp(primals, tangents, out):
    (ta,) = tangents
    if is_zero(ta):
        return Zero(out.shape, out.dtype)
    lower = out
    # L^-1 dA L^-T, through two solves with L (general solves keep the primitive set small).
    tmp = bind("solve", lower, ta)
    inner = ops.transpose(bind("solve", lower, ops.transpose(tmp)))
    return ops.matmul(lower, _phi(inner))


def _cholesky_vjp(ct, primals, out):
    lower = out
    p = _phi(ops.matmul(ops.transpose(lower), ct))
    # S = L^-T P L^-1
    tmp = bind("solve", ops.transpose(lower), p)
    s = ops.transpose(bind("solve", ops.transpose(lower), ops.transpose(tmp)))
    return [ops.multiply(0.5, ops.add(s, ops.transpose(s)))]


register(Primitive(
    "cholesky",
    shape_rule=lambda a: (tuple(a.shape), a.dtype, a._weak),
    impl=_cholesky_impl, jvp=_cholesky_jvp, vjp=_cholesky_vjp, batch=_unbatchable("cholesky"),
))
