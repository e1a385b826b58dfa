"""Building and indexing (issue 24, item 1) against NumPy (values) and JAX (x64: values and
``grad`` under ``jit``), on the CPU back end and the interpreter (``QUABLA_BACKEND``).

The table ``TABLE`` holds one function per form, written once for the three libraries
(``xp``: ``qb``, ``numpy`` or ``jax.numpy``; ``lax``: the module with ``dynamic_slice``).
Index arguments are float arrays for Quabla (it has no integer dtype) and int arrays for
NumPy and JAX; they are traced arguments of the jitted programs. One ``jit`` computes every
entry's value and one ``jit(grad)`` every entry's gradient, per back end. The ``gather`` and
``scatter`` primitives' own rule tests (finite differences, batching) are in test_rules.py,
their MLX and CUDA runs in the device corpus (device_cases.py).
"""

import math
import types
from typing import NamedTuple

import numpy as np
import pytest

import quabla as qb
from quabla.core.tracing import bind

RNG = np.random.default_rng(2024)


class Entry(NamedTuple):
    name: str
    fn: object            # fn(xp, lax, *args)
    args: tuple           # NumPy arrays; those listed in ``ints`` are index arrays
    ints: tuple = ()
    numpy: bool = True    # compare with NumPy (in-range indices, NumPy has the form)
    jax: bool = True
    grad: bool = True

    def __repr__(self):
        return self.name


def _normal(*shape):
    return RNG.normal(size=shape)


def _apart(n):
    values = np.linspace(-2.0, 2.0, n) + RNG.uniform(-0.01, 0.01, n)
    RNG.shuffle(values)
    return values


I = np.array


X = _normal(5, 3)
X3 = _normal(4, 3, 2)
X4 = _normal(3, 4, 2, 3)
MASK = X > 0.2
MASK[0, 0] = True
MAXMIN = _apart(27)

