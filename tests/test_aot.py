"""Ahead of time (spec 000 §3.1, §3.5): ``lower`` with ``ShapeDtype`` leaves, the compiled
callable of one exact signature, and the name-keyed ``Compiler``/``Program``/``Executable``."""

import numpy as np
import pytest

import quabla as qb


def _loss(params, x):
    h = qb.tanh(x @ params["w"] + params["b"])
    return qb.sum(h * h), h


W = np.linspace(-1.0, 1.0, 6).reshape(3, 2)
B = np.array([0.1, -0.2])
X = np.linspace(0.0, 1.0, 12).reshape(4, 3)


@pytest.fixture(scope="module")
def compiled():
    """``value_and_grad`` with aux over a dict of parameters, lowered from abstract leaves."""
    fn = qb.jit(qb.value_and_grad(_loss, has_aux=True))
    specs = ({"w": qb.ShapeDtype((3, 2), qb.float64), "b": qb.ShapeDtype(2, "float64")},
             qb.ShapeDtype((4, 3)))
    return fn, fn.lower(*specs)


def test_shape_dtype_leaves_lower_like_arrays(compiled):
    fn, lowered = compiled
    concrete = fn.lower({"w": W, "b": B}, X)
    assert lowered.graph == concrete.graph
    assert lowered.as_text() == concrete.as_text()
    assert "def quabla_entry" in lowered.source


def test_compiled_takes_and_returns_the_jitted_pytrees(compiled):
    fn, lowered = compiled
    run = lowered.compile()
    (value, h), grads = run({"w": W, "b": B}, X)
    (value_ref, h_ref), grads_ref = fn({"w": qb.asarray(W), "b": qb.asarray(B)}, qb.asarray(X))
    assert isinstance(value, qb.Tensor) and value.shape == ()
    assert float(value) == pytest.approx(float(value_ref), rel=1e-14)
    np.testing.assert_allclose(np.asarray(h), np.asarray(h_ref), rtol=1e-14)
    assert sorted(grads) == ["b", "w"]
    for k in grads:
        np.testing.assert_allclose(np.asarray(grads[k]), np.asarray(grads_ref[k]), rtol=1e-13)
    # analytically: d/db sum(tanh(z)^2) = sum over rows of 2 tanh(z) (1 - tanh(z)^2)
    t = np.tanh(X @ W + B)
    np.testing.assert_allclose(np.asarray(grads["b"]), (2 * t * (1 - t * t)).sum(0), rtol=1e-13)
    # the flat, unchecked path the Trainer drives: one ndarray per array leaf (b, w sorted)
    flat = run.run(np.ascontiguousarray(B), np.ascontiguousarray(W), np.ascontiguousarray(X))
    assert float(flat[0]) == float(value)


