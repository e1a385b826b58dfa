"""Reductions, scans and sorting beyond ``sum``/``max``/``min``/``mean``/``any``/``all``
(which live in ``quabla.ops``): ``prod``, ``var``, ``std``, ``argmax``, ``argmin``, ``cumsum``,
``cumprod``, ``logsumexp``, ``average``, ``median``, ``quantile``, ``percentile``, ``sort``,
``argsort``, ``searchsorted``, ``diff``, ``trapezoid``, ``count_nonzero``.

All are composites of primitives, so their derivatives are those of the primitives; ``sort``,
``argsort``, ``median`` and ``quantile`` bind the ``sort`` primitive
(``quabla/core/rules/sort.py``). Index-valued results (``argmax``, ``argmin``, ``argsort``,
``searchsorted``) are float64 arrays of whole numbers, without derivative: Quabla has no
integer dtype. How each is built, and why:

- ``prod``: pairwise products of halves (log2 n levels of multiplies), so its gradient is the
  product of the other factors, exact at zeros (no division), as JAX's.
- ``cumsum``/``cumprod``: the doubling scan (log2 n steps, each the array combined with itself
  shifted by 1, 2, 4, ... along the axis), O(n log n) work in fused elementwise steps on every
  back end; sums are associated differently from NumPy's running sum (a few ulps).
- ``argmax``/``argmin``: the smallest position at which the extremum is attained (NaN first
  if there is one, as NumPy), a ``min`` over positions.
- ``searchsorted``: counts of comparisons against every element of the sorted array
  (O(len(a) * len(v)) work, fused into one reduction; JAX's "compare_all" method).
- ``logsumexp``: the maximum (finite, without derivative) subtracted before ``exp``.
"""

import builtins
import math
import numbers

import numpy as np

from . import dtypes as _dt
from . import ops
from .array import Array, Tensor
from .core.tracing import TraceTensor, bind
from .indexing import subscript
from .ops import as_array, normalize_axes, normalize_axis, promote, summand
from .special import logsumexp  # one implementation: jax.numpy, jax.nn and jax.scipy share it

__all__ = [
    "prod", "var", "std", "argmax", "argmin", "cumsum", "cumprod", "logsumexp", "average",
    "median", "quantile", "percentile", "sort", "argsort", "searchsorted", "diff",
    "trapezoid", "count_nonzero",
]


# -- helpers ----------------------------------------------------------------------------------

def _floating(x, name, dtype=None):
    """``x`` as a floating array (a bool_ one as float64, as NumPy's arithmetic reductions)."""
    (x,) = promote(name, (summand(x, dtype),))
    return x


def _to_last(x, axes):
    """``x`` with ``axes`` (sorted) moved to the end and merged into one axis."""
    rest = [d for d in range(x.ndim) if d not in axes]
    x = ops.transpose(x, tuple(rest) + tuple(axes))
    n = math.prod(x.shape[len(rest):])
    return ops.reshape(x, tuple(x.shape[:len(rest)]) + (n,))


def _keep(out, x_shape, axes):
    """``out`` (reduced over ``axes``) with size-1 axes in their place (``keepdims``)."""
    return ops.reshape(out, tuple(1 if d in axes else n for d, n in enumerate(x_shape)))


def _last(x, start, stop=None, step=1):
    """``x[..., start:stop:step]``."""
    return subscript(x, (Ellipsis, slice(start, stop, step)))


def _positions(n, dtype=_dt.float64):
    return Tensor.wrap(np.arange(n, dtype=dtype.numpy))


def _move(x, axis, to):
    """``x`` with axis ``axis`` moved to the place ``to`` (either may count from the end)."""
    axis %= x.ndim
    perm = [d for d in range(x.ndim) if d != axis]
    perm.insert(to % x.ndim, axis)
    return ops.transpose(x, tuple(perm))


def _index_result(x):
    """An index-valued result: float64, no derivative."""
    return ops.stop_gradient(ops.astype(x, _dt.float64))


# -- products ---------------------------------------------------------------------------------

