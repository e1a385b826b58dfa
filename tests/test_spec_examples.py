"""The examples of the guide that involve transforms run as written and print what it shows:
003 §3.2-3.10 (Function Transforms) and the ``qb.grad`` examples of 004 §6.1 (pytrees).

Each test holds the example's code verbatim where it is runnable; outputs are compared as
captured stdout. Where the guide abbreviates an output (``TraceTensor(...)``, ``...``), the
comparison stops at the abbreviation.
"""

import dataclasses
import math
import traceback
import warnings
from typing import NamedTuple

import numpy as np
import pytest

import quabla as qb


def _lines(capsys):
    return capsys.readouterr().out.splitlines()


# -- 3.2 grad and value_and_grad -----------------------------------------------------------------

def loss(params, x, y):
    pred = x @ params["w"] + params["b"]
    return qb.mean((pred - y) ** 2)


def _data():
    params = {"w": qb.array([[0.5], [-0.25]]), "b": qb.array([0.1])}
    x = qb.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    y = qb.array([[1.0], [2.0], [3.0]])
    return params, x, y


def test_3_2_grad_and_value_and_grad(capsys):
    params, x, y = _data()

    grads = qb.grad(loss)(params, x, y)
    print(qb.tree.map(lambda t: t.shape, grads))

    value, grads = qb.value_and_grad(loss)(params, x, y)
    print(value)

    g_params, g_x = qb.grad(loss, argnums=(0, 1))(params, x, y)   # a tuple of gradients
    print(g_x.shape)

    assert capsys.readouterr().out == (
        "{'b': [1], 'w': [2, 1]}\n"
        "Tensor(2.12666667, dtype=float64)\n"
        "[3, 2]\n"
    )
    # gradients keep the dtypes of their arguments and match the closed form
    pred = np.asarray(x) @ np.asarray(params["w"]) + np.asarray(params["b"])
    r = 2 * (pred - np.asarray(y)) / 3
    np.testing.assert_allclose(np.asarray(grads["w"]), np.asarray(x).T @ r, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(g_x), r @ np.asarray(params["w"]).T, rtol=1e-14)
    assert g_params["b"].dtype is qb.float64


def test_3_2_scalar_output_rule():
    """A shape [1] result raises ValueError; reduce it, or use jacobian or vjp."""
    params, x, y = _data()
    with pytest.raises(ValueError):
        qb.grad(lambda p: qb.sum(x @ p["w"], axis=0))(params)
    out, pull = qb.vjp(lambda p: qb.sum(x @ p["w"], axis=0), params)
    assert out.shape == [1] and pull(qb.ones(1))[0]["w"].shape == [2, 1]


def test_3_2_bool_leaves_and_python_scalars():
    g = qb.grad(lambda p: qb.sum(qb.where(p["m"], p["x"], 0.0)))(
        {"x": qb.array([1.0, 2.0]), "m": qb.array([True, False])})
    assert g["m"] is None
    g = qb.grad(lambda x: x ** 3)(2.0)
    assert g.dtype is qb.float64 and float(g) == 12.0


def loss_aux(params, x, y):
    pred = x @ params["w"] + params["b"]
    return qb.mean((pred - y) ** 2), {"pred": pred}


def test_3_2_auxiliary_outputs():
    params, x, y = _data()
    (value, aux), grads = qb.value_and_grad(loss_aux, has_aux=True)(params, x, y)
    grads2, aux2 = qb.grad(loss_aux, has_aux=True)(params, x, y)
    assert abs(float(value) - 2.12666667) < 1e-8
    assert aux["pred"].shape == [3, 1]
    np.testing.assert_array_equal(np.asarray(aux["pred"]), np.asarray(aux2["pred"]))
    np.testing.assert_array_equal(np.asarray(grads["w"]), np.asarray(grads2["w"]))


def test_3_2_decorator_form():
    @qb.grad(argnums=1)
    def d_dx(params, x):
        return qb.sum(x @ params["w"] + params["b"])

    params, x, _ = _data()
    g = d_dx(params, x)
    np.testing.assert_array_equal(np.asarray(g), np.tile([[0.5, -0.25]], (3, 1)))


# -- 3.3 jvp and vjp -----------------------------------------------------------------------------

