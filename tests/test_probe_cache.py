"""The probe cache of closures over tracers ("S4b as landed", Caching): a staged function whose
trace captured tracers of an enclosing trace is traced again on later calls only to find this
call's captures; its transformed graph is reused while the captures' shapes and dtypes match,
and staged anew when they do not. The cache keeps no tracer alive."""

import gc
import logging
import math
import weakref

import numpy as np
import pytest

import quabla as qb
import quabla.staging.grad
from quabla.core import tracing

from helpers import assert_close


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return {"w": qb.array(rng.normal(size=(4,))), "v": qb.array(rng.normal(size=(4,)))}


def net(p, t):
    return qb.sum(qb.tanh(t * p["w"]) * p["v"])


def loss_explicit(p, x):
    """The reference: the closures below with the parameters as an explicit argument."""
    u_xx = qb.grad(qb.grad(net, argnums=1), argnums=1)
    return sum(u_xx(p, x[i]) ** 2 for i in range(x.shape[0]))


@pytest.fixture
def transformed(caplog, monkeypatch):
    """``transformed()``: the names of the staged functions transformed so far, one per
    transform (the ``quabla`` log), and ``transformed.vjp``: the number of VJP transforms."""
    caplog.set_level(logging.INFO, logger="quabla")
    calls = []
    vjp_graph = quabla.staging.grad.vjp_graph
    monkeypatch.setattr(quabla.staging.grad, "vjp_graph",
                        lambda *a, **k: calls.append(1) or vjp_graph(*a, **k))

    def names():
        return [r.getMessage().split(" for ")[0][len("traced "):] for r in caplog.records
                if r.getMessage().startswith("traced ")]

    names.vjp = calls
    return names


# -- transformed once -----------------------------------------------------------------------------

def test_closure_in_a_loop_inside_one_trace_is_transformed_once(transformed):
    def loss(p, x):
        u_xx = qb.grad(qb.grad(lambda t: net(p, t)))              # closes over p
        return sum(u_xx(x[i]) ** 2 for i in range(x.shape[0]))

    p, x = _params(), qb.linspace(0.1, 0.9, 6)
    value = qb.jit(loss)(p, x)
    assert transformed().count("grad(<lambda>)") == 1
    assert transformed().count("grad(grad(<lambda>))") == 1
    assert len(transformed.vjp) == 2                              # jit itself runs no VJP
    assert_close(value, qb.jit(loss_explicit)(p, x), rtol=1e-13, atol=1e-14)


def test_closure_called_with_eager_arguments_in_a_loop_is_transformed_once(transformed):
    def loss(w):
        u = qb.grad(lambda x: qb.sin(x * w))
        return sum(u(i / 4) for i in range(4))

    w = 1.3
    exact = sum(math.cos(i / 4 * w) - i / 4 * w * math.sin(i / 4 * w) for i in range(4))
    assert abs(float(qb.grad(loss)(qb.array(w))) - exact) < 1e-13
    assert transformed().count("grad(<lambda>)") == 1


def test_shared_closure_across_outer_traces_is_transformed_once(transformed):
    box = {}

    def u(t):
        return net(box["p"], t)                                   # a mutated container

    u_xx = qb.grad(qb.grad(u))

    def loss(p, x):
        box["p"] = p
        return sum(u_xx(x[i]) ** 2 for i in range(x.shape[0]))

    p = _params()
    step = qb.jit(qb.value_and_grad(loss))
    reference = qb.jit(qb.value_and_grad(loss_explicit))
    for n in (3, 4, 5):                                           # three outer traces
        x = qb.linspace(0.1, 0.9, n)
        (v1, g1), (v2, g2) = step(p, x), reference(p, x)
        assert_close(v1, v2, rtol=1e-13, atol=1e-14)
        for k in p:
            assert_close(g1[k], g2[k], rtol=1e-12, atol=1e-13)
    qb.grad(loss)(p, x)                                           # and one more, without jit
    assert transformed().count("grad(u)") == 1
    assert transformed().count("grad(grad(u))") == 1


# -- a different tracer on every call ------------------------------------------------------------

def test_rebound_name_captures_this_calls_tracer(transformed):
    def loss(w):
        current = w
        u = qb.grad(lambda x: qb.sin(x * current))
        total = u(qb.array(0.3))
        current = w * w                                            # rebound: a new tracer
        return total + u(qb.array(0.3))

    def exact(w):       # d/dw [w cos(0.3 w) + w^2 cos(0.3 w^2)]
        c = lambda a: math.cos(0.3 * a) - 0.3 * a * math.sin(0.3 * a)
        return c(w) + 2 * w * c(w * w)

    for w in (0.7, 1.2):
        assert abs(float(qb.grad(loss)(qb.array(w))) - exact(w)) < 1e-13
        assert abs(float(qb.jit(qb.grad(loss))(qb.array(w))) - exact(w)) < 1e-13
    # once per outer trace (grad and jit(grad); later calls run their compiled programs)
    assert transformed().count("grad(<lambda>)") == 2