def _tree(x, combine, unit):
    """``combine`` over the last axis of ``x`` by halves: the axis padded with ``unit`` to a
    power of two, then halved log2 n times."""
    n = x.shape[-1]
    width = 1 << builtins.max(n - 1, 0).bit_length()
    if width != n:
        pad = ops.broadcast_to(ops.weak_scalar(unit, x.dtype), tuple(x.shape[:-1]) + (width - n,))
        x = ops.concat([x, pad], axis=-1)
    while width > 1:
        width //= 2
        x = combine(_last(x, 0, width), _last(x, width))
    return ops.reshape(x, tuple(x.shape[:-1]))


def prod(a, axis=None, keepdims=False, *, dtype=None, where=None, initial=None):
    """The product over ``axis`` (int, tuple, None; a bool_ array as float64). Pairwise
    products of halves: the gradient is the product of the other factors, exact at zeros."""
    x = _floating(a, "prod", dtype)
    axes = normalize_axes(axis, x.ndim, "prod")
    if where is not None:
        x = ops.where(ops.broadcast_to(ops.as_bool(where, "prod"), x.shape), x, 1.0)
    if axes:
        out = _tree(_to_last(x, axes), ops.multiply, 1.0)
    else:
        out = x
    if initial is not None:
        out = ops.multiply(out, initial)
    return _keep(out, x.shape, axes) if keepdims else out


# -- moments ----------------------------------------------------------------------------------

def _count(x, axes, where, keepdims):
    """How many elements each reduction over ``axes`` takes (a Python float without ``where``)."""
    if where is None:
        return float(math.prod(x.shape[d] for d in axes))
    mask = ops.broadcast_to(ops.as_bool(where, "var"), x.shape)
    return ops.astype(ops.sum(mask, axes, keepdims), x.dtype)


def var(a, axis=None, dtype=None, ddof=0, keepdims=False, *, where=None, correction=None):
    """The variance over ``axis``: the mean of squared deviations from the mean, divided by
    ``count - ddof`` (``correction`` is the Array API's name for ``ddof``)."""
    if correction is not None:
        if ddof:
            raise ValueError("quabla.var: give ddof or correction, not both")
        ddof = correction
    x = _floating(a, "var", dtype)
    axes = normalize_axes(axis, x.ndim, "var")
    centered = ops.subtract(x, ops.mean(x, axes, True, where=where))
    total = ops.sum(ops.multiply(centered, centered), axes, keepdims, where=where)
    count = _count(x, axes, where, keepdims)
    return ops.divide(total, ops.subtract(count, ddof) if where is not None else
                      builtins.max(count - ddof, 0.0))


def std(a, axis=None, dtype=None, ddof=0, keepdims=False, *, where=None, correction=None):
    """The standard deviation: ``sqrt(var(...))`` (its derivative is infinite where it is 0,
    as JAX's)."""
    return ops.sqrt(var(a, axis, dtype, ddof, keepdims, where=where, correction=correction))


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """The weighted mean over ``axis``: ``sum(a * w) / sum(w)``. ``weights`` has the shape
    of ``a``, or is 1-d along a single ``axis``. ``returned=True`` also gives ``sum(w)``
    (broadcast to the result's shape)."""
    x = _floating(a, "average")
    axes = normalize_axes(axis, x.ndim, "average")
    if weights is None:
        avg = ops.mean(x, axes, keepdims)
        if not returned:
            return avg
        return avg, ops.broadcast_to(ops.astype(_count(x, axes, None, keepdims), x.dtype),
                                     avg.shape)
    (w,) = promote("average", (summand(weights),))
    if tuple(w.shape) != tuple(x.shape):
        if axis is None:
            raise TypeError("quabla.average: axis must be given when the shapes of a and "
                            "weights differ")
        if w.ndim != 1 or len(axes) != 1 or w.shape[0] != x.shape[axes[0]]:
            raise ValueError(f"quabla.average: weights of shape {list(w.shape)} do not match "
                             f"a {list(x.shape)} along axis {axis}")
        shape = [1] * x.ndim
        shape[axes[0]] = w.shape[0]
        w = ops.reshape(w, tuple(shape))
    x, w = promote("average", (x, w))
    scale = ops.sum(ops.broadcast_to(w, x.shape), axes, keepdims)
    avg = ops.divide(ops.sum(ops.multiply(x, w), axes, keepdims), scale)
    return (avg, ops.broadcast_to(scale, avg.shape)) if returned else avg


