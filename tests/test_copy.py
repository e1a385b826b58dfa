"""copy.copy / copy.deepcopy / pickle of Tensors and tracers (issue 12, item 2).

A copy of a tracer is the tracer itself, so copying inside a transform neither detaches a
value from its trace (wrong derivatives) nor lets a raw TraceTensor reach the user.
"""

import copy
import dataclasses
import pickle
import typing

import numpy as np
import pytest

import quabla as qb
from quabla.core.tracing import TraceTensor
from quabla.errors import TracerError


class Pair(typing.NamedTuple):
    a: object
    b: object


@qb.tree.register_dataclass
@dataclasses.dataclass
class Params:
    w: object
    b: object


def test_deepcopy_under_jit_returns_a_tensor():
    out = qb.jit(lambda x: copy.deepcopy(x) * 2)(qb.ones(3))
    assert type(out) is qb.Tensor
    np.testing.assert_array_equal(out.numpy(), [2.0, 2.0, 2.0])


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
def test_copy_of_a_tracer_is_the_tracer(copier):
    seen = []

    def f(x):
        y = copier(x)
        seen.append(y is x)
        return qb.sum(y * x)

    g = qb.grad(f)(qb.array([1.0, -2.0, 3.0]))
    assert seen == [True]
    np.testing.assert_allclose(g.numpy(), [2.0, -4.0, 6.0])


def test_deepcopy_of_pytrees_of_tracers_keeps_derivatives():
    def loss(p):
        tree = copy.deepcopy({"p": [p.w, (p.b,)], "pair": Pair(p.w, p.b), "params": p})
        q = tree["params"]
        return qb.sum(tree["p"][0] * tree["pair"].b + q.w * q.b) + qb.sum(tree["p"][1][0] ** 2)

    w = qb.array([1.0, 2.0])
    b = qb.array([0.5, -1.5])
    g = qb.grad(loss)(Params(w, b))
    # d/dw = 2 b ; d/db = 2 w + 2 b
    np.testing.assert_allclose(g.w.numpy(), [1.0, -3.0])
    np.testing.assert_allclose(g.b.numpy(), [3.0, 1.0])


def test_deepcopy_under_vmap_and_jvp():
    def f(x):
        y = copy.deepcopy([x, {"x": x}])
        return qb.sin(y[0]) * y[1]["x"]

    xs = qb.array([[0.0, 1.0], [2.0, 3.0]])
    out = qb.vmap(f)(xs)
    np.testing.assert_allclose(out.numpy(), np.sin(xs.numpy()) * xs.numpy())

    x = qb.array([0.5, 1.5])
    primal, tangent = qb.jvp(f, (x,), (qb.ones(2),))
    xv = x.numpy()
    np.testing.assert_allclose(primal.numpy(), np.sin(xv) * xv)
    np.testing.assert_allclose(tangent.numpy(), np.cos(xv) * xv + np.sin(xv))


def test_deepcopy_in_a_jitted_gradient_of_a_closure():
    def outer(x):
        def inner(y):
            c = copy.deepcopy((x, y))  # x is a tracer of the enclosing trace
            return qb.sum(c[0] * c[1] * c[1])

        return qb.grad(inner)(x)

    out = qb.jit(outer)(qb.array([1.0, 3.0]))
    assert type(out) is qb.Tensor
    np.testing.assert_allclose(out.numpy(), [2.0, 18.0])  # 2 x y at y = x


def test_pickling_a_tracer_raises_tracer_error():
    caught = []

    def f(x):
        with pytest.raises(TracerError):
            pickle.dumps(x)
        with pytest.raises(TracerError):
            pickle.dumps({"nested": [x]})
        caught.append(True)
        return x

    qb.jit(f)(qb.ones(2))
    assert caught == [True]


def test_a_copied_escaped_tracer_stays_dead():
    leaked = []
    qb.jit(lambda x: leaked.append(x) or x)(qb.ones(2))
    dead = copy.deepcopy(leaked[0])
    assert isinstance(dead, TraceTensor)
    with pytest.raises(TracerError):
        dead * 2


def test_tensor_copies_are_tensors_with_the_same_bits_and_weak_flag():
    weak = qb.add(2.0, 3.0)
    strong = qb.array([1.0, -0.0, np.nan], dtype=qb.float32)
    for t in (weak, strong):
        assert copy.copy(t) is t  # Tensors are immutable
        assert copy.deepcopy(t) is t
        back = pickle.loads(pickle.dumps(t))
        assert type(back) is qb.Tensor and back is not t
        assert back.dtype is t.dtype and back.shape == t.shape
        assert back.weak == t.weak
        assert back.numpy().tobytes() == t.numpy().tobytes()
        assert not back.numpy().flags.writeable
    memo_tree = copy.deepcopy({"a": strong, "b": [strong]})
    assert memo_tree["a"] is strong and memo_tree["b"][0] is strong
