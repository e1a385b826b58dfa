"""Rule tables of the matrix decompositions: ``slogdet``, ``eigh``, ``svd`` and ``qr``.

Each is one primitive on stacks of matrices [*batch, m, n] (batching binds it with one more
leading axis) whose result is ONE array: the factors are packed along the last two axes, so
every back end computes a decomposition as one per-matrix kernel and the transforms need no
multi-result machinery. The layouts (``*_parts`` unpack them):

- ``slogdet``: [*batch, 2], (sign, log|det|).
- ``eigh`` (``vectors``): [*batch, n + 1, n], row 0 the eigenvalues (ascending), rows 1..n
  the eigenvectors as columns; without vectors: the eigenvalues [*batch, n].
- ``svd`` (``compute_uv``): [*batch, ku + 1 + kv, max(m, n)], the rows of u^T (ku = k or m
  with ``full_matrices``), the singular values (descending), the rows of vh (kv = k or n),
  zero padded; without: the singular values [*batch, k], k = min(m, n).
- ``qr``: [*batch, m + kq, max(kq, n)], Q (m, kq; kq = k, or m when ``complete``) above R
  (kq, n).

Conventions shared with the kernels (lowering/matrix_kernels.py): results are computed in
float64 and rounded to the operand's dtype; a matrix holding a NaN or an infinity gives an
all-NaN result; signs are fixed so that every back end agrees: an eigenvector's and u's
columns have their entry of largest magnitude positive (the first on ties), R's diagonal is
nonnegative. The derivatives are the standard closed forms (those JAX uses); where
eigenvalues or singular values repeat, the vectors' derivatives divide by zero (inf/NaN), as
JAX's do, while the values' derivatives stay finite.
"""

import numpy as np

from ... import ops
from ...array import Tensor
from ...errors import UnsupportedOperationError
from ..primitives import Primitive, Zero, is_zero, register
from ..tracing import bind
from .linalg import broadcast_batch, check_square, mT, matmul_stack

__all__ = ["eigh_parts", "svd_parts", "qr_parts", "svd_rows", "qr_columns"]


# -- shared pieces ------------------------------------------------------------------------------

def _finite_or_identity(a):
    """``a`` in float64 with every matrix holding a NaN or an inf replaced by the identity,
    and the mask of those matrices: LAPACK must not see them, their results are NaN."""
    a = np.asarray(a, dtype=np.float64)
    bad = ~np.isfinite(a).all(axis=(-2, -1))
    if bad.any():
        a = a.copy()
        a[bad] = np.eye(a.shape[-2], a.shape[-1])
    return a, bad


def _nan_where(out, bad, dtype):
    out = np.array(out, dtype=np.float64)
    out[bad] = np.nan
    return out.astype(dtype)


def _leading_positive(vectors):
    """+1 or -1 per column of each matrix: the sign of its entry of largest magnitude (the
    first on ties), the kernels' convention."""
    big = np.argmax(np.abs(vectors), axis=-2)[..., None, :]
    lead = np.take_along_axis(vectors, big, axis=-2)[..., 0, :]
    return np.where(lead < 0, -1.0, 1.0)


def _eye(n, dtype):
    return Tensor.wrap(np.eye(n, dtype=dtype.numpy))


def _part(x, rows, cols):
    """The block ``x[..., rows[0]:rows[1], cols[0]:cols[1]]`` (``cols`` None: the last axis is
    the block's rows, for a stack of vectors ``x[..., rows[0]:rows[1]]``)."""
    nb = x.ndim - (1 if cols is None else 2)
    last = [rows] if cols is None else [rows, cols]
    start = (0,) * nb + tuple(lo for lo, _ in last)
    limit = tuple(x.shape[:nb]) + tuple(hi for _, hi in last)
    if start == (0,) * x.ndim and limit == tuple(x.shape):
        return x
    return bind("slice", x, start_indices=start, limit_indices=limit, strides=(1,) * x.ndim)


def _pad_width(x, width):
    """A stack of matrices (or vectors) zero padded on the right to ``width`` columns."""
    extra = width - x.shape[-1]
    if extra == 0:
        return x
    return bind("pad", x, low=(0,) * x.ndim, high=(0,) * (x.ndim - 1) + (extra,),
                interior=(0,) * x.ndim)


