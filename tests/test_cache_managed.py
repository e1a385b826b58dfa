"""The managed compile cache: a size bound with least-recently-used eviction that concurrent
readers survive, ``python -m quabla.cache info|clear``, and concurrent compiles of one program
(docs/compile-cache.md)."""

import glob
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from lowering import cache
from test_compile_cache import ROOT

FAKE_CODE = 4096  # bytes of object code of an entry written by hand


@pytest.fixture
def private(tmp_path, monkeypatch):
    """This process's cache, moved to a fresh directory."""
    path = tmp_path / "cache"
    monkeypatch.setenv("QUABLA_CACHE_DIR", str(path))
    monkeypatch.setattr(cache, "_DIRS", None)
    return path


def _fake(path, name, code=None):
    """Write an entry for the program called ``name`` (unique per test directory) by hand, as
    the back end would; returns its key."""
    key = cache.entry_key(f"# {path}: {name}")
    cache.write_source(key, f"# {name}\n")
    code = code if code is not None else bytes([len(name)]) * FAKE_CODE
    cache.write_object(key, code, f"cfunc.quabla_cache.{key}.quabla_entry", ["sin"])
    return key


def _files(path):
    return {os.path.basename(p) for p in glob.glob(os.path.join(path, "qb_*"))}


def _keys(path):
    return {name[:-len(".manifest.json")] for name in _files(path)
            if name.endswith(".manifest.json")}


def _size(path):
    """The bytes of the cache's entries (its lock and size ledger aside)."""
    return sum(os.path.getsize(os.path.join(path, name)) for name in _files(path)
               if name not in ("qb_lock", "qb_size"))


def _age(path, keys):
    """Mark ``keys`` used in that order, the first longest ago."""
    for i, key in enumerate(keys):
        os.utime(os.path.join(path, key + ".manifest.json"), ns=(i * 10**9, i * 10**9))


def test_least_recently_used_entries_are_evicted_first(private, monkeypatch):
    keys = [_fake(private, f"p{i}") for i in range(5)]
    entry = _size(private) // 5
    _age(private, keys)
    assert cache.read_object(keys[0]) is not None  # a hit makes p0 the most recently used
    monkeypatch.setenv("QUABLA_CACHE_MAX_BYTES", str(4 * entry))
    newest = _fake(private, "p5")
    assert _keys(private) == {keys[0], keys[3], keys[4], newest}
    assert not any(name.startswith((keys[1], keys[2])) for name in _files(private)), \
        "an evicted entry left files behind"
    assert cache.read_object(keys[1]) is None
    code, manifest = cache.read_object(newest)
    assert code == bytes([2]) * FAKE_CODE and manifest["key"] == newest


def test_bound_is_respected_after_every_write(private, monkeypatch):
    monkeypatch.setenv("QUABLA_CACHE_MAX_BYTES", "20K")
    written = []
    for i in range(12):
        written.append(_fake(private, f"q{i}"))
        assert _size(private) <= 20 * 1024
        assert cache.read_object(written[-1]) is not None, "the newest entry was evicted"
    assert 0 < len(_keys(private)) < 12


def test_writes_count_the_size_instead_of_scanning_the_directory(private, monkeypatch):
    """A write costs one small file written over in place, not a look at every entry; a
    missing, unreadable or hour-old ledger, or a write past the bound, counts the directory
    again."""
    scans = []
    scan = cache._scan
    monkeypatch.setattr(cache, "_scan", lambda: scans.append(1) or scan())
    keys = [_fake(private, f"s{i}") for i in range(9)]
    assert len(scans) == 1  # the first write: no ledger yet
    ledger = private / "qb_size"
    inode = ledger.stat().st_ino
    keys.append(_fake(private, "s9"))
    assert ledger.stat().st_ino == inode  # written over in place, not renamed over
    size, scanned = map(int, ledger.read_text().split())
    assert size == _size(private)
    ledger.write_text(f"{size} {scanned - (cache.RESCAN_SECONDS + 1) * 10**9}")
    _fake(private, "old")
    ledger.write_text("not a ledger")
    _fake(private, "bad")
    entries = _size(private)
    assert len(scans) == 3 and int(ledger.read_text().split()[0]) == entries
    monkeypatch.setenv("QUABLA_CACHE_MAX_BYTES", str(entries + 10))
    newest = _fake(private, "past")
    assert len(scans) == 4 and _size(private) <= entries + 10
    assert keys[0] not in _keys(private) and newest in _keys(private)
    assert cache.clear()[0] > 0 and not ledger.exists()


