"""The v0.1 compatibility layer (issue 27 item 5; spec 000 §5, D14-D17, Appendix A).

Every Appendix A row is checked twice: its status behaviour (``test_status``: a warning once
for deprecated and legacy top-level access, none for core and advanced, none under a star
import) and its equivalent with real numbers (the tests below, each declaring with ``covers``
the rows it exercises; ``test_every_row_is_exercised`` checks that together they cover all 132).
"""

import functools
import subprocess
import sys
import warnings

import numpy as np
import pytest

import quabla
import quabla as qb
from quabla import compat
from quabla.errors import UnsupportedOperationError

# Appendix A: the 132 names of dir(quabla) on v0.1, with their status (name, status).
APPENDIX_A = """
Adam                                        deprecated
Compiler                                    advanced
CpuExecutionPlan                            legacy
Executable                                  advanced
GradFunction                                legacy
GradScalarFunction                          legacy
GradScalarTransform                         legacy
JacobianFunction                            legacy
JacobiansFunction                           legacy
JitFunction                                 legacy
JitTransform                                legacy
JvpFunction                                 legacy
Matrix                                      legacy
Program                                     advanced
Tensor                                      core
TensorBatchCudaJitFunction                  deprecated
TensorBatchCudaValueAndGradFunction         deprecated
TensorBatchJitFunction                      deprecated
TensorBatchMlxValueAndGradFunction          deprecated
TensorBatchValueAndGradFunction             deprecated
TensorCondFunction                          deprecated
TensorCondJvpFunction                       deprecated
TensorCondValueAndGradFunction              deprecated
TensorCpuExecutionPlan                      advanced
TensorCudaAdamOptimizer                     advanced
TensorCudaExecutionPlan                     advanced
TensorCudaValueAndGradFunction              deprecated
TensorGradScalarFunction                    deprecated
TensorHessianScalarFunction                 deprecated
TensorHvpScalarFunction                     deprecated
TensorJacobianFunction                      deprecated
TensorJitFunction                           deprecated
TensorJvpFunction                           deprecated
TensorMlxAdamOptimizer                      advanced
TensorMlxExecutionPlan                      advanced
TensorMlxValueAndGradFunction               deprecated
TensorTraceGraph                            deprecated
TensorTraceResult                           deprecated
TensorValueAndGradFunction                  deprecated
TensorView                                  core
TensorVjpFunction                           deprecated
TensorVmapCudaFunction                      deprecated
TensorVmapCudaHvpScalarFunction             deprecated
TensorVmapCudaJvpFunction                   deprecated
TensorVmapCudaVjpFunction                   deprecated
TensorVmapFunction                          deprecated
TensorVmapHvpScalarFunction                 deprecated
TensorVmapJvpFunction                       deprecated
TensorVmapMlxFunction                       deprecated
TensorVmapMlxJvpFunction                    deprecated
TensorVmapMlxVjpFunction                    deprecated
TensorVmapVjpFunction                       deprecated
TraceGraph                                  legacy
TraceMatrix                                 legacy
TraceResult                                 legacy
TraceTensor                                 core
ValueAndGradFunction                        legacy
VjpFunction                                 legacy
bool_                                       core
concat                                      core
cuda_adam_loss_optimizer                    deprecated
cuda_adam_optimizer                         deprecated
cuda_adam_step                              deprecated
cuda_adam_vjp_optimizer                     deprecated
dtype                                       core
einsum                                      core
equal                                       core
float32                                     core
float64                                     core
grad                                        core+legacy
grad_fn                                     legacy
grad_scalar                                 legacy
grad_scalar_fn                              legacy
greater                                     core
greater_equal                               core
isfinite                                    core
isnan                                       core
jacobian_fn                                 legacy
jacobians_fn                                legacy
jit                                         core+legacy
jvp_fn                                      legacy
less                                        core
less_equal                                  core
logical_and                                 core
logical_not                                 core
logical_or                                  core
mlx_adam_loss_optimizer                     deprecated
not_equal                                   core
quabla                                      deprecated
stack                                       core
sum_gradients                               deprecated
tensor_cond                                 deprecated
tensor_cond_fn                              deprecated
tensor_cond_jvp_fn                          deprecated
tensor_cond_value_and_grad_fn               deprecated
tensor_fori_loop                            deprecated
tensor_fori_loop_region                     deprecated
tensor_grad_scalar_fn                       deprecated
tensor_hessian_scalar_fn                    deprecated
tensor_hvp_scalar_fn                        deprecated
tensor_jacobian_fn                          deprecated
tensor_jit_batch_cuda_fn                    deprecated
tensor_jit_batch_fn                         deprecated
tensor_jit_cuda_fn                          deprecated
tensor_jit_fn                               deprecated
tensor_jvp_fn                               deprecated
tensor_scan                                 deprecated
tensor_scan_region                          deprecated
tensor_value_and_grad_batch_cuda_fn         deprecated
tensor_value_and_grad_batch_fn              deprecated
tensor_value_and_grad_batch_mlx_fn          deprecated
tensor_value_and_grad_cuda_fn               deprecated
tensor_value_and_grad_data_parallel_cuda_fn deprecated
tensor_value_and_grad_fn                    deprecated
tensor_value_and_grad_mlx_fn                deprecated
tensor_vjp_fn                               deprecated
tensor_vmap_cuda_fn                         deprecated
tensor_vmap_fn                              deprecated
tensor_vmap_hvp_scalar_cuda_fn              deprecated
tensor_vmap_hvp_scalar_fn                   deprecated
tensor_vmap_jvp_cuda_fn                     deprecated
tensor_vmap_jvp_fn                          deprecated
tensor_vmap_jvp_mlx_fn                      deprecated
tensor_vmap_mlx_fn                          deprecated
tensor_vmap_vjp_cuda_fn                     deprecated
tensor_vmap_vjp_fn                          deprecated
tensor_vmap_vjp_mlx_fn                      deprecated
trace                                       legacy
trace_tensor                                deprecated
value_and_grad_fn                           legacy
vjp_fn                                      legacy
where                                       core
"""
ROWS = dict(line.split() for line in APPENDIX_A.strip().splitlines())

