"""The public transforms (spec 003 §3.1-3.3, §3.5-3.10; 000 §3.3-3.5 and "S2 as landed"):
higher-order derivatives, argnums and pytrees, has_aux, dtypes, jit's static arguments and trace
cache, tracer errors, vmap, and closures. Backend-agnostic: results are compared as NumPy data.

A test that takes ``on`` (helpers.OnDevice) runs on every device: as it is on "cpu", and on
"mlx" and "cuda:0" with its programs under ``jit(..., device=...)`` (under the simulator
tests/test_device_suite_cuda.py runs those). Its references (finite differences, loops of the
unbatched function) are computed on the CPU. The tests of tracing, argument checks and trace
caches fail or pass before anything is lowered, so they run once."""

import dataclasses
import math
import warnings
from typing import NamedTuple

import numpy as np
import pytest

import quabla as qb

from helpers import FLOAT_ELEMENTWISE, assert_close, np64, op_counts, staged_graph

pytestmark = pytest.mark.filterwarnings("ignore::quabla.PrecisionWarning")  # MLX's float32


# -- second and higher derivatives ---------------------------------------------------------------

def _sech2(x):
    return 1.0 / math.cosh(x) ** 2


SECOND_DERIVATIVES = [
    ("sin", qb.sin, lambda x: -math.sin(x)),
    ("cos", qb.cos, lambda x: -math.cos(x)),
    ("exp", qb.exp, math.exp),
    ("tanh", qb.tanh, lambda x: -2.0 * math.tanh(x) * _sech2(x)),
    ("cube", lambda x: x ** 3, lambda x: 6.0 * x),
    ("pow 2.5", lambda x: x ** 2.5, lambda x: 2.5 * 1.5 * x ** 0.5),
    ("pow -1.5", lambda x: qb.power(x, -1.5), lambda x: 1.5 * 2.5 * x ** -3.5),
    ("rpow", lambda x: 2.0 ** x, lambda x: math.log(2.0) ** 2 * 2.0 ** x),
    ("log", qb.log, lambda x: -1.0 / x ** 2),
    ("sqrt", qb.sqrt, lambda x: -0.25 * x ** -1.5),
    ("reciprocal", lambda x: 1.0 / x, lambda x: 2.0 / x ** 3),
    ("sigmoid", qb.sigmoid,
     lambda x: (lambda s: s * (1 - s) * (1 - 2 * s))(1 / (1 + math.exp(-x)))),
    ("sin(exp)", lambda x: qb.sin(qb.exp(x)),
     lambda x: -math.sin(math.exp(x)) * math.exp(2 * x) + math.cos(math.exp(x)) * math.exp(x)),
    ("x sin x", lambda x: x * qb.sin(x), lambda x: 2 * math.cos(x) - x * math.sin(x)),
    ("tanh(x^2)", lambda x: qb.tanh(x * x),
     lambda x: 2 * _sech2(x * x) - 8 * x * x * math.tanh(x * x) * _sech2(x * x)),
    ("log1p(x^2)", lambda x: qb.log1p(x ** 2), lambda x: (2 - 2 * x * x) / (1 + x * x) ** 2),
]


@pytest.mark.parametrize("name, f, d2", SECOND_DERIVATIVES, ids=[c[0] for c in SECOND_DERIVATIVES])
@pytest.mark.parametrize("x", [0.7, 1.3])
def test_grad_grad_equals_analytic_second_derivative(name, f, d2, x, on):
    value = on(qb.grad(qb.grad(f)))(qb.array(x))
    assert value.dtype is qb.float64 and value.shape == []
    on.close(value, d2(x))


def test_spec_reverse_over_reverse_value(on):
    """000 Exp 3: f''(1.3) of sin(x) * x... the design's reference point, exact to rounding."""
    x = 1.3
    exact = 2 * math.cos(x) - x * math.sin(x)
    on.close(on(qb.grad(qb.grad(lambda t: qb.sin(t) * t)))(qb.array(x)), exact, rtol=0, atol=1e-14)


def test_third_and_fourth_derivatives(on):
    x = qb.array(0.4)
    on.close(on(qb.grad(qb.grad(qb.grad(qb.sin))))(x), -math.cos(0.4), rtol=0)
    on.close(on(qb.grad(qb.grad(qb.grad(qb.grad(qb.sin)))))(x), math.sin(0.4), rtol=0)
    d3 = on(qb.grad(qb.grad(qb.grad(lambda t: t ** 4))))
    on.close(d3(qb.array(2.0)), 48.0, rtol=0, atol=0)


def test_grad_grad_of_python_float_argument():
    assert float(qb.grad(qb.grad(lambda x: x ** 3))(2.0)) == 12.0


def test_a_gradient_sums_the_contributions_of_its_uses_in_the_order_they_were_traced():
    """Each use of ``x`` contributes to its gradient; they are added in the order the uses
    were traced (quabla/transforms/vjp.py), whatever order the backward walk reaches them in:
    ``(1 + 1e16) - 1e16`` is 0 in float64, the walk's order ``(-1e16 + 1e16) + 1`` would be 1.
    So a term traced later (an added loss term) adds its contribution after the others."""
    def f(x, a):
        return a[0] * x + a[1] * x + a[2] * x

    a = np.array([1.0, 1e16, -1e16])
    for form in (qb.grad(f), qb.jit(qb.grad(f))):
        assert float(form(1.0, a)) == 0.0
    # the uses of an intermediate value too
    g = qb.jit(qb.grad(lambda x, a: f(qb.sin(x), a)))
    assert float(g(0.0, a)) == 0.0


def test_hvp_matches_analytic_hessian(on):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 4))
    x = rng.normal(size=4)
    v = rng.normal(size=4)
    A = qb.array(a)

    def f(x):
        return 0.5 * qb.sum(x * (A @ x)) + qb.sum(qb.exp(x))

    hv = on(lambda x, v: qb.jvp(qb.grad(f), (x,), (v,))[1])(qb.array(x), qb.array(v))
    hessian = 0.5 * (a + a.T) + np.diag(np.exp(x))
    on.close(hv, hessian @ v)


def test_hvp_matches_finite_differences_of_grad(on):
    rng = np.random.default_rng(1)
    x, v = rng.uniform(-1, 1, 5), rng.uniform(-1, 1, 5)

    def f(x):
        return qb.sum(qb.sin(x) * x ** 2) * qb.sum(qb.tanh(x)) + qb.sum(x ** 2.5 * 0.0 + x ** 4)

    g = qb.grad(f)
    hv = on(lambda x, v: qb.jvp(g, (x,), (v,))[1])(qb.array(x), qb.array(v))
    eps = 1e-5
    fd = (np64(g(qb.array(x + eps * v))) - np64(g(qb.array(x - eps * v)))) / (2 * eps)
    on.close(hv, fd, rtol=1e-7, atol=1e-8)
    # forward-over-reverse equals reverse-over-reverse (grad of <grad f, v>)
    hv2 = on(qb.grad(lambda x: qb.sum(g(x) * qb.array(v))))(qb.array(x))
    on.close(hv, hv2)


