"""Rule tables of the linear-algebra primitives: dot_general, solve, triangular_solve and
cholesky, and the helpers on stacks of matrices that the decompositions' rules
(``decompositions.py``) share."""

import math

import numpy as np

from ... import ops
from ...array import Tensor
from ..primitives import Primitive, Zero, is_zero, register
from ..tracing import bind

__all__ = ["dot", "mT", "matmul_stack", "broadcast_batch", "check_square", "stacked"]


# -- dot_general ------------------------------------------------------------------------------

def dot(lhs, rhs, dimension_numbers):
    """A product in the rules: through ``ops.dot_general``, which makes a product with a
    scalar (a full contraction's cotangent) a multiply."""
    (lc, rc), (lb, rb) = dimension_numbers
    return ops.dot_general(lhs, rhs, (lc, rc), (lb, rb))


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
    return shape, lhs.dtype, lhs.weak and rhs.weak


def dot_general_impl(lhs, rhs, *, dimension_numbers):
    """Transpose to (batch, free, contract) x (batch, contract, free) and use np.matmul."""
    (lc, rc), (lb, rb) = dimension_numbers
    lf, rf = _free(lhs.ndim, lc, lb), _free(rhs.ndim, rc, rb)
    size = lambda x, dims: int(math.prod([x.shape[d] for d in dims]))
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
        terms.append(dot(tl, rhs, dimension_numbers))
    if not is_zero(tr):
        terms.append(dot(lhs, tr, dimension_numbers))
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
    g_lhs = dot(ct, rhs, ((ct_rf, rf), (ct_batch, rb)))
    rc_sorted = tuple(sorted(rc))
    lhs_axes = lb + lf + tuple(lc[rc.index(r)] for r in rc_sorted)
    g_lhs = _to_order(g_lhs, lhs_axes)
    # d rhs: contract lhs with the cotangent over lhs's free axes -> (batch, lhs contract, rhs free)
    g_rhs = dot(lhs, ct, ((lf, ct_lf), (lb, ct_batch)))
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
        return dot(lhs, rhs, dn), True
    if bl:
        dn = ((shift(lc), rc), (shift(lb), rb))
        out = dot(lhs, rhs, dn)
        return _front(out, len(lb)), True
    dn = ((lc, shift(rc)), (lb, shift(rb)))
    out = dot(lhs, rhs, dn)
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


# -- solve, triangular_solve and cholesky: stacks of matrices ------------------------------------
#
# All take leading batch axes, as JAX's linalg does: ``a`` is [*batch, n, n]. The solve
# primitives' ``b`` has the same batch axes and is a stack of vectors [*batch, n] or of matrices
# [*batch, n, k]; its rank relative to ``a`` tells which, so there is no ambiguity (the public
# qb.solve, which follows NumPy 2, broadcasts its operands into this form). Rules use transposes
# of the last two axes and batched dot_general, so batching them is binding the same primitive
# with one more leading axis.

def stacked(fn, out_shape, *arrays):
    """``fn`` (np.linalg.solve or cholesky) over a stack; where LAPACK fails (a singular or not
    positive definite matrix) only that matrix's result is NaN, as in the Numba kernels."""
    try:
        return fn(*arrays)
    except np.linalg.LinAlgError:
        pass
    out = np.full(out_shape, np.nan, arrays[-1].dtype)
    for idx in np.ndindex(*arrays[0].shape[:-2]):
        try:
            out[idx] = fn(*(x[idx] for x in arrays))
        except np.linalg.LinAlgError:
            pass
    return out


def check_square(a, name):
    if not a.dtype.is_floating:
        raise TypeError(f"{name} needs floating operands")
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name}: {list(a.shape)} is not a stack of square matrices [..., n, n]")


def mT(x):
    """The transposes of a stack of matrices (its last two axes swapped)."""
    perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return bind("transpose", x, permutation=perm)


def matmul_stack(a, x):
    """``a @ x`` per batch element: ``a`` [*batch, n, m], ``x`` [*batch, m] or [*batch, m, k]."""
    nb = a.ndim - 2
    batch = tuple(range(nb))
    return dot(a, x, (((nb + 1,), (nb,)), (batch, batch)))


def broadcast_batch(op):
    """Batching rule: unmapped operands are broadcast along the new leading axis."""
    def batch(args, batched, size, **params):
        args = [x if f else ops.broadcast_to(x, (size,) + tuple(x.shape))
                for x, f in zip(args, batched)]
        return bind(op, *args, **params), True
    return batch


# -- solve --------------------------------------------------------------------------------------

def _solve_shape(a, b, name="solve"):
    if a.dtype is not b.dtype:
        raise TypeError(f"{name} needs floating operands of one dtype")
    check_square(a, name)
    if b.ndim not in (a.ndim - 1, a.ndim) or tuple(b.shape[:a.ndim - 1]) != tuple(a.shape[:-1]):
        raise ValueError(
            f"{name}: b {list(b.shape)} is neither [..., n] nor [..., n, k] for a {list(a.shape)}"
        )
    return tuple(b.shape), b.dtype, a.weak and b.weak


def _solve_impl(a, b):
    if b.ndim < a.ndim:  # a stack of vectors: NumPy 2 reads any b of rank > 1 as matrices
        return _solve_impl(a, b[..., None])[..., 0]
    return stacked(np.linalg.solve, b.shape, a, b)


def _solve_jvp(primals, tangents, out):
    """dx = a^-1 (db - da x)."""
    a, _ = primals
    ta, tb = tangents
    if is_zero(ta) and is_zero(tb):
        return Zero(out.shape, out.dtype)
    return bind("solve", a, _tangent_rhs(ta, tb, out))