def _diagonal(x):
    """The diagonals [*batch, n] of a stack of square matrices."""
    return ops.sum(ops.multiply(x, _eye(x.shape[-1], x.dtype)), -1)


def _diag(v):
    """The diagonal matrices [*batch, n, n] of a stack of vectors [*batch, n]."""
    return ops.multiply(ops.expand_dims(v, -1), _eye(v.shape[-1], v.dtype))


def _rows(v):
    """A stack of vectors [*batch, n] as one-row matrices [*batch, 1, n]."""
    return ops.expand_dims(v, -2)


def _inverse_gaps(w):
    """F[i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it (inf where values repeat)."""
    eye = _eye(w.shape[-1], w.dtype)
    gaps = ops.subtract(_rows(w), ops.expand_dims(w, -1))
    return ops.subtract(ops.reciprocal(ops.add(gaps, eye)), eye)


def _unsupported(what):
    raise UnsupportedOperationError(
        f"the derivative of {what} is not implemented (nor is it in JAX)", op=what.split()[0])


# -- slogdet ------------------------------------------------------------------------------------

def _slogdet_shape(a):
    check_square(a, "slogdet")
    return tuple(a.shape[:-2]) + (2,), a.dtype, a.weak


def _slogdet_impl(a):
    clean, bad = _finite_or_identity(a)
    sign, logdet = np.linalg.slogdet(clean)
    return _nan_where(np.stack([sign, logdet], axis=-1), bad, a.dtype)


def _slogdet_jvp(primals, tangents, out):
    """d log|det a| = trace(a^-1 da); the sign is piecewise constant."""
    (a,), (ta,) = primals, tangents
    if is_zero(ta):
        return Zero(out.shape, out.dtype)
    t = ops.expand_dims(ops.sum(_diagonal(bind("solve", a, ta)), -1), -1)
    return bind("pad", t, low=(0,) * (t.ndim - 1) + (1,), high=(0,) * t.ndim,
                interior=(0,) * t.ndim)  # (0, t): the sign's tangent is zero


def _slogdet_vjp(ct, primals, out):
    """ga = g a^-T, g the cotangent of log|det a|: a solve with a^T and the identity."""
    (a,) = primals
    n = a.shape[-1]
    inv_t = bind("solve", mT(a), ops.broadcast_to(_eye(n, a.dtype), tuple(a.shape)))
    g = _part(ct, (1, 2), None)
    return [ops.multiply(ops.expand_dims(g, -1), inv_t)]


register(Primitive(
    "slogdet", shape_rule=_slogdet_shape, impl=_slogdet_impl,
    jvp=_slogdet_jvp, vjp=_slogdet_vjp, batch=broadcast_batch("slogdet"),
))


# -- eigh ---------------------------------------------------------------------------------------

def eigh_parts(packed):
    """(w [*batch, n], v [*batch, n, n]) of ``eigh``'s packed result."""
    n = packed.shape[-1]
    return _part(packed, (0, 1), (0, n))[..., 0, :], _part(packed, (1, n + 1), (0, n))


def _eigh_shape(a, *, lower, vectors):
    check_square(a, "eigh")
    n = a.shape[-1]
    tail = (n + 1, n) if vectors else (n,)
    return tuple(a.shape[:-2]) + tail, a.dtype, a.weak


def _eigh_impl(a, *, lower, vectors):
    clean, bad = _finite_or_identity(np.tril(a) if lower else np.triu(a))  # what is read
    if not vectors:
        return _nan_where(np.linalg.eigvalsh(clean, UPLO="L" if lower else "U"), bad, a.dtype)
    w, v = np.linalg.eigh(clean, UPLO="L" if lower else "U")
    v = v * _leading_positive(v)[..., None, :]
    return _nan_where(np.concatenate([w[..., None, :], v], axis=-2), bad, a.dtype)


def _symmetric_tangent(ta, lower):
    """The tangent of the symmetric matrix read from one triangle of ``a``."""
    t = ops.tril(ta) if lower else ops.triu(ta)
    return ops.subtract(ops.add(t, mT(t)), ops.multiply(t, _eye(t.shape[-1], t.dtype)))


