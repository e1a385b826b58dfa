"""Background compilation: a program runs on the NumPy interpreter at once while a worker
process compiles it into the compile cache, and switches to native code when the worker is done.

One worker per process, ``python -m lowering.background``, compiles the programs it is sent one
after another (it imports the compiler once: llvmlite, and Numba if a part needs it). Each request is the path of a
private temporary file holding the pickled graph and device; the worker calls
``lowering.compile``, which stores the entry in the cache (object code, then the manifest that
vouches for it, each written to a temporary file and renamed into place), and answers one line.
A worker that crashes or is killed therefore leaves no entry that could be linked: its programs
keep interpreting, compile in-process on their next call, and later requests start a new worker.

Results agree with native code within float tolerance, not bitwise: the interpreter evaluates
op by op with NumPy, the native code fuses loops and uses its own kernels.
"""

import atexit
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time

from . import backend_for
from . import compile as lower_compile
from quabla.core.interpret import evaluate

__all__ = ["compile_in_background", "Background"]

logger = logging.getLogger("quabla")

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # holds lowering/, quabla/
_PENDING = None  # the code of a request not answered yet


def compile_in_background(graph, device, label, on_native, options=None):
    """An executable for ``graph`` that answers at once: the native one if the cache has it
    (or the back end is not compiled), else a ``Background`` that interprets until the worker
    is done and then passes the native ``run`` to ``on_native``."""
    if backend_for(device) != "numba":
        return lower_compile(graph, device, options)
    from .numba_cpu import load_cached

    native = load_cached(graph)
    if native is not None:
        logger.info("loaded %s from the compile cache", label)
        return native
    return Background(graph, device, label, on_native)


class Background:
    """Interprets ``graph`` until the worker's entry is in the cache, then runs native code.

    ``run`` reads the request's answer (set by the worker's reader thread); once there, the
    entry is linked from the cache, or, if the worker failed, this call still interprets and
    the next one compiles in-process. One thread at a time makes that move; others interpret."""

    def __init__(self, graph, device, label, on_native):
        self.graph = graph
        self.device = device
        self.label = label
        self._on_native = on_native
        self._native = None
        self._failed = False
        self._lock = threading.Lock()
        self._start = time.perf_counter()
        self._request = _Request(graph, device)
        self.worker = _WORKER.submit(self._request)  # the process compiling it
        logger.info("compiling %s in a worker process (pid %d); interpreting meanwhile",
                    label, self.worker.pid)

    def run(self, *args):
        if self._native is None and self._lock.acquire(blocking=False):
            try:
                self._advance()
            finally:
                self._lock.release()
        native = self._native
        if native is not None:
            return native(*args)
        return evaluate(self.graph, args)

    def _advance(self):
        if self._failed:
            start = time.perf_counter()
            self._switch(lower_compile(self.graph, self.device))
            logger.info("compiled %s in-process in %.1f ms; running native code", self.label,
                        1e3 * (time.perf_counter() - start))
            return
        code = self._request.code
        if code is _PENDING:
            return
        from .numba_cpu import load_cached

        native = load_cached(self.graph) if code == 0 else None
        if native is None:
            self._failed = True
            logger.warning("the worker compiling %s left no cache entry (code %s); "
                           "interpreting, compiling in-process on the next call", self.label, code)
            return
        self._switch(native)
        logger.info("switched %s to native code, compiled in the background in %.1f ms",
                    self.label, 1e3 * (time.perf_counter() - self._start))

    def _switch(self, executable):
        self._native = executable.run
        on_native, self._on_native = self._on_native, None
        on_native(self._native)


class _Request:
    """One graph to compile: its pickle in a private temporary file, and the worker's answer
    (``code``: 0 compiled, else failed; ``_PENDING`` until then)."""

    def __init__(self, graph, device):
        fd, self.path = tempfile.mkstemp(prefix="quabla-graph-", suffix=".pickle")
        with os.fdopen(fd, "wb") as f:
            pickle.dump((graph, device), f, protocol=pickle.HIGHEST_PROTOCOL)
        self.code = _PENDING

    def answer(self, code):
        _remove(self.path)  # the worker removes it once read; not if it died first
        self.code = code


class _Worker:
    """The worker process, started on the first request and again after it died. Requests are
    answered in order, one line each; a reader thread hands the answers to the requests, and
    at the worker's end answers every open one with its exit code."""

    def __init__(self):
        self._lock = threading.Lock()
        self._process = None
        self._open = []

    def submit(self, request):
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
            process = self._process
            self._open.append(request)
            try:
                process.stdin.write(request.path.encode() + b"\n")
                process.stdin.flush()
            except OSError:  # it just died: the reader answers the request
                pass
        return process

    def _start(self):
        from . import cache

        # the same tree of packages (from the working directory) and the same cache directory
        env = dict(os.environ, QUABLA_CACHE_DIR=cache.cache_dir())
        process = subprocess.Popen(
            [sys.executable, "-m", "lowering.background"], cwd=_ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._process, self._open = process, []
        threading.Thread(target=self._read, args=(process, self._open), daemon=True,
                         name="quabla-background-compile").start()

    def _read(self, process, requests):
        with process.stdout:
            for line in process.stdout:
                with self._lock:
                    request = requests.pop(0)
                request.answer(0 if line.strip() == b"ok" else 1)
        code = process.wait()
        with self._lock:
            _close(process.stdin)
            for request in requests:
                request.answer(code)
            requests.clear()

    def close(self):
        """At exit: close the worker's input, so it ends after the program it compiles."""
        with self._lock:
            if self._process is not None:
                _close(self._process.stdin)


def _close(pipe):
    try:
        pipe.close()
    except OSError:  # unwritten requests to a worker that died
        pass


_WORKER = _Worker()
atexit.register(_WORKER.close)


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def main():
    """The worker: compile the graph of each path read from stdin into the cache, answering
    ``ok`` or ``failed`` per line on the original stdout (anything else printed goes nowhere)."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)

    for line in sys.stdin:
        path = line.rstrip("\n")
        try:
            with open(path, "rb") as f:
                data = f.read()
            _remove(path)
            graph, device = pickle.loads(data)  # imports quabla: every primitive registered
            lower_compile(graph, device)
            answer = "ok"
        except Exception:
            answer = "failed"
        answers.write(answer + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
