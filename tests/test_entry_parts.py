"""Entries cut into parts (lowering/numba_cpu/parts.py) and the kernels entries call by symbol
(lowering/numba_cpu/external.py): every program of the device corpus's whole-program and
control-flow cases, cut into parts of a few lines, gives the interpreter's results, called
twice and again when its parts are linked from the cache in place of compiling; a part of
the cache that is tampered with is compiled again; a program that shares its first parts with
one compiled before compiles only the rest.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import quabla as qb
import device_cases
from lowering import cache
from lowering.numba_cpu import (compile_graph, load_cached, module_source, parts, quick,
                                sources)
from quabla.core.expand import expand
from quabla.core.interpret import evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHOLE_PROGRAMS = {case.name: case for case in device_cases.cases()
                  if not case.name.startswith(("abs-", "add-", "sub", "mul", "div"))}
NAMES = ["grad", "value_and_grad-energy", "vjp", "vmap-solve", "jacobian-reverse", "hessian",
         "pinn-value_and_grad", "reduce-all-axes", "scan", "fori_loop", "while_loop", "cond",
         "cond-vmap", "dynamic_update_add", "remat-value_and_grad"]


def _fresh_factor():
    """A number in [1, 1.5) new to every run: a program that multiplies by it is in no
    compile cache yet, whatever ran before."""
    return 1.0 + float(np.random.default_rng().integers(1, 2**40)) / 2**41


@pytest.fixture
def small_parts(monkeypatch):
    monkeypatch.setattr(parts, "PART_LINES", 6)


@pytest.mark.parametrize("name", NAMES)
def test_a_program_cut_in_parts_gives_the_interpreter_s_results(small_parts, name):
    case = WHOLE_PROGRAMS[name]
    graph = qb.jit(case.fn).lower(*case.args).graph
    sources = module_source(graph)[0]
    assert len(sources) > 1, f"{name}: {len(sources)} parts"  # (a loop: its results after it)
    device_cases.check("cpu", case)  # compiled: every part, then called twice
    warm = load_cached(graph)        # every part linked from the cache
    assert warm is not None
    values = [np.asarray(leaf) for leaf in qb.tree.flatten(case.args)[0]]
    for actual, expected in zip(warm(*values), evaluate(graph, values)):
        np.testing.assert_allclose(np.asarray(actual), expected, **device_cases.TOL)


def test_every_primitive_s_program_cut_in_parts_gives_the_interpreter_s_results(small_parts):
    """The first rule-test case of each primitive with its gradient (device_cases), wherever
    its program is long enough to cut: compiled in parts, called twice, against the
    interpreter."""
    cut = 0
    for case in device_cases.first_primitive_cases(np.random.default_rng(11)):
        graph = qb.jit(case.fn).lower(*case.args).graph
        if len(module_source(graph)[0]) > 1:
            device_cases.check("cpu", case)
            cut += 1
    # (a program of one loop nest has no place to cut: the unary primitives' gradients)
    assert cut >= 20, f"only {cut} primitives' programs were cut"


def _mlp_loss(extra_term):
    def loss(ws, x):
        h = x
        for w in ws:
            h = qb.tanh(h @ w)
        out = qb.sum(h ** 2)
        return out + qb.sum(qb.sin(h)) if extra_term else out
    return loss


def test_an_edited_program_takes_its_unchanged_parts_from_the_cache(small_parts, monkeypatch):
    """Parts are cut where their content says, so an edited program (one more loss term)
    shares the parts before the edit with the original: compiled after it, it compiles fewer
    parts than it has."""
    import lowering.numba_cpu as cpu

    monkeypatch.setattr(cpu, "PARALLEL_PARTS", 10**6)  # every compile in this process
    compiled = []
    original = cpu._compile
    monkeypatch.setattr(cpu, "_compile", lambda key, *a: compiled.append(key) or original(key, *a))
    rng = np.random.default_rng(5)
    ws = [qb.array(rng.normal(size=(6, 6))) for _ in range(4)]
    x = qb.array(rng.normal(size=(40, 6)))
    qb.jit(qb.grad(_mlp_loss(False)))(ws, x)
    before = len(compiled)
    edited = qb.jit(qb.grad(_mlp_loss(True)))
    result = edited(ws, x)
    graph = edited.lower(ws, x).graph
    n_parts = len(module_source(graph)[0])
    assert n_parts > 2 and len(compiled) - before < n_parts, (n_parts, len(compiled) - before)
    expected = evaluate(graph, [np.asarray(w) for w in ws] + [np.asarray(x)])
    for ours, theirs in zip(result, expected):
        np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-12)


def test_every_program_links_the_one_glue_compiled_once(small_parts, monkeypatch, tmp_path):
    """The function calling a program's parts (in order, or a threaded entry's phase) reads
    their addresses and number from its own data, and the direct call of a short entry is in
    the same object (native.py's glue): in a fresh cache, programs that differ in a constant
    (every part's text differs), in their number of parts and in holding the GIL compile one
    glue between them, whose text names no part, and each gives the interpreter's results,
    called twice."""
    from lowering import native

    monkeypatch.setenv("QUABLA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_DIRS", None)
    texts, compiled = [], []
    original = native._glue

    def glue(ir):
        if cache.read_object(cache.entry_key("# glue\n" + ir)) is None:
            compiled.append(ir)
        texts.append(ir)
        return original(ir)

    monkeypatch.setattr(native, "_glue", glue)
    rng = np.random.default_rng(6)
    x = qb.array(rng.normal(size=(40, 6)))
    counts = set()
    for layers, factor in ((3, _fresh_factor()), (3, _fresh_factor()), (8, _fresh_factor())):
        ws = [qb.array(rng.normal(size=(6, 6))) for _ in range(layers)]

        def loss(ws, x):
            return factor * _mlp_loss(True)(ws, x)

        step = qb.jit(qb.grad(loss))
        graph = step.lower(ws, x).graph
        counts.add(len(module_source(graph)[0]))
        expected = evaluate(graph, [np.asarray(w) for w in ws] + [np.asarray(x)])
        for _ in range(2):
            for ours, theirs in zip(step(ws, x), expected):
                np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-12)
    factor = _fresh_factor()
    short = qb.jit(lambda v: qb.sum(v * v) * factor)
    v = np.linspace(0.0, 1.0, 5)
    assert quick(short.lower(qb.array(v)).graph)  # it holds the GIL: the direct call
    for _ in range(2):
        assert float(short(qb.array(v))) == pytest.approx(np.sum(v * v) * factor, rel=1e-14)
    assert len(counts) == 2 and min(counts) > 2, counts
    assert len(set(texts)) == 1 and len(compiled) == 1
    assert "quabla_direct(" in texts[0] and "quabla_sequence(" in texts[0]
    assert "qb_" not in texts[0]


def _penalised(penalty, weight=1e-3):
    """A batch MLP's loss at two sets of points (each weight is used twice), with ``penalty``
    (a term computed from the parameters alone) times ``weight`` added unless None."""
    def net(ws, x):
        for w in ws[:-1]:
            x = qb.tanh(x @ w)
        return x @ ws[-1]

    def loss(ws, x):
        out = qb.mean(net(ws, x) ** 2) + qb.mean((net(ws, 0.5 * x[:8]) - 1.0) ** 2)
        return out if penalty is None else out + weight * sum(penalty(w) for w in ws)
    return loss


@pytest.mark.parametrize("penalty", [lambda w: qb.sum(w * w), lambda w: qb.sum(qb.abs(w) ** 3)],
                         ids=["l2", "cubic"])
def test_a_penalty_on_the_parameters_recompiles_only_the_tail(small_parts, monkeypatch, penalty):
    """A term computed from the parameters alone changes only the schedule's tail
    (schedule.tail_phases: each gradient's last sums, to which the term's contribution comes
    last, quabla/transforms/vjp.py; the term itself; the small results copied into place):
    the edited program's statements before the tail are the original's, names and scratch
    slots included, and compiled after it, it compiles only the parts from its tail on. It
    gives the interpreter's results, called twice. (Programs not cut into terms: a sum's
    terms that share no work are programs of their own, lowering/terms.py, and the tail is
    what an edit changes where the outputs are no such sums, as in an optimizer's step.)"""
    import lowering.numba_cpu as cpu
    from lowering import terms
    from lowering.numba_cpu import programs
    from lowering.numba_cpu.statements import render

    monkeypatch.setattr(terms, "SPLIT_NODES", 10**9)
    monkeypatch.setattr(cpu, "PARALLEL_PARTS", 10**6)  # every compile in this process
    monkeypatch.setattr(programs, "KEEP", False)  # each program generated here, not kept
    cuts = []
    original_split = parts.split

    def split(e, graph, items, part_lines=None):
        bodies = original_split(e, graph, items, part_lines)
        tail = min(k for phase, k in e.phase_items.items() if phase)
        cuts.append((render(items[:tail]), len(bodies),
                     next(k for k, body in enumerate(bodies) if items[tail] in body)))
        return bodies

    monkeypatch.setattr(parts, "split", split)
    rng = np.random.default_rng(7)
    ws = [qb.array(rng.normal(size=shape)) for shape in [(3, 8), (8, 8), (8, 1)]]
    x = qb.array(rng.normal(size=(24, 3)))
    qb.jit(qb.value_and_grad(_penalised(None)))(ws, x)
    weight = 1e-3 * _fresh_factor()
    edited = qb.jit(qb.value_and_grad(_penalised(penalty, weight)))  # (its tail never cached)
    before = cpu.parts_compiled()
    first, again = edited(ws, x), edited(ws, x)
    (body, _, _), (edited_body, n_parts, tail_part) = cuts
    assert edited_body == body
    new = cpu.parts_compiled() - before
    assert 0 < new <= n_parts - tail_part < n_parts, (new, n_parts)
    graph = edited.lower(ws, x).graph
    expected = evaluate(graph, [np.asarray(w) for w in ws] + [np.asarray(x)])
    for result in (first, again):
        for ours, theirs in zip(qb.tree.leaves(result), expected):
            np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-12)


def test_a_short_entry_recompiles_only_its_tail_for_a_term_with_new_data(monkeypatch):
    """An entry too short to cut (under ``2 * PART_LINES``) is still cut before its tail, and
    the constants come last in the argument tuple: a term with data of its own (a constant
    array the original lacks) changes the tail's part alone. The edited program compiles one
    part of its two and gives the interpreter's results, called twice."""
    import lowering.numba_cpu as cpu

    monkeypatch.setattr(cpu, "PARALLEL_PARTS", 10**6)  # every compile in this process
    rng = np.random.default_rng(3)
    ws = [qb.array(rng.normal(size=shape)) for shape in [(4, 6), (6, 1)]]
    x, target = qb.array(rng.normal(size=(10, 4))), rng.normal(size=(4, 6))
    weight = 0.01 * _fresh_factor()

    def loss(ws, x):
        return qb.mean((qb.tanh(x @ ws[0]) @ ws[1]) ** 2)

    def edited_loss(ws, x):
        return loss(ws, x) + weight * qb.sum((ws[0] - target) ** 2)  # (its tail never cached)

    qb.jit(qb.value_and_grad(loss))(ws, x)
    edited = qb.jit(qb.value_and_grad(edited_loss))
    graph = edited.lower(ws, x).graph
    sources = module_source(graph)[0]
    assert len(sources) == 2 and sum(s.count("\n") for s in sources) < 2 * parts.PART_LINES
    before = cpu.parts_compiled()
    first, again = edited(ws, x), edited(ws, x)
    assert cpu.parts_compiled() - before == 1
    expected = evaluate(graph, [np.asarray(w) for w in ws] + [np.asarray(x)])
    for result in (first, again):
        for ours, theirs in zip(qb.tree.leaves(result), expected):
            np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-12)


