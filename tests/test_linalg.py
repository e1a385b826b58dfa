"""qb.linalg.triangular_solve (values, JAX, singular matrices, errors) and cholesky's rules
through triangular solves: unchanged derivatives, and no general solve left in their graphs.

The per-primitive derivative and batching checks of triangular_solve are its cases in
tests/test_rules.py (and their Numba parity in tests/test_backend_parity.py)."""

import itertools

import numpy as np
import pytest

import quabla as qb

from helpers import assert_close, fd_jacobian, staged_graph

FLAGS = list(itertools.product([True, False], repeat=2))  # (lower, transpose_a)


def _all_solves(a, b):
    """Every (lower, transpose_a) solve of one ``a`` and ``b``: one program for all four."""
    return [qb.linalg.triangular_solve(a, b, lower=lo, transpose_a=tr) for lo, tr in FLAGS]


_all_solves_jit = qb.jit(_all_solves)


def _expected(a, b, lower, transpose_a):
    t = np.tril(a) if lower else np.triu(a)
    return np.linalg.solve(np.swapaxes(t, -1, -2) if transpose_a else t, b)


def _problem(a_shape, b_shape, seed=0):
    """``a`` well conditioned in both triangles, the other triangle large (it must be ignored)."""
    rng = np.random.default_rng(seed)
    n = a_shape[-1]
    off_diagonal = 5.0 * (1 - np.eye(n)) * rng.uniform(0, 1, a_shape)
    a = rng.uniform(-0.5, 0.5, a_shape) + 2.0 * np.eye(n) + off_diagonal
    return a, rng.uniform(-1, 1, b_shape)


SHAPES = [((3, 3), (3,)), ((3, 3), (3, 2)), ((2, 4, 4), (2, 4, 3)), ((2, 3, 3), (3,)),
          ((2, 1, 3, 3), (4, 3, 2))]