def test_hvp_with_pytree_params(on):
    params = {"a": qb.array([0.3, -0.2]), "b": qb.array(1.5)}

    def f(p):
        return qb.sum(qb.sin(p["a"] * p["b"])) + p["b"] ** 3

    tangent = {"a": qb.array([1.0, 0.0]), "b": qb.array(0.5)}
    hv = on(lambda p, t: qb.jvp(qb.grad(f), (p,), (t,))[1])(params, tangent)
    assert set(hv) == {"a", "b"}
    eps = 1e-6
    shift = lambda s: {k: params[k] + s * tangent[k] for k in params}
    gp, gm = qb.grad(f)(shift(eps)), qb.grad(f)(shift(-eps))
    for k in params:
        on.close(hv[k], (np64(gp[k]) - np64(gm[k])) / (2 * eps), rtol=1e-7, atol=1e-8)


def test_jvp_of_jvp_and_vjp_of_jvp(on):
    f = lambda x: qb.sin(x) * qb.exp(x)
    x = qb.array(0.6)
    d1 = lambda x: qb.jvp(f, (x,), (1.0,))[1]
    d2 = on(lambda x: qb.jvp(d1, (x,), (qb.array(1.0),))[1])(x)
    exact = 2 * math.cos(0.6) * math.exp(0.6)
    on.close(d2, exact, rtol=0)
    pulled = on(lambda x, ct: qb.vjp(d1, x)[1](ct)[0])(x, qb.array(1.0))
    on.close(pulled, exact, rtol=0)


# -- argnums, pytrees, has_aux, bool leaves, Python scalars ----------------------------------------

def test_argnums_int_and_tuple(on):
    f = lambda x, y, z: x * y ** 2 + qb.sin(z)
    args = (qb.array(2.0), qb.array(3.0), qb.array(0.5))
    on.close(on(qb.grad(f))(*args), 9.0, atol=0)
    on.close(on(qb.grad(f, argnums=1))(*args), 12.0, atol=0)
    gx, gz = on(qb.grad(f, argnums=(0, 2)))(*args)
    on.close(gx, 9.0, atol=0)
    on.close(gz, math.cos(0.5), rtol=0, atol=1e-15)
    single = on(qb.grad(f, argnums=(1,)))(*args)
    assert isinstance(single, tuple) and len(single) == 1
    on.close(single[0], 12.0, atol=0)
    value, (gy, gz) = on(qb.value_and_grad(f, argnums=(1, 2)))(*args)
    on.close(value, 18 + math.sin(0.5), rtol=0, atol=1e-14)
    on.close(gy, 12.0, atol=0)
    with pytest.raises(ValueError):
        on(qb.grad(f, argnums=3))(*args)
    with pytest.raises(TypeError):
        qb.grad(f, argnums=[0, 1])


class Point(NamedTuple):
    x: object
    y: object


@qb.tree.register_dataclass
@dataclasses.dataclass(frozen=True)
class Affine:
    w: object
    b: object


@dataclasses.dataclass(frozen=True)
class Model:
    layers: list
    scale: float


qb.tree.register_dataclass(Model, data_fields=("layers",), meta_fields=("scale",))


def test_grad_mirrors_dict_list_tuple_args(on):
    params = {"w": [qb.array([1.0, 2.0]), (qb.array(3.0),)], "b": qb.array(0.5)}

    def f(p):
        return qb.sum(p["w"][0] ** 2) * p["w"][1][0] + p["b"]

    g = on(qb.grad(f))(params)
    assert isinstance(g, dict) and isinstance(g["w"], list) and isinstance(g["w"][1], tuple)
    on.close(g["w"][0], [6.0, 12.0])
    on.close([g["w"][1][0], g["b"]], [5.0, 1.0], atol=0)


def test_grad_of_namedtuple_and_registered_dataclasses(on):
    g = on(qb.grad(lambda p: p.x * p.y))(Point(qb.array(1.0), qb.array(2.0)))
    assert type(g) is Point
    on.close([g.x, g.y], [2.0, 1.0], atol=0)

    model = Model([Affine(qb.array([[1.0], [2.0]]), qb.array([0.5]))], 3.0)

    def loss(m, x):
        layer = m.layers[0]
        return m.scale * qb.sum(x @ layer.w + layer.b)

    x = qb.array([[1.0, 1.0], [2.0, 0.0]])
    g = on(qb.grad(loss))(model, x)
    assert type(g) is Model and type(g.layers[0]) is Affine and g.scale == 3.0
    on.close(g.layers[0].w, [[9.0], [3.0]])
    on.close(g.layers[0].b, [6.0])
    # a meta field is part of the signature: a new value retraces and gives new results
    g2 = on(qb.grad(loss))(Model(model.layers, 1.0), x)
    on.close(g2.layers[0].b, [2.0])


def test_pytree_results_of_jit_jvp_vjp_and_vmap(on):
    f = lambda p: {"sum": p.x + p.y, "parts": [p.x * 2.0, Point(p.y, p.x)]}
    p = Point(qb.array([1.0, 2.0]), qb.array([3.0, 4.0]))
    out = qb.jit(f, device=on.device)(p)
    assert set(out) == {"sum", "parts"} and type(out["parts"][1]) is Point
    on.close(out["parts"][1].x, [3.0, 4.0])

    t = Point(qb.array([1.0, 0.0]), qb.array([0.0, 1.0]))
    primal, tangent = on(lambda p, t: qb.jvp(f, (p,), (t,)))(p, t)
    on.close(tangent["sum"], [1.0, 1.0])
    on.close(tangent["parts"][0], [2.0, 0.0])

    ct = qb.tree.map(lambda a: qb.ones(a.shape), primal)
    (g,) = on(lambda p, ct: qb.vjp(f, p)[1](ct))(p, ct)
    assert type(g) is Point
    on.close(g.x, [4.0, 4.0])
    on.close(g.y, [2.0, 2.0])

    batched = on(qb.vmap(f))(Point(qb.ones((3, 2)), qb.zeros((3, 2))))
    assert batched["parts"][1].y.shape == [3, 2]


def test_has_aux_for_grad_value_and_grad_and_vjp(on):
    def loss(w, x):
        pred = x * w
        return qb.sum(pred ** 2), {"pred": pred, "n": 3.0}

    def pulled(w, x, ct):
        out, pull, aux = qb.vjp(loss, w, x, has_aux=True)
        return out, aux, pull(ct)

    w, x = qb.array(2.0), qb.array([1.0, 2.0])
    g, aux = on(qb.grad(loss, has_aux=True))(w, x)
    on.close(g, 2 * 2.0 * (1 + 4), atol=0)
    on.close(aux["pred"], [2.0, 4.0])
    on.close(aux["n"], 3.0, atol=0)
    (value, aux2), g2 = on(qb.value_and_grad(loss, has_aux=True))(w, x)
    on.close([value, g2], [20.0, g], atol=0)
    on.close(aux2["pred"], aux["pred"])
    out, aux3, (gw, gx) = on(pulled)(w, x, qb.array(1.0))
    on.close([out, gw], [20.0, 20.0], atol=0)
    on.close(aux3["pred"], [2.0, 4.0])
    on.close(gx, [8.0, 16.0])
    with pytest.raises(TypeError):
        on(qb.grad(lambda w: qb.sum(w), has_aux=True))(qb.array([1.0]))


