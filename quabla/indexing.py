"""Building arrays and indexing with arrays (issue 24, item 1), written with the ``gather`` and
``scatter`` primitives (quabla/core/rules/gather.py) and ordinary ops.

- ``qb.array([tracer, 1.0, ...])``: nested lists mixing traced arrays and numbers, stacked
  (``traced_array``); ``zeros_like``, ``ones_like``, ``full_like``, ``empty``, ``empty_like``.
- ``x[idx]`` with index arrays, lists and concrete boolean masks (NumPy's advanced indexing,
  ``getitem``); ``x.at[idx].get/set/add/subtract/multiply/divide/min/max`` (``at``);
  ``take``, ``take_along_axis``, ``dynamic_slice``, ``dynamic_update_slice``.

Every form reduces to one gather or scatter: the axes an index touches (from the first one
that is not a full slice to the last) are merged into one axis of ``x`` (a reshape), the
position each indexed element has along it is computed (NumPy's broadcasting of index arrays,
slices as ranges), the full-slice axes before them are batch axes and those after them whole
rows. Out-of-range indices: reads clamp (JAX's ``x[idx]`` and ``x.at[idx].get()``), updates
are dropped (JAX's ``x.at[idx].set(...)``), ``take``/``take_along_axis`` fill with NaN (JAX's
defaults); ``mode=`` chooses ("clip", "drop"/"fill", "promise_in_bounds" = clip). See
docs/control-flow.md, "Indexing with an array".
"""

import builtins
import math

import numpy as np

from . import dtypes as _dt
from . import ops
from .array import Array, Tensor, array_shape, as_index, asarray, full, zeros
from .array import array as concrete_array
from .core.tracing import TraceTensor, bind

__all__ = ["array", "subscript", "take", "take_along_axis", "dynamic_slice", "dynamic_update_slice", "zeros_like",
           "ones_like", "full_like", "empty", "empty_like"]

_PYTHON_NUMBERS = (bool, int, float)


# -- building ---------------------------------------------------------------------------------

def array(obj, dtype=None):
    """``qb.array``: a new Tensor from concrete data (NumPy data is always copied), or, under a
    transform, ``obj`` a traced array or nested lists/tuples mixing traced arrays and numbers,
    their leaves stacked (``traced_array``)."""
    if not isinstance(obj, Tensor) and has_tracers(obj):
        return traced_array(obj, dtype)
    return concrete_array(obj, dtype)


def has_tracers(obj):
    """Whether ``obj`` is a traced array or a (nested) list/tuple holding one."""
    if isinstance(obj, Array):
        return not isinstance(obj, Tensor)
    if isinstance(obj, (list, tuple)):
        return builtins.any(has_tracers(item) for item in obj)
    return False


def _numbers_only(obj):
    if isinstance(obj, (list, tuple)):
        return builtins.all(_numbers_only(item) for item in obj)
    return isinstance(obj, _PYTHON_NUMBERS) and not isinstance(obj, np.generic)


def traced_array(obj, dtype=None):
    """``qb.array(obj)`` where ``obj`` holds traced arrays: the leaves stacked (one
    ``concatenate`` per level of nesting that holds a tracer). The leaves follow the dtype
    rules of ``qb.stack``: Python numbers (and lists of them) are weak, arrays must agree;
    ``dtype`` converts every leaf first. The result's shape is NumPy's (the nesting, then the
    leaves' common shape)."""
    dtype = None if dtype is None else _dt.dtype(dtype)
    if isinstance(obj, Array):
        return obj if dtype is None else ops.astype(obj, dtype)
    if not obj:
        raise ValueError("zero-extent arrays are not supported (an empty list)")
    parts = []
    for item in obj:
        if isinstance(item, (list, tuple)) and has_tracers(item):
            part = traced_array(item, dtype)
        elif isinstance(item, (list, tuple)):
            part = asarray(item, dtype)
            if dtype is None and _numbers_only(item):
                part = Tensor.wrap(part.value, weak=True)
        elif isinstance(item, Array) or (isinstance(item, _PYTHON_NUMBERS)
                                         and not isinstance(item, np.generic)):
            part = item
        else:  # NumPy arrays and scalars: strong, as qb.array makes them
            part = asarray(item)
        if dtype is not None:
            part = ops.astype(ops.weak_scalar(part, dtype) if isinstance(
                part, _PYTHON_NUMBERS) else part, dtype)
        parts.append(part)
    parts = ops.promote("array", parts, kind="any")
    shapes = {tuple(p.shape) for p in parts}
    if len(shapes) > 1:
        raise ValueError("cannot build an array from ragged or irregular data: elements of "
                         f"shapes {sorted(list(s) for s in shapes)}")
    return ops.stack(parts)


def _like(a, dtype, shape):
    a = a if isinstance(a, Array) else asarray(a)
    dtype = a.dtype if dtype is None else _dt.dtype(dtype)
    shape = tuple(a.shape) if shape is None else array_shape(shape)
    return dtype, shape


