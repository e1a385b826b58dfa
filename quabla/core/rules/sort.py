"""The rule table of ``sort``: a stable sort of the columns of matrices by their first row.

``sort(x)`` takes ``x`` of shape (*batch, m, n) and reorders the n columns of each (m, n)
matrix so that its row 0 (the key) is in ascending order; the other m - 1 rows follow their
key. The sort is stable (equal keys keep their order; -0.0 equals 0.0) and puts NaN keys last,
as NumPy's ``sort(kind="stable")``. One primitive serves ``quabla.sort`` (m = 1),
``quabla.argsort`` (a row of column numbers follows the key), ``median`` and ``quantile``.

For a fixed key the op is a permutation P of the columns, the same for every row, so it is
linear in its operand with P as its derivative (the key's own tangent is permuted like any
row, as JAX's gather of the permutation does):

- JVP: the tangent rows sorted along with the primal (``sort`` of [x; t]), so the
  permutation is computed once and applied to both;
- VJP: P^T ct, the inverse permutation: sorting the rows of ``ct`` by the permutation's own
  column numbers (which are distinct, so any sort is the inverse) scatters each column back;
- batching: the batch axis is one more leading axis.

Both derivative rules bind ``sort`` again, so derivatives of any order are sorts. Lowerings:
``lowering/numba_cpu/structural.py`` and ``lowering/numba_cuda/structural.py`` (the merge sort
``lowering/matrix_kernels.sort`` per matrix), ``lowering/mlx/rules.py`` (``mx.argsort`` with
ties ordered by position).
"""

import numpy as np

from ..primitives import Primitive, Zero, is_zero, register
from ..tracing import bind

__all__ = ["sort_permutation"]


def _sort_shape(x):
    if not x.dtype.is_floating:
        raise TypeError(f"sort needs a floating operand, got {x.dtype}")
    if x.ndim < 2 or x.shape[-2] < 1:
        raise ValueError(f"sort takes matrices (*batch, m, n) with m >= 1, got {list(x.shape)}")
    return tuple(x.shape), x.dtype, x.weak


def sort_permutation(keys):
    """The stable ascending order of ``keys`` along the last axis, NaN last (NumPy)."""
    return np.argsort(keys, axis=-1, kind="stable")


def _sort_impl(x):
    order = sort_permutation(x[..., :1, :])
    return np.take_along_axis(x, np.broadcast_to(order, x.shape), axis=-1)


def _with_rows(x, rows):
    from ... import ops

    return ops.concat([x, ops.astype(rows, x.dtype)], axis=-2)


def _sort_jvp(primals, tangents, out):
    (x,), (t,) = primals, tangents
    if is_zero(t):
        return Zero(out.shape, out.dtype)
    m = x.shape[-2]
    both = bind("sort", _with_rows(x, t))
    return _rows(both, m, 2 * m)


def _rows(x, start, stop):
    from ... import ops

    return ops.getitem(x, (Ellipsis, slice(start, stop), slice(None)))


def _sort_vjp(ct, primals, out):
    from ... import dtypes as _dt
    from ... import ops

    (x,) = primals
    n = x.shape[-1]
    # column numbers are exact in float32 below 2**24 only: wider rows sort in float64
    wide = x.dtype if x.dtype is _dt.float64 or n <= 1 << 24 else _dt.float64
    columns = ops.broadcast_to(ops.astype(np.arange(n, dtype=np.float64), wide),
                               tuple(x.shape[:-2]) + (1, n))
    key = ops.astype(_rows(x, 0, 1), wide)
    # the column of x each column of the result came from (no derivative: a permutation)
    perm = ops.stop_gradient(_rows(bind("sort", _with_rows(key, columns)), 1, 2))
    back = bind("sort", _with_rows(perm, ct))
    return [ops.astype(_rows(back, 1, 1 + x.shape[-2]), x.dtype)]


register(Primitive(
    "sort", shape_rule=_sort_shape, impl=_sort_impl, jvp=_sort_jvp, vjp=_sort_vjp,
    batch=lambda args, batched, size: (bind("sort", args[0]), True),
))