def test_3_3_jvp_and_vjp(capsys):
    f = lambda x: qb.sin(x) * x
    out, tangent = qb.jvp(f, (qb.array([0.0, 1.0]),), (qb.array([1.0, 1.0]),))
    print(out, tangent)        # tangent = (cos(x) x + sin(x)) * v

    out, vjp_fun = qb.vjp(f, qb.array([0.0, 1.0]))
    print(vjp_fun(qb.array([1.0, 1.0])))

    assert capsys.readouterr().out == (
        "Tensor([0.        , 0.84147098], dtype=float64) "
        "Tensor([0.        , 1.38177329], dtype=float64)\n"
        "(Tensor([0.        , 1.38177329], dtype=float64),)\n"
    )


# -- 3.4 jacobian and hessian --------------------------------------------------------------------

def test_3_4_jacobian_and_hessian(capsys):
    def h(x):
        return qb.stack([x[0] * x[1], qb.sin(x[0])])

    print(qb.jacobian(h)(qb.array([1.0, 2.0])))                    # [out, in]
    print(qb.hessian(lambda x: qb.sum(x ** 3))(qb.array([1.0, 2.0])))

    assert capsys.readouterr().out == (
        "Tensor([[2.        , 1.        ],\n"
        "        [0.54030231, 0.        ]], dtype=float64)\n"
        "Tensor([[ 6.,  0.],\n"
        "        [ 0., 12.]], dtype=float64)\n"
    )


# -- 3.5 higher-order derivatives ----------------------------------------------------------------

def test_3_5_pinn_second_derivative():
    def u(x, w):                                          # the model at one point
        return qb.sin(x * w)

    u_xx = qb.vmap(qb.grad(qb.grad(u)), in_axes=(0, None))  # exact d2u/dx2 per point

    def loss(w, x):
        return qb.mean((u_xx(x, w) + math.pi**2 * qb.sin(math.pi * x)) ** 2)

    x = qb.linspace(0.05, 0.95, 8)
    value, grad_w = qb.jit(qb.value_and_grad(loss))(qb.array(2.5), x)

    xv, w = np.asarray(x), 2.5
    r = -w * w * np.sin(xv * w) + math.pi ** 2 * np.sin(math.pi * xv)
    dr = -2 * w * np.sin(xv * w) - w * w * xv * np.cos(xv * w)
    assert abs(float(value) - np.mean(r ** 2)) < 1e-12
    assert abs(float(grad_w) - np.mean(2 * r * dr)) < 1e-10


# -- 3.6 vmap ------------------------------------------------------------------------------------

def test_3_6_vmap(capsys):
    def per_example(w, x):                    # x: one example, shape [2]
        return qb.sum(qb.tanh(x * w))

    w = qb.array([0.5, 1.0])
    xs = qb.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    print(qb.vmap(per_example, in_axes=(None, 0))(w, xs))                  # one value per row
    print(qb.vmap(qb.grad(per_example), in_axes=(None, 0))(w, xs).shape)   # per-example grads

    assert capsys.readouterr().out == (
        "Tensor([1.42614474, 1.90447755, 1.98660201], dtype=float64)\n"
        "[3, 2]\n"
    )
    out = qb.vmap(lambda x: x * 2.0, in_axes=1, out_axes=1)(xs)      # map over columns
    np.testing.assert_array_equal(np.asarray(out), 2 * np.asarray(xs))


# -- 3.7 closures and constants ------------------------------------------------------------------

def test_3_7_closures_and_constants():
    points = qb.linspace(0.0, 1.0, 8)
    f = lambda w: qb.sum(qb.sin(points * w))
    g = qb.grad(f)(qb.array(1.0))
    p = np.asarray(points)
    assert abs(float(g) - np.sum(p * np.cos(p))) < 1e-14

    def net(params, t):
        return qb.sum(qb.tanh(t * params["a"]) * params["b"])

    def forcing(x):
        return qb.sin(x)

    def loss(params, x):
        u_xx = qb.vmap(qb.grad(qb.grad(lambda t: net(params, t))))   # closes over params
        return qb.mean((u_xx(x) - forcing(x)) ** 2)

    params = {"a": qb.array([0.5, -1.0]), "b": qb.array([1.0, 0.3])}
    x = qb.linspace(0.1, 0.9, 4)
    value, grads = qb.jit(qb.value_and_grad(loss))(params, x)   # includes d u_xx / d params
    eps = 1e-6
    for k in ("a", "b"):
        for i in range(2):
            e = np.zeros(2)
            e[i] = eps
            plus = dict(params, **{k: params[k] + qb.array(e)})
            minus = dict(params, **{k: params[k] - qb.array(e)})
            fd = (float(loss(plus, x)) - float(loss(minus, x))) / (2 * eps)
            assert abs(float(grads[k][i]) - fd) < 1e-7