def _per_example(rng):
    """Per-example gradients of a tanh layer under ``vmap``: results of 48 x 40 x 16 elements,
    too many to hold and copy (``emitter.HELD_ELEMENTS``)."""
    w, b = qb.array(rng.normal(size=(40, 16))), qb.array(rng.normal(size=16))
    x = qb.array(rng.normal(size=(48, 40)))

    def loss(p, xi):
        return qb.sum(qb.tanh(xi @ p[0] + p[1]) ** 2)
    return (lambda f: qb.vmap(qb.grad(f), in_axes=(None, 0))), loss, ((w, b), x)


def _tiled(rng):
    """A PINN-style loss over 512 points (a tile loop, split across two threads), whose
    tail's constants go ahead of the loop."""
    ws = [qb.array(rng.normal(size=shape)) for shape in [(1, 16), (16,), (16, 16), (16,),
                                                         (16, 1)]]
    t = qb.array(rng.uniform(0.0, 1.0, 512))

    def net(p, ti):
        h = qb.tanh(qb.reshape(ti, (1,)) @ p[0] + p[1])
        return (qb.tanh(h @ p[2] + p[3]) @ p[4])[0]

    def loss(p, t):
        return qb.mean((qb.vmap(lambda ti: net(p, ti))(t) - qb.sin(3.0 * t)) ** 2)
    return qb.value_and_grad, loss, (ws, t)


