"""The per-matrix solvers (and the column sort of ``sort``) that both loop-nest back ends compile:
the Numba CPU back end for its entries' target (numba_cpu/kernels.py) and numba.cuda as device functions, one matrix per
thread (numba_cuda/runtime.py). They are written in the Python both Numba targets take
(scalar indexing, loops, ``math``), work in float64 workspaces the caller provides (nothing is
allocated) and give NaN on failure, per matrix, as the reference interpreter does."""

import math

import numba

__all__ = ["solve", "cholesky", "triangular_solve", "sort"]


def solve(a, b, out, lu, x):
    """``out`` = a^-1 b for ``b`` and ``out`` of shape (n, m), by Gaussian elimination with
    partial pivoting in the workspaces ``lu`` (n, n) and ``x`` (n, m); NaN if singular."""
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
            for i in range(n):
                for j in range(m):
                    out[i, j] = math.nan
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


def cholesky(a, out, low):
    """``out`` = the lower Cholesky factor of ``a`` (Cholesky-Banachiewicz in the workspace
    ``low``); NaN if ``a`` is not positive definite."""
    n = a.shape[0]
    for i in range(n):
        for j in range(n):
            low[i, j] = 0.0
    for i in range(n):
        for j in range(i + 1):
            s = numba.float64(a[i, j])
            for k in range(j):
                s -= low[i, k] * low[j, k]
            if i == j:
                if not s > 0.0:
                    for p in range(n):
                        for q in range(n):
                            out[p, q] = math.nan
                    return
                low[i, i] = math.sqrt(s)
            else:
                low[i, j] = s / low[j, j]
    for i in range(n):
        for j in range(n):
            out[i, j] = low[i, j]


def triangular_solve(a, b, out, x, lower, transpose):
    """``out`` = op(T)^-1 b for ``b`` and ``out`` of shape (n, m): T the lower (``lower``) or
    upper triangle of ``a`` (the other is never read), op(T) = T or T^T (``transpose``). Rows
    are substituted in order in the workspace ``x`` (n, m), each sum accumulated in the order
    of the rows it reads, as the reference does; a zero on the diagonal gives inf/NaN."""
    n = a.shape[0]
    m = b.shape[1]
    forward = lower != transpose
    for step in range(n):
        i = step if forward else n - 1 - step
        for j in range(m):
            x[i, j] = 0.0
        for q in range(step):
            k = q if forward else n - 1 - q
            t = numba.float64(a[k, i] if transpose else a[i, k])
            for j in range(m):
                x[i, j] += t * x[k, j]
        d = numba.float64(a[i, i])
        for j in range(m):
            x[i, j] = (b[i, j] - x[i, j]) / d
    for i in range(n):
        for j in range(m):
            out[i, j] = x[i, j]


def sort(x, out, perm, tmp):
    """``out`` = the columns of ``x`` (m, n) reordered so that row 0 ascends, as the reference
    of ``sort``: stable (equal keys keep their order, -0.0 equals 0.0), NaN last. A bottom-up
    merge sort of the column numbers in the float64 workspaces ``perm`` and ``tmp`` (n,)
    (exact column numbers below 2**53), then each row gathered through them."""
    m = x.shape[0]
    n = x.shape[1]
    for k in range(n):
        perm[k] = k
    width = 1
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i = lo
            j = mid
            for k in range(lo, hi):
                right = j < hi
                if right and i < mid:
                    a = x[0, int(perm[j])]
                    b = x[0, int(perm[i])]
                    right = a < b or (b != b and a == a)  # strictly before: stable, NaN last
                if right:
                    tmp[k] = perm[j]
                    j += 1
                else:
                    tmp[k] = perm[i]
                    i += 1
            lo += 2 * width
        for k in range(n):
            perm[k] = tmp[k]
        width *= 2
    for r in range(m):
        for k in range(n):
            out[r, k] = x[r, int(perm[k])]
