"""Generated programs kept in the compile cache by their graph (lowering/numba_cpu/programs.py):
a warm compile links a program's parts without generating it again, and gives the
interpreter's results on every primitive's program and on threaded and cut ones, called twice;
what keys a program (its graph, threads, settings, BLAS); and a kept program that is damaged,
planted or missing a part is generated again, never trusted."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import quabla as qb
import device_cases
import test_loop_nests as loops
import lowering.numba_cpu as cpu
from lowering import cache, fortran
from lowering.numba_cpu import (compile_graph, module_source, optimised, parts, programs,
                                threads)
from quabla.core.expand import expand
from quabla.core.interpret import evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fresh_factor():
    """A number new to every run: a program that multiplies by it is in no cache yet."""
    return 1.0 + float(np.random.default_rng().integers(1, 2**40)) / 2**41


@pytest.fixture
def generated(monkeypatch):
    """``generated()``: how many programs were generated since (``module_source`` calls)."""
    calls = []
    original = cpu.module_source
    monkeypatch.setattr(cpu, "module_source", lambda *a: calls.append(1) or original(*a))
    return lambda: len(calls)


def _staged(fn, *args):
    args = tuple(qb.tree.map(lambda a: qb.array(np.asarray(a)), a) for a in args)
    graph = expand(qb.jit(fn).lower(*args).graph)
    return graph, [np.asarray(leaf) for leaf in qb.tree.leaves(args)]


def _loss(scale):
    def loss(w, x):
        return qb.mean(qb.tanh(x @ w) ** 2) * scale + qb.sum(qb.sin(w))
    return qb.value_and_grad(loss)


def _program(scale=None):
    rng = np.random.default_rng(3)
    return _staged(_loss(scale or _fresh_factor()), rng.normal(size=(8, 8)),
                   rng.normal(size=(64, 8)))


def _check(executable, graph, values, tol=None):
    expected = evaluate(graph, values)
    first, again = executable(*values), executable(*values)
    for a, b, e in zip(first, again, expected):
        np.testing.assert_allclose(a, e, **(tol or dict(rtol=1e-12, atol=1e-13)))
        np.testing.assert_array_equal(a, b)
    return first


# -- what is kept, and how it is read back -------------------------------------------------------

def test_a_program_is_encoded_and_decoded_whole():
    constants = [np.arange(6.0).reshape(2, 3), np.float32([1.5, -2.0]), np.array([True, False]),
                 np.zeros((0, 4))]
    phases = threads.Phases([[0, 1]], [[1, 0, 64], [1, 64, 128]], [[2, 5]], True)
    sources, buffers = ("def a(): pass\n", "def b(): ☃\n"), [("float64", 40), ("bool", 3)]
    decoded = programs.decode(programs.encode(sources, constants, buffers, phases))
    assert decoded[0] == sources and decoded[2] == buffers
    for a, b in zip(decoded[1], constants):
        assert a.dtype == b.dtype and a.shape == b.shape and not a.flags.writeable
        np.testing.assert_array_equal(a, b)
    assert decoded[3].rows == phases.rows and decoded[3].blas is True
    assert programs.decode(programs.encode(sources, [], [], None))[1:] == ([], [], None)


def _damaged():
    good = programs.encode(("def a(): pass\n",), [np.ones(3)], [("float64", 4)], None)
    size = int.from_bytes(good[:8], "little")
    header = json.loads(good[8:8 + size])

    def with_header(**changes):
        text = json.dumps(dict(header, **changes)).encode()
        return len(text).to_bytes(8, "little") + text + good[8 + size:]
    return [
        good[:20], good[:-8], b"", b"\xff" * 40,
        with_header(constants=[["<i8", [3], 0]]),        # a dtype code generation never passes
        with_header(constants=[["<f8", [4], 0]]),        # past the end of the bits
        with_header(constants=[["<f8", [3], 16]]),
        with_header(sources=[]), with_header(sources=[3]), with_header(sources="def a(): pass"),
        with_header(buffers=[["float64"]]), with_header(extra=1),
        with_header(phases=[[[[0]], [[1, "x"]], [[2]]], True]),
        with_header(phases=[[[[0]], [[1]]], True]),
    ]


@pytest.mark.parametrize("data", _damaged())
def test_bytes_that_are_not_a_program_decode_to_nothing(data):
    assert programs.decode(data) is None


def test_a_warm_compile_links_the_kept_program_without_generating_it(generated):
    graph, values = _program()
    first = _check(compile_graph(graph, {}), graph, values)
    before = generated()
    again = _check(compile_graph(graph, {}), graph, values)
    assert generated() == before
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert cpu.load_cached(graph) is not None and generated() == before


def test_a_program_traced_again_has_the_same_key_in_another_process():
    script = textwrap.dedent("""
        import numpy as np, quabla as qb
        from quabla.core.expand import expand
        from lowering.numba_cpu import programs
        f = qb.value_and_grad(lambda w, x: qb.mean(qb.tanh(x @ w) ** 2) + 0.25)
        w, x = qb.array(np.ones((4, 4))), qb.array(np.linspace(0, 1, 24).reshape(6, 4))
        print(programs.key(expand(qb.jit(f).lower(w, x).graph), 1))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT)
    keys = {subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True).stdout.strip() for _ in range(2)}
    assert len(keys) == 1 and keys.pop().startswith("qb_")


