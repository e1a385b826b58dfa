"""The reductions, scans, sorting and shape functions of issue 24 (items 3 and 4) against NumPy
(values) and JAX (x64: values and ``grad`` under ``jit``), eagerly, on the CPU back end and
on the interpreter (``QUABLA_BACKEND=interpret``).

The table ``TABLE`` is walked by every test. Each entry is one function of a namespace
(``qb``, ``numpy`` or ``jax.numpy``, with the few names that differ patched in), so the same
line runs in the three libraries. Compiles are shared: one ``jit`` computes every entry's
value, one ``jit(grad)`` every entry's gradient (each entry has inputs of its own, so the
gradient of the sum of all is each entry's gradient). The ``sort`` primitive's own rule tests
(finite differences, batching) are in test_rules.py, its MLX and CUDA runs in the device
corpus (device_cases.py).
"""

import math
import types

import numpy as np
import pytest

import quabla as qb

RNG = np.random.default_rng(24)


def _normal(*shape):
    return RNG.normal(size=shape)


def _distinct(*shape):
    """Values well apart (no ties: sort, median, argmax and max have no kinks near them)."""
    n = math.prod(shape)
    values = np.linspace(-2.0, 2.0, n) + RNG.uniform(-0.01, 0.01, n)
    RNG.shuffle(values)
    return values.reshape(shape)


def _positive(*shape):
    return RNG.uniform(0.5, 1.5, size=shape)


X = _distinct(3, 4)
X3 = _normal(2, 3, 4)
V = _normal(5)
SORTED = np.sort(_normal(6))
MASK = RNG.uniform(size=(3, 4)) > 0.3
MASK[:, 0] = True  # every row selects something


class Entry:
    """``fn(xp, *args)`` for ``xp`` in qb, NumPy and jax.numpy; ``grad``: differentiable;
    ``jax=False``: no JAX counterpart to compare with (NumPy's only)."""

    def __init__(self, name, fn, args, grad=True, jax=True, numpy=True):
        self.name, self.fn, self.args = name, fn, tuple(args)
        self.grad, self.jax, self.numpy = grad, jax, numpy

    def __repr__(self):
        return self.name


