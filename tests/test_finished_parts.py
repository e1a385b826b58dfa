"""Finished parts kept for the next edit (lowering/numba_cpu/parts.py ``Finished``, programs.py
``family``): an edited program (another loss term) generated with the parts its original
finished has the sources it has generated afresh, on cut, threaded, region and vmapped programs;
compiled, it gives the interpreter's results, called twice; what a part's key reads (``text``
tells apart statements that render or transform differently); a damaged store of finished parts
is never trusted."""

import os

import numpy as np
import pytest

import quabla as qb
import test_loop_nests as loops
from lowering import cache
from lowering.numba_cpu import codegen, compile_graph, module_source, parts, programs, threads
from lowering.numba_cpu.statements import Assign, Block, Loop, text
from quabla.core.expand import expand
from quabla.core.interpret import evaluate

RNG = np.random.default_rng(27)


def _staged(fn, *args):
    args = tuple(qb.tree.map(lambda a: qb.array(np.asarray(a)), a) for a in args)
    graph = expand(qb.jit(fn).lower(*args).graph)
    return graph, [np.asarray(leaf) for leaf in qb.tree.leaves(args)]


def _mlp(p, x):
    h = qb.tanh(x @ p["w1"] + p["b1"])
    h = qb.tanh(h @ p["w2"] + p["b2"])
    return qb.mean((h @ p["w3"]) ** 2)


def _mlp_params():
    return {"w1": RNG.normal(size=(3, 16)) / 2, "b1": RNG.normal(size=16) / 4,
            "w2": RNG.normal(size=(16, 16)) / 4, "b2": RNG.normal(size=16) / 4,
            "w3": RNG.normal(size=(16, 1)) / 4}


def _scan_energy(k, x):
    def step(carry, _):
        q, v = carry
        v = v - 0.01 * k * qb.sin(q)
        return (q + 0.01 * v, v), qb.sum(q * q)
    _, seen = qb.scan(step, (x, qb.zeros_like(x)), length=20)
    return qb.sum(seen)


def _rosenbrock(x):
    return qb.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def _softmax_nll(w, x, label):
    logits = x @ w
    return qb.nn.logsumexp(logits) - logits[label]


def _rows(w, x, v):
    return qb.sum(loops.tiled_rows(x, w, v)[0])


def _programs():
    """``(name, original, edited, args)``: value and gradient of each loss and of the loss
    with the L2 term, on programs cut into parts (a deep MLP, a scan, a Hessian, per-example
    gradients under vmap, a threaded tile loop)."""
    hessian = lambda f: qb.hessian(f)  # noqa: E731
    per_example = lambda f: qb.vmap(qb.grad(f), in_axes=(None, 0, 0))  # noqa: E731
    return [
        ("mlp", qb.value_and_grad, _mlp, (_mlp_params(), RNG.uniform(-1, 1, (64, 3)))),
        ("scan", qb.value_and_grad, _scan_energy, (1.3, RNG.uniform(-1, 1, 16))),
        ("hessian", hessian, _rosenbrock, (RNG.uniform(-1, 1, 12),)),
        ("per-example", per_example, _softmax_nll,
         (RNG.normal(size=(10, 4)) / 3, RNG.normal(size=(8, 10)), np.arange(8) % 4)),
        ("threaded", qb.value_and_grad, _rows,
         (RNG.uniform(-1, 1, (32, 32)) / 4, RNG.uniform(-1, 1, (320, 32)),
          RNG.uniform(-1, 1, 32))),
    ]


def _penalty(p):
    """An L2 term on the parameters: the edit a user makes most."""
    return sum(qb.sum(leaf ** 2) for leaf in qb.tree.leaves(p))


@pytest.fixture(params=_programs(), ids=lambda p: p[0])
def program(request, monkeypatch):
    """``(original graph, edited graph, values)`` of a program cut into parts of a few lines
    (a threaded one with its tile loop), its edit the same loss plus an L2 term."""
    name, transform, loss, args = request.param
    monkeypatch.setattr(parts, "PART_LINES", 24)
    if name == "threaded":
        monkeypatch.setattr(threads, "WORTH_ELEMENTS", 0)
        monkeypatch.setenv("QUABLA_NUM_THREADS", "2")
    edited = lambda w, *rest: loss(w, *rest) + 1e-3 * _penalty(w)  # noqa: E731
    original, values = _staged(transform(loss), *args)
    edit, _ = _staged(transform(edited), *args)
    if name == "threaded":
        assert module_source(original)[3] is not None, "the program has no threaded tile loop"
    return original, edit, values


