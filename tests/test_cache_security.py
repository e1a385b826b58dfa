"""The compile cache links only entries written for the key being loaded, by whoever alone may
write where they are (docs/compile-cache.md).

Each scenario tampers with a cache directory the way a careless copy, another user or a planted
file would, then runs a fresh process on it: the result must be the program's own, and nothing
from the tampered entry may be linked or executed.
"""

import glob
import importlib.util
import json
import marshal
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

from test_compile_cache import ROOT

PROGRAM = textwrap.dedent("""
    import sys
    import quabla as qb
    from lowering import cache
    from lowering.numba_cpu import parts_compiled
    programs = {"f": lambda x: qb.sum(qb.sin(x) * x), "g": lambda x: qb.sum(qb.cos(x) + x)}
    x = qb.array([0.5, 1.5, 2.5])
    for name in sys.argv[1:]:
        print(float(qb.jit(programs[name])(x)))
    print(cache.cache_dir())
    print("compiled:", parts_compiled() > 0)
""")
X = np.array([0.5, 1.5, 2.5])
VALUES = {"f": np.sum(np.sin(X) * X), "g": np.sum(np.cos(X) + X)}


def _run(cache_dir, *programs, env=None):
    """``(results, cache_dir, whether it compiled, stderr)`` of a fresh process running
    ``programs``."""
    full = dict(os.environ, QUABLA_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    full.pop("QUABLA_BACKEND", None)
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-c", PROGRAM, *programs], env=full,
                          capture_output=True, text=True, check=True)
    lines = proc.stdout.splitlines()
    results = [float(line) for line in lines[:-2]]
    for name, value in zip(programs, results):
        assert value == pytest.approx(VALUES[name], rel=1e-12), f"{name} gave another result"
    return results, lines[-2], lines[-1] == "compiled: True", proc.stderr


def _entries(cache_dir):
    """The keys of the compiled parts in ``cache_dir`` (the programs that name them aside:
    they have no source, numba_cpu/programs.py)."""
    return {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(cache_dir, "qb_*.py"))
            if os.path.exists(p[:-3] + ".o")}


@pytest.fixture
def two_entries(tmp_path):
    """A cache holding f's and g's entries, and which is which."""
    path = tmp_path / "cache"
    _run(path, "f")
    (f_key,) = _entries(path)
    _run(path, "f", "g")
    (g_key,) = _entries(path) - {f_key}
    return path, f_key, g_key


@pytest.mark.parametrize("rewrite_key", [False, True])
def test_entry_copied_from_another_program_is_not_linked(two_entries, rewrite_key):
    path, f_key, g_key = two_entries
    shutil.copy(path / f"{f_key}.o", path / f"{g_key}.o")
    with open(path / f"{f_key}.manifest.json") as f:
        manifest = json.load(f)
    if rewrite_key:  # a copy that also claims to be g's entry
        manifest["key"] = g_key
    with open(path / f"{g_key}.manifest.json", "w") as f:
        json.dump(manifest, f)
    _, _, recompiled, _ = _run(path, "g")  # checks that g's result comes back
    assert recompiled
    with open(path / f"{g_key}.o", "rb") as a, open(path / f"{f_key}.o", "rb") as b:
        assert a.read() != b.read(), "the copied object was kept"


