"""Programs whose outputs are sums of terms that share no work, cut into a main term and the
rest, each a program of its own (lowering/terms.py): the main term of an edit (another loss
term: a boundary condition, data on more points, a penalty) is its original program, found in
the cache, and the edit compiles the rest only; split programs give the interpreter's results
(called twice, linked warm, through ``.numba``); graphs that are not such sums stay whole; a
graph's order of free nodes does not change its key."""

import numpy as np
import pytest

import quabla as qb
from quabla.core.expand import expand
from quabla.core.graph import Graph, Node
from quabla.core.interpret import evaluate
from quabla.dtypes import float64
from lowering import cache, terms
from lowering.numba_cpu import (NativeExecutable, TermsExecutable, load_cached, machine,
                                module_source, optimised, parts_compiled, sources, workload)

RNG = np.random.default_rng(5)
XS = np.linspace(0.0, 1.0, 24)
MANY = np.linspace(0.0, 1.0, 100)  # the PINN's work a hundred times its penalty's


def _fresh():
    """A weight new to every run: a program that uses it is in no compile cache yet."""
    return 1.0 + float(np.random.default_rng().integers(1, 2**40)) / 2**41


def _params(sizes=(1, 8, 8, 1)):
    return [(RNG.normal(size=(a, b)) / np.sqrt(a), 0.1 * RNG.normal(size=b))
            for a, b in zip(sizes[:-1], sizes[1:])]


PARAMS = _params()


def _net(p, x):
    h = qb.reshape(x, (1,))
    for w, b in p[:-1]:
        h = qb.tanh(h @ w + b)
    return (h @ p[-1][0] + p[-1][1])[0]


def _pinn(extra=None, weight=1.0):
    """A 1D Poisson PINN's loss (``u''`` by two grads under vmap) with ``extra`` added: a
    boundary term (the network evaluated again), data at three points, or a penalty."""
    def loss(p, xs):
        uxx = qb.vmap(qb.grad(qb.grad(_net, 1), 1), in_axes=(None, 0))(p, xs)
        value = qb.mean((uxx + qb.sin(3.0 * xs)) ** 2)
        if extra == "boundary":
            value = value + weight * (_net(p, 0.0) ** 2 + _net(p, 1.0) ** 2)
        elif extra == "data":
            data = qb.vmap(_net, in_axes=(None, 0))(p, qb.array([0.25, 0.5, 0.75]))
            value = value + weight * qb.mean((data - 0.5) ** 2)
        elif extra == "penalty":
            value = value + weight * sum(qb.sum(w * w) for w, _ in p)
        return value
    return loss


def _graph(fn, *args):
    return expand(qb.jit(fn).lower(*args).graph)


def _check(compiled, graph, args, rtol=1e-11):
    """``compiled`` called twice gives ``graph``'s results by the interpreter."""
    values = [np.asarray(a) for a in qb.tree.leaves(args)]
    expected = evaluate(graph, values)
    for _ in range(2):
        for ours, theirs in zip(qb.tree.leaves(compiled(*args)), expected):
            np.testing.assert_allclose(np.asarray(ours), theirs, rtol=rtol, atol=1e-13)


@pytest.mark.parametrize("extra", ["boundary", "data", "penalty"])
def test_the_main_term_of_an_edit_is_its_original_program(extra):
    original = _graph(qb.value_and_grad(_pinn()), PARAMS, XS)
    edited = _graph(qb.value_and_grad(_pinn(extra, 1e-3)), PARAMS, XS)
    (whole,) = terms.split(original)
    main, rest = terms.split(edited)
    assert main.graph.fingerprint() == whole.graph.fingerprint()
    assert main.inputs == whole.inputs  # not the last bias: u'' does not read it
    assert main.outputs == tuple(range(len(edited.outputs)))
    # the added term reads the parameters it uses and adds to the value and their gradients
    assert 0 in rest.outputs and len(rest.outputs) > 1
    assert len(rest.graph.inputs) == len(rest.inputs) + len(rest.outputs)
    assert len(rest.graph.nodes) < len(main.graph.nodes)


