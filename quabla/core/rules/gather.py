"""The rule tables of ``gather`` and ``scatter``: rows of an array read, or combined with
updates, at an array of traced indices (``x[idx]``, ``x.at[idx].set/add/...``).

Layout. ``gather(x, idx, batch_dims=b)`` takes ``x`` of shape (*B, n, *rest) and ``idx`` of
shape (*B, *S), B the ``b`` leading (batch) axes both share, and returns (*B, *S, *rest)::

    out[B, S, R] = x[B, row(idx[B, S]), R]

``scatter(x, idx, v, batch_dims=b, mode=m)`` returns ``x`` with each row ``row(idx[B, S])``
combined with ``v[B, S]`` (``v`` of shape (*B, *S, *rest)) by ``m``: ``"add"``, ``"set"``,
``"mul"``, ``"min"`` or ``"max"`` (NaN-propagating, as ``np.minimum``/``np.maximum``). Updates
hitting one row are applied in the C order of (S): a sum in that order, and for ``"set"`` the
last one wins, as NumPy's ``x[idx] = v``. Every back end applies them in that order (the CUDA
kernel gives each thread whole columns, so no atomics and no dependence on the schedule).

Indices are floating arrays holding whole numbers (Quabla has no integer dtype); ``row`` is
``clamp_index`` of ``structural.py``, the convention of ``x[i]``: rounded down, a negative
index counts from the end, an out-of-range one is clamped into [0, n - 1], NaN reads row 0 (JAX
clamps in gather too; JAX's dropping of out-of-range *updates* is done in ``quabla/indexing.py``
before the primitive is bound). Indices have no derivative.

Derivatives (both rules linear in the tangents, each the transpose of the other):

- gather: JVP gathers the tangent; VJP scatter-adds the cotangent into zeros.
- scatter "add": JVP scatter-adds the tangents; VJP: ``x`` gets ``ct``, ``v`` gets
  ``gather(ct)``.
- "set": JVP sets the tangents (the same update wins); VJP: ``x`` gets ``ct`` with the written
  rows zeroed, ``v`` gets ``gather(ct)`` where its update is the one that won its row and 0
  for the duplicates that were overwritten (found by scattering the updates' positions, as
  JAX's rule does; skipped when the indices are concrete and distinct).
- "mul": JAX's rule: ``scatter_mul(tx, idx, v) + x * scatter_add(0, idx, tv)``. It is exact
  in ``x`` always and in ``v`` for distinct indices; where two updates multiply one row the
  derivative in ``v`` leaves out the other updates' factors (JAX refuses that case).
- "min"/"max": JAX's rule: the tangent of the value that won each row, shared equally among
  ties (between ``x`` and updates, or among equal updates); exact with duplicate indices.

Batching: every operand with the batch axis leading (unbatched ones broadcast), one more batch
dim. Lowerings: ``lowering/numba_cpu/structural.py``, ``lowering/numba_cuda/structural.py``,
``lowering/mlx/rules.py``.
"""

import math

import numpy as np

from ... import dtypes as _dt
from ... import ops
from ...array import Tensor
from ..primitives import Primitive, Zero, is_zero, register
from ..tracing import bind
from .structural import clamp_index

__all__ = ["MODES", "flat_rows"]

MODES = ("add", "set", "mul", "min", "max")

_UFUNCS = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}


def _full(shape, dtype, value):
    return ops.broadcast_to(ops.weak_scalar(value, dtype), tuple(shape))


def _zeros(shape, dtype):
    return _full(shape, dtype, 0)


def _check(x, idx, b, name):
    if not idx.dtype.is_floating:
        raise TypeError(f"{name}: indices must be a floating array holding whole numbers, "
                        f"got {idx.dtype}")
    if not isinstance(b, int) or b < 0 or x.ndim <= b or idx.ndim < b or (
            tuple(x.shape[:b]) != tuple(idx.shape[:b])):
        raise ValueError(f"{name}: cannot index an array of shape {list(x.shape)} along axis {b} "
                         f"with indices of shape {list(idx.shape)} (batch_dims={b})")


def flat_rows(x_shape, idx, b):
    """The rows of ``x`` reshaped to (prod(B) * n, *rest) that ``idx`` selects, in the C order
    of (*B, *S): a 1-d int64 array (NumPy)."""
    n = x_shape[b]
    lead = math.prod(x_shape[:b])
    rows = clamp_index(idx, n).reshape(lead, -1)
    if b:
        rows = rows + (np.arange(lead, dtype=np.int64) * n)[:, None]
    return rows.reshape(-1)


