"""Rule tables of the structural primitives: broadcast, reshape, transpose, slice, pad,
concatenate, select and cast. All are linear in their array operands (select in its branches)."""

import math

import numpy as np

from ... import dtypes as _dt
from ... import ops
from ..primitives import Primitive, Zero, always, is_zero, register
from ..tracing import bind


def _same(x):
    return x.weak


def _zeros_like(aval):
    return ops.broadcast_to(ops.weak_scalar(0, aval.dtype), aval.shape)


def _linear_jvp(op):
    """The JVP of an op that is linear in its single operand: apply the op to the tangent."""
    def jvp(primals, tangents, out, **params):
        (t,) = tangents
        if is_zero(t):
            return Zero(out.shape, out.dtype)
        return bind(op, t, **params)
    return jvp


def _move_batch_to_front(x, axis):
    if axis == 0:
        return x
    perm = (axis,) + tuple(d for d in range(x.ndim) if d != axis)
    return bind("transpose", x, permutation=perm)


# -- broadcast_in_dim -------------------------------------------------------------------------

def _broadcast_shape(x, *, shape, broadcast_dimensions):
    dims = broadcast_dimensions
    if len(dims) != x.ndim or list(dims) != sorted(set(dims)) or any(
        x.shape[i] != shape[d] for i, d in enumerate(dims)
    ):
        raise ValueError(f"broadcast_in_dim: cannot map {x.shape} into {list(shape)} along {dims}")
    return tuple(shape), x.dtype, x.weak


def _broadcast_impl(x, *, shape, broadcast_dimensions):
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = x.shape[i]
    return np.broadcast_to(x.reshape(expanded), shape)


def _broadcast_vjp(ct, primals, out, *, shape, broadcast_dimensions):
    (x,) = primals
    summed = tuple(d for d in range(len(shape)) if d not in broadcast_dimensions)
    return [bind("reduce_sum", ct, axes=summed) if summed else ct]


def _broadcast_batch(args, batched, size, *, shape, broadcast_dimensions):
    (x,) = args
    return bind("broadcast_in_dim", x, shape=(size,) + tuple(shape),
                broadcast_dimensions=(0,) + tuple(d + 1 for d in broadcast_dimensions)), True


register(Primitive(
    "broadcast_in_dim", shape_rule=_broadcast_shape, impl=_broadcast_impl,
    jvp=_linear_jvp("broadcast_in_dim"), vjp=_broadcast_vjp, batch=_broadcast_batch,
    foldable=False,
    kind="index_map",
))


# -- reshape ----------------------------------------------------------------------------------

def _reshape_shape(x, *, new_shape):
    if int(math.prod(new_shape)) != x.size:
        raise ValueError(f"reshape: cannot reshape {x.shape} to {list(new_shape)}")
    return tuple(new_shape), x.dtype, x.weak


register(Primitive(
    "reshape", shape_rule=_reshape_shape,
    impl=lambda x, *, new_shape: x.reshape(new_shape),
    jvp=_linear_jvp("reshape"),
    vjp=lambda ct, primals, out, *, new_shape: [bind("reshape", ct, new_shape=tuple(primals[0].shape))],
    batch=lambda args, batched, size, *, new_shape: (
        bind("reshape", args[0], new_shape=(size,) + tuple(new_shape)), True),
    cheap=always,
))


# -- transpose --------------------------------------------------------------------------------

def _transpose_shape(x, *, permutation):
    return tuple(x.shape[p] for p in permutation), x.dtype, x.weak


def _transpose_vjp(ct, primals, out, *, permutation):
    inverse = tuple(int(i) for i in np.argsort(permutation))
    return [bind("transpose", ct, permutation=inverse)]


register(Primitive(
    "transpose", shape_rule=_transpose_shape,
    impl=lambda x, *, permutation: np.transpose(x, permutation),
    jvp=_linear_jvp("transpose"), vjp=_transpose_vjp,
    batch=lambda args, batched, size, *, permutation: (
        bind("transpose", args[0], permutation=(0,) + tuple(p + 1 for p in permutation)), True),
    kind="index_map",
))


# -- rev ----------------------------------------------------------------------------------------

def _rev_shape(x, *, dimensions):
    if any(not 0 <= d < x.ndim for d in dimensions):
        raise ValueError(f"rev: dimensions {dimensions} are invalid for rank {x.ndim}")
    return tuple(x.shape), x.dtype, x.weak


