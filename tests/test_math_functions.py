"""Issue 24's elementwise math, ``qb.nn`` and ``qb.special`` against NumPy and SciPy (values)
and JAX (values and gradients under ``jit``, x64), on the Numba CPU back end and the
reference interpreter.

Every function of a table runs in ONE compiled program per back end (its values and, in
another, its gradients), so the whole table costs two Numba compiles. MLX and the CUDA
simulator run the new primitives through the device corpus (tests/device_cases.py, whose
primitive cases are test_rules'); the conventions at kinks and poles are checked here.
"""

import math
from typing import NamedTuple

import numpy as np
import pytest

import quabla as qb

nan, inf = math.nan, math.inf

BACKENDS = ["numba", "interpret"]


class Row(NamedTuple):
    name: str
    fn: object            # the quabla function of the row's arguments
    reference: object     # NumPy's (or SciPy's, when ``scipy``) function, or None
    jax: str              # the JAX function, spelled with jnp, jsp (jax.scipy.special), jnn
    args: tuple           # the argument values (edges included where the reference has them)
    grad_args: tuple = None  # points for gradients (away from kinks); None: no gradient
    scipy: bool = False   # the reference needs scipy.special (``sp``)
    rtol: float = 1e-13


def _a(*values):
    return np.array(values, dtype=np.float64)


REALS = _a(-2.7, -1.5, -0.5, -0.0, 0.0, 0.3, 0.5, 1.5, 2.5, 3.7, nan, inf, -inf)
SMOOTH = _a(-2.3, -1.1, -0.4, 0.2, 0.7, 1.3, 2.9)          # away from whole and half numbers
UNIT = _a(-1.5, -1.0, -0.9, -0.3, -0.0, 0.0, 0.4, 0.99, 1.0, 1.2, nan)
UNIT_IN = _a(-0.9, -0.45, -0.1, 0.2, 0.55, 0.8)
POSITIVE = _a(-1.0, -0.0, 0.0, 1e-300, 0.5, 1.0, 8.0, 1000.0, 1e300, inf, nan)
POSITIVE_IN = _a(0.3, 0.9, 1.7, 4.2, 11.0)
QUOTIENT_X = _a(5.3, -5.3, 5.3, -5.3, 4.0, -4.0, 0.0, -0.0, 7.5, inf, 1.0, nan)
QUOTIENT_Y = _a(2.0, 2.0, -2.0, -2.0, 2.0, 2.0, 3.0, 3.0, 0.0, 2.0, inf, 1.0)
GRAD_X = _a(5.3, -5.3, 5.3, -5.3, 0.7, 2.2)
GRAD_Y = _a(2.0, 2.0, -2.0, -2.0, 0.3, -0.9)
SPECIAL_X = _a(-2.5, -0.5, 1e-8, 0.1, 0.5, 1.0, 1.4616321449683622, 2.0, 7.5, 30.0, 1e10)
PROB = _a(-0.1, 0.0, 1e-300, 1e-20, 0.02, 0.3, 0.5, 0.7, 0.99, 1.0 - 1e-12, 1.0, 1.1, nan)


def _clip_ref(x, lo, hi):
    return np.minimum(np.maximum(x, lo), hi)