def test_an_edit_that_adds_an_argument_keeps_its_main_term():
    """The boundary term's points passed as a new argument: the main term reads the inputs it
    uses only, as the original program (whose last bias, under two derivatives, it never
    reads) does; both are run given the inputs their terms read."""
    def edited(p, xs, xb):
        return _pinn()(p, xs) + 1e-2 * qb.sum(qb.vmap(_net, in_axes=(None, 0))(p, xb) ** 2)

    original = _graph(qb.value_and_grad(_pinn()), PARAMS, XS)
    xb = np.array([0.0, 1.0])
    graph = _graph(qb.value_and_grad(edited), PARAMS, XS, xb)
    (whole,), (main, rest) = terms.split(original), terms.split(graph)
    bias, points = len(original.inputs) - 2, len(graph.inputs) - 1
    assert whole.inputs == main.inputs == tuple(k for k in range(points) if k != bias)
    assert main.graph.fingerprint() == whole.graph.fingerprint()
    assert bias in rest.inputs and points in rest.inputs
    for fn, args, g in [(qb.value_and_grad(_pinn()), (PARAMS, XS), original),
                        (qb.value_and_grad(edited), (PARAMS, XS, xb), graph)]:
        compiled = qb.jit(fn).lower(*args).compile()
        assert isinstance(compiled.executable, TermsExecutable)
        _check(compiled, g, args)


def test_an_edit_compiles_its_added_term_alone_with_the_interpreter_s_results():
    """Compiled after its original, an edit (a boundary term) finds the main term's program
    in the cache and compiles the rest's parts only, first by the quick tier, then swapped
    for the optimised ones with the same bits; linked warm, it gives the same results."""
    qb.jit(qb.value_and_grad(_pinn()))(PARAMS, XS)
    optimised()
    fn = qb.value_and_grad(_pinn("boundary", _fresh()))
    graph = _graph(fn, PARAMS, XS)
    rest = terms.split(graph)[1]
    # the rest's parts that an earlier run did not leave in the cache (those the fresh
    # constant is in): all that compiles, the main term found whole
    missing = [source for source in module_source(rest.graph)[0]
               if cache.read_object(cache.entry_key(source)) is None]
    assert missing
    before = parts_compiled()
    compiled = qb.jit(fn).lower(PARAMS, XS).compile()
    first = [np.asarray(x) for x in qb.tree.leaves(compiled(PARAMS, XS))]
    executable = compiled.executable
    assert isinstance(executable, TermsExecutable)
    assert parts_compiled() - before == len(missing)
    optimised()
    second = [np.asarray(x) for x in qb.tree.leaves(compiled(PARAMS, XS))]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, second))
    _check(compiled, graph, (PARAMS, XS))
    warm = load_cached(graph)
    assert isinstance(warm, TermsExecutable)
    values = [np.asarray(a) for a in qb.tree.leaves((PARAMS, XS))]
    for ours, theirs in zip(warm(*values), second):
        assert ours.tobytes() == theirs.tobytes()


def _quick_marks(graph):
    """Whether each part of each term of ``graph`` compiles with a quick pipeline."""
    return [["lean_pipeline(quick=True)" in source for source in module_source(
        term.graph, light=k > 0 and workload.light(term.graph, workload.graph_work(graph)))[0]]
        for k, term in enumerate(terms.split(graph))]


@pytest.mark.parametrize("extra, light", [("penalty", True), ("data", False)])
def test_a_term_of_little_work_is_light_every_part_quick(extra, light):
    """A penalty's term (its value and gradient: a sum over the weights) does less than a
    hundredth of the PINN's work at 100 points: every part of it is quick, as ``sources``
    shows them; data at 200 points (the network and its gradient at each) is not light."""
    xs = np.linspace(0.0, 1.0, 200) if extra == "data" else XS

    def loss(p, xs):
        value = _pinn()(p, MANY)
        if extra == "data":
            return value + qb.mean((qb.vmap(_net, in_axes=(None, 0))(p, xs) - 0.5) ** 2)
        return value + 1e-3 * sum(qb.sum(w * w) for w, _ in p)

    graph = _graph(qb.value_and_grad(loss), PARAMS, xs)
    main, rest = _quick_marks(graph)
    assert not all(main) and all(rest) == light
    shown = sources(graph)
    assert len(shown) == len(main) + len(rest)
    assert ["lean_pipeline(quick=True)" in s for s in shown] == main + rest