register(Primitive(
    "rev", shape_rule=_rev_shape,
    impl=lambda x, *, dimensions: np.flip(x, axis=dimensions),
    jvp=_linear_jvp("rev"),
    vjp=lambda ct, primals, out, *, dimensions: [bind("rev", ct, dimensions=dimensions)],
    batch=lambda args, batched, size, *, dimensions: (
        bind("rev", args[0], dimensions=tuple(d + 1 for d in dimensions)), True),
    kind="index_map",
))


# -- slice and pad ----------------------------------------------------------------------------

def _slice_shape(x, *, start_indices, limit_indices, strides):
    shape = tuple(
        -(-(limit - start) // stride)
        for start, limit, stride in zip(start_indices, limit_indices, strides)
    )
    if len(shape) != x.ndim or any(n <= 0 for n in shape) or any(
        not 0 <= s < l <= n for s, l, n in zip(start_indices, limit_indices, x.shape)
    ):
        raise ValueError("slice: indices out of range")
    return shape, x.dtype, x.weak


def _slice_impl(x, *, start_indices, limit_indices, strides):
    return x[tuple(slice(s, l, st) for s, l, st in zip(start_indices, limit_indices, strides))]


def _slice_vjp(ct, primals, out, *, start_indices, limit_indices, strides):
    (x,) = primals
    shape = tuple(out.shape)
    high = tuple(
        n - (s + (m - 1) * st + 1)
        for n, s, m, st in zip(x.shape, start_indices, shape, strides)
    )
    return [bind("pad", ct, low=tuple(start_indices), high=high,
                 interior=tuple(st - 1 for st in strides))]


register(Primitive(
    "slice", shape_rule=_slice_shape, impl=_slice_impl,
    jvp=_linear_jvp("slice"), vjp=_slice_vjp,
    batch=lambda args, batched, size, *, start_indices, limit_indices, strides: (
        bind("slice", args[0], start_indices=(0,) + tuple(start_indices),
             limit_indices=(size,) + tuple(limit_indices), strides=(1,) + tuple(strides)), True),
    kind="index_map",
))


def _padded(shape, low, high, interior):
    return tuple(lo + n + (n - 1) * it + hi for n, lo, hi, it in zip(shape, low, high, interior))


def _pad_shape(x, *, low, high, interior):
    return _padded(x.shape, low, high, interior), x.dtype, x.weak


def pad_steps(shape, low, high, interior):
    """A pad done with whole-array steps (the reference; MLX): zeros of shape ``grown``
    (padded by the positive widths), the operand written at ``place``, then ``crop`` (by the
    negative widths) taken."""
    grown_low = [max(w, 0) for w in low]
    grown = _padded(shape, grown_low, [max(w, 0) for w in high], interior)
    place = tuple(slice(lo, lo + (n - 1) * (it + 1) + 1, it + 1)
                  for lo, n, it in zip(grown_low, shape, interior))
    crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for lo, hi, n in zip(low, high, grown))
    return grown, place, crop


def _pad_impl(x, *, low, high, interior):
    grown, place, crop = pad_steps(x.shape, low, high, interior)
    out = np.zeros(grown, x.dtype)
    out[place] = x
    return out[crop]


def _pad_vjp(ct, primals, out, *, low, high, interior):
    (x,) = primals
    if min(low + high, default=0) < 0:  # what was cropped gets zeros back: pad by -widths
        ct = bind("pad", ct, low=tuple(-w for w in low), high=tuple(-w for w in high),
                  interior=(0,) * len(low))
        low = (0,) * len(low)
    return [bind("slice", ct, start_indices=tuple(low),
                 limit_indices=tuple(lo + (n - 1) * (it + 1) + 1
                                     for lo, n, it in zip(low, x.shape, interior)),
                 strides=tuple(it + 1 for it in interior))]


register(Primitive(
    "pad", shape_rule=_pad_shape, impl=_pad_impl,
    jvp=_linear_jvp("pad"), vjp=_pad_vjp,
    batch=lambda args, batched, size, *, low, high, interior: (
        bind("pad", args[0], low=(0,) + tuple(low), high=(0,) + tuple(high),
             interior=(0,) + tuple(interior)), True),
    kind="index_map",
))


# -- concatenate ------------------------------------------------------------------------------

