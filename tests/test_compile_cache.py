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
    import sys
    import quabla as qb
    from lowering import cache
    from lowering.numba_cpu import parts_compiled
    f = qb.jit(lambda x: qb.sum(qb.sin(x) * x))
    print(repr(f(qb.array([0.5, 1.5, 2.5]))))
    print(cache.cache_dir())
    print("compiled:", parts_compiled() > 0)
    print("numba imported:", "numba" in sys.modules)
""")


def _run(cache_dir, extra_env=None):
    env = dict(os.environ, QUABLA_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    env.pop("QUABLA_BACKEND", None)
    env.update(extra_env or {})
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.splitlines()


def _objects(cache_dir):
    return sorted(glob.glob(os.path.join(cache_dir, "qb_*.o")))


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A cache directory after one process compiled the program."""
    path = tmp_path_factory.mktemp("cache") / "quabla"
    first = _run(path)
    return path, first


def test_private_directory_and_entries(warm):
    path, first = warm
    assert first[0] == "Tensor(3.23213561, dtype=float64)"
    assert first[2] == "compiled: True"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert glob.glob(os.path.join(path, "qb_*.py"))
    assert _objects(path), "no machine code was stored"
    assert glob.glob(os.path.join(path, "qb_*.manifest.json"))


def test_second_process_loads_machine_code_without_numba(warm):
    path, first = warm
    before = {p: os.stat(p).st_mtime_ns for p in _objects(path)}
    second = _run(path)
    assert second[0] == first[0]
    assert second[2:] == ["compiled: False", "numba imported: False"]
    after = {p: os.stat(p).st_mtime_ns for p in _objects(path)}
    assert after == before, "the second process recompiled instead of loading"


@pytest.mark.parametrize("target", [".o", ".manifest.json"])
def test_corrupted_entry_is_recompiled_not_run(warm, target):
    path, first = warm
    for p in glob.glob(os.path.join(path, "qb_*" + target)):
        with open(p, "r+b") as f:
            f.seek(0)
            f.write(b"\x00planted\x00")
    again = _run(path)
    assert again[0] == first[0]
    assert again[2] == "compiled: True", "the corrupted entry was not recompiled"
    for p in _objects(path) + glob.glob(os.path.join(path, "qb_*.manifest.json")):
        with open(p, "rb") as f:
            assert b"planted" not in f.read(), "the corrupted entry was kept"
    assert _run(path)[2] == "compiled: False", "the recompiled entry was not stored"


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


def test_glue_is_compiled_once_then_read_from_the_cache(tmp_path, monkeypatch):
    """The few lines of LLVM IR that call entries (the direct call, a sequence of parts) are
    compiled once and then read from the cache: a warm process compiles no IR."""
    from lowering import cache, native

    monkeypatch.setenv("QUABLA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_DIRS", None)
    ir = 'declare void @"quabla_part"(i8*)\n' \
         'define void @quabla_sequence(i8* %args) {\n' \
         '  call void @"quabla_part"(i8* %args)\n  ret void\n}\n'
    code = native._glue(ir)
    assert cache.read_object(cache.entry_key("# glue\n" + ir))[0] == code

    def no_llvm():
        raise AssertionError("compiled again")

    monkeypatch.setattr(native, "_binding", no_llvm)
    assert native._glue(ir) == code