def _short(rng):
    """A Poisson GLM's negative log-likelihood: an entry too short to cut by its size."""
    X = qb.array(rng.normal(size=(300, 8)) / 4.0)
    y = qb.array(rng.poisson(2.0, size=300).astype(float))

    def nll(w):
        rate = qb.logaddexp(X @ w, 0.0) + 1e-9
        return qb.mean(rate - y * qb.log(rate)) + 1e-3 * qb.sum(qb.log(qb.cosh(w)))
    return qb.value_and_grad, nll, (qb.array(0.1 * rng.normal(size=8)),)


def _hessian(rng):
    """The dense Hessian of a chain of springs with cosine couplings: every value of the
    program is computed from its input alone, and its Hessian has a constant part (the
    springs'), to which the penalty's Hessian, a constant too, is added."""
    def f(x):
        return qb.sum(qb.cos(x[1:] * x[:-1])) + 0.5 * qb.sum((x[1:] - x[:-1]) ** 2)
    return qb.hessian, f, (qb.array(rng.uniform(-1.0, 1.0, 24)),)


def _sliced(rng):
    """A least-squares fit; the edit's penalty is on a slice of the parameters (a view of an
    input, then arithmetic on it)."""
    X = qb.array(rng.normal(size=(200, 6)))
    y = qb.array(rng.normal(size=200))

    def loss(w):
        r = X @ w - y
        return qb.mean(r * r) + 0.1 * qb.sum(qb.abs(w[1:]) ** 3)
    return qb.value_and_grad, loss, (qb.array(rng.normal(size=6)),), lambda w: w[2:]


@pytest.mark.parametrize("program", [_per_example, _tiled, _short, _hessian, _sliced],
                         ids=["per-example", "tiled", "short", "hessian", "sliced"])
