"""Array kernels that the generated entry calls on ``carray`` views: products without BLAS
and the per-matrix solvers (lowering/matrix_kernels.py, which numba.cuda compiles too), Numba
functions compiled for the entries' target (target.py) on their first call. Generated code
imports this module only where it calls one: it imports Numba's array implementation."""

import numba.np.arrayobj  # noqa: F401 - the implementation of arrays and carray

from .. import matrix_kernels
from .target import kernel

__all__ = ["_matmul", "_solve", "_cholesky", "_triangular_solve", "_sort"]


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


_solve = kernel(matrix_kernels.solve)
_cholesky = kernel(matrix_kernels.cholesky)
_triangular_solve = kernel(matrix_kernels.triangular_solve)
_sort = kernel(matrix_kernels.sort)
