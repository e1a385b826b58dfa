"""Random numbers with explicit keys, in the style of ``jax.random`` (spec 004 §6.2).

There is no global random state. A :class:`Key` holds one 64-bit SplitMix64 state; the same key
always gives the same numbers. Sampling is eager, on the host, in NumPy, and vectorized.

The exact algorithm, which ``docs/random.md`` restates so another tool can reproduce the
streams (all arithmetic modulo 2**64):

* ``mix(z)``: ``z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9``; ``z = (z ^ (z >> 27)) *
  0x94D049BB133111EB``; ``return z ^ (z >> 31)`` (the SplitMix64 finalizer, a bijection).
* ``key(seed)`` has state ``seed mod 2**64``.
* The stream of a key with state ``s``: its i-th 64-bit output (i = 0, 1, ...) is
  ``mix(s + (i + 1) * 0x9E3779B97F4A7C15)``, the reference SplitMix64 seeded with ``s``.
* ``split(key, num)``: child j (j = 0 .. num-1) has state
  ``mix(mix(s ^ SPLIT_TAG) + (j + 1) * 0x9E3779B97F4A7C15)``.
* ``fold_in(key, data)``: state ``mix(mix(s ^ FOLD_TAG) + ((data mod 2**64) + 1) * golden)``.
* A sample of shape ``shape`` takes the first ``prod(shape)`` outputs (the first
  ``2 * ceil(prod(shape) / 2)`` for normals) and fills the result in C order.
"""

import math
import numbers

import numpy as np

from . import dtypes
from .array import Array, Tensor, array_shape
from .errors import TracerError

__all__ = [
    "Key",
    "key",
    "split",
    "fold_in",
    "uniform",
    "normal",
    "bernoulli",
    "glorot_normal",
    "glorot_uniform",
    "he_normal",
]

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
# Domain tags: the ASCII bytes of "qb:split" and "qb:foldi", big-endian.
_SPLIT_TAG = int.from_bytes(b"qb:split", "big")  # 0x71623A73706C6974
_FOLD_TAG = int.from_bytes(b"qb:foldi", "big")  # 0x71623A666F6C6469

_U64 = np.uint64
_TWO_PI = 2.0 * math.pi


# -- the generator ------------------------------------------------------------------------------


def _mix(z):
    """The SplitMix64 finalizer on a Python int (modulo 2**64)."""
    z &= _MASK
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK
    return z ^ (z >> 31)


def _mix_array(z):
    """The SplitMix64 finalizer on a 1-d uint64 array (wrapping arithmetic, in place)."""
    z ^= z >> _U64(30)
    z *= _U64(_MIX1)
    z ^= z >> _U64(27)
    z *= _U64(_MIX2)
    z ^= z >> _U64(31)
    return z


def _stream(state, start, count):
    """Outputs ``start .. start + count - 1`` of the SplitMix64 stream of ``state`` (uint64)."""
    # A 1-d array throughout: uint64 arrays wrap silently, whereas NumPy scalars warn.
    z = np.arange(start + 1, start + count + 1, dtype=_U64)
    z *= _U64(_GOLDEN)
    z += _U64(state)
    return _mix_array(z)


def _bits(k, n):
    """The first ``n`` 64-bit outputs of ``k``'s stream, as a uint64 array (for tests and tools)."""
    return _stream(_check_key(k)._state, 0, int(n))


# -- keys ---------------------------------------------------------------------------------------