def test_an_added_penalty_changes_only_the_last_part(program):
    """The edit adds an L2 penalty on the first argument (on a slice of it). Its gradient is
    added to results the original computes in place (large ones are then updated in place,
    ``emitter._updated_in_place``); ``1 - tanh ** 2``'s 1 and a view of an input belong to
    the phase that reads them, arithmetic on a view to the penalty's
    (``schedule.tail_phases``); the penalty's Hessian, a constant added last to a Hessian
    with a constant part, is a last phase of its own with that part; a tail constant that
    goes ahead of a tile loop does not start the tail; a short entry's last phase is a part
    of its own. So every part but the last is the original's, and both programs give the
    interpreter's results, called twice."""
    transform, loss, args, *view = program(np.random.default_rng(8))
    weight = 1e-3 * _fresh_factor()
    view = view[0] if view else (lambda leaf: leaf)

    def edited(first, *rest):
        return loss(first, *rest) + weight * sum(qb.sum(view(leaf) * view(leaf))
                                                 for leaf in qb.tree.leaves(first))

    fns = [qb.jit(transform(f)) for f in (loss, edited)]
    graphs = [fn.lower(*args).graph for fn in fns]
    original, changed = (module_source(graph, n_threads=2)[0] for graph in graphs)
    assert len(original) == len(changed) >= 2
    assert changed[:-1] == original[:-1] and changed[-1] != original[-1]
    values = [np.asarray(leaf) for leaf in qb.tree.leaves(args)]
    for fn, graph in zip(fns, graphs):
        expected = evaluate(graph, values)
        for result in (fn(*args), fn(*args)):
            for ours, theirs in zip(qb.tree.leaves(result), expected):
                np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-10, atol=1e-12)


def test_a_result_another_reads_is_not_the_last_phase():
    """A Hessian with a constant part, returned and read by a second result: the constant's
    add stays in the phase its reader needs it in (``schedule._constant_terms`` takes only
    results nothing reads), and both results are the interpreter's, called twice."""
    def f(x):
        return (qb.sum(qb.cos(x[1:] * x[:-1])) + 0.5 * qb.sum((x[1:] - x[:-1]) ** 2)
                + 0.01 * qb.sum(x * x))

    def g(x):
        h = qb.hessian(f)(x)
        return h, h * 2.0 + 1.0

    x = qb.array(np.random.default_rng(0).uniform(-1.0, 1.0, 20))
    fn = qb.jit(g)
    expected = evaluate(fn.lower(x).graph, [np.asarray(x)])
    for result in (fn(x), fn(x)):
        for ours, theirs in zip(result, expected):
            np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-12, atol=1e-12)


def test_a_constant_the_edit_also_reads_keeps_its_place():
    """The edit's term (``sum(theta ** 2)``) needs a 2 that the program reads too (the
    derivative of ``ell ** 2``); reverse mode reaches the term first, so the trace makes the
    2 earlier than the original did. Numbered before its first reader (``tail_last``), it
    leaves the statements before the tail as they were: every part before the tail is the
    original's."""
    rng = np.random.default_rng(4)
    X, y = qb.array(rng.normal(size=(12, 3))), qb.array(rng.normal(size=12))

    def loss(theta):
        d2 = qb.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
        K = qb.exp(-0.5 * d2 / qb.exp(theta[0]) ** 2) + qb.exp(theta[1]) * qb.eye(12)
        return 0.5 * qb.dot(y, qb.linalg.solve(K, y))

    theta = qb.array([0.1, -1.0])
    original, edited = (module_source(qb.jit(qb.value_and_grad(f)).lower(theta).graph)[0]
                        for f in (loss, lambda t: loss(t) + 0.01 * qb.sum(t ** 2)))
    assert len(original) == len(edited) >= 2
    assert edited[:-1] == original[:-1] and edited[-1] != original[-1]


def test_a_penalty_that_shares_a_value_with_the_program_keeps_its_middle_part(monkeypatch):
    """A 1D Poisson solve by ``cg`` and the gradient w.r.t. the source; the edit adds an L2
    penalty on the source, which is CG's first residual norm (x0 = 0), merged with it by the
    rewriter. The tail computes it again (``schedule._tail_copies``) rather than reading it
    from the first part, so every part before the tail is the original's; the edited
    program gives the interpreter's results. (Parts of 100 lines: the default size cuts this
    entry, its stencil's concatenates read in place, in fewer places.)"""
    monkeypatch.setattr(parts, "PART_LINES", 100)
    n = 32

    def apply(u):
        left = qb.concatenate([qb.zeros(1), u[:-1]])
        right = qb.concatenate([u[1:], qb.zeros(1)])
        return (2.0 * u - left - right) * (n + 1) ** 2

    def loss(s):
        u = qb.linalg.cg(apply, s, tol=1e-10)[0]
        return qb.sum(u * u)

    source = qb.array(np.random.default_rng(2).uniform(-1.0, 1.0, n))
    graphs = [expand(qb.jit(qb.value_and_grad(f)).lower(source).graph)
              for f in (loss, lambda s: loss(s) + 1e-4 * qb.sum(s * s))]
    original, edited = (module_source(graph)[0] for graph in graphs)
    assert len(original) == len(edited) >= 3
    assert edited[:-1] == original[:-1] and edited[-1] != original[-1]
    compiled = compile_graph(graphs[1], {})
    for ours, theirs in zip(compiled(np.asarray(source)), evaluate(graphs[1], [np.asarray(source)])):
        np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-10)


