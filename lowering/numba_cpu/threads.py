"""Threads for the tile loop of a batch axis (lowering/loopnest/schedule.py's ``TileBegin``).

A program whose tile loop is worth splitting is compiled as a phased entry (codegen.py): one
call runs what comes before the loop, then each thread runs its block of tiles with its own
scratch and its own partial sums, then one call combines the partials in thread order and runs
the rest. Blocks are fixed by the thread count, so for a given ``QUABLA_NUM_THREADS`` the
results are the same bits on every call, whatever the timing. The entry releases the GIL, so
plain Python threads run the blocks at once; the calling thread runs the first block itself.

Products inside the loop call BLAS, whose own threads would compete with the loop's: while
any threaded loop runs, OpenBLAS (the BLAS Numba finds through SciPy) is set to one thread,
and set back when the last one ends (OpenBLAS's setting is process-wide in SciPy's build, even
``openblas_set_num_threads_local``'s). Other BLAS libraries follow their environment
(``MKL_NUM_THREADS``, ``OMP_NUM_THREADS``).
"""

import concurrent.futures
import contextlib
import ctypes
import os
import threading

from .. import native

__all__ = ["count", "WORTH_ELEMENTS", "run_blocks", "blocks"]

# A tile loop writing fewer elements than this (over all its tiles) runs on the calling
# thread: waking a second thread costs tens of microseconds.
WORTH_ELEMENTS = 1 << 17

_pool = None
_lock = threading.Lock()
_blas = None  # (get, set) of the thread count of each OpenBLAS in the process


def count():
    """Threads for tile loops: ``QUABLA_NUM_THREADS``, else the cores this process may use."""
    value = os.environ.get("QUABLA_NUM_THREADS")
    if value is None:
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            return os.cpu_count() or 1
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"QUABLA_NUM_THREADS must be a positive integer, got {value!r}")
    return n


def blocks(extent, tile, threads):
    """``[(first row, end row)]`` of each thread's block of tiles: contiguous, as even as the
    tile count allows (a thread may get none)."""
    n = extent // tile
    return [(t * n // threads * tile, (t + 1) * n // threads * tile) for t in range(threads)]


_NAMES = [("openblas_get_num_threads", "openblas_set_num_threads"),
          ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
          ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_")]


def _blas_controls():
    """``(get, set)`` of the thread count of each OpenBLAS loaded (SciPy's is loaded first:
    it is the one generated code calls)."""
    global _blas
    if _blas is None:
        native.blas_symbols()  # loads SciPy's OpenBLAS, if installed
        try:
            with open("/proc/self/maps") as maps:
                paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower()})
        except OSError:  # not Linux
            paths = []
        controls = []
        for path in paths:
            library = ctypes.CDLL(path)
            for get_name, set_name in _NAMES:
                get, put = (getattr(library, n, None) for n in (get_name, set_name))
                if get is not None and put is not None:
                    get.restype, put.argtypes = ctypes.c_int, [ctypes.c_int]
                    controls.append((get, put))
                    break
        _blas = controls
    return _blas


_blas_users = 0
_blas_saved = []


@contextlib.contextmanager
def _one_blas_thread():
    """BLAS on one thread while any threaded loop runs."""
    global _blas_users, _blas_saved
    with _lock:
        if _blas_users == 0:
            _blas_saved = [(put, get()) for get, put in _blas_controls()]
            for put, _ in _blas_saved:
                put(1)
        _blas_users += 1
    try:
        yield
    finally:
        with _lock:
            _blas_users -= 1
            if _blas_users == 0:
                for put, n in _blas_saved:
                    put(n)


def _executor():
    global _pool
    with _lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(count() - 1, 1), thread_name_prefix="quabla-tiles")
        return _pool


def _after_fork():
    """A forked child has none of the pool's threads (a task given to the old pool would
    wait forever) and may have forked while a lock was held."""
    global _pool, _lock, _blas_users
    _pool, _lock, _blas_users = None, threading.Lock(), 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def run_blocks(fn, base, controls):
    """``fn(base + c)`` for every control tuple ``c``, the first on this thread and the rest on
    the pool's threads (BLAS on one thread meanwhile), returning when all are done."""
    with _one_blas_thread():
        pending = [_executor().submit(fn, base + c) for c in controls[1:]]
        try:
            fn(base + controls[0])
        finally:
            for future in pending:
                future.result()
