"""argnums in every order: permuted, negative and repeated tuples select the same blocks as
JAX, in the order given, for grad, value_and_grad, jacobian (both modes) and hessian, with
arguments of different shapes; an argnum that names no argument is a ValueError."""

import numpy as np
import pytest

import quabla as qb

from helpers import assert_close, fd_jacobian, np64

SHAPES = [(2,), (3,), ()]          # a, b, c: different shapes, so a swapped block cannot fit
ARGS = [np.array([0.3, -0.7]), np.array([1.1, 0.4, -0.2]), np.array(0.6)]
ARGNUMS = [(2, 0), (1, 0, 2), (-1, -3), (0, -2)]


def scalar(a, b, c):
    return qb.sum(qb.sin(a) * c) * qb.sum(b ** 2) + c ** 3 * qb.sum(a * a)


def tall(a, b, c):      # 11 outputs from 6 inputs: forward mode
    outer = qb.reshape(qb.expand_dims(a, 1) * qb.expand_dims(b, 0), (6,))
    return qb.concat([qb.sin(outer), a * c, b ** 2 * c])


def wide(a, b, c):      # 2 outputs from 6 inputs: reverse mode
    return qb.stack([qb.sum(a) * c, qb.sum(qb.sin(b) * a[0])])


def _tensors():
    return [qb.array(x) for x in ARGS]


def _fd_blocks(f, argnums):
    """The expected blocks ``[*out.shape, *arg.shape]`` from central differences over all
    arguments, picked in the order of ``argnums``."""
    full = fd_jacobian(f, ARGS)
    out_shape = np64(f(*_tensors())).shape
    starts = np.cumsum([0] + [x.size for x in ARGS])
    return tuple(
        full[:, starts[a]:starts[a + 1]].reshape(out_shape + ARGS[a].shape)
        for a in (a % 3 for a in argnums)
    )


@pytest.mark.parametrize("argnums", ARGNUMS)
def test_grad_and_value_and_grad(argnums):
    expected = _fd_blocks(scalar, argnums)
    grads = qb.grad(scalar, argnums=argnums)(*_tensors())
    value, grads2 = qb.value_and_grad(scalar, argnums=argnums)(*_tensors())
    assert_close(value, np64(scalar(*_tensors())))
    for got in (grads, grads2):
        assert len(got) == len(argnums)
        for g, e in zip(got, expected):
            assert g.shape == e.shape
            assert_close(g, e, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("f", [tall, wide], ids=["forward", "reverse"])
@pytest.mark.parametrize("argnums", ARGNUMS)
def test_jacobian_blocks(f, argnums):
    blocks = qb.jacobian(f, argnums=argnums)(*_tensors())
    expected = _fd_blocks(f, argnums)
    assert len(blocks) == len(argnums)
    for got, e in zip(blocks, expected):
        assert got.shape == e.shape
        assert_close(got, e, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("argnums", ARGNUMS)
def test_hessian_blocks(argnums):
    hess = qb.hessian(scalar, argnums=argnums)(*_tensors())
    rows = [a % 3 for a in argnums]
    for i, ai in enumerate(rows):
        # row i: the Jacobian of the gradient with respect to argument ai
        grad_i = lambda *xs, ai=ai: qb.grad(scalar, argnums=ai)(*xs)
        expected = _fd_blocks(grad_i, argnums)
        for j, aj in enumerate(rows):
            assert hess[i][j].shape == ARGS[ai].shape + ARGS[aj].shape
            assert_close(hess[i][j], expected[j], rtol=1e-6, atol=1e-7)


def test_hessian_reported_case():
    (hbb, hba), (hab, haa) = qb.hessian(lambda a, b: b * b, argnums=(1, 0))(
        qb.array(1.0), qb.array(2.0))
    assert [float(h) for h in (hbb, hba, hab, haa)] == [2.0, 0.0, 0.0, 0.0]
    jb, ja = qb.jacobian(lambda a, b: qb.stack([a * b, b]), argnums=(1, 0))(
        qb.array(1.0), qb.array(2.0))
    assert_close(jb, [1.0, 1.0])
    assert_close(ja, [2.0, 0.0])


def test_repeated_argnums_repeat_the_block():
    for f in (tall, wide):
        b1, a, b2 = qb.jacobian(f, argnums=(1, 0, 1))(*_tensors())
        expected_b, expected_a = _fd_blocks(f, (1, 0))
        assert_close(b1, expected_b, rtol=1e-7, atol=1e-8)
        assert_close(b2, expected_b, rtol=1e-7, atol=1e-8)
        assert_close(a, expected_a, rtol=1e-7, atol=1e-8)


def test_permuted_jacobian_inlined_under_jit_and_vmap():
    direct = qb.jacobian(tall, argnums=(2, 0))(*_tensors())
    jitted = qb.jit(lambda a, b, c: qb.jacobian(tall, argnums=(2, 0))(a, b, c))(*_tensors())
    for d, j in zip(direct, jitted):
        assert_close(j, d)
    cs = qb.array([0.6, -0.4])
    per_c = qb.vmap(qb.jacobian(tall, argnums=(-1, 0)), in_axes=(None, None, 0))(
        *_tensors()[:2], cs)
    for k in range(2):
        one = qb.jacobian(tall, argnums=(-1, 0))(*_tensors()[:2], cs[k])
        for batched, single in zip(per_c, one):
            assert_close(batched[k], single)


@pytest.mark.parametrize("transform", [qb.grad, qb.value_and_grad, qb.jacobian, qb.hessian])
@pytest.mark.parametrize("argnums", [2, -2, (0, 1)])
def test_argnum_out_of_range_is_a_value_error(transform, argnums):
    with pytest.raises(ValueError, match="argnums"):
        transform(lambda x: qb.sum(x * x), argnums=argnums)(qb.ones(3))


# -- against JAX --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def _jax_fns(jax):
    jnp = jax.numpy
    return {
        "scalar": lambda a, b, c: (jnp.sum(jnp.sin(a) * c) * jnp.sum(b ** 2)
                                   + c ** 3 * jnp.sum(a * a)),
        "tall": lambda a, b, c: jnp.concatenate(
            [jnp.sin(jnp.outer(a, b).reshape(6)), a * c, b ** 2 * c]),
        "wide": lambda a, b, c: jnp.stack([jnp.sum(a) * c, jnp.sum(jnp.sin(b) * a[0])]),
    }


@pytest.mark.parametrize("argnums", ARGNUMS)
def test_every_transform_matches_jax(jax, argnums):
    ref = _jax_fns(jax)
    ours = {"scalar": scalar, "tall": tall, "wide": wide}
    pairs = [
        (qb.grad(scalar, argnums=argnums), jax.grad(ref["scalar"], argnums=argnums)),
        (lambda *a: qb.value_and_grad(scalar, argnums=argnums)(*a)[1],
         lambda *a: jax.value_and_grad(ref["scalar"], argnums=argnums)(*a)[1]),
        (qb.jacobian(ours["tall"], argnums=argnums), jax.jacfwd(ref["tall"], argnums=argnums)),
        (qb.jacobian(ours["wide"], argnums=argnums), jax.jacrev(ref["wide"], argnums=argnums)),
        (qb.hessian(scalar, argnums=argnums), jax.hessian(ref["scalar"], argnums=argnums)),
    ]
    for mine, theirs in pairs:
        got = qb.tree.flatten(mine(*_tensors()))[0]
        want = jax.tree_util.tree_leaves(theirs(*ARGS))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == np.shape(w)
            assert_close(g, np.asarray(w), rtol=1e-12, atol=1e-12)