@pytest.mark.parametrize("depth", [1, 20])
def test_the_tail_computes_again_what_inputs_alone_make(depth):
    """The program's product reads x normalised by ``sum(x * x)`` (``depth`` sines deep); the
    edit's penalty is the same value. Its cone of at most ``REMAT_CONE`` nodes is copied into the tail's last
    phase, numbered after the program's own nodes, and nothing of the last phase reads a node
    before the tail; a deeper cone is read from the program. Both give the interpreter's
    results."""
    from lowering.loopnest.schedule import REMAT_CONE, fused, tail_last

    def norm(x):
        for _ in range(depth):
            x = qb.sin(x)
        return qb.sum(x * x)

    rng = np.random.default_rng(4)
    w = qb.array(rng.uniform(-1.0, 1.0, (24, 24)))

    def loss(x):
        return qb.sum(qb.tanh(w @ (x / norm(x))))

    x = qb.array(rng.uniform(-1.0, 1.0, 24))
    graph = qb.jit(qb.value_and_grad(lambda x: loss(x) + 1e-3 * norm(x))).lower(x).graph
    ordered, phase = tail_last(graph)
    nodes = ordered.nodes

    def cone(k):
        if nodes[k].op == "input" or (nodes[k].op == "constant" and nodes[k].shape):
            return set()
        return {k}.union(*(cone(o) for o in nodes[k].operands))

    last = [k for k, p in phase.items() if p == 2]
    head = [k for k in range(len(nodes)) if k not in phase]
    read = [o for k in last for o in nodes[k].operands if o in head and cone(o)
            and all(fused(nodes[c].op) or nodes[c].op == "constant" for c in cone(o))]
    assert all(len(cone(o)) > REMAT_CONE for o in read)  # the deep norm only
    assert len(nodes) > len(graph.nodes) and bool(read) == (depth > REMAT_CONE)
    assert max(head) < min(last)
    compiled = compile_graph(graph, {})
    for _ in range(2):
        for ours, theirs in zip(compiled(np.asarray(x)), evaluate(graph, [np.asarray(x)])):
            np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-12)


@pytest.mark.parametrize("loop", ["fori_loop", "while_loop"])
def test_a_part_can_begin_after_a_loop_that_swaps_its_carries(small_parts, loop):
    """A loop's array carry names one of two slots, swapped every iteration, so which one
    holds the result depends on the run: the loop copies it to a slot of its own afterwards
    (regions.settle), and a part after the loop reads that. The program is cut after its
    loop, and gives the interpreter's results, called twice and from the cache."""
    def f(x):
        step = lambda c: qb.sin(c) + 0.1 * c
        if loop == "fori_loop":
            y = qb.fori_loop(0, 5, lambda i, c: step(c), x)
        else:
            y = qb.while_loop(lambda kc: kc[0] < 5, lambda kc: (kc[0] + 1, step(kc[1])),
                              (0, x))[1]
        z = qb.tanh(y) * y
        return qb.sum(z * z) + qb.sum(qb.cos(z)), z

    x = np.linspace(0.5, 1.5, 12)
    jitted = qb.jit(f)
    graph = jitted.lower(x).graph
    sources = module_source(graph)[0]
    after = [k for k, source in enumerate(sources) if "while" not in source]
    assert len(sources) > 1 and after and min(after) > 0, [s.count("\n") for s in sources]
    expected = evaluate(graph, [x])
    for result in (jitted(x), jitted(x), load_cached(graph)(x)):
        for ours, theirs in zip(qb.tree.leaves(result), expected):
            np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-12)


def test_forked_copies_take_shares_of_about_equal_lines(monkeypatch, tmp_path):
    """Missing parts are shared among forked copies by their lines, longest first (one long
    part takes a share alone), and what the copies compile is what the parent links: two
    parts compiled by two processes give the interpreter's results. (In a cache of its own:
    an earlier run leaves the parts that do not hold the fresh constant.)"""
    import lowering.numba_cpu as cpu

    monkeypatch.setenv("QUABLA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_DIRS", None)

    part = lambda n: (f"key{n}", "\n" * n)  # noqa: E731
    shares = cpu._shares([part(83), part(356), part(1137), part(15)], 2)
    assert [[key for key, _ in share] for share in shares] == [
        ["key1137"], ["key356", "key83", "key15"]]
    assert sorted(sum(len(s) for _, s in share) for share in cpu._shares(
        [part(n) for n in (30, 244, 97, 20)], 2)) == [147, 244]

    monkeypatch.setattr(cpu.threads, "count", lambda: 2)
    monkeypatch.setattr(parts, "PART_LINES", 12)
    compiled_here = []
    original = cpu._compile
    monkeypatch.setattr(cpu, "_compile",
                        lambda key, *a: compiled_here.append(key) or original(key, *a))
    rng = np.random.default_rng(11)
    x = qb.array(rng.normal(size=(5, 4)))
    salt = _fresh_factor()
    fn = qb.jit(lambda x: qb.sum(qb.sin(x @ x.T * salt) ** 2) + qb.sum(qb.exp(-x * x * salt)))
    graph = fn.lower(x).graph
    missing = [source for source in module_source(graph)[0]
               if cache.read_object(cache.entry_key(source)) is None]
    result = fn(x)
    expected = evaluate(graph, [np.asarray(x)])
    np.testing.assert_allclose(np.asarray(result), expected[0], rtol=1e-12)
    assert len(missing) >= 2
    if sys.platform.startswith("linux") and not any(m in sys.modules for m in cpu.NO_FORK):
        # a copy compiled what the parent did not
        assert 0 < len(compiled_here) < len(missing), (len(missing), compiled_here)


