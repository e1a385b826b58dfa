"""The MLP PINN of spec 003 §3.7 in its closure form equals the explicit-argument form
bitwise: the same staged graph, so the same losses and gradients over Adam steps."""

import math

import numpy as np

import quabla as qb
from helpers import mlp_net as net

PI = math.pi


def _params():
    rng = np.random.default_rng(0)

    def glorot(i, o):
        return qb.array(rng.normal(0, math.sqrt(2 / (i + o)), (i, o)))

    return {"W1": glorot(1, 8), "b1": qb.zeros((8,)), "W2": glorot(8, 8), "b2": qb.zeros((8,)),
            "W3": glorot(8, 1), "b3": qb.zeros((1,))}


def loss_closure(p, x):
    u_xx = qb.vmap(qb.grad(qb.grad(lambda t: net(p, t))))          # closes over p
    return qb.mean((u_xx(x) + PI**2 * qb.sin(PI * x)) ** 2)


def loss_explicit(p, x):
    u_xx = qb.vmap(qb.grad(qb.grad(net, argnums=1), argnums=1), in_axes=(None, 0))
    return qb.mean((u_xx(p, x) + PI**2 * qb.sin(PI * x)) ** 2)


def _train(loss, steps=5):
    step = qb.jit(qb.value_and_grad(loss))
    params, x = _params(), qb.linspace(0.0, 1.0, 16)
    opt = qb.optim.Adam(1e-3)
    state = opt.init(params)
    history = []
    for _ in range(steps):
        value, grads = step(params, x)
        history.append((value.numpy(), {k: g.numpy() for k, g in grads.items()}))
        params, state = opt.update(params, grads, state)
    return history, step.lower(_params(), x).graph


def test_closure_form_is_bitwise_the_explicit_form():
    closure, g1 = _train(loss_closure)
    explicit, g2 = _train(loss_explicit)
    assert g1.node_count() == g2.node_count()
    for (v1, d1), (v2, d2) in zip(closure, explicit):
        assert v1.tobytes() == v2.tobytes()
        for k in d1:
            assert d1[k].tobytes() == d2[k].tobytes(), k
    assert closure[-1][0] < closure[0][0]                          # and it trains