E = Entry
TABLE = [
    # -- reductions with axis (int, tuple, negative), keepdims, where
    E("sum-axes", lambda xp, x: xp.sum(x, axis=(0, -1), keepdims=True), [X3]),
    E("sum-where", lambda xp, x: xp.sum(x, axis=1, where=MASK, initial=0.5), [X]),
    E("sum-bool", lambda xp, x: xp.sum(x > 0.0, axis=-1) * 1.0, [X3], grad=False),
    E("mean-where", lambda xp, x: xp.mean(x, axis=-1, where=MASK, keepdims=True), [X]),
    E("max-axes", lambda xp, x: xp.max(x, axis=(1, 2)), [_distinct(2, 3, 4)]),
    E("max-where", lambda xp, x: xp.max(x, axis=0, where=MASK, initial=-3.0), [X]),
    E("min-keep", lambda xp, x: xp.min(x, axis=-2, keepdims=True), [X]),
    E("any-where", lambda xp, x: xp.any(x > 0.5, axis=1, where=MASK), [X], grad=False),
    E("all-axes", lambda xp, x: xp.all(x > -1.5, axis=(0, 1), keepdims=True), [X], grad=False),
    E("prod", lambda xp, x: xp.prod(x, axis=1), [X]),
    E("prod-axes", lambda xp, x: xp.prod(x, axis=(0, -1), keepdims=True), [X3]),
    E("prod-where", lambda xp, x: xp.prod(x, axis=0, where=MASK), [X]),
    E("var", lambda xp, x: xp.var(x, axis=1), [X]),
    E("var-ddof", lambda xp, x: xp.var(x, axis=(0, 2), ddof=1, keepdims=True), [X3]),
    E("var-where", lambda xp, x: xp.var(x, axis=1, where=MASK), [X]),
    E("std", lambda xp, x: xp.std(x), [X]),
    E("std-ddof", lambda xp, x: xp.std(x, axis=0, ddof=1), [X]),
    E("argmax", lambda xp, x: xp.argmax(x, axis=1) * 1.0, [X], grad=False),
    E("argmax-flat", lambda xp, x: xp.argmax(x) * 1.0, [X3], grad=False),
    E("argmin-keep", lambda xp, x: xp.argmin(x, axis=0, keepdims=True) * 1.0, [X], grad=False),
    E("cumsum", lambda xp, x: xp.cumsum(x, axis=1), [X3]),
    E("cumsum-flat", lambda xp, x: xp.cumsum(x), [X]),
    E("cumprod", lambda xp, x: xp.cumprod(x, axis=-1), [X3]),
    E("logsumexp", lambda xp, x: xp.logsumexp(x, axis=1), [X3]),
    E("logsumexp-b", lambda xp, x, b: xp.logsumexp(x, axis=-1, b=b, keepdims=True),
      [X, _positive(4)]),
    E("average", lambda xp, x: xp.average(x, axis=0), [X]),
    E("average-w", lambda xp, x, w: xp.average(x, axis=1, weights=w), [X, _positive(4)]),
    E("average-ret", lambda xp, x, w: xp.average(x, axis=None, weights=w, returned=True),
      [X, _positive(3, 4)]),
    E("median", lambda xp, x: xp.median(x, axis=1), [X]),
    E("median-flat", lambda xp, x: xp.median(x), [_distinct(2, 5)]),
    E("quantile", lambda xp, x: xp.quantile(x, np.array([0.1, 0.5, 0.93]), axis=(0, 2),
                                            keepdims=True), [_distinct(2, 3, 4)]),
    E("quantile-lower", lambda xp, x: xp.quantile(x, 0.4, axis=0, method="lower"), [X]),
    E("quantile-higher", lambda xp, x: xp.quantile(x, 0.4, axis=0, method="higher"), [X]),
    E("quantile-midpoint", lambda xp, x: xp.quantile(x, 0.4, axis=0, method="midpoint"), [X]),
    E("quantile-nearest", lambda xp, x: xp.quantile(x, 0.4, axis=0, method="nearest"), [X]),
    E("percentile", lambda xp, x: xp.percentile(x, 25.0, axis=1), [X]),
    E("sort", lambda xp, x: xp.sort(x, axis=0), [X]),
    E("sort-flat", lambda xp, x: xp.sort(x, axis=None), [X]),
    E("sort-desc", lambda xp, x: xp.sort(x, axis=1, descending=True), [X], numpy=False),
    E("argsort", lambda xp, x: xp.argsort(x, axis=0) * 1.0, [X], grad=False),
    E("argsort-desc", lambda xp, x: xp.argsort(x, descending=True) * 1.0,
      [np.array([3.0, 1.0, 2.0, 1.0, 3.0, 1.0])], grad=False, numpy=False),
    E("searchsorted", lambda xp, a, v: xp.searchsorted(a, v) * 1.0, [SORTED, _normal(2, 3)],
      grad=False),
    E("searchsorted-right", lambda xp, a, v: xp.searchsorted(a, v, side="right") * 1.0,
      [np.array([1.0, 2.0, 2.0, 3.0]), np.array([2.0, 0.0, 5.0, 3.0])], grad=False),
    E("diff", lambda xp, x: xp.diff(x, n=2, axis=-1), [X3]),
    E("diff-append", lambda xp, x: xp.diff(x, axis=0, prepend=0.0, append=x[:1]), [X]),
    E("trapezoid", lambda xp, y: xp.trapezoid(y, axis=0), [X]),
    E("trapezoid-x", lambda xp, y, x: xp.trapezoid(y, x=x), [X, np.array([0.0, 0.5, 1.5, 2.0])]),
    E("count_nonzero", lambda xp, x: xp.count_nonzero(x > 0.0, axis=1) * 1.0, [X],
      grad=False),
    # -- shapes
    E("tile", lambda xp, x: xp.tile(x, (2, 1, 3)), [X]),
    E("repeat", lambda xp, x: xp.repeat(x, 2, axis=0), [X]),
    E("repeat-list", lambda xp, x: xp.repeat(x, np.array([1, 0, 3, 2]), axis=1), [X]),
    E("repeat-flat", lambda xp, x: xp.repeat(x, 3), [V]),
    E("pad-constant", lambda xp, x: xp.pad(x, ((1, 2), (0, 1)), constant_values=1.5), [X]),
    E("pad-zero", lambda xp, x: xp.pad(x, 2), [X]),
    E("pad-edge", lambda xp, x: xp.pad(x, ((2, 1), (3, 0)), mode="edge"), [X]),
    E("pad-reflect", lambda xp, x: xp.pad(x, ((2, 3), (5, 1)), mode="reflect"), [X]),
    E("pad-symmetric", lambda xp, x: xp.pad(x, 2, mode="symmetric"), [X]),
    E("pad-wrap", lambda xp, x: xp.pad(x, ((1, 4), (2, 2)), mode="wrap"), [X]),
    E("roll", lambda xp, x: xp.roll(x, (1, -3), axis=(0, 1)), [X]),
    E("roll-flat", lambda xp, x: xp.roll(x, 5), [X]),
    E("flip", lambda xp, x: xp.flip(x, axis=(0, 2)), [X3]),
    E("flip-all", lambda xp, x: xp.flip(x), [X]),
    E("split", lambda xp, x: xp.split(x, [1, 3], axis=1), [X]),
    E("split-even", lambda xp, x: xp.split(x, 2, axis=-1), [X3]),
    E("array_split", lambda xp, x: xp.array_split(x, 3, axis=1), [X]),
    E("vstack", lambda xp, x, v: xp.vstack([x, v[:4]]), [X, V]),
    E("hstack", lambda xp, x, v: xp.hstack([v, x[0]]), [X, V]),
    E("column_stack", lambda xp, x, v: xp.column_stack([x.T, v[:4]]), [X, V]),
    E("meshgrid", lambda xp, a, b: xp.meshgrid(a, b), [V, _normal(3)]),
    E("meshgrid-ij", lambda xp, a, b: xp.meshgrid(a, b, indexing="ij"), [V, _normal(3)]),
    E("moveaxis", lambda xp, x: xp.moveaxis(x, (0, 1), (-1, 0)), [X3]),
    E("swapaxes", lambda xp, x: xp.swapaxes(x, 0, -1), [X3]),
    E("ravel", lambda xp, x: xp.ravel(x), [X3]),
    E("atleast_1d", lambda xp, x: xp.atleast_1d(x[0, 0]) * 2.0, [X]),
    E("atleast_2d", lambda xp, v: xp.atleast_2d(v), [V]),
    E("atleast_3d", lambda xp, x: xp.atleast_3d(x), [X]),
    E("diag", lambda xp, v: xp.diag(v, 1), [V]),
    E("diag-matrix", lambda xp, x: xp.diag(x, -1), [X]),
    E("diagonal", lambda xp, x: xp.diagonal(x, 1, 2, 0), [X3]),
    E("trace", lambda xp, x: xp.trace(x, -1), [X]),
    E("outer", lambda xp, x, v: xp.outer(x, v), [X, V]),
    E("inner", lambda xp, a, b: xp.inner(a, b), [X3, _normal(5, 4)]),
    E("vdot", lambda xp, a, b: xp.vdot(a, b), [X, _normal(4, 3)]),
    E("dot-vectors", lambda xp, a, b: xp.dot(a, b), [V, _normal(5)]),
    E("dot-matrices", lambda xp, a, b: xp.dot(a, b), [X, _normal(4, 2)]),
    E("dot-nd", lambda xp, a, b: xp.dot(a, b), [X3, _normal(3, 4, 2)]),
    E("dot-nd-vector", lambda xp, a, b: xp.dot(a, b), [X3, _normal(4)]),
    E("tensordot", lambda xp, a, b: xp.tensordot(a, b, axes=([1, 2], [0, 1])),
      [X3, _normal(3, 4, 2)]),
    E("tensordot-int", lambda xp, a, b: xp.tensordot(a, b, axes=1), [X, _normal(4, 2)]),
    E("tensordot-0", lambda xp, a, b: xp.tensordot(a, b, axes=0), [V, _normal(2)]),
    E("kron", lambda xp, a, b: xp.kron(a, b), [X, _normal(2, 3)]),
    E("cross", lambda xp, a, b: xp.cross(a, b), [_normal(4, 3), _normal(4, 3)]),
    E("cross-axis", lambda xp, a, b: xp.cross(a, b, axis=0), [_normal(3, 2), _normal(3, 2)]),
    E("cross-2d", lambda xp, a, b: xp.cross(a, b), [_normal(4, 2), _normal(4, 2)], jax=False,
      numpy=False),
    E("einsum-list", lambda xp, a, b: xp.einsum(a, [0, 1, 2], b, [2, 3], [1, 3]),
      [X3, _normal(4, 2)]),
    E("einsum-list-ellipsis", lambda xp, a, b: xp.einsum(a, [Ellipsis, 0], b, [0]),
      [X3, _normal(4)]),
    E("concatenate", lambda xp, a, b: xp.concatenate([a, b], axis=None), [X, V]),
    # -- array methods
    E(".sum", lambda xp, x: x.sum(axis=1, keepdims=True), [X]),
    E(".mean", lambda xp, x: x.mean(axis=(0, 1)), [X3]),
    E(".max", lambda xp, x: x.max(axis=0), [X]),
    E(".min", lambda xp, x: x.min(), [X]),
    E(".prod", lambda xp, x: x.prod(axis=-1), [X]),
    E(".var", lambda xp, x: x.var(axis=0), [X]),
    E(".std", lambda xp, x: x.std(axis=1, ddof=1), [X]),
    E(".argmax", lambda xp, x: x.argmax(axis=1) * 1.0, [X], grad=False),
    E(".argmin", lambda xp, x: x.argmin() * 1.0, [X], grad=False),
    E(".cumsum", lambda xp, x: x.cumsum(axis=0), [X]),
    E(".ravel", lambda xp, x: x.ravel(), [X3]),
    E(".flatten", lambda xp, x: x.flatten(), [X3]),
    E(".squeeze", lambda xp, x: x[:, :1].squeeze(1), [X]),
    E(".clip", lambda xp, x: x.clip(-0.5, 0.5), [X]),
    E(".T", lambda xp, x: x.T, [X3]),
    E(".dot", lambda xp, a, b: a.dot(b), [X, _normal(4)]),
    E(".diagonal", lambda xp, x: x.diagonal(), [X]),
    E(".trace", lambda xp, x: x.trace(), [X]),
    E(".swapaxes", lambda xp, x: x.swapaxes(0, 1), [X]),
    E(".repeat", lambda xp, x: x.repeat(2, axis=1), [X]),
]

