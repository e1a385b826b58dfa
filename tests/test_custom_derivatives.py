"""custom_jvp and custom_vjp (JAX's decorator API): the user's rules are what every transform
uses, composed with jit, vmap and higher orders, on the CPU back end and the interpreter, and
against JAX (x64) where it is installed. Bad rules and unsupported uses are typed errors."""

import numpy as np
import pytest

import quabla as qb

from helpers import assert_close


@pytest.fixture(params=["numba", "interpret"])
def backend(request, monkeypatch):
    monkeypatch.setenv("QUABLA_BACKEND", request.param)
    return request.param


# A function whose rule is deliberately not its derivative (scaled by 3), so a test can tell
# the rule from differentiating the function.
@qb.custom_jvp
def scaled(x, y):
    return qb.sin(x) * y


@scaled.defjvp
def _scaled_jvp(primals, tangents):
    (x, y), (tx, ty) = primals, tangents
    return scaled(x, y), 3.0 * (qb.cos(x) * y * tx + qb.sin(x) * ty)


def scaled_rule_grad(x, y):
    return 3.0 * np.cos(x) * y, 3.0 * np.sin(x)


def test_custom_jvp_rule_drives_every_transform(backend):
    x, y = 0.3, 2.0
    X, Y = qb.array(x), qb.array(y)
    assert_close(scaled(X, Y), np.sin(x) * y)                          # eager: the function
    assert_close(qb.jit(lambda a, b: scaled(a, b))(X, Y), np.sin(x) * y)
    _, t = qb.jvp(scaled, (X, Y), (qb.array(1.0), qb.array(0.5)))
    gx, gy = scaled_rule_grad(x, y)
    assert_close(t, gx + 0.5 * gy)
    grads = qb.jit(qb.grad(scaled, argnums=(0, 1)))(X, Y)
    assert_close(grads[0], gx)
    assert_close(grads[1], gy)
    xs = np.array([0.1, 0.4, -0.7])
    assert_close(qb.vmap(qb.grad(scaled), in_axes=(0, None))(qb.array(xs), Y),
                 3.0 * np.cos(xs) * y)
    assert_close(qb.grad(lambda v: qb.sum(qb.vmap(scaled, in_axes=(0, None))(v, Y)))(qb.array(xs)),
                 3.0 * np.cos(xs) * y)
    # a second derivative differentiates the rule (as JAX does)
    assert_close(qb.grad(qb.grad(scaled))(X, Y), -3.0 * np.sin(x) * y)


@qb.custom_jvp
def safe_norm(x):
    return qb.sqrt(qb.sum(x * x))


@safe_norm.defjvp
def _safe_norm_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    n = safe_norm(x)
    return n, qb.where(n > 0, qb.sum(x * t) / qb.where(n > 0, n, 1.0), 0.0)


def test_custom_jvp_makes_a_kink_differentiable(backend):
    assert_close(qb.grad(safe_norm)(qb.array([0.0, 0.0])), [0.0, 0.0])
    assert_close(qb.grad(safe_norm)(qb.array([3.0, 4.0])), [0.6, 0.8])


def test_custom_jvp_with_nondiff_argnums_and_defjvps(backend):
    @qb.custom_jvp
    def power(n, x):
        return x ** n

    power = qb.custom_jvp(power.fun, nondiff_argnums=(0,))

    @power.defjvp
    def _(n, primals, tangents):
        (x,), (t,) = primals, tangents
        return power(n, x), n * x ** (n - 1) * t

    assert_close(qb.grad(lambda x: power(3, x))(qb.array(2.0)), 12.0)

    @qb.custom_jvp
    def prod(x, y):
        return x * y

    prod.defjvps(lambda tx, out, x, y: 2.0 * tx * y, lambda ty, out, x, y: x * ty)
    assert_close(qb.grad(prod, argnums=(0, 1))(qb.array(3.0), qb.array(5.0)), [10.0, 3.0])


@qb.custom_vjp
def clipped(x, lo):
    return x


def _clipped_fwd(x, lo):
    return clipped(x, lo), (lo,)


def _clipped_bwd(res, g):
    (lo,) = res
    return qb.maximum(g, lo), None


