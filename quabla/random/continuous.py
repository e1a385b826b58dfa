"""Real-valued samplers of one variable: uniform, normal, truncated normal, exponential,
Gumbel and Laplace, each a fixed function of one or two outputs per element."""

import math

import numpy as np

from .. import dtypes
from ..array import array_shape
from ..core.special_functions import ndtri_array
from .arguments import (
    elementwise_sample,
    flat,
    float_dtype,
    own,
    param,
    shape_and_params,
)
from .keys import check_key, stream
from .outputs import (
    f53,
    fopen,
    standard_exponentials,
    standard_gumbels,
    standard_normals,
)

_SQRT2 = math.sqrt(2.0)
_ERF = np.frompyfunc(math.erf, 1, 1)
_ERFC = np.frompyfunc(math.erfc, 1, 1)


def uniform(key, shape=(), dtype=dtypes.float64, minval=0.0, maxval=1.0):
    """Samples on ``[minval, maxval)``; ``minval`` and ``maxval`` may broadcast to ``shape``."""
    k = check_key(key)
    shape = array_shape(shape)
    dt = float_dtype(dtype)
    minval = param(minval, "minval", shape)
    maxval = param(maxval, "maxval", shape)
    bits = stream(k.state, 0, math.prod(shape))
    if dt is dtypes.float32:
        f = (bits >> np.uint64(40)).astype(np.float64) * 2.0**-24
        np_t = np.float32
    else:
        f = f53(bits)
        np_t = np.float64
    with np.errstate(over="ignore", invalid="ignore"):
        if isinstance(minval, np.ndarray) or isinstance(maxval, np.ndarray):
            lo = np.broadcast_to(np.asarray(minval, dtype=np_t), shape).reshape(-1)
            hi = np.broadcast_to(np.asarray(maxval, dtype=np_t), shape).reshape(-1)
        else:
            lo, hi = np.asarray(minval, dtype=np_t)[()], np.asarray(maxval, dtype=np_t)[()]
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise ValueError(f"minval and maxval must be finite in {dt}")
        if not np.all(lo < hi):
            raise ValueError(
                f"uniform needs minval < maxval (in {dt}), got {minval} and {maxval}"
            )
        lo64 = np.asarray(lo, dtype=np.float64)
        hi64 = np.asarray(hi, dtype=np.float64)
        width = hi64 - lo64
    if not np.all(np.isfinite(width)):
        raise ValueError("maxval - minval overflows float64")
    x = lo64 + f * width  # fresh float64 array
    if np_t is np.float32:
        x = x.astype(np.float32)
    # The affine map can round up to maxval; [minval, maxval) excludes it.
    top = np.nextafter(np.asarray(hi, dtype=np_t), np_t(-np.inf))
    over = x >= hi
    if np.any(over):
        x[over] = top[over] if np.ndim(top) else top
    return own(x.reshape(shape))


def normal(key, shape=(), dtype=dtypes.float64):
    """Standard normal samples (Box-Muller, computed in float64, then cast)."""
    return elementwise_sample(standard_normals, key, shape, dtype)


def _erf(x):
    """C's ``erf`` (via ``math.erf``) elementwise on a float64 array."""
    return np.asarray(_ERF(x), dtype=np.float64)


def _erfc(x):
    """C's ``erfc`` (via ``math.erfc``) elementwise on a float64 array."""
    return np.asarray(_ERFC(x), dtype=np.float64)


def _ndtr(x):
    """The standard normal CDF, ``erfc(-x / sqrt(2)) / 2``."""
    return 0.5 * _erfc(-np.asarray(x, dtype=np.float64) / _SQRT2)


