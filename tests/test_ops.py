"""Tests for the eager module-level ops, the operators and the dtype rules (spec 000 §3.2).

Every op is checked against NumPy; hypothesis draws shapes (broadcasting, axes) and values.
"""

import builtins
import math
import operator
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import quabla as qb

FLOATS = [qb.float64, qb.float32]
TOL = {qb.float64: dict(rtol=1e-12, atol=1e-12), qb.float32: dict(rtol=2e-5, atol=1e-5)}
SETTINGS = settings(max_examples=25, deadline=None)


def check(result, expected, dtype=None, exact=False):
    """``result`` is an immutable Tensor matching the NumPy value ``expected`` in shape and dtype."""
    expected = np.asarray(expected)
    dtype = dtype or qb.dtypes.dtype(expected.dtype)
    assert isinstance(result, qb.Tensor), type(result)
    assert result.dtype is dtype, (result.dtype, dtype)
    assert result.shape == expected.shape, (result.shape, expected.shape)
    assert not result.numpy().flags.writeable
    if exact or dtype is qb.bool_:
        np.testing.assert_array_equal(result.numpy(), expected.astype(dtype.numpy))
    else:
        np.testing.assert_allclose(result.numpy(), expected, equal_nan=True, **TOL[dtype])


def values(dtype, shape, lo=-10.0, hi=10.0):
    """A strategy for finite NumPy arrays of a Quabla float dtype in [lo, hi]."""
    width = 8 * dtype.itemsize
    lo, hi = (float(np.array(v, dtype.numpy)) for v in (lo, hi))  # representable bounds
    elements = st.floats(lo, hi, width=width, allow_nan=False, allow_infinity=False)
    return hnp.arrays(dtype.numpy, shape, elements=elements)


SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)
PAIRS = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 30.0, -30.0, 1e-300])


def with_errstate(fn):
    def reference(*args):
        with np.errstate(all="ignore"):
            return fn(*args)
    return reference


# -- unary elementwise ------------------------------------------------------------------------

UNARY = {
    "sin": (qb.sin, np.sin, None),
    "cos": (qb.cos, np.cos, None),
    "tanh": (qb.tanh, np.tanh, None),
    "exp": (qb.exp, np.exp, (-20.0, 20.0)),
    "log": (qb.log, np.log, (1e-3, 1e3)),
    "sqrt": (qb.sqrt, np.sqrt, (0.0, 1e3)),
    "abs": (qb.abs, np.abs, None),
    "negative": (qb.negative, np.negative, None),
    "relu": (qb.relu, lambda x: np.maximum(x, 0), None),
    "sigmoid": (qb.sigmoid, lambda x: 1 / (1 + np.exp(-x)), None),
    "softplus": (qb.softplus, lambda x: np.logaddexp(0, x), None),
    "log1p": (qb.log1p, np.log1p, (-0.9, 1e3)),
    "expm1": (qb.expm1, np.expm1, (-20.0, 20.0)),
    "sign": (qb.sign, np.sign, None),
    "square": (qb.square, np.square, None),
}
METHODS = ["sin", "cos", "exp", "log", "tanh", "sqrt", "relu", "sigmoid", "softplus"]


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", FLOATS)
@SETTINGS
@given(data=st.data())
def test_unary_matches_numpy(name, dtype, data):
    fn, reference, domain = UNARY[name]
    x = data.draw(values(dtype, SHAPES, *(domain or (-10.0, 10.0))))
    check(fn(qb.array(x)), reference(x).astype(dtype.numpy), dtype)
    if name in METHODS:
        check(getattr(qb.array(x), name)(), reference(x).astype(dtype.numpy), dtype)


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_special_values(name, dtype):
    fn, reference, _ = UNARY[name]
    x = SPECIAL.astype(dtype.numpy)
    check(fn(qb.array(x)), with_errstate(reference)(x).astype(dtype.numpy), dtype)


@pytest.mark.parametrize("name", UNARY)
def test_unary_accepts_python_scalars_and_lists(name):
    fn, reference, _ = UNARY[name]
    check(fn(0.5), reference(np.float64(0.5)), qb.float64)
    check(fn([0.25, 0.5]), reference(np.array([0.25, 0.5])), qb.float64)


def test_relu_has_no_nan_surprises():
    check(qb.relu(qb.array([np.nan, -0.0, -1.0, 2.0])), [np.nan, 0.0, 0.0, 2.0])


