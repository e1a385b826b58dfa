"""Control-flow regions in the Numba CPU back end: parity with the interpreter.

Every region form (cond, fori_loop, scan with ys, reverse scan, while_loop, nested regions,
regions under grad and vmap) and dynamic indexing, compiled once and called with two sets of
arguments and then the first again: scratch slots reused across calls or iterations show up as
a wrong second result.
"""

import re

import numpy as np
import pytest

import quabla as qb
from quabla.core.interpret import evaluate
from lowering.numba_cpu import compile_graph
from quabla.core.tracing import bind

TOL = {np.float64: dict(rtol=1e-12, atol=1e-12), np.float32: dict(rtol=2e-5, atol=2e-6)}


def _check(fn, first, second):
    """Compiles ``fn`` for the arrays ``first`` and runs it on ``first``, ``second``, ``first``
    again, each against the interpreter; returns the compiled program's source."""
    lowered = qb.jit(fn).lower(*[qb.array(a) for a in first])
    graph = lowered.graph
    run = compile_graph(graph, {})
    for args in (first, second, first):
        values = [np.asarray(a, order="C") for a in args]
        expected = evaluate(graph, values)
        actual = run(*values)
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert a.dtype == e.dtype and a.shape == e.shape
            np.testing.assert_allclose(a, e, **TOL[e.dtype.type] if e.dtype != np.bool_ else {})
    return lowered.source


def _ops(source):
    """The region loops and branches in the generated source."""
    return (len(re.findall(r"for k\d+ in|while k\d+ [<>]", source)), source.count("while True"),
            source.count("if "))


rng = np.random.default_rng(3)


def _arrays(*shapes, dtype=np.float64, low=-1.0, high=1.0):
    return [rng.uniform(low, high, s).astype(dtype) for s in shapes]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fori_loop_array_and_scalar_carry_with_closures(dtype):
    scale = np.linspace(0.5, 1.5, 3).astype(dtype)  # an eager array: a captured constant

    def f(x, w):
        def body(i, carry):
            v, s = carry
            v = v * qb.cos(w) + scale * 0.1 + s * 0.01  # w: an outer tracer
            return v, s + qb.sum(v) * 0.5 + i
        return qb.fori_loop(1, 6, body, (x, qb.sum(x)))

    source = _check(f, _arrays(3, 3, dtype=dtype), _arrays(3, 3, dtype=dtype))
    assert _ops(source)[0] == 1


def test_scan_with_ys_reads_xs_and_pytree_carry():
    def f(xs, h0):
        def body(carry, i):
            h, total = carry["h"], carry["t"]
            h = qb.tanh(h * 0.9 + xs[i])
            return {"h": h, "t": total + qb.sum(h)}, (h * 2.0, qb.max(h))
        carry, (hs, peaks) = qb.scan(body, {"h": h0, "t": qb.sum(h0)}, length=5)
        return carry, hs, peaks

    source = _check(f, _arrays((5, 4), 4), _arrays((5, 4), 4))
    assert _ops(source)[0] == 1


def _reverse_scan(x, xs, lower):
    """A scan bound directly with reverse=True: the graph of a forward one, turned around."""
    def forward(x, xs):
        return qb.scan(lambda c, i: (c * 0.5 + xs[i] * i, c * i), x, length=4)
    graph = qb.jit(forward).lower(qb.array(np.zeros(3)), qb.array(np.zeros((6, 3)))).graph
    node = next(n for n in graph.nodes if n.op == "scan")
    params = dict(node.kw, reverse=True, lower=lower)
    return bind("scan", x, xs, **params)


@pytest.mark.parametrize("lower", [0, 2])
def test_reverse_scan(lower):
    source = _check(lambda x, xs: _reverse_scan(x, xs, lower), _arrays(3, (6, 3)),
                    _arrays(3, (6, 3)))
    assert re.search(r"k(\d+) = 3\n *while k\1 > -1:", source)  # steps 3, 2, 1, 0


def test_while_loop_array_and_counter():
    def f(x, limit):
        def cond(c):
            return (c[1] < 20.0) & (qb.sum(c[0] * c[0]) < limit)
        def body(c):
            return c[0] * 1.3 + 0.01, c[1] + 1.0
        return qb.while_loop(cond, body, (x, qb.array(0.0)))

    source = _check(f, [np.array([0.1, -0.2, 0.3]), np.array(5.0)],
                    [np.array([1.0, 2.0, 3.0]), np.array(100.0)])
    assert _ops(source)[1] == 1


def test_while_loop_zero_iterations():
    def f(x):
        return qb.while_loop(lambda c: qb.sum(c) < 0.0, lambda c: c + 1.0, x)
    _check(f, [np.array([1.0, 2.0])], [np.array([-1.0, 0.5])])