def _logsumexp_rows(x):
    m = np.max(x, axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return np.log(np.sum(np.exp(x - m), axis=1)) + m[:, 0]


ELEMENTWISE = [
    Row("floor", qb.floor, np.floor, "jnp.floor", (REALS,), (SMOOTH,)),
    Row("ceil", qb.ceil, np.ceil, "jnp.ceil", (REALS,), (SMOOTH,)),
    Row("round", qb.round, np.round, "jnp.round", (REALS,), (SMOOTH,)),
    Row("round-decimals", lambda x: qb.round(x, 2), lambda x: np.round(x, 2),
        "lambda x: jnp.round(x, 2)", (_a(1.2345, -2.675, 0.125, 1e300, nan),), (SMOOTH,)),
    Row("round-negative-decimals", lambda x: qb.round(x, -1), lambda x: np.round(x, -1),
        "lambda x: jnp.round(x, -1)", (_a(14.0, 15.0, 25.0, -35.0, 123.4),)),
    Row("tan", qb.tan, np.tan, "jnp.tan", (REALS,), (SMOOTH * 0.6,)),
    Row("arcsin", qb.arcsin, np.arcsin, "jnp.arcsin", (UNIT,), (UNIT_IN,)),
    Row("arccos", qb.arccos, np.arccos, "jnp.arccos", (UNIT,), (UNIT_IN,)),
    Row("arctan", qb.arctan, np.arctan, "jnp.arctan", (REALS,), (SMOOTH,)),
    Row("sinh", qb.sinh, np.sinh, "jnp.sinh", (REALS,), (SMOOTH,)),
    Row("cosh", qb.cosh, np.cosh, "jnp.cosh", (REALS,), (SMOOTH,)),
    Row("arcsinh", qb.arcsinh, np.arcsinh, "jnp.arcsinh", (REALS,), (SMOOTH,)),
    Row("arccosh", qb.arccosh, np.arccosh, "jnp.arccosh", (_a(0.5, 1.0, 1.5, 3.0, 1e300, inf, nan),),
        (_a(1.2, 2.5, 9.0),)),
    Row("arctanh", qb.arctanh, np.arctanh, "jnp.arctanh", (UNIT,), (UNIT_IN,)),
    Row("log2", qb.log2, np.log2, "jnp.log2", (POSITIVE,), (POSITIVE_IN,)),
    Row("log10", qb.log10, np.log10, "jnp.log10", (POSITIVE,), (POSITIVE_IN,)),
    Row("exp2", qb.exp2, np.exp2, "jnp.exp2", (REALS,), (SMOOTH,)),
    Row("cbrt", qb.cbrt, np.cbrt, "jnp.cbrt", (_a(-27.0, -8.0, -0.0, 0.0, 1e-3, 8.0, 27.0, 1e300, inf, nan),),
        (SMOOTH,)),
    Row("reciprocal", qb.reciprocal, np.reciprocal, "jnp.reciprocal", (REALS,), (SMOOTH,)),
    Row("isinf", qb.isinf, np.isinf, "jnp.isinf", (REALS,)),
    Row("nan_to_num", qb.nan_to_num, np.nan_to_num, "jnp.nan_to_num", (REALS,), (REALS,)),
    Row("nan_to_num-values", lambda x: qb.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0),
        lambda x: np.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0),
        "lambda x: jnp.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0)", (REALS,)),
    Row("arctan2", qb.arctan2, np.arctan2, "jnp.arctan2",
        (_a(1.0, -1.0, 0.0, -0.0, 0.0, 2.0, inf, nan), _a(1.0, -1.0, 1.0, -1.0, -1.0, -3.0, 1.0, 1.0)),
        (_a(0.5, -1.2, 0.3), _a(1.0, 0.4, -2.0))),
    Row("hypot", qb.hypot, np.hypot, "jnp.hypot",
        (_a(3.0, -5.0, 0.0, 1e300, inf, nan, 1e-300), _a(4.0, 12.0, 0.0, 1e300, nan, 1.0, 1e-300)),
        (_a(3.0, -0.5, 0.2), _a(4.0, 1.5, -0.1))),
    Row("remainder", qb.remainder, np.remainder, "jnp.remainder", (QUOTIENT_X, QUOTIENT_Y),
        (GRAD_X, GRAD_Y)),
    Row("mod", qb.mod, np.mod, "jnp.mod", (QUOTIENT_X, QUOTIENT_Y), (GRAD_X, GRAD_Y)),
    Row("%", lambda x, y: x % y, lambda x, y: x % y, "lambda x, y: x % y",
        (QUOTIENT_X, QUOTIENT_Y), (GRAD_X, GRAD_Y)),
    Row("rmod", lambda y: 5.3 % y, lambda y: 5.3 % y, "lambda y: 5.3 % y", (GRAD_Y,), (GRAD_Y,)),
    Row("floor_divide", qb.floor_divide, np.floor_divide, "jnp.floor_divide",
        (QUOTIENT_X, QUOTIENT_Y), (GRAD_X, GRAD_Y)),
    Row("//", lambda x, y: x // y, lambda x, y: x // y, "lambda x, y: x // y",
        (QUOTIENT_X, QUOTIENT_Y), (GRAD_X, GRAD_Y)),
    Row("rfloordiv", lambda y: 5.3 // y, lambda y: 5.3 // y, "lambda y: 5.3 // y", (GRAD_Y,)),
    Row("logaddexp", qb.logaddexp, np.logaddexp, "jnp.logaddexp",
        (_a(1.0, -1e3, 1e3, 0.5, -inf, inf, -inf, nan), _a(1.0, -1e3, 2.0, -0.5, 1.0, inf, -inf, 1.0)),
        (_a(1.0, -1e3, 3.0, -2.0), _a(1.0, -1e3, -1.0, 4.0))),
    Row("clip", lambda x: qb.clip(x, -1.0, 2.0), lambda x: np.clip(x, -1.0, 2.0),
        "lambda x: jnp.clip(x, -1.0, 2.0)", (REALS,), (_a(-2.0, -1.0, 0.3, 2.0, 3.0),)),
    Row("clip-arrays", qb.clip, _clip_ref, "jnp.clip",
        (_a(-2.0, -1.0, 0.3, 2.0, 3.0, 0.0), _a(-1.0, -1.0, -1.0, -1.0, -1.0, 1.0),
         _a(2.0, 2.0, 2.0, 2.0, 2.0, -1.0)),
        (_a(-2.0, -1.0, 0.3, 2.0, 3.0), _a(-1.0, -1.0, -1.0, -1.0, -1.0),
         _a(2.0, 2.0, 2.0, 2.0, 2.0))),
    Row("clip-upper", lambda x: qb.clip(x, max=0.5), lambda x: np.minimum(x, 0.5),
        "lambda x: jnp.clip(x, max=0.5)", (REALS,), (_a(0.5, -1.0, 0.3, 2.0),)),
    Row("isclose", qb.isclose, np.isclose, "jnp.isclose",
        (_a(1.0, 1.0, 1e-9, inf, inf, nan, 0.0, 1e10), _a(1.0 + 1e-6, 1.1, 0.0, inf, -inf, nan, -0.0, 1.00001e10))),
    Row("isclose-options", lambda a, b: qb.isclose(a, b, rtol=0.0, atol=0.2, equal_nan=True),
        lambda a, b: np.isclose(a, b, rtol=0.0, atol=0.2, equal_nan=True),
        "lambda a, b: jnp.isclose(a, b, rtol=0.0, atol=0.2, equal_nan=True)",
        (_a(1.0, 1.0, nan, nan, inf), _a(1.1, 1.3, nan, 1.0, inf))),
]

