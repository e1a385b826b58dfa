"""Derivatives through control-flow regions (issue 8, item 3): JVP through cond, fori_loop,
scan and while_loop; reverse mode (and second order) through cond, fori_loop and scan, with
stored carries or checkpoints; against central differences and JAX."""

import importlib

import numpy as np
import pytest

import quabla as qb
from quabla.core.graph import GraphBuilder
from quabla.core.rewrite import simplify
from quabla import dtypes
from quabla.errors import UnsupportedOperationError

scan_region = importlib.import_module("quabla.control.scan")  # the module, not qb.scan


def a(x):
    return qb.array(np.asarray(x, dtype=np.float64))


def central(f, x, eps=1e-6):
    """Central differences of a scalar function of one array."""
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[k] = eps
        g[k] = (float(f(a(x + e))) - float(f(a(x - e)))) / (2 * eps)
    return g


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


# -- cond ---------------------------------------------------------------------------------------

def q_cond(x, y):
    """A traced predicate; the branches close over the outer tracer y; false_fun ignores its
    operand, so its tangent in x is a symbolic zero there."""
    r = qb.cond(qb.sum(x) > 0, lambda v: qb.sin(v) * y, lambda v: y * y + 0.0 * qb.ones(3), x)
    return qb.sum(r * r)


def j_cond(jnp, lax, x, y):
    r = lax.cond(jnp.sum(x) > 0, lambda v: jnp.sin(v) * y, lambda v: y * y + 0.0 * jnp.ones(3), x)
    return jnp.sum(r * r)


@pytest.mark.parametrize("x", [[0.3, 0.5, -0.1], [-0.3, 0.2, -0.4]], ids=["true", "false"])
def test_cond_grad_and_jvp(jax, x):
    jnp, lax = jax.numpy, jax.lax
    y, tx, ty = 1.3, [1.0, -2.0, 0.5], 0.7
    gx, gy = qb.grad(q_cond, argnums=(0, 1))(a(x), a(y))
    ex, ey = jax.grad(lambda *v: j_cond(jnp, lax, *v), argnums=(0, 1))(jnp.array(x), y)
    np.testing.assert_allclose(gx, ex, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gy, ey, rtol=1e-12)
    np.testing.assert_allclose(gx, central(lambda v: q_cond(v, a(y)), x), rtol=1e-6, atol=1e-8)
    _, t = qb.jvp(q_cond, (a(x), a(y)), (a(tx), a(ty)))
    _, et = jax.jvp(lambda *v: j_cond(jnp, lax, *v), (jnp.array(x), y), (jnp.array(tx), ty))
    np.testing.assert_allclose(t, et, rtol=1e-12)


def test_cond_inside_jit_differentiates_per_call():
    f = qb.jit(qb.grad(lambda x: qb.cond(x > 1.0, lambda v: v ** 3, lambda v: -2.0 * v, x)))
    assert float(f(a(2.0))) == pytest.approx(12.0)
    assert float(f(a(0.5))) == pytest.approx(-2.0)


# -- fori_loop ----------------------------------------------------------------------------------

def q_fori(x, n=6):
    return qb.sum(qb.fori_loop(0, n, lambda i, c: qb.sin(c) * x + 0.1 * i, x))


def j_fori(jnp, lax, x, n=6):
    return jnp.sum(lax.fori_loop(0, n, lambda i, c: jnp.sin(c) * x + 0.1 * i, x))


def test_fori_loop_grad_jvp_static_bounds(jax):
    jnp, lax = jax.numpy, jax.lax
    x, t = [0.4, -0.8], [1.0, 0.5]
    g = qb.grad(q_fori)(a(x))
    np.testing.assert_allclose(g, jax.grad(lambda v: j_fori(jnp, lax, v))(jnp.array(x)),
                               rtol=1e-12)
    np.testing.assert_allclose(g, central(q_fori, x), rtol=1e-6)
    _, tq = qb.jvp(q_fori, (a(x),), (a(t),))
    _, tj = jax.jvp(lambda v: j_fori(jnp, lax, v), (jnp.array(x),), (jnp.array(t),))
    np.testing.assert_allclose(tq, tj, rtol=1e-12)