# the 2-vector cross product: the z component only (NumPy 2 deprecates it, JAX keeps it)
_CROSS_2D = lambda a, b: a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def _namespace(module, **names):
    return types.SimpleNamespace(**{**{n: getattr(module, n) for n in dir(module)
                                       if not n.startswith("__")}, **names})


def _np_logsumexp(a, axis=None, b=None, keepdims=False):
    """The NumPy reference of ``logsumexp`` (SciPy is not a test dependency)."""
    a = np.asarray(a, dtype=np.float64)
    weights = np.ones_like(a) if b is None else np.broadcast_to(np.asarray(b, np.float64), a.shape)
    top = np.max(a, axis=axis, keepdims=True)
    total = np.sum(weights * np.exp(a - top), axis=axis, keepdims=True)
    out = np.log(total) + top
    return out if keepdims else np.squeeze(out, axis=axis)


def _numpy():
    return _namespace(np, logsumexp=_np_logsumexp)


def _jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax.scipy.special import logsumexp
    return jax, _namespace(jnp, logsumexp=logsumexp)


def _leaves(value):
    return [np.asarray(v, dtype=np.float64) for v in qb.tree.flatten(value)[0]] if isinstance(
        value, (list, tuple)) else [np.asarray(value, dtype=np.float64)]


