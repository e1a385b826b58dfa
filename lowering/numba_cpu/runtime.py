"""Scalar helpers that the generated Numba code calls, matching the NumPy reference (NaN
propagation of max/min, sign(0) == 0, repeated squaring for integer powers)."""

import math

import numba
import numpy as np

_inline = numba.njit(inline="always", error_model="numpy")


@_inline
def _log(x):
    return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)


@_inline
def _log1p(x):
    return math.log1p(x) if x > -1 else (-math.inf if x == -1 else math.nan)


@_inline
def _sqrt(x):
    return math.sqrt(x) if x >= 0 else math.nan


@_inline
def _sign(x):
    return type(x)(1) if x > 0 else (type(x)(-1) if x < 0 else x)


@_inline
def _logistic(x):
    return 1.0 / (1.0 + math.exp(-x))


@_inline
def _integer_pow(x, n):
    result = type(x)(1)
    base = x
    while n:
        if n & 1:
            result = result * base
        n >>= 1
        if n:
            base = base * base
    return result


@_inline
def _pow(x, y):
    return x ** y


@_inline
def _max(x, y):
    return x if (x > y or x != x) else y


@_inline
def _min(x, y):
    return x if (x < y or x != x) else y


@_inline
def _cast_float64(x):
    return np.float64(x)


@_inline
def _cast_float32(x):
    return np.float32(x)


@_inline
def _cast_bool(x):
    return x != 0


__all__ = [name for name in dir() if name.startswith("_") and not name.startswith("__")
           and name not in ("_inline",)]
