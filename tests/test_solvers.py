"""Solvers as primitives: ``linalg.cg``/``gmres``, ``newton``, ``odeint``.

Values against NumPy/closed forms (and JAX where installed), derivatives (implicit
differentiation, the adjoint method) against finite differences and JAX, ``vmap`` against a
Python loop, eager mode (the NumPy references) against ``jit`` (the expansion into loop regions),
and non-convergence reported, never silent.
"""

import numpy as np
import pytest

import quabla as qb
from quabla.core.expand import expand, needs_expansion
from quabla.solvers import ConvergenceError

RNG = np.random.default_rng(7)
N = 5
_Q = RNG.normal(size=(N, N))
SPD = _Q @ _Q.T + N * np.eye(N)
NONSYM = SPD + 2.0 * RNG.normal(size=(N, N))
B = RNG.normal(size=N)
WEIGHTS = np.arange(1.0, N + 1)


def fd(fun, x, eps=1e-6):
    """Central differences of a scalar function of a float or an array."""
    x = np.asarray(x, float)
    out = np.zeros(x.shape)
    for idx in np.ndindex(x.shape):
        e = np.zeros(x.shape)
        e[idx] = eps
        out[idx] = (fun(x + e) - fun(x - e)) / (2 * eps)
    return out


def _solver(name):
    return {"cg": qb.linalg.cg, "gmres": lambda A, b, **kw: qb.linalg.gmres(A, b, restart=3, **kw)}[name]


CASES = [("cg", SPD), ("gmres", NONSYM)]


# -- cg / gmres ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name,matrix", CASES)
def test_krylov_matches_dense_solve(name, matrix):
    solve = _solver(name)
    expected = np.linalg.solve(matrix, B)
    x, info = solve(matrix, B, tol=1e-12)  # matrix operator, eager (the NumPy reference)
    np.testing.assert_allclose(np.asarray(x), expected, atol=1e-10)
    assert float(info) == 0
    # matrix-free, closing over a tracer, through jit (the expansion into a while region)
    xj, info = qb.jit(lambda a, b: solve(lambda v: qb.matmul(a, v), b, tol=1e-12))(matrix, B)
    np.testing.assert_allclose(np.asarray(xj), expected, atol=1e-10)
    assert float(info) == 0


@pytest.mark.parametrize("name,matrix", CASES)
def test_krylov_gradients_by_implicit_differentiation(name, matrix):
    solve = _solver(name)

    def loss(b, s):
        x, _ = solve(lambda v: qb.matmul(matrix, v) + s * v, b, tol=1e-12)
        return qb.sum(x * x * WEIGHTS)

    def ref(b, s):
        x = np.linalg.solve(matrix + s * np.eye(N), b)
        return np.sum(x * x * WEIGHTS)

    for grad in (qb.grad(loss, argnums=(0, 1)), qb.jit(qb.grad(loss, argnums=(0, 1)))):
        gb, gs = grad(B, qb.array(0.3))
        np.testing.assert_allclose(np.asarray(gb), fd(lambda b: ref(b, 0.3), B), atol=1e-7)
        np.testing.assert_allclose(float(gs), fd(lambda s: ref(B, float(s)), 0.3), atol=1e-7)
    tangent = qb.jvp(lambda s: solve(lambda v: qb.matmul(matrix, v) + s * v, B, tol=1e-12)[0],
                     (qb.array(0.3),), (qb.array(1.0),))[1]
    eps = 1e-6
    expected = (np.linalg.solve(matrix + (0.3 + eps) * np.eye(N), B)
                - np.linalg.solve(matrix + (0.3 - eps) * np.eye(N), B)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(tangent), expected, atol=1e-7)