def test_source_is_what_the_device_compiles(on):
    """``.source`` is the text the lowered device's back end has Numba compile: the CPU
    entry's module, the CUDA kernels' module; None on MLX, which calls mlx.core. Solvers are
    expanded into their loops first, as for compiling."""
    def f(x):
        root = qb.newton(lambda r, c: r * r - c, qb.ones(x.shape, dtype=x.dtype), x)
        return qb.sum(qb.sin(x) ** 2 + root)

    lowered = qb.jit(qb.grad(f), device=on.device).lower(qb.ShapeDtype((5,), qb.float32))
    compiled = lowered.compile()
    assert lowered.source == compiled.executable.source
    marker = {"cpu": "def quabla_entry", "mlx": None}.get(on.device, "@cuda.jit")
    assert lowered.source is None if marker is None else marker in lowered.source
    x = np.linspace(1.0, 2.0, 5)
    on.close(compiled(x.astype(np.float32)), np.sin(2 * x) + 0.5 / np.sqrt(x), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("args, got", [
    (({"w": W, "b": B}, X.astype(np.float32)), "float32[4, 3]"),
    (({"w": W, "b": B}, X[:2]), "float64[2, 3]"),
    (({"w": W}, X), "({'w': float64[3, 2]}, float64[4, 3])"),
    (({"w": W, "b": B}, X, X), "float64[4, 3], float64[4, 3])"),
    (({"w": W, "b": B}, 1.0), "1.0)"),
])
def test_another_signature_is_a_type_error_naming_both(compiled, args, got):
    run = compiled[1].compile()
    with pytest.raises(TypeError) as info:
        run(*args)
    message = str(info.value)
    assert "compiled for arguments ({'b': float64[2], 'w': float64[3, 2]}, float64[4, 3])" \
        in message
    assert got in message.split("got")[1]


def test_static_arguments_are_part_of_the_signature():
    def f(x, n, scale=1.0):
        return qb.sum(x ** n) * scale

    fn = qb.jit(f, static_argnums=1, static_argnames="scale")
    run = fn.lower(qb.ShapeDtype(3), 3, scale=2.0).compile()
    x = np.array([1.0, 2.0, 3.0])
    assert float(run(x, 3, scale=2.0)) == 2.0 * 36.0
    with pytest.raises(TypeError, match=r"compiled for arguments \(float64\[3\], 3, 2\.0\), "
                                        r"got \(float64\[3\], 2, 2\.0\)"):
        run(x, 2, scale=2.0)
    with pytest.raises(TypeError, match="got"):
        run(x, 3, scale=3.0)


def test_a_grad_lowered_from_python_scalars_and_keywords():
    """Non-jit transforms lower too; Python floats at differentiated positions are arrays."""
    g = qb.grad(lambda x, y: x * qb.sin(y), argnums=(0, 1))
    run = g.lower(2.0, qb.ShapeDtype(()))
    gx, gy = run.compile()(2.0, np.array(0.5))
    assert float(gx) == pytest.approx(np.sin(0.5), rel=1e-15)
    assert float(gy) == pytest.approx(2.0 * np.cos(0.5), rel=1e-15)
    with pytest.raises(TypeError, match="no keyword arguments"):
        run.compile()(2.0, y=np.array(0.5))


def test_shape_dtype_checks_its_fields_and_is_only_an_argument_of_lower():
    s = qb.ShapeDtype([2, 3], np.float32)
    assert s.shape == (2, 3) and s.dtype is qb.float32
    assert s == qb.ShapeDtype((2, 3), "float32") and s != qb.ShapeDtype((2, 3))
    assert repr(s) == "ShapeDtype((2, 3), float32)"
    with pytest.raises(TypeError, match="unsupported dtype"):
        qb.ShapeDtype(3, np.int8)
    with pytest.raises(TypeError):
        qb.ShapeDtype(2.5)
    with pytest.raises(ValueError, match="positive"):
        qb.ShapeDtype((0, 2))
    with pytest.raises(TypeError, match="argument of lower"):
        qb.jit(qb.sin)(qb.ShapeDtype(3))


def test_float32_program_from_shape_dtype():
    run = qb.jit(lambda x: qb.exp(x) * 2.0).lower(qb.ShapeDtype(3, qb.float32)).compile()
    out = run(np.array([0.0, 1.0, 2.0], np.float32))
    assert out.dtype is qb.float32
    np.testing.assert_allclose(np.asarray(out), 2 * np.exp([0.0, 1.0, 2.0]), rtol=1e-6)


def test_lowered_program_is_ordered_and_named_by_argument_paths(compiled):
    program = compiled[1].program
    assert isinstance(program, qb.Program)
    assert program.inputs == ["0['b']", "0['w']", "1"]
    assert program.output_shapes == [(), (4, 2), (2,), (3, 2)]  # value, aux, grads (b, w)
    assert program.as_text() == program.lower_text()
    assert "0['w']: float64[3, 2]" in program.as_text()
    outs = program.compile("cpu")({"0['w']": W, "0['b']": B, "1": X})
    assert isinstance(outs, list) and len(outs) == 4
    assert float(outs[0]) == pytest.approx(float(np.sum(np.tanh(X @ W + B) ** 2)), rel=1e-14)


# -- Compiler / Program / Executable ---------------------------------------------------------

@pytest.fixture(scope="module")
def programs():
    compiler = qb.Compiler()
    single = compiler.trace(lambda x, w: qb.sum(qb.tanh(x * w)),
                            [("x", (4,)), ("w", [4], qb.float64)])
    ordered = compiler.trace(lambda x, s: (x * s, qb.sum(x)),
                             [("x", (2, 2), "float32"), ("s", (), qb.float32)])
    return single, single.compile(), ordered, ordered.compile(target="cpu")


def test_compiler_trace_single_output_returns_a_tensor(programs):
    single, run = programs[:2]
    assert single.inputs == ["x", "w"]
    assert single.input_shapes == [(4,), (4,)] and single.output_shapes == [()]
    assert "%0 x: float64[4]" in single.as_text()
    x, w = np.array([-1.0, 0.5, 1.0, 2.0]), np.array([0.3, -0.2, 0.1, 0.4])
    out = run({"x": x, "w": w})
    assert isinstance(out, qb.Tensor)
    assert float(out) == pytest.approx(np.tanh(x * w).sum(), rel=1e-15)
    assert float(run(w=w, x=x)) == float(out)  # keywords work too


def test_compiler_trace_ordered_outputs_return_a_list(programs):
    ordered, run = programs[2:]
    assert ordered.output_shapes == [(2, 2), ()]
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    scaled, total = run({"x": x, "s": 0.5})  # a Python number takes the declared dtype
    assert scaled.dtype is qb.float32 and total.dtype is qb.float32
    np.testing.assert_array_equal(np.asarray(scaled), x * 0.5)
    assert float(total) == 10.0


def test_executable_checks_names_shapes_and_dtypes(programs):
    run = programs[1]
    x = np.ones(4)
    with pytest.raises(TypeError, match=r"missing \['w'\], unexpected \['y'\]"):
        run({"x": x, "y": x})
    with pytest.raises(TypeError, match=r"input 'w' must be float64\[4\], got float64\[3\]"):
        run({"x": x, "w": np.ones(3)})
    with pytest.raises(TypeError, match=r"input 'x' must be float64\[4\], got float32\[4\]"):
        run({"x": x.astype(np.float32), "w": x})


def test_compiler_rejects_bad_specs():
    compiler = qb.Compiler()
    with pytest.raises(TypeError, match="a spec is"):
        compiler.trace(qb.sin, [(3,)])
    with pytest.raises(TypeError, match="a spec is"):
        compiler.trace(qb.sin, ["x"])
    with pytest.raises(ValueError, match="declared twice"):
        compiler.trace(lambda a, b: a + b, [("x", 2), ("x", 2)])
    with pytest.raises(TypeError, match="unsupported dtype"):
        compiler.trace(qb.sin, [("x", 2, "int32")])


def test_interpreter_compiled_has_no_numba(monkeypatch):
    monkeypatch.setenv("QUABLA_BACKEND", "interpret")
    run = qb.jit(qb.cos).lower(qb.ShapeDtype(2)).compile()
    np.testing.assert_allclose(np.asarray(run(np.array([0.0, 1.0]))), np.cos([0.0, 1.0]))
    with pytest.raises(qb.UnsupportedOperationError, match="Numba CPU back end") as info:
        run.numba
    assert info.value.op == "numba" and info.value.device == "cpu"


def test_lowering_a_closure_over_tracers_is_a_tracer_error():
    def outer(x):
        with pytest.raises(qb.TracerError, match="cannot be lowered on its own"):
            qb.jit(lambda y: y * x).lower(qb.ShapeDtype(2))
        return x * 2.0

    assert np.asarray(qb.jit(outer)(np.ones(2))).tolist() == [2.0, 2.0]
