"""Array kernels that the generated entry calls on ``carray`` views: products without BLAS
and the per-matrix solvers, Numba functions compiled for the entries' target (target.py) on
their first call. Generated code imports this module only where it calls one: it imports
Numba's array implementation."""

import math

import numba.np.arrayobj  # noqa: F401 - the implementation of arrays and carray
import numpy as np

from .target import kernel

__all__ = ["_matmul", "_solve", "_cholesky", "_triangular_solve"]




# -- linear algebra without LAPACK (SciPy stays optional) and without allocation (results and
#    workspaces come from the caller); NaN results on failure, as the reference interpreter gives

@kernel
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


@kernel
def _solve(a, b, out, lu, x):
    """``out`` = a^-1 b for ``b`` and ``out`` of shape (n, m), by Gaussian elimination with
    partial pivoting in the float64 workspaces ``lu`` (n, n) and ``x`` (n, m)."""
    n = a.shape[0]
    m = b.shape[1]
    for i in range(n):
        for j in range(n):
            lu[i, j] = a[i, j]
        for j in range(m):
            x[i, j] = b[i, j]
    for k in range(n):
        pivot = k
        for i in range(k + 1, n):
            if abs(lu[i, k]) > abs(lu[pivot, k]):
                pivot = i
        if lu[pivot, k] == 0.0:
            out.fill(np.nan)
            return
        if pivot != k:
            for j in range(n):
                lu[k, j], lu[pivot, j] = lu[pivot, j], lu[k, j]
            for j in range(m):
                x[k, j], x[pivot, j] = x[pivot, j], x[k, j]
        for i in range(k + 1, n):
            f = lu[i, k] / lu[k, k]
            for j in range(k, n):
                lu[i, j] -= f * lu[k, j]
            for j in range(m):
                x[i, j] -= f * x[k, j]
    for k in range(n - 1, -1, -1):
        for j in range(m):
            s = x[k, j]
            for i in range(k + 1, n):
                s -= lu[k, i] * x[i, j]
            x[k, j] = s / lu[k, k]
    for i in range(n):
        for j in range(m):
            out[i, j] = x[i, j]


@kernel
def _cholesky(a, out, low):
    """``out`` = the lower Cholesky factor of ``a`` (Cholesky-Banachiewicz in the float64
    workspace ``low``); NaN if ``a`` is not positive definite."""
    n = a.shape[0]
    low.fill(0.0)
    for i in range(n):
        for j in range(i + 1):
            s = np.float64(a[i, j])
            for k in range(j):
                s -= low[i, k] * low[j, k]
            if i == j:
                if not s > 0.0:
                    out.fill(np.nan)
                    return
                low[i, i] = math.sqrt(s)
            else:
                low[i, j] = s / low[j, j]
    for i in range(n):
        for j in range(n):
            out[i, j] = low[i, j]


@kernel
def _triangular_solve(a, b, out, x, lower, transpose):
    """``out`` = op(T)^-1 b for ``b`` and ``out`` of shape (n, m): T the lower (``lower``) or
    upper triangle of ``a`` (the other is never read), op(T) = T or T^T (``transpose``). Rows are
    substituted in order in the float64 workspace ``x`` (n, m), each sum accumulated in order of
    the rows it reads, as the reference does; a zero on the diagonal gives inf/NaN."""
    n = a.shape[0]
    m = b.shape[1]
    forward = lower != transpose
    for step in range(n):
        i = step if forward else n - 1 - step
        xi = x[i]
        xi.fill(0.0)
        for q in range(step):
            k = q if forward else n - 1 - q
            t = np.float64(a[k, i] if transpose else a[i, k])
            xk = x[k]
            for j in range(m):
                xi[j] += t * xk[j]
        d = np.float64(a[i, i])
        for j in range(m):
            xi[j] = (b[i, j] - xi[j]) / d
    for i in range(n):
        for j in range(m):
            out[i, j] = x[i, j]