@pytest.mark.parametrize("name,matrix", CASES)
def test_vmap_over_right_hand_sides_equals_a_loop(name, matrix):
    solve = _solver(name)
    rhs = RNG.normal(size=(3, N))
    rhs[1] *= 1e3  # lanes converge at different iterations
    loop = np.stack([np.asarray(solve(matrix, r, tol=1e-12)[0]) for r in rhs])
    for mapped in (qb.vmap(lambda b: solve(matrix, b, tol=1e-12)),
                   qb.jit(qb.vmap(lambda b: solve(matrix, b, tol=1e-12)))):
        xs, infos = mapped(rhs)
        np.testing.assert_allclose(np.asarray(xs), loop, rtol=1e-9, atol=1e-9)
        np.testing.assert_array_equal(np.asarray(infos), 0.0)
    # per-example gradients of a shared operator parameter: vmap of grad
    per_example = qb.vmap(qb.grad(lambda b, s: qb.sum(
        solve(lambda v: qb.matmul(matrix, v) * s, b, tol=1e-12)[0]), argnums=1),
        in_axes=(0, None))(rhs, qb.array(2.0))
    expected = [-np.sum(np.linalg.solve(matrix, r)) / 4.0 for r in rhs]
    np.testing.assert_allclose(np.asarray(per_example), expected, rtol=1e-7)


def test_cg_preconditioner_and_x0():
    diag = np.diag(SPD)
    x, info = qb.linalg.cg(SPD, B, x0=np.ones(N), M=lambda r: r / diag, tol=1e-12)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(SPD, B), atol=1e-10)
    assert float(info) == 0


@pytest.mark.parametrize("name,matrix", CASES)
def test_non_convergence_is_reported(name, matrix):
    big = np.diag(np.logspace(0, 6, 12)) + np.triu(np.ones((12, 12)), 1) * (name == "gmres")
    b = np.ones(12)
    solve = {"cg": qb.linalg.cg, "gmres": lambda A, b, **kw: qb.linalg.gmres(A, b, restart=2, **kw)}[name]
    x, info = solve(big, b, tol=1e-14, maxiter=2)
    assert float(info) == 2
    _, info = qb.jit(lambda b: solve(big, b, tol=1e-14, maxiter=2))(b)
    assert float(info) == 2


def test_krylov_misuse():
    with pytest.raises(TypeError, match="must return one array"):
        qb.linalg.cg(lambda v: qb.sum(v), B)
    with pytest.raises(ValueError, match=r"\[n, n\]"):
        qb.linalg.cg(np.ones((3, 4)), B)
    with pytest.raises(ValueError, match="x0"):
        qb.linalg.cg(SPD, B, x0=np.ones(N + 1))


def test_expansion_leaves_only_regions():
    graph = qb.jit(lambda b: qb.linalg.cg(lambda v: qb.matmul(SPD, v), b)).lower(B).graph
    assert needs_expansion(graph)
    expanded = expand(graph)
    assert not needs_expansion(expanded)
    ops = {node.op for node in expanded.nodes}
    assert "while" in ops and "cg" not in ops


# -- newton -------------------------------------------------------------------------------------

def _system(x, a, b):
    return qb.stack([x[0] ** 2 + x[1] ** 2 - a, x[0] - b * x[1]])


X0 = np.array([1.0, 0.5])


def _root(a, b):
    y = np.sqrt(a / (1 + b * b))
    return np.array([b * y, y])