# -- positions of extrema -----------------------------------------------------------------------

def _arg_extremum(a, axis, keepdims, reduce, name):
    x = _floating(a, name)
    if axis is None:
        x = ops.reshape(x, (x.size,))
        axis_ = 0
    else:
        axis_ = normalize_axis(axis, x.ndim, name)
    n = x.shape[axis_] if x.ndim else 1
    if x.size == 0 or n == 0:
        raise ValueError(f"quabla.{name}: attempt to get {name} of an empty sequence")
    if x.ndim == 0:
        return Tensor.wrap(np.zeros((), np.float64))
    extremum = reduce(x, axis_, True)
    hit = ops.logical_or(ops.equal(x, extremum), ops.isnan(x))  # NaN first, as NumPy
    shape = [1] * x.ndim
    shape[axis_] = n
    where_ = ops.broadcast_to(ops.reshape(_positions(n), tuple(shape)), x.shape)
    first = ops.min(ops.where(hit, where_, float(n)), axis_, keepdims)
    if keepdims and axis is None:
        first = ops.reshape(first, (1,) * as_array(a).ndim)
    return _index_result(first)


def argmax(a, axis=None, keepdims=False):
    """The position of the first maximum along ``axis`` (of the flattened array for None;
    the first NaN if there is one), a float64 whole number without derivative."""
    return _arg_extremum(a, axis, keepdims, ops.max, "argmax")


def argmin(a, axis=None, keepdims=False):
    """The position of the first minimum along ``axis`` (the first NaN if there is one)."""
    return _arg_extremum(a, axis, keepdims, ops.min, "argmin")


def count_nonzero(a, axis=None, keepdims=False):
    """How many elements along ``axis`` are not zero (false), as float64."""
    x = as_array(a)
    nonzero = x if x.dtype is _dt.bool_ else ops.not_equal(x, 0.0)
    return ops.sum(nonzero, axis, keepdims)


# -- scans --------------------------------------------------------------------------------------

def _scan_axis(a, axis, dtype, name):
    x = _floating(a, name, dtype)
    if axis is None:
        return ops.reshape(x, (x.size,)), 0
    return x, normalize_axis(axis, x.ndim, name)


def _doubling(x, axis, combine, unit):
    """The inclusive scan of ``combine`` along ``axis``: step k combines every element with
    the one 2**k before it (``unit`` before the start)."""
    n = x.shape[axis]
    shift = 1
    while shift < n:
        before = [slice(None)] * x.ndim
        before[axis] = slice(0, n - shift)
        fill = list(x.shape)
        fill[axis] = shift
        head = ops.broadcast_to(ops.weak_scalar(unit, x.dtype), tuple(fill))
        x = combine(x, ops.concat([head, subscript(x, tuple(before))], axis=axis))
        shift *= 2
    return x


def cumsum(a, axis=None, dtype=None):
    """Running sums along ``axis`` (of the flattened array for None; bool_ counts)."""
    x, axis = _scan_axis(a, axis, dtype, "cumsum")
    return _doubling(x, axis, ops.add, 0.0)


