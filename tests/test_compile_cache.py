"""The on-disk compile cache: private directory, verified entries, reuse across processes."""

import glob
import os
import stat
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = textwrap.dedent("""
    import quabla as qb
    from lowering import cache
    f = qb.jit(lambda x: qb.sum(qb.sin(x) * x))
    print(repr(f(qb.array([0.5, 1.5, 2.5]))))
    print(cache.cache_dir())
""")


def _run(cache_dir, extra_env=None):
    env = dict(os.environ, QUABLA_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    env.pop("QUABLA_BACKEND", None)
    env.pop("NUMBA_CACHE_DIR", None)
    env.update(extra_env or {})
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.splitlines()


def _numba_files(cache_dir):
    return sorted(glob.glob(os.path.join(cache_dir, "__pycache__", "qb_*.nb[ic]")))


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A cache directory after one process compiled the program."""
    path = tmp_path_factory.mktemp("cache") / "quabla"
    first = _run(path)
    return path, first


def test_private_directory_and_entries(warm):
    path, first = warm
    assert first[0] == "Tensor(3.23213561, dtype=float64)"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert glob.glob(os.path.join(path, "qb_*.py"))
    assert _numba_files(path), "numba wrote no machine code"
    assert glob.glob(os.path.join(path, "qb_*.manifest.json"))


def test_second_process_loads_machine_code(warm):
    path, first = warm
    before = {p: os.stat(p).st_mtime_ns for p in _numba_files(path)}
    second = _run(path)
    assert second[0] == first[0]
    after = {p: os.stat(p).st_mtime_ns for p in _numba_files(path)}
    assert after == before, "the second process recompiled instead of loading"


def test_corrupted_machine_code_is_recompiled_not_run(warm):
    path, first = warm
    for p in _numba_files(path):
        if p.endswith(".nbc"):
            with open(p, "r+b") as f:
                f.seek(0)
                f.write(b"\x00planted\x00")
    again = _run(path)
    assert again[0] == first[0]


def test_planted_source_is_replaced(warm):
    path, first = warm
    (source,) = glob.glob(os.path.join(path, "qb_*.py"))
    with open(source, "a", encoding="utf-8") as f:
        f.write("\nraise SystemExit('planted code ran')\n")
    again = _run(path)
    assert again[0] == first[0]
    with open(source, encoding="utf-8") as f:
        assert "planted" not in f.read()


def test_foreign_permissions_are_tightened(tmp_path):
    path = tmp_path / "open"
    path.mkdir(mode=0o777)
    os.chmod(path, 0o777)
    out = _run(path)
    assert out[1] == str(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700


def test_compile_logging(tmp_path):
    env = {"QUABLA_LOG_COMPILES": "1"}
    path = tmp_path / "log"
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env=dict(os.environ, QUABLA_CACHE_DIR=str(path), PYTHONPATH=ROOT, **env),
        capture_output=True, text=True, check=True,
    )
    assert "traced jit(<lambda>) for (float64[3],)" in proc.stderr
    assert "compiled jit(<lambda>) for (float64[3],)" in proc.stderr