def test_the_key_names_graph_threads_settings_and_blas(monkeypatch):
    graph, _ = _program(scale=1.25)
    same, _ = _program(scale=1.25)
    other, _ = _program(scale=1.5)
    key = programs.key(graph, 1)
    assert programs.key(same, 1) == key and programs.key(other, 1) != key
    assert programs.key(graph, 2) != key
    monkeypatch.setattr(parts, "PART_LINES", 6)
    assert programs.key(graph, 1) != key
    monkeypatch.undo()
    found = fortran.origin()
    monkeypatch.setenv("QUABLA_BLAS", "0")  # changes the program only where a BLAS is found
    assert (programs.key(graph, 1) != key) == (found != "")
    monkeypatch.delenv("QUABLA_BLAS")
    monkeypatch.setattr(programs, "KEEP", False)
    assert programs.key(graph, 1) is None


def test_the_code_digest_follows_the_files_bytes_and_reads_them_once_per_change(tmp_path,
                                                                               monkeypatch):
    """``tree_digest`` hashes names and bytes; the cache keeps it under the files' paths, sizes
    and times, so a file is read again only when one of those changed."""
    import hashlib

    (tmp_path / "gen" / "sub").mkdir(parents=True)
    files = {"gen/a.py": b"A = 1\n", "gen/sub/b.py": b"B = 2\n", "gen/t.yaml": b"x: 1\n"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "gen" / "notes.txt").write_bytes(b"not code")
    expected = hashlib.sha256()
    for name in ("gen/a.py", "gen/t.yaml", "gen/sub/b.py"):  # os.walk's order, files sorted
        expected.update(os.path.basename(name).encode() + files[name])
    first = programs.tree_digest(str(tmp_path), ("gen",))
    assert first == expected.hexdigest()[:16]
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: opened.append(path)
                        or real_open(path, *a, **k))
    assert programs.tree_digest(str(tmp_path), ("gen",)) == first
    assert not [p for p in opened if str(p).startswith(str(tmp_path))]  # the kept digest
    (tmp_path / "gen" / "notes.txt").write_bytes(b"still not code")
    assert programs.tree_digest(str(tmp_path), ("gen",)) == first
    stat = os.stat(tmp_path / "gen" / "a.py")
    (tmp_path / "gen" / "a.py").write_bytes(b"A = 3\n")  # same size: the time tells
    os.utime(tmp_path / "gen" / "a.py", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1000))
    changed = programs.tree_digest(str(tmp_path), ("gen",))
    assert changed not in (None, first)
    os.utime(tmp_path / "gen" / "a.py", ns=(stat.st_atime_ns, stat.st_mtime_ns + 2000))
    assert programs.tree_digest(str(tmp_path), ("gen",)) == changed  # touched: same bytes
    os.chmod(tmp_path / "gen" / "sub" / "b.py", 0)
    if not os.access(tmp_path / "gen" / "sub" / "b.py", os.R_OK):  # (root reads anyway)
        os.utime(tmp_path / "gen" / "sub" / "b.py")
        assert programs.tree_digest(str(tmp_path), ("gen",)) is None


def test_a_graph_with_a_param_whose_text_may_change_is_not_kept():
    """``Graph.fingerprint`` writes params by ``repr``: one that names an object (an address)
    could fingerprint two programs alike."""
    from quabla.core.graph import Graph, Node

    graph, _ = _program(scale=1.25)
    node = next(n for n in graph.nodes if n.params)
    odd = Node(node.op, node.operands, node.params + (("z", ((1, object()),)),), node.shape,
               node.dtype, node.weak)
    changed = Graph([odd if n is node else n for n in graph.nodes], graph.inputs, graph.outputs)
    assert programs.key(graph, 1) is not None and programs.key(changed, 1) is None


def test_a_program_with_large_constants_is_not_kept(monkeypatch, generated):
    data = np.random.default_rng(1).normal(size=(64, 8)) * _fresh_factor()
    graph, values = _staged(lambda w: qb.sum(qb.tanh(data @ w)), np.ones(8))
    monkeypatch.setattr(programs, "MAX_CONSTANT_BYTES", data.nbytes - 1)
    assert programs.key(graph, 1) is None
    _check(compile_graph(graph, {}), graph, values)
    _check(compile_graph(graph, {}), graph, values)
    assert generated() == 2
    monkeypatch.setattr(programs, "MAX_CONSTANT_BYTES", data.nbytes)
    assert programs.key(graph, 1) is not None