@pytest.mark.parametrize("because", ["another thread compiles", "jax is imported"])
def test_no_copies_where_a_fork_is_unsafe(monkeypatch, because):
    """A fork while another thread is inside a compile would copy its half-changed state, and
    one in a process with JAX's threads may deadlock (JAX warns at every fork): then this
    thread compiles every part itself."""
    import contextlib
    import types

    import lowering.numba_cpu as cpu

    monkeypatch.setattr(cpu.threads, "count", lambda: 2)
    monkeypatch.setattr(parts, "PART_LINES", 12)
    monkeypatch.setattr(cpu.os, "fork", lambda: pytest.fail("forked"))
    x = qb.array(np.random.default_rng(2).normal(size=(5, 4)))
    salt = _fresh_factor()
    fn = qb.jit(lambda x: qb.sum(qb.cos(x @ x.T * salt) ** 2) + qb.sum(qb.exp(-x * x * salt)))
    graph = fn.lower(x).graph
    assert len(module_source(graph)[0]) >= 2 and load_cached(graph) is None
    if because == "jax is imported":
        monkeypatch.setitem(sys.modules, "jax", sys.modules.get("jax", types.ModuleType("jax")))
    with cpu._IN_FLIGHT if because == "another thread compiles" else contextlib.nullcontext():
        result = fn(x)
    np.testing.assert_allclose(np.asarray(result), evaluate(graph, [np.asarray(x)])[0],
                               rtol=1e-12)


def test_a_tampered_part_is_compiled_again(small_parts):
    case = WHOLE_PROGRAMS["pinn-value_and_grad"]
    graph = qb.jit(case.fn).lower(*case.args).graph
    device_cases.check("cpu", case)
    compiled = sources(graph)
    key = cache.entry_key(compiled[len(compiled) // 2])
    stored = cache.read_object(key)
    assert stored is not None
    target = os.path.join(cache.cache_dir(), key + ".o")
    with open(target, "r+b") as f:
        f.seek(100)
        f.write(b"\x00" * 8)
    assert cache.read_object(key) is None  # it no longer verifies
    assert load_cached(graph) is None      # so the program is not linked from the cache
    device_cases.check("cpu", case)        # and compiles that part again


def test_products_call_one_kernel_and_keep_the_order_of_the_sum():
    """Products without BLAS above the loop-nest size call external.py's kernel, which sums
    every element over k in order: the bits of a plain loop (float64 and float32), with a
    batch and rows not a multiple of four."""
    rng = np.random.default_rng(3)
    for dtype in (np.float64, np.float32):
        a = rng.normal(size=(2, 7, 300)).astype(dtype)
        b = rng.normal(size=(2, 300, 5)).astype(dtype)
        f = qb.jit(lambda a, b: a @ b)
        assert f"_matmul_{np.dtype(dtype).name}(" in f.lower(a, b).source
        expected = np.zeros((2, 7, 5), dtype)
        for k in range(300):
            expected += a[:, :, k:k + 1] * b[:, k:k + 1, :]
        np.testing.assert_array_equal(np.asarray(f(a, b)), expected)


@pytest.mark.parametrize("m, n", [(21, 1), (13, 3), (1, 21), (3, 14), (22, 6), (6, 9)])
@pytest.mark.parametrize("stored", ["rows", "columns"])
def test_products_past_the_tiles_keep_the_order_of_the_sum(m, n, stored):
    """The rows and columns past the kernel's whole tiles (a matrix-vector product's every
    element) are summed in strips of rows or columns as vectors, a's rows read in place or
    transposed in registers: each element is still its plain dot, in order."""
    rng = np.random.default_rng(m * n)
    k = 300
    a = rng.normal(size=(m, k) if stored == "rows" else (k, m))
    b = rng.normal(size=(k, n))
    lhs = a if stored == "rows" else a.T
    f = qb.jit((lambda a, b: a @ b) if stored == "rows" else (lambda a, b: a.T @ b))
    assert "_matmul_float64(" in f.lower(a, b).source
    expected = np.zeros((m, n))
    for j in range(k):
        expected += lhs[:, j:j + 1] * b[j:j + 1, :]
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(f(a, b)), expected)


@pytest.mark.parametrize("spelling", ["w @ X", "w @ X.T", "batched"])
def test_a_row_times_a_matrix_is_the_matrix_times_the_row(spelling):
    """A product of one row (a linear model's ``w @ X.T``, a gradient's ``r @ X``) calls the
    kernel as the matrix times the row as a column: no copy of a transposed matrix, the
    matrix-vector strips, and still every element's plain dot in order."""
    rng = np.random.default_rng(11)
    k, n = 29, 301
    batch = (3,) if spelling == "batched" else ()
    w = rng.normal(size=batch + (1, k) if batch else (k,))
    X = rng.normal(size=batch + (n, k) if spelling != "w @ X" else (k, n))
    fn = {"w @ X": lambda w, X: w @ X, "w @ X.T": lambda w, X: w @ X.T,
          "batched": lambda w, X: qb.einsum("bmk,bnk->bmn", w, X)}[spelling]
    rhs = X if spelling == "w @ X" else np.swapaxes(X, -1, -2)
    expected = np.zeros(batch + (1, n) if batch else (n,))
    for j in range(k):
        expected += (w[..., j:j + 1] * rhs[..., j:j + 1, :] if batch else w[j] * rhs[j])
    f = qb.jit(fn)
    source = f.lower(w, X).source
    assert "_matmul_float64(" in source and f", {k}, 1, " in source  # (rows, k, 1 column)
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(f(w, X)), expected)


