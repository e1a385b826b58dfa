"""switch, map and vmap's axis_size (JAX's lax.switch, lax.map, vmap(axis_size=)): values,
derivatives through them, composition with jit and vmap, and typed errors."""

import numpy as np
import pytest

import quabla as qb

from helpers import assert_close

BRANCHES = [lambda x: qb.sin(x), lambda x: qb.cos(x), lambda x: x * x, lambda x: -x]
NUMPY = [np.sin, np.cos, lambda x: x * x, lambda x: -x]
DERIVATIVES = [np.cos, lambda x: -np.sin(x), lambda x: 2 * x, lambda x: -1.0 + 0 * x]


def test_switch_clamps_its_index_eagerly_and_traced():
    staged = qb.jit(lambda i, x: qb.switch(i, BRANCHES, x))
    for i in (-3, 0, 1, 2, 3, 9):
        k = min(max(i, 0), 3)
        assert_close(qb.switch(i, BRANCHES, qb.array(0.5)), NUMPY[k](0.5))
        assert_close(staged(qb.array(float(i)), qb.array(0.5)), NUMPY[k](0.5))
    assert_close(staged(qb.array(1.7), qb.array(0.5)), np.cos(0.5))   # traced: rounded down
    with pytest.raises(TypeError, match="whole number"):
        qb.switch(1.5, BRANCHES, qb.array(0.5))
    assert_close(qb.switch(0, [lambda: qb.array(4.0)]), 4.0)


def test_switch_differentiates_and_batches_the_chosen_branch():
    x = np.array([0.3, -0.2, 0.9, 1.1, 0.5])
    idx = np.array([0.0, 1.0, 2.0, 3.0, 2.0])
    grad = qb.vmap(qb.grad(lambda x, i: qb.switch(i, BRANCHES, x)))(qb.array(x), qb.array(idx))
    assert_close(grad, [DERIVATIVES[int(k)](v) for v, k in zip(x, idx)])
    values = qb.jit(qb.vmap(lambda i, x: qb.switch(i, BRANCHES, x)))(qb.array(idx), qb.array(x))
    assert_close(values, [NUMPY[int(k)](v) for v, k in zip(x, idx)])


def test_map_is_a_loop_over_rows_in_batches_or_not():
    xs = np.arange(14.0).reshape(7, 2) / 7
    rows = np.stack([np.sin(r) * r[0] for r in xs])
    f = lambda r: qb.sin(r) * r[0]
    for batch_size in (None, 1, 3, 7, 10):
        assert_close(qb.map(f, qb.array(xs), batch_size=batch_size), rows)
    tree = qb.jit(lambda d: qb.map(lambda p: {"s": qb.sum(p["a"]) + p["b"]}, d, batch_size=2))(
        {"a": qb.array(xs), "b": qb.array(np.ones(7))})
    assert_close(tree["s"], xs.sum(axis=1) + 1)
    grad = qb.grad(lambda v: qb.sum(qb.map(lambda r: qb.sin(r), v)))(qb.array(xs))
    assert_close(grad, np.cos(xs))
    with pytest.raises(ValueError, match="leading extent"):
        qb.map(f, {"a": qb.array(xs), "b": qb.array(np.ones(3))})
    with pytest.raises(ValueError, match="batch_size"):
        qb.map(f, qb.array(xs), batch_size=0)


def test_vmap_axis_size_maps_without_mapped_arguments():
    assert_close(qb.vmap(lambda x: x * 2.0, in_axes=None, axis_size=3)(qb.array(1.5)), [3.0] * 3)
    assert_close(qb.vmap(lambda x, y: x + y, in_axes=(0, None), axis_size=2)(
        qb.array([1.0, 2.0]), qb.array(3.0)), [4.0, 5.0])
    with pytest.raises(ValueError, match="axis_size"):
        qb.vmap(lambda x: x, axis_size=3)(qb.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="axis_size"):
        qb.vmap(lambda x: x, in_axes=None)(qb.array(1.0))


def test_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    j_branches = [jnp.sin, jnp.cos, lambda x: x * x, lambda x: -x]
    for i in (-1, 0, 2, 5):
        assert_close(qb.grad(lambda x: qb.switch(i, BRANCHES, x))(qb.array(0.4)),
                     jax.grad(lambda x: jax.lax.switch(i, j_branches, x))(0.4))
    xs = np.linspace(-1, 1, 10).reshape(5, 2)
    assert_close(qb.jit(lambda v: qb.map(lambda r: qb.tanh(r) * r[1], v, batch_size=2))(qb.array(xs)),
                 jax.lax.map(lambda r: jnp.tanh(r) * r[1], xs, batch_size=2))
    assert_close(qb.vmap(lambda x: x + 1.0, in_axes=None, axis_size=4)(qb.array(2.0)),
                 jax.vmap(lambda x: x + 1.0, in_axes=None, axis_size=4)(2.0))