TABLE = [
    # reads: x[idx]
    Entry("rows", lambda xp, lax, x, i: x[i], (X, I([3, 0, 3, -1])), (1,)),
    # out-of-range reads: JAX's gradient drops their cotangent (its transpose is a scatter
    # that drops out-of-range indices); Quabla's adds it to the row read, the derivative of the
    # value computed. So values only, here; test_rules checks the gradients by differences.
    Entry("rows-clamped", lambda xp, lax, x, i: x[i], (X, I([7, -9, 4])), (1,), numpy=False,
          grad=False),
    Entry("second-axis", lambda xp, lax, x, i: x[:, i], (X, I([[1, 0], [2, 2]])), (1,)),
    Entry("pairs-broadcast", lambda xp, lax, x, i, j: x[i, j],
          (X, I([4, 0, 2]), I([[1], [-1]])), (1, 2)),
    Entry("ellipsis-last-axis", lambda xp, lax, x, i: x[..., i], (X3, I([1, 0, 1])), (1,)),
    Entry("non-adjacent", lambda xp, lax, x, i, j: x[i, :, j], (X3, I([3, 1]), I([1, 0])),
          (1, 2)),
    Entry("non-adjacent-after-slice", lambda xp, lax, x, i, j: x[:, i, :, j],
          (X4, I([3, 1, 0]), I([2, 0, 1])), (1, 2)),
    Entry("int-among-arrays", lambda xp, lax, x, i: x[1, :, i], (X3, I([1, 0, 1])), (1,)),
    Entry("slices-and-none", lambda xp, lax, x, i: x[None, 1:, i, ::-1],
          (X3, I([[2], [0]])), (1,)),
    Entry("constant-list", lambda xp, lax, x: x[[2, 0, 2], 1:] + x[[-1], 1:], (X,)),
    Entry("concrete-mask", lambda xp, lax, x: x[MASK] + x[:, MASK[0]].sum(), (X,)),
    Entry("traced-row-list", lambda xp, lax, x, i: x[xp.array([i[0], i[1], 0])], (X, I([4, 1])),
          (1,)),
    # x.at[...]
    Entry("at-get-fill", lambda xp, lax, x, i: x.at[i].get(mode="fill", fill_value=-1.5),
          (X, I([1, 9, -2, -8])), (1,), numpy=False),
    Entry("at-get-clip", lambda xp, lax, x, i: x.at[:, i].get(), (X, I([1, 9, -2, -8])), (1,),
          numpy=False, grad=False),
    Entry("at-get-in-range", lambda xp, lax, x, i: x.at[:, i].get(), (X, I([1, 2, -2, 1])),
          (1,), numpy=False),
    Entry("at-add-dropped", lambda xp, lax, x, i, v: x.at[i].add(v),
          (X, I([1, 7, 1, -2, -9]), _normal(5, 3)), (1,), numpy=False),
    Entry("at-add-clip", lambda xp, lax, x, i, v: x.at[i].add(v, mode="clip"),
          (X, I([1, 7, 1, -2, -9]), _normal(5, 3)), (1,), numpy=False),
    Entry("at-set-dropped", lambda xp, lax, x, i, v: x.at[i].set(v),
          (X, I([4, 7, 0]), _normal(3, 3)), (1,), numpy=False),
    Entry("at-set-one-row", lambda xp, lax, x, i, v: x.at[i[0]].set(v) + x.at[i[1]].set(v),
          (X, I([2, 6]), _normal(3)), (1,), numpy=False),
    Entry("at-subtract-pairs", lambda xp, lax, x, i, j, v: x.at[i, j].subtract(v),
          (X, I([0, 4, 2]), I([2, 2, 0]), _normal(3)), (1, 2), numpy=False),
    Entry("at-multiply", lambda xp, lax, x, i, v: x.at[:, i].multiply(v, unique_indices=True),
          (X, I([2, 0]), _normal(5, 2)), (1,), numpy=False),
    Entry("at-divide", lambda xp, lax, x, i, v: x.at[i].divide(v, unique_indices=True),
          (X, I([3, 1]), RNG.uniform(0.5, 2.0, (2, 3))), (1,), numpy=False),
    Entry("at-min", lambda xp, lax, x, i, v: x.at[i].min(v),
          (MAXMIN[:15].reshape(5, 3), I([1, 3, 1, 8]), MAXMIN[15:].reshape(4, 3)), (1,),
          numpy=False),
    # JAX's gradient of a clamped max is inf for the clamped update (its rule gathers without
    # clamping): values only; the in-range form checks the gradient
    Entry("at-max-clip", lambda xp, lax, x, i, v: x.at[i].max(v, mode="clip"),
          (MAXMIN[:15].reshape(5, 3), I([1, 3, 1, 8]), MAXMIN[15:].reshape(4, 3)), (1,),
          numpy=False, grad=False),
    Entry("at-max", lambda xp, lax, x, i, v: x.at[i].max(v, mode="clip"),
          (MAXMIN[:15].reshape(5, 3), I([1, 3, 1, -1]), MAXMIN[15:].reshape(4, 3)), (1,),
          numpy=False),
    Entry("at-power", lambda xp, lax, x, i, v: x.at[i].power(v, unique_indices=True),
          (RNG.uniform(0.5, 2.0, (5, 3)), I([3, 0, 9]), RNG.uniform(0.5, 2.0, (3, 3))), (1,),
          numpy=False),
    Entry("at-apply", lambda xp, lax, x, i: x.at[:, i].apply(xp.sin, unique_indices=True), (X, I([2, -3])), (1,),
          numpy=False, grad=False),  # JAX has no derivative of apply: see the test below
    Entry("at-static-slices", lambda xp, lax, x, v: x.at[1:, ::2].add(v) + x.at[0].set(2.0),
          (X, _normal(4, 2)), numpy=False),
    Entry("at-wrap-negative-off", lambda xp, lax, x, i, v: x.at[i].add(
        v, wrap_negative_indices=False), (X, I([-1, 2]), _normal(2, 3)), (1,), numpy=False),
    # take, take_along_axis, dynamic slices
    Entry("take-axis", lambda xp, lax, x, i: xp.take(x, i, axis=1), (X, I([[2, 0], [1, 1]])),
          (1,)),
    Entry("take-flat", lambda xp, lax, x, i: xp.take(x, i), (X, I([14, 0, -3])), (1,)),
    Entry("take-fill", lambda xp, lax, x, i: xp.take(x, i, axis=0),
          (X, I([1, 5, -1, -6])), (1,), numpy=False),
    Entry("take-clip", lambda xp, lax, x, i: xp.take(x, i, axis=0, mode="clip"),
          (X, I([1, 5, -1, -6])), (1,)),
    Entry("take-wrap", lambda xp, lax, x, i: xp.take(x, i, axis=0, mode="wrap"),
          (X, I([1, 5, -1, -6])), (1,)),
    Entry("take-along-axis", lambda xp, lax, x, i: xp.take_along_axis(x, i, axis=1),
          (X, I([[0, 2], [1, 1], [2, 0], [0, 0], [1, 2]])), (1,)),
    Entry("take-along-broadcast", lambda xp, lax, x, i: xp.take_along_axis(x, i, axis=0),
          (X3, I([[[3]], [[0]]])), (1,)),
    Entry("take-along-fill", lambda xp, lax, x, i: xp.take_along_axis(x, i, axis=0),
          (X, I([[0, 7, -1]])), (1,), numpy=False),
    Entry("dynamic-slice", lambda xp, lax, x, i: lax.dynamic_slice(x, (i[0], i[1]), (3, 2)),
          (X, I([3, -1])), (1,), numpy=False),
    Entry("dynamic-slice-static", lambda xp, lax, x: lax.dynamic_slice(x, (-2, 0), (2, 3)),
          (X,), numpy=False),
    Entry("dynamic-slice-3d", lambda xp, lax, x, i: lax.dynamic_slice(x, (0, i[0], i[1]),
                                                                      (4, 2, 1)),
          (X3, I([2, 9])), (1,), numpy=False),
    Entry("dynamic-update-slice", lambda xp, lax, x, u, i: lax.dynamic_update_slice(
        x, u, (i[0], i[1])), (X, _normal(2, 2), I([4, -2])), (2,), numpy=False),
    Entry("dynamic-update-slice-3d", lambda xp, lax, x, u, i: lax.dynamic_update_slice(
        x, u, (i[0], 0, i[1])), (X3, _normal(2, 3, 1), I([1, 1])), (2,), numpy=False),
    # building
    Entry("array-of-tracers", lambda xp, lax, x: xp.array([x[0, 0], 1.0, x[1, 2] * 2.0]), (X,)),
    Entry("array-nested", lambda xp, lax, x: xp.array([[x[0, 0], 2.0], [3, x[1, 1]]]), (X,)),
    Entry("array-of-rows", lambda xp, lax, x: xp.array((x[0], [1.0, 2.0, 3.0], x[2] * x[3])),
          (X,)),
    Entry("like", lambda xp, lax, x: (xp.zeros_like(x) + x, xp.ones_like(x) * x,
                                     xp.full_like(x, 2.5) * x, xp.full_like(x, x[0, 0]),
                                     xp.ones_like(x, shape=(2, 3)) + x[0]), (X,)),
]