def _assert_tree(actual, expected, name, rtol=1e-10, atol=1e-12):
    actual, expected = _leaves(actual), _leaves(expected)
    assert len(actual) == len(expected), name
    for a, e in zip(actual, expected):
        assert a.shape == e.shape, f"{name}: shape {a.shape}, expected {e.shape}"
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=name)


def _qb_args(entry):
    return [qb.array(a) for a in entry.args]


def _all_values(entries):
    """One function computing every entry: what a single ``jit`` compiles."""
    def fn(args):
        return [entry.fn(qb, *a) for entry, a in zip(entries, args)]
    return fn


def _tree_sum(xp, value):
    parts = value if isinstance(value, (list, tuple)) else [value]
    return sum(xp.sum(xp.sin(p)) for p in parts)


def _total(xp, entries):
    """The sum of a smooth scalar of every entry's result: its gradient with respect to each
    entry's arguments is that entry's gradient."""
    def fn(args):
        return sum(_tree_sum(xp, entry.fn(xp, *a)) for entry, a in zip(entries, args))
    return fn


# -- values -------------------------------------------------------------------------------------

def _expected(entry):
    if entry.name == "cross-2d":
        return _CROSS_2D(*entry.args)
    return entry.fn(_numpy(), *entry.args)


@pytest.mark.parametrize("entry", [e for e in TABLE if e.numpy or e.name == "cross-2d"],
                         ids=repr)
