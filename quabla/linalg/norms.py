"""``qb.linalg.norm`` and ``cond`` as NumPy and ``jnp.linalg`` define them: vector norms over
one axis, matrix norms over two (the 2-norms and the nuclear norm from ``svd``)."""

import math
import numbers

from .. import ops
from ..shapes import moveaxis
from .decompositions import matrices, svd
from .inverses import inv

__all__ = ["norm", "cond"]

_INF = math.inf


def _vector_norm(x, ord, axis, keepdims):
    a = ops.abs(x)
    if ord is None or ord == 2:
        return ops.sqrt(ops.sum(ops.multiply(x, x), axis, keepdims))
    if ord == _INF:
        return ops.max(a, axis, keepdims)
    if ord == -_INF:
        return ops.min(a, axis, keepdims)
    if ord == 0:
        return ops.sum(ops.astype(ops.not_equal(x, 0.0), x.dtype), axis, keepdims)
    if ord == 1:
        return ops.sum(a, axis, keepdims)
    return ops.power(ops.sum(ops.power(a, float(ord)), axis, keepdims), 1.0 / float(ord))


def _matrix_norm(x, ord, axes, keepdims):
    row, col = axes
    if ord is None or ord == "fro":
        return ops.sqrt(ops.sum(ops.multiply(x, x), axes, keepdims))
    if ord in (1, -1, _INF, -_INF):
        # 1: the largest column sum (over rows); inf: the largest row sum (over columns)
        inner, outer = (row, col) if abs(ord) == 1 else (col, row)
        sums = ops.sum(ops.abs(x), inner, True)
        pick = ops.max if ord > 0 else ops.min
        out = pick(sums, outer, True)
    elif ord in (2, -2, "nuc"):
        s = svd(moveaxis(x, (row, col), (-2, -1)), compute_uv=False)
        out = (ops.sum if ord == "nuc" else ops.max if ord == 2 else ops.min)(s, -1)
        if keepdims:
            for axis in sorted((row, col)):
                out = ops.expand_dims(out, axis)
        return out
    else:
        raise ValueError(f"quabla.linalg.norm: invalid ord {ord!r} for a matrix norm")
    return out if keepdims else ops.squeeze(out, (row, col))


def norm(x, ord=None, axis=None, keepdims=False):
    """The vector or matrix norm, as ``numpy.linalg.norm``: ``axis`` None (a vector norm of a
    1-d ``x``, a matrix norm of a 2-d one, else the 2-norm of all elements), an int (vector
    norms: ``ord`` None/2, 1, inf, -inf, 0, any p) or a pair (matrix norms: None/'fro',
    'nuc', 1, -1, 2, -2, inf, -inf). The gradient of a 2-norm at zero is NaN, as JAX's."""
    (x,) = ops.promote("linalg.norm", (x,))
    if axis is None:
        if ord is None:
            flat = ops.reshape(x, (x.size,)) if x.ndim != 1 else x
            out = _vector_norm(flat, None, 0, False)
            return ops.reshape(out, (1,) * x.ndim) if keepdims else out
        if x.ndim not in (1, 2):
            raise ValueError("quabla.linalg.norm: ord needs axis for arrays of rank other than 1 or 2")
        axis = 0 if x.ndim == 1 else (0, 1)
    if isinstance(axis, numbers.Integral):
        axis = (axis,)
    axes = tuple(ops.normalize_axis(a, x.ndim, "linalg.norm") for a in axis)
    if len(axes) == 1:
        if isinstance(ord, str):
            raise ValueError(f"quabla.linalg.norm: invalid ord {ord!r} for a vector norm")
        return _vector_norm(x, ord, axes[0], keepdims)
    if len(axes) != 2 or axes[0] == axes[1]:
        raise ValueError(f"quabla.linalg.norm: axis must be an int or a pair of axes, got {axis!r}")
    return _matrix_norm(x, ord, axes, keepdims)


def cond(x, p=None):
    """The condition numbers of matrices [..., m, n], as ``jnp.linalg.cond``: p None/2 (and
    -2) the ratio of extreme singular values, else norm(x, p) norm(inv(x), p) (square x)."""
    x = matrices(x, "cond", square=p not in (None, 2, -2))
    if p in (None, 2, -2):
        s = svd(x, compute_uv=False)
        big, small = ops.max(s, -1), ops.min(s, -1)
        return ops.divide(big, small) if p != -2 else ops.divide(small, big)
    return ops.multiply(norm(x, p, (-2, -1)), norm(inv(x), p, (-2, -1)))
