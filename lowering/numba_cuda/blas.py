"""Matrix products through cuBLAS, by nvmath-python's bindings over the raw device pointers of
numba.cuda arrays. Optional: without nvmath-python (or with ``QUABLA_CUBLAS=0``, or under the
simulator, which has no cuBLAS) products use the generated tiled kernel."""

import importlib.util
import os
import threading

import numpy as np

__all__ = ["available", "gemm"]

_local = threading.local()  # a cuBLAS handle per thread and device (handles are not shared)


def available():
    return (os.environ.get("QUABLA_CUBLAS", "1") != "0"
            and importlib.util.find_spec("nvmath") is not None)


def _handle():
    from numba import cuda
    from nvmath.bindings import cublas

    device = cuda.get_current_device().id
    handles = _local.__dict__.setdefault("handles", {})
    if device not in handles:
        handles[device] = cublas.create()
    return handles[device]


def gemm(a, b, out):
    """``out[i] = a[i] @ b[i]`` for C-contiguous device arrays of shapes (B, M, K), (B, K, N)
    and (B, M, N), on the default stream (the one the kernels use). Row-major ``out = a b`` is
    column-major ``out^T = b^T a^T``, so the operands are passed swapped, none transposed."""
    from nvmath.bindings import cublas

    batch, m, k = a.shape
    n = b.shape[2]
    kind = np.dtype(out.dtype)
    product = cublas.dgemm_strided_batched if kind == np.float64 else cublas.sgemm_strided_batched
    one, zero = np.ones(1, kind), np.zeros(1, kind)
    product(_handle(), cublas.Operation.N, cublas.Operation.N, n, m, k, one.ctypes.data,
            b.device_ctypes_pointer.value, n, k * n, a.device_ctypes_pointer.value, k, m * k,
            zero.ctypes.data, out.device_ctypes_pointer.value, n, m * n, batch)
