"""The rewriter across regions: one forward loop under reverse mode, dead carries and results
removed from regions, and bool carries.

- ``value_and_grad``/``vjp`` of a scan, a static ``fori_loop`` or a ``cond`` run the forward
  region once: the region that stores the residuals (per-step carries, a branch's
  intermediates) also gives the primal results (regions with the same operands and the same
  carry recursion are merged).
- A carry, ``y`` or branch result that nothing reads, and that no kept carry depends on, is
  dropped from the region (its sub-graphs and its node), for scan, fori_loop, while and cond.
- Bool carries and branch results run on the interpreter and the Numba back end, and under vmap.

Compiled programs are called twice (scratch reused across calls shows up as a wrong second
result).
"""

import numpy as np
import pytest

import quabla as qb
from quabla.core.interpret import evaluate
from lowering.numba_cpu import compile_graph

REGIONS = ("scan", "cond", "while")


def _regions(graph, ops=REGIONS):
    """Region nodes of ``graph`` (not nested ones)."""
    return [n for n in graph.nodes if n.op in ops]


def _all_nodes(graph):
    """Every node of ``graph`` and of its sub-graphs."""
    for n in graph.nodes:
        yield n
        for _, v in n.params:
            if isinstance(v, type(graph)):
                yield from _all_nodes(v)


def _lower(fn, *args):
    return qb.jit(fn).lower(*[qb.array(a) for a in args]).graph


def _run_both(graph, *args):
    """Interpreter and Numba results of ``graph``, the compiled program called twice."""
    values = [np.asarray(a, order="C") for a in args]
    expected = evaluate(graph, values)
    run = compile_graph(graph, {})
    for _ in range(2):
        actual = run(*values)
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert a.dtype == e.dtype and a.shape == e.shape
            np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-12)
    return expected


# -- one forward region under reverse mode ------------------------------------------------------

DT = 0.05
TH, X0 = np.array([1.3, 0.2, 0.4]), np.array([0.5, -0.3, 0.8])


def _oscillator(theta, x0):
    def step(carry, i):
        x, v = carry
        v = v + DT * (-theta[0] * x - theta[1] * v - theta[2] * x * x * x)
        x = x + DT * v
        return (x, v), qb.sum(x * x)

    (x, v), e = qb.scan(step, (x0, 0.0 * x0), length=7)
    return DT * qb.sum(e) + qb.sum(x * x + v * v)


def _oscillator_np(theta, x0):
    x, v, total = x0.copy(), 0.0 * x0, 0.0
    for _ in range(7):
        v = v + DT * (-theta[0] * x - theta[1] * v - theta[2] * x ** 3)
        x = x + DT * v
        total += DT * np.sum(x * x)
    return total + np.sum(x * x + v * v)


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for k in range(x.size):
        d = np.zeros_like(x)
        d[k] = eps
        g[k] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def _forward_scans(graph):
    return [n for n in _regions(graph, ("scan",)) if not n.kw["reverse"]]


def test_value_and_grad_of_scan_runs_the_forward_scan_once():
    graph = _lower(qb.value_and_grad(_oscillator), TH, X0)
    assert len(_forward_scans(graph)) == 1
    assert len(_regions(graph)) == 2  # the forward scan and the reverse scan of its VJP
    value, grad = _run_both(graph, TH, X0)
    assert value == pytest.approx(_oscillator_np(TH, X0), rel=1e-12)
    np.testing.assert_allclose(grad, _fd(lambda t: _oscillator_np(t, X0), TH), rtol=1e-6)


def _fori_loss(w, x):
    def body(i, carry):
        return qb.tanh(carry * w + i * 0.1)

    y = qb.fori_loop(0, 6, body, x)
    return qb.sum(y * y), y


def test_vjp_and_value_and_grad_of_fori_loop_run_it_once():
    w, x = np.array([0.7, -0.4]), np.array([0.2, 0.9])

    def vjp_fn(w, x):
        out, pull = qb.vjp(lambda w: _fori_loss(w, x)[1], w)
        return (out,) + tuple(pull(out * 0.0 + 1.0))

    for fn in (qb.value_and_grad(lambda w, x: _fori_loss(w, x)[0]), vjp_fn):
        graph = _lower(fn, w, x)
        assert len(_forward_scans(graph)) == 1 and len(_regions(graph)) == 2
    value, grad = _run_both(_lower(qb.value_and_grad(lambda w, x: _fori_loss(w, x)[0]), w, x),
                            w, x)

    def loss_np(w):
        y = x.copy()
        for i in range(6):
            y = np.tanh(y * w + i * 0.1)
        return np.sum(y * y)

    assert value == pytest.approx(loss_np(w), rel=1e-12)
    np.testing.assert_allclose(grad, _fd(loss_np, w), rtol=1e-6)