@pytest.mark.parametrize("spelling", ["X @ w", "X.T @ r", "w @ X.T", "r @ X"])
def test_a_tall_matrix_vector_product_goes_to_blas(spelling):
    """A matrix-vector product of at least ``MATVEC_THRESHOLD`` multiply-adds (a linear
    model's prediction and gradient) is one BLAS call with its operands read in place (a row
    times a matrix as the matrix times a column): NumPy's results, called twice."""
    from lowering.numba_cpu import linalg

    if not linalg.blas_available():
        pytest.skip("no BLAS")
    rng = np.random.default_rng(12)
    X = rng.normal(size=(linalg.MATVEC_THRESHOLD // 37 + 1, 37))
    v = rng.normal(size=X.shape[1] if spelling in ("X @ w", "w @ X.T") else X.shape[0])
    fn = {"X @ w": lambda X, v: X @ v, "X.T @ r": lambda X, v: X.T @ v,
          "w @ X.T": lambda X, v: v @ X.T, "r @ X": lambda X, v: v @ X}[spelling]
    f = qb.jit(fn)
    source = f.lower(X, v).source
    assert "_gemm(" in source and "_matmul_float64(" not in source
    assert "] = v0[" not in source  # the matrix is not copied
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(f(X, v)), fn(X, v), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("symbol", ["quabla_k_matmul_float64", "quabla_k_matmul_float32"])
def test_the_product_kernel_gives_every_shape_its_plain_dots(symbol):
    """The product kernel (external.py: tiles, strips of a column or a row past them, dots)
    gives any shape, any batch and either stored operand every element's plain dot, in
    order (a's rows transposed in registers, a's column loaded as vectors)."""
    import ctypes

    from lowering.numba_cpu import external

    dtype = np.dtype(symbol.rsplit("_", 1)[1])
    pointer = ctypes.POINTER(ctypes.c_float if dtype == np.float32 else ctypes.c_double)
    kernel = ctypes.CFUNCTYPE(None, *[pointer] * 4, *[ctypes.c_int64] * 6)(
        external.address(symbol))
    rng = np.random.default_rng(8)
    for B, M, K, N in [(1, 21, 37, 1), (2, 13, 9, 3), (1, 1, 40, 21), (1, 3, 5, 14),
                       (2, 22, 33, 6), (1, 6, 1, 9), (1, 37, 8, 19), (3, 5, 7, 2),
                       (1, 36, 3, 13), (2, 17, 2, 40)]:
        for ta, tb in [(0, 0), (1, 0), (0, 1), (1, 1)]:
            lhs, rhs = (rng.normal(size=s).astype(dtype) for s in ((B, M, K), (B, K, N)))
            a = np.ascontiguousarray(np.swapaxes(lhs, 1, 2) if ta else lhs)
            b = np.ascontiguousarray(np.swapaxes(rhs, 1, 2) if tb else rhs)
            out, work = np.full((B, M, N), np.nan, dtype), np.empty(B * K * N, dtype)
            kernel(*(x.ctypes.data_as(pointer) for x in (a, b, out, work)), B, M, K, N, ta, tb)
            expected = np.zeros((B, M, N), dtype)
            for k in range(K):
                expected += lhs[:, :, k:k + 1] * rhs[:, k:k + 1, :]
            np.testing.assert_array_equal(out, expected, err_msg=f"{(B, M, K, N, ta, tb)}")


@pytest.mark.parametrize("spelling", ["a.T @ b", "a @ b.T", "a.T @ b.T", "batched"])
def test_transposed_operands_are_read_in_place_with_the_same_bits(spelling):
    """A transposed operand (a backward pass's ``x.T @ g``, ``g @ w.T``) is handed to the
    product kernel or the small loop nest with its flag: no loop nest copies it in the entry,
    and every element is still summed over k in order."""
    rng = np.random.default_rng(5)
    m, k, n = 9, 300, 6
    a = rng.normal(size=(3, k, m) if spelling == "batched" else (k, m) if ".T @" in spelling
                   else (m, k))
    b = rng.normal(size=(3, n, k) if spelling == "batched" else (n, k) if "b.T" in spelling
                   else (k, n))
    fns = {"a.T @ b": lambda a, b: a.T @ b, "a @ b.T": lambda a, b: a @ b.T,
           "a.T @ b.T": lambda a, b: a.T @ b.T,
           "batched": lambda a, b: qb.einsum("bkm,bnk->bmn", a, b)}
    lhs = np.swapaxes(a, -1, -2) if spelling in ("a.T @ b", "a.T @ b.T", "batched") else a
    rhs = np.swapaxes(b, -1, -2) if spelling in ("a @ b.T", "a.T @ b.T", "batched") else b
    expected = np.zeros(lhs.shape[:-1] + rhs.shape[-1:])
    for j in range(k):
        expected += lhs[..., :, j:j + 1] * rhs[..., j:j + 1, :]
    for small in (False, True):  # the kernel, and the loop nest of a small product
        x, y = (lhs[..., :, :8], rhs[..., :8, :]) if small else (lhs, rhs)
        x = np.swapaxes(x, -1, -2) if lhs is not a else x
        y = np.swapaxes(y, -1, -2) if rhs is not b else y
        f = qb.jit(fns[spelling])
        source = f.lower(x, y).source
        assert ("_matmul_float64(" in source) != small
        assert "] = v0[" not in source and "] = v1[" not in source  # no copy of an operand
        want = expected if not small else sum(
            lhs[..., :, j:j + 1] * rhs[..., j:j + 1, :] for j in range(8))
        for _ in range(2):
            np.testing.assert_array_equal(np.asarray(f(x, y)), want)


def test_a_warm_process_links_parts_and_kernels_without_numba(tmp_path):
    """A second process runs a program cut in parts, with a product kernel, from the cache
    alone: Numba is never imported."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import quabla as qb
        from lowering.numba_cpu import parts
        parts.PART_LINES = 12
        rng = np.random.default_rng(1)
        w = [rng.normal(size=(300, 8)), rng.normal(size=(8, 8))]
        x = rng.normal(size=(9, 300))
        f = qb.jit(qb.value_and_grad(lambda w, x: qb.sum(qb.tanh(qb.tanh(x @ w[0]) @ w[1]))))
        value, grads = f(w, x)
        from lowering.numba_cpu import parts_compiled
        print(repr(float(value)), float(np.sum(np.asarray(grads[0]))), parts_compiled() > 0,
              "numba" in sys.modules)
    """)
    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path), PYTHONPATH=ROOT)
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr
    cold, warm = (run.stdout.split() for run in runs)
    assert cold[:2] == warm[:2]
    assert cold[2] == "True" and warm[2:] == ["False", "False"]