def truncated_normal(key, lower, upper, shape=None, dtype=dtypes.float64):
    """Standard normal samples truncated to the open interval ``(lower, upper)``.

    ``shape`` defaults to the broadcast shape of ``lower`` and ``upper`` (either may be
    infinite). Algorithm: inverse CDF, one output per element. The bounds are rounded to
    ``dtype`` and widened to float64, ``lo < hi`` required. Where ``lo + hi > 0`` the problem
    is mirrored (``a, b = -hi, -lo``, result negated) so that it works in the lower tail,
    where the CDF ``ndtr`` is accurate; else ``a, b = lo, hi``. With
    ``v = (2 * (out(k) >> 12) + 1) * 2**-53`` in ``(0, 1)``:
    ``u = ndtr(a) + v * (ndtr(b) - ndtr(a))``, ``x = ndtri(u)`` (``x = b`` where ``u`` is
    0, i.e. both bounds beyond about 38 standard deviations), mirrored back, rounded to
    ``dtype``, and clipped to ``[nextafter(lo, +inf), nextafter(hi, -inf)]`` in ``dtype``.
    ``ndtr(x) = erfc(-x / sqrt(2)) / 2``; ``ndtri`` is ``qb.special.ndtri``'s algorithm
    (``quabla.core.special_functions.ndtri_array``: Acklam's start and one Halley step, see
    docs/random.md), within about 2 ulp.
    """
    k = check_key(key)
    dt = float_dtype(dtype)
    shape, (lower, upper) = shape_and_params(shape, lower=lower, upper=upper)
    np_t = dt.numpy.type
    with np.errstate(over="ignore"):
        lo = flat(lower, shape).astype(np_t)
        hi = flat(upper, shape).astype(np_t)
    if np.any(np.isnan(lo) | np.isnan(hi)) or not np.all(lo < hi):
        raise ValueError(f"truncated_normal needs lower < upper (in {dt}), got {lower} and {upper}")
    inner_lo = np.nextafter(lo, np_t(np.inf))
    inner_hi = np.nextafter(hi, np_t(-np.inf))
    if not np.all(inner_lo <= inner_hi):
        raise ValueError(f"no {dt} value lies strictly between lower and upper")
    lo64, hi64 = lo.astype(np.float64), hi.astype(np.float64)
    with np.errstate(invalid="ignore"):
        mirror = lo64 + hi64 > 0.0
    a = np.where(mirror, -hi64, lo64)
    b = np.where(mirror, -lo64, hi64)
    pa, pb = _ndtr(a), _ndtr(b)
    v = fopen(stream(k.state, 0, math.prod(shape)))
    u = pa + v * (pb - pa)
    with np.errstate(divide="ignore"):
        x = np.where(u > 0.0, ndtri_array(u, np, _erf, _erfc), b)
    x = np.where(mirror, -x, x).astype(np_t)
    x = np.minimum(np.maximum(x, inner_lo), inner_hi)
    return own(x.reshape(shape))


def exponential(key, shape=(), dtype=dtypes.float64):
    """Exponential(1) samples: element ``k`` is ``-log(((out(k) >> 11) + 1) * 2**-53)``.

    Computed in float64 (values in ``[0, 53 log 2]``), then rounded to ``dtype``.
    """
    return elementwise_sample(standard_exponentials, key, shape, dtype)


def gumbel(key, shape=(), dtype=dtypes.float64):
    """Standard Gumbel samples: element ``k`` is ``-log(-log(v))``.

    ``v = (2 * (out(k) >> 12) + 1) * 2**-53`` lies in the open ``(0, 1)``, so samples are
    finite; computed in float64, then rounded to ``dtype``.
    """
    return elementwise_sample(standard_gumbels, key, shape, dtype)


def _standard_laplaces(state, n):
    v = fopen(stream(state, 0, n))
    return np.where(v < 0.5, np.log(2.0 * v), -np.log(2.0 - 2.0 * v))


def laplace(key, shape=(), dtype=dtypes.float64):
    """Standard Laplace samples (density ``exp(-|x|) / 2``), by inverse CDF.

    Element ``k``: ``v = (2 * (out(k) >> 12) + 1) * 2**-53`` in ``(0, 1)`` (never 1/2);
    ``log(2 * v)`` if ``v < 0.5`` else ``-log(2 - 2 * v)`` (both exact arguments), so ``v``
    and ``1 - v`` give opposite samples. Computed in float64, then rounded to ``dtype``.
    """
    return elementwise_sample(_standard_laplaces, key, shape, dtype)