# -- 3.8 jit -------------------------------------------------------------------------------------

def test_3_8_jit_on_the_cpu():
    params, x, y = _data()
    step = qb.jit(qb.value_and_grad(loss))                  # CPU
    value, grads = step(params, x, y)
    assert abs(float(value) - 2.12666667) < 1e-8


@pytest.mark.parametrize("device", ["cuda:0", "mlx"])
def test_3_8_jit_on_a_device(device):
    step = qb.jit(qb.value_and_grad(loss), device=device)
    params, x, y = _data()
    try:
        value, _ = step(params, x, y)
    except qb.UnsupportedOperationError as e:  # a target missing from the build, at compile time
        assert e.device is not None
    else:
        assert abs(float(value) - 2.12666667) < 1e-5


def test_3_8_static_arguments(capsys):
    @qb.jit(static_argnums=1)
    def power_sum(x, n):
        return qb.sum(x ** n)

    a = power_sum(qb.array([1.0, 2.0]), 3)     # Tensor(9.)
    b = power_sum(qb.array([1.0, 2.0]), n=2)   # Tensor(5.); n is static by name too
    print(a)
    print(b)
    assert _lines(capsys) == ["Tensor(9., dtype=float64)", "Tensor(5., dtype=float64)"]


def test_3_8_the_trace_cache():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        j = qb.jit(lambda x: x * 2.0, max_traces=2)
        for n in (1, 2, 3):
            j(qb.zeros((n,)))       # the third call warns
    (w,) = [w for w in caught if issubclass(w.category, qb.RetraceWarning)]
    shown = warnings.formatwarning(w.message, w.category, w.filename, w.lineno, "")
    expected = (
        "RetraceWarning: jit(<lambda>) exceeded max_traces=2 and evicted its least recently "
        "used trace:\n"
        "  (float64[1],)\n"
        "new signature:\n"
        "  (float64[3],)\n"
    )
    assert expected in shown
    assert str(w.message).startswith(expected[len("RetraceWarning: "):])


def test_3_8_python_scalars(capsys):
    def f(x, lr):
        print("trace", lr)
        return x * lr

    j = qb.jit(f)
    j(qb.array(1.0), 0.5)             # trace 0.5
    j(qb.array(1.0), 0.25)            # trace 0.25: a new value, a new trace
    j(qb.array(1.0), qb.array(0.1))   # trace TraceTensor(...): an array argument
    j(qb.array(1.0), qb.array(0.2))   # cached

    lines = _lines(capsys)
    assert lines[:2] == ["trace 0.5", "trace 0.25"]
    assert lines[2].startswith("trace TraceTensor(")
    assert len(lines) == 3
    # a weak constant keeps a float32 program in float32
    assert j(qb.array(1.0, dtype=qb.float32), 0.5).dtype is qb.float32
    # in a differentiated position a Python scalar becomes a float64 array: no retrace
    capsys.readouterr()
    g = qb.grad(f)
    g(0.5, 2.0)
    g(0.75, 2.0)
    assert len(_lines(capsys)) == 1


# -- 3.9 rules for traced code ------------------------------------------------------------------

TRACER_MESSAGE = ("TraceTensor cannot drive Python control flow; use quabla.where for "
                  "elementwise selection or an explicit control-flow primitive")


def test_3_9_python_control_flow_raises_tracer_error():
    with pytest.raises(qb.TracerError) as info:
        qb.grad(lambda x: x if x > 0 else -x)(qb.array(1.0))
    assert str(info.value) == TRACER_MESSAGE


def test_3_9_traceback_names_quabla_tracer_error():
    try:
        qb.grad(lambda x: x if x > 0 else -x)(qb.array(1.0))
    except qb.TracerError as e:
        last = traceback.format_exception_only(type(e), e)[-1]
    assert last == f"quabla.TracerError: {TRACER_MESSAGE}\n"