@pytest.mark.parametrize("fn, reference", [(qb.isfinite, np.isfinite), (qb.isnan, np.isnan)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_isfinite_isnan(fn, reference, dtype):
    x = SPECIAL.astype(dtype.numpy)
    check(fn(qb.array(x)), reference(x), qb.bool_)


# -- binary elementwise -----------------------------------------------------------------------

BINARY = {
    "add": (qb.add, operator.add, np.add),
    "subtract": (qb.subtract, operator.sub, np.subtract),
    "multiply": (qb.multiply, operator.mul, np.multiply),
    "divide": (qb.divide, operator.truediv, np.divide),
    "maximum": (qb.maximum, None, np.maximum),
    "minimum": (qb.minimum, None, np.minimum),
    "power": (qb.power, operator.pow, np.power),
}
COMPARISONS = {
    "greater": (qb.greater, operator.gt, np.greater),
    "greater_equal": (qb.greater_equal, operator.ge, np.greater_equal),
    "less": (qb.less, operator.lt, np.less),
    "less_equal": (qb.less_equal, operator.le, np.less_equal),
    "equal": (qb.equal, None, np.equal),
    "not_equal": (qb.not_equal, None, np.not_equal),
}
LOGICAL = {
    "logical_and": (qb.logical_and, operator.and_, np.logical_and),
    "logical_or": (qb.logical_or, operator.or_, np.logical_or),
}


def _binary_operands(data, dtype, name):
    shapes = data.draw(PAIRS).input_shapes
    lo = 0.1 if name == "power" else -10.0  # real powers need a positive base
    x = data.draw(values(dtype, shapes[0], lo, 10.0))
    y = data.draw(values(dtype, shapes[1], -3.0 if name == "power" else -10.0, 10.0))
    return x, y


@pytest.mark.parametrize("name", {**BINARY, **COMPARISONS})
@pytest.mark.parametrize("dtype", FLOATS)
@SETTINGS
@given(data=st.data())
def test_binary_broadcasting_matches_numpy(name, dtype, data):
    fn, op, reference = {**BINARY, **COMPARISONS}[name]
    x, y = _binary_operands(data, dtype, name)
    expected = with_errstate(reference)(x, y)
    out_dtype = qb.bool_ if name in COMPARISONS else dtype
    tx, ty = qb.array(x), qb.array(y)
    check(fn(tx, ty), expected, out_dtype)
    check(fn(x, ty), expected, out_dtype)  # NumPy operands are imported
    if op is not None:
        check(op(tx, ty), expected, out_dtype)
        check(op(x, ty), expected, out_dtype)  # the reflected operator of a Tensor wins
        check(op(tx, y), expected, out_dtype)


@pytest.mark.parametrize("name", {**BINARY, **COMPARISONS})
@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_special_values(name, dtype):
    fn, _, reference = {**BINARY, **COMPARISONS}[name]
    x = SPECIAL.astype(dtype.numpy)
    out_dtype = qb.bool_ if name in COMPARISONS else dtype
    expected = with_errstate(reference)(x[:, None], x[None, :])
    check(fn(qb.array(x[:, None]), qb.array(x[None, :])), expected, out_dtype)


@pytest.mark.parametrize("name", {**BINARY, **COMPARISONS})
@pytest.mark.parametrize("scalar", [2.0, 3, -0.5])
def test_binary_with_python_scalars(name, scalar):
    fn, op, reference = {**BINARY, **COMPARISONS}[name]
    reference = with_errstate(reference)
    x = np.array([0.5, 1.0, 4.0])
    out_dtype = qb.bool_ if name in COMPARISONS else qb.float64
    calls = [fn] if op is None else [fn, op]
    for call in calls:
        check(call(qb.array(x), scalar), reference(x, float(scalar)), out_dtype)
        check(call(scalar, qb.array(x)), reference(float(scalar), x), out_dtype)
    check(fn(scalar, scalar), reference(float(scalar), float(scalar)), out_dtype)


@pytest.mark.parametrize("name", LOGICAL)
@SETTINGS
@given(data=st.data())
def test_logical_ops(name, data):
    fn, op, reference = LOGICAL[name]
    shapes = data.draw(PAIRS).input_shapes
    x, y = (data.draw(hnp.arrays(bool, s)) for s in shapes)
    tx, ty = qb.array(x), qb.array(y)
    for result in (fn(tx, ty), op(tx, ty), op(tx, y), op(x, ty), fn(x, y)):
        check(result, reference(x, y), qb.bool_)
    check(op(tx, True), reference(x, True), qb.bool_)
    check(op(False, ty), reference(False, y), qb.bool_)
    check(qb.logical_not(tx), ~x, qb.bool_)
    check(~tx, ~x, qb.bool_)


def test_equality_of_bools():
    x, y = np.array([True, False, True]), np.array([True, True, False])
    check(qb.equal(qb.array(x), qb.array(y)), x == y, qb.bool_)
    check(qb.not_equal(qb.array(x), y), x != y, qb.bool_)


def test_operators_misc():
    x = np.array([[1.0, -2.0], [3.0, 0.5]])
    t = qb.array(x)
    check(-t, -x)
    assert +t is t
    check(abs(t), np.abs(x))
    check(t @ t, x @ x)
    check(x @ t, x @ x)
    check(t.T, x.T)
    for op, reference in ((operator.sub, np.subtract), (operator.truediv, np.divide),
                          (operator.pow, np.power), (operator.add, np.add)):
        check(op(2.0, t), with_errstate(reference)(2.0, x))
        check(op(2, t), with_errstate(reference)(2.0, x))
    with pytest.raises(TypeError):
        t + object()
    with pytest.raises(TypeError):
        t + "1"


# -- dtype rules ------------------------------------------------------------------------------

TWO_ARRAY_OPS = {
    "add": qb.add, "subtract": qb.subtract, "multiply": qb.multiply, "divide": qb.divide,
    "power": qb.power, "maximum": qb.maximum, "minimum": qb.minimum, "greater": qb.greater,
    "less_equal": qb.less_equal, "equal": qb.equal, "matmul": qb.matmul,
    "solve": qb.solve, "where": lambda x, y: qb.where(qb.ones(2, dtype=qb.bool_), x, y),
    "concat": lambda x, y: qb.concat([x, y]), "stack": lambda x, y: qb.stack([x, y]),
    "einsum": lambda x, y: qb.einsum("i,i->", x, y),
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "**": operator.pow, "@": operator.matmul, "<": operator.lt, ">=": operator.ge,
}


@pytest.mark.parametrize("name", TWO_ARRAY_OPS)
@pytest.mark.parametrize("first", FLOATS)
def test_mixed_float_dtypes_raise_and_name_astype(name, first):
    x = qb.array([[2.0, 0.0], [1.0, 3.0]] if name == "solve" else [1.0, 2.0], dtype=first)
    y = qb.array([1.0, 2.0], dtype=qb.float32 if first is qb.float64 else qb.float64)
    with pytest.raises(TypeError, match="astype"):
        TWO_ARRAY_OPS[name](x, y)


WEAK_CASES = {
    "t * 2.0": lambda t: t * 2.0,
    "2.0 * t": lambda t: 2.0 * t,
    "t + 1": lambda t: t + 1,
    "2.0 - t": lambda t: 2.0 - t,
    "1 / t": lambda t: 1 / t,
    "t ** 2": lambda t: t ** 2,
    "t ** 2.5": lambda t: t ** 2.5,
    "t ** -1": lambda t: t ** -1,
    "2.0 ** t": lambda t: 2.0 ** t,
    "maximum(t, 0.0)": lambda t: qb.maximum(t, 0.0),
    "minimum(1, t)": lambda t: qb.minimum(1, t),
    "power(t, 3)": lambda t: qb.power(t, 3),
    "where(c, t, 0.0)": lambda t: qb.where(t > 0.5, t, 0.0),
    "where(c, 1.0, 2.0) * t": lambda t: qb.where(t > 0.5, 1.0, 2.0) * t,
    "mean": qb.mean,
    "norm": qb.norm,
    "relu": qb.relu,
    "softplus": qb.softplus,
    "sigmoid": qb.sigmoid,
}


@pytest.mark.parametrize("case", WEAK_CASES.values(), ids=WEAK_CASES.keys())
@pytest.mark.parametrize("dtype", FLOATS)
def test_python_scalars_are_weak(case, dtype):
    t = qb.array([0.25, 1.0, 2.0], dtype=dtype)
    expected = case(t.astype(qb.float64)).numpy().astype(dtype.numpy)
    check(case(t), expected, dtype)


def test_python_scalars_alone_give_float64():
    assert qb.add(1.0, 2).dtype is qb.float64
    assert qb.power(2, 3).dtype is qb.float64
    assert qb.sum([1, 2, 3]).dtype is qb.float64


BOOL_REJECTED = {
    **{name: fn for name, (fn, _, _) in UNARY.items()},
    **{name: (lambda f: lambda b: f(b, qb.ones(2)))(fn) for name, (fn, _, _) in BINARY.items()},
    **{f"{name} (bool, bool)": (lambda f: lambda b: f(b, b))(fn) for name, (fn, _, _) in BINARY.items()},
    "t + True": lambda b: qb.ones(2) + True,
    "True * t": lambda b: True * qb.ones(2),
    "t ** True": lambda b: qb.ones(2) ** True,
    "b ** 2": lambda b: b ** 2,
    "2.0 ** b": lambda b: 2.0 ** b,
    "b + 1.0": lambda b: b + 1.0,
    "-b": operator.neg,
    "max with initial": lambda b: qb.max(b, initial=False),  # (without: NumPy's any/all)
    "norm": qb.norm,
    "matmul": lambda b: qb.matmul(b, b),
    "isnan": qb.isnan, "isfinite": qb.isfinite,
    "solve": lambda b: qb.solve(qb.array([[True, False], [False, True]]), b),
    "cholesky": lambda b: qb.cholesky(qb.array([[True, False], [False, True]])),
    "einsum": lambda b: qb.einsum("i,i->", b, b),
}


@pytest.mark.parametrize("fn", BOOL_REJECTED.values(), ids=BOOL_REJECTED.keys())
def test_math_rejects_bool_operands(fn):
    with pytest.raises(TypeError):
        fn(qb.array([True, False]))


def test_sums_of_bool_arrays_count():
    """NumPy's (and JAX's) behaviour: a sum or mean of booleans counts the true ones."""
    mask = qb.array([True, False, True])
    assert qb.sum(mask).dtype is qb.float64 and qb.sum(mask).item() == 2.0
    assert qb.mean(mask).item() == pytest.approx(2 / 3)
    assert qb.jit(lambda m: qb.sum(m))(mask).item() == 2.0


@pytest.mark.parametrize("fn", [
    lambda f: qb.logical_and(f, f), lambda f: qb.logical_or(f, True), qb.logical_not,
    lambda f: f & f, lambda f: ~f, lambda f: qb.array([True, False]) | f,
    lambda f: qb.array([True, False]) & 1.0,
    lambda f: qb.where(f, 1.0, 0.0),
])
def test_logical_ops_need_bool_operands(fn):
    with pytest.raises(TypeError):
        fn(qb.array([1.0, 0.0]))


def test_error_messages_use_public_names():
    with pytest.raises(TypeError, match="quabla.multiply"):
        qb.ones(2, qb.float32) * qb.ones(2)
    with pytest.raises(TypeError, match="quabla.max "):
        qb.max(qb.array([True]), initial=False)
    with pytest.raises(ValueError, match="quabla.power"):
        qb.ones(2) ** qb.ones(3)


# -- Pow (slice S1b) --------------------------------------------------------------------------

INF, NAN = math.inf, math.nan
POW_TABLE = [  # (x, y, x ** y) under IEEE 754 pow / f64::powf
    (-8.0, 1 / 3, NAN), (-2.0, 0.5, NAN), (-0.5, -2.5, NAN), (-INF, 0.5, INF),
    (-2.0, 3.0, -8.0), (-2.0, 2.0, 4.0), (-2.0, -1.0, -0.5), (-1.0, INF, 1.0), (-1.0, -INF, 1.0),
    (0.0, 0.0, 1.0), (-0.0, 0.0, 1.0), (NAN, 0.0, 1.0), (NAN, -0.0, 1.0), (INF, 0.0, 1.0),
    (1.0, NAN, 1.0), (1.0, INF, 1.0), (NAN, 1.0, NAN), (2.0, NAN, NAN), (NAN, NAN, NAN),
    (0.0, -1.0, INF), (-0.0, -1.0, -INF), (-0.0, -2.0, INF), (0.0, -0.5, INF), (0.0, -INF, INF),
    (0.0, 0.5, 0.0), (-0.0, 0.5, 0.0), (-0.0, 3.0, -0.0), (-0.0, 2.0, 0.0), (0.0, INF, 0.0),
    (INF, 2.0, INF), (INF, -1.0, 0.0), (-INF, 3.0, -INF), (-INF, 2.0, INF), (-INF, -1.0, -0.0),
    (-INF, -2.0, 0.0), (0.5, INF, 0.0), (2.0, INF, INF), (0.5, -INF, INF), (2.0, -INF, 0.0),
    (4.0, 0.5, 2.0), (2.0, -2.0, 0.25), (1e300, 2.0, INF),
]


def _assert_same_floats(result, expected):
    """Equal values, NaNs in the same places, and the same sign of zero (a NaN's sign is free)."""
    result = np.asarray(result)
    expected = np.asarray(expected, dtype=result.dtype)
    np.testing.assert_array_equal(result, expected)
    numbers = ~np.isnan(expected)
    np.testing.assert_array_equal(np.signbit(result[numbers]), np.signbit(expected[numbers]))


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow_ieee_table(dtype):
    xs, ys, expected = (np.array(col) for col in zip(*POW_TABLE))
    expected = expected.astype(dtype.numpy)
    if dtype is qb.float32:  # 1e300 is inf in float32 already
        with np.errstate(over="ignore"):
            xs = xs.astype(np.float32)
    tx, ty = qb.array(xs, dtype=dtype), qb.array(ys, dtype=dtype)
    for result in (tx ** ty, qb.power(tx, ty)):
        assert result.dtype is dtype
        _assert_same_floats(result, expected)
    for x, y, want in zip(xs, ys, expected):  # one at a time, 0-d and 1-d, with Python floats
        for shape in ((), (1,)):
            _assert_same_floats(qb.full(shape, x, dtype=dtype) ** float(y), np.full(shape, want))
            _assert_same_floats(float(x) ** qb.full(shape, y, dtype=dtype), np.full(shape, want))
            _assert_same_floats(qb.full(shape, x, dtype=dtype) ** qb.array(y, dtype=dtype),
                                np.full(shape, want))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 7, -1, -2, -3])