COVERED = set()


def covers(*names):
    """Marks a test as the numeric check of the Appendix A rows ``names``."""
    unknown = set(names) - set(ROWS)
    assert not unknown, unknown
    COVERED.update(names)
    return lambda test: test


def old(name):
    """``quabla.<name>`` without its deprecation warning (``test_status`` checks that)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return getattr(quabla, name)


def close(a, b, tol=1e-12):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol,
                               atol=tol)


HAS_CUDA = any(d.startswith("cuda") for d in qb.devices())
X = [0.5, -1.0, 2.0]
W = [0.3, 0.2, -0.4]
SPECS = [("x", [3]), ("w", [3])]
SPECS32 = [("x", [3], qb.float32), ("w", [3], qb.float32)]


def loss(x, w):
    return qb.sum(qb.sin(x * w) * x)


def inputs(dtype=np.float64):
    return {"x": qb.array(np.array(X, dtype)), "w": qb.array(np.array(W, dtype))}


def analytic_grads():
    x, w = np.array(X), np.array(W)
    return {"x": np.sin(x * w) + x * w * np.cos(x * w), "w": x * x * np.cos(x * w)}


@functools.cache
def reference():
    """The v0.2 value and gradients of ``loss`` (shared by the value-and-grad checks)."""
    return qb.jit(qb.value_and_grad(loss, argnums=(0, 1)))(*inputs().values())


# -- status behaviour ----------------------------------------------------------------------------

def test_appendix_counts_and_table():
    statuses = list(ROWS.values())
    assert len(ROWS) == 132
    assert {s: statuses.count(s) for s in set(statuses)} == {
        "core": 22, "core+legacy": 2, "advanced": 8, "deprecated": 76, "legacy": 24}
    for name, status in ROWS.items():
        row = compat.TABLE.get(name)
        if status in ("deprecated", "legacy", "core+legacy"):
            assert row is not None and row.status == status, name
    assert set(ROWS) <= set(dir(quabla))
    assert "legacy" in dir(quabla)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_status(name):
    status = ROWS[name]
    if status in ("core", "advanced", "core+legacy") or name == "trace":
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            value = getattr(quabla, name)
        assert value is not None
        if status == "core+legacy" or name == "trace":
            # qb.grad/qb.jit are the v0.2 transforms (D17 dispatches their v0.1 forms); qb.trace
            # stays NumPy's trace here, the v0.1 tracer is quabla.legacy.trace
            assert value is getattr(qb.api if name != "trace" else qb.shapes, name)
            assert callable(getattr(qb.legacy, name))
        return
    vars(quabla).pop(name, None)
    with pytest.warns(DeprecationWarning) as record:
        value = getattr(quabla, name)
    assert len(record) == 1
    message = str(record[0].message)
    assert f"quabla.{name}" in message and compat.TABLE[name].replacement in message
    assert record[0].filename == __file__  # points at the user's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(quabla, name) is value  # once per name
        if status == "legacy":
            assert getattr(qb.legacy, name) is value  # no warning in quabla.legacy
            assert "legacy" in message


STAR = """
import warnings
from quabla import *
import quabla
names = {names!r}
missing = [n for n in names if n not in globals()]
assert not missing, missing
assert Matrix is quabla.legacy.Matrix and tensor_jit_fn is quabla.legacy.__dict__.get(
    "tensor_jit_fn", tensor_jit_fn)
