"""Array kernels that the generated entry calls on ``carray`` views: products without BLAS
and the per-matrix solvers (lowering/matrix_kernels.py, which numba.cuda compiles too), Numba
functions compiled for the entries' target (target.py) on their first call. Generated code
imports this module only where it calls one: it imports Numba's array implementation."""

import numba.np.arrayobj  # noqa: F401 - the implementation of arrays and carray

from .. import matrix_kernels
from . import lapack_kernels
from .target import kernel

__all__ = ["_sort", "_slogdet", "_eigh", "_svd", "_qr", "_eigh_lapack", "_svd_lapack",
           "_slogdet_lapack", "_solve_lapack"]


# -- linear algebra without LAPACK (SciPy stays optional) and without allocation (results and
#    workspaces come from the caller); NaN results on failure, as the reference interpreter gives;
#    solve, cholesky and triangular_solve are written out as loops instead (linalg.py)

_sort = kernel(matrix_kernels.sort)
_slogdet = kernel(matrix_kernels.slogdet)
_eigh = kernel(matrix_kernels.eigh)
_svd = kernel(matrix_kernels.svd)
_qr = kernel(matrix_kernels.qr)
_eigh_lapack = kernel(lapack_kernels.eigh_lapack)
_svd_lapack = kernel(lapack_kernels.svd_lapack)
_slogdet_lapack = kernel(lapack_kernels.slogdet_lapack)
_solve_lapack = kernel(lapack_kernels.solve_lapack)
