"""Threads for the tile loop of a batch axis (lowering/loopnest/schedule.py's ``TileBegin``),
and how many threads this process should use at all.

A program whose tile loop is worth splitting is compiled as a phased entry (codegen.py): one
call runs what comes before the loop, then each block of tiles runs with its own scratch and
its own partial sums, then one call combines the partials in block order and runs the rest.
Blocks are fixed by the thread count, so for a given ``QUABLA_NUM_THREADS`` the results are
the same bits on every call, whichever thread runs a block and whatever the timing. The entry
releases the GIL, so plain Python threads run the blocks at once; the calling thread runs the
first block itself and then any block no other thread has begun (``run_blocks``). Each entry
times both ways, threads or its caller's alone, and keeps to the faster (``Blocks``): on a
loaded machine a second thread often costs more than it saves.

How many: ``QUABLA_NUM_THREADS``, else this process's share of the cores it may run on
(``os.sched_getaffinity``), split among the MPI ranks of the node that share them (the
launcher's environment says how many: ``MPI_LOCALNRANKS``, ``OMPI_COMM_WORLD_LOCAL_SIZE``),
so ranks × threads does not exceed the cores. BLAS follows the same share (``limit_blas``,
through threadpoolctl) unless its own variables are set.

Products inside the loop call BLAS, whose own threads would compete with the loop's: while
blocks run on threads, every BLAS threadpoolctl finds (the one generated code calls,
``fortran.py``'s, and any other) is set to one thread, and set back when the last one ends (the
setting is process-wide). Only a product large enough for BLAS to start threads needs it
(``SERIAL_BLAS``); under float64's tile sizes none is.
"""

import contextlib
import os
import threading
import time

from .. import fortran

__all__ = ["count", "share", "local_processes", "limit_blas", "blas_controller", "WORTH_ELEMENTS",
           "SERIAL_BLAS", "Phases", "Blocks", "run_blocks", "blocks"]

# A tile loop writing fewer elements than this (over all its tiles) runs on the calling
# thread: waking a second thread costs tens of microseconds.
WORTH_ELEMENTS = 1 << 17
# OpenBLAS runs a product of at most this many multiplies (m * k * n) on the calling thread
# (its interface/gemm.c: SMP_THRESHOLD_MIN times GEMM_MULTITHREAD_THRESHOLD)
SERIAL_BLAS = 65536 * 4


class Phases:
    """How a threaded entry is called (passes.phased): ``rows``, the control rows of the call
    before its tile loop, of each block of tiles, and of the call after it; ``blas``, whether
    a product in the loop is large enough (over ``SERIAL_BLAS``) that BLAS would start threads
    of its own inside a block (``run_blocks`` then holds it to one: setting it costs ~20 us)."""

    def __init__(self, before, each, after, blas):
        self.rows = (before, each, after)
        self.blas = blas

_pool = None
_lock = threading.Lock()


def count():
    """Threads for tile loops: ``QUABLA_NUM_THREADS``, else ``share()``."""
    value = os.environ.get("QUABLA_NUM_THREADS")
    if value is None:
        return share()
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"QUABLA_NUM_THREADS must be a positive integer, got {value!r}")
    return n


# how many processes an MPI launcher started on this node (MPICH's Hydra, Open MPI)
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")