bound = [n for n in names if n in vars(quabla) and n != "trace"]  # qb.trace: NumPy's
assert not bound, bound  # a star import does not spend the once-per-name warning
with warnings.catch_warnings(record=True) as record:
    warnings.simplefilter("always")
    quabla.tensor_jit_fn
    quabla.Matrix
assert len(record) == 2, record
"""


def test_star_import_binds_without_warnings():
    names = [n for n, s in ROWS.items() if s in ("deprecated", "legacy")]
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c",
                           STAR.format(names=names)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def test_from_import_warns_and_unknown_names_raise():
    vars(quabla).pop("sum_gradients", None)
    with pytest.warns(DeprecationWarning, match="sum_gradients"):
        from quabla import sum_gradients  # noqa: F401
    with pytest.raises(AttributeError):
        quabla.no_such_name  # noqa: B018
    with pytest.raises(AttributeError):
        qb.legacy.tensor_jit_fn  # noqa: B018  (deprecated, not legacy)


def test_d17_legacy_call_forms_warn_and_dispatch():
    values = inputs()
    with pytest.warns(DeprecationWarning, match="quabla.legacy.grad") as record:
        grads = qb.grad(loss, SPECS, values, 1.0)
    assert record[0].filename == __file__
    for k, v in analytic_grads().items():
        close(grads[k], v)
    with pytest.warns(DeprecationWarning, match="quabla.legacy.jit"):
        doubled = qb.jit([("x", [3])])(lambda x: 2.0 * x)
    assert isinstance(doubled, qb.legacy.JitFunction)
    close(doubled({"x": X}), 2 * np.array(X))
    with warnings.catch_warnings():  # the v0.2 forms stay silent
        warnings.simplefilter("error")
        close(qb.grad(loss)(*values.values()), analytic_grads()["x"])
        close(qb.jit(loss)(*values.values()), reference()[0])


# -- equivalents: core and advanced -----------------------------------------------------------

@covers("Tensor", "TensorView", "TraceTensor", "dtype", "float32", "float64", "bool_",
        "concat", "stack", "einsum", "where", "equal", "not_equal", "greater", "greater_equal",
        "less", "less_equal", "isfinite", "isnan", "logical_and", "logical_not", "logical_or",
        "grad", "jit", "Compiler", "Program", "Executable")
def test_core_names():
    x = qb.array([1.0, -2.0, 3.0])
    assert isinstance(x, qb.Tensor) and isinstance(x, qb.TensorView)
    assert qb.dtype("float32") is qb.float32 and qb.dtype(np.float64) is qb.float64
    assert all(isinstance(d, qb.dtype) for d in (qb.float32, qb.float64, qb.bool_))
    assert not isinstance("float32", qb.dtype)
    seen = []
    qb.grad(lambda t: seen.append(type(t)) or qb.sum(t))(x)
    assert issubclass(seen[0], qb.TraceTensor)
    assert qb.where(qb.greater(x, 0.0), x, 0.0).tolist() == [1.0, 0.0, 3.0]
    assert qb.concat([x, x]).shape == [6] and qb.stack([x, x]).shape == [2, 3]
    close(qb.einsum("i,i->", x, x), 14.0)
    masks = [qb.equal(x, 1.0), qb.not_equal(x, 1.0), qb.greater_equal(x, 1.0), qb.less(x, 1.0),
             qb.less_equal(x, 1.0), qb.isfinite(x), qb.isnan(x)]
    assert [m.tolist() for m in masks] == [
        [True, False, False], [False, True, True], [True, False, True], [False, True, False],
        [True, True, False], [True, True, True], [False, False, False]]
    assert qb.logical_and(masks[0], masks[2]).tolist() == [True, False, False]
    assert qb.logical_or(masks[0], masks[3]).tolist() == [True, True, False]
    assert qb.logical_not(masks[0]).tolist() == [False, True, True]
    assert x.astype(qb.float32).dtype is qb.float32 and qb.bool_.name == "bool"
    program = qb.Compiler().trace(loss, SPECS)
    assert isinstance(program, qb.Program)
    executable = program.compile()
    assert isinstance(executable, qb.Executable)
    close(executable(inputs()), reference()[0])
    close(qb.jit(qb.grad(loss, argnums=1))(*inputs().values()), analytic_grads()["w"])


@covers("TensorCpuExecutionPlan", "TensorCudaExecutionPlan", "TensorMlxExecutionPlan",
        "CpuExecutionPlan", "Matrix", "TraceMatrix", "TraceGraph", "TensorTraceGraph")
def test_unsupported_names_say_what_to_use():
    instead = {"TensorCpuExecutionPlan": "Program.compile", "TensorCudaExecutionPlan": "cuda",
               "TensorMlxExecutionPlan": "mlx", "CpuExecutionPlan": "qb.jit",
               "Matrix": "qb.array", "TraceMatrix": "TraceTensor", "TraceGraph": "Program",
               "TensorTraceGraph": "Program"}
    for name, hint in instead.items():
        cls = old(name)
        assert not isinstance(qb.array(1.0), cls)
        with pytest.raises(UnsupportedOperationError, match=hint) as info:
            cls()
        assert f"quabla.{name}" in str(info.value) and info.value.op == name


@covers("quabla", "sum_gradients", "Adam")
def test_module_alias_sum_gradients_and_adam():
    assert old("quabla") is quabla and old("quabla").tensor_jit_fn is old("tensor_jit_fn")
    a = {"w": qb.array([1.0, 2.0]), "b": [qb.array(1.0)]}
    total = old("sum_gradients")(a, a, a)
    assert total["w"].tolist() == [3.0, 6.0] and total["b"][0].item() == 3.0
    adam = old("Adam")(learning_rate=0.1)
    params = {"w": qb.array([1.0, 2.0])}
    opt, state = qb.optim.Adam(0.1), qb.optim.Adam(0.1).init(params)
    expected = params
    for _ in range(3):
        params = adam.step(params, {"w": qb.array([0.5, -1.0])})
        expected, state = opt.update(expected, {"w": qb.array([0.5, -1.0])}, state)
    close(params["w"], expected["w"])


# -- equivalents: the transform helpers ------------------------------------------------------------

def _check_value_and_grad(fn, result_type, tol=1e-12, dtype=np.float64):
    assert isinstance(fn, old(result_type))
    value, grads = fn(inputs(dtype))
    close(value, reference()[0], tol)
    assert sorted(grads) == ["w", "x"]
    for k, g in zip("xw", reference()[1]):
        close(grads[k], g, tol)
        close(grads[k], analytic_grads()[k], tol)
    return value


@covers("tensor_value_and_grad_fn", "TensorValueAndGradFunction", "value_and_grad_fn",
        "ValueAndGradFunction", "tensor_value_and_grad_batch_fn",
        "TensorBatchValueAndGradFunction")
def test_value_and_grad_helpers():
    _check_value_and_grad(old("tensor_value_and_grad_fn")(loss, SPECS),
                          "TensorValueAndGradFunction")
    _check_value_and_grad(qb.legacy.value_and_grad_fn(loss, SPECS), "ValueAndGradFunction")
    batch = old("tensor_value_and_grad_batch_fn")(loss, ["x", "w"], max_specializations=4)
    value = _check_value_and_grad(batch, "TensorBatchValueAndGradFunction", 1e-6, np.float32)
    assert value.dtype is qb.float64  # v0.1 batch helpers trace every input as float64
    only_w = old("tensor_value_and_grad_fn")(loss, SPECS, wrt="w")
    assert list(only_w(inputs())[1]) == ["w"]
    with pytest.raises(TypeError, match="missing"):
        only_w({"x": X})
    with pytest.raises(TypeError, match="float64"):
        only_w(inputs(np.float32))


@covers("tensor_value_and_grad_mlx_fn", "TensorMlxValueAndGradFunction",
        "tensor_value_and_grad_batch_mlx_fn", "TensorBatchMlxValueAndGradFunction")
def test_value_and_grad_on_mlx():
    if "mlx" not in qb.devices():
        with pytest.raises(UnsupportedOperationError, match="mlx"):
            old("tensor_value_and_grad_mlx_fn")(loss, SPECS32)(inputs(np.float32))
        return
    _check_value_and_grad(old("tensor_value_and_grad_mlx_fn")(loss, SPECS32),
                          "TensorMlxValueAndGradFunction", 1e-5, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", qb.PrecisionWarning)  # float64 runs as float32 on MLX
        _check_value_and_grad(old("tensor_value_and_grad_batch_mlx_fn")(loss, ["x", "w"]),
                              "TensorBatchMlxValueAndGradFunction", 1e-5, np.float32)


@covers("tensor_grad_scalar_fn", "TensorGradScalarFunction", "grad_scalar_fn",
        "GradScalarFunction", "grad_scalar", "GradScalarTransform", "grad_fn", "GradFunction",
        "tensor_vjp_fn", "TensorVjpFunction", "vjp_fn", "VjpFunction")
def test_gradient_and_vjp_helpers():
    expected = analytic_grads()
    transform = qb.legacy.grad_scalar(SPECS)
    assert isinstance(transform, qb.legacy.GradScalarTransform)
    built = [(old("tensor_grad_scalar_fn")(loss, SPECS), "TensorGradScalarFunction"),
             (qb.legacy.grad_scalar_fn(loss, SPECS), "GradScalarFunction"),
             (transform(loss), "GradScalarFunction")]
    for fn, result_type in built:
        assert isinstance(fn, old(result_type))
        grads = fn(inputs())
        for k in "xw":
            close(grads[k], expected[k])
    vector = lambda x, w: qb.sin(x * w)
    ct = qb.array([1.0, 2.0, -1.0])
    (out, pullback) = qb.vjp(vector, *inputs().values())
    want = pullback(ct)
    grad_fn = qb.legacy.grad_fn(vector, SPECS)
    assert isinstance(grad_fn, qb.legacy.GradFunction)
    for k, g in zip("xw", want):
        close(grad_fn(inputs(), ct)[k], g)
    for fn, result_type in [(old("tensor_vjp_fn")(vector, SPECS), "TensorVjpFunction"),
                            (qb.legacy.vjp_fn(vector, SPECS), "VjpFunction")]:
        assert isinstance(fn, old(result_type))
        value, grads = fn(inputs(), ct)
        close(value, out)
        for k, g in zip("xw", want):
            close(grads[k], g)


@covers("tensor_jvp_fn", "TensorJvpFunction", "jvp_fn", "JvpFunction")
def test_jvp_helpers():
    vector = lambda x, w: qb.sin(x * w)
    t = np.array([1.0, 0.0, 2.0])
    x, w = np.array(X), np.array(W)
    for fn, result_type in [(old("tensor_jvp_fn")(vector, SPECS), "TensorJvpFunction"),
                            (qb.legacy.jvp_fn(vector, SPECS), "JvpFunction")]:
        assert isinstance(fn, old(result_type))
        out, tangent = fn(inputs(), {"x": t})  # no tangent for w: zero
        close(out, np.sin(x * w))
        close(tangent, np.cos(x * w) * w * t)


@covers("tensor_jacobian_fn", "TensorJacobianFunction", "jacobian_fn", "JacobianFunction",
        "jacobians_fn", "JacobiansFunction", "tensor_hessian_scalar_fn",
        "TensorHessianScalarFunction", "tensor_hvp_scalar_fn", "TensorHvpScalarFunction")
def test_jacobian_hessian_hvp_helpers():
    x, w = np.array(X), np.array(W)
    vector = lambda x, w: qb.sin(x * w)
    want_w = np.diag(x * np.cos(x * w))
    for fn, result_type in [(old("tensor_jacobian_fn")(vector, SPECS, wrt="w"),
                             "TensorJacobianFunction"),
                            (qb.legacy.jacobian_fn(vector, SPECS, wrt="w"), "JacobianFunction")]:
        assert isinstance(fn, old(result_type))
        rows = fn(inputs())
        assert isinstance(rows, list) and isinstance(rows[0], list)  # v0.1's list of lists
        close(rows, want_w)
    both = qb.legacy.jacobians_fn(vector, SPECS)
    assert isinstance(both, qb.legacy.JacobiansFunction)
    close(both(inputs())["x"], np.diag(w * np.cos(x * w)))
    close(both(inputs())["w"], want_w)
    hessian = old("tensor_hessian_scalar_fn")(loss, SPECS, wrt="w")
    assert isinstance(hessian, old("TensorHessianScalarFunction"))
    want_h = np.diag(-x ** 3 * np.sin(x * w))
    close(hessian(inputs()), want_h)
    close(qb.hessian(loss, argnums=1)(*inputs().values()), want_h)  # v0.2: a Tensor
    hvp = old("tensor_hvp_scalar_fn")(loss, SPECS, wrt="w")
    assert isinstance(hvp, old("TensorHvpScalarFunction"))
    v = np.array([1.0, -1.0, 0.5])
    close(hvp(inputs(), v), want_h @ v)


@covers("tensor_jit_fn", "TensorJitFunction", "tensor_jit_batch_fn", "TensorBatchJitFunction",
        "JitTransform", "JitFunction", "trace_tensor", "TensorTraceResult", "trace",
        "TraceResult")
def test_jit_and_trace_helpers():
    fn = old("tensor_jit_fn")(loss, SPECS)
    assert isinstance(fn, old("TensorJitFunction"))
    close(fn(inputs()), reference()[0])
    close(fn({"x": X, "w": W}), reference()[0])  # Python data takes the spec's dtype
    batch = old("tensor_jit_batch_fn")(lambda x: 2.0 * x, ["x"])
    assert isinstance(batch, old("TensorBatchJitFunction"))
    out = batch({"x": np.ones(2, np.float32)})
    assert out.dtype is qb.float64 and out.tolist() == [2.0, 2.0]  # v0.1: traced as float64
    assert batch({"x": np.ones(5)}).shape == [5]  # another batch size, another trace
    transform = qb.legacy.jit(SPECS)
    assert isinstance(transform, qb.legacy.JitTransform)
    assert isinstance(transform(loss), qb.legacy.JitFunction)
    close(transform(loss)(inputs()), reference()[0])
    for result, result_type in [(old("trace_tensor")(loss, SPECS), "TensorTraceResult"),
                                (qb.legacy.trace(loss, SPECS), "TraceResult")]:
        assert isinstance(result, old(result_type)) and isinstance(result, qb.Program)
        assert result.inputs == ["x", "w"]
        close(result.compile()(inputs()), reference()[0])


VMAP_SPECS = [("x", [4, 2]), ("w", [2])]


def per_example(x, w):
    return qb.sum(qb.sin(x) * w) * x[0]


def _vmap_data(dtype=np.float64):
    x = np.linspace(-1.0, 1.0, 8).reshape(4, 2).astype(dtype)
    return {"x": qb.array(x), "w": qb.array(np.array([0.5, -0.3], dtype))}


def _check_vmap(make, suffix, tol=1e-12, dtype=np.float64):
    """tensor_vmap{,_jvp,_vjp}{suffix}_fn against the v0.2 compositions."""
    specs = VMAP_SPECS if dtype is np.float64 else [(n, s, qb.float32) for n, s in VMAP_SPECS]
    data = _vmap_data(dtype)
    mapped = qb.vmap(per_example, in_axes=(0, None))
    fn = make(f"tensor_vmap{suffix}_fn")(per_example, specs, in_axes=[0, None])
    assert isinstance(fn, old(f"TensorVmap{suffix.title().replace('_', '')}Function"))
    close(fn(data), mapped(*data.values()), tol)
    t = qb.array(np.ones((4, 2), dtype))
    jvp = make(f"tensor_vmap_jvp{suffix}_fn")(per_example, specs, in_axes=[0, None])
    out, tangent = jvp(data, {"x": t})
    want = qb.jvp(mapped, tuple(data.values()), (t, qb.zeros(2, data["w"].dtype)))
    close(out, want[0], tol)
    close(tangent, want[1], tol)
    ct = qb.array(np.arange(4.0).astype(dtype))
    vjp = make(f"tensor_vmap_vjp{suffix}_fn")(per_example, specs, in_axes=[0, None])
    out, grads = vjp(data, ct)
    pulled = qb.vjp(mapped, *data.values())[1](ct)
    close(grads["x"], pulled[0], tol)
    close(grads["w"], pulled[1], tol)  # the unmapped argument's gradient, summed over the batch


@covers("tensor_vmap_fn", "TensorVmapFunction", "tensor_vmap_jvp_fn", "TensorVmapJvpFunction",
        "tensor_vmap_vjp_fn", "TensorVmapVjpFunction", "tensor_vmap_hvp_scalar_fn",
        "TensorVmapHvpScalarFunction")
def test_vmap_helpers():
    _check_vmap(old, "")
    elementwise = lambda x: qb.sum(x ** 3)
    hvp = old("tensor_vmap_hvp_scalar_fn")(elementwise, [("x", [3, 2])])
    assert isinstance(hvp, old("TensorVmapHvpScalarFunction"))
    x = np.arange(6.0).reshape(3, 2)
    v = np.full((3, 2), 0.5)
    close(hvp({"x": x}, v), 6.0 * x * v)  # d2/dx2 sum(x^3) = 6x, diagonal


@covers("tensor_vmap_mlx_fn", "TensorVmapMlxFunction", "tensor_vmap_jvp_mlx_fn",
        "TensorVmapMlxJvpFunction", "tensor_vmap_vjp_mlx_fn", "TensorVmapMlxVjpFunction")
def test_vmap_helpers_on_mlx():
    if "mlx" not in qb.devices():
        with pytest.raises(UnsupportedOperationError, match="mlx"):
            old("tensor_vmap_mlx_fn")(per_example, VMAP_SPECS)(_vmap_data())
        return
    _check_vmap(old, "_mlx", 1e-5, np.float32)


CUDA_HELPERS = {  # helper: (result type, arguments after f, call arguments)
    "tensor_jit_cuda_fn": ("TensorJitFunction", (SPECS,), 1),
    "tensor_jit_batch_cuda_fn": ("TensorBatchCudaJitFunction", (["x", "w"],), 1),
    "tensor_value_and_grad_cuda_fn": ("TensorCudaValueAndGradFunction", (SPECS,), 1),
    "tensor_value_and_grad_batch_cuda_fn": ("TensorBatchCudaValueAndGradFunction",
                                            (["x", "w"],), 1),
    "tensor_vmap_cuda_fn": ("TensorVmapCudaFunction", (SPECS,), 1),
    "tensor_vmap_jvp_cuda_fn": ("TensorVmapCudaJvpFunction", (SPECS,), 2),
    "tensor_vmap_vjp_cuda_fn": ("TensorVmapCudaVjpFunction", (SPECS,), 2),
    "tensor_vmap_hvp_scalar_cuda_fn": ("TensorVmapCudaHvpScalarFunction", (SPECS,), 2),
}


@covers(*CUDA_HELPERS, *(v[0] for v in CUDA_HELPERS.values()),
        "tensor_value_and_grad_data_parallel_cuda_fn")
def test_cuda_helpers_build_the_device_call():
    """Each CUDA helper builds its result type over ``qb.jit(..., device="cuda")``; without a
    CUDA device the call raises the real jit path's UnsupportedOperationError."""
    elementwise = lambda x, w: qb.sin(x * w)
    for name, (result_type, args, n_call) in CUDA_HELPERS.items():
        f = elementwise if "vmap" in name and "hvp" not in name else loss
        fn = old(name)(f, *args)
        assert isinstance(fn, old(result_type)), name
        call_args = (inputs(),) if n_call == 1 else (inputs(), {"x": X} if "jvp" in name
                                                     else qb.array(X))
        if HAS_CUDA:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", qb.PrecisionWarning)
                assert fn(*call_args) is not None
        else:
            with pytest.raises(UnsupportedOperationError, match="cuda"):
                fn(*call_args)
    parallel = old("tensor_value_and_grad_data_parallel_cuda_fn")(
        loss, SPECS, ["w"], ["x"], [0], "mean")
    assert isinstance(parallel, old("TensorValueAndGradFunction"))
    if not HAS_CUDA:
        with pytest.raises(UnsupportedOperationError, match="cuda"):
            parallel(inputs())


