"""Scalar helpers that the generated Numba code calls, matching the NumPy reference (NaN
propagation of max/min, sign(0) == 0, repeated squaring for integer powers)."""

import math

import numba
import numpy as np

from quabla.core.rules.elementwise import power_by_squaring

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


_power_by_squaring = _inline(power_by_squaring)


@_inline
def _integer_pow(x, n):
    return _power_by_squaring(type(x)(1), x, n)


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
           and name not in ("_inline", "_power_by_squaring")]


# -- linear algebra without LAPACK (SciPy stays optional); NaN results on failure, as the
#    reference interpreter gives --------------------------------------------------------------

@numba.njit(error_model="numpy", cache=True)
def _matmul(a, b, out):
    """``out`` = batched (B, M, K) x (B, K, N) products without BLAS. Four output rows at a
    time share each load of a row of ``b``; the inner loop runs along contiguous rows, so LLVM
    vectorises it. Every element is summed over k in order, exactly like a plain dot."""
    batch, rows, inner = a.shape
    cols = b.shape[2]
    out.fill(0)
    for i in range(batch):
        ai = a[i]
        bi = b[i]
        oi = out[i]
        m = 0
        while m + 4 <= rows:
            r0, r1, r2, r3 = oi[m], oi[m + 1], oi[m + 2], oi[m + 3]
            for k in range(inner):
                s0, s1, s2, s3 = ai[m, k], ai[m + 1, k], ai[m + 2, k], ai[m + 3, k]
                bk = bi[k]
                for n in range(cols):
                    v = bk[n]
                    r0[n] += s0 * v
                    r1[n] += s1 * v
                    r2[n] += s2 * v
                    r3[n] += s3 * v
            m += 4
        for r in range(m, rows):
            row = oi[r]
            for k in range(inner):
                s = ai[r, k]
                bk = bi[k]
                for n in range(cols):
                    row[n] += s * bk[n]


@numba.njit(error_model="numpy", cache=True)
def _solve(a, b):
    """Gaussian elimination with partial pivoting; ``b`` is a vector or a matrix."""
    n = a.shape[0]
    lu = a.astype(np.float64)
    x = b.astype(np.float64).reshape((n, -1)).copy()
    for k in range(n):
        pivot = k
        for i in range(k + 1, n):
            if abs(lu[i, k]) > abs(lu[pivot, k]):
                pivot = i
        if lu[pivot, k] == 0.0:
            return np.full(b.shape, np.nan, b.dtype)
        if pivot != k:
            for j in range(n):
                lu[k, j], lu[pivot, j] = lu[pivot, j], lu[k, j]
            for j in range(x.shape[1]):
                x[k, j], x[pivot, j] = x[pivot, j], x[k, j]
        for i in range(k + 1, n):
            f = lu[i, k] / lu[k, k]
            for j in range(k, n):
                lu[i, j] -= f * lu[k, j]
            for j in range(x.shape[1]):
                x[i, j] -= f * x[k, j]
    for k in range(n - 1, -1, -1):
        for j in range(x.shape[1]):
            s = x[k, j]
            for i in range(k + 1, n):
                s -= lu[k, i] * x[i, j]
            x[k, j] = s / lu[k, k]
    return x.reshape(b.shape).astype(b.dtype)


@numba.njit(error_model="numpy", cache=True)
def _cholesky(a):
    """The lower Cholesky factor (Cholesky-Banachiewicz); NaN if ``a`` is not positive definite."""
    n = a.shape[0]
    low = np.zeros((n, n), np.float64)
    for i in range(n):
        for j in range(i + 1):
            s = np.float64(a[i, j])
            for k in range(j):
                s -= low[i, k] * low[j, k]
            if i == j:
                if not s > 0.0:
                    return np.full(a.shape, np.nan, a.dtype)
                low[i, i] = np.sqrt(s)
            else:
                low[i, j] = s / low[j, j]
    return low.astype(a.dtype)


__all__ += ["_matmul", "_solve", "_cholesky"]