@pytest.mark.parametrize("dtype", FLOATS)
def test_integer_and_float_exponents_agree(n, dtype):
    x = np.array([-3.0, -1.5, -0.0, 0.0, 0.5, 2.0, 10.0, np.inf, -np.inf, np.nan], dtype.numpy)
    t = qb.array(x)
    by_int, by_float = t ** n, t ** float(n)
    assert by_int.dtype is by_float.dtype is dtype
    if n in (0, 1, -1):
        _assert_same_floats(by_int, by_float)
    elif n == 2:  # x * x is exact; pow may be one ulp off
        np.testing.assert_array_max_ulp(by_int.numpy(), by_float.numpy(), maxulp=1)
    else:
        np.testing.assert_allclose(by_int.numpy(), by_float.numpy(), equal_nan=True, rtol=1e-6)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(by_int.numpy(), np.power(x, float(n)), equal_nan=True, rtol=1e-6)
    check(qb.square(t), x * x, dtype, exact=True)


@SETTINGS
@given(data=st.data())
def test_int_and_float_square_agree(data):
    x = data.draw(values(qb.float64, SHAPES, -1e100, 1e100))
    by_int, by_float = (qb.array(x) ** 2).numpy(), (qb.array(x) ** 2.0).numpy()
    np.testing.assert_array_equal(by_int, x * x)
    np.testing.assert_array_max_ulp(by_int, by_float, maxulp=1)