def test_the_parts_of_an_entry_are_linked_in_one_engine(small_parts):
    """native.sequence links every part's object and the function calling them in one MCJIT
    engine (an engine each cost a warm first call ~1.5 ms): an executable in parts, compiled
    or loaded from the cache, links no part on its own (``native.linked_objects`` counts
    those), and gives the interpreter's results both ways."""
    from lowering import native
    from lowering.numba_cpu import external

    for symbol in external.SYMBOLS:  # the product kernels: linked once per process
        external.address(symbol)
    case = WHOLE_PROGRAMS["pinn-value_and_grad"]
    compiled = qb.jit(case.fn)
    graph = compiled.lower(*case.args).graph
    assert len(module_source(graph)[0]) > 3
    values = [np.asarray(leaf) for leaf in qb.tree.flatten(case.args)[0]]
    expected = evaluate(graph, values)
    before = native.linked_objects()
    results = [compiled(*case.args)]
    results.append(load_cached(graph)(*values))
    assert native.linked_objects() == before
    for result in results:
        for actual, wanted in zip(qb.tree.leaves(result), expected):
            np.testing.assert_allclose(np.asarray(actual), wanted, **device_cases.TOL)


def test_llvm_on_its_own_thread_makes_the_same_object(tmp_path):
    """machine.ObjectCode runs LLVM's passes and code generation on a thread while the front end
    goes on; the object it makes is byte for byte the one made on the calling thread (each
    compiled in a fresh process: Numba numbers a function compiled twice in one)."""
    script = textwrap.dedent("""
        import hashlib, sys
        import numpy as np
        import quabla as qb
        from lowering import cache
        import lowering.numba_cpu as cpu
        from lowering.numba_cpu import machine, module_source, target
        machine.LLVM_THREAD = sys.argv[1] == "1"
        rng = np.random.default_rng(3)
        f = lambda x, w: qb.sum(qb.tanh(x @ w) ** 2)
        args = rng.normal(size=(9, 5)), rng.normal(size=(5, 4))
        source = module_source(qb.jit(qb.grad(f, 1)).lower(*args).graph)[0][0]
        entry = cpu._compile(cache.entry_key(source), source, "part.py")
        print(hashlib.sha256(entry.result()[0]).hexdigest())
    """)
    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path), PYTHONPATH=ROOT)
    digests = [subprocess.run([sys.executable, "-c", script, flag], env=env, check=True,
                              capture_output=True, text=True).stdout.split()[-1]
               for flag in ("1", "0")]
    assert digests[0] == digests[1]