def test_swapped_captures_bind_in_the_order_the_probe_meets_them(transformed):
    box = []
    u = qb.grad(lambda x: box[0] * x ** 2 + box[1] * x ** 3)      # 2 box[0] x + 3 box[1] x^2

    def loss(a, b):
        box[:] = [a, b]
        first = u(qb.array(0.5))
        box[:] = [b, a]                                            # same avals, swapped roles
        second = u(qb.array(0.5))
        box[:] = [a, a]                                            # one capture: a new graph
        third = u(qb.array(0.5))
        return first + 2 * second + 3 * third

    def f(a, b):
        return (a + 0.75 * b) + 2 * (b + 0.75 * a) + 3 * (a + 0.75 * a)

    a, b, eps = 0.4, 1.1, 1e-6
    value, (ga, gb) = qb.value_and_grad(loss, argnums=(0, 1))(qb.array(a), qb.array(b))
    assert abs(float(value) - f(a, b)) < 1e-14
    assert abs(float(ga) - (f(a + eps, b) - f(a - eps, b)) / (2 * eps)) < 1e-8
    assert abs(float(gb) - (f(a, b + eps) - f(a, b - eps)) / (2 * eps)) < 1e-8
    assert transformed().count("grad(<lambda>)") == 2              # two captures, then one


def test_capture_shapes_change_stages_a_new_graph(transformed):
    box = {}
    u = qb.grad(lambda x: qb.sum(qb.sin(x * box["w"])))           # sum(w cos(x w))

    def loss(w):
        box["w"] = w
        return u(qb.array(0.3)) + u(qb.array(0.3))

    def exact(w):
        return 2 * (np.cos(0.3 * w) - 0.3 * w * np.sin(0.3 * w))

    g = qb.grad(loss)
    for w in (np.array(1.2), np.array([0.5, 1.5, 2.5]), np.array(0.8)):
        assert_close(g(qb.array(w)), exact(w), rtol=1e-13, atol=1e-14)
    assert transformed().count("grad(<lambda>)") == 2              # float64[] and float64[3]
    assert len(u._inline_cache) == 2 and len(u._probes) == 1


# -- capturing nothing ---------------------------------------------------------------------------

def test_closure_holding_an_eager_array_inlines_with_constants_only(transformed):
    box = {}
    u = qb.grad(lambda x: qb.sin(x * box["w"]))

    def loss(w, x):
        box["w"] = w
        captured = u(x)                                            # captures the tracer w
        box["w"] = qb.array(2.0)
        return captured + u(x)                                     # captures nothing

    w, x = 1.2, 0.3
    value, gw = qb.value_and_grad(loss)(qb.array(w), qb.array(x))
    assert abs(float(value) - (w * math.cos(x * w) + 2 * math.cos(2 * x))) < 1e-14
    assert abs(float(gw) - (math.cos(x * w) - x * w * math.sin(x * w))) < 1e-14
    # the graph without captures: its inputs are the arguments, the eager array a constant
    (graph, _), = [v for k, v in u._inline_cache.items() if k[1] == ()]
    assert graph.input_names == ("arg0",)
    assert any(n.op == "constant" and n.kw["value"].scalar() == 2.0 for n in graph.nodes)
    qb.jit(loss).lower(qb.array(w), qb.array(x))                   # another outer trace
    assert transformed().count("grad(<lambda>)") == 2              # with one capture, with none


# -- what the cache holds ------------------------------------------------------------------------

def test_cache_keeps_no_trace_alive(monkeypatch):
    frames = []
    init = tracing.TraceFrame.__init__

    def recording_init(self):
        init(self)
        frames.append(weakref.ref(self))

    monkeypatch.setattr(tracing.TraceFrame, "__init__", recording_init)
    box = {}
    u = qb.vmap(qb.grad(lambda x: qb.sin(x * box["w"]) * box["w"]))

    def loss(w):
        box["w"] = w
        return qb.sum(u(qb.linspace(0.0, 1.0, 3))) + qb.sum(u(qb.ones(3)))

    for outer in (qb.grad(loss), qb.jit(qb.grad(loss)), qb.jit(loss)):
        outer(qb.array(1.2))
    assert u._probes and u._inline_cache and frames
    box.clear()
    gc.collect()
    assert [r for r in frames if r() is not None] == []


def test_cache_is_bounded_by_max_traces():
    box = {}
    u = qb.grad(lambda x: qb.sum(qb.sin(x * box["w"])))

    def loss(w):
        total = 0.0
        for n in range(1, 12):                                     # 11 capture shapes
            box["w"] = w * qb.ones(n)
            total = total + u(qb.array(0.5))
        return total

    w = 0.9
    exact = sum(n * (math.cos(0.5 * w) - 0.5 * w * math.sin(0.5 * w)) for n in range(1, 12))
    for outer in (qb.grad(loss), qb.jit(qb.grad(loss))):
        assert abs(float(outer(qb.array(w))) - exact) < 1e-12
    assert len(u._inline_cache) <= u.max_traces and len(u._probes) <= u.max_traces