@pytest.mark.parametrize("x_shape, y_shape", [
    ((3,), (1,)), ((3,), ()), ((1,), (3,)), ((), (3,)), ((2, 1), (1, 3)), ((1,), ()),
    ((2, 3), (3,)), ((4, 1, 3), (2, 1)),
])
@pytest.mark.parametrize("dtype", FLOATS)
def test_tensor_pow_tensor_broadcasts(x_shape, y_shape, dtype):
    x = np.linspace(0.5, 2.0, int(np.prod(x_shape))).reshape(x_shape).astype(dtype.numpy)
    y = np.linspace(-1.5, 2.5, int(np.prod(y_shape))).reshape(y_shape).astype(dtype.numpy)
    check(qb.array(x) ** qb.array(y), np.power(x, y), dtype)
    check(qb.power(x, qb.array(y)), np.power(x, y), dtype)


def test_single_element_exponent_is_never_unwrapped():
    t32 = qb.ones(3, dtype=qb.float32)
    for exponent in (qb.array([2.0]), qb.array(2.0)):  # strong float64 arrays, not scalars
        with pytest.raises(TypeError, match="astype"):
            t32 ** exponent
        with pytest.raises(TypeError, match="astype"):
            exponent ** t32
    with pytest.raises(TypeError):
        qb.ones(3) ** qb.array([True])