def zeros_like(a, dtype=None, shape=None):
    """Zeros of ``a``'s shape and dtype (or ``dtype``, ``shape``): a concrete Tensor, also
    for a traced ``a`` (only its shape and dtype are read)."""
    dtype, shape = _like(a, dtype, shape)
    return zeros(shape, dtype)


def ones_like(a, dtype=None, shape=None):
    """An array of ones with the shape and dtype of ``a`` (or those given)."""
    dtype, shape = _like(a, dtype, shape)
    return full(shape, True if dtype is _dt.bool_ else 1.0, dtype)


def full_like(a, fill_value, dtype=None, shape=None):
    """``fill_value`` (a number, or an array broadcast, traced too) in ``a``'s shape and dtype
    (or ``dtype``, ``shape``)."""
    dtype, shape = _like(a, dtype, shape)
    if isinstance(fill_value, (Array, np.ndarray, list, tuple)):
        return ops.broadcast_to(ops.astype(ops.as_array(fill_value), dtype), shape)
    return full(shape, fill_value, dtype)


def empty(shape, dtype=None):
    """Zeros: Quabla arrays are always initialised (``empty`` is NumPy's name)."""
    return zeros(shape, dtype)


def empty_like(prototype, dtype=None, shape=None):
    """``zeros_like``: Quabla arrays are always initialised."""
    return zeros_like(prototype, dtype, shape)


# -- parsing an index -------------------------------------------------------------------------
# An entry per item of the index: ("none",), ("slice", s), ("int", i) (a static Python int),
# ("adv", a) (an index array: Tensor or traced, floating), ("rows", a) (an index array whose
# values are already rows in range: dynamic_slice's), ("ellipsis",) until it is expanded
# (("gap",) where it stands for no axis: it still separates index arrays).

def subscript(x, index):
    """``x[index]`` (the arrays' ``__getitem__``): NumPy's advanced indexing here (a gather),
    basic indexing (scalar array indices included) by ``ops.getitem``."""
    items = index if isinstance(index, tuple) else (index,)
    if builtins.any(is_array_index(item) for item in items):
        return getitem(x, items)
    return ops.getitem(x, index)


def is_array_index(item):
    """Whether ``getitem`` needs this module for ``item``: an index array or list, a mask."""
    if isinstance(item, (list, tuple, np.ndarray)):
        return True
    return isinstance(item, Array) and (item.ndim > 0 or item.dtype is _dt.bool_)


def _whole(values, what):
    values = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(values) & (values == np.floor(values))):
        bad = values[~(np.isfinite(values) & (values == np.floor(values)))].reshape(-1)[0]
        raise TypeError(f"{what} must hold whole numbers, got {float(bad)!r} (a traced index "
                        "is rounded down)")
    return values


def _mask_entries(mask, traced):
    if traced:
        raise TypeError(
            "a boolean mask index needs a concrete mask: the result's shape depends on its "
            "values. Under a transform use quabla.where(mask, x, other) (elementwise "
            "selection), or quabla.sum(quabla.where(mask, x, 0.0)) for a masked reduction")
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim == 0:
        raise TypeError("a bool index (x[True], x[False]) is not supported")
    hits = np.nonzero(mask)
    if hits[0].size == 0:
        raise ValueError("the mask selects no elements (zero-extent arrays are unsupported)")
    return [("adv", Tensor.wrap(h.astype(np.float64), weak=True), n)
            for h, n in zip(hits, mask.shape)]


def _entry(item):
    """The entries of one index item (a mask gives one per axis it covers)."""
    if item is None:
        return [("none",)]
    if item is Ellipsis:
        return [("ellipsis",)]
    if isinstance(item, slice):
        return [("slice", item)]
    if isinstance(item, (bool, np.bool_)):
        raise TypeError("a bool index (x[True], x[False]) is not supported")
    if isinstance(item, (list, tuple)):
        if has_tracers(item):
            return _entry(array(item))
        item = np.asarray(item)
        if item.dtype == object:
            raise TypeError("an index list must hold numbers or bools (a nested list of "
                            "slices is not an index)")
    if isinstance(item, np.ndarray):
        if item.dtype == np.bool_:
            return _mask_entries(item, False)
        if item.dtype.kind not in "iuf":
            raise TypeError(f"an index array must hold numbers, got dtype {item.dtype}")
        if item.size == 0:
            raise ValueError("an empty index array (zero-extent arrays are unsupported)")
        return [("adv", Tensor.wrap(_whole(item, "an index array").copy(), weak=True))]
    if isinstance(item, Array):
        traced = isinstance(item, TraceTensor) or not isinstance(item, Tensor)
        if item.dtype is _dt.bool_:
            return _mask_entries(None if traced else item.numpy(), traced)
        if not traced:
            _whole(item.numpy(), "an array index")
        return [("adv", item)]
    return [("int", as_index(item))]