def test_bool_leaves_get_none_gradients(on):
    def f(p):
        return qb.sum(qb.where(p["mask"], p["x"], 0.0) ** 2)

    p = {"x": qb.array([1.0, 2.0, 3.0]), "mask": qb.array([True, False, True])}
    g = on(qb.grad(f))(p)
    assert g["mask"] is None
    on.close(g["x"], [2.0, 0.0, 6.0])
    value, (gx, gm) = on(qb.value_and_grad(lambda x, m: f({"x": x, "mask": m}),
                                           argnums=(0, 1)))(p["x"], p["mask"])
    assert gm is None
    on.close(value, 10.0, atol=0)
    gx, gm = on(lambda x, m, ct: qb.vjp(lambda x, m: qb.where(m, x, 0.0), x, m)[1](ct))(
        p["x"], p["mask"], qb.ones(3))
    assert gm is None
    on.close(gx, [1.0, 0.0, 1.0])


def test_python_scalars_in_differentiated_positions_become_float64():
    g = qb.grad(lambda x: x ** 3)(2.0)
    assert isinstance(g, qb.Tensor) and g.dtype is qb.float64 and float(g) == 12.0
    assert float(qb.grad(lambda x: x ** 3)(2)) == 12.0
    gx, gy = qb.grad(lambda x, y: x * y, argnums=(0, 1))(3.0, qb.array(4.0))
    assert float(gx) == 4.0 and float(gy) == 3.0 and gx.dtype is qb.float64
    out, t = qb.jvp(lambda x: x * x, (3.0,), (1.0,))
    assert float(out) == 9.0 and float(t) == 6.0 and t.dtype is qb.float64
    out, pull = qb.vjp(lambda x: x * x, 3.0)
    assert float(pull(1.0)[0]) == 6.0
    # a Python scalar in a non-differentiated position stays static (and weak)
    g = qb.grad(lambda x, s: x * s)(qb.array(1.0, dtype=qb.float32), 2.5)
    assert g.dtype is qb.float32 and float(g) == 2.5


def test_decorator_forms_with_keywords_only():
    @qb.grad(argnums=1)
    def d_dx(params, x):
        return qb.sum(params * x ** 2)

    assert_close(d_dx(qb.array(2.0), qb.array([1.0, 2.0])), [4.0, 8.0])

    @qb.value_and_grad(argnums=(0, 1), has_aux=True)
    def both(a, b):
        return a * b, a + b

    (value, aux), (ga, gb) = both(qb.array(2.0), qb.array(5.0))
    assert (float(value), float(aux), float(ga), float(gb)) == (10.0, 7.0, 5.0, 2.0)

    @qb.jit(static_argnums=1)
    def repeat(x, n):
        for _ in range(n):
            x = x * 2.0
        return x

    assert float(repeat(qb.array(1.0), 3)) == 8.0

    @qb.jit
    def plain(x):
        return x + 1.0

    assert float(plain(qb.array(1.0))) == 2.0


@pytest.mark.parametrize("shape", [(1,), (2, 2)])
def test_non_scalar_output_raises_value_error(shape):
    with pytest.raises(ValueError, match="scalar"):
        qb.grad(lambda x: x * 2.0)(qb.ones(shape))
    with pytest.raises(ValueError):
        qb.value_and_grad(lambda x: x * 2.0)(qb.ones(shape))


def test_non_floating_output_is_rejected():
    with pytest.raises((TypeError, ValueError)):
        qb.grad(lambda x: x > 0.0)(qb.array(1.0))


def test_float32_stays_float32(on):
    x = qb.array([0.5, 1.5], dtype=qb.float32)
    f = lambda x: qb.sum(qb.tanh(x) * 0.5 + x ** 2.5)
    assert qb.jit(f, device=on.device)(x).dtype is qb.float32
    assert on(qb.grad(f))(x).dtype is qb.float32
    value, g = on(qb.value_and_grad(f))(x)
    assert value.dtype is qb.float32 and g.dtype is qb.float32
    assert on(qb.grad(lambda s: qb.grad(lambda t: t ** 3.0)(s)))(x[0]).dtype is qb.float32
    out, t = on(lambda x, v: qb.jvp(qb.grad(f), (x,), (v,)))(x, qb.ones(2, dtype=qb.float32))
    assert out.dtype is qb.float32 and t.dtype is qb.float32
    pulled = on(lambda x, ct: qb.vjp(lambda x: qb.sin(x) * 2.0, x)[1](ct)[0])
    assert pulled(x, qb.ones(2, dtype=qb.float32)).dtype is qb.float32
    assert on(qb.vmap(qb.grad(lambda t: qb.sin(t) * 0.5)))(x).dtype is qb.float32
    # a static Python scalar adopts the program's dtype
    assert qb.jit(lambda x, s: x * s, device=on.device)(x, 0.1).dtype is qb.float32
    # float32 results equal the float64 ones to float32 precision
    assert_close(on(qb.grad(f))(x), qb.grad(f)(x.astype(qb.float64)), rtol=1e-6, atol=1e-6)


def test_gradients_keep_the_dtype_of_each_leaf(on):
    p = {"a": qb.array([1.0, 2.0], dtype=qb.float32), "b": qb.array(3.0)}
    g = on(qb.grad(lambda p: qb.sum(p["a"].astype(qb.float64) ** 2) * p["b"]))(p)
    assert g["a"].dtype is qb.float32 and g["b"].dtype is qb.float64
    on.close(g["a"], [6.0, 12.0])
    on.close(g["b"], 5.0, atol=0)


@pytest.mark.parametrize("name", sorted(FLOAT_ELEMENTWISE))
def test_derivatives_of_a_float32_program_are_float32(name):
    """Every derivative of every float elementwise op keeps float32: a rule's weak float64
    constants (relu's, max's and min's ``where(..., 1.0, 0.0)``) once widened the gradient."""
    op = FLOAT_ELEMENTWISE[name]
    x = qb.array([0.3, 0.71, 0.45, 0.2], dtype=qb.float32)
    y = qb.array([1.3, 0.4, 2.1, 0.9], dtype=qb.float32)
    f = lambda x: qb.max(op(x, y) * 1.7) + qb.sum(op(x, y))
    derivatives = {
        "grad": qb.grad(f)(x), "jvp": qb.jvp(f, (x,), (1.0,))[1],
        "hvp": qb.jvp(qb.grad(f), (x,), (1.0,))[1], "hessian": qb.hessian(f)(x),
        "vmap of grad": qb.vmap(qb.grad(lambda r: qb.max(op(r, r) * 1.7)))(qb.stack([x, y])),
    }
    assert {k: v.dtype for k, v in derivatives.items() if v.dtype is not qb.float32} == {}


def test_tangent_and_cotangent_must_match_their_primal():
    """Python numbers adopt the primal's dtype; arrays must match shape and dtype exactly."""
    x32 = qb.array([1.0, 2.0], dtype=qb.float32)
    _, t = qb.jvp(lambda x: x * 2.0, (x32,), (1.0,))
    assert t.dtype is qb.float32 and np.asarray(t).tolist() == [2.0, 2.0]
    with pytest.raises(ValueError):
        qb.jvp(lambda x: x, (qb.ones(2),), (qb.ones(3),))
    with pytest.raises(ValueError):
        qb.jvp(lambda x: x, (qb.ones(2),), (qb.ones(2, dtype=qb.float32),))
    with pytest.raises(ValueError):
        qb.jvp(lambda x, y: x, (qb.ones(2), qb.ones(2)), (qb.ones(2),))
    _, pull = qb.vjp(lambda x: x * 2.0, x32)
    assert pull(1.0)[0].dtype is qb.float32
    with pytest.raises(ValueError):
        pull(qb.ones(3, dtype=qb.float32))
    with pytest.raises(ValueError):
        pull(qb.ones(2))


