"""Background compilation (issue 11, item 3): jit(f, compile="background") answers a new
signature on the reference interpreter while a worker process compiles it, then switches to
native code; a worker that dies leaves no cache entry and the program compiles in-process."""

import glob
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import quabla as qb
from lowering import cache
from lowering.background import Background
from lowering.numba_cpu import load_cached, module_source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WAIT_S = 300  # a cold worker imports Quabla and Numba and compiles; the machine may be loaded


_MIX = np.random.default_rng(2).normal(size=(5, 5)) / 3.0


def _program(offset, layers=0):
    """A small program whose constant makes its cache key new in every test run; its second
    output is a transposed view, which a Tensor must still hold C-contiguous. ``layers`` more
    products make it slow to compile (a worker killed while it compiles)."""
    offset = float(offset)

    def program(x, w):
        h = qb.tanh(x @ w + offset)
        for _ in range(layers):
            h = qb.tanh(h @ qb.array(_MIX) + offset)
        return qb.sum(h * h) / 3.0, h.T

    return program


def _args():
    rng = np.random.default_rng(1)
    return qb.array(rng.normal(size=(4, 3))), qb.array(rng.normal(size=(3, 5)))


def _reference(x, w, offset, layers=0):
    h = np.tanh(np.asarray(x) @ np.asarray(w) + offset)
    for _ in range(layers):
        h = np.tanh(h @ _MIX + offset)
    return np.sum(h * h) / 3.0, h.T


def _offset():
    return time.time_ns() % 10**9 / 10**9 + os.getpid()


def _run_of(f):
    (entry,) = f._cache.values()
    return entry.run


def _background(f):
    """The ``Background`` behind ``f``'s one program while it interprets, else None."""
    owner = getattr(_run_of(f), "__self__", None)
    return owner if isinstance(owner, Background) else None


def _messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "quabla"]


def _check(out, x, w, offset, layers=0):
    value, ht = _reference(x, w, offset, layers)
    np.testing.assert_allclose(np.asarray(out[0]), value, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(out[1]), ht, rtol=1e-12, atol=1e-12)
    assert np.asarray(out[1]).flags.c_contiguous


def _entry_files(graph):
    return [p for source in module_source(graph)[0] for suffix in (".o", ".manifest.json")
            for p in glob.glob(os.path.join(cache.cache_dir(), cache.entry_key(source) + suffix))]


def test_interpreter_answers_first_then_native_code(caplog):
    caplog.set_level(logging.INFO, logger="quabla")
    offset = _offset()
    f = qb.jit(_program(offset), compile="background")
    x, w = _args()
    first = f(x, w)
    assert _background(f) is not None, "the first call did not run on the interpreter"
    assert any("interpreting meanwhile" in m for m in _messages(caplog))
    _check(first, x, w, offset)
    interpreted, deadline = first, time.monotonic() + WAIT_S
    while _background(f) is not None:
        assert time.monotonic() < deadline, "the worker did not finish"
        interpreted = f(x, w)
        time.sleep(0.02)
    _check(interpreted, x, w, offset)
    assert any("switched" in m and "native code" in m for m in _messages(caplog))
    native = f(x, w)
    _check(native, x, w, offset)
    # agree within tolerance across the switch (bitwise equality is not promised)
    np.testing.assert_allclose(np.asarray(native[0]), np.asarray(first[0]), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(native[1]), np.asarray(first[1]), rtol=1e-13)

    # a warm cache: native code at once, no worker
    caplog.clear()
    g = qb.jit(_program(offset), compile="background")
    _check(g(x, w), x, w, offset)
    assert _background(g) is None
    assert not any("worker" in m for m in _messages(caplog))
    assert any("loaded" in m and "compile cache" in m for m in _messages(caplog))


def test_killed_worker_leaves_no_entry_and_compiles_in_process(caplog):
    """(The worker is killed just after the first call: its program is one a worker that
    imported the compiler for an earlier test still takes long to compile.)"""
    caplog.set_level(logging.INFO, logger="quabla")
    offset, layers = _offset() + 0.5, 40
    f = qb.jit(_program(offset, layers), compile="background")
    x, w = _args()
    _check(f(x, w), x, w, offset, layers)
    background = _background(f)
    background.worker.kill()
    assert background.worker.wait(timeout=60) != 0
    # calls keep interpreting, up to the one that finds the worker dead
    deadline = time.monotonic() + 60
    while not any("left no cache entry" in m for m in _messages(caplog)):
        assert time.monotonic() < deadline, "the dead worker went unnoticed"
        _check(f(x, w), x, w, offset, layers)
        assert _background(f) is background
        time.sleep(0.01)
    assert _entry_files(background.graph) == [], "a killed worker left a partial entry"
    assert load_cached(background.graph) is None
    # the next call compiles in-process and runs native code from then on
    _check(f(x, w), x, w, offset, layers)
    assert _background(f) is None
    assert any("in-process" in m for m in _messages(caplog))
    assert load_cached(background.graph) is not None
    _check(f(x, w), x, w, offset, layers)


def test_threads_missing_a_signature_share_one_worker(caplog):
    caplog.set_level(logging.INFO, logger="quabla")
    offset = _offset() + 0.25
    f = qb.jit(_program(offset), compile="background")
    x, w = _args()
    results = []
    threads = [threading.Thread(target=lambda: results.append(f(x, w))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(results) == 4
        for out in results:
            _check(out, x, w, offset)
        assert sum("in a worker process" in m for m in _messages(caplog)) == 1
    finally:
        background = _background(f)
        if background is not None:
            background.worker.kill()
            background.worker.wait()


def test_quabla_compile_environment_variable(tmp_path):
    """QUABLA_COMPILE=background applies to every jit without compile=; an explicit
    compile="eager" still compiles before returning."""
    script = textwrap.dedent("""
        import numpy as np
        import quabla as qb
        from lowering.background import Background
        f = qb.jit(lambda x: qb.sum(qb.sin(x) * x))
        g = qb.jit(lambda x: qb.sum(qb.cos(x) * x), compile="eager")
        x = qb.array([0.5, 1.5, 2.5])
        print(repr(f(x)), repr(g(x)))
        for h in (f, g):
            (entry,) = h._cache.values()
            owner = getattr(entry.run, "__self__", None)
            print(type(owner).__name__ if isinstance(owner, Background) else "native")
            if isinstance(owner, Background):
                owner.worker.kill()
                owner.worker.wait()
    """)
    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=ROOT,
               QUABLA_COMPILE="background", QUABLA_LOG_COMPILES="1")
    env.pop("QUABLA_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True, timeout=WAIT_S)
    lines = out.stdout.splitlines()
    x = np.array([0.5, 1.5, 2.5])
    assert lines[0] == (f"{qb.array(np.sum(np.sin(x) * x))!r} "
                        f"{qb.array(np.sum(np.cos(x) * x))!r}")
    assert lines[1:] == ["Background", "native"]
    assert "interpreting meanwhile" in out.stderr


def test_bad_compile_modes_are_value_errors(monkeypatch):
    for bad in ("lazy", True, "Background"):
        with pytest.raises(ValueError, match=r"compile=.*'eager', 'background'"):
            qb.jit(lambda x: x, compile=bad)
    monkeypatch.setenv("QUABLA_COMPILE", "later")
    with pytest.raises(ValueError, match=r"QUABLA_COMPILE='later'.*'eager', 'background'"):
        qb.jit(lambda x: x * 2.0)(qb.array([1.0]))