def entries_of(x, index):
    """The entries of ``index`` (a tuple or one item) against ``x``, one per axis of ``x``
    (plus the None ones): the ellipsis expanded, full slices appended."""
    if not isinstance(index, tuple):
        index = (index,)
    entries = [e for item in index for e in _entry(item)]
    if builtins.sum(1 for e in entries if e[0] == "ellipsis") > 1:
        raise IndexError("an index can only have a single ellipsis")
    used = builtins.sum(1 for e in entries if e[0] not in ("none", "ellipsis"))
    if used > x.ndim:
        raise IndexError(f"too many indices for an array of rank {x.ndim}")
    full_slices = [("slice", slice(None))] * (x.ndim - used)
    at = next((k for k, e in enumerate(entries) if e[0] == "ellipsis"), None)
    if at is None:
        entries = entries + full_slices
    else:  # an ellipsis of no axes still separates index arrays (NumPy's and JAX's layout)
        gap = [("gap",)] if 0 < at < len(entries) - 1 else []
        entries = entries[:at] + (full_slices or gap) + entries[at + 1:]
    axis = 0
    for e in entries:
        if e[0] in ("none", "gap"):
            continue
        if len(e) == 3 and e[2] != x.shape[axis]:
            raise IndexError(f"boolean index did not match indexed array along axis {axis}; "
                             f"size of axis is {x.shape[axis]} but size of corresponding "
                             f"boolean axis is {e[2]}")
        axis += 1
    return [e[:2] for e in entries]


# -- rows: index values made rows of an axis of n --------------------------------------------

def _check_mode(mode, default, name):
    """The mode an op runs in: "clip" or "drop" ("fill" for reads)."""
    if mode is None:
        return default
    if not isinstance(mode, str) or mode not in ("clip", "drop", "fill", "promise_in_bounds"):
        raise ValueError(f"quabla.{name}: mode must be 'clip', 'drop', 'fill' or "
                         f"'promise_in_bounds', got {mode!r}")
    return {"fill": "drop", "promise_in_bounds": "clip"}.get(mode, mode)


def _static_row(i, n, mode, wrap, strict):
    """(row, valid) of a Python int index."""
    if strict:
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for an axis of size {n}")
        return i % n, True
    k = i + n if (wrap and i < 0) else i
    if mode == "clip":
        return builtins.min(builtins.max(k, 0), n - 1), True
    valid = 0 <= k < n
    return (k if valid else 0), valid


def _rows(value, n, mode, wrap):
    """(rows, valid) of an index array: NumPy arrays for a concrete one (valid None when
    every index is in range), arrays of ``value``'s dtype for a traced one. Rounded down,
    negatives from the end when ``wrap``; "clip" clamps into [0, n - 1] (NaN: 0), "drop"
    marks the others invalid (their row is 0)."""
    if isinstance(value, Tensor):
        v = np.floor(np.asarray(value.numpy(), dtype=np.float64))
        if wrap:
            v = np.where(v < 0, v + n, v)
        if mode == "clip":
            return np.clip(np.nan_to_num(v, nan=0.0), 0, n - 1), None
        valid = (v >= 0) & (v < n)
        return np.where(valid, v, 0.0), (None if valid.all() else valid)
    k = ops.floor(value)
    if wrap:
        k = ops.where(ops.less(k, 0.0), ops.add(k, float(n)), k)
    if mode == "clip":
        return ops.clip(ops.where(ops.isnan(k), 0.0, k), 0.0, float(n - 1)), None
    valid = ops.logical_and(ops.greater_equal(k, 0.0), ops.less(k, float(n)))
    return ops.where(valid, k, 0.0), valid


# -- the plan: one gather/scatter for an index --------------------------------------------------

class _Plan:
    """How an index reads ``x``: ``x`` reshaped to ``merged`` = (*lead, N, *trail), the
    ``lead`` leading axes batch axes, ``positions`` (of shape ``pshape``) the elements along
    the merged axis, ``valid`` (None, or a bool array of ``pshape``) those in range, ``perm``
    (None, or the transposition from (*lead, *pshape, *trail) to NumPy's order) and ``shape``
    (NumPy's result shape)."""

    __slots__ = ("lead", "merged", "positions", "pshape", "valid", "perm", "shape")


def _place(values, s_at, s_len, ndim):
    """``values`` (broadcastable to S, right-aligned) reshaped into the layout: S at
    ``s_at``, ``ndim`` axes in all."""
    shape = (1,) * (s_len - values.ndim) + tuple(values.shape)
    shape = (1,) * s_at + shape + (1,) * (ndim - s_at - s_len)
    if isinstance(values, np.ndarray):
        return values.reshape(shape)
    return ops.reshape(values, shape) if tuple(values.shape) != shape else values