# -- control flow --------------------------------------------------------------------------------

@covers("tensor_cond", "tensor_cond_fn", "TensorCondFunction", "tensor_cond_jvp_fn",
        "TensorCondJvpFunction", "tensor_cond_value_and_grad_fn",
        "TensorCondValueAndGradFunction")
def test_cond_helpers():
    x = qb.array(X)
    close(old("tensor_cond")(True, qb.sin, qb.cos, [x]), np.sin(X))
    traced = qb.jit(lambda p, x: old("tensor_cond")(p > 0.0, qb.sin, qb.cos, (x,)))
    close(traced(qb.array(-1.0), x), np.cos(X))
    double, square = (lambda x, w: qb.sum(2.0 * x * w)), loss
    fn = old("tensor_cond_fn")(double, square, SPECS)
    assert isinstance(fn, old("TensorCondFunction"))
    close(fn(True, inputs()), 2.0 * np.dot(X, W))
    close(fn(False, inputs()), reference()[0])
    vg = old("tensor_cond_value_and_grad_fn")(double, square, SPECS)
    assert isinstance(vg, old("TensorCondValueAndGradFunction"))
    close(vg(True, inputs())[1]["w"], 2.0 * np.array(X))
    close(vg(False, inputs())[1]["w"], analytic_grads()["w"])
    jvp = old("tensor_cond_jvp_fn")(double, square, SPECS)
    assert isinstance(jvp, old("TensorCondJvpFunction"))
    close(jvp(True, inputs(), {"w": np.ones(3)})[1], 2.0 * sum(X))


