"""Arrays that start on a cache line: the arrays a compiled program reads and writes.

NumPy aligns its allocations to 16 bytes, so an array of floats starts on a 64-byte cache line
in a quarter of the processes. A vectorised loop's 32-byte loads then straddled cache lines in
some runs and not in others: a Poisson regression's step took 64 or 95 µs by where the heap put
its arrays. Leaf module (NumPy only): the arrays (``array.py``) and the back ends both use it.
"""

import math

import numpy as np

__all__ = ["ALIGNMENT", "ALIGNED_BYTES", "aligned_empty", "aligned_copy"]

ALIGNMENT = 64  # bytes: a cache line, two AVX2 vectors
# A copy of fewer bytes is NumPy's own: aligning costs ~2 µs (reading the address back), more
# than a few straddled loads of a small array cost a step.
ALIGNED_BYTES = 4096


def aligned_empty(shape, dtype):
    """``np.empty(shape, dtype)``, its first element on a cache line (a view of a slightly
    larger buffer, which it keeps alive)."""
    dtype = np.dtype(dtype)
    shape = tuple(shape) if np.ndim(shape) else (int(shape),)
    size = math.prod(shape) * dtype.itemsize
    raw = np.empty(size + ALIGNMENT, np.uint8)
    start = -raw.__array_interface__["data"][0] % ALIGNMENT  # half ``ctypes.data``'s cost
    return raw[start:start + size].view(dtype).reshape(shape)


def aligned_copy(array, dtype=None):
    """A read-only, C-contiguous copy of ``array`` (cast to ``dtype`` as ``np.array`` casts)
    on a cache line if it has ``ALIGNED_BYTES`` or more. Its buffer is read-only too, so no
    view of it can be made writeable."""
    array = np.asarray(array)
    dtype = array.dtype if dtype is None else np.dtype(dtype)
    if array.size * dtype.itemsize < ALIGNED_BYTES:
        out = np.array(array, dtype=dtype, order="C", copy=True)
        out.setflags(write=False)
        return out
    out = aligned_empty(array.shape, dtype)
    out[...] = array
    base = out
    while base.base is not None:
        base = base.base
    base.setflags(write=False)
    out.setflags(write=False)
    return out
