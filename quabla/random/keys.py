"""Keys and the SplitMix64 stream each one names: the source of every sample's bits.

The arithmetic is the one ``quabla/random/__init__.py`` and ``docs/random.md`` state, all
modulo 2**64; everything else in the package reads outputs through :func:`stream`.
"""

import numbers

import numpy as np

from ..array import Array, Tensor
from ..errors import TracerError

MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
# Domain tags: the ASCII bytes of "qb:split" and "qb:foldi", big-endian.
_SPLIT_TAG = int.from_bytes(b"qb:split", "big")  # 0x71623A73706C6974
_FOLD_TAG = int.from_bytes(b"qb:foldi", "big")  # 0x71623A666F6C6469

_U64 = np.uint64


def _mix(z):
    """The SplitMix64 finalizer on a Python int (modulo 2**64)."""
    z &= MASK
    z = ((z ^ (z >> 30)) * _MIX1) & MASK
    z = ((z ^ (z >> 27)) * _MIX2) & MASK
    return z ^ (z >> 31)


def _mix_array(z):
    """The SplitMix64 finalizer on a 1-d uint64 array (wrapping arithmetic, in place)."""
    z ^= z >> _U64(30)
    z *= _U64(_MIX1)
    z ^= z >> _U64(27)
    z *= _U64(_MIX2)
    z ^= z >> _U64(31)
    return z


def stream(state, start, count):
    """Outputs ``start .. start + count - 1`` of the SplitMix64 stream of ``state`` (uint64)."""
    # A 1-d array throughout: uint64 arrays wrap silently, whereas NumPy scalars warn.
    z = np.arange(start + 1, start + count + 1, dtype=_U64)
    z *= _U64(_GOLDEN)
    z += _U64(state)
    return _mix_array(z)


def bits(k, n):
    """The first ``n`` 64-bit outputs of ``k``'s stream, as a uint64 array (for tests and tools)."""
    return stream(check_key(k).state, 0, int(n))


class Key:
    """A PRNG key: one immutable 64-bit SplitMix64 state. Not an array and not traceable."""

    __module__ = "quabla.random"  # the public path, which pickles record
    __slots__ = ("_state",)

    def __init__(self, state):
        if isinstance(state, (bool, np.bool_)) or not isinstance(state, numbers.Integral):
            raise TypeError(f"a Key state must be an integer, got {type(state).__name__}")
        state = int(state)
        if not 0 <= state <= MASK:
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


def is_int(x):
    """Whether ``x`` is an integer (a Python or NumPy one), bools excluded."""
    return isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))


def check_key(k):
    """``k`` if it is a :class:`Key`; a clear error for a traced value or anything else."""
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
    if not is_int(seed):
        raise TypeError(f"a seed must be an integer, got {type(seed).__name__}")
    return Key(int(seed) & MASK)


def split(key, num=2):
    """A tuple of ``num`` new keys derived from ``key``; do not sample with ``key`` afterwards."""
    k = check_key(key)
    if not is_int(num):
        raise TypeError(f"num must be an integer, got {type(num).__name__}")
    num = int(num)
    if num < 0:
        raise ValueError(f"num must be non-negative, got {num}")
    if num == 0:
        return ()
    states = stream(_mix(k.state ^ _SPLIT_TAG), 0, num)
    return tuple(Key(int(s)) for s in states.tolist())


def fold_in(key, data):
    """A new key from ``key`` and an integer ``data`` (taken modulo 2**64), e.g. a step number."""
    k = check_key(key)
    if not is_int(data):
        raise TypeError(f"fold_in data must be an integer, got {type(data).__name__}")
    base = _mix(k.state ^ _FOLD_TAG)
    return Key(_mix(base + ((int(data) & MASK) + 1) * _GOLDEN))