@covers("tensor_fori_loop", "tensor_fori_loop_region", "tensor_scan", "tensor_scan_region")
def test_loop_helpers():
    body = lambda i, c, s: c * s + i
    want = 1.0
    for i in range(1, 4):
        want = want * 2.0 + i
    for name in ("tensor_fori_loop", "tensor_fori_loop_region"):
        close(old(name)(1, 4, body, qb.array(1.0), [qb.array(2.0)]), want)
        close(qb.fori_loop(1, 4, body, qb.array(1.0), operands=(qb.array(2.0),)), want)
    step = lambda c, i: (c + i, c * 1.0)
    carry, ys = old("tensor_scan")(step, qb.array(0.0), 4)
    assert carry.item() == 6.0 and ys.tolist() == [0.0, 0.0, 1.0, 3.0]
    carry, ys = old("tensor_scan_region")(step, qb.array(0.0), 2, 5)  # absolute i = 2, 3, 4
    assert carry.item() == 9.0 and ys.tolist() == [0.0, 2.0, 5.0]


# -- device optimizers ---------------------------------------------------------------------------

def fit_loss(x, w):
    return qb.mean((x * w - 1.0) ** 2)


def _fit_inputs():
    return {"x": qb.array(np.array([1.0, 2.0, 3.0], np.float32)),
            "w": qb.array(np.array([0.1, 0.2, 0.3], np.float32))}


