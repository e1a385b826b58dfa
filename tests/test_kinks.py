"""First and second derivatives of every composite and kinked op at 0, at NaN and at ordinary
points: the values of a table (the mathematics, or the conventions of spec §3.2 where there
is a kink), finite differences at ordinary points, JAX where installed, and the interpreter
agreeing with the compiled program. Also sign(-0.0) == -0.0 on every path."""

import math
import types

import numpy as np
import pytest

import quabla as qb
from quabla.core.interpret import evaluate

from helpers import assert_close, fd_jacobian, np64, staged_graph

NAN = math.nan
S1 = 1 / (1 + math.exp(-1.0))  # sigmoid(1)
A = np.array([[1.0, 2.0, 0.0], [-1.0, 0.5, 3.0], [0.0, 1.0, -2.0]])
ZERO = np.zeros(3)
WITH_NAN = np.array([NAN, 0.0, 1.0])
ORDINARY = np.array([0.31, -0.72, 1.13])


def _diag(*values):
    return np.diag(values)


# name: (f(ns, x) -> scalar, {point: (gradient, hessian)}); ns is quabla or a JAX adapter.
# Second derivatives of the kinked ops are those of the branch the first derivative takes.
CASES = {
    "softplus": (lambda ns, x: ns.sum(ns.softplus(x)), {
        "zero": ([0.5] * 3, _diag(0.25, 0.25, 0.25)),
        "nan": ([NAN, 0.5, S1], _diag(NAN, 0.25, S1 * (1 - S1)))}),
    "relu": (lambda ns, x: ns.sum(ns.relu(x) * (x + 1.0)), {
        "zero": ([0.0] * 3, _diag(0.0, 0.0, 0.0)),
        "nan": ([NAN, 0.0, 3.0], _diag(0.0, 0.0, 2.0))}),
    "sigmoid": (lambda ns, x: ns.sum(ns.sigmoid(x)), {
        "zero": ([0.25] * 3, _diag(0.0, 0.0, 0.0)),
        "nan": ([NAN, 0.25, S1 * (1 - S1)], _diag(NAN, 0.0, S1 * (1 - S1) * (1 - 2 * S1)))}),
    "abs": (lambda ns, x: ns.sum(ns.abs(x) * x), {   # |x| x = x^2 sign(x): derivative 2|x|
        "zero": ([0.0] * 3, _diag(0.0, 0.0, 0.0)),
        "nan": ([NAN, 0.0, 2.0], _diag(NAN, 0.0, 2.0))}),
    "sign": (lambda ns, x: ns.sum(ns.sign(x) * x * x), {
        "zero": ([0.0] * 3, _diag(0.0, 0.0, 0.0)),
        "nan": ([NAN, 0.0, 2.0], _diag(NAN, 0.0, 2.0))}),
    "maximum": (lambda ns, x: ns.sum(ns.maximum(x, 0.0) * x), {  # a tie shares half
        "zero": ([0.0] * 3, _diag(1.0, 1.0, 1.0)),
        "nan": ([NAN, 0.0, 2.0], _diag(0.0, 1.0, 2.0))}),
    "minimum": (lambda ns, x: ns.sum(ns.minimum(x, 0.0) * x), {
        "zero": ([0.0] * 3, _diag(1.0, 1.0, 1.0)),
        "nan": ([NAN, 0.0, 0.0], _diag(0.0, 1.0, 0.0))}),
    "max": (lambda ns, x: ns.max(x * x + x), {       # ties at 0 share the derivative
        "zero": ([1 / 3] * 3, 2 / 3 * np.eye(3)),
        "nan": ([NAN] * 3, np.full((3, 3), NAN))}),
    "min": (lambda ns, x: ns.min(x - x * x), {
        "zero": ([1 / 3] * 3, -2 / 3 * np.eye(3)),
        "nan": ([NAN] * 3, np.full((3, 3), NAN))}),
    "mean": (lambda ns, x: ns.mean(x * x), {
        "zero": ([0.0] * 3, 2 / 3 * np.eye(3)),
        "nan": ([NAN, 0.0, 2 / 3], 2 / 3 * np.eye(3))}),
    "norm": (lambda ns, x: ns.norm(x), {              # sqrt's zero subgradient at 0 (§3.2)
        "zero": ([0.0] * 3, np.zeros((3, 3))),
        "nan": ([NAN] * 3, np.full((3, 3), NAN))}),
    "sqrt": (lambda ns, x: ns.sum(ns.sqrt(x * x * (x + 2.0))), {  # 0: the zero subgradient
        "zero": ([0.0] * 3, np.zeros((3, 3))),
        "nan": ([NAN, 0.0, 7 / (2 * math.sqrt(3))], _diag(NAN, 0.0, 11 / (12 * math.sqrt(3))))}),
    "square": (lambda ns, x: ns.sum(ns.square(x)), {
        "zero": ([0.0] * 3, 2 * np.eye(3)),
        "nan": ([NAN, 0.0, 2.0], 2 * np.eye(3))}),
    "power": (lambda ns, x: ns.sum(ns.power(x, 2.0)), {  # finite limit for y >= 1 (§3.2)
        "zero": ([0.0] * 3, 2 * np.eye(3)),
        "nan": ([NAN, 0.0, 2.0], _diag(2.0, 2.0, 2.0))}),
    "matmul": (lambda ns, x: ns.matmul(x, ns.matmul(A, x)), {
        "zero": ([0.0] * 3, A + A.T),
        "nan": ([NAN, NAN, NAN], A + A.T)}),
    "einsum": (lambda ns, x: ns.einsum("i,ij,j->", x, A, x) + ns.einsum("ii->", ns.einsum(
        "i,j->ij", x, x)), {
        "zero": ([0.0] * 3, A + A.T + 2 * np.eye(3)),
        "nan": ([NAN, NAN, NAN], A + A.T + 2 * np.eye(3))}),
    "tril": (lambda ns, x: ns.sum(ns.tril(ns.einsum("i,j->ij", x, x)) * A), {
        "zero": ([0.0] * 3, np.tril(A) + np.tril(A).T),
        "nan": ([NAN, NAN, NAN], np.tril(A) + np.tril(A).T)}),
    "triu": (lambda ns, x: ns.sum(ns.triu(ns.einsum("i,j->ij", x, x), 1) * A), {
        "zero": ([0.0] * 3, np.triu(A, 1) + np.triu(A, 1).T),
        "nan": ([NAN, NAN, NAN], np.triu(A, 1) + np.triu(A, 1).T)}),
}
POINTS = {"zero": ZERO, "nan": WITH_NAN}
# Where quabla's documented convention differs from JAX's choice: abs' = sign (0 at 0, NaN at
# NaN: JAX takes 1, and -1 at NaN); sqrt and norm have the zero subgradient at 0 (JAX: NaN).
JAX_DIFFERS = {("abs", "zero"), ("abs", "nan"), ("norm", "zero"), ("sqrt", "zero"),
               ("sqrt", "nan")}


