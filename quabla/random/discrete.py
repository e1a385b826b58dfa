"""Samplers of whole numbers and of choices: randint, choice, permutation, categorical,
bernoulli and rademacher.

Quabla has no integer dtype, so index-valued results are float arrays holding whole numbers.
The integer draws are exact (Lemire's multiply-shift with rejection), hence bit-identical on
every platform.
"""

import math

import numpy as np

from .. import dtypes
from ..array import Array, Tensor, array, array_shape
from ..errors import TracerError
from .arguments import (
    as_param,
    check_batch,
    elementwise_sample,
    finish,
    flat,
    float_dtype,
    own,
    param,
    real_array,
)
from .keys import check_key, is_int, stream
from .outputs import bounded, f53, signs, standard_gumbels

_EXACT_INT = {dtypes.float64: 2**53, dtypes.float32: 2**24}  # whole numbers exact in each dtype


def _whole(value, name, shape, dt):
    """A parameter of whole numbers, each exact in ``dt``."""
    limit = _EXACT_INT[dt]
    if is_int(value) and abs(value) > limit:
        raise ValueError(f"{name} must lie in [-2**{limit.bit_length() - 1}, "
                         f"2**{limit.bit_length() - 1}] to be exact in {dt}, got {value}")
    arr = param(value, name, shape)
    if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
        raise ValueError(
            f"{name} must hold finite whole numbers (Quabla has no integer dtype), got {value}"
        )
    if np.any(np.abs(arr) > limit):
        raise ValueError(f"{name} must lie in [-2**{limit.bit_length() - 1}, "
                         f"2**{limit.bit_length() - 1}] to be exact in {dt}, got {value}")
    return arr


def _population(value, name):
    """``(None, n)`` for an integer ``n`` (or a 0-d array holding one), else ``(array, None)``."""
    if is_int(value):
        n = int(value)
    else:
        if isinstance(value, Array) and not isinstance(value, Tensor):
            raise TracerError(f"{name} cannot be a traced value; random sampling is eager")
        v = array(value).value
        if v.ndim:
            return v, None
        if v.dtype.kind != "f" or not np.isfinite(v) or v != np.floor(v):
            raise TypeError(
                f"{name} must be an integer, a 0-d array holding a whole number, or an array of "
                f"rank 1 or more, got {value!r}"
            )
        n = int(v)
    if not 1 <= n <= 2**53:
        raise ValueError(f"{name} must lie in [1, 2**53] (an exact float64 index), got {n}")
    return None, n


def _normalize_axis(axis, ndim):
    if not is_int(axis):
        raise TypeError(f"axis must be an integer, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for an array of rank {ndim}")
    return int(axis) % ndim


def _weights(p, n):
    w = as_param(p, "p")
    if np.shape(w) != (n,):
        raise ValueError(f"p must be a 1-d array of length {n} (a.shape[axis]), got shape "
                         f"{list(np.shape(w))}")
    if not np.all(np.isfinite(w) & (w >= 0.0)) or not w.sum() > 0.0:
        raise ValueError("p must be finite and non-negative with a positive sum")
    return w


def _fisher_yates(state, n, count, rows):
    """The first ``count`` entries of ``rows`` independent Fisher-Yates shuffles of ``0..n-1``.

    The draws are ``bounded`` integers with the ranges ``n, n-1, ..., n-count+1`` repeated
    for each row (row-major); row ``m``, step ``i`` swaps positions ``i`` and ``i + r``.
    """
    ranges = np.tile(np.arange(n, n - count, -1, dtype=np.int64), rows).astype(np.uint64)
    draws = bounded(state, ranges).reshape(rows, count).tolist()
    out = []
    for row in draws:
        moved = {}  # position -> value, for the positions a swap has touched
        for i, r in enumerate(row):
            j = i + r
            out.append(moved.get(j, j))
            moved[j] = moved.get(i, i)
    return np.array(out, dtype=np.int64).reshape(rows, count)