# -- the three libraries ----------------------------------------------------------------------

def _namespace(module, **names):
    return types.SimpleNamespace(**{**{n: getattr(module, n) for n in dir(module)
                                       if not n.startswith("__")}, **names})


QB_LAX = types.SimpleNamespace(dynamic_slice=qb.dynamic_slice,
                               dynamic_update_slice=qb.dynamic_update_slice)


def _jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    return jax, jnp


def _qb_args(entry):
    return [qb.array(np.asarray(a, dtype=np.float64)) for a in entry.args]


def _np_args(entry):
    return [np.asarray(a, dtype=np.int64 if k in entry.ints else np.float64)
            for k, a in enumerate(entry.args)]


def _leaves(value):
    parts = value if isinstance(value, (list, tuple)) else [value]
    return [np.asarray(p, dtype=np.float64) for p in parts]


def _assert_tree(actual, expected, name, rtol=1e-12, atol=1e-12):
    actual, expected = _leaves(actual), _leaves(expected)
    assert len(actual) == len(expected), name
    for a, e in zip(actual, expected):
        assert a.shape == e.shape, f"{name}: shape {a.shape}, expected {e.shape}"
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=name)


def _all_values(entries):
    def fn(args):
        return [e.fn(qb, QB_LAX, *a) for e, a in zip(entries, args)]
    return fn


def _total(xp, entries, wrt):
    """A smooth scalar of every entry's result, a function of each entry's float arguments
    (``wrt``: their positions); the index arguments are closed over by ``fn(args, indices)``."""
    def fn(floats, indices):
        total = 0.0
        for e, fl, ix in zip(entries, floats, indices):
            args = _merge(e, fl, ix)
            parts = e.fn(xp, _LAX[xp], *args)
            for p in parts if isinstance(parts, (list, tuple)) else [parts]:
                total = total + xp.sum(xp.sin(xp.where(xp.isnan(p), 0.0, p)))
        return total
    return fn


_LAX = {qb: QB_LAX}