@pytest.mark.parametrize("value, size", [(None, 2 * 1024**3), ("0", 0), ("12345", 12345),
                                         ("64K", 64 * 1024), ("3M", 3 * 1024**2),
                                         ("2G", 2 * 1024**3), ("1t", 1024**4)])
def test_bound_from_the_environment(monkeypatch, value, size):
    if value is None:
        monkeypatch.delenv("QUABLA_CACHE_MAX_BYTES", raising=False)
    else:
        monkeypatch.setenv("QUABLA_CACHE_MAX_BYTES", value)
    assert cache.max_bytes() == size


@pytest.mark.parametrize("value", ["-1", "lots", "2.5G", "G"])
def test_bad_bound_is_a_value_error(monkeypatch, value):
    monkeypatch.setenv("QUABLA_CACHE_MAX_BYTES", value)
    with pytest.raises(ValueError, match="QUABLA_CACHE_MAX_BYTES"):
        cache.max_bytes()


_STARTED = []  # the processes ``_start`` started for the running test


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test():
    """A test that fails before it tells its helper to stop (a reader loops until then) must
    not leave the helper running: one did, a core busy for half an hour after the suite."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _start(script, cache_dir, *args, bound=None):
    env = dict(os.environ, QUABLA_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    env.pop("QUABLA_BACKEND", None)
    env.pop("QUABLA_CACHE_MAX_BYTES", None)
    if bound is not None:
        env["QUABLA_CACHE_MAX_BYTES"] = str(bound)
    proc = subprocess.Popen([sys.executable, "-c", script, *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _STARTED.append(proc)
    return proc


def _finish(proc, timeout=240):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out.splitlines()


# A program compiled by the back end, called with fresh executables until told to stop: each
# call looks the program up in the cache (a miss compiles it again).
READER = textwrap.dedent("""
    import os, sys
    import numpy as np
    import quabla as qb
    import lowering
    ready, stop = sys.argv[1:]
    x = np.linspace(0.1, 0.9, 7)
    graph = qb.jit(lambda x: qb.sum(qb.tanh(x) * x)).lower(qb.array(x)).graph
    calls = 0
    while True:
        last = os.path.exists(stop)
        (value,) = lowering.compile(graph)(x)
        assert abs(float(value) - float(np.sum(np.tanh(x) * x))) < 1e-12, value
        calls += 1
        if calls == 1:
            open(ready, "w").close()
        if last:
            break
    print(calls)
""")


def _wait_for(path, proc):
    while not os.path.exists(path):
        assert proc.poll() is None, proc.communicate()[1]
        try:
            proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            pass


def test_eviction_under_a_concurrent_reader(private, monkeypatch, tmp_path):
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    reader = _start(READER, private, ready, stop, bound=10**9)
    _wait_for(ready, reader)
    # the program's part, the program (numba_cpu/programs.py), the glue calling its entry
    # (native.py), the digest of the code generator's files (programs.tree_digest)
    entries = _keys(private)
    assert len(entries) == 4
    bound = _size(private) + 3 * (FAKE_CODE + 1024)
    monkeypatch.setenv("QUABLA_CACHE_MAX_BYTES", str(bound))
    for i in range(40):  # each write evicts the least recently used entry, soon the program's
        _fake(private, f"filler {i}")
    stop.touch()
    assert int(_finish(reader)[0]) >= 2
    _fake(private, "after")  # the reader stored the program again, beyond the bound
    assert _size(private) <= bound
    assert not glob.glob(str(private / "*.tmp"))
    for key in entries & _keys(private):
        assert cache.read_object(key) is not None


# Two processes that meet at a barrier (files) and then compile the same program at once.
COMPILER = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    import quabla as qb
    import lowering
    barrier, me = sys.argv[1], sys.argv[2]
    x = np.linspace(-1.0, 2.0, 5)
    graph = qb.jit(lambda x: qb.sum(qb.exp(x) * qb.cos(x))).lower(qb.array(x)).graph
    import numba  # both pay the import before the barrier, so they compile at the same time
    open(os.path.join(barrier, me), "w").close()
    while len(os.listdir(barrier)) < 2:
        time.sleep(0.001)
    (value,) = lowering.compile(graph)(x)
    print(repr(float(value)))
""")