def _fold(g, lower):
    """The cotangent of ``a`` from that of the symmetric matrix read from one triangle."""
    both = ops.add(g, mT(g))
    strict = ops.tril(both, -1) if lower else ops.triu(both, 1)
    return ops.add(strict, ops.multiply(g, _eye(g.shape[-1], g.dtype)))


def _vectors(a, out, lower, vectors):
    """(w, v): from the result itself, or from the eigenvectors bound again (eigvalsh)."""
    full = out if vectors else bind("eigh", a, lower=lower, vectors=True)
    return eigh_parts(full)


def _eigh_jvp(primals, tangents, out, *, lower, vectors):
    """dw = diag(v^T dA v), dv = v (F o v^T dA v), F the inverse eigenvalue gaps."""
    (a,), (ta,) = primals, tangents
    if is_zero(ta):
        return Zero(out.shape, out.dtype)
    w, v = _vectors(a, out, lower, vectors)
    p = matmul_stack(mT(v), matmul_stack(_symmetric_tangent(ta, lower), v))
    dw = _diagonal(p)
    if not vectors:
        return dw
    dv = matmul_stack(v, ops.multiply(_inverse_gaps(w), p))
    return ops.concat([_rows(dw), dv], -2)


def _eigh_vjp(ct, primals, out, *, lower, vectors):
    """gA = v (diag(gw) + F o v^T gv) v^T, folded onto the triangle read."""
    (a,) = primals
    w, v = _vectors(a, out, lower, vectors)
    if vectors:
        gw, gv = eigh_parts(ct)
        inner = ops.add(_diag(gw), ops.multiply(_inverse_gaps(w), matmul_stack(mT(v), gv)))
    else:
        inner = _diag(ct)
    return [_fold(matmul_stack(v, matmul_stack(inner, mT(v))), lower)]


register(Primitive(
    "eigh", shape_rule=_eigh_shape, impl=_eigh_impl,
    jvp=_eigh_jvp, vjp=_eigh_vjp, batch=broadcast_batch("eigh"),
))


# -- svd ----------------------------------------------------------------------------------------

def svd_rows(m, n, full_matrices):
    """(ku, kv): how many rows of u^T and of vh the packed result holds."""
    k = min(m, n)
    return (m, n) if full_matrices else (k, k)


def svd_parts(packed, m, n, full_matrices):
    """(u [*batch, m, ku], s [*batch, k], vh [*batch, kv, n]) of ``svd``'s packed result."""
    ku, kv = svd_rows(m, n, full_matrices)
    k = min(m, n)
    u = mT(_part(packed, (0, ku), (0, m)))
    s = _part(packed, (ku, ku + 1), (0, k))[..., 0, :]
    vh = _part(packed, (ku + 1, ku + 1 + kv), (0, n))
    return u, s, vh


def _svd_shape(a, *, full_matrices, compute_uv):
    if not a.dtype.is_floating or a.ndim < 2:
        raise ValueError(f"svd: {list(a.shape)} is not a stack of matrices [..., m, n]")
    m, n = a.shape[-2:]
    if not compute_uv:
        return tuple(a.shape[:-2]) + (min(m, n),), a.dtype, a.weak
    ku, kv = svd_rows(m, n, full_matrices)
    return tuple(a.shape[:-2]) + (ku + 1 + kv, max(m, n)), a.dtype, a.weak


def _svd_impl(a, *, full_matrices, compute_uv):
    clean, bad = _finite_or_identity(a)
    if not compute_uv:
        return _nan_where(np.linalg.svd(clean, compute_uv=False), bad, a.dtype)
    m, n = a.shape[-2:]
    k = min(m, n)
    u, s, vh = np.linalg.svd(clean, full_matrices=full_matrices)
    flip = _leading_positive(u)  # u's columns; vh's rows follow, its own rows beyond k alike
    v_flip = _leading_positive(np.swapaxes(vh, -1, -2))
    v_flip[..., :k] = flip[..., :k]
    u = u * flip[..., None, :]
    vh = vh * v_flip[..., :, None]
    width = max(m, n)
    pad = lambda x: np.concatenate(
        [x, np.zeros(x.shape[:-1] + (width - x.shape[-1],))], axis=-1)
    packed = np.concatenate([pad(np.swapaxes(u, -1, -2)), pad(s[..., None, :]), pad(vh)], axis=-2)
    return _nan_where(packed, bad, a.dtype)