def test_float64_constant_meeting_a_float32_tracer_is_a_dtype_error():
    """S3b: an eager array is strong, so it does not silently widen or narrow a program."""
    x32 = qb.array([1.0, 2.0], dtype=qb.float32)
    with pytest.raises(TypeError, match="astype"):
        qb.grad(lambda x: qb.sum(x * qb.array([1.0, 2.0])))(x32)
    g = qb.grad(lambda x: qb.sum(x * qb.array([1.0, 2.0], dtype=qb.float32)))(x32)
    assert g.dtype is qb.float32


def test_hessian_stays_finite_when_the_loss_value_is_infinite(on):
    """S1b: the reverse pass of sum/mean must not turn an infinite value into NaN derivatives."""
    def f(x, y):
        return x ** 2.0 + qb.sum(qb.log(y)) + qb.mean(qb.log(y))

    x, y = qb.array(1.5), qb.zeros(3)
    value, g = on(qb.value_and_grad(f))(x, y)
    assert float(value) == -math.inf and float(g) == 3.0
    assert float(on(qb.grad(qb.grad(f)))(x, y)) == 2.0
    tangent = on(lambda x, y, tx, ty: qb.jvp(qb.grad(f), (x, y), (tx, ty))[1])
    assert float(tangent(x, y, qb.array(1.0), qb.zeros(3))) == 2.0


def test_mixed_dtypes_are_an_error_not_a_silent_promotion():
    with pytest.raises(TypeError):
        qb.grad(lambda x, y: x * y)(qb.array(1.0, dtype=qb.float32), qb.array(2.0))


# -- jit: static arguments, keyword binding --------------------------------------------------------

def test_power_sum_static_argnums_and_names():
    traces = []

    @qb.jit(static_argnums=1)
    def power_sum(x, n):
        traces.append(n)
        return qb.sum(x ** n)

    x = qb.array([1.0, 2.0])
    assert float(power_sum(x, 3)) == 9.0
    assert float(power_sum(x, n=2)) == 5.0      # n is static by name too
    assert float(power_sum(x, n=3)) == 9.0      # the same trace as power_sum(x, 3)
    assert float(power_sum(x, 2)) == 5.0
    assert traces == [3, 2]
    assert power_sum.static_argnames == frozenset({"n"})


def test_static_argnames_imply_static_argnums():
    traces = []

    @qb.jit(static_argnames=("mode",))
    def f(x, mode, scale=1.0):
        traces.append(mode)
        return x * scale if mode == "scale" else x + scale

    x = qb.array(2.0)
    assert float(f(x, "scale", 3.0)) == 6.0     # mode static by position
    assert float(f(x, mode="add")) == 3.0       # and by keyword; scale is a static Python scalar
    assert float(f(x, mode="scale", scale=3.0)) == 6.0
    assert f.static_argnums == (1,)
    assert traces == ["scale", "add"]


def test_keyword_only_static_argument():
    @qb.jit(static_argnames="k")
    def f(x, *, k):
        return x * k

    assert float(f(qb.array(2.0), k=3.0)) == 6.0


def test_keyword_binds_the_next_positional_parameter():
    @qb.jit
    def f(x, y, z):
        return x + 2.0 * y + 3.0 * z

    one = qb.array(1.0)
    assert float(f(one, y=one, z=one)) == 6.0
    assert float(f(one, one, z=qb.array(2.0))) == 9.0
    with pytest.raises(TypeError):
        f(one, one, w=one)
    with pytest.raises(TypeError):
        f(one, z=one)  # z is not the next positional parameter and is not static


def test_static_arguments_must_be_hashable():
    f = qb.jit(lambda x, opts: x, static_argnums=1)
    with pytest.raises((ValueError, TypeError)):
        f(qb.array(1.0), [1, 2])


def test_transforms_other_than_jit_are_positional_only():
    with pytest.raises(TypeError):
        qb.grad(lambda x: x)(x=qb.array(1.0))
    with pytest.raises(TypeError):
        qb.vmap(lambda x: x)(x=qb.ones(2))


# -- the trace cache -----------------------------------------------------------------------------