def test_eager_values_match_numpy(entry):
    _assert_tree(entry.fn(qb, *_qb_args(entry)), _expected(entry), entry.name)


_CHECKED = [e for e in TABLE if e.numpy or e.jax or e.name == "cross-2d"]


@pytest.fixture(scope="module")
def cpu_values():
    """Every entry's value from one program compiled by the CPU back end."""
    return qb.jit(_all_values(_CHECKED))([_qb_args(e) for e in _CHECKED])


def test_jit_values_match_numpy_on_the_cpu(cpu_values):
    for entry, result in zip(_CHECKED, cpu_values):
        if entry.numpy or entry.name == "cross-2d":
            _assert_tree(result, _expected(entry), entry.name)


def test_jit_values_match_numpy_on_the_interpreter(monkeypatch):
    monkeypatch.setenv("QUABLA_BACKEND", "interpret")
    fn = _all_values(_CHECKED)  # a new function: staged afresh for the interpreter
    for entry, result in zip(_CHECKED, qb.jit(fn)([_qb_args(e) for e in _CHECKED])):
        if entry.numpy or entry.name == "cross-2d":
            _assert_tree(result, _expected(entry), entry.name)


# -- against JAX: values and gradients under jit ------------------------------------------------

# Gradients on the CPU back end for one entry of each way of building them (a Numba compile
# grows faster than the program: the whole table's gradient is minutes of compile); the
# interpreter checks every entry's gradient.
GRADIENTS_ON_THE_CPU = [
    "sum-where", "max-where", "prod-axes", "var-where", "std-ddof", "cumsum", "cumprod",
    "logsumexp-b", "average-w", "median", "quantile", "sort-desc", "diff-append",
    "trapezoid-x", "pad-reflect", "repeat-list", "tile", "roll", "diagonal", "kron", "cross",
    "einsum-list", "dot-nd",
]


@pytest.fixture(scope="module")
def jax_results():
    """Every JAX entry's value, and the gradients of the differentiable ones, each from one
    jitted JAX program."""
    jax, jnp = _jax()
    entries = [e for e in _CHECKED if e.jax]
    values = jax.jit(lambda a: [e.fn(jnp, *x) for e, x in zip(entries, a)])(
        [[jnp.asarray(a) for a in e.args] for e in entries])
    smooth = [e for e in entries if e.grad]
    grads = jax.jit(jax.grad(_total(jnp, smooth)))([[jnp.asarray(a) for a in e.args]
                                                     for e in smooth])
    return dict(zip(entries, values)), dict(zip(smooth, grads))


def test_values_match_jax(jax_results, cpu_values):
    values, _ = jax_results
    for entry, ours in zip(_CHECKED, cpu_values):
        if entry in values:
            _assert_tree(ours, values[entry], entry.name)