def test_an_edit_of_a_light_term_compiles_it_once_by_the_bare_pipeline(pipelines):
    """Compiled after its original, a penalty's edit compiles the light term's parts by the
    bare pipeline alone (no quick tier, nothing optimised later): the interpreter's results,
    the same bits when called again, after ``optimised``, and linked warm."""
    qb.jit(qb.value_and_grad(_pinn()))(PARAMS, MANY)
    optimised()
    pipelines.clear()
    fn = qb.value_and_grad(_pinn("penalty", _fresh()))
    graph = _graph(fn, PARAMS, MANY)
    assert all(_quick_marks(graph)[1])
    compiled = qb.jit(fn).lower(PARAMS, MANY).compile()
    first = [np.asarray(x) for x in qb.tree.leaves(compiled(PARAMS, MANY))]
    optimised()
    assert pipelines and set(pipelines) == {machine.BARE}
    _check(compiled, graph, (PARAMS, MANY))
    values = [np.asarray(a) for a in qb.tree.leaves((PARAMS, MANY))]
    again = qb.tree.leaves(compiled(PARAMS, MANY))
    for ours, twice, theirs in zip(load_cached(graph)(*values), again, first):
        assert ours.tobytes() == theirs.tobytes() == np.asarray(twice).tobytes()


def _unused_by_main(p, x):
    """A loss whose second term alone reads the last parameter: the main term writes its
    gradient as zeros, the rest adds to them."""
    w, b, c = p
    main = qb.mean(qb.tanh(x @ w + b) ** 2) + qb.sum(qb.sin(x @ w) ** 2) / 7.0
    return main + qb.sum(qb.cos(c * w[0]) ** 2) + qb.sum(qb.exp(-c * c))


def _deep(w, x, act=qb.tanh):
    for _ in range(4):
        x = act(x @ w) + 0.5 * x
    return x


def _value_only(w, x):
    """Two terms, one output: the value of a loss, no gradient."""
    h = _deep(w, x)
    g = _deep(2.0 * w, x[:4], qb.sin)
    return qb.mean(qb.log(1.0 + h * h)) + qb.mean(qb.exp(-g * g))


def _float32(w, x):
    return qb.mean(_deep(w, x) ** 2) + qb.mean(_deep(w, x[:3], qb.sin) ** 2)


def _scanned(k, u0):
    """A term with a loop (scan) and a term without."""
    def step(u, i):
        return u + 0.1 * k * (qb.roll(u, 1) - 2.0 * u + qb.roll(u, -1)), None
    u, _ = qb.scan(step, u0, length=20)
    return qb.sum(u * u) + qb.sum(qb.cos(k) ** 2 * qb.tanh(k)) + qb.sum(qb.exp(-k * k))


