"""Parts that do little of their program's work compile with LLVM's bare pipeline
(lowering/numba_cpu/workload.py): the estimate of a part's work (and of a graph's, for a light
term), which parts it picks, and that quick parts give the same bits as optimised ones
(neither pipeline reassociates floating point), called twice and linked again from the
cache."""

import numpy as np
import pytest

import quabla as qb
import device_cases
from lowering import cache, numba_cpu
from lowering.numba_cpu import (compile_graph, load_cached, machine, module_source, parts,
                                workload)
from lowering.numba_cpu.statements import Block, Loop
from quabla.core.interpret import evaluate


def _loop(stop, body, start=0, step=1, var="i0"):
    loop = Loop(var, stop, start, step)
    loop.body = body
    return loop


def test_work_counts_each_statement_once_per_trip():
    items = ["a[0] = 1.0", _loop(8, ["x = 1", _loop(10, ["y[i1] = 2"], var="i1")]),
             _loop(9, ["z = 3"], start=1, step=2)]
    assert workload.work(items, tiles=1) == (1 + (1 + 8 * (1 + 1 + 10)) + (1 + 4), 0, True)


def test_work_of_the_control_row_loop_is_per_tile_and_while_loops_are_unknown():
    tiled = [_loop("ctl[3]", ["s = 1", "t = 2"], start="ctl[2]", step=64, var="r")]
    assert workload.work(tiled, tiles=4) == (1 + 4 * 2, 0, True)
    assert workload.work([Block("while True:", ["x = 1", "break"], loops=True)], 1)[2] is False
    assert workload.work([_loop("n", ["x = 1"])], 1)[2] is False  # a length not known here
    branches = [Block("if c:", ["x = 1"]), Block("else:", ["x = 2", "y = 3"])]
    assert workload.work(branches, 1) == (2 + 1 + 2, 0, True)


def test_products_count_toward_the_program_not_the_part():
    items = ["_gemm(a, b, t4, 64, 32, 16, 0, 1)",
             _loop(3, ["_gemm(_offset(a, b * 2048), _offset(w, b * 512), "
                       "_offset(t, b * 1024), 64, 32, 16, 0, 0)"], var="b"),
             "_matmul_float32(a, b, t, w, 2, 8, 128, 64, 1, 0)"]
    own, products, known = workload.work(items, 1)
    assert (own, known) == (1 + (1 + 3) + 1, True)
    assert products == 64 * 32 * 16 * 4 + 2 * 8 * 128 * 64


@pytest.mark.parametrize("estimates, expected", [
    ([(10, 0, True)], [False]),                                # one part: none
    ([(1000, 0, True), (10, 0, True)], [False, True]),         # 1% of the program
    ([(1000, 0, True), (11, 0, True)], [False, False]),
    ([(1000, 0, True), (10, 0, False)], [False, False]),       # a loop of unknown length
    ([(5, 10_000, True), (11, 0, True)], [True, False]),       # products at a tenth
])
def test_quick_parts_are_those_doing_one_hundredth_of_the_work(estimates, expected):
    assert workload.quick_parts(estimates) == expected


def _graph_of(fn, *args):
    return qb.jit(fn).lower(*args).graph


def test_a_graph_s_work_counts_elements_products_and_loop_steps():
    x, w = np.ones((6, 4)), np.ones((4, 3))
    once = workload.graph_work(_graph_of(qb.sin, x))
    assert workload.graph_work(_graph_of(lambda x: qb.sin(qb.sin(x)), x)) == once + 6 * 4
    product = workload.graph_work(_graph_of(lambda x, w: x @ w, x, w))
    assert product == 6 * 4 + 4 * 3 + 6 * 3 * 4 // workload.PRODUCT_SPEED  # inputs, product

    def step(c, _):
        return qb.sin(c), None

    def scanned(length):
        return workload.graph_work(_graph_of(lambda x: qb.scan(step, x, length=length)[0], x))
    body = (scanned(10) - scanned(5)) // 5
    assert body > 6 * 4 and scanned(20) - scanned(10) == 10 * body
    looped = _graph_of(lambda x: qb.while_loop(lambda c: qb.sum(c) < 9.0, qb.exp, x), x)
    assert workload.graph_work(looped) is None


@pytest.mark.parametrize("own, whole, light", [
    (5, 500, True), (5, 499, False), (5, None, True), (None, 10**9, False)])