def plan(x, entries, mode="clip", wrap=True, strict=False):
    """The ``_Plan`` of ``entries`` (``entries_of``) on ``x``, or None when every entry is a
    full slice. ``strict``: a Python int out of range is an IndexError (NumPy's ``x[i]``);
    otherwise it follows ``mode`` as arrays do (``x.at[i]``)."""
    shape = tuple(x.shape)
    ndim = len(shape)
    axes, d = [], 0
    for e in entries:
        axes.append(None if e[0] in ("none", "gap") else d)
        d += e[0] not in ("none", "gap")

    def is_full(j):
        e = entries[j]
        return e[0] == "slice" and e[1].indices(shape[axes[j]]) == (0, shape[axes[j]], 1)

    lead = 0
    while lead < len(entries) and is_full(lead):
        lead += 1
    if lead == len(entries):
        return None
    trail = 0
    while is_full(len(entries) - 1 - trail):
        trail += 1
    middle = list(range(lead, len(entries) - trail))
    end = ndim - trail
    strides = {a: math.prod(shape[a + 1:end]) for a in range(lead, end)}
    has_adv = builtins.any(entries[j][0] in ("adv", "rows") for j in middle)
    adv = [j for j in middle if entries[j][0] in ("adv", "rows")
           or (has_adv and entries[j][0] == "int")]
    basic = [j for j in middle if j not in adv and entries[j][0] in ("slice", "none")]
    try:
        s_shape = np.broadcast_shapes(*[() if entries[j][0] == "int" else tuple(entries[j][1].shape)
                                        for j in adv])
    except ValueError:
        raise IndexError("shape mismatch: indexing arrays could not be broadcast together with "
                         "shapes " + " ".join(str(list(entries[j][1].shape)) for j in adv
                                              if entries[j][0] != "int")) from None
    adjacent = adv == list(range(adv[0], adv[-1] + 1)) if adv else True
    if not adv:
        layout = basic
    elif adjacent:
        layout = [j for j in basic if j < adv[0]] + ["S"] + [j for j in basic if j > adv[-1]]
    else:
        layout = ["S"] + basic
    pshape, slot, s_at = [], {}, 0
    for item in layout:
        if item == "S":
            s_at = len(pshape)
            pshape += list(s_shape)
            continue
        e = entries[item]
        slot[item] = len(pshape)
        if e[0] == "none":
            pshape.append(1)
        else:
            count = len(range(*e[1].indices(shape[axes[item]])))
            if count == 0:
                raise IndexError("the slice selects no elements (zero-extent arrays are "
                                 "unsupported)")
            pshape.append(count)
    pshape = tuple(pshape)
    rank = len(pshape)

    p = _Plan()
    p.lead = lead
    p.merged = shape[:lead] + (math.prod(shape[lead:end]),) + shape[end:]
    p.pshape = pshape
    if adv and not adjacent and lead and s_shape:
        s = len(s_shape)
        p.perm = (tuple(range(lead, lead + s)) + tuple(range(lead))
                  + tuple(range(lead + s, lead + rank + trail)))
    else:
        p.perm = None
    ours = shape[:lead] + pshape + shape[end:]
    p.shape = ours if p.perm is None else tuple(ours[a] for a in p.perm)

    single = len(middle) == 1 and adv == middle and entries[middle[0]][0] != "int"
    if single and (entries[middle[0]][0] == "rows" or (mode == "clip" and wrap)):
        # one index array on one axis: the primitive clamps it itself
        p.positions, p.valid = entries[middle[0]][1], None
        return p

    static = np.zeros((1,) * rank)
    static_valid = np.ones((1,) * rank, dtype=bool)
    traced, traced_valid = [], []
    for j in middle:
        e = entries[j]
        if e[0] in ("none", "gap"):
            continue
        n, stride = shape[axes[j]], strides[axes[j]]
        if j in adv:
            if e[0] == "int":
                row, ok = _static_row(e[1], n, mode, wrap, strict)
                static = static + row * stride
                static_valid = static_valid & ok
                continue
            if e[0] == "rows":
                rows, ok = (e[1].numpy() if isinstance(e[1], Tensor) else e[1]), None
            else:
                rows, ok = _rows(e[1], n, mode, wrap)
            rows = _place(rows, s_at, len(s_shape), rank)
            if isinstance(rows, np.ndarray):
                static = static + rows * stride
            else:
                if math.prod(p.merged) >= 2 ** 24 and rows.dtype is not _dt.float64:
                    rows = ops.astype(rows, _dt.float64)
                traced.append(ops.multiply(rows, float(stride)) if stride != 1 else rows)
            if ok is not None:
                ok = _place(ok, s_at, len(s_shape), rank)
                if isinstance(ok, np.ndarray):
                    static_valid = static_valid & ok
                else:
                    traced_valid.append(ok)
        elif e[0] == "slice":
            rows = np.arange(*e[1].indices(n), dtype=np.float64)
            at = [1] * rank
            at[slot[j]] = len(rows)
            static = static + rows.reshape(at) * stride
        else:  # a basic int (no index array in the index)
            row, ok = _static_row(e[1], n, mode, wrap, strict)
            static = static + row * stride
            static_valid = static_valid & ok
    constant = Tensor.wrap(np.array(np.broadcast_to(static, pshape), np.float64, order="C"),
                           weak=True)
    if traced:
        positions = traced[0]
        for t in traced[1:]:
            positions = ops.add(positions, t)
        if np.any(static):
            positions = ops.add(positions, constant)
        p.positions = ops.broadcast_to(positions, pshape)
    else:
        p.positions = constant
    valid = None if static_valid.all() else Tensor.wrap(
        np.array(np.broadcast_to(static_valid, pshape), order="C"))
    for ok in traced_valid:
        valid = ok if valid is None else ops.logical_and(valid, ok)
    p.valid = None if valid is None else ops.broadcast_to(valid, pshape)
    return p