@pytest.mark.parametrize("backend", [None, "interpret"], ids=["cpu", "interpret"])
def test_gradients_match_jax(jax_results, monkeypatch, backend):
    _, expected = jax_results
    if backend:
        monkeypatch.setenv("QUABLA_BACKEND", backend)
        entries = list(expected)
    else:
        entries = [e for e in expected if e.name in GRADIENTS_ON_THE_CPU]
        assert len(entries) == len(GRADIENTS_ON_THE_CPU)
    grads = qb.jit(qb.grad(_total(qb, entries)))([_qb_args(e) for e in entries])
    for entry, g in zip(entries, grads):
        _assert_tree(g, expected[entry], f"grad of {entry.name}", rtol=1e-9, atol=1e-11)


# -- conventions --------------------------------------------------------------------------------

def test_sums_of_bools_count_in_float64():
    mask = qb.array(np.array([[True, False, True], [True, True, False]]))
    for value in (qb.sum(mask), qb.sum(mask, axis=0), qb.mean(mask, axis=1),
                  qb.count_nonzero(mask, axis=1), qb.cumsum(mask), qb.prod(mask)):
        assert value.dtype is qb.float64
    assert float(qb.sum(mask)) == 4.0
    np.testing.assert_array_equal(np.asarray(qb.cumsum(mask)), np.cumsum(np.asarray(mask)))
    with pytest.raises(TypeError, match="bool_"):  # no other math on bool_
        qb.sqrt(mask)


def test_max_and_min_of_bools_are_any_and_all_as_in_numpy():
    b = np.array([[True, False, True], [False, False, False]])
    jitted = qb.jit(lambda m: (qb.max(m, axis=1), qb.min(m, axis=0, keepdims=True), m.max(),
                               qb.vmap(qb.min)(m)))
    max1, min0, total, rows = jitted(b)
    for ours, expected in ((max1, b.max(axis=1)), (min0, b.min(axis=0, keepdims=True)),
                           (total, b.max()), (rows, b.min(axis=1)),
                           (qb.max(qb.array(b), axis=0), b.max(axis=0))):
        assert ours.dtype is qb.bool_
        np.testing.assert_array_equal(np.asarray(ours), expected)


def test_index_results_are_float64_whole_numbers_without_derivative():
    x = qb.array(X, dtype=qb.float32)
    for value in (qb.argmax(x, axis=1), qb.argmin(x), qb.argsort(x),
                  qb.searchsorted(qb.sort(x[0]), x[1])):
        assert value.dtype is qb.float64
        values = np.asarray(value)
        np.testing.assert_array_equal(values, np.round(values))
    f = lambda x: qb.sum(qb.argmax(x, axis=0) * x[0]) + qb.sum(qb.argsort(x) * 2.0)
    g = qb.jit(qb.grad(f))(qb.array(X))
    expected = np.zeros_like(X)
    expected[0] = np.argmax(X, axis=0)
    np.testing.assert_array_equal(np.asarray(g), expected)


def test_nan_conventions_follow_numpy():
    x = np.array([[2.0, np.nan, 1.0, np.nan], [0.5, -1.0, 3.0, 3.0]])
    q = qb.array(x)
    np.testing.assert_array_equal(np.asarray(qb.argmax(q, axis=1)), np.argmax(x, axis=1))
    np.testing.assert_array_equal(np.asarray(qb.argmin(q, axis=1)), np.argmin(x, axis=1))
    np.testing.assert_array_equal(np.asarray(qb.sort(q)), np.sort(x))
    np.testing.assert_array_equal(np.asarray(qb.argsort(q)), np.argsort(x, kind="stable"))
    np.testing.assert_array_equal(np.asarray(qb.median(q, axis=1)), np.median(x, axis=1))
    a = np.array([1.0, 2.0, np.nan])
    v = np.array([np.nan, 2.0, 5.0])
    for side in ("left", "right"):
        np.testing.assert_array_equal(np.asarray(qb.searchsorted(a, v, side=side)),
                                      np.searchsorted(a, v, side=side))
    compiled = qb.jit(lambda q: (qb.sort(q), qb.argmax(q, axis=1), qb.median(q, axis=1)))(q)
    np.testing.assert_array_equal(np.asarray(compiled[0]), np.sort(x))
    np.testing.assert_array_equal(np.asarray(compiled[1]), np.argmax(x, axis=1))
    np.testing.assert_array_equal(np.asarray(compiled[2]), np.median(x, axis=1))