def randint(key, shape, minval, maxval, dtype=dtypes.float64):
    """Uniform whole numbers on ``[minval, maxval)``, as float64 (or float32) values.

    Quabla has no integer dtype, so the result is a float array holding whole numbers.
    ``minval`` and ``maxval`` are whole numbers (Python or NumPy ints, or whole-valued floats
    or arrays broadcasting to ``shape``) with ``minval < maxval`` elementwise and
    ``|value| <= 2**53`` (``2**24`` for float32), so every result is exact.

    Algorithm (unbiased): Lemire's multiply-shift with rejection. Element ``k`` has range
    ``r = maxval - minval``; it reads output ``k``, forms the 128-bit product ``u * r``
    ``= hi * 2**64 + lo`` and accepts when ``lo >= (2**64 - r) mod r``, giving
    ``minval + hi``. The rejected elements (probability below ``r / 2**64`` each), in C order,
    then read outputs ``n, n+1, ...`` one each, and so on, round after round, until all accept.
    """
    k = check_key(key)
    shape = array_shape(shape)
    dt = float_dtype(dtype)
    lo = flat(_whole(minval, "minval", shape, dt), shape).astype(np.int64)
    hi = flat(_whole(maxval, "maxval", shape, dt), shape).astype(np.int64)
    if not np.all(lo < hi):
        raise ValueError(f"randint needs minval < maxval, got {minval} and {maxval}")
    offsets = bounded(k.state, (hi - lo).astype(np.uint64))
    return finish((lo + offsets.astype(np.int64)).astype(np.float64).reshape(shape), dt)


def choice(key, a, shape=(), replace=True, p=None, axis=0):
    """Samples from ``a``: an integer ``n`` (then indices ``0..n-1`` as float64) or an array.

    With an array, entries along ``axis`` are drawn and the result has shape
    ``a.shape[:axis] + shape + a.shape[axis+1:]`` and ``a``'s dtype. ``p`` (length
    ``n``, non-negative, positive sum) weights the entries; like JAX it need not be normalized.

    Algorithms, with ``N = prod(shape)`` draws, indices filled in C order of ``shape``:

    * ``replace=True``, no ``p``: ``randint(key, shape, 0, n)``.
    * ``replace=True``, ``p``: inverse CDF. ``cdf = cumsum(p)`` (float64, left to right);
      draw ``k`` is the number of ``cdf`` entries ``<= f_k * cdf[-1]`` with
      ``f_k = (out(k) >> 11) * 2**-53``, capped at the last index with ``p > 0``.
    * ``replace=False``, no ``p``: the first ``N`` steps of the Fisher-Yates shuffle of
      ``permutation`` (its draws use the ranges ``n, n-1, ..., n-N+1``), so
      ``choice(key, n, (n,), replace=False)`` equals ``permutation(key, n)``.
    * ``replace=False``, ``p``: Gumbel-top-k. ``g_i = log(p_i) + G_i`` with ``G_i`` the
      ``gumbel`` sample ``i`` of ``key`` (outputs ``0..n-1``); the draws are the indices of the
      ``N`` largest ``g_i``, largest first, ties to the lower index. ``N`` may not exceed the
      number of positive ``p_i``.
    """
    k = check_key(key)
    shape = array_shape(shape)
    pool, n = _population(a, "a")
    if pool is not None:
        axis = _normalize_axis(axis, pool.ndim)
        n = pool.shape[axis]
    count = math.prod(shape)
    if not replace and count > n:
        raise ValueError(
            f"cannot take {count} samples without replacement from a population of {n}"
        )
    if p is None:
        if replace:
            idx = bounded(k.state, np.full(count, n, dtype=np.uint64)).astype(np.int64)
        else:
            idx = _fisher_yates(k.state, n, count, 1)[0]
    else:
        w = _weights(p, n)
        if replace:
            cdf = np.cumsum(w)
            idx = np.searchsorted(cdf, f53(stream(k.state, 0, count)) * cdf[-1], "right")
            idx = np.minimum(idx, np.flatnonzero(w)[-1])
        else:
            if count > np.count_nonzero(w):
                raise ValueError(f"cannot take {count} samples without replacement when only "
                                 f"{np.count_nonzero(w)} entries of p are positive")
            with np.errstate(divide="ignore"):
                g = np.log(w) + standard_gumbels(k.state, n)
            idx = np.argsort(-g, kind="stable")[:count]
    idx = idx.reshape(shape)
    if pool is None:
        return finish(idx.astype(np.float64), dtypes.float64)
    return own(np.take(pool, idx, axis=axis))