def test_vmap_of_value_and_grad_of_scan_runs_one_forward_scan():
    thetas = np.stack([TH, TH * 0.9, TH * 1.1])
    graph = _lower(qb.vmap(qb.value_and_grad(_oscillator), in_axes=(0, None)), thetas, X0)
    assert len(_forward_scans(graph)) == 1
    values, grads = _run_both(graph, thetas, X0)
    for k in range(3):
        assert values[k] == pytest.approx(_oscillator_np(thetas[k], X0), rel=1e-12)
        np.testing.assert_allclose(grads[k], _fd(lambda t: _oscillator_np(t, X0), thetas[k]),
                                   rtol=1e-6)


def _cond_loss(t, x):
    return qb.cond(x[0] > 0, lambda t: qb.sum(qb.sin(t) * x), lambda t: qb.sum(qb.cos(t) * t), t)


def test_value_and_grad_of_cond_evaluates_the_branch_once():
    """The cond reading the cotangent only scales stored residuals: the branches' sin and cos
    are all computed in the one forward cond, which also gives the value."""
    t = np.array([0.3, -1.2])
    for x in (np.array([0.5, 2.0]), np.array([-0.5, 2.0])):
        graph = _lower(qb.value_and_grad(_cond_loss), t, x)
        conds = _regions(graph)
        assert [n.op for n in conds] == ["cond", "cond"]
        backward = conds[1]
        assert not [n for n in _all_nodes(backward.kw["true_fun"]) if n.op in ("sin", "cos")]
        assert not [n for n in _all_nodes(backward.kw["false_fun"]) if n.op in ("sin", "cos")]
        value, grad = _run_both(graph, t, x)
        if x[0] > 0:
            want, want_g = np.sum(np.sin(t) * x), np.cos(t) * x
        else:
            want, want_g = np.sum(np.cos(t) * t), np.cos(t) - t * np.sin(t)
        assert value == pytest.approx(want, rel=1e-12)
        np.testing.assert_allclose(grad, want_g, rtol=1e-12)


# -- dead carries and results -------------------------------------------------------------------

def test_dead_scan_carry_and_ys_are_removed():
    """The second carry and both ys are never read: the scan keeps one carry, no ys."""
    def f(x, w):
        def step(carry, i):
            a, b = carry
            return (a * w + 1.0, b * 2.0 + qb.sum(a)), (a * 3.0, b)

        (a, _), _ = qb.scan(step, (x, qb.sum(x)), length=5)
        return a

    x, w = np.array([0.5, -1.0, 2.0]), np.array([0.9, 0.5, -0.3])
    graph = _lower(f, x, w)
    (scan,) = _regions(graph)
    assert scan.kw["n_carry"] == 1 and len(scan.kw["body"].outputs) == 1
    assert len(scan.operands) == 2  # the carry and w
    (a,) = _run_both(graph, x, w)
    want = x.copy()
    for _ in range(5):
        want = want * w + 1.0
    np.testing.assert_allclose(a, want, rtol=1e-14)


def test_carry_read_by_a_kept_carry_stays():
    def f(x):
        def body(i, carry):
            a, b, c = carry
            return a + b, b * 0.5, c + 1.0  # a reads b; c is dead

        return qb.fori_loop(0, 4, body, (x, x * 2.0, x))[0]

    x = np.array([1.0, -2.0])
    graph = _lower(f, x)
    (scan,) = _regions(graph)
    assert scan.kw["n_carry"] == 2
    (a,) = _run_both(graph, x)
    np.testing.assert_allclose(a, x + 2.0 * x * (1 + 0.5 + 0.25 + 0.125), rtol=1e-14)


def test_dead_while_carry_is_removed_but_the_predicates_carry_stays():
    def f(x):
        def body(state):
            k, v, junk = state
            return k + 1.0, v * 1.5, junk * v

        return qb.while_loop(lambda s: s[0] < 5.0, body, (qb.sum(x) * 0.0, x, x))[1]

    x = np.array([0.5, 2.0])
    graph = _lower(f, x)
    (loop,) = _regions(graph)
    assert loop.kw["n_carry"] == 2  # k (read by cond_fun) and v
    (v,) = _run_both(graph, x)
    np.testing.assert_allclose(v, x * 1.5 ** 5, rtol=1e-14)


def test_dead_cond_result_and_unused_operands_are_removed():
    def f(p, x, y):
        a, b = qb.cond(p > 0, lambda x, y: (x * 2.0, qb.sin(y)), lambda x, y: (x - 1.0, y), x, y)
        return a

    x, y = np.array([1.0, 3.0]), np.array([0.5, 0.25])
    graph = _lower(f, np.array(1.0), x, y)
    (cond,) = _regions(graph)
    assert len(cond.kw["true_fun"].outputs) == 1
    assert len(cond.operands) == 2  # the predicate and x: y is read only by the dead result
    for p, want in ((1.0, x * 2.0), (-1.0, x - 1.0)):
        (a,) = _run_both(graph, np.array(p), x, y)
        np.testing.assert_allclose(a, want, rtol=1e-14)