@pytest.mark.parametrize("use", [
    lambda x, tol: float(x), lambda x, tol: x.item(), lambda x, tol: np.asarray(x),
    lambda x, tol: [y for y in [x] if y > tol],
])
def test_3_9_concrete_uses_raise_tracer_error(use):
    def f(x):
        use(x, 0.5)
        return x

    with pytest.raises(qb.TracerError):
        qb.jit(f)(qb.array(1.0))

    def loop(x, tol):
        err = x
        while err > tol:
            err = err * 0.5
        return err

    with pytest.raises(qb.TracerError):
        qb.jit(loop)(qb.array(1.0), 0.1)


def test_3_9_static_control_flow_and_side_effects(capsys):
    @qb.jit(static_argnums=1)
    def f(x, mode):
        print("tracing")
        for _ in range(3):                      # a loop over a fixed range
            x = x * 2.0
        if x.shape[0] > 1:                      # a branch on a shape
            x = x + 1.0
        return qb.where(x > 10.0, x, -x) if mode == "where" else x

    assert np.asarray(f(qb.array([1.0, 2.0]), "where")).tolist() == [-9.0, 17.0]
    f(qb.array([3.0, 4.0]), "where")
    assert np.asarray(f(qb.array([1.0]), "plain")).tolist() == [8.0]
    assert _lines(capsys) == ["tracing", "tracing"]   # once per trace, not once per call


# -- 3.10 errors ---------------------------------------------------------------------------------

def test_3_10_error_classes():
    assert issubclass(qb.QuablaError, Exception)
    assert issubclass(qb.TracerError, qb.QuablaError) and issubclass(qb.TracerError, TypeError)
    for base in (qb.QuablaError, ValueError, NotImplementedError):
        assert issubclass(qb.UnsupportedOperationError, base)
    assert issubclass(qb.RetraceLimitError, qb.QuablaError)
    assert issubclass(qb.RetraceLimitError, ValueError)
    assert issubclass(qb.RetraceWarning, UserWarning)
    e = qb.UnsupportedOperationError(op="solve", device="mlx")
    assert e.op == "solve" and e.device == "mlx"


# -- 004 §6.1: pytrees in grad -----------------------------------------------------------------

class Point(NamedTuple):
    x: qb.Tensor
    y: qb.Tensor


def test_6_1_namedtuple_grad(capsys):
    print(qb.grad(lambda p: p.x * p.y)(Point(qb.array(1.0), qb.array(2.0))))
    assert capsys.readouterr().out == (
        "Point(x=Tensor(2., dtype=float64), y=Tensor(1., dtype=float64))\n"
    )


@qb.tree.register_dataclass
@dataclasses.dataclass(frozen=True)
class Layer:
    w: qb.Tensor
    b: qb.Tensor


@dataclasses.dataclass(frozen=True)
class Mlp:
    layers: list
    activation: str          # static: selects code, not a parameter


qb.tree.register_dataclass(Mlp, data_fields=("layers",), meta_fields=("activation",))


def forward(model, x):
    act = {"tanh": qb.tanh, "relu": qb.relu}[model.activation]
    for layer in model.layers[:-1]:
        x = act(x @ layer.w + layer.b)
    last = model.layers[-1]
    return x @ last.w + last.b


def test_6_1_registered_dataclass_grad(capsys):
    k1, k2 = qb.random.split(qb.random.key(0))
    model = Mlp(
        [Layer(qb.random.glorot_normal(k1, (2, 8)), qb.zeros((8,))),
         Layer(qb.random.glorot_normal(k2, (8, 1)), qb.zeros((1,)))],
        "tanh",
    )
    grads = qb.grad(lambda m, x: qb.sum(forward(m, x) ** 2))(model, qb.ones((4, 2)))
    print(type(grads).__name__, type(grads.layers[0]).__name__, grads.activation)

    assert capsys.readouterr().out == "Mlp Layer tanh\n"
    assert grads.layers[0].w.shape == [2, 8] and grads.layers[1].b.shape == [1]
    # a new meta value retraces (and selects other code)
    relu = Mlp(model.layers, "relu")
    assert qb.grad(lambda m, x: qb.sum(forward(m, x) ** 2))(relu, qb.ones((4, 2))).activation == "relu"


def test_6_1_vmap_with_namedtuple_prefix():
    """in_axes may use the same containers as pytree prefixes: in_axes=(Point(0, None),)."""
    p = Point(qb.array([1.0, 2.0, 3.0]), qb.array(10.0))
    out = qb.vmap(lambda p: p.x * p.y, in_axes=(Point(0, None),))(p)
    np.testing.assert_array_equal(np.asarray(out), [10.0, 20.0, 30.0])
