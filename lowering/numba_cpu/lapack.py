"""When the CPU back end calls LAPACK: for matrices of ``LAPACK_MIN`` rows or more when SciPy is
installed (``native.lapack_symbols``: SciPy's Fortran ``dsyevd``, ``dgesdd``, ``dgetrf`` and
``dgetrs``, called as ``runtime._gemm`` calls its ``dgemm``), with the workspace sizes the
kernels of ``lapack_kernels.py`` take; below that, or without SciPy, the kernels of
``lowering/matrix_kernels.py``. This module imports no Numba (a cached program loads without
it)."""

import os

from llvmlite import binding as llvm_binding

from .. import native

__all__ = ["LAPACK_MIN", "lapack_available", "syevd_sizes", "gesdd_work", "link"]

LAPACK_MIN = 16  # smaller matrices are as fast in the kernels, without a call into LAPACK


def link(symbol):
    """Makes LAPACK's ``symbol`` known to LLVM, for the linking of the compile under way."""
    llvm_binding.add_symbol(symbol, native.lapack_symbols()[symbol])


def lapack_available():
    """Whether SciPy's LAPACK is found and QUABLA_BLAS is not 0 (the switch of BLAS too). The
    code generator asks before it emits a call, so the routines are made known to LLVM here:
    a kernel that Numba loads from its cache is not typed again."""
    if os.environ.get("QUABLA_BLAS", "1") == "0" or not native.lapack_symbols():
        return False
    for symbol in native.lapack_symbols():
        link(symbol)
    return True


def syevd_sizes(n):
    """(lwork, liwork) of dsyevd with eigenvectors (LAPACK's minimum, plus room for blocking)."""
    return 1 + 6 * n + 2 * n * n + 64 * n, 3 + 5 * n


def gesdd_work(m, n):
    """lwork of dgesdd for any ``jobz`` (LAPACK's minimum for 'S'/'A', plus room for blocking)."""
    k, r = min(m, n), max(m, n)
    return 5 * k * k + 8 * k + r + 64 * (m + n)
