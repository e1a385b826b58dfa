"""Turning a key's 64-bit outputs into floats, bounded integers and standard samples.

The three float maps are docs/random.md's ``f53``, ``f53c`` and ``fopen``; rejection sampling
reads the stream in the rounds that document describes. The samplers of the other modules
are built from these pieces, each taking a key's ``state`` and a sample count.
"""

import math

import numpy as np

from .keys import MASK, stream

_U64 = np.uint64
_TWO_PI = 2.0 * math.pi


def f53(bits):
    """``(u >> 11) * 2**-53``: 53-bit floats on ``[0, 1)``, exact in float64."""
    return (bits >> _U64(11)).astype(np.float64) * 2.0**-53


def f53c(bits):
    """``((u >> 11) + 1) * 2**-53``: 53-bit floats on ``(0, 1]``, so ``log`` is finite."""
    return ((bits >> _U64(11)) + _U64(1)).astype(np.float64) * 2.0**-53


def fopen(bits):
    """``(2 * (u >> 12) + 1) * 2**-53``: floats on the open ``(0, 1)``, symmetric about 1/2."""
    return ((bits >> _U64(12)) * _U64(2) + _U64(1)).astype(np.float64) * 2.0**-53


def box_muller(a, b):
    """The radius and angle of Box-Muller on outputs ``a`` and ``b`` (docs/random.md)."""
    r = np.sqrt(-2.0 * np.log(f53c(a)))
    return r, _TWO_PI * f53(b)


def rejection(state, n, width, attempt, start):
    """Rejection sampling of ``n`` elements, ``width`` outputs per attempt, in rounds.

    Round after round, the pending elements (all of them at first), in increasing flat index,
    take ``width`` consecutive outputs each from output ``start`` on: the j-th pending element
    reads outputs ``start + width*j .. start + width*j + width-1``; then ``start`` moves past
    every output the round read. ``attempt(idx, bits)`` gets the pending indices and their
    outputs, shape ``(m, width)``, and returns ``(accepted, values)``; rejected elements stay
    pending. Returns the values in a float64 or uint64 array (the type ``attempt`` gives).
    """
    pending = np.arange(n)
    out = None
    while pending.size:
        m = pending.size
        bits = stream(state, start, m * width).reshape(m, width)
        start += m * width
        ok, values = attempt(pending, bits)
        if out is None:
            out = np.empty(n, dtype=values.dtype)
        out[pending[ok]] = values[ok]
        pending = pending[~ok]
    return out


def _mul_hi_lo(x, y):
    """The high and low 64-bit halves of the 128-bit products ``x * y`` (uint64 arrays)."""
    m32, s32 = _U64(0xFFFFFFFF), _U64(32)
    x0, x1, y0, y1 = x & m32, x >> s32, y & m32, y >> s32
    p00, p01, p10 = x0 * y0, x0 * y1, x1 * y0
    mid = (p00 >> s32) + (p01 & m32) + (p10 & m32)
    lo = (p00 & m32) | (mid << s32)
    hi = x1 * y1 + (p01 >> s32) + (p10 >> s32) + (mid >> s32)
    return hi, lo


def bounded(state, ranges):
    """Unbiased integers on ``[0, r)`` for each range ``r`` (uint64 array, 1 <= r < 2**63).

    Lemire's multiply-shift with rejection, one output per attempt, in ``rejection``'s rounds
    from output 0: with ``(hi, lo) = u * r`` (128-bit), accept when ``lo >= (2**64 - r) mod r``
    and return ``hi``.
    """
    threshold = (_U64(MASK) - ranges + _U64(1)) % ranges

    def attempt(idx, bits):
        hi, lo = _mul_hi_lo(bits[:, 0], ranges[idx])
        return lo >= threshold[idx], hi

    return rejection(state, ranges.size, 1, attempt, 0)


def standard_normals(state, n):
    """``n`` standard normals in float64 by Box-Muller over consecutive pairs of outputs."""
    pairs = (n + 1) // 2
    bits = stream(state, 0, 2 * pairs)
    r, theta = box_muller(bits[0::2], bits[1::2])
    out = np.empty(n, dtype=np.float64)
    out[0::2] = r * np.cos(theta)
    out[1::2] = (r * np.sin(theta))[: n // 2]
    return out


def standard_exponentials(state, n):
    """``-log(f53c(out))`` for outputs ``0 .. n-1``."""
    return -np.log(f53c(stream(state, 0, n)))


def standard_gumbels(state, n):
    """``-log(-log(fopen(out)))`` for outputs ``0 .. n-1``."""
    return -np.log(-np.log(fopen(stream(state, 0, n))))


def signs(state, n):
    """``+1.0`` where ``f53(out) < 0.5`` (bernoulli(0.5) is True), else ``-1.0``."""
    return np.where(f53(stream(state, 0, n)) < 0.5, 1.0, -1.0)