def _positions(x, p):
    """The gather/scatter operands of plan ``p``: ``x`` merged, the positions per batch."""
    y = ops.reshape(x, p.merged)
    positions = p.positions
    if p.lead:
        positions = ops.broadcast_to(positions, tuple(x.shape[:p.lead]) + p.pshape)
    return y, positions


def _spread(mask, p, shape):
    """A bool array of ``p.pshape`` over the (*lead, *pshape, *trail) layout ``shape``."""
    mask = ops.reshape(mask, (1,) * p.lead + p.pshape
                       + (1,) * (len(shape) - p.lead - len(p.pshape)))
    return ops.broadcast_to(mask, shape)


def _fill_value(dtype, fill_value):
    if fill_value is None:
        return True if dtype is _dt.bool_ else math.nan
    return fill_value


def read(x, entries, mode="clip", fill_value=None, wrap=True, strict=False):
    """``x`` at ``entries``: one gather (out-of-range elements ``fill_value`` under "drop")."""
    p = plan(x, entries, mode, wrap, strict)
    if p is None:
        return x
    y, positions = _positions(x, p)
    out = bind("gather", y, positions, batch_dims=p.lead)
    if p.valid is not None:
        out = ops.where(_spread(p.valid, p, tuple(out.shape)), out,
                        _fill_value(x.dtype, fill_value))
    if p.perm is not None:
        out = ops.transpose(out, p.perm)
    return out


def getitem(x, index):
    """NumPy's advanced indexing, for ``ops.getitem``: index arrays (Tensors, traced arrays,
    lists, NumPy arrays) broadcast together, Python ints among them, slices, None and an
    ellipsis; a concrete boolean mask stands for the positions of its true elements (NumPy's
    result; a traced one is a TypeError, its result's shape being unknown). Indices clamp
    (JAX's ``x[idx]``); a Python int out of range is an IndexError, as in basic indexing."""
    return read(x, entries_of(x, index), "clip", strict=True)


_IDENTITY = {"add": -0.0, "mul": 1.0, "min": math.inf, "max": -math.inf}


def _combine(x, v, op):
    if op == "set":
        return v
    return {"add": ops.add, "mul": ops.multiply, "min": ops.minimum, "max": ops.maximum}[op](x, v)


def write(x, entries, v, op, mode="drop", wrap=True, name="at"):
    """``x`` with the elements at ``entries`` combined with ``v`` by ``op`` ("set", "add",
    "mul", "min", "max"): one scatter. Under "drop", out-of-range updates do nothing: an
    identity update for the combining ops, a spare row for "set" (written, then cut off)."""
    x = ops.as_array(x)
    if not isinstance(v, Array) and not isinstance(v, _PYTHON_NUMBERS):
        v = asarray(v, x.dtype)  # NumPy data and lists: constants in x's dtype
    x, v = ops.promote(f"{name}", (x, v), kind="float" if op != "set" else "any")
    p = plan(x, entries, mode, wrap)
    if p is None:  # every element
        return ops.broadcast_to(_combine(x, ops.broadcast_to(v, tuple(x.shape)), op),
                                tuple(x.shape))
    try:
        v = ops.broadcast_to(v, p.shape)
    except ValueError:
        raise ValueError(f"quabla.{name}: updates of shape {list(v.shape)} do not broadcast "
                         f"to the indexed shape {list(p.shape)}") from None
    if p.perm is not None:
        v = ops.transpose(v, tuple(int(a) for a in np.argsort(p.perm)))
    y, positions = _positions(x, p)
    spare = False
    if p.valid is not None:
        valid = _spread(p.valid, p, tuple(v.shape))
        if op != "set":
            v = ops.where(valid, v, _IDENTITY[op])
        elif math.prod(p.pshape) == 1:  # one update: an invalid one writes its row back
            v = ops.where(valid, v, bind("gather", y, positions, batch_dims=p.lead))
        else:
            spare = True
            n = p.merged[p.lead]
            extra = list(p.merged)
            extra[p.lead] = 1
            y = ops.concat([y, ops.broadcast_to(ops.weak_scalar(0, y.dtype)
                                                if y.dtype is not _dt.bool_ else False,
                                                tuple(extra))], axis=p.lead)
            positions = ops.where(_spread(p.valid, p, tuple(positions.shape)), positions,
                                  float(n))
    out = bind("scatter", y, positions, v, batch_dims=p.lead, mode=op)
    if spare:
        out = ops.getitem(out, (slice(None),) * p.lead + (slice(0, n),))
    return ops.reshape(out, tuple(x.shape))


# -- x.at[...] ----------------------------------------------------------------------------------