def test_prod_gradient_at_zeros_matches_jax():
    """Products of the other factors: one zero leaves its own derivative nonzero, two zeros
    none (no division by the product)."""
    jax, jnp = _jax()
    cases = [np.array([2.0, 0.0, 3.0, -1.5, 0.5]), np.array([0.0, 4.0, 0.0]),
             np.array([[1.5, 0.0], [2.0, 3.0], [0.0, 0.0]])]

    def grads(xp, grad, x):
        prods = [grad(lambda x, axis=axis: xp.sum(xp.sin(xp.prod(x, axis=axis))))(x)
                 for axis in (None, -1)]
        return prods + [grad(lambda x: xp.sum(xp.cumprod(x, axis=-1)))(x)]

    ours = qb.jit(lambda xs: [grads(qb, qb.grad, x) for x in xs])([qb.array(x) for x in cases])
    theirs = [grads(jnp, jax.grad, jnp.asarray(x)) for x in cases]
    _assert_tree(ours, theirs, "prod and cumprod at zeros")


def test_quantile_at_a_traced_q():
    x = _distinct(3, 7)
    q = np.array([0.0, 0.25, 0.5, 0.62, 1.0])

    @qb.jit
    def quantiles(x, q):
        return [qb.quantile(x, q, axis=1, method=m) for m in
                ("linear", "lower", "higher", "midpoint", "nearest")]

    for result, method in zip(quantiles(qb.array(x), qb.array(q)),
                              ("linear", "lower", "higher", "midpoint", "nearest")):
        _assert_tree(result, np.quantile(x, q, axis=1, method=method), method)
    # its derivative in q: the slope between the two elements it interpolates
    slope = qb.grad(lambda t: qb.quantile(qb.array(x[0]), t))(qb.array(0.3))
    s = np.sort(x[0])
    assert float(slope) == pytest.approx((s[2] - s[1]) * 6)


def test_sort_is_stable_and_its_gradient_follows_the_permutation():
    x = np.array([1.0, 0.0, 1.0, -0.0, 2.0, 0.0])
    np.testing.assert_array_equal(np.asarray(qb.argsort(x)), np.argsort(x, kind="stable"))
    w = np.arange(1.0, 7.0)
    g = qb.jit(qb.grad(lambda x: qb.sum(qb.sort(x) * w)))(qb.array(x))
    expected = np.empty(6)
    expected[np.argsort(x, kind="stable")] = w
    np.testing.assert_array_equal(np.asarray(g), expected)


def test_vmap_of_sorting_and_reductions():
    xs = _distinct(3, 2, 5)
    f = lambda x: (qb.sort(x, axis=1), qb.argsort(x, axis=0), qb.median(x),
                   qb.cumsum(x, axis=1), qb.argmax(x, axis=1), qb.var(x, axis=0))
    batched = qb.vmap(f)(qb.array(xs))
    for k, x in enumerate(xs):
        _assert_tree([b[k] for b in batched], f(qb.array(x)), "vmap")


def test_errors():
    x = qb.array(X)
    with pytest.raises(ValueError, match="initial"):
        qb.max(x, where=MASK)
    with pytest.raises(ValueError, match="equal division"):
        qb.split(x, 3, axis=1)
    with pytest.raises(ValueError, match="empty"):
        qb.diagonal(x, 4)
    with pytest.raises(NotImplementedError, match="mode"):
        qb.pad(x, 1, mode="linear_ramp")
    with pytest.raises(qb.TracerError):
        qb.jit(lambda x, s: qb.roll(x, s))(x, qb.array(1.0))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        qb.quantile(x, 1.5)
    with pytest.raises(ValueError, match="subscript"):
        qb.einsum(x, [0, "a"])
