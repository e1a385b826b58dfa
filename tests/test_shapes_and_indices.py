"""Shapes, sizes, axes and indices must be integers: floats (and bools, strings) raise
TypeError as in NumPy instead of being truncated (issue 12, item 10)."""

import numpy as np
import pytest

import quabla as qb
from quabla.errors import TracerError

X = qb.array(np.arange(6.0).reshape(2, 3))
KEY = qb.random.key(0)

BAD_SHAPES = [(2.9,), 2.0, (2, 1.5), (np.float64(2.0),), (True,), "3", None, (2, "1")]


@pytest.mark.parametrize("shape", BAD_SHAPES, ids=repr)
@pytest.mark.parametrize("make", [
    qb.zeros, qb.ones, lambda s: qb.full(s, 1.0),
    lambda s: qb.reshape(qb.ones(6), s), lambda s: qb.broadcast_to(qb.ones(1), s),
    lambda s: qb.random.normal(KEY, s), lambda s: qb.random.uniform(KEY, s),
], ids=["zeros", "ones", "full", "reshape", "broadcast_to", "normal", "uniform"])
def test_non_integer_shapes_raise_type_error(make, shape):
    with pytest.raises(TypeError):
        make(shape)


@pytest.mark.parametrize("call", [
    lambda: qb.eye(2.5), lambda: qb.eye(2, 3.0), lambda: qb.eye(True),
    lambda: qb.linspace(0.0, 1.0, 3.0), lambda: qb.linspace(0.0, 1.0, "3"),
    lambda: X.reshape(6.0), lambda: X.reshape(3.0, 2), lambda: X.reshape((-1.0,)),
    lambda: qb.tril(X, 0.5), lambda: qb.triu(X, 1.0),
    lambda: qb.sum(X, axis=1.0), lambda: qb.mean(X, axis=(0, 1.0)),
    lambda: qb.concat([X, X], axis=0.0), lambda: qb.expand_dims(X, 1.0),
])
def test_non_integer_sizes_and_axes_raise_type_error(call):
    with pytest.raises(TypeError):
        call()


BAD_INDICES = [1.0, np.float64(1.0), (0, 1.5), (1.0, slice(None)), "1", (Ellipsis, 2.0),
               slice(0, 2.0), slice(None, None, 1.0), True]


@pytest.mark.parametrize("index", BAD_INDICES, ids=repr)
def test_non_integer_indices_raise_type_error_eagerly_and_traced(index):
    with pytest.raises(TypeError):
        X[index]
    with pytest.raises(TypeError):
        qb.jit(lambda x: x[index])(X)


def test_integer_like_values_are_accepted():
    n = np.int64(2)
    assert qb.ones((n, np.int32(3))).shape == (2, 3)
    assert qb.zeros(np.array(2)).shape == (2,)
    assert qb.ones(np.array([2, 1])).shape == (2, 1)
    assert qb.eye(n, np.int8(3)).numpy().tolist() == [[1, 0, 0], [0, 1, 0]]
    assert qb.linspace(0.0, 1.0, np.int64(3)).numpy().tolist() == [0.0, 0.5, 1.0]
    assert X[n - 1, np.int64(-1)].item() == 5.0
    assert X[np.int64(1)].numpy().tolist() == [3.0, 4.0, 5.0]
    assert X.reshape(np.int64(3), -1).shape == (3, 2)
    assert qb.broadcast_to(qb.ones(1), [np.int16(4)]).shape == (4,)
    assert qb.tril(X, np.int64(0)).numpy().tolist() == [[0, 0, 0], [3, 4, 0]]
    assert qb.random.normal(KEY, (n,)).shape == (2,)

    class Three:
        def __index__(self):
            return 3

    assert qb.ones(Three()).shape == (3,)
    assert qb.arange(4.0)[Three()].item() == 3.0


def test_tracers_as_shapes_or_indices_raise_tracer_error():
    def f(x):
        with pytest.raises(TracerError):
            qb.ones(x[0])
        with pytest.raises(TracerError):
            qb.reshape(x, (x[0], 1))
        with pytest.raises(TracerError):
            [1.0, 2.0][x[0]]  # a Python sequence needs an int (an array takes x[x[0]])
        return x

    qb.jit(f)(qb.ones(2))