def _svd_factors(a, out, full_matrices, compute_uv):
    """(u, s, v) (v = vh^T, reduced): from the result, or bound again for the values alone."""
    m, n = a.shape[-2:]
    if compute_uv and full_matrices and m != n:
        _unsupported("svd with full_matrices=True of a non-square matrix")
    full = out if compute_uv else bind("svd", a, full_matrices=False, compute_uv=True)
    u, s, vh = svd_parts(full, m, n, False)
    return u, s, mT(vh)


def _svd_jvp(primals, tangents, out, *, full_matrices, compute_uv):
    """JAX's closed form: ds = diag(u^T dA v); du and dv from the gaps of s^2, plus, for a
    rectangular matrix, the parts outside the span of u (or v), divided by s."""
    (a,), (ta,) = primals, tangents
    if is_zero(ta):
        return Zero(out.shape, out.dtype)
    u, s, v = _svd_factors(a, out, full_matrices, compute_uv)
    ds_mat = matmul_stack(mT(u), matmul_stack(ta, v))
    ds = _diagonal(ds_mat)
    if not compute_uv:
        return ds
    m, n = a.shape[-2:]
    f = _inverse_gaps(ops.multiply(s, s))
    dss = ops.multiply(ds_mat, _rows(s))  # dS diag(s)
    sds = ops.multiply(ops.expand_dims(s, -1), ds_mat)  # diag(s) dS
    du = matmul_stack(u, ops.multiply(f, ops.add(dss, mT(dss))))
    dv = matmul_stack(v, ops.multiply(f, ops.add(sds, mT(sds))))
    if m > n:
        dav = matmul_stack(ta, v)
        du = ops.add(du, ops.divide(ops.subtract(dav, matmul_stack(u, matmul_stack(mT(u), dav))),
                                    _rows(s)))
    if n > m:
        dau = matmul_stack(mT(ta), u)
        dv = ops.add(dv, ops.divide(ops.subtract(dau, matmul_stack(v, matmul_stack(mT(v), dau))),
                                    _rows(s)))
    width = max(m, n)
    return ops.concat([_pad_width(mT(du), width), _pad_width(_rows(ds), width),
                       _pad_width(mT(dv), width)], -2)


def _svd_vjp(ct, primals, out, *, full_matrices, compute_uv):
    """The transpose of the JVP: gA = u (diag(gs) + (X + X^T) diag(s) + diag(s) (Y + Y^T)) v^T
    with X = F o u^T gu, Y = F o v^T gv, plus the parts outside the spans."""
    (a,) = primals
    u, s, v = _svd_factors(a, out, full_matrices, compute_uv)
    if not compute_uv:
        return [matmul_stack(u, matmul_stack(_diag(ct), mT(v)))]
    m, n = a.shape[-2:]
    gu, gs, gvh = svd_parts(ct, m, n, False)
    gv = mT(gvh)
    f = _inverse_gaps(ops.multiply(s, s))
    x = ops.multiply(f, matmul_stack(mT(u), gu))
    y = ops.multiply(f, matmul_stack(mT(v), gv))
    inner = ops.add(_diag(gs), ops.add(ops.multiply(ops.add(x, mT(x)), _rows(s)),
                                       ops.multiply(ops.expand_dims(s, -1), ops.add(y, mT(y)))))
    ga = matmul_stack(u, matmul_stack(inner, mT(v)))
    if m > n:  # (I - u u^T) gu diag(1/s) v^T
        gu_out = ops.divide(ops.subtract(gu, matmul_stack(u, matmul_stack(mT(u), gu))), _rows(s))
        ga = ops.add(ga, matmul_stack(gu_out, mT(v)))
    if n > m:  # u diag(1/s) ((I - v v^T) gv)^T
        gv_out = ops.divide(ops.subtract(gv, matmul_stack(v, matmul_stack(mT(v), gv))), _rows(s))
        ga = ops.add(ga, matmul_stack(u, mT(gv_out)))
    return [ga]