_W, _X = RNG.normal(size=(5, 5)) / 3, RNG.normal(size=(12, 5))
CASES = {
    "zeros in the main": (qb.value_and_grad(_unused_by_main), ([_W, RNG.normal(size=5),
                                                               RNG.normal(size=5)], _X)),
    "value only": (_value_only, (_W, _X)),
    "float32": (qb.value_and_grad(_float32), (_W.astype(np.float32), _X.astype(np.float32))),
    "scan": (qb.value_and_grad(_scanned), (0.2 + 0.1 * RNG.uniform(size=16),
                                           np.exp(-np.linspace(-2, 2, 16) ** 2))),
    "pinn data": (qb.value_and_grad(_pinn("data", 0.5)), (PARAMS, XS)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_program_cut_into_terms_gives_the_interpreter_s_results(name):
    fn, args = CASES[name]
    graph = _graph(fn, *args)
    split = terms.split(graph)
    assert len(split) == 2, name
    compiled = qb.jit(fn).lower(*args).compile()
    assert isinstance(compiled.executable, TermsExecutable)
    _check(compiled, graph, args, rtol=1e-5 if name == "float32" else 1e-11)
    if name == "zeros in the main":  # the last parameter's gradient: the rest's alone
        assert 3 not in [k for k in split[0].outputs if k not in split[1].outputs]
        assert 3 in split[1].outputs


def test_a_split_program_runs_in_users_numba_code():
    numba = pytest.importorskip("numba")
    fn, args = CASES["zeros in the main"]
    compiled = qb.jit(fn).lower(*args).compile()
    values = [np.asarray(a) for a in qb.tree.leaves(args)]

    @numba.njit
    def twice(f, w, b, c, x):
        first = f(w, b, c, x)
        return first, f(w, b, c, x)

    first, second = twice(compiled.numba, *values)
    for ours, again, theirs in zip(first, second, qb.tree.leaves(compiled(*args))):
        np.testing.assert_array_equal(ours, np.asarray(theirs))
        np.testing.assert_array_equal(again, np.asarray(theirs))


def _adam_step(p, m):
    x = np.linspace(-1.0, 1.0, 40).reshape(8, 5)

    def loss(p):
        return qb.mean(qb.tanh(x @ p) ** 2) + 1e-3 * qb.sum(p * p)
    value, g = qb.value_and_grad(loss)(p)
    m = 0.9 * m + 0.1 * g
    return value, p - 1e-2 * m, m


def _shared_work(w, x):
    h = qb.tanh(x @ w)  # both terms read it
    return qb.mean(h * h) + qb.mean(qb.sin(h) ** 2) + qb.mean(qb.exp(-h))


def _argmax_too(w, x):
    h = qb.tanh(x @ w)
    return qb.mean(h ** 2) + qb.mean(qb.sin(x[:2] @ w) ** 2), qb.argmax(h, axis=1)


@pytest.mark.parametrize("fn, args", [
    (_adam_step, (_W[:, :3], np.zeros((5, 3)))),  # the added term writes the value alone
    (qb.value_and_grad(_shared_work), (_W, _X)),  # the terms share work
    (_argmax_too, (_W, _X)),                      # an output is not a float
    (qb.grad(lambda x: qb.sum(x * x) + qb.sum(qb.sin(x))), (_X,)),  # small
], ids=["optimizer step", "shared work", "integer output", "small"])
def test_programs_that_are_not_such_sums_stay_whole(fn, args):
    graph = _graph(fn, *args)
    assert len(terms.split(graph)) == 1
    compiled = qb.jit(fn).lower(*args).compile()
    assert isinstance(compiled.executable, NativeExecutable)


def test_a_program_s_key_does_not_depend_on_where_its_free_nodes_were_traced():
    """Two orders of one graph (a parameter's reshape traced first, or just before its
    reader, as simplification leaves it when another term made it first) are one graph once
    ``canonical``; a graph already in that order is returned as it is."""
    def graph(order):
        made = {}
        nodes = []

        def add(name, node):
            made[name] = len(nodes)
            nodes.append(node)

        for name in order:
            if name == "w":
                add(name, Node("input", (), (("index", 0),), (4,), float64))
            elif name == "x":
                add(name, Node("input", (), (("index", 1),), (3, 4), float64))
            elif name == "row":
                add(name, Node("broadcast_in_dim", (made["w"],), (
                    ("broadcast_dimensions", (1,)), ("shape", (3, 4))), (3, 4), float64))
            elif name == "sin":
                add(name, Node("sin", (made["x"],), (), (3, 4), float64))
            elif name == "mul":
                add(name, Node("mul", (made["sin"], made["row"]), (), (3, 4), float64))
            elif name == "sum":
                add(name, Node("reduce_sum", (made["mul"],), (("axes", (0, 1)),), (),
                               float64))
        return Graph(nodes, [made["w"], made["x"]], [made["sum"]])

    early = graph(["w", "x", "row", "sin", "mul", "sum"])
    late = graph(["w", "x", "sin", "row", "mul", "sum"])
    assert early.fingerprint() != late.fingerprint()
    assert terms.canonical(late) is late
    moved = terms.canonical(early)
    assert moved.fingerprint() == late.fingerprint()
    values = [np.arange(4.0), np.arange(12.0).reshape(3, 4)]
    np.testing.assert_array_equal(evaluate(moved, values)[0], evaluate(early, values)[0])


def test_large_carried_sums_stay_in_one_program(monkeypatch):
    """Per-example gradients with a penalty: the rest would read and write every example's
    gradient once more per call, so the program is not cut (``CARRIED_ELEMENTS``)."""
    def loss(w, x):
        return qb.sum(_deep(w, x[None]) ** 2) + 1e-3 * qb.sum(qb.sin(w) ** 2)

    fn = qb.vmap(qb.grad(loss), in_axes=(None, 0))
    graph = _graph(fn, _W, _X)
    assert len(terms.split(graph)) == 2
    monkeypatch.setattr(terms, "CARRIED_ELEMENTS", _X.shape[0] * _W.size - 1)
    assert len(terms.split(graph)) == 1