def _tangent_rhs(ta, tb, out):
    """``db - da x``: the right-hand side of a solve's tangent (``ta`` the tangent of the
    operator as it acts, ``tb`` of the right-hand side; either may be Zero)."""
    if is_zero(ta):
        return tb
    ax = matmul_stack(ta, out)
    return ops.negative(ax) if is_zero(tb) else ops.subtract(tb, ax)


def _solve_vjp(ct, primals, out):
    """gb = a^-T ct and ga = -gb x^T (summed over the columns of a matrix b)."""
    a, _ = primals
    gb = bind("solve", mT(a), ct)
    batch = tuple(range(a.ndim - 2))
    cols = tuple(range(a.ndim - 1, out.ndim))  # empty for vectors: an outer product
    ga = dot(gb, out, ((cols, cols), (batch, batch)))
    return [ops.negative(ga), gb]


register(Primitive(
    "solve", shape_rule=_solve_shape, impl=_solve_impl,
    jvp=_solve_jvp, vjp=_solve_vjp, batch=broadcast_batch("solve"),
))


# -- triangular_solve -----------------------------------------------------------------------------
#
# x = op(T)^-1 b, where T is the lower (``lower``) or upper triangle of ``a`` (the other triangle
# is never read, as in LAPACK's trsm) and op(T) is T or, with ``transpose_a``, T^T.

def _triangle(x, lower):
    return ops.tril(x) if lower else ops.triu(x)


def _triangular_shape(a, b, *, lower, transpose_a):
    return _solve_shape(a, b, "triangular_solve")


def _triangular_impl(a, b, *, lower, transpose_a):
    """Substitution in float64 (as the Numba kernel computes), one row of every matrix of the
    stack at a time; a zero on the diagonal gives the infinities and NaNs it produces."""
    if b.ndim < a.ndim:
        return _triangular_impl(a, b[..., None], lower=lower, transpose_a=transpose_a)[..., 0]
    m = (np.swapaxes(a, -1, -2) if transpose_a else a).astype(np.float64)
    x = b.astype(np.float64)
    n = a.shape[-1]
    done = []  # the rows solved so far: the ones row i of op(T) reads
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(n) if lower != transpose_a else range(n - 1, -1, -1):
            s = x[..., i, :] - (m[..., i, done, None] * x[..., done, :]).sum(-2)
            x[..., i, :] = s / m[..., i, i, None]
            done.append(i)
    return x.astype(b.dtype)


def _triangular_jvp(primals, tangents, out, *, lower, transpose_a):
    """dx = op(T)^-1 (db - op(dT) x), dT the triangle of da."""
    a, _ = primals
    ta, tb = tangents
    if is_zero(ta) and is_zero(tb):
        return Zero(out.shape, out.dtype)
    if not is_zero(ta):
        ta = _triangle(ta, lower)
        ta = mT(ta) if transpose_a else ta
    return bind("triangular_solve", a, _tangent_rhs(ta, tb, out), lower=lower,
                transpose_a=transpose_a)


def _triangular_vjp(ct, primals, out, *, lower, transpose_a):
    """gb = op(T)^-T ct, a triangular solve with the other ``transpose_a``; ga is the triangle
    of -gb x^T (of -x gb^T for a transposed T), summed over the columns of a matrix b."""
    a, _ = primals
    gb = bind("triangular_solve", a, ct, lower=lower, transpose_a=not transpose_a)
    batch = tuple(range(a.ndim - 2))
    cols = tuple(range(a.ndim - 1, out.ndim))  # empty for vectors: an outer product
    left, right = (out, gb) if transpose_a else (gb, out)
    ga = dot(left, right, ((cols, cols), (batch, batch)))
    return [ops.negative(_triangle(ga, lower)), gb]


register(Primitive(
    "triangular_solve", shape_rule=_triangular_shape, impl=_triangular_impl,
    jvp=_triangular_jvp, vjp=_triangular_vjp, batch=broadcast_batch("triangular_solve"),
))


# -- cholesky -------------------------------------------------------------------------------------

def _cholesky_shape(a):
    check_square(a, "cholesky")
    return tuple(a.shape), a.dtype, a.weak


def _phi(x):
    """The lower triangle with the diagonal halved (of every matrix of the stack)."""
    n = x.shape[-1]
    weights = np.tril(np.ones((n, n))) - 0.5 * np.eye(n)
    return ops.multiply(x, Tensor.wrap(weights.astype(x.dtype.numpy)))


def _cholesky_jvp(primals, tangents, out):
    """dL = L phi(L^-1 dA L^-T)."""
    (ta,) = tangents
    if is_zero(ta):
        return Zero(out.shape, out.dtype)
    # L^-1 dA L^-T, through two triangular solves with L.
    tmp = bind("triangular_solve", out, ta, lower=True, transpose_a=False)
    inner = mT(bind("triangular_solve", out, mT(tmp), lower=True, transpose_a=False))
    return matmul_stack(out, _phi(inner))


def _cholesky_vjp(ct, primals, out):
    """S = L^-T phi(L^T ct) L^-1, symmetrised: the input is read as a symmetric matrix."""
    p = _phi(matmul_stack(mT(out), ct))
    tmp = bind("triangular_solve", out, p, lower=True, transpose_a=True)
    s = mT(bind("triangular_solve", out, mT(tmp), lower=True, transpose_a=True))
    return [ops.multiply(0.5, ops.add(s, mT(s)))]


register(Primitive(
    "cholesky", shape_rule=_cholesky_shape,
    impl=lambda a: stacked(np.linalg.cholesky, a.shape, a),
    jvp=_cholesky_jvp, vjp=_cholesky_vjp, batch=broadcast_batch("cholesky"),
))