# qb.special: values against SciPy (its conventions: documented differences left out here)
SPECIAL = [
    Row("erf", qb.special.erf, "erf", "jsp.erf", (REALS,), (SMOOTH,), scipy=True),
    Row("erfc", qb.special.erfc, "erfc", "jsp.erfc", (np.append(REALS, [6.0, 26.0, -30.0]),),
        (SMOOTH,), scipy=True),
    Row("erfinv", qb.special.erfinv, "erfinv", "jsp.erfinv",
        (np.append(UNIT, [1e-300, 0.5, 0.5000001, 1.0 - 1e-16, -0.999999]),), (UNIT_IN,),
        scipy=True, rtol=1e-14),
    Row("gammaln", qb.special.gammaln, "gammaln", "jsp.gammaln",
        (np.append(SPECIAL_X, [0.0, -1.0, -2.0, inf, nan, 1e300]),), (POSITIVE_IN,),
        scipy=True, rtol=1e-13),
    Row("digamma", qb.special.digamma, "digamma", "jsp.digamma",
        (np.append(SPECIAL_X, [-1e5 - 0.25, -7.3, inf, nan, 1e300]),), (_a(-2.5, 0.3, 1.7, 9.0),),
        scipy=True),
    Row("polygamma-1", lambda x: qb.special.polygamma(1, x), lambda x: _sp().polygamma(1, x),
        "lambda x: jsp.polygamma(1, x)", (np.append(SPECIAL_X, [-7.3, 0.0, -3.0, inf, nan]),),
        (_a(-2.5, 0.3, 1.7, 9.0),)),
    Row("polygamma-3", lambda x: qb.special.polygamma(3, x), lambda x: _sp().polygamma(3, x),
        "lambda x: jsp.polygamma(3, x)", (np.append(SPECIAL_X, [0.0, -3.0, inf]),),
        (_a(-2.5, 0.3, 1.7, 9.0),)),
    Row("polygamma-0", lambda x: qb.special.polygamma(0, x), "digamma",
        "lambda x: jsp.polygamma(0, x)", (SPECIAL_X,), None, scipy=True),
    Row("xlogy", qb.special.xlogy, "xlogy", "jsp.xlogy",
        (_a(0.0, 0.0, 1.5, -2.0, 3.0, 0.0), _a(0.0, 2.0, 0.5, 3.0, 0.0, inf)),
        (_a(0.0, 1.5, -2.0), _a(2.0, 0.5, 3.0)), scipy=True),
    Row("xlog1py", qb.special.xlog1py, "xlog1py", "jsp.xlog1py",
        (_a(0.0, 0.0, 1.5, -2.0, 3.0, 1.0), _a(-1.0, 2.0, 0.5, 1e-20, -1.0, -2.0)),
        (_a(0.0, 1.5, -2.0), _a(2.0, 0.5, 3.0)), scipy=True),
    Row("expit", qb.special.expit, "expit", "jsp.expit", (REALS,), (SMOOTH,), scipy=True),
    Row("logit", qb.special.logit, "logit", "jsp.logit", (PROB,), (UNIT_IN * 0.5 + 0.5,),
        scipy=True, rtol=1e-12),
    Row("ndtr", qb.special.ndtr, "ndtr", "jsp.ndtr",
        (np.append(REALS, [-10.0, -38.0, 6.0, 0.6, -0.6]),), (SMOOTH,), scipy=True),
    Row("ndtri", qb.special.ndtri, "ndtri", "jsp.ndtri", (PROB,), (_a(0.01, 0.3, 0.5, 0.9),),
        scipy=True, rtol=1e-14),
    Row("logsumexp", lambda x: qb.special.logsumexp(x, axis=1), _logsumexp_rows,
        "lambda x: jsp.logsumexp(x, axis=1)",
        (np.array([[1.0, 2.0, 3.0], [1e3, 1e3 - 1.0, -inf], [-inf, -inf, -inf]]),),
        (np.array([[1.0, 2.0, 3.0], [1e3, 1e3 - 1.0, -5.0]]),)),
]