class IndexUpdateHelper:
    """``x.at``: ``x.at[idx]`` is an ``IndexUpdateRef``."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index):
        return IndexUpdateRef(self.array, index)

    def __repr__(self):
        return f"_IndexUpdateHelper({self.array!r})"


class IndexUpdateRef:
    """``x.at[idx]``: the pure forms of ``x[idx]``, ``x[idx] = v``, ``x[idx] += v``, ... (JAX's
    ``x.at``). Each returns a new array. ``idx`` is any index ``x[idx]`` takes (ints, traced
    scalars, index arrays and lists, slices, None, an ellipsis, concrete masks, tuples of
    these). Repeated indices apply every update, in the C order of the indexed elements (the
    last ``set`` wins). ``mode``: as JAX, reads clamp out-of-range indices and updates drop
    them by default; "clip" clamps, "drop"/"fill" drops (``get``: ``fill_value``, NaN by
    default), "promise_in_bounds" clamps (no check). ``wrap_negative_indices=False`` makes
    negative indices out of range. ``indices_are_sorted`` and ``unique_indices`` are accepted
    and ignored (they are hints)."""

    __slots__ = ("array", "index")

    def __init__(self, array, index):
        self.array = array
        self.index = index

    def __repr__(self):
        return f"_IndexUpdateRef({self.array!r}, {self.index!r})"

    def get(self, *, mode=None, fill_value=None, indices_are_sorted=False,
            unique_indices=False, wrap_negative_indices=True):
        """``x[idx]``, out-of-range indices clamped (or filled under ``mode="fill"``)."""
        del indices_are_sorted, unique_indices
        x = ops.as_array(self.array)
        mode = _check_mode(mode, "clip", "at[].get")
        return read(x, entries_of(x, self.index), mode, fill_value, wrap_negative_indices)

    def _update(self, values, op, mode, wrap, name):
        x = ops.as_array(self.array)
        mode = _check_mode(mode, "drop", f"at[].{name}")
        return write(x, entries_of(x, self.index), values, op, mode, wrap, f"at[].{name}")

    def set(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False,
            wrap_negative_indices=True):
        """``x[idx] = values`` (the last of repeated indices wins)."""
        return self._update(values, "set", mode, wrap_negative_indices, "set")

    def add(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False,
            wrap_negative_indices=True):
        """``x[idx] += values``, every repeated index adding."""
        return self._update(values, "add", mode, wrap_negative_indices, "add")

    def subtract(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False,
                 wrap_negative_indices=True):
        return self._update(ops.negative(values), "add", mode, wrap_negative_indices,
                            "subtract")

    def multiply(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False,
                 wrap_negative_indices=True):
        """``x[idx] *= values``. Its derivative in ``values`` is JAX's: exact for distinct
        indices (see quabla/core/rules/gather.py for repeated ones)."""
        return self._update(values, "mul", mode, wrap_negative_indices, "multiply")

    mul = multiply

    def divide(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False,
               wrap_negative_indices=True):
        """``x[idx] /= values``: ``x`` divided by the product of the updates (JAX's form)."""
        x = ops.as_array(self.array)
        ones = ops.broadcast_to(ops.weak_scalar(1, x.dtype) if x.dtype.is_floating else 1.0,
                                tuple(x.shape))
        ref = IndexUpdateRef(ones, self.index)
        return ops.divide(x, ref._update(values, "mul", mode, wrap_negative_indices, "divide"))

    def _rewrite(self, func, mode, wrap, name):
        """``x[idx] = func(x[idx])``, once per distinct index (the read clamps; the write
        follows ``mode``)."""
        current = self.get(mode="clip", wrap_negative_indices=wrap)
        return self._update(func(current), "set", mode, wrap, name)

    def power(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False,
              wrap_negative_indices=True):
        """``x[idx] **= values``, once per distinct index (JAX leaves repeated indices
        unspecified; here the last of their values wins)."""
        return self._rewrite(lambda v: ops.power(v, values), mode, wrap_negative_indices,
                             "power")

    def apply(self, func, *, mode=None, indices_are_sorted=False, unique_indices=False,
              wrap_negative_indices=True):
        """``x[idx] = func(x[idx])`` for an elementwise ``func``, once per distinct index."""
        return self._rewrite(func, mode, wrap_negative_indices, "apply")

    def min(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False,
            wrap_negative_indices=True):
        """``x[idx] = minimum(x[idx], values)`` (NaN propagates)."""
        return self._update(values, "min", mode, wrap_negative_indices, "min")

    def max(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False,
            wrap_negative_indices=True):
        """``x[idx] = maximum(x[idx], values)`` (NaN propagates)."""
        return self._update(values, "max", mode, wrap_negative_indices, "max")


# -- take, take_along_axis ----------------------------------------------------------------------

def _index_array(indices, name):
    """An index argument as an index array (0-d for a number): Tensor or traced, floating."""
    if isinstance(indices, Array):
        if indices.dtype is _dt.bool_:
            raise TypeError(f"quabla.{name}: indices must be numbers, got bool_")
        if isinstance(indices, Tensor):
            _whole(indices.numpy(), f"quabla.{name}: indices")
        return indices
    if isinstance(indices, (list, tuple)) and has_tracers(indices):
        return _index_array(array(indices), name)
    values = np.asarray(indices)
    if values.dtype.kind not in "iuf" or values.size == 0:
        raise TypeError(f"quabla.{name}: indices must be a non-empty array of numbers")
    return Tensor.wrap(_whole(values, f"quabla.{name}: indices").copy(), weak=True)


def _take_mode(mode, name):
    if mode is None or mode == "fill":
        return "drop"
    if mode in ("clip", "promise_in_bounds"):
        return "clip"
    if mode == "wrap":
        return "wrap"
    if mode == "raise":
        raise NotImplementedError(f"quabla.{name}: mode='raise' cannot be checked in compiled "
                                  "code; use 'fill' (the default), 'clip' or 'wrap'")
    raise ValueError(f"quabla.{name}: mode must be 'fill', 'clip', 'wrap' or "
                     f"'promise_in_bounds', got {mode!r}")


def _wrapped(idx, n):
    """NumPy's mode="wrap": the index modulo n."""
    if isinstance(idx, Tensor):
        return Tensor.wrap(np.mod(np.floor(idx.numpy().astype(np.float64)), n), weak=True)
    return ops.remainder(ops.floor(idx), float(n))


def take(a, indices, axis=None, out=None, mode=None, unique_indices=False,
         indices_are_sorted=False, fill_value=None):
    """Elements of ``a`` along ``axis`` (the flattened ``a`` when None) at ``indices``: the
    shape ``a.shape[:axis] + indices.shape + a.shape[axis + 1:]``. Negative indices count from
    the end; out-of-range ones give ``fill_value`` (NaN, JAX's default ``mode="fill"``), clamp
    (``"clip"``: negative ones to 0, as NumPy's and JAX's) or wrap around (``"wrap"``)."""
    if out is not None:
        raise TypeError("quabla.take: out= is not supported (arrays are immutable)")
    a = ops.as_array(a)
    if axis is None:
        a, axis = ops.reshape(a, (-1,)), 0
    axis = ops.normalize_axis(axis, a.ndim, "take")
    idx = _index_array(indices, "take")
    mode = _take_mode(mode, "take")
    if mode == "wrap":
        idx, mode = _wrapped(idx, a.shape[axis]), "clip"
    entries = [("slice", slice(None))] * axis + [("adv", idx)] + [
        ("slice", slice(None))] * (a.ndim - axis - 1)
    # JAX's take clamps a negative index to 0 under "clip" (NumPy's too), and wraps it under
    # "fill"
    return read(a, entries, mode, fill_value, wrap=mode != "clip")


def take_along_axis(arr, indices, axis, mode=None, fill_value=None):
    """``arr`` indexed along ``axis`` by ``indices`` of the same rank (the other axes
    broadcast): ``out[..., j, ...] = arr[..., indices[..., j, ...], ...]`` (NumPy's
    ``take_along_axis``); ``axis=None`` takes from the flattened ``arr`` with 1-d indices.
    Out-of-range indices as ``take`` (NaN by default, JAX's ``mode="fill"``)."""
    arr = ops.as_array(arr)
    idx = _index_array(indices, "take_along_axis")
    if axis is None:
        if idx.ndim != 1:
            raise ValueError("quabla.take_along_axis: with axis=None the indices must be 1-d")
        arr, axis = ops.reshape(arr, (-1,)), 0
    if idx.ndim != arr.ndim:
        raise ValueError(f"quabla.take_along_axis: indices of rank {idx.ndim} for an array of "
                         f"rank {arr.ndim}; they must have the same rank")
    axis = ops.normalize_axis(axis, arr.ndim, "take_along_axis")
    n = arr.shape[axis]
    others = [d for d in range(arr.ndim) if d != axis]
    try:
        batch = np.broadcast_shapes(tuple(arr.shape[d] for d in others),
                                    tuple(idx.shape[d] for d in others))
    except ValueError:
        raise ValueError(f"quabla.take_along_axis: shapes {list(arr.shape)} and "
                         f"{list(idx.shape)} do not broadcast off axis {axis}") from None
    mode = _take_mode(mode, "take_along_axis")
    if mode == "wrap":
        idx, mode = _wrapped(idx, n), "clip"
    last = others + [axis]
    x = ops.broadcast_to(ops.transpose(arr, last), batch + (n,))
    i = ops.broadcast_to(ops.transpose(idx, last), batch + (idx.shape[axis],))
    if mode == "clip":
        out = bind("gather", x, i, batch_dims=len(batch))
    else:
        rows, valid = _rows(i, n, "drop", True)
        rows = Tensor.wrap(rows, weak=True) if isinstance(rows, np.ndarray) else rows
        out = bind("gather", x, rows, batch_dims=len(batch))
        if valid is not None:
            out = ops.where(valid, out, _fill_value(arr.dtype, fill_value))
    return ops.transpose(out, tuple(int(a) for a in np.argsort(last)))


# -- dynamic_slice, dynamic_update_slice ----------------------------------------------------------

def _starts(start_indices, ndim, name):
    if isinstance(start_indices, Array):
        if start_indices.ndim != 1:
            raise ValueError(f"quabla.{name}: start_indices must be one scalar per axis")
        start_indices = [ops.getitem(start_indices, k) for k in range(start_indices.shape[0])]
    starts = list(start_indices)
    if len(starts) != ndim:
        raise ValueError(f"quabla.{name}: {len(starts)} start indices for an array of rank "
                         f"{ndim}")
    out = []
    for s in starts:
        if isinstance(s, Tensor):
            if s.ndim:
                raise ValueError(f"quabla.{name}: each start index must be a scalar")
            value = float(_whole(s.numpy(), f"quabla.{name}: a start index"))
            out.append(int(value))
        elif isinstance(s, Array):
            if s.ndim or not s.dtype.is_floating:
                raise ValueError(f"quabla.{name}: each start index must be a floating scalar")
            out.append(s)
        else:
            out.append(as_index(s))
    return out


def _window(shape, starts, sizes, wrap):
    """The entries of the window of ``sizes`` at ``starts`` (each start, negative from the
    end when ``wrap``, then clamped so the window fits, as JAX's). Static starts give slices;
    with a traced start, the axes from the first partial one to the last are index arrays of
    an open mesh (one broadcast index per axis), so the window is one gather or scatter."""
    entries, traced = [], builtins.any(isinstance(s, Array) for s in starts)
    partial = [d for d, (n, m, s) in enumerate(zip(shape, sizes, starts))
               if m != n]
    first, last = (partial[0], partial[-1]) if partial else (0, -1)
    span = last - first + 1
    for d, (n, m, s) in enumerate(zip(shape, sizes, starts)):
        if m == n:
            start = 0
        elif isinstance(s, Array):
            k = ops.floor(s)
            k = ops.where(ops.isnan(k), 0.0, k)
            if wrap:
                k = ops.where(ops.less(k, 0.0), ops.add(k, float(n)), k)
            start = ops.clip(k, 0.0, float(n - m))
        else:
            start = s + n if (wrap and s < 0) else s
            start = builtins.min(builtins.max(start, 0), n - m)
        if not traced or not first <= d <= last:
            entries.append(("slice", slice(start, start + m)))
            continue
        at = [1] * span
        at[d - first] = m
        steps = Tensor.wrap(np.arange(m, dtype=np.float64).reshape(at), weak=True)
        if isinstance(start, Array):
            rows = ops.add(ops.reshape(start, (1,) * span), steps)
        else:
            rows = Tensor.wrap(steps.value + start, weak=True)
        entries.append(("rows", rows))
    return entries


def _sizes(shape, slice_sizes, name):
    sizes = tuple(as_index(m) for m in slice_sizes)
    if len(sizes) != len(shape) or builtins.any(not 1 <= m <= n for m, n in zip(sizes, shape)):
        raise ValueError(f"quabla.{name}: slice sizes {list(sizes)} do not fit an array of "
                         f"shape {list(shape)} (each between 1 and the axis' extent)")
    return sizes


def dynamic_slice(operand, start_indices, slice_sizes, *, allow_negative_indices=True):
    """The window of ``slice_sizes`` of ``operand`` starting at ``start_indices`` (one scalar
    per axis: ints, or scalar arrays, traced too). As JAX's ``lax.dynamic_slice``, a negative
    start counts from the end and a start is clamped so that the window fits. Static starts
    are a slice; traced ones one gather."""
    x = ops.as_array(operand)
    sizes = _sizes(tuple(x.shape), slice_sizes, "dynamic_slice")
    starts = _starts(start_indices, x.ndim, "dynamic_slice")
    entries = _window(tuple(x.shape), starts, sizes, allow_negative_indices)
    if builtins.all(e[0] == "slice" for e in entries):
        return ops.getitem(x, tuple(e[1] for e in entries))
    return read(x, entries)


def dynamic_update_slice(operand, update, start_indices, *, allow_negative_indices=True):
    """``operand`` with ``update`` written at ``start_indices`` (clamped so it fits, a
    negative start counting from the end, as JAX's ``lax.dynamic_update_slice``): one
    scatter."""
    x = ops.as_array(operand)
    u = ops.as_array(update) if not isinstance(update, _PYTHON_NUMBERS) else update
    if isinstance(u, _PYTHON_NUMBERS) or u.ndim != x.ndim:
        raise ValueError("quabla.dynamic_update_slice: the update must have the operand's rank")
    sizes = _sizes(tuple(x.shape), tuple(u.shape), "dynamic_update_slice")
    starts = _starts(start_indices, x.ndim, "dynamic_update_slice")
    entries = _window(tuple(x.shape), starts, sizes, allow_negative_indices)
    return write(x, entries, u, "set", "clip", name="dynamic_update_slice")