def cumprod(a, axis=None, dtype=None):
    """Running products along ``axis``; derivatives exact at zeros (products only)."""
    x, axis = _scan_axis(a, axis, dtype, "cumprod")
    return _doubling(x, axis, ops.multiply, 1.0)


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """The ``n``-th differences along ``axis``, with ``prepend``/``append`` joined first
    (scalars are broadcast to one slice); of a bool_ array, ``!=`` as NumPy."""
    x = as_array(a)
    if x.ndim == 0:
        raise ValueError("quabla.diff needs an array of rank >= 1")
    if not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"quabla.diff: order n must be a non-negative int, got {n!r}")
    axis = normalize_axis(axis, x.ndim, "diff")
    parts = []
    for extra in (prepend, append):
        if extra is None:
            parts.append(None)
            continue
        (e,) = promote("diff", (extra,), kind="any")
        if e.ndim == 0:
            shape = list(x.shape)
            shape[axis] = 1
            e = ops.broadcast_to(e, tuple(shape))
        parts.append(e)
    joined = [p for p in (parts[0], x, parts[1]) if p is not None]
    if len(joined) > 1:
        x = ops.concat(joined, axis=axis)
    for _ in range(n):
        m = x.shape[axis]
        hi = [slice(None)] * x.ndim
        lo = [slice(None)] * x.ndim
        hi[axis], lo[axis] = slice(1, None), slice(0, m - 1)
        if m <= 1:
            shape = list(x.shape)
            shape[axis] = 0
            raise ValueError("quabla.diff: the result would be empty (Quabla arrays have no "
                             "empty axes)")
        later, earlier = subscript(x, tuple(hi)), subscript(x, tuple(lo))
        x = (ops.not_equal(later, earlier) if x.dtype is _dt.bool_
             else ops.subtract(later, earlier))
    return x


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The trapezoidal rule along ``axis``: sample points ``x`` (1-d, or ``y``'s shape), or a
    spacing ``dx``."""
    y = _floating(y, "trapezoid")
    axis = normalize_axis(axis, y.ndim, "trapezoid")
    if x is None:
        d = dx
    else:
        x = _floating(x, "trapezoid")
        if x.ndim == 1:
            d = diff(x)
            shape = [1] * y.ndim
            shape[axis] = d.shape[0]
            d = ops.reshape(d, tuple(shape))
        else:
            d = diff(x, axis=axis)
    n = y.shape[axis]
    hi = [slice(None)] * y.ndim
    lo = [slice(None)] * y.ndim
    hi[axis], lo[axis] = slice(1, None), slice(0, n - 1)
    mid = ops.add(subscript(y, tuple(hi)), subscript(y, tuple(lo)))
    return ops.sum(ops.divide(ops.multiply(d, mid), 2.0), axis)


# -- sorting ------------------------------------------------------------------------------------

def _sort_rows(rows):
    """The ``sort`` primitive on ``rows`` (*batch, m, n): columns ordered by row 0."""
    return bind("sort", rows)


def _sort_input(a, axis, name):
    """(x, axis): floating (bool_ as float64), flattened for ``axis=None``."""
    x = as_array(a)
    if x.dtype is _dt.bool_:
        x = ops.astype(x, _dt.float64)
    (x,) = promote(name, (x,))
    if axis is None or x.ndim == 0:
        return ops.reshape(x, (x.size,)), 0
    return x, normalize_axis(axis, x.ndim, name)


def sort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """A sorted copy along ``axis`` (of the flattened array for None): ascending, NaN last
    (``descending``: reversed). Stable; its derivative carries each tangent to the element's
    new place (a permutation, as JAX's)."""
    _no_kind("sort", kind, order)
    x0 = as_array(a)
    x, axis = _sort_input(a, axis, "sort")
    moved = _move(x, axis, -1)
    out = _sort_rows(ops.expand_dims(moved, -2))
    out = ops.reshape(out, tuple(moved.shape))
    if descending:
        out = _last(out, None, None, -1)
    out = _move(out, -1, axis)
    return ops.astype(out, _dt.bool_) if x0.dtype is _dt.bool_ else out


def _no_kind(name, kind, order):
    if kind is not None and kind not in ("stable", "mergesort", "quicksort", "heapsort"):
        raise ValueError(f"quabla.{name}: unknown kind {kind!r}")
    if order is not None:
        raise TypeError(f"quabla.{name}: 'order' (structured arrays) is not supported")


def _order(x):
    """The stable sorting permutation of the last axis of ``x`` (float64 positions)."""
    n = x.shape[-1]
    if x.dtype is _dt.float32 and n > 1 << 24:  # positions must be exact in the rows' dtype
        x = ops.astype(x, _dt.float64)
    positions = ops.broadcast_to(ops.astype(_positions(n), x.dtype), tuple(x.shape))
    rows = ops.stack([ops.stop_gradient(x), positions], axis=-2)
    return subscript(_sort_rows(rows), (Ellipsis, 1, slice(None)))


def argsort(a, axis=-1, *, kind=None, order=None, stable=True, descending=False):
    """The positions that sort ``a`` along ``axis`` (stable: ties in order of position;
    ``descending`` keeps ties in that order too, as JAX), float64, without derivative."""
    _no_kind("argsort", kind, order)
    x, axis = _sort_input(a, axis, "argsort")
    moved = _move(x, axis, -1)
    n = moved.shape[-1]
    if descending:
        moved = _last(moved, None, None, -1)
    perm = _order(moved)
    if descending:
        perm = ops.subtract(float(n - 1), _last(perm, None, None, -1))
    return _index_result(_move(perm, -1, axis))


def searchsorted(a, v, side="left", sorter=None, *, method=None):
    """Where the values ``v`` would be inserted into the ascending 1-d ``a`` (NaN last) to
    keep it sorted: the count of elements before (``side="left"``) or not after (``"right"``)
    each value, float64. ``sorter``: the positions that sort ``a``. Every value is compared
    with every element (O(len(a) * v.size), fused into one reduction)."""
    if side not in ("left", "right"):
        raise ValueError(f"quabla.searchsorted: side must be 'left' or 'right', got {side!r}")
    a, v = promote("searchsorted", (summand(a), summand(v)))
    if a.ndim != 1:
        raise ValueError(f"quabla.searchsorted: a must be 1-d, got shape {list(a.shape)}")
    if sorter is not None:
        (s,) = promote("searchsorted", (summand(sorter),))
        inverse = _order(ops.astype(s, _dt.float64))  # a[sorter] = a ordered by sorter^-1
        rows = ops.stack([ops.astype(inverse, a.dtype), a], axis=0)
        a = subscript(_sort_rows(rows), (1, slice(None)))
    n = a.shape[0]
    flat = ops.reshape(v, (v.size, 1)) if v.ndim else ops.reshape(v, (1, 1))
    row = ops.reshape(a, (1, n))
    a_nan, v_nan = ops.isnan(row), ops.isnan(flat)
    if side == "left":  # a < v, NaN largest
        before = ops.logical_or(ops.less(row, flat),
                                ops.logical_and(v_nan, ops.logical_not(a_nan)))
    else:  # not v < a
        before = ops.logical_not(ops.logical_or(
            ops.less(flat, row), ops.logical_and(a_nan, ops.logical_not(v_nan))))
    counts = ops.sum(before, axis=1)
    return _index_result(ops.reshape(counts, tuple(v.shape)))


# -- quantiles ----------------------------------------------------------------------------------

_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, interpolation=None):
    """The ``q``-th quantiles (``q`` in [0, 1], a number or 1-d array, traced or not) along
    ``axis`` (int, tuple, None) by sorting, with NumPy's ``method``s linear, lower, higher,
    midpoint and nearest (ties to the even position, as NumPy; JAX rounds them down). NaN
    where the data hold NaN. The result's leading axes are those of ``q``."""
    if out is not None:
        raise TypeError("quabla.quantile: out= is not supported (arrays are immutable)")
    method = interpolation or method
    if method not in _METHODS:
        raise ValueError(f"quabla.quantile: method must be one of {_METHODS}, got {method!r}")
    x = _floating(a, "quantile")
    axes = normalize_axes(axis, x.ndim, "quantile")
    flat = _to_last(x, axes) if axes else ops.reshape(x, tuple(x.shape) + (1,))
    ordered = ops.reshape(_sort_rows(ops.expand_dims(flat, -2)), tuple(flat.shape))
    n = ordered.shape[-1]
    if isinstance(q, Array) and type(q) is TraceTensor:
        values = _traced_quantile(ordered, q, method)
    else:
        qs = np.asarray(q.numpy() if isinstance(q, Array) else q, dtype=np.float64)
        if qs.ndim > 1:
            raise ValueError(f"quabla.quantile: q must have rank <= 1, got shape {list(qs.shape)}")
        if not np.all((qs >= 0) & (qs <= 1)):
            raise ValueError("quabla.quantile: q must be in [0, 1]")
        picked = [_static_quantile(ordered, float(p), n, method) for p in qs.reshape(-1)]
        values = ops.stack(picked) if qs.ndim else picked[0]
    nan = ops.any(ops.isnan(flat), axis=-1)
    values = ops.where(ops.broadcast_to(nan, values.shape), math.nan, values)
    if keepdims:
        lead = tuple(values.shape[:values.ndim - (x.ndim - len(axes))])
        values = ops.reshape(values, lead + tuple(1 if d in axes else m
                                                  for d, m in enumerate(x.shape)))
    return values


def _static_quantile(ordered, p, n, method):
    pos = p * (n - 1)
    lo = min(int(math.floor(pos)), n - 1)
    hi = min(lo + 1, n - 1) if pos > lo else lo
    w = pos - lo
    if method == "nearest":
        k = int(np.round(pos))  # half to even, as NumPy
        lo = hi = min(k, n - 1)
    elif method == "lower":
        hi = lo
    elif method == "higher":
        lo = hi
    low = subscript(ordered, (Ellipsis, lo))
    if lo == hi:
        return low
    high = subscript(ordered, (Ellipsis, hi))
    if method == "midpoint":
        return ops.multiply(ops.add(low, high), 0.5)
    return ops.add(ops.multiply(low, 1.0 - w), ops.multiply(high, w))


def _traced_quantile(ordered, q, method):
    """Quantiles at a traced ``q``: the two elements each one needs are picked by comparing
    positions (a sum over ``n`` per quantile, no gather); floor(q * (n - 1)) is a count of
    the positions not above it."""
    (q,) = promote("quantile", (q,))
    if q.ndim > 1:
        raise ValueError(f"quabla.quantile: q must have rank <= 1, got shape {list(q.shape)}")
    n = ordered.shape[-1]
    positions = ops.astype(_positions(n), ordered.dtype)
    pos = ops.multiply(ops.astype(q, ordered.dtype), float(n - 1))
    lo = _whole_part(pos, positions)
    hi = ops.minimum(ops.add(lo, 1.0), float(n - 1))
    w = ops.subtract(pos, lo)
    if method == "nearest":  # ties to the even position, as NumPy
        even = ops.equal(ops.multiply(_whole_part(ops.multiply(lo, 0.5), positions), 2.0), lo)
        up = ops.logical_or(ops.greater(w, 0.5),
                            ops.logical_and(ops.equal(w, 0.5), ops.logical_not(even)))
        lo = hi = ops.where(up, hi, lo)
    elif method == "lower":
        hi = lo
    elif method in ("higher", "midpoint"):
        hi = ops.where(ops.greater(w, 0.0), hi, lo)
        if method == "higher":
            lo = hi
    shape = tuple(q.shape) + tuple(ordered.shape)
    data = ops.broadcast_to(ops.reshape(ordered, (1,) * q.ndim + tuple(ordered.shape)), shape)
    at = ops.broadcast_to(positions, shape)
    tail = (1,) * ordered.ndim

    def pick(k):
        k = ops.broadcast_to(ops.reshape(k, tuple(q.shape) + tail), shape)
        return ops.sum(ops.where(ops.equal(at, k), data, 0.0), axis=-1)

    low, high = pick(lo), pick(hi)
    if method == "midpoint":
        return ops.multiply(ops.add(low, high), 0.5)
    if method != "linear":
        return low
    w = ops.reshape(w, tuple(q.shape) + tail[1:])
    return ops.add(ops.multiply(low, ops.subtract(1.0, w)), ops.multiply(high, w))


def _whole_part(x, positions):
    """floor(x) clamped into [0, n - 1], as a count of the ``positions`` 0..n-1 not above x."""
    shape = tuple(x.shape) + (positions.shape[0],)
    below = ops.less_equal(ops.broadcast_to(positions, shape),
                           ops.broadcast_to(ops.reshape(x, tuple(x.shape) + (1,)), shape))
    return ops.maximum(ops.subtract(ops.astype(ops.sum(below, axis=-1), x.dtype), 1.0), 0.0)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, interpolation=None):
    """``quantile(a, q / 100, ...)``."""
    if isinstance(q, Array):
        q = ops.divide(q, 100.0)
    else:
        q = np.asarray(q, dtype=np.float64) / 100.0
    return quantile(a, q, axis, out, overwrite_input, method, keepdims,
                    interpolation=interpolation)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The median along ``axis`` (NaN where the data hold NaN): ``quantile(a, 0.5, ...)``."""
    return quantile(a, 0.5, axis, out, overwrite_input, "linear", keepdims)