def test_fori_loop_jvp_traced_bounds(jax):
    """Traced bounds make a while loop: forward mode works, reverse mode points elsewhere."""
    jnp, lax = jax.numpy, jax.lax
    f = qb.jit(lambda x, n: q_fori(x, n))
    x, t = [0.4, -0.8], [1.0, 0.5]
    _, tq = qb.jvp(lambda v: f(v, a(5.0)), (a(x),), (a(t),))
    _, tj = jax.jvp(lambda v: j_fori(jnp, lax, v, 5), (jnp.array(x),), (jnp.array(t),))
    np.testing.assert_allclose(tq, tj, rtol=1e-12)
    with pytest.raises(UnsupportedOperationError, match="fori_loop"):
        qb.grad(lambda v: f(v, a(5.0)))(a(x))


def q_fori2(x):
    return qb.fori_loop(2, 7, lambda i, c: qb.sin(c * x) + 0.1 * i * c, x)


def test_grad_of_grad_through_fori_loop(jax):
    jnp, lax = jax.numpy, jax.lax
    j = lambda x: lax.fori_loop(2, 7, lambda i, c: jnp.sin(c * x) + 0.1 * i * c, x)
    for x in (0.3, 1.1):
        g2 = qb.grad(qb.grad(q_fori2))(a(x))
        assert float(g2) == pytest.approx(float(jax.grad(jax.grad(j))(x)), rel=1e-11)
        g = qb.grad(q_fori2)
        assert float(g2) == pytest.approx(float(central(g, x)), rel=1e-6)


# -- scan ---------------------------------------------------------------------------------------

def q_scan(x, xs):
    """ys, reads xs[i] of a closed-over array, and a carry (the second) that starts as a
    constant: its tangent is zero at entry and nonzero after one step."""
    def step(carry, i):
        c, d = carry
        c = qb.tanh(c * x + xs[i])
        return (c, d * 0.5 + qb.sum(c) * x), c * d
    (c, d), ys = qb.scan(step, (x, qb.zeros(2)), length=4)
    return qb.sum(c) + qb.sum(d * d) + qb.sum(ys * ys)


def j_scan(jnp, lax, x, xs):
    def step(carry, row):
        c, d = carry
        c = jnp.tanh(c * x + row)
        return (c, d * 0.5 + jnp.sum(c) * x), c * d
    (c, d), ys = lax.scan(step, (x, jnp.zeros(2)), xs)
    return jnp.sum(c) + jnp.sum(d * d) + jnp.sum(ys * ys)


XS = np.linspace(-1.0, 1.0, 8).reshape(4, 2)