@pytest.mark.parametrize("a_shape, b_shape", SHAPES, ids=str)
def test_values_against_numpy(a_shape, b_shape):
    a, b = _problem(a_shape, b_shape)
    if len(b_shape) > 1:  # np.linalg.solve broadcasts no batch axes of size 1
        b = np.broadcast_to(b, np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + b_shape[-2:])
    for (lower, transpose_a), x in zip(FLAGS, _all_solves(qb.array(a), qb.array(b))):
        assert_close(x, _expected(a, b, lower, transpose_a), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dtype", [qb.float64, qb.float32], ids=str)
def test_numba_matches_numpy_and_the_interpreter(dtype):
    a, b = _problem((2, 4, 4), (2, 4, 3), seed=1)
    args = (qb.array(a, dtype=dtype), qb.array(b, dtype=dtype))
    tol = dict(rtol=1e-12, atol=1e-13) if dtype is qb.float64 else dict(rtol=1e-6, atol=1e-6)
    numpy_tol = tol if dtype is qb.float64 else dict(rtol=1e-5, atol=1e-5)  # float32 data
    for _ in range(2):  # the second call runs the cached executable
        compiled = _all_solves_jit(*args)
        for (lower, transpose_a), x, ref in zip(FLAGS, compiled, _all_solves(*args)):
            assert x.dtype is dtype
            assert_close(x, ref, **tol)
            assert_close(x, _expected(a, b, lower, transpose_a), **numpy_tol)


def test_zero_on_the_diagonal_gives_inf_and_nan_in_both_back_ends():
    a, b = _problem((2, 3, 3), (2, 3, 2), seed=2)
    a[0, 1, 1] = 0.0
    b[0, :, 0] = 0.0  # 0 / 0 in that column: NaN from the zero on; the other column: inf
    interpreted = _all_solves(qb.array(a), qb.array(b))
    compiled = _all_solves_jit(qb.array(a), qb.array(b))
    for x, y in zip(interpreted, compiled):
        x = np.asarray(x)
        assert np.isnan(x[0, 1, 0]) and np.isinf(x[0, 1, 1]) and np.isfinite(x[1]).all()
        np.testing.assert_array_equal(np.asarray(y), x)


@pytest.mark.parametrize("lower, transpose_a", FLAGS)
def test_values_and_gradients_against_jax(lower, transpose_a):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    from jax.scipy.linalg import solve_triangular

    a, b = _problem((2, 3, 3), (2, 3, 2), seed=3)
    w = np.random.default_rng(4).uniform(-1, 1, b.shape)
    trans = 1 if transpose_a else 0

    def loss_jax(a, b):
        return jnp.sum(jnp.sin(solve_triangular(a, b, trans=trans, lower=lower)) * w)

    def loss(a, b):
        x = qb.linalg.triangular_solve(a, b, lower=lower, transpose_a=transpose_a)
        return qb.sum(qb.sin(x) * w)

    x = qb.linalg.triangular_solve(qb.array(a), qb.array(b), lower=lower, transpose_a=transpose_a)
    assert_close(x, solve_triangular(a, b, trans=trans, lower=lower), rtol=1e-12, atol=1e-13)
    grads = qb.grad(loss, argnums=(0, 1))(qb.array(a), qb.array(b))
    expected = jax.grad(loss_jax, argnums=(0, 1))(a, b)
    for g, e in zip(grads, expected):
        assert_close(g, np.asarray(e), rtol=1e-10, atol=1e-12)
    # the triangle that is not read gets no gradient
    unread = np.triu(np.ones((3, 3)), 1) if lower else np.tril(np.ones((3, 3)), -1)
    assert np.all(np.asarray(grads[0])[..., unread > 0] == 0.0)


# -- cholesky through triangular solves ----------------------------------------------------------

def _cholesky_loss(x):
    """A smooth scalar of the Cholesky factor of a positive definite function of ``x``."""
    n = x.shape[-1]
    spd = x @ qb.transpose(x) + 0.5 * qb.eye(n, dtype=x.dtype)
    low = qb.cholesky(spd)
    return qb.sum(qb.sin(low) * qb.arange(1.0, n * n + 1.0).reshape((n, n)))


def _x0():
    return np.random.default_rng(5).uniform(-0.5, 0.5, (3, 3)) + np.eye(3)


def test_cholesky_gradient_and_hessian_against_finite_differences():
    x = _x0()
    grad = qb.grad(_cholesky_loss)
    fd_grad = fd_jacobian(_cholesky_loss, [x])[0]
    assert_close(grad(qb.array(x)), fd_grad.reshape(3, 3), rtol=1e-7, atol=1e-8)
    hess = np.asarray(qb.hessian(_cholesky_loss)(qb.array(x))).reshape(9, 9)
    fd_hess = fd_jacobian(grad, [x], eps=1e-5)
    assert_close(hess, fd_hess, rtol=1e-6, atol=1e-7)
    assert_close(hess, hess.T, rtol=1e-10, atol=1e-10)


def test_cholesky_jvp_of_a_stack_against_finite_differences():
    rng = np.random.default_rng(6)
    x = rng.uniform(-0.5, 0.5, (2, 3, 3)) + np.eye(3)
    t = rng.uniform(-1, 1, x.shape)

    def f(x):
        return qb.cholesky(x @ qb.transpose(x, (0, 2, 1)) + 0.5 * qb.eye(3))

    _, tangent = qb.jvp(f, (qb.array(x),), (qb.array(t),))
    expected = fd_jacobian(f, [x]) @ t.ravel()
    assert_close(np.asarray(tangent).ravel(), expected, rtol=1e-7, atol=1e-8)


def _ops(graph_text):
    """The op names of the nodes in ``as_text()`` (``%3 = op ...``)."""
    return {line.split("=", 1)[1].split()[0] for line in graph_text.splitlines()
            if line.strip().startswith("%") and "=" in line}


def test_cholesky_rules_use_triangular_solves_not_the_general_solve():
    x = qb.array(_x0())
    t = qb.array(np.ones((3, 3)))
    texts = {
        "vjp": qb.jit(qb.grad(_cholesky_loss)).lower(x).as_text(),
        "jvp": qb.jit(lambda x, t: qb.jvp(_cholesky_loss, (x,), (t,))).lower(x, t).as_text(),
        "hessian": qb.jit(qb.hessian(_cholesky_loss)).lower(x).as_text(),
    }
    for name, text in texts.items():
        ops = _ops(text)
        assert "triangular_solve" in ops and "solve" not in ops, (name, sorted(ops))


def test_vmap_binds_one_batched_triangular_solve():
    a, b = _problem((4, 3, 3), (4, 3), seed=7)
    graph = staged_graph(qb.vmap(lambda a, b: qb.linalg.triangular_solve(a, b, lower=True)),
                         qb.array(a), qb.array(b))
    solves = [n for n in graph.nodes if n.op == "triangular_solve"]
    assert [tuple(n.shape) for n in solves] == [(4, 3)]
    assert dict(solves[0].params) == {"lower": True, "transpose_a": False}


# -- the namespace and bad input -----------------------------------------------------------------

def test_linalg_namespace():
    assert qb.linalg.solve is qb.solve and qb.linalg.cholesky is qb.cholesky
    assert "linalg" in qb.__all__ and "triangular_solve" in qb.linalg.__all__


def test_bad_input_is_a_clear_error():
    a, b = np.eye(3), np.ones(3)
    with pytest.raises(TypeError, match="lower must be a bool"):
        qb.linalg.triangular_solve(a, b, lower=1)
    with pytest.raises(TypeError, match="positional|keyword"):
        qb.linalg.triangular_solve(a, b, True)
    with pytest.raises(ValueError, match="quabla.linalg.triangular_solve: b of shape"):
        qb.linalg.triangular_solve(a, np.ones(4))
    with pytest.raises(ValueError, match="square matrices"):
        qb.linalg.triangular_solve(np.ones((3, 2)), b)
    with pytest.raises(TypeError, match="mixed dtypes"):
        qb.linalg.triangular_solve(qb.array(a, dtype=qb.float32), qb.array(b))


@pytest.mark.parametrize("direct", [True, False], ids=["translated", "numba"])
@pytest.mark.parametrize("dtype", [qb.float64, qb.float32], ids=str)
def test_large_solves_through_blas_trsm_match_numpy(monkeypatch, direct, dtype):
    """Solves of ``TRSM_THRESHOLD`` or more multiply-adds call BLAS's trsm where SciPy is
    installed: every triangle and transpose, a stack, the other triangle ignored, through
    the direct translation and through Numba's front end."""
    import lowering.numba_cpu as cpu
    from lowering.numba_cpu import linalg, module_source

    if not linalg.blas_available():
        pytest.skip("no SciPy BLAS")
    monkeypatch.setattr(cpu, "DIRECT", direct)
    # a factor new to every run: the program is compiled here, by the front end asked for
    factor = 1.0 + float(np.random.default_rng().integers(1, 2**20)) / 2**21
    solves = qb.jit(lambda a, b: _all_solves(a, b * factor))
    a, b = _problem((2, 24, 24), (2, 24, 9), seed=4)
    a = a / 10.0 + 2.0 * np.eye(24)  # conditioned for float32
    args = (qb.array(a, dtype=dtype), qb.array(b, dtype=dtype))
    assert 24 * 24 * 9 >= linalg.TRSM_THRESHOLD
    assert "_trsm(" in "".join(module_source(solves.lower(*args).graph)[0])
    tol = dict(rtol=1e-11, atol=1e-12) if dtype is qb.float64 else dict(rtol=2e-4, atol=2e-4)
    a64, b64 = np.asarray(args[0], np.float64), np.asarray(args[1], np.float64)
    b64 = b64 * np.asarray(np.float32(factor) if dtype is qb.float32 else factor, np.float64)
    for _ in range(2):
        for (lower, transpose_a), x in zip(FLAGS, solves(*args)):
            assert x.dtype is dtype
            assert_close(x, _expected(a64, b64, lower, transpose_a), **tol)