def _merge(entry, floats, indices):
    floats, indices = list(floats), list(indices)
    return [indices.pop(0) if k in entry.ints else floats.pop(0) for k in range(len(entry.args))]


def _split(entry, args):
    return ([a for k, a in enumerate(args) if k not in entry.ints],
            [a for k, a in enumerate(args) if k in entry.ints])


@pytest.fixture(params=["numba", "interpret"])
def backend(request, monkeypatch):
    monkeypatch.setenv("QUABLA_BACKEND", request.param)
    return request.param


# -- values -------------------------------------------------------------------------------------

@pytest.mark.parametrize("entry", [e for e in TABLE if e.numpy], ids=repr)
def test_eager_values_match_numpy(entry):
    _assert_tree(entry.fn(qb, QB_LAX, *_qb_args(entry)), entry.fn(np, None, *_np_args(entry)),
                 entry.name)


@pytest.fixture(scope="module")
def jax_results():
    jax, jnp = _jax()
    _LAX[jnp] = jax.lax
    entries = [e for e in TABLE if e.jax]
    args = [[jnp.asarray(a) for a in _np_args(e)] for e in entries]
    values = jax.jit(lambda a: [e.fn(jnp, jax.lax, *x) for e, x in zip(entries, a)])(args)
    smooth = [e for e in entries if e.grad]
    floats, indices = zip(*[_split(e, [jnp.asarray(a) for a in _np_args(e)]) for e in smooth])
    grads = jax.jit(jax.grad(_total(jnp, smooth, None)))(list(floats), list(indices))
    return ({e.name: v for e, v in zip(entries, values)},
            {e.name: g for e, g in zip(smooth, grads)})


def test_values_match_numpy_and_jax_under_jit(backend, jax_results):
    """One program computes every entry (NumPy's values where NumPy has the form, JAX's for
    all, out-of-range indices included: JAX's default modes)."""
    values, _ = jax_results
    entries = [e for e in TABLE if e.numpy or e.jax]
    results = qb.jit(_all_values(entries))([_qb_args(e) for e in entries])
    for e, ours in zip(entries, results):
        if e.numpy:
            _assert_tree(ours, e.fn(np, None, *_np_args(e)), e.name)
        if e.jax:
            _assert_tree(ours, values[e.name], e.name)


def test_gradients_match_jax_under_jit(backend, jax_results):
    _, expected = jax_results
    smooth = [e for e in TABLE if e.jax and e.grad]
    floats, indices = zip(*[_split(e, _qb_args(e)) for e in smooth])
    grads = qb.jit(qb.grad(_total(qb, smooth, None)))(list(floats), list(indices))
    for e, ours in zip(smooth, grads):
        _assert_tree(ours, expected[e.name], e.name)


# -- eager semantics and errors -----------------------------------------------------------------

def test_repeated_set_is_the_last_update_as_numpy():
    x, v = np.zeros((4, 2)), _normal(5, 2)
    i = [2, 0, 2, 3, 0]
    expected = x.copy()
    expected[i] = v
    for fn in (lambda x, v: x.at[i].set(v), qb.jit(lambda x, v: x.at[i].set(v))):
        np.testing.assert_array_equal(np.asarray(fn(qb.array(x), qb.array(v))), expected)
    added = x.copy()
    np.add.at(added, i, v)
    np.testing.assert_allclose(np.asarray(qb.array(x).at[i].add(v)), added, rtol=0, atol=0)


def test_the_set_gradient_goes_to_the_winning_update():
    g = qb.jit(qb.grad(lambda v, i: qb.sum(qb.zeros((3,)).at[i].set(v) * qb.array([1., 2., 3.]))))
    out = g(qb.array([5.0, 6.0, 7.0, 8.0]), qb.array([1.0, 2.0, 1.0, 9.0]))
    np.testing.assert_array_equal(np.asarray(out), [0.0, 3.0, 2.0, 0.0])


def test_the_apply_gradient_is_the_function_s_on_the_rows_it_rewrites():
    x = X[0]
    g = qb.jit(qb.grad(lambda x: qb.sum(x.at[I([2.0, 0.0])].apply(qb.sin) ** 2)))(x)
    expected = 2 * x
    expected[[0, 2]] = 2 * np.sin(x[[0, 2]]) * np.cos(x[[0, 2]])
    np.testing.assert_allclose(np.asarray(g), expected, rtol=1e-13)