def test_lru_eviction_warns_with_both_signatures():
    j = qb.jit(lambda x: x * 2.0, max_traces=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (1, 2, 3):
            j(qb.zeros((n,)))
    retrace = [w for w in caught if issubclass(w.category, qb.RetraceWarning)]
    assert len(retrace) == 1
    text = str(retrace[0].message)
    assert text.startswith(
        "jit(<lambda>) exceeded max_traces=2 and evicted its least recently used trace:\n"
        "  (float64[1],)\n"
        "new signature:\n"
        "  (float64[3],)\n"
    )
    assert retrace[0].filename == __file__  # attributed to the caller
    assert issubclass(qb.RetraceWarning, UserWarning)


def test_lru_keeps_the_recently_used_trace():
    traces = []

    def f(x):
        traces.append(tuple(x.shape))
        return x + 1.0

    j = qb.jit(f, max_traces=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        j(qb.zeros(1))
        j(qb.zeros(2))
        j(qb.zeros(1))          # a hit: shape [2] is now the least recently used
        j(qb.zeros(3))          # evicts [2]
        j(qb.zeros(1))          # still cached
        j(qb.zeros(2))          # traced again, evicts [3]
    assert traces == [(1,), (2,), (3,), (2,)]
    messages = [str(w.message) for w in caught if issubclass(w.category, qb.RetraceWarning)]
    assert len(messages) == 2
    assert "trace:\n  (float64[2],)\nnew signature:\n  (float64[3],)" in messages[0]
    assert "trace:\n  (float64[3],)\nnew signature:\n  (float64[2],)" in messages[1]


def test_static_values_appear_in_eviction_signatures():
    j = qb.jit(lambda x, n: x ** n, static_argnums=1, max_traces=1)
    with pytest.warns(qb.RetraceWarning, match=r"\(float64\[2\], 3\)\nnew signature:\n  \(float64\[2\], 2\)"):
        j(qb.ones(2), 3)
        j(qb.ones(2), n=2)


def test_default_bound_of_other_transforms_is_eight():
    g = qb.grad(lambda x: qb.sum(x * x))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 10):
            g(qb.ones(n))
    retrace = [w for w in caught if issubclass(w.category, qb.RetraceWarning)]
    assert len(retrace) == 1 and "max_traces=8" in str(retrace[0].message)
    assert str(retrace[0].message).startswith("grad(<lambda>)")


def test_python_scalars_are_static_and_retrace_per_value():
    traces = []

    def f(x, lr):
        traces.append(lr)
        return x * lr

    j = qb.jit(f)
    x = qb.array(1.0)
    assert float(j(x, 0.5)) == 0.5
    assert float(j(x, 0.5)) == 0.5
    assert float(j(x, 0.25)) == 0.25
    assert traces == [0.5, 0.25]
    j(x, qb.array(0.1))
    j(x, qb.array(0.2))       # an array argument: cached, the value is dynamic
    assert len(traces) == 3
    assert float(j(x, qb.array(0.2))) == 0.2
    # the type is part of the key: 1, 1.0 and True differ
    j(x, 1)
    j(x, 1.0)
    assert len(traces) == 5


def test_float_statics_are_keyed_by_hex():
    traces = []

    def f(x, s):
        traces.append(s)
        return x * s

    j = qb.jit(f)
    x = qb.array(1.0)
    assert math.isnan(float(j(x, float("nan"))))
    assert math.isnan(float(j(x, float("nan"))))   # NaN hits the cache
    assert len(traces) == 1
    j(x, 0.0)
    j(x, -0.0)                                     # a different hex: its own trace
    assert len(traces) == 3
    assert math.copysign(1.0, float(j(x, -0.0))) == -1.0


def test_side_effects_run_once_per_trace():
    calls = []

    @qb.jit
    def f(x):
        calls.append(1)
        return x * 2.0

    for _ in range(3):
        f(qb.array(1.0))
    assert len(calls) == 1
    g = qb.grad(lambda x: (calls.append(2), qb.sin(x))[1])
    for v in (0.1, 0.2, 0.3):
        g(qb.array(v))
    assert calls.count(2) == 1


def test_recreated_transforms_share_the_traces_of_their_root_function():
    """S2 as landed: programs are cached per root function and transform chain, so grad(f)
    re-created in a loop reuses the trace of f."""
    traces = []

    def f(x, y):
        traces.append(1)
        return qb.sum(qb.sin(x) * y)

    x, y = qb.array([0.1, 0.2]), qb.array(2.0)
    for _ in range(3):
        qb.grad(f)(x, y)
        qb.value_and_grad(f, argnums=(0, 1))(x, y)
        qb.jit(qb.grad(f))(x, y)
        qb.jvp(f, (x, y), (x, y))
        qb.vjp(f, x, y)[1](qb.array(1.0))
        qb.vmap(f, in_axes=(0, None))(x, y)
        qb.grad(qb.grad(lambda t: f(t, y)))(x[0])  # a new lambda each time: its own traces
    assert len(traces) == 7 + 3  # vjp traces twice: its forward and its pullback programs
    # a different configuration has its own cache
    qb.grad(f, argnums=1)(x, y)
    assert len(traces) == 11


def test_trace_caches_hold_their_root_function_weakly():
    import gc
    import weakref

    def make():
        def f(x):
            return qb.sum(x * 2.0)
        return f

    for use in (lambda f: qb.grad(f)(qb.ones(2)),
                lambda f: qb.jvp(f, (qb.ones(2),), (qb.ones(2),)),
                lambda f: qb.vjp(f, qb.ones(2))[1](1.0),
                lambda f: qb.jit(qb.vmap(f))(qb.ones((3, 2)))):
        f = make()
        ref = weakref.ref(f)
        use(f)
        del f
        gc.collect()
        assert ref() is None


def test_shape_change_retraces_and_static_branching_is_fine():
    traces = []

    @qb.jit
    def f(x):
        traces.append(x.shape)
        return qb.sum(x) if x.shape[0] > 2 else qb.sum(x * 10.0)

    assert float(f(qb.ones(3))) == 3.0
    assert float(f(qb.ones(2))) == 20.0
    assert len(traces) == 2


# -- rules for traced code: TracerError -----------------------------------------------------------

CONTROL_FLOW = ("TraceTensor cannot drive Python control flow; use quabla.where for elementwise "
                "selection or an explicit control-flow primitive")


def test_python_control_flow_on_a_tracer_raises_the_spec_message():
    with pytest.raises(qb.TracerError) as info:
        qb.grad(lambda x: x if x > 0 else -x)(qb.array(1.0))
    assert str(info.value) == CONTROL_FLOW
    assert isinstance(info.value, TypeError) and isinstance(info.value, qb.QuablaError)

    def loop(x):
        while x > 0.0:
            x = x - 1.0
        return x

    with pytest.raises(qb.TracerError, match="^TraceTensor cannot drive Python control flow"):
        qb.jit(loop)(qb.array(3.0))
    with pytest.raises(qb.TracerError):
        qb.vmap(lambda x: x if bool(x) else -x)(qb.ones(2))


@pytest.mark.parametrize("name, fn", [
    ("float", lambda x: float(x)),
    ("int", lambda x: int(x)),
    ("item", lambda x: x.item()),
    ("tolist", lambda x: x.tolist()),
    ("numpy", lambda x: x.numpy()),
    ("np.asarray", lambda x: np.asarray(x)),
    ("np.array", lambda x: np.array(x)),
    ("index", lambda x: [1.0, 2.0][x]),
    ("qb.Tensor", lambda x: qb.Tensor(x)),
    ("ufunc", lambda x: np.sin(x)),
])
@pytest.mark.parametrize("transform", ["jit", "grad", "vmap"])
def test_concrete_conversions_of_a_tracer_raise_tracer_error(name, fn, transform):
    x = qb.ones(2) if transform == "vmap" else qb.array(1.0)
    wrapped = {"jit": qb.jit, "grad": qb.grad, "vmap": qb.vmap}[transform](
        lambda x: fn(x) * 0.0 + x)
    with pytest.raises(qb.TracerError):
        wrapped(x)


def test_tracer_stored_in_a_global_raises_tracer_error():
    leaked = []

    @qb.jit
    def leak(x):
        leaked.append(x)
        return x * 2.0

    leak(qb.array(1.0))
    with pytest.raises(qb.TracerError, match="escaped"):
        qb.jit(lambda y: y + leaked[0])(qb.array(1.0))
    with pytest.raises(qb.TracerError):
        leaked[0] + 1.0
    with pytest.raises(qb.TracerError):
        qb.grad(lambda y: qb.sum(y * leaked[0]))(qb.array(1.0))


def test_returning_an_inner_tracer_from_an_outer_trace_is_an_error():
    inner = []

    def f(x):
        qb.jit(lambda y: inner.append(y) or y)(x)
        return x + inner[0]

    with pytest.raises(qb.TracerError):
        qb.jit(f)(qb.array(1.0))


# -- vmap ----------------------------------------------------------------------------------------

def _loop(fn, xs, axis=0):
    xs = np64(xs)
    return np.stack([np64(fn(qb.array(np.take(xs, i, axis=axis)))) for i in range(xs.shape[axis])])


def test_vmap_in_axes_int_none_tuple_and_dict_prefix(on):
    rng = np.random.default_rng(0)
    xs = qb.array(rng.normal(size=(3, 2)))
    w = qb.array([0.5, 1.0])
    per_example = lambda w, x: qb.sum(qb.tanh(x * w))
    out = on(qb.vmap(per_example, in_axes=(None, 0)))(w, xs)
    on.close(out, _loop(lambda x: per_example(w, x), xs))
    out = on(qb.vmap(per_example, in_axes=[None, 0]))(w, xs)   # a list matches a tuple
    assert out.shape == [3]
    out = on(qb.vmap(lambda d: d["a"] * d["b"], in_axes=({"a": 0, "b": None},)))(
        {"a": xs, "b": w})
    on.close(out, np64(xs) * np64(w))
    out = on(qb.vmap(lambda d: d["a"] * d["b"], in_axes=({"a": 1, "b": 0},)))(
        {"a": qb.transpose(xs), "b": xs})
    on.close(out, np64(xs) ** 2)


def test_vmap_negative_axes_and_out_axes(on):
    x = qb.array(np.arange(24.0).reshape(2, 3, 4))
    out = on(qb.vmap(lambda t: qb.sum(t, axis=0), in_axes=-1))(x)
    on.close(out, np64(x).sum(axis=0).T)
    out = on(qb.vmap(lambda t: t * 2.0, in_axes=1, out_axes=1))(x)
    on.close(out, 2 * np64(x))
    out = on(qb.vmap(lambda t: t, in_axes=1, out_axes=-1))(x)
    assert out.shape == [2, 4, 3]
    on.close(out, np.moveaxis(np64(x), 1, -1))
    xs = qb.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    on.close(on(qb.vmap(lambda x: x * 2.0, in_axes=1, out_axes=1))(xs), 2 * np64(xs))


def test_vmap_unmapped_results_broadcast_or_stay_with_out_axes_none(on):
    a, b = on(qb.vmap(lambda x: (x * 2.0, qb.array(7.0))))(qb.ones(3))
    assert a.shape == [3] and b.shape == [3]
    on.close(b, [7.0] * 3, atol=0)
    a, c = on(qb.vmap(lambda x: (x, 1.0), out_axes=(0, None)))(qb.ones(3))
    assert c.shape == [] and float(c) == 1.0
    with pytest.raises(ValueError):
        qb.vmap(lambda x: x, out_axes=None)(qb.ones(3))


def test_vmap_errors():
    with pytest.raises(ValueError, match="inconsistent sizes"):
        qb.vmap(lambda a, b: a + b)(qb.ones(3), qb.ones(4))
    with pytest.raises(ValueError):
        qb.vmap(lambda a: a, in_axes=None)(qb.ones(3))
    with pytest.raises(ValueError):
        qb.vmap(lambda a, s: a * s, in_axes=(0, 0))(qb.ones(3), 2.0)
    with pytest.raises(ValueError):
        qb.vmap(lambda a: a, in_axes=2)(qb.ones((3, 2)))
    with pytest.raises(ValueError):
        qb.vmap(lambda a, b: a, in_axes=(0, 0, 0))(qb.ones(3), qb.ones(3))
    # a Python scalar shared over the batch is fine (in_axes None)
    assert_close(qb.vmap(lambda a, s: a * s, in_axes=(0, None))(qb.ones(3), 2.0), [2.0] * 3)


def test_per_example_gradients_with_respect_to_an_unmapped_argument(on):
    rng = np.random.default_rng(2)
    xs = qb.array(rng.normal(size=(4, 3)))
    w = qb.array(rng.normal(size=(3, 2)))

    def f(x, w):
        return qb.sum(qb.tanh(x @ w))

    per_example = on(qb.vmap(qb.grad(f, argnums=1), in_axes=(0, None)))(xs, w)
    assert per_example.shape == [4, 3, 2]
    loop = np.stack([np64(qb.grad(f, argnums=1)(xs[i], w)) for i in range(4)])
    on.close(per_example, loop)
    # reverse mode of the batched function sums them (spec 003 §3.6)
    total = on(qb.grad(lambda w: qb.sum(qb.vmap(f, in_axes=(0, None))(xs, w))))(w)
    on.close(total, loop.sum(axis=0))
    gx, gw = on(lambda xs, w, ct: qb.vjp(qb.vmap(f, in_axes=(0, None)), xs, w)[1](ct))(
        xs, w, qb.ones(4))
    on.close(gw, loop.sum(axis=0))
    assert gx.shape == [4, 3]


def test_per_example_gradients_of_the_spec_example(on):
    per_example = lambda w, x: qb.sum(qb.tanh(x * w))
    w = qb.array([0.5, 1.0])
    xs = qb.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    g = on(qb.vmap(qb.grad(per_example), in_axes=(None, 0)))(w, xs)
    x = np64(xs)
    on.close(g, x / np.cosh(x * np64(w)) ** 2)


def test_nested_vmap_and_vmap_of_hvp(on):
    a = qb.array([1.0, 2.0])
    b = qb.array([1.0, 10.0, 100.0])
    out = on(qb.vmap(qb.vmap(lambda x, y: x * y, in_axes=(0, None)), in_axes=(None, 0)))(a, b)
    on.close(out, np.outer(np64(b), np64(a)))
    m = qb.array(np.arange(24.0).reshape(2, 3, 4))
    out = on(qb.vmap(qb.vmap(lambda r: qb.sum(r * r))))(m)
    on.close(out, (np64(m) ** 2).sum(axis=-1))
    f = lambda x: qb.sum(qb.sin(x) * x)
    xs = qb.array(np.linspace(0.1, 1.0, 6).reshape(3, 2))
    vs = qb.array(np.ones((3, 2)))
    hvp = on(qb.vmap(lambda x, v: qb.jvp(qb.grad(f), (x,), (v,))[1]))(xs, vs)
    x = np64(xs)
    on.close(hvp, 2 * np.cos(x) - x * np.sin(x))


def test_pinn_second_derivative_inside_vmap(on):
    u = lambda x, w: qb.sin(x * w)
    u_xx = qb.vmap(qb.grad(qb.grad(u)), in_axes=(0, None))
    x = qb.linspace(0.05, 0.95, 8)
    w = 2.5
    on.close(on(u_xx)(x, qb.array(w)), -w * w * np.sin(np64(x) * w))

    def loss(w, x):
        return qb.mean((u_xx(x, w) + math.pi ** 2 * qb.sin(math.pi * x)) ** 2)

    value, g = qb.jit(qb.value_and_grad(loss), device=on.device)(qb.array(w), x)
    xv = np64(x)
    r = -w * w * np.sin(xv * w) + math.pi ** 2 * np.sin(math.pi * xv)
    dr = -2 * w * np.sin(xv * w) - w * w * xv * np.cos(xv * w)
    on.close(value, np.mean(r ** 2), rtol=0)
    on.close(g, np.mean(2 * r * dr), rtol=0, atol=1e-10)


# -- vmap of the linear algebra: solve and cholesky on stacks of matrices --------------------------

def _spd_stack(rng, batch, n):
    m = rng.normal(size=batch + (n, n))
    return m @ np.swapaxes(m, -1, -2) + n * np.eye(n)


def _chol_solve_loss(a, b):
    """Uses cholesky and solve (with a 2-d b, and a 1-d b shared by the stack of factors)."""
    lower = qb.cholesky(a)
    return (qb.sum(qb.solve(lower, b) ** 2) + qb.sum(lower * qb.eye(a.shape[-1]))
            + qb.sum(qb.sin(qb.solve(qb.stack([lower, a]), b[:, 0]))))


@pytest.mark.parametrize("in_axes", [(0, 0), (0, None), (None, 0)])
def test_vmap_of_solve(in_axes, on):
    rng = np.random.default_rng(6)
    a, b = _spd_stack(rng, (4,), 3), rng.normal(size=(4, 3))
    args = [x if ax == 0 else x[0] for x, ax in zip((a, b), in_axes)]
    solve = lambda a, b: qb.solve(a, b)  # a trace cache of its own, not qb.solve's
    out = on(qb.vmap(solve, in_axes=in_axes))(*map(qb.array, args))
    full_a, full_b = np.broadcast_to(args[0], (4, 3, 3)), np.broadcast_to(args[1], (4, 3))
    on.close(out, np.linalg.solve(full_a, full_b[..., None])[..., 0])
    # a matrix right-hand side, mapped along its last axis, and vmap of vmap
    out = on(qb.vmap(solve, in_axes=(None, -1), out_axes=-1))(qb.array(a[0]), qb.array(b.T))
    on.close(out, np.linalg.solve(a[0], b.T))
    stacked = _spd_stack(rng, (2, 4), 3), rng.normal(size=(2, 4, 3))
    out = on(qb.vmap(qb.vmap(solve)))(*map(qb.array, stacked))
    on.close(out, np.linalg.solve(stacked[0], stacked[1][..., None])[..., 0])


def test_vmap_of_cholesky(on):
    a = _spd_stack(np.random.default_rng(7), (4, 2), 3)  # two stack axes: vmap over a batched op
    out = on(qb.vmap(qb.cholesky, in_axes=1, out_axes=-1))(qb.array(a))
    on.close(out, np.moveaxis(np.linalg.cholesky(a), 1, -1))
    out = qb.jit(qb.vmap(lambda m: qb.cholesky(m) @ qb.transpose(qb.cholesky(m))),
                 device=on.device)(qb.array(a[0]))
    on.close(out, a[0])


@pytest.mark.parametrize("in_axes", [(0, 0), (None, 0), (0, None)])
def test_per_example_gradients_through_cholesky_and_solve(in_axes, on):
    rng = np.random.default_rng(8)
    a, b = _spd_stack(rng, (3,), 3), rng.normal(size=(3, 3, 2))
    args = [qb.array(x if ax == 0 else x[0]) for x, ax in zip((a, b), in_axes)]
    g = qb.grad(_chol_solve_loss, argnums=(0, 1))
    per_example = on(qb.vmap(g, in_axes=in_axes))(*args)
    pick = lambda x, ax, i: x[i] if ax == 0 else x
    for i in range(3):
        expected = g(*[pick(x, ax, i) for x, ax in zip(args, in_axes)])
        for got, want in zip(per_example, expected):
            on.close(got[i], want)
    # reverse mode of the batched loss: mapped gradients as they are, unmapped ones summed
    total = on(qb.grad(lambda *xs: qb.sum(qb.vmap(_chol_solve_loss, in_axes=in_axes)(*xs)),
                       argnums=(0, 1)))(*args)
    for got, per, ax in zip(total, per_example, in_axes):
        on.close(got, per if ax == 0 else np64(per).sum(axis=0))


# -- closures and constants ----------------------------------------------------------------------

def test_eager_array_closed_over_becomes_a_constant(on):
    points = qb.linspace(0.0, 1.0, 8)
    f = lambda w: qb.sum(qb.sin(points * w))
    g = on(qb.grad(f))
    on.close(g(qb.array(1.0)), np.sum(np64(points) * np.cos(np64(points))))
    graph = staged_graph(qb.jit(f), qb.array(1.0))
    assert graph.inputs and len(graph.inputs) == 1
    assert any(n.op == "constant" and n.shape == (8,) for n in graph.nodes)


def test_closed_over_constant_is_fixed_at_trace_time(on):
    data = {"points": qb.array([1.0, 2.0])}
    f = qb.jit(lambda w: qb.sum(data["points"] * w), device=on.device)
    assert float(f(qb.array(1.0))) == 3.0
    data["points"] = qb.array([10.0, 20.0])
    assert float(f(qb.array(1.0))) == 3.0     # as with jax.jit: no retrace for a rebinding


def test_closure_over_an_enclosing_tracer_differentiates_through_it(on):
    """S4b repro: grad in w of (d/dx sin(x w))^2 at x = 0.3, w = 1.2."""
    def loss(w):
        u_x = qb.grad(lambda x: qb.sin(x * w))
        return u_x(0.3) ** 2

    x, w = 0.3, 1.2
    exact = 2 * (w * math.cos(x * w)) * (math.cos(x * w) - x * w * math.sin(x * w))
    on.close(on(qb.grad(loss))(qb.array(w)), exact, rtol=0, atol=1e-14)
    on.close(qb.jit(qb.grad(loss), device=on.device)(qb.array(w)), exact, rtol=0, atol=1e-14)


def test_closure_and_explicit_argument_forms_agree(on):
    rng = np.random.default_rng(3)
    params = {"w": qb.array(rng.normal(size=(1, 4))), "v": qb.array(rng.normal(size=(4,)))}
    x = qb.linspace(0.1, 0.9, 5)

    def net(p, t):
        return qb.sum(qb.tanh(t * p["w"][0]) * p["v"])

    def loss_closure(p, x):
        u_xx = qb.vmap(qb.grad(qb.grad(lambda t: net(p, t))))
        return qb.mean(u_xx(x) ** 2)

    def loss_explicit(p, x):
        u_xx = qb.vmap(qb.grad(qb.grad(net, argnums=1), argnums=1), in_axes=(None, 0))
        return qb.mean(u_xx(p, x) ** 2)

    v1, g1 = qb.jit(qb.value_and_grad(loss_closure), device=on.device)(params, x)
    v2, g2 = qb.jit(qb.value_and_grad(loss_explicit), device=on.device)(params, x)
    on.close(v1, v2, rtol=1e-13, atol=1e-14)
    for k in params:
        on.close(g1[k], g2[k], rtol=1e-12, atol=1e-13)


def test_two_level_capture(on):
    def f(w, y):
        def middle(s):
            inner = qb.grad(lambda t: qb.sin(t * w) * y)   # w from two levels up, y from one
            return inner(s) * s
        return qb.grad(middle)(y)

    w, y = 0.7, 1.1
    # middle(s) = w cos(s w) y s; d/ds = w y cos(s w) - w^2 y s sin(s w), at s = y
    exact = w * y * math.cos(y * w) - w * w * y * y * math.sin(y * w)
    on.close(on(f)(qb.array(w), qb.array(y)), exact, rtol=0, atol=1e-14)
    g = on(qb.grad(f))(qb.array(w), qb.array(y))
    eps = 1e-6
    fd = (float(f(qb.array(w + eps), qb.array(y))) - float(f(qb.array(w - eps), qb.array(y)))) / (2 * eps)
    on.close(g, fd, rtol=0, atol=1e-8)


def test_closure_in_a_loop_inside_one_trace(on):
    def loss(w):
        u = qb.grad(lambda x: qb.sin(x * w))
        return sum(u(float(i) / 4) for i in range(4))

    w = 1.3
    exact = sum(math.cos(i / 4 * w) - i / 4 * w * math.sin(i / 4 * w) for i in range(4))
    on.close(on(qb.grad(loss))(qb.array(w)), exact, rtol=0, atol=1e-13)


_XS = qb.array([1.0, 2.0])
_MASK = qb.array([True, False])


def _jvp_closure(w):
    _, tangent = qb.jvp(lambda x, m: qb.where(m, x * w * w, 0.0), (_XS, _MASK),
                        (qb.array([2.0, 5.0]), _MASK))
    return qb.sum(tangent)                                   # 2 w^2


def _vjp_closure(w):
    _, pull = qb.vjp(lambda x: x[0] * w * x, _XS)
    return qb.sum(pull(qb.array([2.0, 5.0]))[0])             # 19 w


def _vjp_closure_bool_output(w):
    _, pull = qb.vjp(lambda x, m: (qb.where(m, x * w, 0.0), m), _XS, _MASK)
    g, gm = pull((qb.array([2.0, 5.0]), _MASK))
    assert gm is None
    return qb.sum(g * w)                                     # 2 w^2


def _has_aux_closure(w):
    g, aux = qb.grad(lambda x: (qb.sum(x * w) ** 2, x * w), has_aux=True)(_XS)
    return qb.sum(g) + qb.sum(aux)                           # 12 w^2 + 3 w


def _vmap_closure(w):
    out, shared = qb.vmap(lambda r: (r * w, w), out_axes=(1, None))(qb.ones((3, 2)))
    return qb.sum(out) + shared                              # 6 w + w


def _jit_closure(w):
    h = qb.jit(lambda z: z * w)
    return h(qb.array(2.0)) + h(w)                           # 2 w + w^2


@pytest.mark.parametrize("f, d", [
    (_jvp_closure, lambda w: 4 * w),
    (_vjp_closure, lambda w: 19.0),
    (_vjp_closure_bool_output, lambda w: 4 * w),
    (_has_aux_closure, lambda w: 24 * w + 3),
    (_vmap_closure, lambda w: 7.0),
    (_jit_closure, lambda w: 2 + 2 * w),
], ids=["jvp", "vjp", "vjp bool output", "has_aux", "vmap out_axes", "jit"])
def test_inner_transforms_closing_over_an_outer_tracer(f, d, on):
    """S4b: every transform carries its captures, which bind back to the enclosing tracers."""
    w = 3.0
    on.close(on(qb.grad(f))(qb.array(w)), d(w), atol=0)
    on.close(qb.jit(qb.grad(f), device=on.device)(qb.array(w)), d(w), atol=0)


def test_jit_of_a_transform_inside_a_trace_inlines(on):
    inner = qb.jit(qb.grad(lambda x: x ** 3))
    outer = on(qb.grad(lambda x: inner(x) * x))
    on.close(outer(qb.array(2.0)), 9 * 2.0 ** 2, atol=0)   # d/dx (3 x^2 * x)


# -- comparison against JAX (skipped when JAX is not installed) -----------------------------------

@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def test_against_jax_second_derivatives(jax):
    jnp = jax.numpy
    f_qb = lambda x: qb.tanh(qb.sin(x) * x ** 2.5) + qb.exp(-x)
    f_jax = lambda x: jnp.tanh(jnp.sin(x) * x ** 2.5) + jnp.exp(-x)
    for x in (0.3, 1.7):
        ours = float(qb.grad(qb.grad(f_qb))(qb.array(x)))
        theirs = float(jax.grad(jax.grad(f_jax))(x))
        assert abs(ours - theirs) < 1e-12 * max(1.0, abs(theirs))


def test_against_jax_per_example_gradients(jax):
    jnp = jax.numpy
    rng = np.random.default_rng(4)
    xs, w = rng.normal(size=(5, 3)), rng.normal(size=(3, 2))
    ours = qb.vmap(qb.grad(lambda x, w: qb.sum(qb.tanh(x @ w) ** 2), argnums=1),
                   in_axes=(0, None))(qb.array(xs), qb.array(w))
    theirs = jax.vmap(jax.grad(lambda x, w: jnp.sum(jnp.tanh(x @ w) ** 2), argnums=1),
                      in_axes=(0, None))(xs, w)
    assert_close(ours, np.asarray(theirs), rtol=1e-12, atol=1e-12)


def test_against_jax_hvp_and_pytrees(jax):
    jnp = jax.numpy
    rng = np.random.default_rng(5)
    p = {"a": rng.normal(size=3), "b": rng.normal(size=(3, 3))}
    v = {"a": rng.normal(size=3), "b": rng.normal(size=(3, 3))}
    f_qb = lambda p: qb.sum(qb.sin(p["b"] @ p["a"]) ** 2) + qb.sum(p["a"] ** 4)
    f_jax = lambda p: jnp.sum(jnp.sin(p["b"] @ p["a"]) ** 2) + jnp.sum(p["a"] ** 4)
    as_qb = lambda t: {k: qb.array(a) for k, a in t.items()}
    _, ours = qb.jvp(qb.grad(f_qb), (as_qb(p),), (as_qb(v),))
    _, theirs = jax.jvp(jax.grad(f_jax), (p,), (v,))
    for k in p:
        assert_close(ours[k], np.asarray(theirs[k]), rtol=1e-12, atol=1e-12)


def test_against_jax_pow_conventions(jax):
    """Away from x <= 0 we agree with JAX; at x < 0 JAX's exponent gradient is NaN, ours 0."""
    jnp = jax.numpy
    for x, y in [(1.5, 2.5), (0.5, -1.0), (2.0, 0.5)]:
        ours = qb.grad(lambda a, b: a ** b, argnums=(0, 1))(qb.array(x), qb.array(y))
        theirs = jax.grad(lambda a, b: a ** b, argnums=(0, 1))(x, y)
        for o, t in zip(ours, theirs):
            assert abs(float(o) - float(t)) < 1e-12
    ours = qb.grad(lambda b: qb.array(-2.0) ** b)(qb.array(2.0))
    theirs = jax.grad(lambda b: jnp.power(-2.0, b))(2.0)
    assert float(ours) == 0.0 and math.isnan(float(theirs))


def test_against_jax_batched_solve_and_cholesky(jax):
    """Values and per-example gradients (jax's cholesky symmetrises its input, as our rule
    does; the inputs are symmetric)."""
    jnp = jax.numpy
    rng = np.random.default_rng(9)
    a, b = _spd_stack(rng, (2, 3), 4), rng.normal(size=(2, 3, 4, 2))
    assert_close(qb.cholesky(qb.array(a)), np.asarray(jnp.linalg.cholesky(a)), rtol=1e-12,
                 atol=1e-12)
    vector = b[0, 0, :, 0]  # one vector for the whole stack
    assert_close(qb.solve(qb.array(a), qb.array(vector)),
                 np.asarray(jnp.linalg.solve(a, vector)), rtol=1e-12, atol=1e-12)
    ours = qb.jit(qb.solve)(qb.array(a), qb.array(b))
    assert_close(ours, np.asarray(jax.scipy.linalg.solve(a, b)), rtol=1e-12, atol=1e-12)

    def f_jax(a, b):
        lower = jnp.linalg.cholesky(a)
        return (jnp.sum(jnp.linalg.solve(lower, b) ** 2) + jnp.sum(lower * jnp.eye(a.shape[-1]))
                + jnp.sum(jnp.sin(jnp.linalg.solve(jnp.stack([lower, a]), b[:, 0]))))

    ours = qb.vmap(qb.vmap(qb.grad(_chol_solve_loss, argnums=(0, 1))))(qb.array(a), qb.array(b))
    theirs = jax.vmap(jax.vmap(jax.grad(f_jax, argnums=(0, 1))))(a, b)
    for o, t in zip(ours, theirs):
        assert_close(o, np.asarray(t), rtol=1e-10, atol=1e-12)


def test_op_count_helper_sees_the_graph():
    counts = op_counts(staged_graph(qb.grad(qb.sin), qb.array(1.0)))
    assert counts.get("cos") == 1
