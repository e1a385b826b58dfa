"""checkpoint (JAX's jax.checkpoint / remat): the same values and derivatives as the plain
function under every transform and on every device, with the forward values reverse mode
needs recomputed inside a remat region instead of stored."""

import numpy as np
import pytest

import quabla as qb

from helpers import assert_close

pytestmark = pytest.mark.filterwarnings("ignore::quabla.PrecisionWarning")  # MLX's float32

RNG = np.random.default_rng(3)
WS = [RNG.normal(size=(5, 5)) / 2 for _ in range(3)]
X = RNG.normal(size=(4, 5))


def block(w, x):
    for _ in range(3):
        x = qb.tanh(x @ w)
    return x


def loss(ws, x, remat):
    layer = qb.checkpoint(block) if remat else block
    for w in ws:
        x = layer(w, x)
    return qb.sum(x * qb.sin(x))


def test_checkpoint_changes_no_value_or_derivative(on):
    ws, x = [qb.array(w) for w in WS], qb.array(X)
    for transform in (qb.value_and_grad, qb.grad):
        plain = on(transform(lambda ws, x: loss(ws, x, False)))(ws, x)
        remat = on(transform(lambda ws, x: loss(ws, x, True)))(ws, x)
        for a, b in zip(qb.tree.leaves(remat), qb.tree.leaves(plain)):
            on.close(a, b, rtol=1e-11, atol=1e-12)
    tangent = qb.array(RNG.normal(size=X.shape))
    jvps = [on(lambda x: qb.jvp(lambda y: loss(ws, y, r), (x,), (tangent,))[1])(x)
            for r in (False, True)]
    on.close(jvps[1], jvps[0], rtol=1e-11, atol=1e-12)
    xs = qb.array(RNG.normal(size=(2, 4, 5)))
    batched = [on(qb.vmap(qb.grad(lambda y: loss(ws, y, r))))(xs) for r in (False, True)]
    on.close(batched[1], batched[0], rtol=1e-11, atol=1e-12)


def test_second_order_and_static_arguments():
    f = qb.checkpoint(lambda x, p: qb.sum(qb.sin(x) ** p), static_argnums=(1,))
    x = np.array([0.1, 0.2, 0.7])
    assert_close(qb.hessian(lambda x: f(x, 2))(qb.array(x)), np.diag(2 * np.cos(2 * x)),
                 rtol=1e-12, atol=1e-12)
    assert_close(f(qb.array(x), 3), np.sum(np.sin(x) ** 3))
    with pytest.raises(ValueError, match="static_argnums"):
        qb.grad(qb.checkpoint(lambda x: qb.sum(x), static_argnums=(2,)))(qb.array(x))


def test_backward_pass_recomputes_inside_a_region():
    """Without the region the rewriter's CSE merges the recomputation with the forward pass;
    with it, the backward remat region holds the block's products again, and the values the
    plain program keeps between the passes are not outputs of the forward regions."""
    ws, x = [qb.array(w) for w in WS], qb.array(X)
    graph = qb.jit(qb.grad(lambda ws, x: loss(ws, x, True))).lower(ws, x).graph
    regions = [n.kw["fun"] for n in graph.nodes if n.op == "remat"]
    count = lambda g, op: sum(m.op == op for m in g.nodes)
    forward, backward = regions[:len(WS)], regions[len(WS):]
    assert [(count(g, "dot_general"), count(g, "tanh"), len(g.outputs)) for g in forward] \
        == [(3, 3, 1)] * len(WS)                 # each block's output only leaves its region
    # last layer first: its three products and tanhs again, then six (five for the first
    # layer, whose input needs no cotangent)
    assert [(count(g, "dot_general"), count(g, "tanh")) for g in backward] \
        == [(9, 3)] * (len(WS) - 1) + [(8, 3)]
    assert count(graph, "tanh") == count(graph, "dot_general") == 0


def test_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def j_block(w, x):
        for _ in range(3):
            x = jnp.tanh(x @ w)
        return x

    def j_loss(ws, x):
        for w in ws:
            x = jax.checkpoint(j_block)(w, x)
        return jnp.sum(x * jnp.sin(x))

    grads = qb.jit(qb.grad(lambda ws, x: loss(ws, x, True)))([qb.array(w) for w in WS], qb.array(X))
    for a, b in zip(grads, jax.grad(j_loss)(WS, X)):
        assert_close(a, b, rtol=1e-11, atol=1e-12)
