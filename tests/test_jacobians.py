"""jacobian and hessian (spec 003 §3.4, 000 "S4 as landed"): dense blocks from one staged
program, either direction, pytree blocks, and further transforms of them. A test that takes
``on`` runs on every device (helpers.OnDevice); finite differences are taken on the CPU."""

import numpy as np
import pytest

import quabla as qb

from helpers import assert_close, fd_jacobian, np64

pytestmark = pytest.mark.filterwarnings("ignore::quabla.PrecisionWarning")  # MLX's float32


def f_wide(x):          # more inputs than outputs: reverse mode
    return qb.stack([qb.sum(qb.sin(x) * x), qb.sum(x ** 3)])


def f_tall(x):          # more outputs than inputs: forward mode
    return qb.concat([qb.sin(x) * x[0], qb.exp(x), x[1] * x])


@pytest.mark.parametrize("f, n", [(f_wide, 5), (f_tall, 2)], ids=["reverse", "forward"])
@pytest.mark.parametrize("dtype", [qb.float64, qb.float32])
def test_jacobian_matches_finite_differences(f, n, dtype, on):
    x = np.random.default_rng(0).uniform(-1, 1, n)
    jac = on(qb.jacobian(f))(qb.array(x, dtype=dtype))
    assert jac.dtype is dtype
    expected = fd_jacobian(f, [x])
    tol = dict(rtol=1e-7, atol=1e-8) if dtype is qb.float64 else dict(rtol=1e-4, atol=1e-4)
    on.close(jac, expected, **tol)


def test_blocks_follow_pytrees_and_bool_leaves_get_none(on):
    def f(p, flag):
        return {"u": p["w"] * p["b"][0], "s": qb.sum(p["w"])}

    p = {"w": qb.array([1.0, 2.0, 3.0]), "b": qb.array([0.5])}
    jac = on(qb.jacobian(f, argnums=(0, 1)))(p, qb.array([True, False]))
    (du, du_flag), (ds, ds_flag) = jac["u"], jac["s"]
    assert du_flag is None and ds_flag is None
    assert du["w"].shape == [3, 3] and du["b"].shape == [3, 1] and ds["w"].shape == [3]
    on.close(du["w"], 0.5 * np.eye(3))
    on.close(du["b"], [[1.0], [2.0], [3.0]])
    on.close(ds["w"], [1.0, 1.0, 1.0])
    on.close(ds["b"], [0.0])


def test_hessian_is_symmetric_and_exact(on):
    def f(x):
        return qb.sum(qb.sin(x) * x[0] + qb.exp(x * x[1]))

    x = np.array([0.3, -0.7, 1.1])
    hess = np64(on(qb.hessian(f))(qb.array(x)))
    on.close(hess, hess.T)
    grad = lambda v: qb.grad(f)(v)
    on.close(hess, fd_jacobian(grad, [x]), rtol=1e-7, atol=1e-7)


def test_further_transforms_and_inlining(on):
    cube = lambda x: qb.sum(x ** 3)
    x = qb.array([1.0, 2.0])
    # grad of a function of the Hessian: d/dx trace(H) = d/dx sum(6 x) = 6
    on.close(on(qb.grad(lambda x: qb.sum(qb.hessian(cube)(x))))(x), [6.0, 6.0], atol=0)
    batched = on(qb.vmap(qb.hessian(cube)))(qb.array([[1.0, 2.0], [3.0, 4.0]]))
    on.close(batched, [[[6, 0], [0, 12]], [[18, 0], [0, 24]]])
    jac_of_vmap = on(qb.jacobian(qb.vmap(lambda t: qb.sin(t) * t)))(x)
    on.close(jac_of_vmap, np.diag(np.cos([1.0, 2.0]) * [1.0, 2.0] + np.sin([1.0, 2.0])))
    on.close(qb.jit(qb.jacobian(qb.sin), device=on.device)(x), np.diag(np.cos([1.0, 2.0])))


def test_one_program_whatever_the_input_size():
    sizes = {}
    for n in (2, 16, 64):
        g = qb.jit(qb.jacobian(lambda x: qb.sin(x) * qb.sum(x))).lower(qb.ones((n,))).graph
        sizes[n] = g.node_count()
    assert len(set(sizes.values())) == 1, sizes


def test_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    x = np.array([0.2, -0.4, 0.9])
    ours = qb.hessian(lambda v: qb.sum(qb.tanh(v) * v[0]))(qb.array(x))
    theirs = jax.hessian(lambda v: jnp.sum(jnp.tanh(v) * v[0]))(jnp.asarray(x))
    assert_close(ours, np.asarray(theirs), rtol=1e-12, atol=1e-12)


def _batched_solve_args():
    rng = np.random.default_rng(3)
    a = rng.uniform(-0.5, 0.5, (2, 3, 3)) + 3.0 * np.eye(3)
    return a, rng.uniform(-1, 1, (2, 3, 2))


@pytest.mark.parametrize("f", [
    qb.solve,                                                    # 12 outputs: forward mode
    lambda a, b: qb.sum(qb.solve(a, b) ** 2, axis=(1, 2)),       # 2 outputs: reverse mode
    lambda a, b: qb.cholesky(a @ qb.transpose(a, (0, 2, 1))) @ b,
], ids=["forward", "reverse", "cholesky"])
def test_jacobian_of_a_batched_solve(f, on):
    a, b = _batched_solve_args()
    ja, jb = on(qb.jacobian(f, argnums=(0, 1)))(qb.array(a), qb.array(b))
    out_shape = tuple(f(qb.array(a), qb.array(b)).shape)
    assert ja.shape == out_shape + a.shape and jb.shape == out_shape + b.shape
    size = int(np.prod(out_shape))
    jac = np.concatenate([np64(ja).reshape(size, -1), np64(jb).reshape(size, -1)], axis=1)
    on.close(jac, fd_jacobian(f, [a, b]), rtol=1e-7, atol=1e-8)


def test_jacobian_of_a_batched_solve_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    a, b = _batched_solve_args()
    ours = qb.jacobian(qb.solve, argnums=(0, 1))(qb.array(a), qb.array(b))
    theirs = jax.jacfwd(jax.numpy.linalg.solve, argnums=(0, 1))(a, b)
    for o, t in zip(ours, theirs):
        assert_close(o, np.asarray(t), rtol=1e-12, atol=1e-12)
