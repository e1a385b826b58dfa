"""Arrays that start on a cache line: the arrays a compiled program reads and writes; and the
cyclic garbage collector paused while a program is staged and compiled.

NumPy aligns its allocations to 16 bytes, so an array of floats starts on a 64-byte cache line
in a quarter of the processes. A vectorised loop's 32-byte loads then straddled cache lines in
some runs and not in others: a Poisson regression's step took 64 or 95 µs by where the heap put
its arrays. Leaf module (NumPy only): the arrays (``array.py``) and the back ends both use it.
"""

import contextlib
import gc
import math
import threading

import numpy as np

__all__ = ["ALIGNMENT", "ALIGNED_BYTES", "aligned_empty", "aligned_copy", "collection_paused"]

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


_pauses = [0, False]  # callers inside ``collection_paused``, whether the collector was on
_pauses_lock = threading.Lock()


@contextlib.contextmanager
def collection_paused():
    """Python's cyclic garbage collector paused while the block runs (in any thread; it
    resumes when the last one leaves). Tracing, generating and compiling a program allocate
    tens of thousands of objects that live until it is done: the collections they set off walk
    them again and again (4-20 ms of a first call, a tenth of an edit's), and Numba's first
    compile builds millions of long-lived objects (each full collection 30-60 ms). What the
    block leaves behind is collected as usual afterwards."""
    with _pauses_lock:
        if _pauses[0] == 0:
            _pauses[1] = gc.isenabled()
            gc.disable()
        _pauses[0] += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses[0] -= 1
            if _pauses[0] == 0 and _pauses[1]:
                gc.enable()
