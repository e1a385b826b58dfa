"""When the CPU back end calls LAPACK: for matrices of ``LAPACK_MIN`` rows or more where a
LAPACK is found (``fortran.py``: the Fortran ``dsyevd``, ``dgesdd``, ``dgetrf`` and ``dgetrs``
of NumPy's OpenBLAS or SciPy's, called as ``runtime._gemm`` calls ``dgemm``), with the
workspace sizes the kernels of ``lapack_kernels.py`` take; below that, or without one, the
kernels of ``lowering/matrix_kernels.py``. This module imports no Numba (a cached program
loads without it)."""

from .. import fortran

__all__ = ["LAPACK_MIN", "lapack_available", "syevd_sizes", "gesdd_work"]

LAPACK_MIN = 16  # smaller matrices are as fast in the kernels, without a call into LAPACK


def lapack_available():
    """Whether a LAPACK is found and QUABLA_BLAS is not 0 (the switch of BLAS too). The code
    generator asks before it emits a call, so the routines are made known to LLVM here: a
    kernel that Numba loads from its cache is not typed again."""
    if not fortran.available(fortran.LAPACK):
        return False
    for routine in fortran.LAPACK:
        fortran.linked(routine)
    return True


def syevd_sizes(n):
    """(lwork, liwork) of dsyevd with eigenvectors (LAPACK's minimum, plus room for blocking)."""
    return 1 + 6 * n + 2 * n * n + 64 * n, 3 + 5 * n


def gesdd_work(m, n):
    """lwork of dgesdd for any ``jobz`` (LAPACK's minimum for 'S'/'A', plus room for blocking)."""
    k, r = min(m, n), max(m, n)
    return 5 * k * k + 8 * k + r + 64 * (m + n)