class Key:
    """A PRNG key: one immutable 64-bit SplitMix64 state. Not an array and not traceable."""

    __slots__ = ("_state",)

    def __init__(self, state):
        if isinstance(state, (bool, np.bool_)) or not isinstance(state, numbers.Integral):
            raise TypeError(f"a Key state must be an integer, got {type(state).__name__}")
        state = int(state)
        if not 0 <= state <= _MASK:
            raise ValueError(f"a Key state must lie in [0, 2**64), got {state}; use key(seed)")
        object.__setattr__(self, "_state", state)

    @property
    def state(self):
        """The 64-bit state, a Python int in [0, 2**64)."""
        return self._state

    def __setattr__(self, name, value):
        raise AttributeError("Key is immutable")

    def __delattr__(self, name):
        raise AttributeError("Key is immutable")

    def __eq__(self, other):
        if not isinstance(other, Key):
            return NotImplemented
        return self._state == other._state

    def __ne__(self, other):
        if not isinstance(other, Key):
            return NotImplemented
        return self._state != other._state

    def __hash__(self):
        return hash((Key, self._state))

    def __repr__(self):
        return f"Key(0x{self._state:016x})"

    def __reduce__(self):
        return (Key, (self._state,))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def _is_int(x):
    return isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))


def _check_key(k):
    if isinstance(k, Key):
        return k
    if isinstance(k, Array) and not isinstance(k, Tensor):
        raise TracerError(
            "a random key cannot be a traced value; sample outside the transform and pass "
            "the samples in as arguments"
        )
    raise TypeError(f"expected a quabla.random.Key, got {type(k).__name__}; use key(seed)")


def key(seed):
    """A :class:`Key` from an integer seed, taken modulo 2**64 (negative seeds are fine)."""
    if not _is_int(seed):
        raise TypeError(f"a seed must be an integer, got {type(seed).__name__}")
    return Key(int(seed) & _MASK)


def split(key, num=2):
    """A tuple of ``num`` new keys derived from ``key``; do not sample with ``key`` afterwards."""
    k = _check_key(key)
    if not _is_int(num):
        raise TypeError(f"num must be an integer, got {type(num).__name__}")
    num = int(num)
    if num < 0:
        raise ValueError(f"num must be non-negative, got {num}")
    if num == 0:
        return ()
    states = _stream(_mix(k._state ^ _SPLIT_TAG), 0, num)
    return tuple(Key(int(s)) for s in states.tolist())


def fold_in(key, data):
    """A new key from ``key`` and an integer ``data`` (taken modulo 2**64), e.g. a step number."""
    k = _check_key(key)
    if not _is_int(data):
        raise TypeError(f"fold_in data must be an integer, got {type(data).__name__}")
    base = _mix(k._state ^ _FOLD_TAG)
    return Key(_mix(base + ((int(data) & _MASK) + 1) * _GOLDEN))


# -- argument handling --------------------------------------------------------------------------


def _float_dtype(dtype):
    dt = dtypes.float64 if dtype is None else dtypes.dtype(dtype)
    if not dt.is_floating:
        raise TypeError(f"this sampler needs a floating dtype (float32 or float64), got {dt}")
    return dt


def _param(value, name, shape):
    """A float64 parameter array broadcastable to ``shape``, or a Python float."""
    if isinstance(value, Array) and not isinstance(value, Tensor):
        raise TracerError(f"{name} cannot be a traced value; random sampling is eager")
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return np.float64(value)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number or array, got {type(value).__name__}") from None
    if arr.ndim == 0:
        return arr[()]
    try:
        ok = np.broadcast_shapes(arr.shape, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name} of shape {list(arr.shape)} does not broadcast to {list(shape)}")
    return arr


def _wrap(flat, shape):
    return Tensor.wrap(flat.reshape(shape))


# -- samplers -----------------------------------------------------------------------------------


def _uniform(k, shape, dt, minval, maxval):
    n = math.prod(shape)
    bits = _stream(k._state, 0, n)
    if dt is dtypes.float32:
        f = (bits >> _U64(40)).astype(np.float64) * 2.0**-24
        np_t = np.float32
    else:
        f = (bits >> _U64(11)).astype(np.float64) * 2.0**-53
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
    return _wrap(x, shape)