clipped.defvjp(_clipped_fwd, _clipped_bwd)
WEIGHTS = np.array([5.0, -5.0, 0.5])


def clipped_loss(x):
    return qb.sum(clipped(x, qb.array(-1.0)) * WEIGHTS)


def test_custom_vjp_rule_drives_reverse_mode(backend):
    x = qb.array([1.0, 2.0, 3.0])
    expected = np.maximum(WEIGHTS, -1.0)
    assert_close(clipped_loss(x), np.sum(WEIGHTS * [1.0, 2.0, 3.0]))
    assert_close(qb.grad(clipped_loss)(x), expected)
    assert_close(qb.jit(qb.grad(clipped_loss))(x), expected)
    rows = qb.array(np.arange(6.0).reshape(2, 3))
    assert_close(qb.vmap(qb.grad(clipped_loss))(rows), [expected, expected])
    # reverse mode of a vmapped custom_vjp with a shared argument sums its lanes' cotangents
    shared = lambda lo: qb.sum(qb.vmap(lambda r: clipped(r, lo) * WEIGHTS)(rows))
    assert_close(qb.grad(shared)(qb.array(-1.0)), 0.0)

    @qb.custom_vjp
    def scale(x, s):
        return x * s

    scale.defvjp(lambda x, s: (x * s, (x, s)), lambda res, g: (g * res[1], qb.sum(g * res[0])))
    per_row = lambda s: qb.sum(qb.vmap(lambda r: scale(r, s))(rows))
    assert_close(qb.grad(per_row)(qb.array(2.0)), np.arange(6.0).sum())


def test_custom_vjp_refuses_forward_mode():
    with pytest.raises(TypeError, match="forward-mode"):
        qb.jvp(clipped_loss, (qb.array([1.0, 2.0, 3.0]),), (qb.array([1.0, 1.0, 1.0]),))


def test_closed_over_values_carry_no_derivative_through_a_rule():
    def outer(w):
        @qb.custom_vjp
        def f(x):
            return x * w

        f.defvjp(lambda x: (x * w, ()), lambda res, g: (g,))
        return f(qb.array(2.0))

    with pytest.raises(TypeError, match="closes over"):
        qb.grad(outer)(qb.array(3.0))


def test_bad_rules_are_typed_errors():
    @qb.custom_jvp
    def f(x):
        return x * 2.0

    with pytest.raises(AttributeError, match="defjvp"):
        qb.grad(f)(qb.array(1.0))
    f.defjvp(lambda p, t: (p[0] * 2.0, qb.array([1.0, 2.0])))
    with pytest.raises(TypeError, match="shape"):
        qb.grad(f)(qb.array(1.0))

    @qb.custom_vjp
    def g(x, y):
        return x + y

    g.defvjp(lambda x, y: (x + y, ()), lambda res, ct: (ct,))
    with pytest.raises(TypeError, match="2 cotangents"):
        qb.grad(g)(qb.array(1.0), qb.array(2.0))


def test_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    @jax.custom_jvp
    def j_scaled(x, y):
        return jnp.sin(x) * y

    @j_scaled.defjvp
    def _(primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        return j_scaled(x, y), 3.0 * (jnp.cos(x) * y * tx + jnp.sin(x) * ty)

    @jax.custom_vjp
    def j_clipped(x, lo):
        return x

    j_clipped.defvjp(lambda x, lo: (x, (lo,)), lambda res, g: (jnp.maximum(g, res[0]), None))
    x, y = 0.7, -1.3
    for f_qb, f_jax in ((scaled, j_scaled),):
        for order in (1, 2):
            g_qb, g_jax = f_qb, f_jax
            for _ in range(order):
                g_qb, g_jax = qb.grad(g_qb), jax.grad(g_jax)
            assert_close(qb.jit(g_qb)(qb.array(x), qb.array(y)), g_jax(x, y), rtol=1e-12)
    v = np.array([1.0, -2.0, 0.5])
    assert_close(qb.grad(clipped_loss)(qb.array(v)),
                 jax.grad(lambda z: jnp.sum(j_clipped(z, -1.0) * WEIGHTS))(v))
