"""The per-call paths of a training loop: generated tree builders and matchers, assembled
results, the optimizer update's fast path and direct (GIL-holding) native calls. Each must give
exactly what the general path gives, and fall back to it whenever its assumptions fail."""

import collections
import math

import numpy as np
import pytest

import quabla as qb
from quabla import tree
from quabla.staging.staged import regrouped

Point = collections.namedtuple("Point", "x y")


class Box:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __eq__(self, other):
        return type(other) is Box and (self.a, self.b) == (other.a, other.b)

    def __repr__(self):  # test ids: the same in every pytest-xdist worker
        return f"Box({self.a!r}, {self.b!r})"


tree.register(Box, lambda b: ((b.a, b.b), None), lambda aux, ch: Box(*ch))

TREES = [
    {"b": 1.0, "a": (2.0, [3.0, None]), "c": {}},
    (1.0,), [], (), None, 5.0, {2: 1.0, 1: 3.0},
    {"p": Point(1.0, (2.0, 3.0))}, [Box(1.0, [2.0]), 4.0],
]


@pytest.mark.parametrize("value", TREES, ids=repr)
def test_builder_and_repeated_unflatten_rebuild_the_tree(value):
    leaves, treedef = tree.flatten(value)
    for _ in range(3):  # the second unflatten generates the builder, the third uses it
        rebuilt = treedef.unflatten(leaves)
        assert rebuilt == value and type(rebuilt) is type(value)
    assert treedef.builder()(leaves) == value


@pytest.mark.parametrize("value", TREES, ids=repr)
def test_matcher_returns_the_leaves_of_the_same_structure(value):
    leaves, treedef = tree.flatten(value)
    assert treedef.matcher()(value) == leaves


def test_matcher_refuses_every_other_structure():
    match = tree.structure({"a": 1.0, "b": (2.0, 3.0)}).matcher()
    assert match({"b": (5.0, 6.0), "a": 4.0}) == [4.0, 5.0, 6.0]  # key order does not matter
    for other in [{"a": 1.0}, {"a": 1.0, "c": (2.0, 3.0)}, {"a": 1.0, "b": [2.0, 3.0]},
                  {"a": 1.0, "b": (2.0,)}, {"a": (1.0,), "b": (2.0, 3.0)}, [1.0, (2.0, 3.0)],
                  {"a": 1.0, "b": (2.0, 3.0), "c": 4.0}, {"a": 1.0, "b": (2.0, {"x": 3.0})},
                  collections.OrderedDict(a=1.0, b=(2.0, 3.0))]:
        assert match(other) is None, other
    assert tree.structure([Box(1.0, 2.0)]).matcher()([Box(1.0, 2.0)]) == [1.0, 2.0]
    assert tree.structure([Box(1.0, 2.0)]).matcher()([Box(1.0, [2.0])]) is None


def test_deep_trees_keep_the_recursive_paths():
    value = 1.0
    for _ in range(200):
        value = [value]
    leaves, treedef = tree.flatten(value)
    assert treedef.unflatten(leaves) == value and treedef.builder()(leaves) == value
    assert treedef.matcher()(value) == [1.0]


def test_regrouped_assembles_as_the_transform_does():
    def placing(outs):
        return {"v": outs[2], "g": (outs[0], None, Box(outs[1], outs[0]))}

    def computing(outs):
        return outs[0] + 1

    outs = [10.0, 20.0, 30.0]
    assert regrouped(placing, 3)(outs) == placing(outs)
    assert regrouped(computing, 1) is computing
    assert regrouped(lambda outs: (outs[0], outs[1]), 2)([1, 2]) == (1, 2)


def _loss(p, x):
    h = qb.tanh(x[:, None] * p["w"] + p["b"])
    return qb.mean((h @ p["v"] - qb.sin(x)) ** 2)


def _problem():
    rng = np.random.default_rng(3)
    params = {"w": qb.array(rng.normal(size=4)), "b": qb.array(rng.normal(size=4)),
              "v": qb.array(rng.normal(size=4))}
    return params, qb.linspace(0.0, 1.0, 16)


def _train(opt, steps, general=False):
    params, x = _problem()
    state = opt.init(params)
    grad = qb.jit(qb.grad(_loss))
    for _ in range(steps):
        if general:
            opt._fast = None  # the general path on every step
        params, state = opt.update(params, grad(params, x), state)
    return params, state


@pytest.mark.parametrize("make", [lambda: qb.optim.Adam(0.01, weight_decay=0.1),
                                  lambda: qb.optim.SGD(0.05, momentum=0.9),
                                  lambda: qb.optim.SGD(0.05)], ids=["adamw", "momentum", "sgd"])
