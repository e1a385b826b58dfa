"""Shape functions and products as NumPy spells them (issue 24, item 4): ``tile``, ``repeat``,
``pad``, ``roll``, ``flip``, ``split``, ``array_split``, ``vstack``, ``hstack``, ``dstack``,
``column_stack``, ``meshgrid``, ``moveaxis``, ``swapaxes``, ``ravel``, ``atleast_1d/2d/3d``,
``diag``, ``diagonal``, ``trace``, ``outer``, ``inner``, ``vdot``, ``dot``, ``tensordot``,
``kron``, ``cross``, ``einsum`` (with NumPy's list form too) and ``concatenate``.

All are composites of the structural primitives (broadcast, reshape, transpose, slice, rev,
pad, concatenate) and ``dot_general``, so their derivatives and batching are those of the
primitives. Sizes, repeats, shifts and pad widths are static (Python ints), as JAX needs them
to be for its shapes. An element order that is a static list of positions (``repeat`` with a
list, ``pad``'s edge/reflect/symmetric/wrap modes) is built from runs of evenly spaced
positions, each one strided slice (``_take``). Quabla arrays have no empty axes, so a result
that would have one is a ``ValueError``.
"""

import builtins
import math
import numbers

import numpy as np

from . import dtypes as _dt
from . import ops
from .array import Array, as_index
from .core.tracing import TraceTensor, bind
from .errors import TracerError
from .ops import as_array, normalize_axes, normalize_axis, promote

__all__ = [
    "tile", "repeat", "pad", "roll", "flip", "split", "array_split", "vstack", "hstack",
    "dstack", "column_stack", "meshgrid", "moveaxis", "swapaxes", "ravel", "atleast_1d",
    "atleast_2d", "atleast_3d", "diag", "diagonal", "trace", "outer", "inner", "vdot", "dot",
    "tensordot", "kron", "cross", "einsum", "concatenate",
]


def _static_int(value, what, name):
    if isinstance(value, TraceTensor):
        raise TracerError(f"quabla.{name}: {what} must be static (a Python int), not traced")
    return as_index(value)


def _static_ints(values, what, name):
    if isinstance(values, TraceTensor):
        raise TracerError(f"quabla.{name}: {what} must be static (Python ints), not traced")
    if isinstance(values, (numbers.Integral, np.integer)) or (
            isinstance(values, (Array, np.ndarray)) and np.ndim(values) == 0):
        return (_static_int(values, what, name),)
    return tuple(_static_int(v, what, name) for v in np.asarray(values).reshape(-1).tolist())


def _along(x, axis, items):
    """``x[..., items, ...]`` with ``items`` (a slice or int) at ``axis``."""
    index = [slice(None)] * x.ndim
    index[axis] = items
    return ops.getitem(x, tuple(index))


def _take(x, positions, axis):
    """``x`` at the static ``positions`` along ``axis`` (NumPy's ``take``): one strided slice
    (or a broadcast row, for a repeated position) per run of evenly spaced positions."""
    positions = [int(p) for p in positions]
    if not positions:
        raise ValueError("an empty result: Quabla arrays have no empty axes")
    pieces, i = [], 0
    while i < len(positions):
        start = positions[i]
        step = positions[i + 1] - start if i + 1 < len(positions) else 1
        j = i + 1
        while j < len(positions) and positions[j] - positions[j - 1] == step:
            j += 1
        count = j - i
        if count == 1:
            piece = _along(x, axis, slice(start, start + 1))
        elif step == 0:
            row = _along(x, axis, slice(start, start + 1))
            shape = list(x.shape)
            shape[axis] = count
            piece = ops.broadcast_to(row, tuple(shape))
        else:
            stop = start + (count - 1) * step + (1 if step > 0 else -1)
            piece = _along(x, axis, slice(start, stop if stop >= 0 else None, step))
        pieces.append(piece)
        i = j
    if len(pieces) == 1 and tuple(pieces[0].shape) == tuple(x.shape) and positions == list(
            range(x.shape[axis])):
        return x
    return ops.concat(pieces, axis=axis) if len(pieces) > 1 else pieces[0]