def permutation(key, x, axis=0, independent=False):
    """A shuffle of ``0..n-1`` (``x`` an integer ``n``; as float64) or of ``x`` along ``axis``.

    Algorithm: the Fisher-Yates shuffle. Start from ``0, 1, ..., n-1``; step ``i`` (``i = 0 ..
    n-1``) swaps positions ``i`` and ``i + r_i``, where ``r_i`` is uniform on ``[0, n - i)``,
    drawn as ``randint`` draws: the ranges ``n, n-1, ..., 1`` (one output each, in that order,
    with ``randint``'s rejection rounds). An array is reordered by that permutation along
    ``axis``. With ``independent=True`` every 1-d slice along ``axis`` gets its own shuffle:
    the slices in C order of ``moveaxis(x, axis, -1)``, slice ``m`` using the ranges at
    positions ``m*n .. m*n + n-1`` of one ``randint``-style draw.
    """
    k = check_key(key)
    pool, n = _population(x, "x")
    if pool is None:
        return finish(_fisher_yates(k.state, n, n, 1)[0].astype(np.float64), dtypes.float64)
    axis = _normalize_axis(axis, pool.ndim)
    n = pool.shape[axis]
    if not independent:
        perm = _fisher_yates(k.state, n, n, 1)[0]
        return own(np.take(pool, perm, axis=axis))
    moved = np.moveaxis(pool, axis, -1)
    perm = _fisher_yates(k.state, n, n, math.prod(moved.shape[:-1])).reshape(moved.shape)
    out = np.take_along_axis(moved, perm, axis=-1)
    return own(np.moveaxis(out, -1, axis))


def categorical(key, logits, axis=-1, shape=None, replace=True):
    """Category indices (float64 whole numbers) with probabilities ``softmax(logits, axis)``.

    ``shape`` defaults to ``logits.shape`` without ``axis`` (the batch shape) and must be a
    broadcast of it. Algorithm (JAX's): Gumbel-max. With ``K = logits.shape[axis]``, draw the
    ``gumbel`` sample of shape ``prefix + batch'`` with ``K`` inserted at ``axis`` (``prefix``
    the leading dimensions of ``shape`` beyond the batch, ``batch'`` its trailing ones), add
    ``logits`` (float64, broadcast), and take the first index of the maximum along that axis.
    ``replace=False`` (Gumbel-top-k): ``g = logits + gumbel(key, logits.shape)``; along
    ``axis`` take the indices of the ``prod(prefix)`` largest ``g``, largest first (ties to the
    lower index), as the leading dimensions; ``shape`` must end in the batch shape.
    """
    k = check_key(key)
    lg = real_array(logits, "logits")
    if lg.ndim == 0:
        raise ValueError("logits must have rank 1 or more")
    if np.any(np.isnan(lg)):
        raise ValueError("logits must not be NaN")
    ax = _normalize_axis(axis, lg.ndim)
    K = lg.shape[ax]
    batch = lg.shape[:ax] + lg.shape[ax + 1:]
    if shape is None:
        shape = batch
    else:
        shape = array_shape(shape)
        check_batch(shape, batch, "batch shape of logits")
    split_at = len(shape) - len(batch)
    prefix, suffix = shape[:split_at], shape[split_at:]
    if replace:
        gshape = prefix + suffix[:ax] + (K,) + suffix[ax:]
        g = standard_gumbels(k.state, math.prod(gshape)).reshape(gshape)
        idx = np.argmax(g + lg, axis=len(prefix) + ax)
    else:
        count = math.prod(prefix)
        if suffix != batch:
            raise ValueError(f"with replace=False, shape must end in the batch shape {list(batch)}")
        if count > K:
            raise ValueError(f"cannot take {count} samples without replacement from {K} categories")
        g = standard_gumbels(k.state, lg.size).reshape(lg.shape) + lg
        order = np.argsort(-np.moveaxis(g, ax, -1), axis=-1, kind="stable")[..., :count]
        idx = np.moveaxis(order, -1, 0).reshape(shape)
    return finish(np.asarray(idx, dtype=np.float64).reshape(shape), dtypes.float64)


def bernoulli(key, p=0.5, shape=()):
    """``bool_`` samples, True with probability ``p`` (``p`` may broadcast to ``shape``)."""
    k = check_key(key)
    shape = array_shape(shape)
    p = param(p, "p", shape)
    if not np.all((p >= 0.0) & (p <= 1.0)):
        raise ValueError(f"p must lie in [0, 1], got {p}")
    u = f53(stream(k.state, 0, math.prod(shape)))
    if isinstance(p, np.ndarray):
        p = np.broadcast_to(p, shape).reshape(-1)
    return own((u < p).reshape(shape))


def rademacher(key, shape=(), dtype=dtypes.float64):
    """+1 and -1 with equal probability: ``+1`` where ``bernoulli(key, 0.5, shape)`` is True.

    Element ``k`` is ``+1.0`` if ``(out(k) >> 11) * 2**-53 < 0.5`` (the top bit of the output
    is 0), else ``-1.0``.
    """
    return elementwise_sample(signs, key, shape, dtype)