def test_a_term_is_light_at_one_hundredth_of_the_whole(monkeypatch, own, whole, light):
    monkeypatch.setattr(workload, "graph_work", lambda graph: own)
    assert workload.light(None, whole) == light


def _penalised(w, b, x):
    """A small MLP loss whose L2 penalty and gradient copies are a tail of little work."""
    h = qb.tanh(x @ w + b)
    return qb.mean(h ** 2) + 1e-4 * (qb.sum(w * w) + qb.sum(b * b))


@pytest.fixture
def program(monkeypatch):
    monkeypatch.setattr(parts, "PART_LINES", 12)  # cut in parts as a deeper program is
    rng = np.random.default_rng(5)
    w, b, x = rng.normal(size=(16, 16)), rng.normal(size=16), rng.normal(size=(4096, 16))
    graph = qb.jit(qb.value_and_grad(_penalised, argnums=(0, 1))).lower(w, b, x).graph
    return graph, [w, b, x]


def test_a_tail_of_little_work_is_quick_and_gives_the_interpreter_s_results(
        program, monkeypatch, tmp_path, pipelines):
    """A quick part compiles by LLVM's bare pipeline, the others optimised (in this process:
    no forked copies)."""
    graph, values = program
    sources = module_source(graph)[0]
    marks = ["lean_pipeline(quick=True)" in source for source in sources]
    assert len(sources) > 1 and any(marks) and not all(marks), marks
    monkeypatch.setattr(numba_cpu, "PARALLEL_PARTS", 10**6)
    monkeypatch.setenv("QUABLA_CACHE_DIR", str(tmp_path / "cache"))  # nothing compiled yet
    monkeypatch.setattr(cache, "_DIRS", None)
    executable = compile_graph(graph, {})
    compiled = ["lean_pipeline(quick=True)" in source for source in numba_cpu.sources(graph)]
    assert sorted(pipelines) == sorted(machine.BARE if m else machine.OPTIMISED
                                       for m in compiled)
    first, again = executable(*values), executable(*values)
    for a, b, e in zip(first, again, evaluate(graph, values)):
        np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-13)
        np.testing.assert_array_equal(a, b)
    for a, b in zip(load_cached(graph)(*values), first):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["pinn-value_and_grad", "hessian", "scan", "vmap-solve"])
def test_the_quick_pipeline_gives_the_same_bits(monkeypatch, name):
    """A program cut in parts of a few lines, every part of known length quick, then none
    (their sources, and so their cache keys, differ): the same results, bit for bit."""
    monkeypatch.setattr(parts, "PART_LINES", 6)
    case = {case.name: case for case in device_cases.cases()}[name]
    graph = qb.jit(case.fn).lower(*case.args).graph
    values = [np.asarray(leaf) for leaf in qb.tree.flatten(case.args)[0]]
    results = []
    for share, some in ((1, True), (10**12, False)):
        monkeypatch.setattr(workload, "SHARE", share)
        marks = ["quick=True" in source for source in module_source(graph)[0]]
        assert any(marks) == some and len(marks) > 1
        results.append(compile_graph(graph, {})(*values))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_every_primitive_s_program_with_quick_parts_gives_the_interpreter_s_results(monkeypatch):
    """The first rule-test case of each primitive with its gradient (device_cases), cut in
    parts of a few lines, every part of known length quick: compiled, called twice, and
    linked from the cache, against the interpreter."""
    monkeypatch.setattr(parts, "PART_LINES", 6)
    monkeypatch.setattr(workload, "SHARE", 1)
    quick = 0
    for case in device_cases.first_primitive_cases(np.random.default_rng(11)):
        graph = qb.jit(case.fn).lower(*case.args).graph
        if any("quick=True" in source for source in module_source(graph)[0]):
            device_cases.check("cpu", case)  # compiled, then called twice
            values = [np.asarray(leaf) for leaf in qb.tree.flatten(case.args)[0]]
            for a, e in zip(load_cached(graph)(*values), evaluate(graph, values)):
                np.testing.assert_allclose(np.asarray(a), e, **device_cases.TOL)
            quick += 1
    # (a program of one loop nest is one part: the unary primitives' gradients)
    assert quick >= 20, f"only {quick} primitives' programs had a quick part"