def _sp():
    return pytest.importorskip("scipy.special")


def _reference(row):
    if isinstance(row.reference, str):
        return getattr(_sp(), row.reference)
    return row.reference


def _rows(table, predicate=lambda row: True):
    return {row.name: row for row in table if predicate(row)}


def _program(rows, grads=False):
    """One function of ``{name: args}`` giving every row's value (or gradients, each of
    sum(f(args)) in all its arguments)."""
    def values(inputs):
        out = {}
        for name, row in rows.items():
            if grads:
                g = qb.grad(lambda *a, f=row.fn: qb.sum(f(*a)), argnums=tuple(range(len(row.grad_args))))
                out[name] = g(*inputs[name])
            else:
                out[name] = row.fn(*inputs[name])
        return out
    return values


def _inputs(rows, grads=False):
    return {name: tuple(qb.array(a) for a in (row.grad_args if grads else row.args))
            for name, row in rows.items()}


def _run(backend, rows, grads, monkeypatch):
    """The rows' values (or gradients) as one compiled program on ``backend``."""
    if backend == "interpret":
        monkeypatch.setenv("QUABLA_BACKEND", "interpret")
    else:
        monkeypatch.delenv("QUABLA_BACKEND", raising=False)
    result = qb.jit(_program(rows, grads))(_inputs(rows, grads))
    return {k: (tuple(np.asarray(x) for x in v) if isinstance(v, tuple) else np.asarray(v))
            for k, v in result.items()}


def _assert_values(actual, expected, rtol, name, atol=0.0):
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, name
    if expected.dtype == np.bool_:
        assert actual.dtype == np.bool_, name
        np.testing.assert_array_equal(actual, expected, err_msg=name)
        return
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=name)


_CACHE = {}


def _results(backend, table_name, grads, monkeypatch):
    """Each table's program runs once per back end and kind (values or gradients)."""
    key = (backend, table_name, grads)
    if key not in _CACHE:
        table = {"elementwise": ELEMENTWISE, "special": SPECIAL, "nn": NN}[table_name]
        rows = _rows(table, (lambda r: r.grad_args is not None) if grads else (lambda r: True))
        _CACHE[key] = _run(backend, rows, grads, monkeypatch)
    return _CACHE[key]