# -- gather ----------------------------------------------------------------------------------

def _gather_shape(x, idx, *, batch_dims):
    _check(x, idx, batch_dims, "gather")
    return tuple(idx.shape) + tuple(x.shape[batch_dims + 1:]), x.dtype, x.weak


def _gather_impl(x, idx, *, batch_dims):
    rest = x.shape[batch_dims + 1:]
    rows = x.reshape((-1,) + rest)[flat_rows(x.shape, idx, batch_dims)]
    return rows.reshape(idx.shape + rest)


def _gather_jvp(primals, tangents, out, *, batch_dims):
    idx = primals[1]
    tx = tangents[0]
    if is_zero(tx):
        return Zero(out.shape, out.dtype)
    return bind("gather", tx, idx, batch_dims=batch_dims)


def _gather_vjp(ct, primals, out, *, batch_dims):
    x, idx = primals
    return [bind("scatter", _zeros(x.shape, x.dtype), idx, ct, batch_dims=batch_dims,
                 mode="add"), None]


def _lift(args, batched, size):
    return [a if flag else ops.broadcast_to(a, (size,) + tuple(a.shape))
            for a, flag in zip(args, batched)]


register(Primitive(
    "gather", shape_rule=_gather_shape, impl=_gather_impl, jvp=_gather_jvp, vjp=_gather_vjp,
    batch=lambda args, batched, size, *, batch_dims: (
        bind("gather", *_lift(args, batched, size), batch_dims=batch_dims + 1), True),
))


# -- scatter ---------------------------------------------------------------------------------

def _scatter_shape(x, idx, v, *, batch_dims, mode):
    _check(x, idx, batch_dims, "scatter")
    if mode not in MODES:
        raise ValueError(f"scatter: mode must be one of {MODES}, got {mode!r}")
    if mode != "set" and not x.dtype.is_floating:
        raise TypeError(f"scatter: mode {mode!r} needs a floating array, got {x.dtype}")
    updates = tuple(idx.shape) + tuple(x.shape[batch_dims + 1:])
    if tuple(v.shape) != updates or v.dtype is not x.dtype:
        raise ValueError(f"scatter: the updates of {x.dtype}{list(x.shape)} at indices of shape "
                         f"{list(idx.shape)} are {x.dtype}{list(updates)}, got "
                         f"{v.dtype}{list(v.shape)}")
    return tuple(x.shape), x.dtype, x.weak and v.weak


def _scatter_impl(x, idx, v, *, batch_dims, mode):
    rest = x.shape[batch_dims + 1:]
    out = np.array(x, copy=True).reshape((-1,) + rest)
    rows = flat_rows(x.shape, idx, batch_dims)
    values = np.asarray(v).reshape((-1,) + rest)
    if mode == "set":  # the last update of each row wins (C order), as NumPy's x[idx] = v
        last = len(rows) - 1 - np.unique(rows[::-1], return_index=True)[1]
        out[rows[last]] = values[last]
    else:  # ufunc.at applies repeated rows one after another, in order
        _UFUNCS[mode].at(out, rows, values)
    return out.reshape(x.shape)


def _gathered(a, idx, b):
    return bind("gather", a, idx, batch_dims=b)


def _scattered(x, idx, v, b, mode):
    return bind("scatter", x, idx, v, batch_dims=b, mode=mode)


def _rows_broadcast(mask, v):
    """A (*B, *S) array stretched over the trailing (rest) axes of ``v``."""
    extra = v.ndim - mask.ndim
    if extra:
        mask = ops.reshape(mask, tuple(mask.shape) + (1,) * extra)
    return ops.broadcast_to(mask, tuple(v.shape))


def _distinct_rows(x, idx, b):
    """Whether concrete indices select distinct rows (so no update overwrites another)."""
    if not isinstance(idx, Tensor):
        return False
    rows = flat_rows(tuple(x.shape), idx.numpy(), b)
    return len(np.unique(rows)) == len(rows)