@covers("mlx_adam_loss_optimizer", "TensorMlxAdamOptimizer")
@pytest.mark.filterwarnings("ignore::quabla.PrecisionWarning")  # the Trainer's step count
def test_mlx_adam_factory_equals_trainer():
    traced = old("trace_tensor")(fit_loss, [("x", [3], qb.float32), ("w", [3], qb.float32)])
    data = _fit_inputs()
    device = "mlx" if "mlx" in qb.devices() else "cpu"
    if device != "mlx":
        with pytest.raises(UnsupportedOperationError, match="mlx"):
            old("mlx_adam_loss_optimizer")(traced, ["w"], data, 0.1)
        return
    optimizer = old("mlx_adam_loss_optimizer")(traced, ["w"], data, 0.1)
    assert isinstance(optimizer, qb.TensorMlxAdamOptimizer)
    assert isinstance(optimizer, qb.optim.Trainer)
    trainer = qb.optim.Trainer(lambda p, d: fit_loss(d["x"], p["w"]), {"w": data["w"]},
                               qb.optim.Adam(0.1), {"x": data["x"]}, device="mlx")
    for _ in range(3):
        optimizer.step()
        trainer.step()
    close(optimizer.params["w"], trainer.params["w"], 1e-6)
    close(optimizer.loss(), trainer.loss(), 1e-6)
    # a non-retained input is replaced by step(inputs), as in v0.1
    batch = old("mlx_adam_loss_optimizer")(traced, ["w"], data, 0.1, retained=[])
    batch.step({"x": qb.array(np.array([2.0, 4.0, 6.0], np.float32))})
    close(batch.loss(), fit_loss(qb.array([2.0, 4.0, 6.0]), qb.array([0.1, 0.2, 0.3])), 1e-6)
    with pytest.raises(ValueError, match="non-retained"):
        optimizer.step({"x": data["x"]})