register(Primitive(
    "svd", shape_rule=_svd_shape, impl=_svd_impl,
    jvp=_svd_jvp, vjp=_svd_vjp, batch=broadcast_batch("svd"),
))


# -- qr -----------------------------------------------------------------------------------------

def qr_columns(m, n, complete):
    """kq: the columns of Q (and rows of R) the packed result holds."""
    return m if complete else min(m, n)


def qr_parts(packed, m, n, complete):
    """(q [*batch, m, kq], r [*batch, kq, n]) of ``qr``'s packed result."""
    kq = qr_columns(m, n, complete)
    return _part(packed, (0, m), (0, kq)), _part(packed, (m, m + kq), (0, n))


def _qr_shape(a, *, complete):
    if not a.dtype.is_floating or a.ndim < 2:
        raise ValueError(f"qr: {list(a.shape)} is not a stack of matrices [..., m, n]")
    m, n = a.shape[-2:]
    kq = qr_columns(m, n, complete)
    return tuple(a.shape[:-2]) + (m + kq, max(kq, n)), a.dtype, a.weak


def _qr_impl(a, *, complete):
    clean, bad = _finite_or_identity(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    q, r = np.linalg.qr(clean, mode="complete" if complete else "reduced")
    diag = np.diagonal(r[..., :k, :k], axis1=-2, axis2=-1)
    flip = np.where(diag < 0, -1.0, 1.0)
    q = q.copy()
    r = r.copy()
    q[..., :, :k] *= flip[..., None, :]
    r[..., :k, :] *= flip[..., :, None]
    width = max(q.shape[-1], n)
    pad = lambda x: np.concatenate(
        [x, np.zeros(x.shape[:-1] + (width - x.shape[-1],))], axis=-1)
    return _nan_where(np.concatenate([pad(q), pad(r)], axis=-2), bad, a.dtype)


def _qr_factors(a, out, complete):
    m, n = a.shape[-2:]
    if m < n or complete:
        _unsupported("qr of a matrix with fewer rows than columns, or with mode='complete',")
    return qr_parts(out, m, n, complete)


def _right_inverse(x, r):
    """``x r^-1`` for upper triangular ``r``: a triangular solve with r^T."""
    return mT(bind("triangular_solve", r, mT(x), lower=False, transpose_a=True))


def _qr_jvp(primals, tangents, out, *, complete):
    """JAX's closed form: with B = dA r^-1, C = q^T B and the skew-symmetric O = L - L^T
    (L the strictly lower part of C): dq = q (O - C) + B, dr = (C - O) r."""
    (a,), (ta,) = primals, tangents
    if is_zero(ta):
        return Zero(out.shape, out.dtype)
    q, r = _qr_factors(a, out, complete)
    b = _right_inverse(ta, r)
    c = matmul_stack(mT(q), b)
    low = ops.tril(c, -1)
    skew = ops.subtract(low, mT(low))
    dq = ops.add(matmul_stack(q, ops.subtract(skew, c)), b)
    dr = matmul_stack(ops.subtract(c, skew), r)
    return ops.concat([dq, dr], -2)


def _qr_vjp(ct, primals, out, *, complete):
    """The transpose of the JVP: with W = q^T gq - gr r^T and E = tril(W - W^T, -1) - W,
    gA = (gq + q E) r^-T."""
    (a,) = primals
    q, r = _qr_factors(a, out, complete)
    m, n = a.shape[-2:]
    gq, gr = qr_parts(ct, m, n, complete)
    w = ops.subtract(matmul_stack(mT(q), gq), matmul_stack(gr, mT(r)))
    e = ops.subtract(ops.tril(ops.subtract(w, mT(w)), -1), w)
    h = ops.add(gq, matmul_stack(q, e))
    return [mT(bind("triangular_solve", r, mT(h), lower=False, transpose_a=False))]


register(Primitive(
    "qr", shape_rule=_qr_shape, impl=_qr_impl,
    jvp=_qr_jvp, vjp=_qr_vjp, batch=broadcast_batch("qr"),
))