@pytest.mark.parametrize("payload", ["planted", "corrupt"])
def test_bytecode_in_the_cache_is_never_executed(tmp_path, payload):
    path = tmp_path / "cache"
    _run(path, "f")
    (key,) = _entries(path)
    source = str(path / f"{key}.py")
    marker = tmp_path / "ran"
    st = os.stat(source)
    body = (marshal.dumps(compile(f"open({str(marker)!r}, 'w').close()", source, "exec"))
            if payload == "planted" else b"\xff\x00 not marshal data")
    pyc = importlib.util.cache_from_source(source)
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    with open(pyc, "wb") as f:  # a header that matches the source file exactly
        f.write(importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
                + int(st.st_mtime).to_bytes(4, "little")
                + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little") + body)
    for suffix in (".o", ".manifest.json"):  # the next process compiles the entry cold
        os.remove(path / f"{key}{suffix}")
    _, _, recompiled, _ = _run(path, "f", env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert recompiled and not marker.exists()
    _, _, recompiled, _ = _run(path, "f")
    assert not recompiled


@pytest.mark.parametrize("loosened", ["directory", "object"])
def test_loosened_cache_is_purged_once_not_trusted(tmp_path, loosened):
    path = tmp_path / "cache"
    _run(path, "f", "g")
    (key, _) = sorted(_entries(path))
    os.chmod(path if loosened == "directory" else path / f"{key}.o", 0o777)
    _, folder, recompiled, stderr = _run(path, "f", "g")
    assert folder == str(path) and recompiled
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    if loosened == "directory":
        assert stderr.count("Warning") == 1 and "deleted" in stderr, stderr
    for p in glob.glob(str(path / "qb_*")):
        assert not stat.S_IMODE(os.stat(p).st_mode) & 0o022
    assert not _run(path, "f", "g")[2], "the recompiled entries were not stored"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root to give the directory to another user")
def test_foreign_writable_cache_is_purged(tmp_path):
    path = tmp_path / "cache"
    _run(path, "f")
    os.chown(path, 12345, 12345)
    os.chmod(path, 0o777)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    _, folder, recompiled, stderr = _run(path, "f", env={"TMPDIR": str(tmp)})
    assert recompiled and "deleted" in stderr
    assert not _entries(path), "entries another user could have written were kept"
    assert folder == str(tmp / f"quabla-cache-{os.getuid()}")


BAD_MANIFESTS = {
    "symbols of other types": lambda m: dict(m, symbols=[1, None]),
    "entry not a string": lambda m: dict(m, entry=5),
    "a list": lambda m: [m],
    "no key": lambda m: {k: v for k, v in m.items() if k != "key"},
    "sha256 a number": lambda m: dict(m, sha256=1),
    "another entry symbol": lambda m: dict(m, entry=m["entry"] + "x"),
}


def test_manifest_of_the_wrong_shape_is_recompiled(tmp_path):
    path = tmp_path / "cache"
    _run(path, "f")
    (key,) = _entries(path)
    manifest_path = path / f"{key}.manifest.json"
    with open(manifest_path) as f:
        good = json.load(f)
    for label, bad in BAD_MANIFESTS.items():
        with open(manifest_path, "w") as f:
            json.dump(bad(good), f)
        assert _run(path, "f")[2], f"{label}: not recompiled"
        with open(manifest_path) as f:
            assert json.load(f) == good, f"{label}: not replaced"


def test_read_only_cache_is_read_and_new_entries_go_to_one_fallback():
    """A shared cache this process may not write: read-only to a user, another user's to root."""
    base = tempfile.mkdtemp()
    try:
        shared, tmp = os.path.join(base, "shared"), os.path.join(base, "tmp")
        os.mkdir(tmp)
        _run(shared, "f")
        for p in glob.glob(os.path.join(shared, "*")):  # its owner shares the entries
            os.chmod(p, 0o644)
            if os.geteuid() == 0:
                os.chown(p, 12345, 12345)
        before = {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(shared, "*"))}
        os.chmod(shared, 0o555)
        if os.geteuid() == 0:
            os.chown(shared, 12345, 12345)
        env = {"TMPDIR": tmp}
        _, fallback, recompiled, _ = _run(shared, "f", "g", env=env)
        assert recompiled  # g was compiled, into the fallback
        assert fallback == os.path.join(tmp, f"quabla-cache-{os.getuid()}")
        assert stat.S_IMODE(os.stat(fallback).st_mode) == 0o700
        assert len(_entries(fallback)) == 1, "f was recompiled instead of read"
        _, again, recompiled, _ = _run(shared, "f", "g", env=env)
        assert again == fallback and not recompiled, "the fallback was not reused"
        assert {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(shared, "*"))} == before
    finally:
        os.chmod(os.path.join(base, "shared"), 0o755)
        shutil.rmtree(base)


def test_unknown_backend_is_named_with_the_valid_ones(monkeypatch):
    import quabla as qb

    monkeypatch.setenv("QUABLA_BACKEND", "foo")
    with pytest.raises(ValueError, match=r"QUABLA_BACKEND='foo'.*'numba', 'interpret'"):
        qb.jit(lambda x: x + 1.0)(qb.ones(2))