def test_scan_grad_jvp_with_ys_and_rows(jax):
    jnp, lax = jax.numpy, jax.lax
    x, t = [0.3, -0.6], [0.5, 1.0]
    gx, gxs = qb.grad(q_scan, argnums=(0, 1))(a(x), a(XS))
    ex, exs = jax.grad(lambda *v: j_scan(jnp, lax, *v), argnums=(0, 1))(jnp.array(x),
                                                                       jnp.array(XS))
    np.testing.assert_allclose(gx, ex, rtol=1e-12)
    np.testing.assert_allclose(gxs, exs, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(gxs, central(lambda v: q_scan(a(x), v), XS), rtol=1e-6,
                               atol=1e-9)
    _, tq = qb.jvp(q_scan, (a(x), a(XS)), (a(t), a(XS * 0.3)))
    _, tj = jax.jvp(lambda *v: j_scan(jnp, lax, *v), (jnp.array(x), jnp.array(XS)),
                    (jnp.array(t), jnp.array(XS * 0.3)))
    np.testing.assert_allclose(tq, tj, rtol=1e-12)


def test_grad_of_scan_with_cond_inside(jax):
    """Nested regions: the scan's VJP differentiates a body holding a cond."""
    jnp, lax = jax.numpy, jax.lax

    def q(x):
        def step(c, i):
            c = qb.cond(qb.sum(c) > 1.0, lambda v: v * 0.5, lambda v: qb.exp(v * x), c)
            return c, qb.sum(c)
        c, ys = qb.scan(step, x, length=6)
        return qb.sum(ys) + qb.sum(c * c)

    def j(x):
        def step(c, i):
            c = lax.cond(jnp.sum(c) > 1.0, lambda v: v * 0.5, lambda v: jnp.exp(v * x), c)
            return c, jnp.sum(c)
        c, ys = lax.scan(step, x, None, length=6)
        return jnp.sum(ys) + jnp.sum(c * c)

    x = [0.2, -0.3]
    np.testing.assert_allclose(qb.grad(q)(a(x)), jax.grad(j)(jnp.array(x)), rtol=1e-12)
    np.testing.assert_allclose(qb.hessian(q)(a(x)), jax.hessian(j)(jnp.array(x)), rtol=1e-10)


def _dynamic_update_adds(graph):
    """The dynamic_update_add nodes of every region body, with their body graphs."""
    found = []
    for node in graph.nodes:
        for value in dict(node.params).values():
            if hasattr(value, "nodes") and hasattr(value, "outputs"):
                found += [(value, n) for n in value.nodes if n.op == "dynamic_update_add"]
                found += _dynamic_update_adds(value)
    return found


def test_row_reads_accumulate_in_place():
    """The cotangent of xs from xs[i] is one row added to the accumulated carry per step,
    not a full-size zeros-plus-update."""
    graph = qb.jit(qb.grad(q_scan, argnums=1)).lower(a([0.3, -0.6]), a(XS)).graph
    updates = _dynamic_update_adds(graph)
    assert updates
    for body, node in updates:
        assert body.nodes[node.operands[0]].op == "input"


def test_add_of_zero_update_is_an_update():
    b = GraphBuilder()
    x = b.input((4, 2), dtypes.float64)
    i = b.input((), dtypes.float64)
    v = b.input((2,), dtypes.float64)
    z = b.constant(np.zeros((4, 2)))
    u = b.add("dynamic_update_add", (z, i, v), (), (4, 2), dtypes.float64)
    s = b.add("add", (u, x), (), (4, 2), dtypes.float64)
    g = simplify(b.build([s]))
    out = g.nodes[g.outputs[0]]
    assert out.op == "dynamic_update_add" and g.nodes[out.operands[0]].op == "input"
    assert g.node_count() == 1


def q_loss20(p):
    def step(c, i):
        c = c + 0.1 * qb.sin(p * c) + 0.05 * i * p
        return c, qb.sum(c * p)
    c, ys = qb.scan(step, p, length=20)
    return qb.sum(c * c) + qb.sum(ys)


def test_hessian_through_20_step_scan(jax):
    jnp, lax = jax.numpy, jax.lax

    def j(p):
        def step(c, i):
            c = c + 0.1 * jnp.sin(p * c) + 0.05 * i * p
            return c, jnp.sum(c * p)
        c, ys = lax.scan(step, p, jnp.arange(20.0))
        return jnp.sum(c * c) + jnp.sum(ys)

    p = np.array([0.4, -0.2, 0.9])
    h = np.asarray(qb.hessian(q_loss20)(a(p)))
    np.testing.assert_allclose(h, jax.hessian(j)(jnp.array(p)), rtol=1e-10, atol=1e-10)


def oscillator(n):
    """A damped nonlinear oscillator, 64 states, explicit steps with scan; the loss is the
    energy along the trajectory (ys) and at the end."""
    def loss(params, x0, v0):
        k, c = params

        def step(state, i):
            x, v = state
            acc = -k * x - c * v - 0.1 * x * x * x
            x = x + 0.05 * v
            v = v + 0.05 * acc
            return (x, v), qb.sum(x * x)
        (x, v), ys = qb.scan(step, (x0, v0), length=n)
        return qb.sum(ys) * 0.01 + qb.sum(v * v)
    return loss


def test_value_and_grad_oscillator(jax):
    jnp, lax = jax.numpy, jax.lax
    n = 50

    def j(params, x0, v0):
        k, c = params

        def step(state, _):
            x, v = state
            acc = -k * x - c * v - 0.1 * x * x * x
            x = x + 0.05 * v
            v = v + 0.05 * acc
            return (x, v), jnp.sum(x * x)
        (x, v), ys = lax.scan(step, (x0, v0), None, length=n)
        return jnp.sum(ys) * 0.01 + jnp.sum(v * v)

    rng = np.random.default_rng(0)
    x0, v0 = rng.standard_normal(64), rng.standard_normal(64)
    params = (a(1.5), a(0.3))
    val, (gk, gc) = qb.jit(qb.value_and_grad(oscillator(n)))(params, a(x0), a(v0))
    ev, (ek, ec) = jax.value_and_grad(j)((1.5, 0.3), jnp.array(x0), jnp.array(v0))
    assert float(val) == pytest.approx(float(ev), rel=1e-12)
    assert float(gk) == pytest.approx(float(ek), rel=1e-11)
    assert float(gc) == pytest.approx(float(ec), rel=1e-11)


def _scans(graph):
    """Every scan node in ``graph`` and in its regions, outermost first."""
    found = []
    for node in graph.nodes:
        if node.op == "scan":
            found.append(node)
        for value in dict(node.params).values():
            if hasattr(value, "nodes") and hasattr(value, "outputs"):
                found += _scans(value)
    return found


def _scan_bodies(graph):
    return [node.kw["body"] for node in _scans(graph)]


def _soft_loop(p, cost):
    """Sinkhorn-like log-domain updates: row and column logsumexps, a tanh, a product."""
    def body(i, fg):
        f, g = fg
        f = -0.1 * qb.logsumexp((g[None, :] - cost * p[0]) / 0.1, axis=1)
        g = -0.1 * qb.logsumexp((f[:, None] - cost) / 0.1, axis=0) + qb.tanh(cost.T @ f * p[1])
        return f, g
    f, g = qb.fori_loop(0, 7, body, (qb.zeros(3), qb.zeros(4)))
    return qb.sum(qb.exp(f[:, None] + g[None, :] - cost) * cost)


COST = np.abs(np.sin(np.arange(12.0))).reshape(3, 4)
TRANSCENDENTAL = {"exp", "log", "tanh"}


def test_a_reverse_pass_reads_the_forward_pass_s_transcendentals(monkeypatch):
    """The reverse scan reads each step's exponentials, logarithms and tanh from stacks the
    forward scan (merged with the primal one) stores, computing none of them again; over the
    memory threshold it computes them again. Both give the interpreter's gradient, which
    agrees with central differences; the compiled one is the same called twice."""
    p, cost = a([1.3, 0.4]), a(COST)
    grad = qb.grad(_soft_loop)
    want = grad(p, cost)
    np.testing.assert_allclose(want, central(lambda v: _soft_loop(v, cost), p), rtol=1e-7)

    bodies = _scan_bodies(qb.jit(grad).lower(p, cost).graph)
    ops = [{n.op for n in body.nodes} for body in bodies]
    assert len(bodies) == 2 and TRANSCENDENTAL <= ops[0] and not TRANSCENDENTAL & ops[1]
    compiled = qb.jit(grad)
    for _ in range(2):
        np.testing.assert_allclose(compiled(p, cost), want, rtol=1e-13, atol=1e-15)

    # stacks of 7 steps: carries of 7 * 56 bytes fit, with the residuals they do not
    monkeypatch.setattr(scan_region, "CHECKPOINT_BYTES", 7 * 56 + 8)
    again = qb.grad(lambda *v: _soft_loop(*v))
    ops = [{n.op for n in body.nodes} for body in _scan_bodies(qb.jit(again).lower(p, cost).graph)]
    assert len(ops) == 2 and TRANSCENDENTAL <= ops[1]
    np.testing.assert_allclose(qb.jit(again)(p, cost), want, rtol=1e-13, atol=1e-15)


def test_second_order_through_stored_residuals(jax):
    """The Hessian through a scan whose reverse pass reads stored residuals: the JVP of the
    reverse scan differentiates the stacks too."""
    jnp = jax.numpy

    def j_loop(p):
        def body(i, fg):
            f, g = fg
            f = -0.1 * jax.nn.logsumexp((g[None, :] - COST * p[0]) / 0.1, axis=1)
            g = (-0.1 * jax.nn.logsumexp((f[:, None] - COST) / 0.1, axis=0)
                 + jnp.tanh(COST.T @ f * p[1]))
            return f, g
        f, g = jax.lax.fori_loop(0, 7, body, (jnp.zeros(3), jnp.zeros(4)))
        return jnp.sum(jnp.exp(f[:, None] + g[None, :] - COST) * COST)

    p = [1.3, 0.4]
    want = jax.hessian(j_loop)(jnp.array(p))
    got = qb.jit(qb.hessian(lambda v: _soft_loop(v, a(COST))))(a(p))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(qb.grad(lambda v: _soft_loop(v, a(COST)))(a(p)),
                               jax.grad(j_loop)(jnp.array(p)), rtol=1e-12)


# -- while_loop ---------------------------------------------------------------------------------

def q_while(x):
    """The second carry starts as a constant (zero tangent) and picks one up."""
    c, s = qb.while_loop(lambda st: st[0] < 5.0,
                         lambda st: (st[0] * (1.0 + x), st[1] + qb.sin(st[0] * x)),
                         (qb.array(1.0) + 0.0 * x, qb.array(0.0)))
    return c + s * s


def test_while_loop_jvp(jax):
    jnp, lax = jax.numpy, jax.lax

    def j(x):
        c, s = lax.while_loop(lambda st: st[0] < 5.0,
                              lambda st: (st[0] * (1.0 + x), st[1] + jnp.sin(st[0] * x)),
                              (1.0 + 0.0 * x, 0.0))
        return c + s * s

    for x in (0.3, 0.45):
        val, t = qb.jvp(q_while, (a(x),), (a(1.0),))
        ev, et = jax.jvp(j, (x,), (1.0,))
        assert float(val) == pytest.approx(float(ev), rel=1e-12)
        assert float(t) == pytest.approx(float(et), rel=1e-12)
        assert float(t) == pytest.approx(float(central(q_while, x)), rel=1e-6)


def test_while_loop_grad_raises_with_pointer():
    with pytest.raises(UnsupportedOperationError, match="fori_loop.*scan") as info:
        qb.grad(q_while)(a(0.3))
    assert info.value.op == "while"


# -- checkpointing ------------------------------------------------------------------------------

def _nested_scans(graph):
    return [node.kw["length"] for node in _scans(graph)]


def test_checkpointed_gradients_match_stored(monkeypatch):
    """Over the threshold, a 10-step scan is split into segments of 4 (two segments and a
    2-step rest) and gives the stored-carry gradients; second order too (a 5-step loop: one
    segment of 3 and a rest of 2, whose reverse scans are checkpointed in turn)."""
    def loss(p, xs):
        def step(c, i):
            c = qb.sin(c * p) + xs[i]
            return c, c * c
        c, ys = qb.scan(step, p, length=10)
        return qb.sum(c) + qb.sum(ys * xs)

    def loss2(p):
        return qb.fori_loop(0, 5, lambda i, c: qb.sin(c * p) + 0.1 * i, p)

    p, p2 = a([0.3, -0.7]), a(0.4)
    xs = a(np.linspace(-1, 1, 20).reshape(10, 2))
    stored = qb.grad(loss, argnums=(0, 1))(p, xs)
    stored2 = qb.grad(qb.grad(loss2))(p2)
    assert 4 not in _nested_scans(qb.jit(qb.grad(loss)).lower(p, xs).graph)

    # fresh functions: nothing staged under the default threshold is reused
    monkeypatch.setattr(scan_region, "CHECKPOINT_BYTES", 100)  # 10 carries of 16 bytes: 160
    assert 4 in _nested_scans(qb.jit(qb.grad(lambda *v: loss(*v))).lower(p, xs).graph)
    checked = qb.grad(lambda *v: loss(*v), argnums=(0, 1))(p, xs)
    for s, c in zip(stored, checked):
        np.testing.assert_allclose(c, s, rtol=1e-13, atol=1e-15)
    monkeypatch.setattr(scan_region, "CHECKPOINT_BYTES", 20)  # 5 carries of 8 bytes: 40
    checked2 = qb.grad(qb.grad(lambda v: loss2(v)))(p2)
    assert 3 in _nested_scans(qb.jit(qb.grad(qb.grad(lambda v: loss2(v)))).lower(p2).graph)
    assert float(checked2) == pytest.approx(float(stored2), rel=1e-13)