# -- values against NumPy and SciPy ----------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise_values_match_numpy(backend, monkeypatch):
    results = _results(backend, "elementwise", False, monkeypatch)
    for row in ELEMENTWISE:
        with np.errstate(all="ignore"):
            expected = _reference(row)(*row.args)
        _assert_values(results[row.name], expected, row.rtol, row.name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_special_values_match_scipy(backend, monkeypatch):
    _sp()
    results = _results(backend, "special", False, monkeypatch)
    for row in SPECIAL:
        with np.errstate(all="ignore"):
            expected = _reference(row)(*row.args)
        _assert_values(results[row.name], expected, row.rtol, row.name, atol=1e-14)


def test_signs_of_zeros_and_halves():
    """round halves to even, keeping the sign of a zero; floor, ceil and cbrt keep it too."""
    x = qb.array([-0.5, 0.5, 1.5, 2.5, -2.5, -0.0, -0.4])
    for f in (qb.jit(qb.round), qb.round):
        assert np.array_equal(np.signbit(np.asarray(f(x))), np.signbit(np.round(np.asarray(x))))
        assert np.asarray(f(x)).tolist() == [-0.0, 0.0, 2.0, 2.0, -2.0, -0.0, -0.0]
    for f, ref in ((qb.ceil, np.ceil), (qb.floor, np.floor), (qb.cbrt, np.cbrt)):
        got = np.asarray(qb.jit(f)(x))
        assert np.array_equal(np.signbit(got), np.signbit(ref(np.asarray(x))))


# -- the conventions at poles and kinks ------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_conventions_at_poles_and_kinks(backend, monkeypatch):
    """digamma is NaN at its poles (JAX's; SciPy gives -inf at 0), polygamma +inf (odd n) or
    NaN (even n) there; clip's derivative at a bound is 1/2 to x and 1/2 to the bound (JAX's);
    hypot's gradient at the origin is 0 (``norm``'s convention; JAX gives 1/2); floor, ceil,
    round and floor_divide have zero derivatives; remainder's derivative in y is -floor(x/y)."""
    if backend == "interpret":
        monkeypatch.setenv("QUABLA_BACKEND", "interpret")
    else:
        monkeypatch.delenv("QUABLA_BACKEND", raising=False)
    poles = qb.array([0.0, -0.0, -1.0, -3.0])

    def program(poles, x, lo, hi, a, b):
        return {
            "digamma": qb.special.digamma(poles),
            "trigamma": qb.special.polygamma(1, poles),
            "tetragamma": qb.special.polygamma(2, poles),
            "gammaln": qb.special.gammaln(poles),
            "clip": qb.grad(lambda x, lo, hi: qb.sum(qb.clip(x, lo, hi)), argnums=(0, 1, 2))(x, lo, hi),
            "hypot": qb.grad(lambda a, b: qb.hypot(a, b), argnums=(0, 1))(a, b),
            "steps": qb.grad(lambda x: qb.sum(qb.floor(x) + qb.ceil(x) + qb.round(x)
                                              + x // 0.5))(x),
            "remainder": qb.grad(lambda x, y: qb.sum(x % y), argnums=(0, 1))(x, lo + 3.5),
        }

    x = qb.array([-1.0, 2.0, 0.5, -3.0])
    lo, hi = qb.array([-1.0, -1.0, -1.0, -1.0]), qb.array([2.0, 2.0, 2.0, 2.0])
    out = qb.jit(program)(poles, x, lo, hi, qb.array(0.0), qb.array(0.0))
    assert np.isnan(np.asarray(out["digamma"])).all()
    assert np.asarray(out["trigamma"]).tolist() == [inf] * 4
    assert np.isnan(np.asarray(out["tetragamma"])).all()
    assert np.asarray(out["gammaln"]).tolist() == [inf] * 4
    gx, glo, ghi = (np.asarray(g).tolist() for g in out["clip"])
    assert gx == [0.5, 0.5, 1.0, 0.0] and glo == [0.5, 0.0, 0.0, 1.0] and ghi == [0.0, 0.5, 0.0, 0.0]
    assert [float(g) for g in out["hypot"]] == [0.0, 0.0]
    assert np.asarray(out["steps"]).tolist() == [0.0] * 4
    gx, gy = (np.asarray(g).tolist() for g in out["remainder"])
    assert gx == [1.0] * 4 and gy == (-np.floor(np.asarray(x) / 2.5)).tolist()


def test_polygamma_chain_and_errors():
    """gammaln'' == digamma' == polygamma(1) and onwards, to any order; bad orders raise."""
    x = qb.array(1.7)
    g1 = qb.grad(qb.special.gammaln)
    g2 = qb.grad(g1)
    g3 = qb.grad(g2)
    assert float(g1(x)) == pytest.approx(float(qb.special.digamma(x)), rel=1e-15)
    assert float(g2(x)) == pytest.approx(float(qb.special.polygamma(1, x)), rel=1e-15)
    assert float(g3(x)) == pytest.approx(float(qb.special.polygamma(2, x)), rel=1e-15)
    assert float(qb.jit(g3)(x)) == pytest.approx(float(qb.special.polygamma(2, x)), rel=1e-13)
    with pytest.raises(ValueError):
        qb.special.polygamma(-1, x)
    with pytest.raises(TypeError):
        qb.special.polygamma(1.5, x)
    assert np.isnan(float(qb.special.polygamma(1, qb.array(-2e5 + 0.5))))


def test_reductions_and_exports():
    a, b = np.array([1.0, 2.0, nan]), np.array([1.0 + 1e-9, 2.0, nan])
    f = qb.jit(lambda a, b: (qb.allclose(a, b), qb.allclose(a, b, equal_nan=True),
                             qb.array_equal(a, a), qb.array_equal(a, a, equal_nan=True),
                             qb.array_equal(a[:2], b[:2])))
    for fn in (f, f.__wrapped__):  # compiled and eager
        got = [bool(v) for v in fn(qb.array(a), qb.array(b))]
        assert got == [np.allclose(a, b), np.allclose(a, b, equal_nan=True),
                       np.array_equal(a, a), np.array_equal(a, a, equal_nan=True),
                       np.array_equal(a[:2], b[:2])]
    assert bool(qb.array_equal(qb.ones(2), qb.ones(3))) is False
    assert bool(qb.array_equal(qb.array([True, False]), qb.array([1.0, 0.0])))
    assert qb.round is qb.around and "round" not in qb.__all__ and "around" in qb.__all__
    names = ["clip", "floor", "ceil", "around", "mod", "remainder", "floor_divide", "isinf",
             "isclose", "allclose", "array_equal", "nan_to_num", "reciprocal", "tan", "arcsin",
             "arccos", "arctan", "arctan2", "sinh", "cosh", "arcsinh", "arccosh", "arctanh",
             "log2", "log10", "exp2", "cbrt", "hypot", "logaddexp", "nn", "special"]
    assert set(names) <= set(qb.__all__)
    assert set(qb.nn.__all__) <= set(dir(qb.nn)) and set(qb.special.__all__) <= set(dir(qb.special))
    x = qb.array([1.25, -2.5])
    assert np.asarray(x.round()).tolist() == [1.0, -2.0]
    assert np.asarray(x.clip(-1.0, 1.0)).tolist() == [1.0, -1.0]


# -- against JAX: values and gradients under jit, x64 ----------------------------------------

@pytest.fixture(scope="module")
def jax_modules():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.nn as jnn
    import jax.numpy as jnp
    import jax.scipy.special as jsp

    return {"jax": jax, "jnp": jnp, "jsp": jsp, "jnn": jnn}


def _jax_results(jax_modules, rows, grads):
    jax = jax_modules["jax"]
    fns = {name: eval(row.jax, dict(jax_modules)) for name, row in rows.items()}  # our table

    def program(inputs):
        out = {}
        for name, row in rows.items():
            if grads:
                n = len(row.grad_args)
                out[name] = jax.grad(lambda *a, f=fns[name]: jax.numpy.sum(f(*a)),
                                     argnums=tuple(range(n)))(*inputs[name])
            else:
                out[name] = fns[name](*inputs[name])
        return out

    inputs = {name: tuple(jax.numpy.asarray(a) for a in (row.grad_args if grads else row.args))
              for name, row in rows.items()}
    result = jax.jit(program)(inputs)
    return {k: (tuple(np.asarray(x) for x in v) if isinstance(v, tuple) else np.asarray(v))
            for k, v in result.items()}


# rows whose values differ from JAX's at some of the table's points: JAX's polygamma is NaN
# at +inf (SciPy and we: 0) and only 1e-7 accurate at -7.3 (SciPy agrees with us there)
_JAX_VALUE_SKIP = {"polygamma-1", "polygamma-3"}


@pytest.mark.parametrize("table", ["elementwise", "special"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_values_match_jax(backend, table, jax_modules, monkeypatch):
    rows = _rows({"elementwise": ELEMENTWISE, "special": SPECIAL}[table],
                 lambda r: r.name not in _JAX_VALUE_SKIP)
    ours = _results(backend, table, False, monkeypatch)
    theirs = _jax_results(jax_modules, rows, False)
    for name, row in rows.items():
        _assert_values(ours[name], theirs[name], max(row.rtol, 1e-12), name, atol=1e-13)


@pytest.mark.parametrize("table", ["elementwise", "special", "nn"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_match_jax(backend, table, jax_modules, monkeypatch):
    rows = _rows({"elementwise": ELEMENTWISE, "special": SPECIAL, "nn": NN}[table],
                 lambda r: r.grad_args is not None)
    ours = _results(backend, table, True, monkeypatch)
    theirs = _jax_results(jax_modules, rows, True)
    for name in rows:
        for k, (a, e) in enumerate(zip(ours[name], theirs[name])):
            assert np.isfinite(a).all() == np.isfinite(e).all(), name
            np.testing.assert_allclose(a, e, rtol=1e-11, atol=1e-13, err_msg=f"{name} d{k}")


# -- qb.nn ----------------------------------------------------------------------------------

def _np_softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _np_log_softmax(x, axis):
    s = x - np.max(x, axis=axis, keepdims=True)
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def _np_erf(x):
    return np.vectorize(math.erf)(x)


MATRIX = np.array([[0.5, -1.2, 2.0], [1e3, 1e3 - 2.0, 999.5]])
MATRIX_GRAD = np.array([[0.5, -1.2, 2.0], [3.0, 1.0, -0.4]])
ACT = _a(-3.0, -1.0, -0.3, 0.0, 0.2, 1.0, 5.9, 6.0, 7.5, 40.0, -40.0)
ACT_GRAD = _a(-3.0, -1.0, -0.3, 0.0, 0.2, 1.0, 5.9, 6.0, 7.5)

NN = [
    Row("relu", qb.nn.relu, lambda x: np.maximum(x, 0.0), "jnn.relu", (ACT,), (ACT_GRAD,)),
    Row("relu6", qb.nn.relu6, lambda x: np.clip(x, 0.0, 6.0), "jnn.relu6", (ACT,), (ACT_GRAD,)),
    Row("leaky_relu", lambda x: qb.nn.leaky_relu(x, 0.2),
        lambda x: np.where(x >= 0, x, 0.2 * x), "lambda x: jnn.leaky_relu(x, 0.2)", (ACT,),
        (ACT_GRAD,)),
    Row("elu", lambda x: qb.nn.elu(x, 1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(x)),
        "lambda x: jnn.elu(x, 1.5)", (ACT,), (ACT_GRAD,)),
    Row("selu", qb.nn.selu,
        lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)),
        "jnn.selu", (ACT,), (ACT_GRAD,)),
    Row("gelu", qb.nn.gelu,
        lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
        "jnn.gelu", (ACT,), (ACT_GRAD,)),
    Row("gelu-exact", lambda x: qb.nn.gelu(x, approximate=False),
        lambda x: 0.5 * x * (1 + _np_erf(x / np.sqrt(2))),
        "lambda x: jnn.gelu(x, approximate=False)", (ACT,), (ACT_GRAD,)),
    Row("silu", qb.nn.silu, lambda x: x / (1 + np.exp(-x)), "jnn.silu", (ACT,), (ACT_GRAD,)),
    Row("swish", qb.nn.swish, lambda x: x / (1 + np.exp(-x)), "jnn.swish", (ACT,), (ACT_GRAD,)),
    Row("softplus", qb.nn.softplus, lambda x: np.logaddexp(x, 0.0), "jnn.softplus", (ACT,),
        (ACT_GRAD,)),
    Row("sigmoid", qb.nn.sigmoid, lambda x: 1 / (1 + np.exp(-x)), "jnn.sigmoid", (ACT,),
        (ACT_GRAD,)),
    Row("log_sigmoid", qb.nn.log_sigmoid, lambda x: -np.logaddexp(-x, 0.0), "jnn.log_sigmoid",
        (ACT,), (ACT_GRAD,)),
    Row("tanh", qb.nn.tanh, np.tanh, "jnn.tanh", (ACT,), (ACT_GRAD,)),
    Row("softmax", qb.nn.softmax, lambda x: _np_softmax(x, -1), "jnn.softmax", (MATRIX,),
        (MATRIX_GRAD * np.array([[1.0], [2.0]]),)),
    Row("softmax-axis0", lambda x: qb.nn.softmax(x, axis=0) * x,
        lambda x: _np_softmax(x, 0) * x, "lambda x: jnn.softmax(x, axis=0) * x", (MATRIX,),
        (MATRIX_GRAD,)),
    Row("softmax-where", lambda x: qb.nn.softmax(x, where=np.array([True, False, True])) * x,
        lambda x: np.where([True, False, True], _np_softmax(np.where([True, False, True], x, -np.inf), -1), 0.0) * x,
        "lambda x: jnn.softmax(x, where=jnp.array([True, False, True])) * x", (MATRIX,),
        (MATRIX_GRAD,)),
    Row("log_softmax", lambda x: qb.nn.log_softmax(x) * x, lambda x: _np_log_softmax(x, -1) * x,
        "lambda x: jnn.log_softmax(x) * x", (MATRIX,), (MATRIX_GRAD,)),
    Row("log_softmax-axes", lambda x: qb.nn.log_softmax(x, axis=(0, 1)),
        lambda x: _np_log_softmax(x, (0, 1)), "lambda x: jnn.log_softmax(x, axis=(0, 1))",
        (MATRIX_GRAD,), (MATRIX_GRAD,)),
    Row("logsumexp", lambda x: qb.nn.logsumexp(x, axis=-1, keepdims=True),
        lambda x: _logsumexp_rows(x)[:, None],
        "lambda x: jnn.logsumexp(x, axis=-1, keepdims=True)", (MATRIX,), (MATRIX,)),
    Row("logsumexp-b", lambda x: qb.special.logsumexp(x, b=qb.astype([0.5, 2.0, 0.0], x.dtype)),
        lambda x: np.log(np.sum(np.exp(x) * [0.5, 2.0, 0.0])),
        "lambda x: jsp.logsumexp(x, b=jnp.array([0.5, 2.0, 0.0]))", (MATRIX_GRAD,),
        (MATRIX_GRAD,)),
    Row("logsumexp-sign", lambda x: qb.special.logsumexp(
        x, axis=0, b=qb.astype([[1.0, -1.0, 1.0]], x.dtype), return_sign=True)[1] * x[0],
        lambda x: np.sign(np.sum(np.exp(x) * [[1.0, -1.0, 1.0]], axis=0)) * x[0],
        "lambda x: jsp.logsumexp(x, axis=0, b=jnp.array([[1.0, -1.0, 1.0]]), return_sign=True)[1] * x[0]",
        (MATRIX_GRAD,), (MATRIX_GRAD,)),
    Row("one_hot", lambda x: qb.nn.one_hot(x, 4), lambda x: (x[:, None] == np.arange(4)) * 1.0,
        "lambda x: jnn.one_hot(x, 4)", (_a(0.0, 3.0, 1.0, 4.0, -1.0, 1.5),)),
    Row("one_hot-axis0", lambda x: qb.nn.one_hot(x, 3, axis=0),
        lambda x: (x[None, :] == np.arange(3)[:, None]) * 1.0,
        "lambda x: jnn.one_hot(x, 3, axis=0)", (_a(0.0, 2.0, 1.0, 2.0),)),
    Row("standardize", qb.nn.standardize,
        lambda x: (x - x.mean(-1, keepdims=True))
        / np.sqrt((x * x).mean(-1, keepdims=True) - x.mean(-1, keepdims=True) ** 2 + 1e-5),
        "jnn.standardize", (MATRIX_GRAD,), (MATRIX_GRAD,)),
    Row("standardize-axis0", lambda x: qb.nn.standardize(x, axis=0, epsilon=0.1) * x,
        lambda x: (x - x.mean(0)) / np.sqrt((x * x).mean(0) - x.mean(0) ** 2 + 0.1) * x,
        "lambda x: jnn.standardize(x, axis=0, epsilon=0.1) * x", (MATRIX_GRAD,), (MATRIX_GRAD,)),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_nn_values(backend, monkeypatch):
    results = _results(backend, "nn", False, monkeypatch)
    for row in NN:
        with np.errstate(all="ignore"):
            expected = row.reference(*row.args)
        _assert_values(results[row.name], expected, 1e-12, row.name, atol=1e-12)


@pytest.mark.filterwarnings("ignore:jax.nn.one_hot input should be integer:DeprecationWarning")
@pytest.mark.parametrize("backend", BACKENDS)
def test_nn_values_match_jax(backend, jax_modules, monkeypatch):
    rows = _rows(NN)
    ours = _results(backend, "nn", False, monkeypatch)
    theirs = _jax_results(jax_modules, rows, False)
    for name in rows:
        _assert_values(ours[name], theirs[name], 1e-12, name, atol=1e-12)


def test_stable_reductions_have_finite_gradients():
    """Large logits: softmax, log_softmax and logsumexp stay finite, values and gradients."""
    x = qb.array([[1e4, 1e4 + 1.0, -1e4], [-inf, 0.0, 1.0]])
    for f in (lambda x: qb.sum(qb.nn.softmax(x) * qb.array([[1.0, 2.0, 3.0]])), lambda x: qb.sum(qb.nn.log_softmax(x)[:, 1:]),
              lambda x: qb.sum(qb.nn.logsumexp(x, axis=1)),
              lambda x: qb.sum(qb.logaddexp(x[0], x[1]))):
        value, grad = qb.jit(qb.value_and_grad(f))(x)
        assert np.isfinite(float(value)), f
        assert np.isfinite(np.asarray(grad)).all(), f
    assert float(qb.special.logsumexp(qb.array([-inf, -inf]))) == -inf
    assert np.isnan(float(qb.special.logsumexp(qb.array([1.0, 2.0]), b=qb.array([1.0, -3.0]))))


# -- MLX: the tables' composites and primitives in float32 ----------------------------------

@pytest.mark.parametrize("table", ["elementwise", "special", "nn"])
def test_mlx_matches_in_float32(table, monkeypatch):
    """Each table's values and gradients at its interior points, as one float32 MLX program,
    against the float64 interpreter on the same (float32-rounded) points."""
    pytest.importorskip("mlx.core")
    if "mlx" not in qb.devices():
        pytest.skip("no MLX device")
    monkeypatch.delenv("QUABLA_BACKEND", raising=False)
    rows = _rows({"elementwise": ELEMENTWISE, "special": SPECIAL, "nn": NN}[table],
                 lambda r: r.grad_args is not None
                 and all(np.isfinite(a).all() for a in r.grad_args))
    values, grads = _program(rows), _program(rows, grads=True)
    points = {name: tuple(np.float32(a).astype(np.float64) for a in row.grad_args)
              for name, row in rows.items()}

    def both(inputs):
        return values(inputs), grads(inputs)

    as32 = {k: tuple(qb.array(a, dtype=qb.float32) for a in v) for k, v in points.items()}
    as64 = {k: tuple(qb.array(a) for a in v) for k, v in points.items()}
    ours = qb.jit(both, device="mlx")(as32)
    monkeypatch.setenv("QUABLA_BACKEND", "interpret")
    expected = qb.jit(both)(as64)
    for got, want in zip(qb.tree.flatten(ours)[0], qb.tree.flatten(expected)[0]):
        got, want = np.asarray(got), np.asarray(want)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
