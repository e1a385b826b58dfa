"""Property-based checks of vmap and jacobian on random compositions of ops (issue: composition).

Each example draws a small expression over ``x`` (mapped) and ``w`` (shared), and checks that
``vmap(f)(xs)`` equals stacking ``f(x)``, that ``vmap(grad(f))`` equals stacking ``grad(f)``,
and that ``jacobian`` matches finite differences. The programs run on the reference
interpreter here (the Numba back end is held to the interpreter by test_backend_parity), so
hundreds of fresh graphs cost no compile time.
"""

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import quabla as qb

from helpers import assert_close, fd_jacobian

UNARY = [qb.sin, qb.cos, qb.tanh, qb.sigmoid, qb.softplus, lambda v: v * v, lambda v: -v,
         lambda v: qb.exp(0.3 * v), lambda v: qb.sqrt(v * v + 1.0)]
BINARY = [qb.add, qb.subtract, qb.multiply, lambda a, b: a / (1.5 + qb.sin(b)),
          qb.maximum, lambda a, b: qb.where(a > b, a, b * 0.5)]
REDUCE = [lambda v: v, lambda v: qb.sum(v) * v, lambda v: qb.mean(v * v) + v,
          lambda v: qb.concat([v[1:], v[:1]]), lambda v: qb.matmul(qb.reshape(v, (1, 3)),
                                                                   qb.ones((3, 3)))[0],
          # a diagonally dominant (so positive definite) matrix: cholesky, then a solve with it
          lambda v: qb.solve(qb.cholesky(qb.eye(3) * (2.0 + v * v) + 0.3), v)]


@st.composite
def programs(draw, depth=3):
    steps = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 8), st.integers(0, 5),
                                    st.booleans()), min_size=1, max_size=depth))

    def f(x, w):
        value = x
        for kind, u, b, use_w in steps:
            if kind == 0:
                value = UNARY[u % len(UNARY)](value)
            elif kind == 1:
                value = BINARY[b % len(BINARY)](value, w if use_w else x)
            else:
                value = REDUCE[b % len(REDUCE)](value)
        return value

    return f


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("QUABLA_BACKEND", "interpret")


DATA = st.lists(st.floats(-2.0, 2.0), min_size=15, max_size=15)


@settings(max_examples=60, deadline=None)
@given(programs(), DATA)
def test_vmap_equals_stacking(f, values):
    xs = qb.array(np.reshape(values[:12], (4, 3)))
    w = qb.array(values[12:])
    batched = qb.vmap(f, in_axes=(0, None))(xs, w)
    looped = qb.stack([f(xs[i], w) for i in range(4)])
    assert_close(batched, looped, rtol=1e-12, atol=1e-12)
    loss = lambda x, w: qb.sum(f(x, w))
    per_example = qb.vmap(qb.grad(loss, argnums=1), in_axes=(0, None))(xs, w)
    assert per_example.shape == [4, 3]
    assert_close(per_example, qb.stack([qb.grad(loss, argnums=1)(xs[i], w) for i in range(4)]),
                 rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(programs(), DATA)
def test_jacobian_matches_finite_differences(f, values):
    x = np.asarray(values[:3]) + 0.0123  # keep away from the kinks of maximum/where at ties
    w = qb.array(values[12:])
    jac = qb.jacobian(lambda x: f(x, w))(qb.array(x))
    expected = fd_jacobian(lambda x: f(x, w), [x], eps=1e-6)
    # at a tie (x against a permutation of equal entries) maximum() has a kink and where() a
    # jump: there the derivative is a convention, and forward and backward differences differ
    forward, backward = (fd_jacobian(lambda x: f(x, w), [x], eps=1e-5, side=s) for s in (1, -1))
    assume(np.allclose(forward, backward, rtol=1e-2, atol=1e-2))
    assert_close(jac, expected, rtol=1e-5, atol=1e-5)