# -- bool carries -------------------------------------------------------------------------------

def _bool_programs():
    def scan_flag(x):
        def step(carry, i):
            flag, s = carry
            flag = qb.logical_not(flag)
            return (flag, qb.where(flag, s + x, s - x)), flag

        (flag, s), flags = qb.scan(step, (x[0] > 0, x * 0.0), length=5)
        return flag, s, flags

    def fori_flag(x):
        def body(i, carry):
            seen, v = carry
            return qb.logical_or(seen, v[0] > 2.0), v * 1.5

        return qb.fori_loop(0, 4, body, (x[0] > 100.0, x))

    def while_flag(x):
        def body(state):
            done, v = state
            v = v * 2.0
            return qb.abs(v[0]) > 3.0, v

        return qb.while_loop(lambda s: qb.logical_not(s[0]), body, (qb.abs(x[0]) > 3.0, x))

    def cond_flag(x):
        return qb.cond(x[0] > 0, lambda x: (x[1] > 0, x * 2.0), lambda x: (x[1] < 0, -x), x)

    return [scan_flag, fori_flag, while_flag, cond_flag]


def _np_bool(name, x):
    if name == "scan_flag":
        flag, s, flags = x[0] > 0, x * 0.0, []
        for _ in range(5):
            flag = not flag
            s = s + x if flag else s - x
            flags.append(flag)
        return [np.bool_(flag), s, np.array(flags)]
    if name == "fori_flag":
        seen, v = x[0] > 100.0, x.copy()
        for _ in range(4):
            seen, v = seen or v[0] > 2.0, v * 1.5
        return [np.bool_(seen), v]
    if name == "while_flag":
        done, v = abs(x[0]) > 3.0, x.copy()
        while not done:
            v = v * 2.0
            done = abs(v[0]) > 3.0
        return [np.bool_(done), v]
    return [np.bool_(x[1] > 0), x * 2.0] if x[0] > 0 else [np.bool_(x[1] < 0), -x]


BOOL_INPUTS = [np.array([0.7, -0.2]), np.array([-1.5, 0.4])]


@pytest.mark.parametrize("program", _bool_programs(), ids=lambda f: f.__name__)
def test_bool_carry_interpreter_and_numba(program):
    graph = _lower(program, BOOL_INPUTS[0])
    for x in BOOL_INPUTS:
        got = _run_both(graph, x)
        want = _np_bool(program.__name__, x)
        assert [g.dtype for g in got] == [np.asarray(w).dtype for w in want]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("program", _bool_programs(), ids=lambda f: f.__name__)
def test_bool_carry_under_vmap(program):
    xs = np.stack(BOOL_INPUTS + [np.array([5.0, 1.0])])
    graph = _lower(qb.vmap(program), xs)
    got = _run_both(graph, xs)
    for k, x in enumerate(xs):
        for g, w in zip(got, _np_bool(program.__name__, x)):
            np.testing.assert_array_equal(g[k], w)


def test_a_reverse_pass_makes_moves_of_elements_again_and_stores_costly_values():
    """The rule table's ``cheap`` decides what a scan's reverse pass stores: a reshape of the
    carry and a constant's row read by the loop's index are made again from what is stored,
    the sine's derivative (a cosine) is stored: the forward scan stacks the carry and the
    cosine, nothing else."""
    W = np.arange(15.0).reshape(5, 3) / 10

    def f(c0, w):
        def body(i, c):
            m = qb.reshape(c, (3, 1))
            return qb.sin(c) * w[i] + qb.sum(m * m, axis=1)
        return qb.sum(qb.fori_loop(0, 5, body, c0))

    c0 = np.array([0.1, 0.2, 0.3])
    graph = _lower(qb.grad(f), c0, W)
    (forward,) = _forward_scans(graph)
    stacked = forward.kw["body"].outputs[forward.kw["n_carry"]:]
    assert [forward.kw["body"].nodes[o].op for o in stacked] == ["input", "cos"]
    (backward,) = [n for n in _regions(graph, ("scan",)) if n.kw["reverse"]]
    ops = [n.op for n in backward.kw["body"].nodes]
    assert "reshape" in ops and "dynamic_index" in ops
    assert not {"sin", "cos"} & set(ops)

    def f_np(c):
        for i in range(5):
            c = np.sin(c) * W[i] + c * c
        return np.sum(c)

    (grad,) = _run_both(graph, c0, W)
    np.testing.assert_allclose(grad, _fd(f_np, c0), rtol=1e-6)