def test_newton_root_and_ift_gradients():
    x = qb.newton(_system, X0, 4.0, 0.5)
    np.testing.assert_allclose(np.asarray(x), _root(4.0, 0.5), atol=1e-12)
    xj = qb.jit(lambda a, b: qb.newton(_system, X0, a, b))(qb.array(4.0), qb.array(0.5))
    np.testing.assert_allclose(np.asarray(xj), _root(4.0, 0.5), atol=1e-12)

    def loss(a, b):
        x = qb.newton(_system, X0, a, b)
        return 3.0 * x[0] + x[1] ** 2

    def ref(a, b):
        r = _root(a, b)
        return 3.0 * r[0] + r[1] ** 2

    for grad in (qb.grad(loss, argnums=(0, 1)), qb.jit(qb.grad(loss, argnums=(0, 1)))):
        ga, gb = grad(qb.array(4.0), qb.array(0.5))
        np.testing.assert_allclose(float(ga), fd(lambda a: ref(float(a), 0.5), 4.0), rtol=1e-7)
        np.testing.assert_allclose(float(gb), fd(lambda b: ref(4.0, float(b)), 0.5), rtol=1e-7)
    # second order through the implicit rules
    h = qb.hessian(lambda a: loss(a, 0.5))(qb.array(4.0))
    np.testing.assert_allclose(float(h), fd(lambda a: fd(lambda c: ref(float(c), 0.5), a, 1e-4),
                                            4.0, 1e-4), rtol=1e-5)
    # x0 gets no derivative; a closed-over tracer does
    assert float(qb.grad(lambda x0: qb.sum(qb.newton(_system, x0, 4.0, 0.5)))(X0)[0]) == 0.0
    g = qb.grad(lambda c: qb.newton(lambda x: qb.cos(x) - c * x, 1.0))(qb.array(1.0))
    root = float(qb.newton(lambda x: qb.cos(x) - x, 1.0))
    np.testing.assert_allclose(float(g), -root / (np.sin(root) + 1.0), rtol=1e-9)


def test_newton_vmap_equals_a_loop():
    a = np.array([1.0, 4.0, 9.0])
    expected = np.stack([_root(v, 0.5) for v in a])
    for mapped in (qb.vmap(lambda a: qb.newton(_system, X0, a, 0.5)),
                   qb.jit(qb.vmap(lambda a: qb.newton(_system, X0, a, 0.5)))):
        np.testing.assert_allclose(np.asarray(mapped(a)), expected, atol=1e-12)


def test_newton_non_convergence_is_reported():
    with pytest.raises(ConvergenceError, match=r"after 10 steps .* max\|f\(x\)\| = "):
        qb.newton(lambda x: x * x + 1.0, 2.0, maxiter=10)
    c = qb.array(1.0)
    x = qb.jit(lambda c: qb.newton(lambda x: x * x + c, 2.0, maxiter=10))(c)
    assert np.isnan(float(x))
    x, info = qb.jit(lambda c: qb.newton(lambda x: x * x + c, 2.0, maxiter=10,
                                         return_info=True))(c)
    assert float(info) == 10
    x, info = qb.newton(lambda x: x * x - 2.0, 1.0, return_info=True)
    assert float(info) == 0 and abs(float(x) - np.sqrt(2)) < 1e-10


def test_a_failed_solve_gives_nan_derivatives_not_zeros():
    """Under a transform a failed solve is NaN in the value and in its derivatives: a zero
    there (``where`` picking a NaN constant) would be a finite, wrong gradient."""
    c = np.linspace(1.0, 2.0, 3)
    loss = lambda c, n: qb.sum(qb.newton(lambda x, c: x * x - c, qb.ones(3), c, maxiter=n))
    value, grad = qb.jit(qb.value_and_grad(loss), static_argnums=1)(c, 2)
    assert np.isnan(float(value)) and np.isnan(np.asarray(grad)).all()
    _, tangent = qb.jit(lambda c: qb.jvp(lambda c: loss(c, 2), (c,), (qb.ones(3),)))(c)
    assert np.isnan(float(tangent))
    grad = qb.jit(qb.grad(loss), static_argnums=1)(c, 50)  # converged: d sqrt(c) / dc
    np.testing.assert_allclose(np.asarray(grad), 0.5 / np.sqrt(c), rtol=1e-10)
    t = np.linspace(0.0, 100.0, 3)
    grad = qb.jit(qb.grad(lambda w: qb.sum(qb.odeint(_oscillator, Y0, t, w, mxstep=5))))(
        qb.array(1.0))
    assert np.isnan(float(grad))