def test_bool_arrays_are_gathered_and_set():
    m = qb.array(np.array([True, False, True]))
    assert np.asarray(m[[2, 1]]).tolist() == [True, False]
    assert np.asarray(m.at[1].set(True)).tolist() == [True, True, True]
    assert np.asarray(qb.jit(lambda m, i: m.at[i].set(False))(m, qb.array(0.0))).tolist() == [
        False, False, True]


def test_vmap_of_indexing_is_a_loop():
    xs, idx, v = _normal(3, 4, 2), np.array([[1.0, 3.0], [0.0, 0.0], [-1.0, 2.0]]), _normal(3, 2)
    fn = lambda x, i, v: (x[i], x.at[i[0]].add(v), qb.take(x, i, axis=0),
                          qb.dynamic_slice(x, (i[1], 0), (2, 2)))
    for in_axes in [(0, 0, 0), (0, None, 0), (None, 0, None)]:
        args = [qb.array(a if ax is not None else a[0]) for a, ax in zip((xs, idx, v), in_axes)]
        batched = qb.vmap(fn, in_axes=in_axes)(*args)
        for b in range(3):
            one = fn(*[a[b] if ax is not None else a for a, ax in zip(args, in_axes)])
            for r, o in zip(batched, one):
                np.testing.assert_array_equal(np.asarray(r)[b], np.asarray(o))


def test_array_of_tracers_follows_the_stack_dtype_rules():
    def build(x):
        return qb.array([x, 1.0, 2]), qb.array([[x, 0.5]], dtype=qb.float64)
    a, b = qb.jit(build)(qb.array(3.0, dtype=qb.float32))
    assert a.dtype is qb.float32 and np.asarray(a).tolist() == [3.0, 1.0, 2.0]
    assert b.dtype is qb.float64 and b.shape == (1, 2)
    with pytest.raises(TypeError, match="mixed dtypes"):
        qb.jit(lambda x: qb.array([x, np.float64(1.0)]))(qb.array(1.0, dtype=qb.float32))
    with pytest.raises(ValueError, match="ragged"):
        qb.jit(lambda x: qb.array([x, 1.0]))(qb.ones(2))
    assert qb.jit(lambda x: qb.array(x) * 2.0)(qb.ones(2)).shape == (2,)
    # eager behaviour is unchanged: a Tensor, float64 for Python numbers
    t = qb.array([1, 2.5])
    assert type(t) is qb.Tensor and t.dtype is qb.float64


def test_like_builders():
    x = qb.ones((2, 3), dtype=qb.float32)
    assert qb.zeros_like(x).dtype is qb.float32 and qb.zeros_like(x).shape == (2, 3)
    assert qb.ones_like(x, dtype=qb.bool_).dtype is qb.bool_
    assert np.asarray(qb.full_like(x, 7, shape=4)).tolist() == [7.0] * 4
    assert qb.empty((2,)).shape == (2,) and float(qb.sum(qb.empty_like(x))) == 0.0
    assert qb.zeros_like(3.0).shape == ()
    traced = qb.jit(lambda x: qb.full_like(x, x[0, 0] + 1.0) + qb.zeros_like(x))(x)
    assert np.asarray(traced).tolist() == [[2.0] * 3] * 2


def test_errors_name_what_is_supported():
    x = qb.ones((3, 2))
    with pytest.raises(TypeError, match="quabla.where"):
        qb.jit(lambda x: x[x > 0.0])(x)
    with pytest.raises(TypeError, match="whole numbers"):
        x[qb.array([0.5, 1.0])]
    with pytest.raises(IndexError, match="boolean index did not match"):
        x[np.array([True, False])]
    with pytest.raises(IndexError, match="out of bounds"):
        x[[0, 1], 5]
    with pytest.raises(IndexError, match="too many indices"):
        x[[0], 0, 0]
    with pytest.raises(IndexError, match="broadcast"):
        x[[0, 1], [0, 1, 1]]
    with pytest.raises(ValueError, match="selects no elements"):
        x[np.zeros((3, 2), dtype=bool)]
    with pytest.raises(ValueError, match="mode"):
        x.at[0].set(1.0, mode="nearest")
    with pytest.raises(NotImplementedError, match="raise"):
        qb.take(x, [0], mode="raise")
    with pytest.raises(ValueError, match="do not broadcast"):
        x.at[[0, 1]].set(qb.ones((3,)))
    with pytest.raises(ValueError, match="slice sizes"):
        qb.dynamic_slice(x, (0, 0), (4, 1))
    with pytest.raises(TypeError, match="bool index"):
        x[True]