def uniform(key, shape=(), dtype=dtypes.float64, minval=0.0, maxval=1.0):
    """Samples on ``[minval, maxval)``; ``minval`` and ``maxval`` may broadcast to ``shape``."""
    k = _check_key(key)
    shape = array_shape(shape)
    dt = _float_dtype(dtype)
    minval = _param(minval, "minval", shape)
    maxval = _param(maxval, "maxval", shape)
    return _uniform(k, shape, dt, minval, maxval)


def _normal64(k, n):
    """``n`` standard normals in float64 by Box-Muller over consecutive pairs of outputs."""
    pairs = (n + 1) // 2
    bits = _stream(k._state, 0, 2 * pairs)
    u1 = ((bits[0::2] >> _U64(11)) + _U64(1)).astype(np.float64) * 2.0**-53  # (0, 1]
    u2 = (bits[1::2] >> _U64(11)).astype(np.float64) * 2.0**-53  # [0, 1)
    r = np.sqrt(-2.0 * np.log(u1))
    theta = _TWO_PI * u2
    out = np.empty(n, dtype=np.float64)
    out[0::2] = r * np.cos(theta)
    out[1::2] = (r * np.sin(theta))[: n // 2]
    return out


def normal(key, shape=(), dtype=dtypes.float64):
    """Standard normal samples (Box-Muller, computed in float64, then cast)."""
    k = _check_key(key)
    shape = array_shape(shape)
    dt = _float_dtype(dtype)
    z = _normal64(k, math.prod(shape))
    if dt is dtypes.float32:
        z = z.astype(np.float32)
    return _wrap(z, shape)


def bernoulli(key, p=0.5, shape=()):
    """``bool_`` samples, True with probability ``p`` (``p`` may broadcast to ``shape``)."""
    k = _check_key(key)
    shape = array_shape(shape)
    p = _param(p, "p", shape)
    if not np.all((p >= 0.0) & (p <= 1.0)):
        raise ValueError(f"p must lie in [0, 1], got {p}")
    bits = _stream(k._state, 0, math.prod(shape))
    u = (bits >> _U64(11)).astype(np.float64) * 2.0**-53
    if isinstance(p, np.ndarray):
        p = np.broadcast_to(p, shape).reshape(-1)
    return _wrap(u < p, shape)


# -- initializers -------------------------------------------------------------------------------


def _fans(shape):
    if len(shape) < 2:
        raise ValueError(
            f"initializers need a shape of rank 2 or more (fan_in, fan_out), got {list(shape)}"
        )
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


def _scaled_normal(k, shape, dt, std):
    z = _normal64(k, math.prod(shape))
    z *= std
    if dt is dtypes.float32:
        z = z.astype(np.float32)
    return _wrap(z, shape)


def glorot_normal(key, shape, dtype=dtypes.float64):
    """Untruncated normal samples with std ``sqrt(2 / (fan_in + fan_out))``."""
    k = _check_key(key)
    shape = array_shape(shape)
    dt = _float_dtype(dtype)
    fan_in, fan_out = _fans(shape)
    return _scaled_normal(k, shape, dt, math.sqrt(2.0 / (fan_in + fan_out)))


def glorot_uniform(key, shape, dtype=dtypes.float64):
    """Uniform samples on ``[-l, l)``, ``l = sqrt(6 / (fan_in + fan_out))``."""
    k = _check_key(key)
    shape = array_shape(shape)
    dt = _float_dtype(dtype)
    fan_in, fan_out = _fans(shape)
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return _uniform(k, shape, dt, np.float64(-limit), np.float64(limit))


def he_normal(key, shape, dtype=dtypes.float64):
    """Untruncated normal samples with std ``sqrt(2 / fan_in)``."""
    k = _check_key(key)
    shape = array_shape(shape)
    dt = _float_dtype(dtype)
    fan_in, _ = _fans(shape)
    return _scaled_normal(k, shape, dt, math.sqrt(2.0 / fan_in))