# -- arranging ----------------------------------------------------------------------------------

def ravel(a, order="C"):
    """The elements in one axis (C order, or ``order="F"``: first axis fastest)."""
    x = as_array(a)
    if order not in ("C", "F", "A", "K"):
        raise ValueError(f"quabla.ravel: order must be 'C' or 'F', got {order!r}")
    if order == "F":
        x = ops.transpose(x)
    return ops.reshape(x, (x.size,))


def moveaxis(a, source, destination):
    """``a`` with the axes ``source`` moved to the places ``destination`` (others in order)."""
    x = as_array(a)
    src = [normalize_axis(s, x.ndim, "moveaxis") for s in _static_ints(source, "source", "moveaxis")]
    dst = [normalize_axis(d, x.ndim, "moveaxis")
           for d in _static_ints(destination, "destination", "moveaxis")]
    if len(src) != len(dst):
        raise ValueError("quabla.moveaxis: source and destination must have the same number "
                         "of elements")
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError("quabla.moveaxis: repeated axis")
    order = [d for d in range(x.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return ops.transpose(x, tuple(order))


def swapaxes(a, axis1, axis2):
    """``a`` with axes ``axis1`` and ``axis2`` interchanged."""
    x = as_array(a)
    perm = list(range(x.ndim))
    i, j = normalize_axis(axis1, x.ndim, "swapaxes"), normalize_axis(axis2, x.ndim, "swapaxes")
    perm[i], perm[j] = perm[j], perm[i]
    return ops.transpose(x, tuple(perm))


def flip(m, axis=None):
    """``m`` reversed along ``axis`` (int, tuple; every axis for None)."""
    x = as_array(m)
    axes = normalize_axes(axis, x.ndim, "flip")
    return bind("rev", x, dimensions=axes) if axes and x.ndim else x


def roll(a, shift, axis=None):
    """Elements shifted by ``shift`` along ``axis`` (static; of the flattened array for
    None), those past the end coming back at the start."""
    x = as_array(a)
    shifts = _static_ints(shift, "shift", "roll")
    if axis is None:
        if len(shifts) != 1:
            raise ValueError("quabla.roll: one shift for axis=None")
        return ops.reshape(roll(ravel(x), shifts[0], 0), tuple(x.shape))
    axes = [normalize_axis(d, x.ndim, "roll") for d in _static_ints(axis, "axis", "roll")]
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(axes) == 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        raise ValueError("quabla.roll: shift and axis must have the same length")
    total = {}
    for s, d in zip(shifts, axes):
        total[d] = total.get(d, 0) + s
    for d, s in total.items():
        n = x.shape[d]
        k = s % n
        if k:
            x = ops.concat([_along(x, d, slice(n - k, None)), _along(x, d, slice(0, n - k))],
                           axis=d)
    return x


def tile(A, reps):
    """``A`` repeated ``reps`` times along each axis (a broadcast, then one reshape)."""
    x = as_array(A)
    reps = _static_ints(reps, "reps", "tile")
    if builtins.any(r < 1 for r in reps):
        raise ValueError("quabla.tile: reps must be >= 1 (Quabla arrays have no empty axes)")
    nd = builtins.max(x.ndim, len(reps))
    shape = (1,) * (nd - x.ndim) + tuple(x.shape)
    reps = (1,) * (nd - len(reps)) + tuple(reps)
    x = ops.reshape(x, tuple(v for n in shape for v in (1, n)))
    x = ops.broadcast_to(x, tuple(v for r, n in zip(reps, shape) for v in (r, n)))
    return ops.reshape(x, tuple(r * n for r, n in zip(reps, shape)))


def repeat(a, repeats, axis=None, *, total_repeat_length=None):
    """Each element repeated ``repeats`` times along ``axis`` (of the flattened array for
    None); ``repeats`` is an int, or one static count per element."""
    x = as_array(a)
    if axis is None:
        x, axis = ravel(x), 0
    axis = normalize_axis(axis, x.ndim, "repeat")
    counts = _static_ints(repeats, "repeats", "repeat")
    n = x.shape[axis]
    if len(counts) == 1:
        r = counts[0]
        if r < 1:
            raise ValueError("quabla.repeat: repeats must be >= 1 (no empty axes)")
        shape = list(x.shape)
        expanded = ops.expand_dims(x, axis + 1)
        wide = list(expanded.shape)
        wide[axis + 1] = r
        shape[axis] = n * r
        out = ops.reshape(ops.broadcast_to(expanded, tuple(wide)), tuple(shape))
    else:
        if len(counts) != n or builtins.any(c < 0 for c in counts):
            raise ValueError(f"quabla.repeat: {len(counts)} repeats for {n} elements")
        out = _take(x, np.repeat(np.arange(n), counts), axis)
    if total_repeat_length is not None and out.shape[axis] != total_repeat_length:
        raise ValueError(f"quabla.repeat: the result has {out.shape[axis]} elements along "
                         f"the axis, not total_repeat_length={total_repeat_length}")
    return out


_PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap", "empty")


def pad(array, pad_width, mode="constant", constant_values=0, *, reflect_type="even"):
    """``array`` padded by ``pad_width`` (int, (before, after), or one pair per axis) with
    NumPy's modes "constant" (``constant_values``: a number, traced or not, or pairs per
    axis), "edge", "reflect", "symmetric" and "wrap" ("empty" pads with zeros)."""
    x = as_array(array)
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"quabla.pad: mode {mode!r} is not supported; modes: "
                                  f"{', '.join(_PAD_MODES)}")
    if reflect_type != "even":
        raise NotImplementedError("quabla.pad: only reflect_type='even'")
    if isinstance(pad_width, TraceTensor):
        raise TracerError("quabla.pad: pad_width must be static (Python ints)")
    widths = np.broadcast_to(np.asarray(pad_width), (x.ndim, 2))
    if widths.dtype.kind not in "iu" and not np.all(np.mod(widths, 1) == 0):
        raise TypeError("quabla.pad: pad_width must hold ints")
    widths = widths.astype(np.int64)
    if np.any(widths < 0):
        raise ValueError("quabla.pad: pad widths must be >= 0")
    if mode in ("constant", "empty"):
        return _pad_constant(x, widths, 0 if mode == "empty" else constant_values)
    for d in range(x.ndim):
        before, after = (int(w) for w in widths[d])
        if before or after:
            positions = np.pad(np.arange(x.shape[d]), (before, after), mode=mode)
            x = _take(x, positions, d)
    return x


def _pad_constant(x, widths, values):
    if isinstance(values, (int, float)) and not isinstance(values, bool) and values == 0 \
            and x.dtype is not _dt.bool_ and math.copysign(1.0, values) > 0:
        low, high = (tuple(int(w) for w in widths[:, k]) for k in (0, 1))
        return bind("pad", x, low=low, high=high, interior=(0,) * x.ndim) if any(
            low + high) else x
    if isinstance(values, Array) and values.ndim == 0 or not isinstance(
            values, (list, tuple, np.ndarray, Array)):
        table = [[values, values] for _ in range(x.ndim)]
    else:
        grid = np.empty((x.ndim, 2), dtype=object)
        source = np.asarray(values if not isinstance(values, Array) else values.numpy(),
                            dtype=object)
        grid[...] = np.broadcast_to(source, (x.ndim, 2))
        table = grid.tolist()
    for d in range(x.ndim):
        parts = []
        for side, w in enumerate(widths[d]):
            if w:
                shape = list(x.shape)
                shape[d] = int(w)
                (fill,) = promote("pad", (x, table[d][side]), kind="any")[1:]
                parts.append(ops.broadcast_to(fill, tuple(shape)))
        if parts:
            x = ops.concat(([parts[0]] if widths[d][0] else []) + [x]
                           + ([parts[-1]] if widths[d][1] else []), axis=d)
    return x


def _pieces(x, bounds, axis):
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi <= lo:
            raise ValueError("quabla.split: a piece would be empty (Quabla arrays have no "
                             "empty axes)")
        out.append(_along(x, axis, slice(lo, hi)))
    return out


def split(ary, indices_or_sections, axis=0):
    """Pieces of ``ary`` along ``axis``: ``indices_or_sections`` equal pieces (an int that
    divides the axis), or the pieces between the given static positions."""
    x = as_array(ary)
    axis = normalize_axis(axis, x.ndim, "split")
    n = x.shape[axis]
    if isinstance(indices_or_sections, (numbers.Integral, np.integer)):
        k = int(indices_or_sections)
        if k < 1 or n % k:
            raise ValueError("quabla.split: array split does not result in an equal division")
        return _pieces(x, [i * (n // k) for i in range(k + 1)], axis)
    cuts = [builtins.min(builtins.max(c + n if c < 0 else c, 0), n)
            for c in _static_ints(indices_or_sections, "indices", "split")]
    return _pieces(x, [0] + cuts + [n], axis)


def array_split(ary, indices_or_sections, axis=0):
    """``split``, where ``k`` sections need not divide the axis: the first ``n % k`` pieces
    get one more element."""
    x = as_array(ary)
    axis = normalize_axis(axis, x.ndim, "array_split")
    if isinstance(indices_or_sections, (numbers.Integral, np.integer)):
        n, k = x.shape[axis], int(indices_or_sections)
        if k < 1:
            raise ValueError("quabla.array_split: number sections must be larger than 0")
        size, extra = divmod(n, k)
        bounds = [0]
        for i in range(k):
            bounds.append(bounds[-1] + size + (1 if i < extra else 0))
        return _pieces(x, bounds, axis)
    return split(x, indices_or_sections, axis)


def atleast_1d(*arys):
    """Each input as an array of at least one dimension (a list when several are given)."""
    out = [as_array(a) if as_array(a).ndim else ops.reshape(as_array(a), (1,))
           for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    """Each input as an array of at least two dimensions (leading axes of size 1 added)."""
    out = []
    for a in arys:
        x = as_array(a)
        out.append(ops.reshape(x, (1,) * (2 - x.ndim) + tuple(x.shape)) if x.ndim < 2 else x)
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    """0-d -> (1, 1, 1), (n,) -> (1, n, 1), (m, n) -> (m, n, 1), as NumPy."""
    out = []
    for a in arys:
        x = as_array(a)
        if x.ndim == 0:
            x = ops.reshape(x, (1, 1, 1))
        elif x.ndim == 1:
            x = ops.reshape(x, (1, x.shape[0], 1))
        elif x.ndim == 2:
            x = ops.reshape(x, tuple(x.shape) + (1,))
        out.append(x)
    return out[0] if len(out) == 1 else out


def _seq(tup, name):
    if isinstance(tup, Array):
        return [tup[i] for i in range(tup.shape[0])]
    tup = list(tup)
    if not tup:
        raise ValueError(f"quabla.{name} needs at least one array")
    return tup


def concatenate(arrays, axis=0):
    """``concat``: the arrays joined along ``axis`` (flattened first for None)."""
    arrays = _seq(arrays, "concatenate")
    if axis is None:
        return ops.concat([ravel(a) for a in arrays], axis=0)
    return ops.concat(arrays, axis=axis)


def vstack(tup):
    """The arrays stacked along the first axis (1-d arrays become rows)."""
    return ops.concat([atleast_2d(a) for a in _seq(tup, "vstack")], axis=0)


def hstack(tup):
    """The arrays joined along the second axis (the first for 1-d arrays)."""
    arrays = [atleast_1d(a) for a in _seq(tup, "hstack")]
    return ops.concat(arrays, axis=0 if arrays[0].ndim == 1 else 1)


def dstack(tup):
    """The arrays stacked along the third axis (each made at least 3-d)."""
    return ops.concat([atleast_3d(a) for a in _seq(tup, "dstack")], axis=2)


def column_stack(tup):
    """1-d arrays as columns, 2-d ones as they are, joined along axis 1."""
    arrays = []
    for a in _seq(tup, "column_stack"):
        x = as_array(a)
        arrays.append(ops.reshape(x, (x.size, 1)) if x.ndim < 2 else x)
    return ops.concat(arrays, axis=1)


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate arrays of the grid of the 1-d ``xi`` (flattened): ``indexing="xy"``
    (Cartesian, the first two axes swapped) or ``"ij"``; ``sparse`` leaves them unbroadcast."""
    if indexing not in ("xy", "ij"):
        raise ValueError("quabla.meshgrid: indexing must be 'xy' or 'ij'")
    arrays = [ravel(x) for x in xi]
    shape = [a.shape[0] for a in arrays]
    axes = list(range(len(arrays)))
    if indexing == "xy" and len(arrays) > 1:
        shape[0], shape[1] = shape[1], shape[0]
        axes[0], axes[1] = 1, 0
    out = []
    for a, d in zip(arrays, axes):
        one = [1] * len(arrays)
        one[d] = a.shape[0]
        v = ops.reshape(a, tuple(one))
        out.append(v if sparse else ops.broadcast_to(v, tuple(shape)))
    return out


# -- diagonals ----------------------------------------------------------------------------------

def diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal ``offset`` above the main one of the matrices on ``axis1``, ``axis2``,
    as a last axis (NumPy): a strided slice of the flattened matrices."""
    x = as_array(a)
    if x.ndim < 2:
        raise ValueError("quabla.diagonal needs an array of rank >= 2")
    i, j = normalize_axis(axis1, x.ndim, "diagonal"), normalize_axis(axis2, x.ndim, "diagonal")
    if i == j:
        raise ValueError("quabla.diagonal: axis1 and axis2 cannot be the same")
    k = _static_int(offset, "offset", "diagonal")
    if (k >= 0 and k >= x.shape[j]) or (k < 0 and -k >= x.shape[i]):
        raise ValueError("quabla.diagonal: the diagonal would be empty (Quabla arrays have no "
                         "empty axes)")
    x = ops.transpose(x, tuple(d for d in range(x.ndim) if d not in (i, j)) + (i, j))
    if k > 0:
        x = ops.getitem(x, (Ellipsis, slice(None), slice(k, None)))
    elif k < 0:
        x = ops.getitem(x, (Ellipsis, slice(-k, None), slice(None)))
    n, m = x.shape[-2:]
    length = builtins.min(n, m)
    x = ops.getitem(x, (Ellipsis, slice(0, length), slice(None)))
    flat = ops.reshape(x, tuple(x.shape[:-2]) + (length * m,))
    return ops.getitem(flat, (Ellipsis, slice(0, None, m + 1)))


def trace(a, offset=0, axis1=0, axis2=1):
    """The sum of ``diagonal(a, offset, axis1, axis2)``."""
    return ops.sum(diagonal(a, offset, axis1, axis2), axis=-1)


def diag(v, k=0):
    """For a 1-d ``v``: the square matrix with ``v`` on its ``k``-th diagonal, zeros elsewhere;
    for a 2-d ``v``: its ``k``-th diagonal."""
    x = as_array(v)
    k = _static_int(k, "k", "diag")
    if x.ndim == 2:
        return diagonal(x, k)
    if x.ndim != 1:
        raise ValueError("quabla.diag: input must be 1-d or 2-d")
    n = x.shape[0]
    eye = np.eye(n, dtype=bool)
    zero = False if x.dtype is _dt.bool_ else 0.0
    square = ops.where(eye, ops.broadcast_to(ops.reshape(x, (1, n)), (n, n)), zero)
    if not k:
        return square
    a = builtins.abs(k)
    low, high = ((0, a), (a, 0)) if k > 0 else ((a, 0), (0, a))
    if x.dtype is _dt.bool_:
        return _pad_constant(square, np.array([low, high]), False)
    return bind("pad", square, low=low, high=high, interior=(0, 0))


# -- products -----------------------------------------------------------------------------------

def _product(a, b, ca, cb):
    """The contraction of axes ``ca`` of ``a`` with ``cb`` of ``b``: ``a``'s free axes, then
    ``b``'s (an outer product, by broadcasting, when nothing is contracted)."""
    if not ca:
        ra = ops.reshape(a, tuple(a.shape) + (1,) * b.ndim)
        return ops.multiply(ra, b)
    return ops.dot_general(a, b, (tuple(ca), tuple(cb)))


def tensordot(a, b, axes=2):
    """Sums of products over the last ``axes`` axes of ``a`` and the first of ``b``, or over
    the axes of the pair of sequences ``axes``."""
    a, b = promote("tensordot", (a, b))
    if isinstance(axes, (numbers.Integral, np.integer)):
        k = int(axes)
        if k < 0 or k > builtins.min(a.ndim, b.ndim):
            raise ValueError(f"quabla.tensordot: axes={k} is out of range")
        ca, cb = list(range(a.ndim - k, a.ndim)), list(range(k))
    else:
        first, second = axes
        ca = [normalize_axis(d, a.ndim, "tensordot") for d in _static_ints(first, "axes", "tensordot")]
        cb = [normalize_axis(d, b.ndim, "tensordot") for d in _static_ints(second, "axes", "tensordot")]
        if len(ca) != len(cb):
            raise ValueError("quabla.tensordot: the axes of a and b differ in number")
    for i, j in zip(ca, cb):
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"quabla.tensordot: shape mismatch along axes {i} and {j}: "
                             f"{a.shape[i]} != {b.shape[j]}")
    return _product(a, b, ca, cb)


def dot(a, b):
    """NumPy's ``dot``: a product with a scalar; for vectors and matrices ``matmul``; else
    the sum over the last axis of ``a`` and the second-to-last of ``b`` (its only one for a
    vector)."""
    a, b = promote("dot", (a, b))
    if a.ndim == 0 or b.ndim == 0:
        return ops.multiply(a, b)
    if a.ndim <= 2 and b.ndim <= 2:
        return ops.matmul(a, b)
    cb = 0 if b.ndim == 1 else b.ndim - 2
    if a.shape[-1] != b.shape[cb]:
        raise ValueError(f"quabla.dot: shapes {list(a.shape)} and {list(b.shape)} not aligned")
    return _product(a, b, [a.ndim - 1], [cb])


def inner(a, b):
    """Sums of products over the last axes of ``a`` and ``b`` (a product with a scalar)."""
    a, b = promote("inner", (a, b))
    if a.ndim == 0 or b.ndim == 0:
        return ops.multiply(a, b)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"quabla.inner: last dimensions differ ({list(a.shape)}, "
                         f"{list(b.shape)})")
    if a.ndim == 1 and b.ndim == 1:
        return ops.matmul(a, b)
    return _product(a, b, [a.ndim - 1], [b.ndim - 1])


def vdot(a, b):
    """The dot product of the flattened arrays (real: no conjugate)."""
    a, b = promote("vdot", (a, b))
    if a.size != b.size:
        raise ValueError("quabla.vdot: the arrays differ in size")
    return ops.matmul(ravel(a), ravel(b))


def outer(a, b):
    """``a`` and ``b`` flattened, every product: [a.size, b.size]."""
    a, b = promote("outer", (a, b))
    return ops.multiply(ops.reshape(a, (a.size, 1)), ops.reshape(b, (1, b.size)))


def kron(a, b):
    """The Kronecker product: blocks ``a[i] * b`` (ranks aligned by leading 1s)."""
    a, b = promote("kron", (a, b))
    nd = builtins.max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + tuple(a.shape)
    sb = (1,) * (nd - b.ndim) + tuple(b.shape)
    ra = ops.reshape(a, tuple(v for n in sa for v in (n, 1)))
    rb = ops.reshape(b, tuple(v for n in sb for v in (1, n)))
    return ops.reshape(ops.multiply(ra, rb), tuple(m * n for m, n in zip(sa, sb)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cross products of 3-vectors (or 2-vectors, taken with a zero z; two 2-vectors give
    the z component only) along ``axisa``/``axisb``, the results along ``axisc``."""
    a, b = promote("cross", (a, b))
    if axis is not None:
        axisa = axisb = axisc = axis
    a = moveaxis(a, normalize_axis(axisa, a.ndim, "cross"), -1)
    b = moveaxis(b, normalize_axis(axisb, b.ndim, "cross"), -1)
    na, nb = a.shape[-1], b.shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("quabla.cross: incompatible dimensions for cross product (dimension "
                         "must be 2 or 3)")
    if tuple(a.shape[:-1]) != tuple(b.shape[:-1]):
        lead = np.broadcast_shapes(tuple(a.shape[:-1]), tuple(b.shape[:-1]))
        a, b = ops.broadcast_to(a, lead + (na,)), ops.broadcast_to(b, lead + (nb,))
    c = lambda v, i: ops.getitem(v, (Ellipsis, i))
    a0, a1, b0, b1 = c(a, 0), c(a, 1), c(b, 0), c(b, 1)
    z = ops.subtract(ops.multiply(a0, b1), ops.multiply(a1, b0))
    if na == 2 and nb == 2:
        return z
    if na == 3 and nb == 3:
        a2, b2 = c(a, 2), c(b, 2)
        x = ops.subtract(ops.multiply(a1, b2), ops.multiply(a2, b1))
        y = ops.subtract(ops.multiply(a2, b0), ops.multiply(a0, b2))
    elif na == 2:
        b2 = c(b, 2)
        x, y = ops.multiply(a1, b2), ops.negative(ops.multiply(a0, b2))
    else:
        a2 = c(a, 2)
        x, y = ops.negative(ops.multiply(a2, b1)), ops.multiply(a2, b0)
    out = ops.stack([x, y, z], axis=-1)
    return moveaxis(out, -1, normalize_axis(axisc, out.ndim, "cross"))


def einsum(*operands, out=None, optimize=None, precision=None, preferred_element_type=None,
           **kwargs):
    """``quabla.ops.einsum`` (NumPy's subscripts), also in NumPy's list form
    ``einsum(a, [0, 1], b, [1, 2], [0, 2])``: integer labels (and ``...``) per operand, an
    optional output list last. ``optimize`` and ``precision`` are accepted and ignored."""
    if out is not None:
        raise TypeError("quabla.einsum: out= is not supported (arrays are immutable)")
    if kwargs:
        raise TypeError(f"quabla.einsum: unexpected arguments {sorted(kwargs)}")
    if not operands:
        raise ValueError("quabla.einsum needs at least one operand")
    if isinstance(operands[0], str):
        return ops.einsum(operands[0], *operands[1:])
    arrays, terms = list(operands[0::2]), [_sublist(s) for s in operands[1::2]]
    if len(arrays) > len(terms):  # an odd count: the last item is the output list
        if len(arrays) != len(terms) + 1:
            raise ValueError("quabla.einsum: list form is einsum(a, labels_a, b, labels_b, "
                             "..., [output labels])")
        output = _sublist(arrays.pop())
        return ops.einsum(",".join(terms) + "->" + output, *arrays)
    return ops.einsum(",".join(terms), *arrays)


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _sublist(labels):
    if isinstance(labels, Array):
        raise TypeError("quabla.einsum: a subscript list holds ints and Ellipsis, not arrays")
    out = []
    for s in labels:
        if s is Ellipsis:
            out.append("...")
        elif isinstance(s, (numbers.Integral, np.integer)) and 0 <= int(s) < len(_LETTERS):
            out.append(_LETTERS[int(s)])
        else:
            raise ValueError(f"quabla.einsum: subscript {s!r} is not an int in [0, 52) or "
                             "Ellipsis")
    return "".join(out)