def test_eager_mask_index_is_numpy_s_result_under_jit():
    x = _normal(3, 4)
    mask = x > 0.0
    mask[0, 0] = True
    out = qb.jit(lambda x: x[mask] * 2.0)(qb.array(x))
    np.testing.assert_array_equal(np.asarray(out), x[mask] * 2.0)


def test_primitives_are_the_only_new_ops():
    """x[idx] is one gather, x.at[idx].add one scatter (no transposes for the common forms)."""
    x, i = qb.ones((4, 3)), qb.array([1.0, 2.0])
    ops = [n.op for n in qb.jit(lambda x, i: x[i]).lower(x, i).graph.nodes]
    assert ops.count("gather") == 1 and "transpose" not in ops
    ops = [n.op for n in qb.jit(lambda x, i: x.at[i].add(1.0, mode="clip")).lower(x, i).graph.nodes]
    assert ops.count("scatter") == 1 and "transpose" not in ops
    ops = [n.op for n in qb.jit(lambda x, i: x[:, i]).lower(x, i).graph.nodes]
    assert ops.count("gather") == 1 and "transpose" not in ops


def test_gather_scatter_batch_dims_directly():
    x = _normal(2, 3, 2)
    i = np.array([[2.7, -1.0, 5.0], [0.0, 1.0, 1.0]])
    v = _normal(2, 3, 2)
    g = bind("gather", qb.array(x), qb.array(i), batch_dims=1)
    rows = np.clip(np.where(np.floor(i) < 0, np.floor(i) + 3, np.floor(i)), 0, 2).astype(int)
    np.testing.assert_array_equal(np.asarray(g), np.stack([x[b][rows[b]] for b in range(2)]))
    s = bind("scatter", qb.array(x), qb.array(i), qb.array(v), batch_dims=1, mode="max")
    expected = x.copy()
    for b in range(2):
        np.maximum.at(expected[b], rows[b], v[b])
    np.testing.assert_array_equal(np.asarray(s), expected)
    nan_row = bind("gather", qb.array([1.0, 2.0]), qb.array(math.nan), batch_dims=0)
    assert float(nan_row) == 1.0  # NaN reads row 0, as clamp_index


def _random_index(rng, shape):
    """A random NumPy index of ints, slices, None, an ellipsis, lists and index arrays."""
    def choices(n):
        return [slice(None), slice(1, None), slice(None, None, -2), 1, -1, None, [0, n - 1],
                np.array([[1], [0]]), [n - 1, 0, 1], qb.array([2.0, -1.0])]
    items, axis = [], 0
    for _ in range(rng.integers(1, 5)):
        if axis >= len(shape):
            break
        options = choices(shape[axis])
        item = options[rng.integers(len(options))]
        items.append(item)
        axis += item is not None
    if rng.random() < 0.3:
        items.insert(rng.integers(len(items) + 1), Ellipsis)
    return tuple(items)


def test_random_advanced_indices_match_numpy():
    """Reads, ``set`` (the last of repeated elements wins) and ``add`` (every one adds) for
    random mixes of index arrays with ints, slices, None and an ellipsis (an ellipsis of no
    axes still separates index arrays): NumPy's shapes and values."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(3, 4, 5))
    t = qb.array(x)
    checked = 0
    while checked < 300:
        index = _random_index(rng, x.shape)
        plain = tuple(np.asarray(i).astype(int) if isinstance(i, qb.Tensor) else i
                      for i in index)
        if not any(isinstance(i, (list, np.ndarray, qb.Tensor)) for i in index):
            continue
        try:
            expected = x[plain]
        except IndexError:
            continue
        checked += 1
        np.testing.assert_array_equal(np.asarray(t[index]), expected, err_msg=repr(index))
        np.testing.assert_array_equal(np.asarray(t.at[index].get()), expected)
        v = rng.normal(size=expected.shape)
        assigned, added = x.copy(), x.copy()
        assigned[plain] = v
        np.add.at(added, plain, v)
        np.testing.assert_array_equal(np.asarray(t.at[index].set(v)), assigned,
                                      err_msg=repr(index))
        np.testing.assert_allclose(np.asarray(t.at[index].add(v)), added, rtol=1e-14,
                                   err_msg=repr(index))