def test_a_nan_start_is_a_failure_not_a_zero_step_success():
    """A NaN in x0, y0 or b stops a solver before its first step: that is a failure too."""
    nan = qb.array(np.nan)
    with pytest.raises(ConvergenceError, match="NaN"):
        qb.newton(lambda x: x * x - 2.0, nan)
    _, info = qb.jit(lambda x0: qb.newton(lambda x: x * x - 2.0, x0, return_info=True))(nan)
    assert float(info) >= 1
    with pytest.raises(ConvergenceError):
        qb.odeint(_oscillator, np.array([np.nan, 0.0]), T, 1.0)
    _, info = qb.jit(lambda y0: qb.odeint(_oscillator, y0, T, 1.0, return_info=True))(
        np.array([np.nan, 0.0]))
    assert float(info) >= 1
    b = np.array([np.nan, 1.0])
    for solve in (qb.linalg.cg, qb.linalg.gmres):
        for run in (solve, qb.jit(solve)):
            x, info = run(np.eye(2) * 2.0, b)
            assert float(info) >= 1, solve.__name__


def test_newton_converges_in_float32_with_the_default_tol(on):
    """``tol`` defaults by ``x0``'s dtype: float32 rounding never reaches float64's 1e-10."""
    a = np.linspace(1.0, 2.0, 5, dtype=np.float32)
    root = lambda a: qb.newton(lambda r, c: r * r - c, qb.ones(a.shape, dtype=a.dtype), a)
    x = on(root)(a)  # eagerly on the CPU: ConvergenceError unless it converged
    assert x.dtype is qb.float32
    on.close(x, np.sqrt(a), rtol=2e-5)
    on.close(on(qb.grad(lambda a: qb.sum(root(a))))(a), 0.5 / np.sqrt(a), rtol=2e-5)


# -- odeint -------------------------------------------------------------------------------------

T = np.linspace(0.0, 2.0, 5)
Y0 = np.array([1.0, 0.0])


def _oscillator(y, t, w):
    return qb.stack([y[1], -w * w * y[0]])


def _oscillator_exact(y0, t, w):
    """x(t) of the harmonic oscillator started at t[0]."""
    dt = t - t[0]
    return y0[0] * np.cos(w * dt) + y0[1] / w * np.sin(w * dt)


def test_odeint_closed_forms():
    decay = qb.odeint(lambda y, t, k: -k * y, np.array([1.0, 2.0]), T, 0.7)
    np.testing.assert_allclose(np.asarray(decay), np.exp(-0.7 * T)[:, None] * [1.0, 2.0],
                               atol=1e-7)
    ys = qb.odeint(_oscillator, Y0, T, 1.3)
    np.testing.assert_allclose(np.asarray(ys)[:, 0], _oscillator_exact(Y0, T, 1.3), atol=1e-7)
    ysj = qb.jit(lambda y0, w: qb.odeint(_oscillator, y0, T, w))(Y0, qb.array(1.3))
    np.testing.assert_allclose(np.asarray(ysj), np.asarray(ys), atol=1e-12)
    # time-dependent field: dy/dt = t y
    ys = qb.odeint(lambda y, t: t * y, np.array(1.0), T)
    np.testing.assert_allclose(np.asarray(ys), np.exp(T ** 2 / 2), rtol=1e-7)


def test_odeint_adjoint_gradients():
    def loss(y0, t, w):
        return qb.sum(qb.odeint(_oscillator, y0, t, w)[:, 0] ** 2)

    def ref(y0, t, w):
        return np.sum(_oscillator_exact(y0, t, w) ** 2)

    w = 1.3
    for grad in (qb.grad(loss, argnums=(0, 1, 2)), qb.jit(qb.grad(loss, argnums=(0, 1, 2)))):
        gy, gt, gw = grad(Y0, qb.array(T), qb.array(w))
        np.testing.assert_allclose(np.asarray(gy), fd(lambda y: ref(y, T, w), Y0), atol=1e-5)
        np.testing.assert_allclose(np.asarray(gt), fd(lambda t: ref(Y0, t, w), T), atol=1e-5)
        np.testing.assert_allclose(float(gw), fd(lambda v: ref(Y0, T, float(v)), w), atol=1e-5)
    tangent = qb.jvp(lambda w: qb.odeint(_oscillator, Y0, T, w)[:, 0], (qb.array(w),),
                     (qb.array(1.0),))[1]
    np.testing.assert_allclose(np.asarray(tangent), -T * np.sin(w * T), atol=1e-6)