def _concat_shape(*xs, axis):
    first = xs[0]
    shape = list(first.shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    if any(x.dtype is not first.dtype for x in xs):
        raise TypeError("concatenate: operands must share a dtype")
    return tuple(shape), first.dtype, all(x.weak for x in xs)


def _concat_jvp(primals, tangents, out, *, axis):
    if all(is_zero(t) for t in tangents):
        return Zero(out.shape, out.dtype)
    parts = [_zeros_like(p) if is_zero(t) else t for p, t in zip(primals, tangents)]
    return bind("concatenate", *parts, axis=axis)


def _concat_vjp(ct, primals, out, *, axis):
    cts, start = [], 0
    for x in primals:
        n = x.shape[axis]
        starts = [0] * ct.ndim
        limits = list(ct.shape)
        starts[axis], limits[axis] = start, start + n
        cts.append(bind("slice", ct, start_indices=tuple(starts), limit_indices=tuple(limits),
                        strides=(1,) * ct.ndim))
        start += n
    return cts


def _concat_batch(args, batched, size, *, axis):
    args = [a if b else ops.broadcast_to(a, (size,) + tuple(a.shape)) for a, b in zip(args, batched)]
    return bind("concatenate", *args, axis=axis + 1), True


register(Primitive(
    "concatenate", shape_rule=_concat_shape,
    impl=lambda *xs, axis: np.concatenate(xs, axis=axis),
    jvp=_concat_jvp, vjp=_concat_vjp, batch=_concat_batch,
    kind="index_map",
))


# -- select -----------------------------------------------------------------------------------

def _select_shape(pred, x, y):
    if pred.dtype is not _dt.bool_:
        raise TypeError("select: the predicate must be bool_")
    if not (tuple(pred.shape) == tuple(x.shape) == tuple(y.shape)) or x.dtype is not y.dtype:
        raise TypeError("select: operands must share shape (and branches a dtype)")
    return tuple(x.shape), x.dtype, x.weak and y.weak


def _select_jvp(primals, tangents, out, **params):
    pred, x, y = primals
    _, tx, ty = tangents
    if is_zero(tx) and is_zero(ty):
        return Zero(out.shape, out.dtype)
    tx = _zeros_like(x) if is_zero(tx) else tx
    ty = _zeros_like(y) if is_zero(ty) else ty
    return bind("select", pred, tx, ty)


def _select_vjp(ct, primals, out):
    pred = primals[0]
    zero = _zeros_like(ct)
    return [None, bind("select", pred, ct, zero), bind("select", pred, zero, ct)]


register(Primitive(
    "select", shape_rule=_select_shape, impl=lambda p, x, y: np.where(p, x, y),
    jvp=_select_jvp, vjp=_select_vjp,
    batch=lambda args, batched, size: _elementwise_batch("select", args, batched, size),
    kind="elementwise", scalar="({x} if {pred} else {y})", cheap=always,
))


def _elementwise_batch(op, args, batched, size, **params):
    shape = next(tuple(a.shape) for a, b in zip(args, batched) if b)
    args = [a if b else ops.broadcast_to(a, shape) for a, b in zip(args, batched)]
    return bind(op, *args, **params), True


# -- cast -------------------------------------------------------------------------------------

def _cast_jvp(primals, tangents, out, *, dtype):
    (t,) = tangents
    if is_zero(t) or not dtype.is_floating:
        return Zero(out.shape, out.dtype)
    return bind("cast", t, dtype=dtype)


def _cast_vjp(ct, primals, out, *, dtype):
    (x,) = primals
    if not x.dtype.is_floating or not dtype.is_floating:
        return [None]
    return [bind("cast", ct, dtype=x.dtype)]


register(Primitive(
    "cast",
    shape_rule=lambda x, *, dtype: (tuple(x.shape), dtype, x.weak),
    impl=lambda x, *, dtype: x.astype(dtype.numpy),
    jvp=_cast_jvp, vjp=_cast_vjp,
    batch=lambda args, batched, size, *, dtype: (bind("cast", args[0], dtype=dtype), True),
    kind="elementwise", scalar="_cast_{dtype}({x})", cheap=always,
))


# -- get: one result of a multi-result node (the transforms read it structurally) -------------

def _get_shape(*args, index):
    raise TypeError("get is made by bind of a multi-result primitive, never bound directly")


register(Primitive(
    "get", shape_rule=_get_shape, impl=lambda results, *, index: results[index], foldable=False,
))


# -- dynamic_index / dynamic_update_add: x[i] with a traced scalar index i --------------------
# The index is a floating scalar holding an integer, per leading batch: ``i`` of shape (*b,)
# picks row ``i[b]`` of axis len(b) of ``x`` (*b, n, *rest). As in JAX, a negative index counts
# from the end and an out-of-range one is clamped into [0, n - 1]. A traced index that is not a
# whole number is rounded down (NaN reads row 0); an eager one is a TypeError (ops.getitem).

def clamp_index(i, n):
    """The row an index value selects (NumPy, any shape): round down, wrap negatives, clamp."""
    k = np.floor(np.nan_to_num(np.asarray(i, dtype=np.float64), nan=0.0, posinf=n, neginf=-n))
    k = np.where(k < 0, k + n, k)
    return np.clip(k, 0, n - 1).astype(np.int64)


def _batch_index(i, k):
    return tuple(np.indices(i.shape)) + (k,) if i.ndim else (k,)


def _check_index(x, i, name):
    if not i.dtype.is_floating:
        raise TypeError(f"{name}: the index must be a floating scalar, got {i.dtype}")
    b = i.ndim
    if x.ndim <= b or tuple(x.shape[:b]) != tuple(i.shape):
        raise ValueError(f"{name}: cannot index an array of shape {list(x.shape)} along axis "
                         f"{b} with an index of shape {list(i.shape)}")


def _dynamic_index_shape(x, i):
    _check_index(x, i, "dynamic_index")
    return tuple(x.shape[:i.ndim]) + tuple(x.shape[i.ndim + 1:]), x.dtype, x.weak


def _dynamic_index_impl(x, i):
    return x[_batch_index(i, clamp_index(i, x.shape[i.ndim]))]


def _dynamic_index_jvp(primals, tangents, out):
    x, i = primals
    tx = tangents[0]
    if is_zero(tx):
        return Zero(out.shape, out.dtype)
    return bind("dynamic_index", tx, i)


def _dynamic_index_vjp(ct, primals, out):
    x, i = primals
    return [bind("dynamic_update_add", _zeros_like(x), i, ct), None]


def _lift(args, batched, size):
    """Every operand with the batch axis leading (unbatched ones broadcast)."""
    return [a if flag else ops.broadcast_to(a, (size,) + tuple(a.shape))
            for a, flag in zip(args, batched)]


def _dynamic_index_batch(args, batched, size):
    return bind("dynamic_index", *_lift(args, batched, size)), True


register(Primitive(
    "dynamic_index", shape_rule=_dynamic_index_shape, impl=_dynamic_index_impl,
    jvp=_dynamic_index_jvp, vjp=_dynamic_index_vjp, batch=_dynamic_index_batch,
    cheap=always,
))


def _dynamic_update_add_shape(x, i, v):
    _check_index(x, i, "dynamic_update_add")
    row = tuple(x.shape[:i.ndim]) + tuple(x.shape[i.ndim + 1:])
    if tuple(v.shape) != row or v.dtype is not x.dtype:
        raise ValueError(f"dynamic_update_add: a row of {x.dtype}{list(x.shape)} is "
                         f"{x.dtype}{list(row)}, got {v.dtype}{list(v.shape)}")
    return tuple(x.shape), x.dtype, x.weak and v.weak


def _dynamic_update_add_impl(x, i, v):
    out = np.array(x, copy=True)
    np.add.at(out, _batch_index(i, clamp_index(i, x.shape[i.ndim])), v)
    return out


def _dynamic_update_add_jvp(primals, tangents, out):
    x, i, v = primals
    tx, _, tv = tangents
    if is_zero(tx) and is_zero(tv):
        return Zero(out.shape, out.dtype)
    tx = _zeros_like(x) if is_zero(tx) else tx
    tv = _zeros_like(v) if is_zero(tv) else tv
    return bind("dynamic_update_add", tx, i, tv)


def _dynamic_update_add_vjp(ct, primals, out):
    x, i, v = primals
    return [ct, None, bind("dynamic_index", ct, i)]


def _dynamic_update_add_batch(args, batched, size):
    return bind("dynamic_update_add", *_lift(args, batched, size)), True


register(Primitive(
    "dynamic_update_add", shape_rule=_dynamic_update_add_shape, impl=_dynamic_update_add_impl,
    jvp=_dynamic_update_add_jvp, vjp=_dynamic_update_add_vjp, batch=_dynamic_update_add_batch,
))