def share(cores=None, cpus=None, environ=None):
    """This process's share of the cores: the cores it may run on (``os.sched_getaffinity``),
    divided among the node's MPI ranks that share them. ``cpus`` is what the launcher may
    run on (its affinity: the machine, or a container's cpuset); a rank whose mask is
    smaller was bound by the launcher, and shares its mask with ``local ranks × mask / cpus``
    ranks: none when each has cores of its own, all of them when none is bound. At least 1."""
    if cores is None:
        cores = _affinity(0) or os.cpu_count() or 1
    if cpus is None:
        cpus = _affinity(os.getppid()) or os.cpu_count() or cores
    sharing = max(1, round(local_processes(environ) * cores / max(cpus, cores)))
    return max(1, cores // sharing)


def _affinity(pid):
    """How many CPUs process ``pid`` may run on (None where that cannot be read)."""
    try:
        return len(os.sched_getaffinity(pid))
    except (AttributeError, OSError):  # not Linux, or the process is gone
        return None


def local_processes(environ=None):
    """How many processes an MPI launcher started on this node (1 without one)."""
    environ = os.environ if environ is None else environ
    for name in LOCAL_SIZE_VARIABLES:
        try:
            return max(1, int(environ[name]))
        except (KeyError, ValueError):
            continue
    return 1


def blocks(extent, tile, threads):
    """``[(first row, end row)]`` of each thread's block of tiles: contiguous, as even as the
    tile count allows (a thread may get none)."""
    n = extent // tile
    return [(t * n // threads * tile, (t + 1) * n // threads * tile) for t in range(threads)]


BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                  "BLIS_NUM_THREADS")
_controller = None
_blas_limited = False


def blas_controller():
    """threadpoolctl's controller of the BLAS libraries in this process (made once, after
    the one generated code calls is loaded: ``fortran.load``), or None without
    threadpoolctl."""
    global _controller
    if _controller is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            return None
        fortran.load()
        _controller = ThreadpoolController().select(user_api="blas")
    return _controller


def limit_blas():
    """Set BLAS to this process's share of the cores (``share()``) once per process, unless a
    BLAS variable (``OPENBLAS_NUM_THREADS``, ...) is set: the user's choice wins. Without
    other processes on the node the share is every core, which is BLAS's own default, and
    nothing is touched (nor threadpoolctl imported). Returns the count set, or None."""
    global _blas_limited
    if _blas_limited or any(name in os.environ for name in BLAS_VARIABLES):
        return None
    _blas_limited = True
    n = share()
    cores = _affinity(0) or os.cpu_count() or 1
    controller = blas_controller() if n < cores else None
    if controller is None:
        return None
    controller.limit(limits=n)
    return n


_blas_users = 0
_blas_limiter = None


@contextlib.contextmanager
def _one_blas_thread():
    """BLAS on one thread while any threaded loop runs."""
    global _blas_users, _blas_limiter
    with _lock:
        if _blas_users == 0:
            controller = blas_controller()
            _blas_limiter = controller.limit(limits=1) if controller is not None else None
        _blas_users += 1
    try:
        yield
    finally:
        with _lock:
            _blas_users -= 1
            if _blas_users == 0 and _blas_limiter is not None:
                _blas_limiter.restore_original_limits()
                _blas_limiter = None


def _executor():
    global _pool
    with _lock:
        if _pool is None:
            import concurrent.futures  # 1.6 ms of every first call that never tiles

            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(count() - 1, 1), thread_name_prefix="quabla-tiles")
        return _pool


def _after_fork():
    """A forked child has none of the pool's threads (a task given to the old pool would
    wait forever) and may have forked while a lock was held."""
    global _pool, _lock, _blas_users, _blas_limiter
    _pool, _lock, _blas_users, _blas_limiter = None, threading.Lock(), 0, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def run_blocks(fn, base, controls, blas=True, pool=None):
    """``fn(base + c)`` for every control row ``c`` of ``controls`` (a block of tiles each),
    returning when all are done. The pool's threads are offered every block but the first,
    which this thread runs; then it runs each block no other thread has begun, so a thread
    woken late (on a loaded machine) finds its work done rather than holding up the call.
    Each block has its own scratch and partials whichever thread runs it: the same bits. With
    ``blas`` (a product in the loop large enough for BLAS to start threads of its own), BLAS
    runs on one thread meanwhile. ``pool``: the executor offered the blocks (this process's)."""
    with _one_blas_thread() if blas else contextlib.nullcontext():
        claims = [threading.Lock() for _ in controls]
        done = [threading.Lock() for _ in controls]
        for lock in done:
            lock.acquire()

        def run(k):
            if claims[k].acquire(blocking=False):
                try:
                    fn(base + controls[k])
                finally:
                    done[k].release()

        pool = pool or _executor()
        for k in range(1, len(controls)):
            pool.submit(run, k)
        try:
            for k in range(len(controls)):
                run(k)
        finally:  # (after an error, no block begins once this returns)
            for k, claim in enumerate(claims):
                if claim.acquire(blocking=False):
                    done[k].release()
            for lock in done:  # the blocks other threads began
                lock.acquire()


class Blocks:
    """How one threaded entry runs its blocks of tiles: on the pool's threads too
    (``run_blocks``) or all on the calling thread, whichever has lately been faster. On a
    loaded machine a second thread often costs more than it saves (its wake-up waits for a
    core), and a machine's load changes while a program runs. Both ways give the same bits:
    each block has its own scratch and partials. The way not taken is timed again every
    ``EXPLORE`` calls; a product large enough for BLAS threads (``blas``) gets them when the
    blocks run on one thread. ``pool``: the executor offered the blocks (this process's)."""

    EXPLORE = 16
    WEIGHT = 0.25  # of the latest time in each way's running mean

    def __init__(self, blas, pool=None):
        self.blas, self.pool = blas, pool
        self.seconds = [None, None]  # running mean of the blocks' time: [one thread, threads]
        self.calls = 0

    def __call__(self, fn, base, controls):
        self.calls += 1
        serial, threaded = self.seconds
        if serial is None or threaded is None:
            way = int(serial is not None)
        else:
            way = int(threaded < serial) ^ (self.calls % self.EXPLORE == 0)
        start = time.perf_counter()
        if way:
            run_blocks(fn, base, controls, self.blas, self.pool)
        else:
            for row in controls:
                fn(base + row)
        took = time.perf_counter() - start
        mean = self.seconds[way]  # other callers may update it meanwhile: a sample lost
        self.seconds[way] = took if mean is None else mean + self.WEIGHT * (took - mean)