# -- reductions -------------------------------------------------------------------------------

REDUCTIONS = {
    "sum": (qb.sum, np.sum),
    "mean": (qb.mean, np.mean),
    "max": (qb.max, np.max),
    "min": (qb.min, np.min),
    "norm": (qb.norm, lambda x, axis=None, keepdims=False: np.sqrt(np.sum(x * x, axis, keepdims=keepdims))),
}


@st.composite
def reduction_args(draw, dtype):
    x = draw(values(dtype, SHAPES) if dtype is not qb.bool_ else hnp.arrays(bool, SHAPES))
    axis = draw(st.one_of(
        st.none(),
        st.integers(-x.ndim, x.ndim - 1) if x.ndim else st.none(),
        hnp.valid_tuple_axes(x.ndim),
    ))
    return x, axis, draw(st.booleans())


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("dtype", FLOATS)
@SETTINGS
@given(data=st.data())
def test_reductions_match_numpy(name, dtype, data):
    fn, reference = REDUCTIONS[name]
    x, axis, keepdims = data.draw(reduction_args(dtype))
    expected = np.asarray(reference(x, axis=axis, keepdims=keepdims), dtype=dtype.numpy)
    check(fn(qb.array(x), axis=axis, keepdims=keepdims), expected, dtype)
    check(fn(qb.array(x), axis, keepdims), expected, dtype)
    if name != "norm":
        check(getattr(qb.array(x), name)(axis=axis, keepdims=keepdims), expected, dtype)


@pytest.mark.parametrize("name, reference", [("any", np.any), ("all", np.all)])
@pytest.mark.parametrize("dtype", [qb.bool_, qb.float64])
@SETTINGS
@given(data=st.data())
def test_any_all_match_numpy(name, reference, dtype, data):
    x, axis, keepdims = data.draw(reduction_args(dtype))
    if dtype is not qb.bool_:
        x = np.where(np.abs(x) < 5, 0.0, x)  # plenty of zeros
    expected = reference(x, axis=axis, keepdims=keepdims)
    t = qb.array(x)
    check(getattr(qb, name)(t, axis=axis, keepdims=keepdims), expected, qb.bool_)
    check(getattr(t, name)(axis=axis, keepdims=keepdims), expected, qb.bool_)


def test_reductions_of_special_values():
    x = SPECIAL.reshape(1, -1)
    t = qb.array(x)
    check(qb.any(t), np.any(x), qb.bool_)
    check(qb.all(t, axis=0), np.all(x, axis=0), qb.bool_)
    with np.errstate(all="ignore"):
        for name, (fn, reference) in REDUCTIONS.items():
            check(fn(t, axis=1), reference(x, axis=1), qb.float64)
    check(qb.max(qb.array([1.0, np.nan, 2.0])), np.nan, qb.float64)


@pytest.mark.parametrize("fn", [qb.sum, qb.mean, qb.max, qb.min, qb.norm, qb.any, qb.all])
def test_reduction_axis_errors(fn):
    t = qb.ones((2, 3))
    for axis in (2, -3, (0, 0), (0, 5)):
        with pytest.raises(ValueError):
            fn(t, axis=axis)
    with pytest.raises(TypeError):
        fn(t, axis=1.0)


# -- static indexing ---------------------------------------------------------------------------

X = np.arange(60.0).reshape(3, 4, 5)
INDICES = [
    0, -1, 2, (1,), (0, 1), (-1, -2, -3), (1, 2, 3), np.int64(1),
    slice(1, None), slice(None, -1), slice(-2, None), slice(None, 100), slice(None, None, 2),
    (slice(None), 0), (slice(None), slice(1, 4, 2)), (slice(None), slice(None), slice(1, 5, 3)),
    (Ellipsis, 0), (Ellipsis, -1), (0, Ellipsis), (1, Ellipsis, 2), (Ellipsis,), Ellipsis,
    None, (None, 1), (slice(None), None, 0), (0, None, slice(None, None, 2)),
    (Ellipsis, None), (None, Ellipsis, None), (2, slice(1, 3), None, -1),
]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_static_indexing_matches_numpy(index):
    check(qb.array(X)[index], X[index], qb.float64, exact=True)
    check(qb.array(X > 20)[index], (X > 20)[index], qb.bool_)


@SETTINGS
@given(data=st.data())
def test_basic_indices_match_numpy(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4))
    index = data.draw(hnp.basic_indices(shape, allow_newaxis=True))
    x = np.arange(float(np.prod(shape))).reshape(shape)
    assume(x[index].size > 0)
    check(qb.array(x)[index], x[index], qb.float64, exact=True)