def test_concurrent_compiles_of_one_program_leave_one_valid_entry(private, tmp_path):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [_start(COMPILER, private, barrier, name) for name in ("a", "b")]
    x = np.linspace(-1.0, 2.0, 5)
    for proc in procs:
        assert float(_finish(proc)[0]) == pytest.approx(np.sum(np.exp(x) * np.cos(x)), rel=1e-13)
    (key,) = {name[:-3] for name in _files(private) if name.endswith(".py")}  # the entry's
    # what generated it (numba_cpu/programs.py), the glue calling it (native.py), the digest
    # of the code generator's files (programs.tree_digest)
    others = _keys(private) - {key}
    assert len(others) == 3
    assert _files(private) == {key + ".py", key + ".o", key + ".manifest.json", "qb_lock",
                               "qb_size"} | {o + end for o in others
                                             for end in (".o", ".manifest.json")}
    assert all(cache.read_object(k) is not None for k in others | {key})
    stored = os.stat(private / f"{key}.o").st_mtime_ns
    _finish(_start(COMPILER, private, barrier, "c"))
    assert os.stat(private / f"{key}.o").st_mtime_ns == stored, "the entry left is not used"


# Writers of one key with different object code (as two compilers whose output differs) and
# readers: every read after a write must find a whole entry, one writer's code and manifest.
WRITER = textwrap.dedent("""
    import hashlib, sys
    from lowering import cache
    key, byte = sys.argv[1], int(sys.argv[2])
    mine = bytes([byte]) * 65536
    for i in range(300):
        cache.write_object(key, mine, f"cfunc.quabla_cache.{key}.quabla_entry", [])
        found = cache.read_object(key)
        assert found is not None, f"write {i}: no valid entry after a write"
        code, manifest = found
        assert manifest["sha256"] == hashlib.sha256(code).hexdigest()
        assert code in (bytes([1]) * 65536, bytes([2]) * 65536)
""")


def test_concurrent_writers_of_one_key_keep_whole_entries(private):
    key = cache.entry_key(f"# {private}: contended")
    writers = [_start(WRITER, private, key, byte) for byte in (1, 2)]
    for proc in writers:
        _finish(proc)
    code, manifest = cache.read_object(key)
    assert code in (bytes([1]) * 65536, bytes([2]) * 65536)
    assert not glob.glob(str(private / "*.tmp"))


def _cli(path, *args):
    env = dict(os.environ, QUABLA_CACHE_DIR=str(path), PYTHONPATH=ROOT,
               QUABLA_CACHE_MAX_BYTES="1M")
    return subprocess.run([sys.executable, "-m", "quabla.cache", *args], env=env,
                          capture_output=True, text=True, check=True).stdout


def test_info_and_clear(private):
    keys = [_fake(private, f"r{i}") for i in range(3)]
    size = _size(private)
    foreign = ["notes.txt", "qb_notes.txt", f"{keys[0]}.bak", "qb_0123.json"]
    for name in foreign:
        (private / name).write_text("not the cache's\n")
    (private / "sub").mkdir()
    (private / "sub" / f"{keys[1]}.o").write_bytes(b"elsewhere")
    (private / "qb_ab12_x.tmp").write_bytes(b"\0" * 100)  # left by a writer that was killed
    info = _cli(private, "info")
    assert f"location: {private}" in info
    assert "entries: 3\n" in info
    assert f"size: {size + 100} bytes" in info
    assert "bound: 1048576 bytes (1.0 MiB)" in info
    out = _cli(private, "clear")
    freed = size + 100
    assert f"removed 3 entries, {freed} bytes ({freed / 1024:.1f} KiB), from {private}" in out
    assert sorted(os.listdir(private)) == sorted(foreign + ["qb_lock", "sub"])
    assert (private / "sub" / f"{keys[1]}.o").exists()
    assert "entries: 0\n" in _cli(private, "info")


def test_cli_usage_errors(private):
    env = dict(os.environ, QUABLA_CACHE_DIR=str(private), PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "quabla.cache", "frobnicate"], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "info" in proc.stderr and "clear" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "quabla.cache", "info"], capture_output=True,
                          env=dict(env, QUABLA_CACHE_MAX_BYTES="2 GB"), text=True)
    assert proc.returncode == 2 and "QUABLA_CACHE_MAX_BYTES='2 GB' is not a size" in proc.stderr
    assert "Traceback" not in proc.stderr