def test_odeint_vmap_equals_a_loop():
    ws = np.array([0.5, 1.0, 2.0])
    loop = np.stack([np.asarray(qb.odeint(_oscillator, Y0, T, w)) for w in ws])
    for mapped in (qb.vmap(lambda w: qb.odeint(_oscillator, Y0, T, w)),
                   qb.jit(qb.vmap(lambda w: qb.odeint(_oscillator, Y0, T, w)))):
        np.testing.assert_allclose(np.asarray(mapped(ws)), loop, atol=1e-10)
    # The batched adjoint is one long entry: ~10 s of Numba compile (many minutes before the
    # code generator indexed raw pointers), the longest of the suite.
    grads = qb.vmap(qb.grad(lambda w: qb.sum(qb.odeint(_oscillator, Y0, T, w)[:, 0] ** 2)))(ws)
    expected = [fd(lambda v: np.sum(_oscillator_exact(Y0, T, float(v)) ** 2), w) for w in ws]
    np.testing.assert_allclose(np.asarray(grads), expected, atol=1e-5)


def test_odeint_mxstep_is_reported():
    t = np.linspace(0.0, 100.0, 3)
    with pytest.raises(ConvergenceError, match=r"did not reach t=100.0: it stopped at t="):
        qb.odeint(_oscillator, Y0, t, 1.0, mxstep=5)
    ys = qb.jit(lambda w: qb.odeint(_oscillator, Y0, t, w, mxstep=5))(qb.array(1.0))
    assert np.isnan(np.asarray(ys)).all()
    with pytest.raises(ValueError, match="increasing"):
        qb.odeint(_oscillator, Y0, T[::-1], 1.0)


# -- against JAX --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


@pytest.mark.parametrize("name,matrix", CASES)
def test_krylov_matches_jax(jax, name, matrix):
    import jax.numpy as jnp
    from jax.scipy.sparse import linalg as jsl

    jsolve = {"cg": jsl.cg, "gmres": lambda A, b, **kw: jsl.gmres(A, b, restart=3, **kw)}[name]
    solve = _solver(name)

    def jloss(b, s):
        x, _ = jsolve(lambda v: jnp.asarray(matrix) @ v + s * v, b, tol=1e-12)
        return jnp.sum(x * x * WEIGHTS)

    def loss(b, s):
        x, _ = solve(lambda v: qb.matmul(matrix, v) + s * v, b, tol=1e-12)
        return qb.sum(x * x * WEIGHTS)

    np.testing.assert_allclose(float(loss(B, 0.3)), float(jloss(jnp.asarray(B), 0.3)), rtol=1e-9)
    ours = qb.grad(loss, argnums=(0, 1))(B, qb.array(0.3))
    theirs = jax.grad(jloss, argnums=(0, 1))(jnp.asarray(B), 0.3)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-7, atol=1e-9)


def test_odeint_matches_jax(jax):
    import jax.numpy as jnp
    from jax.experimental.ode import odeint as jodeint

    def field(y, t, w, c):
        return qb.stack([y[1], -w * w * qb.sin(y[0]) - c * y[1]])

    def jfield(y, t, w, c):
        return jnp.stack([y[1], -w * w * jnp.sin(y[0]) - c * y[1]])

    y0 = np.array([1.0, 0.2])

    def loss(y0, w, c):
        return qb.sum(qb.odeint(field, y0, T, w, c) ** 2)

    def jloss(y0, w, c):
        return jnp.sum(jodeint(jfield, y0, jnp.asarray(T), w, c) ** 2)

    np.testing.assert_allclose(np.asarray(qb.odeint(field, y0, T, 1.1, 0.3)),
                               np.asarray(jodeint(jfield, jnp.asarray(y0), jnp.asarray(T), 1.1, 0.3)),
                               atol=1e-7)
    ours = qb.grad(loss, argnums=(0, 1, 2))(y0, qb.array(1.1), qb.array(0.3))
    theirs = jax.grad(jloss, argnums=(0, 1, 2))(jnp.asarray(y0), 1.1, 0.3)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