@pytest.mark.parametrize("index, exc", [
    (3, IndexError), (-4, IndexError), ((0, 0, 0, 0), IndexError), ((Ellipsis, Ellipsis), IndexError),
    (slice(5, None), IndexError), (slice(3, 0), IndexError),
    (qb.array([0.5]), TypeError), (qb.array(True), TypeError), ([0.5, 1], TypeError),
    (np.array(["a"]), TypeError), (True, TypeError), ((3, [0, 1]), IndexError),
    (np.zeros(3, dtype=bool), ValueError),
])
def test_indexing_errors(index, exc):
    with pytest.raises(exc):
        qb.array(X)[index]


# -- shapes and structure -----------------------------------------------------------------------

STRUCTURAL = {
    "reshape -1": (lambda t: qb.reshape(t, (4, -1)), lambda x: x.reshape(4, -1)),
    "reshape int": (lambda t: qb.reshape(t, 60), lambda x: x.reshape(60)),
    "reshape method": (lambda t: t.reshape(5, 12), lambda x: x.reshape(5, 12)),
    "reshape method tuple": (lambda t: t.reshape((2, 30)), lambda x: x.reshape(2, 30)),
    "reshape same": (lambda t: t.reshape(3, 4, 5), lambda x: x),
    "transpose": (qb.transpose, np.transpose),
    "transpose axes": (lambda t: qb.transpose(t, (1, 0, 2)), lambda x: x.transpose(1, 0, 2)),
    "transpose negative": (lambda t: qb.transpose(t, (-1, 0, 1)), lambda x: x.transpose(2, 0, 1)),
    "transpose method": (lambda t: t.transpose(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
    ".T": (lambda t: t.T, lambda x: x.T),
    "broadcast_to": (lambda t: qb.broadcast_to(t, (2, 3, 4, 5)), lambda x: np.broadcast_to(x, (2, 3, 4, 5))),
    "broadcast_to ones": (lambda t: qb.broadcast_to(t[:, :1], (3, 6, 5)),
                          lambda x: np.broadcast_to(x[:, :1], (3, 6, 5))),
    "broadcast_to method": (lambda t: t[0, 0].broadcast_to((2, 5)), lambda x: np.broadcast_to(x[0, 0], (2, 5))),
    "squeeze": (lambda t: qb.squeeze(t[:, :1]), lambda x: np.squeeze(x[:, :1])),
    "expand_dims": (lambda t: qb.expand_dims(t, -1), lambda x: np.expand_dims(x, -1)),
    "concat": (lambda t: qb.concat([t, t[:1]]), lambda x: np.concatenate([x, x[:1]])),
    "concat axis": (lambda t: qb.concat([t, t[..., :2]], axis=-1), lambda x: np.concatenate([x, x[..., :2]], -1)),
    "concat one": (lambda t: qb.concat([t], axis=1), lambda x: x),
    "stack": (lambda t: qb.stack([t, t * 2.0]), lambda x: np.stack([x, x * 2.0])),
    "stack axis": (lambda t: qb.stack([t, t], axis=2), lambda x: np.stack([x, x], 2)),
    "stack -1": (lambda t: qb.stack((t, -t), axis=-1), lambda x: np.stack((x, -x), -1)),
    "tril": (qb.tril, np.tril),
    "triu": (qb.triu, np.triu),
    "tril k": (lambda t: qb.tril(t, 1), lambda x: np.tril(x, 1)),
    "triu k": (lambda t: qb.triu(t, -2), lambda x: np.triu(x, -2)),
    "where": (lambda t: qb.where(t > 30, t, -t), lambda x: np.where(x > 30, x, -x)),
    "where broadcast": (lambda t: qb.where(t[0, 0] > 2, 1.0, t), lambda x: np.where(x[0, 0] > 2, 1.0, x)),
    "astype f32": (lambda t: qb.astype(t, qb.float32), lambda x: x.astype(np.float32)),
    "astype bool": (lambda t: (t - 3.0).astype(qb.bool_), lambda x: (x - 3.0).astype(bool)),
}


@pytest.mark.parametrize("fn, reference", STRUCTURAL.values(), ids=STRUCTURAL.keys())
def test_structural_ops(fn, reference):
    check(fn(qb.array(X)), reference(X), exact=True)


def test_structural_ops_on_bool_and_float32():
    b = X % 3 == 0
    check(qb.tril(qb.array(b)), np.tril(b), qb.bool_)
    check(qb.concat([qb.array(b), b[:1]]), np.concatenate([b, b[:1]]), qb.bool_)
    check(qb.stack([qb.array(b), b], axis=1), np.stack([b, b], 1), qb.bool_)
    check(qb.where(qb.array(b), True, qb.array(~b)), np.where(b, True, ~b), qb.bool_)
    check(qb.astype(qb.array(b), qb.float32), b.astype(np.float32), qb.float32)
    f = X.astype(np.float32)
    check(qb.transpose(qb.array(f)), f.T, qb.float32, exact=True)
    check(qb.where(qb.array(b), qb.array(f), 0.0), np.where(b, f, 0.0).astype(np.float32), qb.float32)


def test_astype_to_the_same_dtype_is_free():
    t = qb.array(X)
    assert qb.astype(t, qb.float64) is t and t.astype("float64") is t
    with pytest.raises(TypeError):
        t.astype(np.float16)


@pytest.mark.parametrize("fn, exc", [
    (lambda t: qb.reshape(t, (7, -1)), ValueError),
    (lambda t: qb.reshape(t, (-1, -1)), ValueError),
    (lambda t: qb.reshape(t, (0, 60)), ValueError),
    (lambda t: qb.transpose(t, (0, 0, 1)), ValueError),
    (lambda t: qb.transpose(t, (0, 1)), ValueError),
    (lambda t: qb.broadcast_to(t, (4, 5)), ValueError),
    (lambda t: qb.broadcast_to(t, (2, 3, 4, 6)), ValueError),
    (lambda t: qb.squeeze(t, 0), ValueError),
    (lambda t: qb.concat([t, t[:, :1]], axis=0), ValueError),
    (lambda t: qb.concat([t, t[0]]), ValueError),
    (lambda t: qb.concat([]), ValueError),
    (lambda t: qb.concat([qb.array(1.0), qb.array(2.0)]), ValueError),
    (lambda t: qb.stack([t, t[:1]]), ValueError),
    (lambda t: qb.stack([]), ValueError),
    (lambda t: qb.tril(t[0, 0]), ValueError),
    (lambda t: qb.where(t > 1, t, t[:2]), ValueError),
    (lambda t: qb.concat([t, t > 0]), TypeError),
])
def test_structural_errors(fn, exc):
    with pytest.raises(exc):
        fn(qb.array(X))


# -- linear algebra ---------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((1, 1), (1, 1)),
    ((5, 2, 3), (3, 4)), ((5, 2, 3), (5, 3, 4)), ((1, 2, 3), (4, 3, 2)), ((3,), (2, 3, 4)),
    ((2, 3, 4), (4,)), ((2, 1, 2, 3), (4, 3, 1)),
]


@pytest.mark.parametrize("a_shape, b_shape", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_matches_numpy(a_shape, b_shape, dtype):
    rng = np.random.default_rng(0)
    a = rng.normal(size=a_shape).astype(dtype.numpy)
    b = rng.normal(size=b_shape).astype(dtype.numpy)
    for result in (qb.matmul(qb.array(a), qb.array(b)), qb.array(a) @ qb.array(b),
                   qb.matmul(a, b), a @ qb.array(b), qb.array(a) @ b):
        check(result, a @ b, dtype)


@pytest.mark.parametrize("a_shape, b_shape", [((2, 3), (2, 3)), ((3,), (4,)), ((), (3,)),
                                              ((2, 2, 3), (3, 3, 2))])
def test_matmul_errors(a_shape, b_shape):
    with pytest.raises(ValueError):
        qb.ones(a_shape) @ qb.ones(b_shape)


def _spd(n, dtype, seed=0):
    m = np.random.default_rng(seed).normal(size=(n, n))
    return (m @ m.T + n * np.eye(n)).astype(dtype.numpy)


@pytest.mark.parametrize("b_shape", [(4,), (4, 1), (4, 3)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_solve(b_shape, dtype):
    a = _spd(4, dtype)
    b = np.random.default_rng(1).normal(size=b_shape).astype(dtype.numpy)
    x = qb.solve(qb.array(a), qb.array(b))
    check(x, np.linalg.solve(a, b), dtype)
    np.testing.assert_allclose((qb.array(a) @ x).numpy(), b, **TOL[dtype])


@pytest.mark.parametrize("a_shape, b_shape", [
    ((2, 4, 4), (4,)), ((2, 4, 4), (2, 4, 3)), ((4, 4), (3, 4, 2)), ((2, 1, 4, 4), (3, 4, 1)),
])
@pytest.mark.parametrize("dtype", FLOATS)
def test_solve_of_stacks_follows_numpy(a_shape, b_shape, dtype):
    """NumPy 2's convention: a 1-d b is one vector for every matrix, any other b is a stack of
    matrices whose leading axes broadcast with those of a."""
    rng = np.random.default_rng(2)
    a = (rng.normal(size=a_shape) + 4 * np.eye(4)).astype(dtype.numpy)
    b = rng.normal(size=b_shape).astype(dtype.numpy)
    check(qb.solve(a, b), np.linalg.solve(a, b), dtype)
    check(qb.jit(lambda a, b: qb.solve(a, b))(a, b), np.linalg.solve(a, b), dtype)


@pytest.mark.parametrize("a_shape, b_shape", [((3, 4), (3,)), ((3, 3), (4,)), ((3,), (3,)),
                                              ((3, 3), (3, 2, 1)), ((2, 3, 3), (3, 3, 1)),
                                              ((3, 3), ())])
def test_solve_errors(a_shape, b_shape):
    with pytest.raises(ValueError):
        qb.solve(qb.ones(a_shape), qb.ones(b_shape))


def test_solve_rejects_a_stack_of_vectors_with_a_hint():
    """b [2, 3] is a matrix (NumPy 2): it does not fit a [2, 3, 3], and the message says how to
    solve a stack of vectors."""
    with pytest.raises(ValueError, match=r"b\[\.\.\., None\]"):
        qb.solve(qb.ones((2, 3, 3)), qb.ones((2, 3)))


def _fresh_jit(f, *args):
    return qb.jit(lambda *x: f(*x))(*args)  # its own trace cache, not qb.solve's


@pytest.mark.parametrize("run", [lambda f, *a: f(*a), _fresh_jit], ids=["eager", "jit"])
def test_stacks_fail_per_matrix(run):
    """A singular or indefinite matrix gives NaN for its own result only."""
    good = _spd(3, qb.float64)
    a = np.stack([good, np.zeros((3, 3)), good])
    x = np.asarray(run(qb.solve, a, np.ones((3, 3, 2))))
    assert np.isnan(x[1]).all() and np.isfinite(x[[0, 2]]).all()
    np.testing.assert_allclose(x[0], np.linalg.solve(good, np.ones((3, 2))), rtol=1e-12)
    lower = np.asarray(run(qb.cholesky, np.stack([good, -good])))
    assert np.isnan(lower[1]).all()
    np.testing.assert_allclose(lower[0], np.linalg.cholesky(good), rtol=1e-12)


@pytest.mark.parametrize("dtype", FLOATS)
def test_cholesky(dtype):
    a = _spd(5, dtype)
    lower = qb.cholesky(qb.array(a))
    check(lower, np.linalg.cholesky(a), dtype)
    np.testing.assert_array_equal(np.triu(lower.numpy(), 1), 0.0)
    assert np.isnan(qb.cholesky(qb.array(-a)).numpy()).any()
    with pytest.raises(ValueError):
        qb.cholesky(qb.ones((2, 3)))
    stack = np.stack([a, 2 * a]).reshape(2, 1, 5, 5)
    check(qb.cholesky(qb.array(stack)), np.linalg.cholesky(stack), dtype)
    check(qb.jit(qb.cholesky)(qb.array(stack)), np.linalg.cholesky(stack), dtype)


EINSUM = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)]),
    ("i,i->", [(3,), (3,)]),
    ("i,j->ij", [(3,), (2,)]),
    ("ij->ji", [(2, 3)]),
    ("ijk->", [(2, 3, 4)]),
    ("ijk->k", [(2, 3, 4)]),
    ("ij,j->i", [(2, 3), (3,)]),
    ("i,ij,j->", [(2,), (2, 3), (3,)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]),
    ("ij,kj->ik", [(2, 3), (4, 3)]),
    ("i j , j k -> k i", [(2, 3), (3, 4)]),
]