def test_an_edit_generated_with_its_original_s_finished_parts_has_the_same_sources(program):
    original, edit, _ = program
    before = parts.Finished()
    module_source(original, finished=before)
    reused = parts.Finished(before.used)
    sources = module_source(edit, finished=reused)[0]
    assert sources == module_source(edit)[0]
    assert len(sources) > 1 and any(key in reused.known for key in reused.used)


def test_an_edit_compiled_after_its_original_gives_the_interpreter_s_results(program):
    original, edit, values = program
    compile_graph(original, {})
    family = programs.family(edit, threads.count())
    assert family == programs.family(original, threads.count())
    assert programs.load_finished(family)  # the original's, read by the edit's generation
    executable = compile_graph(edit, {})
    expected = evaluate(edit, values)
    first, again = executable(*values), executable(*values)
    for a, b, e in zip(first, again, expected):
        np.testing.assert_allclose(a, e, rtol=1e-11, atol=1e-12)
        np.testing.assert_array_equal(a, b)


# -- what keys a finished part ---------------------------------------------------------------------

def _loop(var, stop, body, start=0):
    loop = Loop(var, stop, start)
    loop.body = list(body)
    return loop


@pytest.mark.parametrize("a, b", [
    ([Assign("a", "b + 1")], ["a = b + 1"]),                       # binds a name, or does not
    ([Assign(("a", "b"), "c")], [Assign("a, b", "c")]),
    ([_loop("i0", 3, ["x[i0] = 0.0"])], [_loop("i0", "3", ["x[i0] = 0.0"])]),  # literal bounds
    ([_loop("i0", 3, ["x[i0] = 0.0"]), "y = 1"], [_loop("i0", 3, ["x[i0] = 0.0", "y = 1"])]),
    ([Block("while True:", ["break"], loops=True)], [Block("while True:", ["break"])]),
    ([Block("if q:", ["a = 1"]), "b = 2"], [Block("if q:", ["a = 1", "b = 2"])]),
])
def test_text_tells_apart_statements_that_differ(a, b):
    assert text(a) != text(b)


def test_a_part_s_key_reads_its_prologue_and_views_not_its_program_s_others(program,
                                                                             monkeypatch):
    """Each finished part's key comes from its own statements, the arguments and views it
    needs: an edit leaves the keys of the parts it does not change as they were."""
    original, edit, _ = program
    keys = []
    digest = parts.digest
    monkeypatch.setattr(codegen.parts, "digest", lambda *texts: keys.append(digest(*texts))
                        or keys[-1])
    module_source(original)
    first = list(keys)
    keys.clear()
    module_source(edit)
    assert set(first) & set(keys)  # the parts before the edited tail
    assert set(first) != set(keys)  # the tail


# -- trust: the finished parts are an entry of the cache, checked like a part ----------------------

def _family(graph):
    return programs.family(graph, threads.count())


def _mlp_graph():
    return _staged(qb.value_and_grad(_mlp), _mlp_params(), RNG.uniform(-1, 1, (64, 3)))[0]


@pytest.mark.parametrize("data", [b"not json", b"[]", b'{"k": [["a"], [1, 2]]}',
                                  b'{"k": [[1], [1, 2, true]]}', b'{"k": "lines"}'])
def test_finished_parts_that_are_not_such_are_not_read(data):
    family = _family(_mlp_graph())
    cache.write_object(family, data, f"quabla_finished_{family}", [])
    assert programs.load_finished(family) == {}


def test_tampered_finished_parts_are_not_read_and_the_program_is_right(monkeypatch):
    monkeypatch.setattr(parts, "PART_LINES", 24)
    graph, values = _staged(qb.value_and_grad(_mlp), _mlp_params(),
                            RNG.uniform(-1, 1, (64, 3)))
    module_source(graph)
    family = _family(graph)
    good = parts.Finished()
    module_source(graph, finished=good)
    programs.store_finished(family, {key: (["    raise SystemExit('planted')"], (1, 0, True))
                                     for key in good.used})
    with open(os.path.join(cache.cache_dir(), family + ".o"), "r+b") as f:
        f.seek(3)  # the manifest's digest no longer matches
        f.write(b"#")
    assert programs.load_finished(family) == {}
    executable = compile_graph(graph, {})
    for a, e in zip(executable(*values), evaluate(graph, values)):
        np.testing.assert_allclose(a, e, rtol=1e-11, atol=1e-12)


def test_the_family_names_inputs_outputs_threads_and_settings(monkeypatch):
    graph = _mlp_graph()
    family = _family(graph)
    assert programs.family(graph, threads.count() + 1) != family
    other, _ = _staged(qb.value_and_grad(_mlp), _mlp_params(), RNG.uniform(-1, 1, (32, 3)))
    assert _family(other) != family
    monkeypatch.setattr(parts, "PART_LINES", parts.PART_LINES + 1)
    assert _family(graph) != family