@covers("cuda_adam_loss_optimizer", "cuda_adam_optimizer", "cuda_adam_vjp_optimizer",
        "cuda_adam_step", "TensorCudaAdamOptimizer")
def test_cuda_adam_factories_are_cuda_trainers():
    traced = old("trace_tensor")(fit_loss, [("x", [3], qb.float32), ("w", [3], qb.float32)])
    for name in ("cuda_adam_loss_optimizer", "cuda_adam_optimizer", "cuda_adam_vjp_optimizer"):
        if HAS_CUDA:
            optimizer = old(name)(traced, ["w"], _fit_inputs(), 0.1)
            assert isinstance(optimizer, qb.TensorCudaAdamOptimizer)
            assert old("cuda_adam_step")(optimizer).shape == []
        else:  # the real Trainer(device="cuda") path
            with pytest.raises(UnsupportedOperationError, match="cuda"):
                old(name)(traced, ["w"], _fit_inputs(), 0.1)
    assert issubclass(qb.TensorCudaAdamOptimizer, qb.optim.Trainer)
    assert qb.TensorCudaAdamOptimizer.device == "cuda"
    with pytest.raises(TypeError, match="trace_tensor"):
        old("cuda_adam_loss_optimizer")(fit_loss, ["w"], _fit_inputs(), 0.1)


def test_every_row_is_exercised():
    assert set(ROWS) - COVERED == set()