def test_fast_update_gives_the_general_paths_bits(make):
    fast_p, fast_s = _train(make(), 25)
    slow_p, slow_s = _train(make(), 25, general=True)
    assert fast_s["step"] == slow_s["step"] == 25
    for a, b in zip(tree.leaves((fast_p, fast_s)), tree.leaves((slow_p, slow_s))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert type(a) is type(b)


def test_fast_update_falls_back_when_its_assumptions_fail():
    opt = qb.optim.Adam(0.1)
    params, x = _problem()
    state0 = opt.init(params)
    g = qb.jit(qb.grad(_loss))(params, x)
    p1, s1 = opt.update(params, g, state0)
    p2, s2 = opt.update(p1, g, s1)  # the fast path
    assert opt._fast is not None
    # an earlier state again: the step it holds gives its own bias correction
    again, _ = opt.update(params, g, state0)
    for a, b in zip(tree.leaves(again), tree.leaves(p1)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # another shape, another dtype, Python-scalar and NumPy leaves, a missing key
    wide = {k: qb.array(np.concatenate([np.asarray(v)] * 2)) for k, v in params.items()}
    wide_g = {k: qb.array(np.concatenate([np.asarray(v)] * 2)) for k, v in g.items()}
    p, s = opt.update(wide, wide_g, opt.init(wide))
    assert p["w"].shape == (8,) and s["step"] == 1
    single = {k: qb.array(np.asarray(v), qb.float32) for k, v in p2.items()}
    assert opt.update(single, g, s2)[0]["w"].dtype == qb.float32
    numpy_g = {k: np.asarray(v) for k, v in g.items()}
    expected = opt.update(p2, g, s2)
    for a, b in zip(tree.leaves(opt.update(p2, numpy_g, s2)), tree.leaves(expected)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="'v' slot"):
        opt.update(p2, g, {"step": 2, "m": s2["m"]})
    # a changed hyperparameter is baked into a new program, not the old fast path
    opt.learning_rate = 0.0
    still, _ = opt.update(p2, g, s2)
    for a, b in zip(tree.leaves(still), tree.leaves(p2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_calls_on_trees_of_tensors_take_the_general_paths_results():
    """The fast path of a tree of Tensors (its structure matched without flattening) gives
    what the general path gives, traces each signature once, and leaves every other
    structure, shape, dtype and leaf type to the general path."""
    traces = []

    def f(p, x):
        traces.append(1)
        return {"y": p["w"] * x + p["b"][0], "n": [qb.sum(p["w"] * p["b"][1])]}

    fast = qb.jit(f)
    rng = np.random.default_rng(3)

    def params(n, dtype=np.float64):
        return {"w": qb.array(rng.normal(size=n).astype(dtype)),
                "b": (qb.array(np.asarray(rng.normal(), dtype)),
                      qb.array(rng.normal(size=n).astype(dtype)))}

    def traced(p, x):
        """How many traces the call took; its results against ``f`` run eagerly."""
        before = len(traces)
        got = fast(p, x)
        count = len(traces) - before
        want = f(p, x)
        assert tree.structure(got) == tree.structure(want)
        for a, b in zip(tree.leaves(got), tree.leaves(want)):
            assert type(a) is qb.Tensor and a.dtype == b.dtype
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
        return count

    p, x = params(4), qb.array(rng.normal(size=4))
    assert [traced(p, x) for _ in range(3)] == [1, 0, 0]
    assert traced(params(4), x) == 0                                     # other values
    assert traced(params(6), qb.array(np.ones(6))) == 1                  # another shape
    assert traced(params(4, np.float32), qb.array(np.ones(4, np.float32))) == 1  # dtype
    assert traced({"w": p["w"], "b": [p["b"][0], p["b"][1]]}, x) == 1    # a list for the tuple
    assert traced({"w": p["w"], "b": (0.5, p["b"][1])}, x) == 1          # a Python scalar
    assert traced({"w": np.asarray(p["w"]), "b": p["b"]}, x) == 0        # a NumPy leaf
    assert traced({"b": p["b"], "w": p["w"]}, x) == 0                    # keys in other order
    assert traced(p, x) == 0
    with pytest.raises(TypeError):
        fast({"w": p["w"], "b": (p["b"][0], "text")}, x)


def test_trees_with_python_scalars_take_the_general_paths_results(monkeypatch):
    """A tree holding static Python scalars (a hyperparameter) or an optimizer's Count among
    its Tensors is matched without flattening too: each scalar by its type and value, so a
    new value traces again and an old one does not; a Count is an array, any value one
    program; a scalar that is differentiated, and a weak Tensor, keep the general path."""
    from quabla import tree as tree_module
    from quabla.staging.signature import Count

    traces, flattens = [], []
    flatten = tree_module.flatten
    monkeypatch.setattr(tree_module, "flatten",
                        lambda *a, **k: flattens.append(1) or flatten(*a, **k))

    def f(p, h):
        traces.append(1)
        return p["w"] * h["lr"] + h["step"] * (2.0 if h["flag"] else 1.0) + h["n"]

    fast = qb.jit(f)
    w = qb.array([1.0, -2.0, 0.5])

    def call(lr, step, flag=True, n=3):
        before, flat_before = len(traces), len(flattens)
        got = np.asarray(fast({"w": w}, {"lr": lr, "step": step, "flag": flag, "n": n}))
        want = np.asarray(w) * lr + float(step) * (2.0 if flag else 1.0) + n
        np.testing.assert_array_equal(got, want)
        return len(traces) - before, len(flattens) > flat_before  # (traces, flattened)

    assert call(0.1, Count(0)) == (1, True)
    assert call(0.1, Count(5)) == (0, False)  # a Count is an array: one program, no flattening
    assert call(0.1, Count(7)) == (0, False)
    assert call(0.2, Count(7)) == (1, True)   # a static value: a new program
    assert call(0.1, Count(1)) == (0, False)
    assert call(0.1, Count(1), flag=False) == (1, True)
    assert call(0.1, Count(1), n=3.0) == (1, True)  # 3 and 3.0 are other static values
    assert call(0.1, Count(2), n=3.0) == (0, False)
    assert call(0.1, qb.array(4.0)) == (0, True)  # an array step: a Count's program
    assert call(0.1, qb.array(5.0)) == (0, False)
    grad = qb.jit(qb.grad(lambda p: qb.sum(p["w"] * p["s"])))
    for s in (2.0, 3.0):  # a differentiated Python scalar is an array: the general path
        got = grad({"w": w, "s": s})
        np.testing.assert_array_equal(np.asarray(got["w"]), [s, s, s])
        assert float(got["s"]) == float(np.sum(np.asarray(w)))


@pytest.mark.filterwarnings("ignore::quabla.errors.RetraceWarning")
def test_trees_of_new_structures_from_many_threads_at_once():
    """Threads calling with structures the fast path has not seen (each a new table entry;
    nine structures for eight traces, so evictions clear the tables too) while others match
    the ones it has."""
    import concurrent.futures

    f = qb.jit(lambda p: qb.sum(qb.tree.leaves(p)[0]) * len(qb.tree.leaves(p)))
    trees = [[qb.ones(3)] * k for k in range(1, 9)] + [{"a": qb.ones(3), "b": (qb.ones(3),)}]
    expected = [float(f(t)) for t in trees[:1]] + [3.0 * len(qb.tree.leaves(t)) for t in trees]

    def calls(k):
        return [float(f(trees[(k + j) % len(trees)])) for j in range(40)]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for k, got in enumerate(pool.map(calls, range(8))):
            assert got == [expected[1 + (k + j) % len(trees)] for j in range(40)]


def test_readme_loop_reaches_pi():
    def u(x, w):
        return qb.sin(x * w)

    u_xx = qb.vmap(qb.grad(qb.grad(u)), in_axes=(0, None))

    def loss(w, x):
        return qb.mean((u_xx(x, w) + math.pi ** 2 * qb.sin(math.pi * x)) ** 2)

    x, w = qb.linspace(0.05, 0.95, 8), qb.array(2.5)
    opt = qb.optim.Adam(learning_rate=0.05)
    state = opt.init(w)
    step = qb.jit(qb.value_and_grad(loss))
    for _ in range(300):
        value, g = step(w, x)
        w, state = opt.update(w, g, state)
    assert f"{w.item():.6f}" == "3.141593" and state["step"] == 300


def test_quick_entries_hold_the_gil_and_loops_do_not():
    from lowering.numba_cpu import QUICK_ELEMENTS, quick

    small = qb.jit(lambda x: qb.sin(x) * 2.0).lower(qb.ShapeDtype((8,), qb.float64)).graph
    big = qb.jit(lambda x: qb.sin(x) * 2.0).lower(
        qb.ShapeDtype((QUICK_ELEMENTS,), qb.float64)).graph
    loop = qb.jit(lambda x: qb.fori_loop(0, 3, lambda i, c: c * 2.0, x)).lower(
        qb.ShapeDtype((2,), qb.float64)).graph
    assert quick(small) and not quick(big) and not quick(loop)
    f = qb.jit(lambda x: qb.sin(x) * 2.0)
    x = qb.linspace(0.0, 1.0, 8)
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(f(x)), np.sin(np.asarray(x)) * 2.0)
