"""``Compiled.numba``: a compiled Quabla program called from users' own ``@numba.njit`` code
(docs/numba-interop.md), and the molecular-dynamics example built on it."""

import importlib.util
import os

import numpy as np
import pytest

import quabla as qb

numba = pytest.importorskip("numba")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _energy(x):
    return qb.sum(qb.sin(x) * x) + 0.5 * qb.sum(x * x)


X = np.linspace(-1.0, 1.0, 6).reshape(3, 2)


@pytest.fixture(scope="module")
def grad_numba():
    return qb.jit(qb.grad(_energy)).lower(qb.ShapeDtype(X.shape)).compile().numba


@numba.njit
def _descend(gradient, x, rate, steps):
    """Gradient descent in the user's Numba code: every gradient is a call of ``gradient``."""
    x = x.copy()
    for _ in range(steps):
        x -= rate * gradient(x)
    return x


def test_one_output_is_the_array(grad_numba):
    expected = np.sin(X) + X * np.cos(X) + X
    np.testing.assert_allclose(grad_numba(X), expected, rtol=1e-15)
    ref = X.copy()
    for _ in range(5):
        ref = ref - 0.1 * (np.sin(ref) + ref * np.cos(ref) + ref)
    x = _descend(grad_numba, X, 0.1, 5)
    np.testing.assert_allclose(x, ref, rtol=1e-14)


def test_any_layout_is_accepted_and_shapes_are_checked(grad_numba):
    wide = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
    view = wide[:, ::2]  # not C-contiguous
    np.testing.assert_allclose(grad_numba(view), grad_numba(np.ascontiguousarray(view)))
    with pytest.raises(ValueError, match=r"argument 0 must have shape \(3, 2\)"):
        grad_numba(np.ones((2, 3)))
    with pytest.raises(TypeError):  # Numba finds no matching signature for another dtype
        grad_numba(X.astype(np.float32))


def _loss(w, b, x):
    h = qb.tanh(x @ w + b)
    return qb.mean(h * h)


@numba.njit
def _sum_of_losses(value_and_grad, w, b, x, n):
    total = 0.0
    for _ in range(n):
        value, gw, gb = value_and_grad(w, b, x)
        total += value
    return total, gw, gb


def test_several_outputs_are_a_tuple_and_a_scalar_is_a_float():
    w, b = np.linspace(-1, 1, 12).reshape(4, 3), np.array([0.1, 0.0, -0.1])
    x = np.linspace(0, 2, 20).reshape(5, 4)
    jitted = qb.jit(qb.value_and_grad(_loss, argnums=(0, 1)))
    run = jitted.lower(w, b, x).compile()
    total, gw, gb = _sum_of_losses(run.numba, w, b, x, 3)
    value, (gw_ref, gb_ref) = jitted(w, b, x)
    assert total == pytest.approx(3 * float(value), rel=1e-15)
    np.testing.assert_allclose(gw, np.asarray(gw_ref), rtol=1e-14)
    np.testing.assert_allclose(gb, np.asarray(gb_ref), rtol=1e-14)
    value_only = qb.jit(_loss).lower(w, b, x).compile().numba
    assert isinstance(value_only(w, b, x), float)
    assert value_only(w, b, x) == pytest.approx(float(value), rel=1e-15)


def test_float32_bool_and_scalar_inputs_with_constants_and_scratch():
    table = np.array([1.0, 2.0, 3.0, 4.0], np.float32)  # a non-scalar constant of the program

    def f(x, mask, s):
        y = qb.where(mask, qb.exp(x) * table, -x)
        return qb.tanh(qb.reshape(y, (4, 1)) @ qb.reshape(y * s, (1, 4))), qb.sum(y) * s

    x = np.linspace(0, 1, 4).astype(np.float32)
    mask = np.array([True, False, True, True])
    s = np.float32(0.5)
    run = qb.jit(f).lower(qb.ShapeDtype(4, "float32"), qb.ShapeDtype(4, "bool"),
                          qb.ShapeDtype((), qb.float32)).compile()
    assert run.executable.constants  # the constant table travels by address

    @numba.njit
    def call(fn, x, mask, s):
        return fn(x, mask, s)

    outer, total = call(run.numba, x, mask, s)  # a 0-d input is a scalar in Numba
    ref_outer, ref_total = run(x, mask, np.asarray(s))
    assert outer.dtype == np.float32 and outer.shape == (4, 4)
    np.testing.assert_allclose(outer, np.asarray(ref_outer), rtol=1e-6)
    assert total == pytest.approx(float(ref_total), rel=1e-6)
    y = np.where(mask, np.exp(x) * table, -x)
    assert total == pytest.approx(float(y.sum() * s), rel=1e-6)


def test_the_numba_function_outlives_the_compiled_object():
    run = qb.jit(lambda x: qb.cos(x) * 3.0).lower(qb.ShapeDtype(3)).compile()
    fn = run.numba
    del run
    import gc

    gc.collect()
    np.testing.assert_allclose(fn(np.array([0.0, 1.0, 2.0])), 3 * np.cos([0.0, 1.0, 2.0]))


def test_molecular_dynamics_example_matches_the_python_loop(capsys):
    path = os.path.join(ROOT, "examples", "md_numba_interop.py")
    spec = importlib.util.spec_from_file_location("md_numba_interop", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(small=True) < 1e-10
    out = capsys.readouterr().out
    assert "8 particles, 20 steps" in out
    # the gradient is the force field's: compare with central differences of the energy
    x, _ = module.initial_state(2)
    g = np.asarray(qb.grad(module.lennard_jones)(x))
    e = np.zeros_like(x)
    e[0, 0] = 1e-6
    fd = (float(module.lennard_jones(x + e)) - float(module.lennard_jones(x - e))) / 2e-6
    assert g[0, 0] == pytest.approx(fd, rel=1e-6)
