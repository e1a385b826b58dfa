"""``lowering/numba_cuda/blas.gemm`` against cuBLAS's documented contract, without a GPU.

cuBLAS is column-major: ``cublas<t>gemmStridedBatched(handle, transa, transb, m, n, k, alpha,
A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC, batch)`` computes, per batch ``b``,
``C_b = alpha op(A_b) op(B_b) + beta C_b`` (C unread when beta is 0), element ``(i, j)`` of a
matrix at ``i + j ld`` of its pointer. A stand-in for nvmath-python's ``cublas`` module does
exactly that on the host memory behind the raw pointers, so the row-major products ``gemm``
asks for (operands swapped, leading dimensions and strides) are checked here; a GPU run checks
the real library."""

import ctypes
import sys
import types

import numpy as np
import pytest

from lowering.numba_cuda import blas


_ALLOCATED = {}  # pointer -> bytes of each stand-in device array


class _DeviceArray:
    """What gemm reads of a numba.cuda array: shape, dtype and the raw device pointer."""

    def __init__(self, array):
        self.array = np.ascontiguousarray(array)
        self.shape, self.dtype = self.array.shape, self.array.dtype
        self.device_ctypes_pointer = ctypes.c_void_p(self.array.ctypes.data)
        _ALLOCATED[self.array.ctypes.data] = self.array.nbytes


def _column_major(pointer, dtype, rows, cols, ld, stride, batch):
    """The ``batch`` matrices at ``pointer``, as cuBLAS addresses them (writable views); an
    access beyond the array behind the pointer fails, as it would fault on a GPU."""
    item = np.dtype(dtype).itemsize
    size = (batch - 1) * stride + (cols - 1) * ld + rows
    assert rows <= ld and size * item <= _ALLOCATED.get(pointer, 0), "out of bounds"
    flat = np.ctypeslib.as_array((ctypes.c_byte * (size * item)).from_address(pointer))
    flat = flat.view(dtype)
    return np.lib.stride_tricks.as_strided(
        flat, (batch, rows, cols), (stride * item, item, ld * item))


def _fake_cublas(calls):
    def gemm_strided_batched(dtype):
        def gemm(handle, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                 beta, c, ldc, stride_c, batch):
            calls.append((np.dtype(dtype).name, m, n, k))
            assert transa == transb == Operation.N
            scale = [np.frombuffer((ctypes.c_byte * np.dtype(dtype).itemsize).from_address(p),
                                   dtype)[0] for p in (alpha, beta)]
            A = _column_major(a, dtype, m, k, lda, stride_a, batch)
            B = _column_major(b, dtype, k, n, ldb, stride_b, batch)
            C = _column_major(c, dtype, m, n, ldc, stride_c, batch)
            product = scale[0] * np.matmul(A, B)
            C[...] = product if scale[1] == 0 else product + scale[1] * C  # beta 0: C unread
        return gemm

    class Operation:
        N, T = 0, 1

    return types.SimpleNamespace(Operation=Operation, create=lambda: 1,
                                 sgemm_strided_batched=gemm_strided_batched(np.float32),
                                 dgemm_strided_batched=gemm_strided_batched(np.float64))


@pytest.fixture
def cublas(monkeypatch):
    calls = []
    fake = _fake_cublas(calls)
    bindings = types.ModuleType("nvmath.bindings")
    bindings.cublas = fake
    monkeypatch.setitem(sys.modules, "nvmath", types.ModuleType("nvmath"))
    monkeypatch.setitem(sys.modules, "nvmath.bindings", bindings)
    monkeypatch.setitem(sys.modules, "nvmath.bindings.cublas", fake)
    monkeypatch.setattr(blas, "_handle", lambda: 1)
    return calls


@pytest.mark.parametrize("dtype, name", [(np.float64, "float64"), (np.float32, "float32")])
@pytest.mark.parametrize("batch, m, k, n", [(1, 3, 5, 4), (3, 7, 2, 6), (2, 1, 9, 1)])
def test_gemm_is_the_row_major_product(cublas, dtype, name, batch, m, k, n):
    rng = np.random.default_rng(batch * 100 + m * 10 + n)
    a = rng.normal(size=(batch, m, k)).astype(dtype)
    b = rng.normal(size=(batch, k, n)).astype(dtype)
    out = _DeviceArray(np.full((batch, m, n), np.nan, dtype))  # beta = 0: stale data ignored
    blas.gemm(_DeviceArray(a), _DeviceArray(b), out)
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(out.array, np.matmul(a, b), rtol=rtol, atol=rtol)
    assert cublas == [(name, n, m, k)]  # column-major: out^T = b^T a^T