def _derivatives(f):
    """grad and Hessian of ``f`` in one staged program (one compile per case)."""
    return qb.jit(lambda x: (qb.grad(f)(x), qb.hessian(f)(x)))


@pytest.fixture(scope="module")
def programs():
    return {name: _derivatives(lambda x, f=f: f(qb, x)) for name, (f, _) in CASES.items()}


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("name", CASES)
def test_derivatives_at_kinks(programs, name, point):
    grad, hess = programs[name](qb.array(POINTS[point]))
    expected_grad, expected_hess = CASES[name][1][point]
    assert_close(grad, np.array(expected_grad))
    _assert_hessian(np64(hess), np.array(expected_hess))


MIXED = np.zeros((3, 3), bool)  # the mixed partials with the NaN element of WITH_NAN
MIXED[0, 1:] = MIXED[1:, 0] = True


def _assert_hessian(hess, expected):
    """Equal (NaN where NaN is expected), except that a mixed partial with the NaN element of
    WITH_NAN may be NaN instead of 0: the 0 * NaN of a product rule, as in JAX."""
    close = np.isclose(hess, expected, rtol=1e-12, atol=1e-12, equal_nan=True)
    assert (close | (MIXED & (expected == 0) & np.isnan(hess))).all(), (hess, expected)


@pytest.mark.parametrize("name", CASES)
def test_derivatives_at_ordinary_points(programs, name):
    f = lambda x: CASES[name][0](qb, x)
    grad, hess = programs[name](qb.array(ORDINARY))
    assert_close(grad, fd_jacobian(f, [ORDINARY])[0], rtol=1e-7, atol=1e-8)
    assert_close(hess, fd_jacobian(qb.grad(f), [ORDINARY]), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", CASES)
def test_interpreter_agrees_with_compiled(programs, name):
    graph = staged_graph(programs[name], qb.array(WITH_NAN))
    for x in (ZERO, WITH_NAN, ORDINARY):
        compiled = programs[name](qb.array(x))
        interpreted = evaluate(graph, [x])
        for c, i in zip(compiled, interpreted):
            np.testing.assert_allclose(np64(c), i, rtol=1e-14, atol=1e-14)


def test_reported_cases():
    assert float(qb.grad(qb.grad(qb.softplus))(qb.array(0.0))) == 0.25
    g = qb.grad(qb.max)(qb.array([1.0, NAN]))
    assert np.isnan(np64(g)).all()
    assert float(qb.grad(qb.relu)(qb.array(NAN))) == 0.0
    assert float(qb.grad(qb.relu)(qb.array(0.0))) == 0.0


SPECIAL = np.array([-0.0, 0.0, NAN, np.inf, -np.inf, 1.0, -1.0, 800.0, -800.0, 1e-30])


def _same_floats(result, expected):
    """Equal values, NaN in the same places, and the same sign of zero."""
    result, expected = np64(result), np.asarray(expected, np.float64)
    np.testing.assert_array_equal(result, expected)
    np.testing.assert_array_equal(np.signbit(result[~np.isnan(result)]),
                                  np.signbit(expected[~np.isnan(expected)]))


@pytest.mark.parametrize("dtype", [qb.float64, qb.float32])
def test_sign_keeps_the_sign_of_zero_on_every_path(dtype):
    x = qb.array(SPECIAL, dtype=dtype)
    expected = np.array([-0.0, 0.0, NAN, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0])
    _same_floats(qb.sign(x), expected)                                     # eager
    _same_floats(qb.jit(qb.sign)(x), expected)                             # compiled
    _same_floats(evaluate(staged_graph(qb.jit(qb.sign), x), [x.numpy()])[0], expected)
    _same_floats(qb.jit(lambda: qb.sign(qb.array(SPECIAL, dtype=dtype)))(), expected)  # folded
    assert str(np64(qb.sign(-0.0))) == "-0.0"


@pytest.mark.parametrize("dtype", [qb.float64, qb.float32])
@pytest.mark.parametrize("fn", [qb.relu, qb.softplus], ids=["relu", "softplus"])
def test_relu_softplus_values_on_every_path(fn, dtype):
    x = qb.array(SPECIAL, dtype=dtype)
    with np.errstate(all="ignore"):
        s = SPECIAL.astype(dtype.numpy)
        expected = np.maximum(s, 0) + 0.0 if fn is qb.relu else np.logaddexp(0, s)
    eager, compiled = fn(x), qb.jit(fn)(x)
    assert eager.dtype is dtype and compiled.dtype is dtype
    tol = dict(rtol=1e-15, atol=0) if dtype is qb.float64 else dict(rtol=2e-7, atol=0)
    for got in (eager, compiled):
        np.testing.assert_allclose(np64(got), expected, equal_nan=True, **tol)
    if fn is qb.relu:
        _same_floats(eager, expected)
        _same_floats(compiled, expected)


# -- against JAX --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def jax_ns():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    ns = types.SimpleNamespace(**{n: getattr(jnp, n) for n in (
        "sum", "abs", "sign", "maximum", "minimum", "max", "min", "mean", "sqrt", "square",
        "power", "matmul", "einsum", "tril", "triu")})
    ns.softplus, ns.relu, ns.sigmoid = jax.nn.softplus, jax.nn.relu, jax.nn.sigmoid
    ns.norm = jnp.linalg.norm
    return jax, ns


@pytest.mark.parametrize("point", list(POINTS) + ["ordinary"])
@pytest.mark.parametrize("name", CASES)
def test_derivatives_match_jax(programs, jax_ns, name, point):
    if (name, point) in JAX_DIFFERS:
        pytest.skip("a documented convention of quabla differs from JAX's here")
    jax, ns = jax_ns
    x = POINTS.get(point, ORDINARY)
    f = lambda v: CASES[name][0](ns, v)
    grad, hess = programs[name](qb.array(x))
    np.testing.assert_allclose(np64(grad), np.asarray(jax.grad(f)(x)), rtol=1e-12, atol=1e-12)
    theirs = np.array(jax.hessian(f)(x))
    if point == "nan":
        theirs[MIXED & np.isnan(theirs)] = 0.0
    _assert_hessian(np64(hess), theirs)