def _winners(x, idx, v, b):
    """A bool (*B, *S) array: the updates that won their row under "set" (the last of each
    row): each update's position 1, 2, ... scattered, read back, compared. None when
    concrete indices are distinct (every update wins)."""
    if _distinct_rows(x, idx, b):
        return None
    count = math.prod(idx.shape[b:])
    dtype = idx.dtype if count < 2 ** 24 else _dt.float64
    ids = Tensor.wrap(np.arange(1, count + 1, dtype=dtype.numpy).reshape(idx.shape[b:]),
                      weak=True)
    ids = ops.broadcast_to(ids, tuple(idx.shape))
    table = _scattered(_zeros(tuple(x.shape[:b + 1]), dtype), idx, ids, b, "set")
    return ops.equal(_gathered(table, idx, b), ids)


def _indicator(mask, dtype):
    return ops.astype(ops.where(mask, 1.0, 0.0), dtype)


def _extremal_coefficients(x, idx, v, out, b):
    """JAX's coefficients of the "min"/"max" derivative (``_scatter_extremal_jvp``): the
    tangent is ``tx + scatter_add(0, idx, gather(tx) * operand + tv * updates)``, which gives
    each row the mean of the tangents of the values equal to its result."""
    target = _gathered(out, idx, b)
    won = ops.equal(v, target)
    kept = ops.equal(_gathered(x, idx, b), target)
    zero = _zeros(x.shape, x.dtype)
    wins = _gathered(_scattered(zero, idx, _indicator(won, v.dtype), b, "add"), idx, b)
    refs = _gathered(_scattered(zero, idx, _full(v.shape, v.dtype, 1), b, "add"), idx, b)
    share = ops.divide(1.0, ops.add(wins, _indicator(kept, v.dtype)))
    updates = ops.where(won, share, 0.0)
    operand = ops.divide(ops.subtract(ops.where(kept, share, 0.0), 1.0), refs)
    return operand, updates


def _scatter_jvp(primals, tangents, out, *, batch_dims, mode):
    x, idx, v = primals
    tx, _, tv = tangents
    b = batch_dims
    if is_zero(tx) and is_zero(tv):
        return Zero(out.shape, out.dtype)
    if mode == "mul":
        parts = []
        if not is_zero(tx):
            parts.append(_scattered(tx, idx, v, b, "mul"))
        if not is_zero(tv):
            parts.append(ops.multiply(x, _scattered(_zeros(x.shape, x.dtype), idx, tv, b, "add")))
        return parts[0] if len(parts) == 1 else ops.add(*parts)
    tx = _zeros(x.shape, x.dtype) if is_zero(tx) else tx
    tv = _zeros(v.shape, v.dtype) if is_zero(tv) else tv
    if mode in ("add", "set"):
        return _scattered(tx, idx, tv, b, mode)
    operand, updates = _extremal_coefficients(x, idx, v, out, b)
    step = ops.add(ops.multiply(_gathered(tx, idx, b), operand), ops.multiply(tv, updates))
    return _scattered(tx, idx, step, b, "add")


def _scatter_vjp(ct, primals, out, *, batch_dims, mode):
    x, idx, v = primals
    b = batch_dims
    if mode == "add":
        return [ct, None, _gathered(ct, idx, b)]
    if mode == "set":
        cleared = _scattered(ct, idx, _zeros(v.shape, v.dtype), b, "set")
        ct_v = _gathered(ct, idx, b)
        winners = _winners(x, idx, v, b)
        if winners is not None:
            ct_v = ops.where(_rows_broadcast(winners, ct_v), ct_v, 0.0)
        return [cleared, None, ct_v]
    if mode == "mul":
        return [_scattered(ct, idx, v, b, "mul"), None, _gathered(ops.multiply(ct, x), idx, b)]
    operand, updates = _extremal_coefficients(x, idx, v, out, b)
    picked = _gathered(ct, idx, b)
    ct_x = ops.add(ct, _scattered(_zeros(x.shape, ct.dtype), idx,
                                  ops.multiply(picked, operand), b, "add"))
    return [ct_x, None, ops.multiply(picked, updates)]


register(Primitive(
    "scatter", shape_rule=_scatter_shape, impl=_scatter_impl, jvp=_scatter_jvp,
    vjp=_scatter_vjp,
    batch=lambda args, batched, size, *, batch_dims, mode: (
        bind("scatter", *_lift(args, batched, size), batch_dims=batch_dims + 1, mode=mode),
        True),
))