@pytest.mark.parametrize("subscripts, shapes", EINSUM, ids=[s for s, _ in EINSUM])
@pytest.mark.parametrize("dtype", FLOATS)
def test_einsum_matches_numpy(subscripts, shapes, dtype):
    rng = np.random.default_rng(2)
    operands = [rng.normal(size=s).astype(dtype.numpy) for s in shapes]
    check(qb.einsum(subscripts, *(qb.array(o) for o in operands)),
          np.einsum(subscripts.replace(" ", ""), *operands), dtype)


@pytest.mark.parametrize("subscripts, shapes", [
    ("ij,jk->ik", [(2, 3), (4, 5)]), ("ij->i", [(2,)]), ("ij,jk->ik", [(2, 3)]),
    ("ij,jk->iz", [(2, 3), (3, 4)]),
])
def test_einsum_errors(subscripts, shapes):
    with pytest.raises(ValueError):
        qb.einsum(subscripts, *(qb.ones(s) for s in shapes))


# -- the namespace ------------------------------------------------------------------------------

SPEC_OPS = """abs cos exp log relu sigmoid sin softplus sqrt tanh maximum minimum sum mean max min
    norm any all matmul reshape transpose broadcast_to astype solve cholesky tril triu where concat
    stack einsum greater greater_equal less less_equal equal not_equal logical_and logical_or
    logical_not power isfinite isnan negative add subtract multiply divide""".split()
