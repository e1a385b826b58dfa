"""How the CUDA test modules run their cases. numba.cuda reads NUMBA_ENABLE_CUDASIM when Numba
is first imported, and other tests import Numba in the same worker: so unless that variable is
set already, a module's cases run in ONE subprocess of the module under the simulator, which
prints their results as one JSON line. With it set (``=1``: the simulator, ``=0``: a real GPU),
they run in the test process: ``pytest -m cuda`` alone on a GPU machine tests the device."""

import contextlib
import fcntl
import importlib.util
import json
import os
import subprocess
import sys
import traceback

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def require_numba_cuda():
    """Skips the calling test module where numba-cuda is not installed."""
    if importlib.util.find_spec("numba_cuda") is None:
        pytest.skip("numba-cuda is not installed (the 'test' and 'cuda' extras install it)",
                    allow_module_level=True)


def run_cases(jobs):
    """``{name: "ok" or the error}`` of calling each ``(name, function)`` of ``jobs``."""
    results = {}
    for name, job in jobs:
        try:
            with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON line
                job()
            results[name] = "ok"
        except Exception:  # reported per case by the test that asserts it
            results[name] = traceback.format_exc(limit=6)
    return results


def results(script, run_all, timeout, shared=None):
    """The results of ``run_all()``: here if NUMBA_ENABLE_CUDASIM is set, else from ``script``
    run under the simulator. With ``shared`` (a directory all xdist workers see) the subprocess
    runs once per test session and its results are read from a file there."""
    if "NUMBA_ENABLE_CUDASIM" in os.environ:
        return run_all()
    if shared is None:
        return json.loads(_simulated(script, timeout))
    path = shared / f"quabla_{os.path.basename(script)}.json"
    with open(shared / f"quabla_{os.path.basename(script)}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            path.write_text(_simulated(script, timeout))
    return json.loads(path.read_text())


def _simulated(script, timeout):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run([sys.executable, script], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        pytest.fail(f"the CUDA case runner failed:\n{done.stderr[-4000:]}")
    return done.stdout.splitlines()[-1]