def test_cond_both_branches():
    def f(x, y):
        out = qb.cond(qb.sum(x) > 0, lambda a, b: (a * b, qb.sum(a)), lambda a, b: (a - b, 2.0 * qb.sum(b)), x, y)
        return out[0] * 3.0, out[1]

    source = _check(f, [np.array([1.0, 2.0]), np.array([3.0, 4.0])],
                    [np.array([-1.0, -2.0]), np.array([3.0, 4.0])])
    assert "else:" in source


def test_fori_inside_scan():
    def f(xs, x):
        def outer(c, i):
            inner = qb.fori_loop(0, 3, lambda j, d: d * 0.5 + xs[i] * j, c)
            return inner + 1.0, qb.sum(inner)
        return qb.scan(outer, x, length=4)

    source = _check(f, _arrays((4, 2), 2), _arrays((4, 2), 2))
    assert _ops(source)[0] == 2


def test_cond_inside_scan():
    def f(xs, x):
        def body(c, i):
            c = qb.cond(qb.sum(xs[i]) > 0, lambda a: a + xs[i], lambda a: a * 0.5, c)
            return c, c[0]
        return qb.scan(body, x, length=6)

    _check(f, _arrays((6, 3), 3), _arrays((6, 3), 3))


def test_while_inside_vmap():
    def newton_sqrt(a):
        def body(c):
            y, n = c
            return 0.5 * (y + a / y), n + 1.0
        return qb.while_loop(lambda c: (qb.abs(c[0] * c[0] - a) > 1e-12) & (c[1] < 50.0),
                             body, (a, qb.array(0.0)))

    _check(qb.vmap(newton_sqrt), [np.array([0.5, 2.0, 9.0, 100.0])],
           [np.array([4.0, 1.0, 3.0, 7.0])])


def test_grad_through_scan_reads_xs():
    """The reverse pass is a reverse scan whose xs cotangent is updated in place."""
    def loss(c0, xs):
        def body(c, i):
            return c * qb.sin(xs[i]) + 0.1, qb.sum(c * c)
        c, ys = qb.scan(body, c0, length=5)
        return qb.sum(c) + qb.sum(ys)

    source = _check(qb.grad(loss, argnums=(0, 1)), _arrays(3, (5, 3)), _arrays(3, (5, 3)))
    assert "+= " in source


def test_dynamic_index_clamps_like_the_interpreter():
    def f(x, i):
        return bind("dynamic_index", x, i), bind("dynamic_index", x[0], i)

    x = _arrays((4, 3))[0]
    for value in (-1.0, 7.9, -100.0, np.nan, 2.5, -2.5, np.inf):
        _check(f, [x, np.array(value)], [x, np.array(1.0)])


def test_dynamic_indexing_batched_and_update_add():
    def f(x, i, v):
        rows = bind("dynamic_index", x, i)                 # one row per batch
        added = bind("dynamic_update_add", x, i, v)        # batched update
        once = bind("dynamic_update_add", x * 2.0, i[0], x[0] * 0.0 + v[0, 0])  # a dead buffer
        return rows, added, once

    x = _arrays((2, 5, 3))[0]
    first = [x, np.array([1.0, -1.0]), _arrays((2, 3))[0]]
    second = [x + 1.0, np.array([9.0, 0.2]), _arrays((2, 3))[0]]
    _check(f, first, second)


def test_source_does_not_grow_with_the_trip_count():
    def program(n):
        def f(x):
            return qb.fori_loop(0, n, lambda i, c: c * 0.99 + qb.sin(c) * 0.01, x)
        return qb.jit(f).lower(qb.array(np.ones(4))).source

    short, long = program(10), program(10_000)
    assert long.replace("10000", "10") == short


@pytest.mark.parametrize("steps", [2, 3])
def test_swapped_carry_outlives_views_of_the_final_carry(steps):
    """A double-buffered carry ends in either slot: views of the final carry and in-place
    updates of it keep both slots alive, so scratch taken after the loop cannot land in it."""
    def f(x, p):
        c = qb.fori_loop(0, steps, lambda i, c: qb.where(p > 0.0, c * 1.5 + x, c), x)
        u = bind("dynamic_update_add", c, qb.array(0.0), c[qb.array(1.0)] * 2.0)  # in place
        w = qb.exp(u[qb.array(2.0)]) + p            # scratch taken after the loop
        v = bind("dynamic_update_add", u, qb.array(1.0), w)
        return v * qb.sum(w)
    _check(f, [*_arrays((4, 1)), np.array(1.0)], [*_arrays((4, 1)), np.array(-1.0)])