# -- every primitive, cut and threaded programs ---------------------------------------------

def test_every_primitive_s_kept_program_gives_the_interpreter_s_results(generated):
    """The first rule-test case of each primitive with its gradient (device_cases): compiled
    (generated and kept), then compiled again from the kept program alone, called twice."""
    checked = 0
    for case in device_cases.first_primitive_cases(np.random.default_rng(17)):
        graph = expand(qb.jit(case.fn).lower(*case.args).graph)
        values = [np.asarray(leaf) for leaf in qb.tree.flatten(case.args)[0]]
        compile_graph(graph, {})
        before = generated()
        _check(compile_graph(graph, {}), graph, values, device_cases.TOL)
        assert generated() == before, case.name
        checked += 1
    assert checked >= 60


@pytest.mark.parametrize("name", ["scan", "while_loop", "cond", "hessian", "vmap-solve",
                                  "pinn-value_and_grad"])
def test_a_kept_program_cut_in_parts_gives_the_interpreter_s_results(monkeypatch, generated,
                                                                     name):
    monkeypatch.setattr(parts, "PART_LINES", 6)
    case = {case.name: case for case in device_cases.cases()}[name]
    graph = expand(qb.jit(case.fn).lower(*case.args).graph)
    values = [np.asarray(leaf) for leaf in qb.tree.flatten(case.args)[0]]
    compile_graph(graph, {})
    before = generated()
    executable = compile_graph(graph, {})
    assert generated() == before and len(executable.source.split("def quabla_entry")) > 2
    _check(executable, graph, values, device_cases.TOL)


def test_a_kept_threaded_program_is_called_in_its_phases(monkeypatch, generated):
    monkeypatch.setattr(threads, "WORTH_ELEMENTS", 0)
    monkeypatch.setenv("QUABLA_NUM_THREADS", "2")
    rng = np.random.default_rng(20)
    graph, values = _staged(loops.tiled_rows, rng.uniform(-1, 1, (320, 32)),
                            rng.uniform(-1, 1, (32, 32)) / 4, rng.uniform(-1, 1, 32))
    assert module_source(graph)[3] is not None, "the program has no threaded tile loop"
    first = _check(compile_graph(graph, {}), graph, values)
    before = generated()
    executable = compile_graph(graph, {})
    assert generated() == before and executable.phases
    for a, b in zip(_check(executable, graph, values), first):
        np.testing.assert_array_equal(a, b)


# -- trust: a kept program is an entry of the cache, checked like a part -------------------------

def _kept(graph):
    key = programs.key(graph, threads.count())
    assert cache.read_object(key) is not None
    return os.path.join(cache.cache_dir(), key)


def test_a_tampered_program_is_generated_again(generated):
    graph, values = _program()
    compile_graph(graph, {})
    path = _kept(graph)
    with open(path + ".o", "r+b") as f:  # the manifest's digest no longer matches
        f.seek(20)
        f.write(b"#")
    before = generated()
    _check(compile_graph(graph, {}), graph, values)
    assert generated() == before + 1


def test_a_program_that_decodes_to_nothing_is_generated_again(generated):
    graph, values = _program()
    compile_graph(graph, {})
    key = os.path.basename(_kept(graph))
    cache.write_object(key, b"not a program", f"quabla_program_{key}", [])  # a whole entry
    before = generated()
    _check(compile_graph(graph, {}), graph, values)
    assert generated() == before + 1


def test_a_planted_source_beside_a_kept_program_is_replaced(generated):
    """A warm compile from a kept program writes its parts' sources back as the cold one
    does (a planted source never stays; nothing is compiled from it)."""
    graph, values = _program()
    compile_graph(graph, {})
    sources = module_source(graph)[0]
    path = os.path.join(cache.cache_dir(), cache.entry_key(sources[0]) + ".py")
    with open(path, "a", encoding="utf-8") as f:
        f.write("\nraise SystemExit('planted code ran')\n")
    _check(compile_graph(graph, {}), graph, values)
    with open(path, encoding="utf-8") as f:
        assert f.read() == sources[0]


def test_a_kept_program_missing_a_part_is_generated_and_compiled_again(generated):
    graph, values = _program()
    compile_graph(graph, {})
    keys = [cache.entry_key(source) for source in module_source(graph)[0]]
    os.remove(os.path.join(cache.cache_dir(), keys[-1] + ".o"))
    before = generated()
    _check(compile_graph(graph, {}), graph, values)
    assert generated() == before + 1
    optimised()  # the part compiled quickly first is stored once optimised
    assert cache.read_object(keys[-1]) is not None