SHADOWING = ["abs", "sum", "max", "min", "any", "all"]


@pytest.mark.parametrize("name", SPEC_OPS)
def test_spec_ops_are_attributes(name):
    assert callable(getattr(qb, name))
    assert getattr(qb, name) is not getattr(builtins, name, None)


@pytest.mark.parametrize("name", SHADOWING)
def test_builtin_names_stay_out_of_all(name):
    assert name not in getattr(qb, "__all__", [])


@pytest.mark.skipif(not hasattr(qb, "__all__"), reason="quabla.__all__ is not defined yet")
def test_star_import_does_not_shadow_builtins():
    namespace = {}
    exec("from quabla import *", namespace)
    for name in SHADOWING:
        assert name not in namespace
    for name in set(SPEC_OPS) - set(SHADOWING):
        assert name in qb.__all__ and namespace[name] is getattr(qb, name)


def test_eager_ops_compile_nothing():
    """Eager ops run on NumPy: neither Numba nor the lowering package gets imported."""
    script = textwrap.dedent("""
        import sys
        import quabla as qb
        x = qb.linspace(0.1, 1.0, 6).reshape(2, 3)
        a = qb.eye(3) * 4.0 + 1.0
        y = qb.sum(qb.softplus(x) ** 1.5 + qb.sigmoid(x) @ a, axis=0) - qb.norm(x)
        y = qb.where(y > 0, qb.solve(a, y), qb.cholesky(a)[0]) ** 2 + qb.einsum("ij->j", x)
        assert qb.any(qb.isfinite(y)).item() and x[:, 1:].shape == (2, 2)
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "lowering", "llvmlite"))
        print(",".join(bad))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True, cwd=str(__import__("pathlib").Path(qb.__file__).parents[1]))
    assert result.stdout.strip() == ""
