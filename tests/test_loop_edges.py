"""Control flow at its edges: indices without derivatives, derivatives of every order
through loops, reverse mode through a ``while_loop`` that no cotangent crosses, ``jacfwd`` /
``jacrev``, ``scan``'s ``reverse`` and ``unroll``, fractional indices, and the optimizer's
matching of gradients to parameters.

References are finite differences of the next lower derivative, closed forms, plain Python
loops, optax's formulas and, where installed, JAX with x64. Tests that take ``on`` run on
every device (MLX and the CUDA simulator too); the others on the CPU back end and, where
they say so, on the interpreter.
"""

import math

import numpy as np
import pytest

import quabla as qb
from quabla.core.primitives import PRIMITIVES

from helpers import assert_close

pytestmark = pytest.mark.filterwarnings("ignore::quabla.PrecisionWarning")  # MLX narrows


@pytest.fixture
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


@pytest.fixture(params=["numba", "interpret"])
def backend(request, monkeypatch):
    """The CPU back end and the NumPy reference interpreter (read when a program compiles)."""
    monkeypatch.setenv("QUABLA_BACKEND", request.param)
    return request.param


def _fd(f, x, eps=1e-5):
    """The central difference of a scalar function of a scalar, evaluated eagerly."""
    return (float(f(qb.array(x + eps))) - float(f(qb.array(x - eps)))) / (2 * eps)


def _nth_grad(f, n):
    for _ in range(n):
        f = qb.grad(f)
    return f


# -- loop bounds and indices carry no derivative --------------------------------------------------

def _traced_lower(x, lo):
    return qb.fori_loop(lo, 3, lambda i, c: c + qb.sin(i), x)


def _index_reads(x, lo):
    xs = qb.stack([x, 2.0 * x, x * x, qb.sin(x)])
    return qb.fori_loop(lo, 4, lambda i, c: c * xs[i] + qb.cos(i * x), 0.5)


def _both_bounds(x, lo, hi):
    return qb.fori_loop(lo, hi, lambda i, c: c + qb.exp(-i * c) * x, x)


@pytest.mark.parametrize("fn, args, wrt_bounds", [
    (_traced_lower, (0.5, 1.0), [1]),
    (_index_reads, (0.7, 1.0), [1]),
    (_both_bounds, (0.3, 1.0, 4.0), [1, 2]),
])
def test_traced_bounds_carry_no_tangent(on, fn, args, wrt_bounds):
    """A tangent on a bound changes nothing (the index is discrete); the tangent of ``x``
    is the finite difference in ``x`` alone."""
    primals = tuple(qb.array(a) for a in args)
    for which in wrt_bounds:
        tangents = tuple(qb.array(1.0 if k == which else 0.0) for k in range(len(args)))
        _, t = on(lambda *p: qb.jvp(fn, p, tangents))(*primals)
        on.close(t, 0.0)
    tangents = tuple(qb.array(1.0 if k == 0 else 0.0) for k in range(len(args)))
    _, t = on(lambda *p: qb.jvp(fn, p, tangents))(*primals)
    expected = _fd(lambda x: fn(x, *primals[1:]), args[0])
    on.close(t, expected, rtol=1e-6, atol=1e-8)


def test_traced_bounds_carry_no_cotangent_and_batch(backend):
    x, lo = qb.array(0.7), qb.array(1.0)
    grad_lo = qb.jit(qb.grad(_index_reads, argnums=1))(x, lo)
    assert float(grad_lo) == 0.0
    # vmap over the lower bound and the tangent of x, forward over the batched loop
    los = qb.array([0.0, 1.0, 2.0])
    per = qb.vmap(lambda lo: qb.jvp(lambda x: _index_reads(x, lo), (x,), (qb.array(1.0),))[1])(los)
    expected = [_fd(lambda x: _index_reads(x, qb.array(v)), 0.7) for v in (0.0, 1.0, 2.0)]
    assert_close(per, expected, rtol=1e-6, atol=1e-8)


def test_traced_bounds_match_jax(jax):
    jnp = jax.numpy

    def jfn(x, lo):
        xs = jnp.stack([x, 2.0 * x, x * x, jnp.sin(x)])
        return jax.lax.fori_loop(lo, 4, lambda i, c: c * xs[i] + jnp.cos(i * x), 0.5)

    for lo in (0, 1, 3):
        ours = qb.jvp(_index_reads, (qb.array(0.7), qb.array(float(lo))),
                      (qb.array(1.0), qb.array(1.0)))
        theirs = jax.jvp(lambda x: jfn(x, lo), (0.7,), (1.0,))
        assert_close(ours[0], theirs[0])
        assert_close(ours[1], theirs[1], rtol=1e-12)


def test_stop_gradient(on):
    def f(x):
        return qb.sum(x * qb.stop_gradient(x * x)) + qb.stop_gradient(qb.sum(qb.sin(x)))

    x = qb.array([0.5, -1.5, 2.0])
    on.close(on(f)(x), np.sum(np.asarray(x) ** 3) + np.sum(np.sin(np.asarray(x))))
    on.close(on(qb.grad(f))(x), np.asarray(x) ** 2)
    on.close(on(qb.hessian(f))(x), np.zeros((3, 3)))
    on.close(on(lambda x: qb.jvp(f, (x,), (qb.ones(3),))[1])(x), np.sum(np.asarray(x) ** 2))
    on.close(on(qb.vmap(qb.grad(f)))(qb.stack([x, 2.0 * x])),
             np.stack([np.asarray(x) ** 2, (2 * np.asarray(x)) ** 2]))


def test_stop_gradient_is_a_primitive_without_derivative():
    assert not PRIMITIVES["stop_gradient"].differentiable
    assert qb.stop_gradient({"a": 1.0, "b": qb.array([True])})["b"].dtype is qb.bool_


# -- derivatives of every order through loops ------------------------------------------------------

def _fori(w):
    return qb.fori_loop(0, 2, lambda i, c: qb.sin(c * w), w)


def _scan_ys(w):
    c, ys = qb.scan(lambda c, i: (qb.sin(c * w), qb.sin(c * w) * i), w, length=3)
    return qb.sum(ys) + c


def _carry_as_y(w):  # a body whose y is its new carry (one node): merged regions keep both
    c, ys = qb.scan(lambda c, i: (qb.sin(c * w), qb.sin(c * w)), w, length=3)
    return qb.sum(ys) + c


_B = np.arange(12.0).reshape(3, 4) / 10


def _nested(w):
    b = qb.array(_B)

    def outer(c, i):
        x = b[i]
        c, _ = qb.scan(lambda c2, j: (c2 + qb.sin(x[j] * w * c2), ()), c, length=4)
        return c, ()

    return qb.scan(outer, w, length=3)[0]


def _cond_in_loop(w):
    return qb.fori_loop(0, 3, lambda i, c: qb.cond(c > 0.5, lambda v: qb.sin(v * w),
                                                    lambda v: v * v * w, c), w)


HIGHER = [_fori, _scan_ys, _carry_as_y, _nested, _cond_in_loop]


@pytest.mark.parametrize("fn", HIGHER, ids=lambda f: f.__name__)
@pytest.mark.parametrize("order", [3, 4])
def test_higher_derivatives_against_differences(backend, fn, order):
    """The n-th derivative is the finite difference of the (n-1)-th: every rule of every
    region composes with itself, whichever back end runs it."""
    w = 0.7
    nth = qb.jit(_nth_grad(fn, order))(qb.array(w))
    lower = qb.jit(_nth_grad(fn, order - 1))
    assert_close(nth, _fd(lower, w, eps=1e-4), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", [_fori, _carry_as_y, _nested], ids=lambda f: f.__name__)
def test_third_derivative_on_devices(on, fn):
    w = qb.array(0.7)
    on.close(on(_nth_grad(fn, 3))(w), _nth_grad(fn, 3)(w), rtol=1e-9)


def test_higher_derivatives_match_jax(jax):
    jnp = jax.numpy
    b = jnp.asarray(_B)

    def fori(w):
        return jax.lax.fori_loop(0, 2, lambda i, c: jnp.sin(c * w), w)

    def carry_as_y(w):
        c, ys = jax.lax.scan(lambda c, i: (jnp.sin(c * w), jnp.sin(c * w)), w, jnp.arange(3))
        return jnp.sum(ys) + c

    def nested(w):
        def outer(c, i):
            x = b[i]
            return jax.lax.scan(lambda c2, j: (c2 + jnp.sin(x[j] * w * c2), None), c,
                                jnp.arange(4))[0], None
        return jax.lax.scan(outer, w, jnp.arange(3))[0]

    for ours, theirs in [(_fori, fori), (_carry_as_y, carry_as_y), (_nested, nested)]:
        g, gj = ours, theirs
        for order in range(1, 5):
            g, gj = qb.grad(g), jax.grad(gj)
            assert_close(qb.jit(g)(qb.array(0.7)), gj(0.7), rtol=1e-10, atol=1e-10)


def test_region_operands_must_fit_their_bodies():
    """A rule that wires a region's operands wrongly fails where it binds."""
    c, _ = qb.scan(lambda c, i: (c * 2.0, ()), qb.array(1.0), length=2)  # fine
    assert float(c) == 4.0
    from quabla.control.regions import trace_body

    body = trace_body(lambda i, c: (c, c), (qb.array(0.0), qb.array(1.0)), "test").graph
    with pytest.raises(ValueError, match="do not fit"):
        qb.jit(lambda x: qb.core.tracing.bind("scan", x, body=body, length=2, lower=0,
                                              reverse=False, n_carry=1))(qb.ones(2))


# -- reverse mode through while_loop where no cotangent crosses it ------------------------------

def _counted(x):
    """The trip count does not depend on x; the result reads only the counter."""
    return x * qb.while_loop(lambda c: c[1] < 3.0, lambda c: (c[0] * 2.0, c[1] + 1.0), (x, 0.0))[1]


def _threshold(x):
    """The counter depends on x only through the loop's test: piecewise constant."""
    n = qb.while_loop(lambda c: c[0] < 10.0, lambda c: (c[0] * 2.0 + x, c[1] + 1.0), (x, 0.0))[1]
    return qb.sin(x) * n


def _traced_fori_counter(x, hi):
    c = qb.fori_loop(0, hi, lambda i, c: (c[0] * x, c[1] + i), (x, 0.0))
    return c[1] * x * x


def test_grad_through_while_no_cotangent_crosses(backend):
    assert_close(qb.jit(qb.grad(_counted))(qb.array(1.5)), 3.0)
    for x in (0.3, 1.1, 4.0):
        n = float(_threshold(qb.array(x)) / math.sin(x))
        assert_close(qb.jit(qb.grad(_threshold))(qb.array(x)), math.cos(x) * n)
    # a traced-bound fori_loop is a while_loop too: the sum of the indices 0..hi-1
    g = qb.jit(qb.grad(_traced_fori_counter))(qb.array(0.5), qb.array(4.0))
    assert_close(g, 6.0 * 2 * 0.5)
    assert float(qb.grad(_traced_fori_counter, argnums=1)(qb.array(0.5), qb.array(4.0))) == 0.0
    # second order, and per example
    assert_close(qb.grad(qb.grad(_threshold))(qb.array(1.1)),
                 -math.sin(1.1) * float(_threshold(qb.array(1.1)) / math.sin(1.1)))
    assert_close(qb.vmap(qb.grad(_counted))(qb.array([1.0, 2.0])), [3.0, 3.0])


_XS3 = np.array([0.3, -0.4, 0.8])


def _w(v):  # a while_loop whose result never depends on x
    return qb.while_loop(lambda s: s[0] < 2, lambda s: (s[0] + 1.0, qb.sin(s[1])), (0.0, v))[1]


NESTED_WHILE = {  # f(x, xs), differentiated in x only
    "cond operand": lambda x, xs: qb.cond(x > 0, lambda o: x * _w(o), lambda o: x, xs[0]),
    "scan ys without x": lambda x, xs: _w(qb.sum(qb.scan(lambda c, i: (c * x, xs[0]), x,
                                                         length=2)[1])),
    "scan carry without x": lambda x, xs: _w(qb.scan(
        lambda c, i: ((c[0] * x, qb.sin(c[1])), ()), (x, xs[0]), length=2)[0][1]) + x,
    "fori carry without x": lambda x, xs: _w(qb.fori_loop(
        0, 2, lambda i, c: (c[0] * x, qb.sin(c[1])), (x, xs[0]))[1]) + x,
    "while in a scan body": lambda x, xs: qb.scan(lambda c, i: (c * x + qb.while_loop(
        lambda s: s[0] < 1, lambda s: (s[0] + 1.0, xs[i]), (0.0, 0.5))[1], ()), x,
        length=2)[0],
    "while in a fori body": lambda x, xs: qb.fori_loop(0, 2, lambda i, c: c * x + qb.while_loop(
        lambda s: s[0] < 1, lambda s: (s[0] + 1.0, xs[i]), (0.0, 0.5))[1], x),
    "cond result without x": lambda x, xs: _w(qb.cond(x > 0, lambda o: xs[0],
                                                      lambda o: xs[1], x)) + x,
    "while, cond on x, while": lambda x, xs: qb.while_loop(
        lambda s: s[0] < 2, lambda s: (s[0] + 1.0, qb.cond(
            s[0] + x > 0.6, lambda: xs[0],
            lambda: qb.while_loop(lambda t: t[0] < 2, lambda t: (t[0] + 1.0, xs[1]),
                                  (0.0, s[1]))[1])), (0.0, xs[2]))[1] + x,
}


@pytest.mark.parametrize("name", sorted(NESTED_WHILE))
def test_grad_through_nested_while_no_cotangent_crosses(backend, name):
    """The inner while_loop reads only values without a derivative in x: reverse mode runs,
    and the gradient is the finite difference (each region passes cotangents only to the
    operands that need one, and a result depends only on what its region reads for it)."""
    f = NESTED_WHILE[name]
    xs = qb.array(_XS3)
    g = qb.jit(qb.grad(f))(qb.array(0.5), xs)
    assert_close(g, _fd(lambda x: f(x, xs), 0.5), rtol=1e-7, atol=1e-9)
    assert_close(qb.vmap(qb.grad(f), in_axes=(0, None))(qb.array([0.5, 0.7]), xs)[0], g)


def test_grad_through_while_matches_jax(jax):
    jnp = jax.numpy

    def counted(x):
        return x * jax.lax.while_loop(lambda c: c[1] < 3.0, lambda c: (c[0] * 2.0, c[1] + 1.0),
                                      (x, 0.0))[1]

    def threshold(x):
        n = jax.lax.while_loop(lambda c: c[0] < 10.0, lambda c: (c[0] * 2.0 + x, c[1] + 1.0),
                               (x, 0.0))[1]
        return jnp.sin(x) * n

    for ours, theirs in [(_counted, counted), (_threshold, threshold)]:
        for x in (0.3, 1.5):
            assert_close(qb.grad(ours)(qb.array(x)), jax.grad(theirs)(x))


def test_a_cotangent_that_crosses_a_while_loop_raises():
    def crossing(x):
        return qb.while_loop(lambda c: c[1] < 3.0, lambda c: (c[0] * 2.0, c[1] + 1.0), (x, 0.0))[0]

    with pytest.raises(qb.UnsupportedOperationError, match="flow through its carry"):
        qb.grad(crossing)(qb.array(1.5))
    with pytest.raises(qb.UnsupportedOperationError):
        qb.grad(lambda x, n: _traced_fori_counter(x, n) + qb.fori_loop(
            0, n, lambda i, c: c * x, x))(qb.array(0.5), qb.array(2.0))
    # forward mode goes through
    assert_close(qb.jvp(crossing, (qb.array(1.5),), (qb.array(1.0),))[1], 8.0)


# -- jacfwd / jacrev ---------------------------------------------------------------------------------

def _vector_fn(x):
    return qb.stack([qb.sum(x * x), x[0] * qb.sin(x[1]), qb.exp(x[2]) * x[0]])


def _vector_jacobian(x):
    x0, x1, x2 = x
    return np.array([[2 * x0, 2 * x1, 2 * x2],
                     [math.sin(x1), x0 * math.cos(x1), 0.0],
                     [math.exp(x2), 0.0, x0 * math.exp(x2)]])


@pytest.mark.parametrize("jac", [qb.jacobian, qb.jacfwd, qb.jacrev], ids=lambda j: j.__name__)
def test_jacfwd_jacrev(on, jac):
    x = np.array([0.3, -1.2, 0.8])
    on.close(on(jac(_vector_fn))(qb.array(x)), _vector_jacobian(x))
    (j, aux) = on(jac(lambda x: (_vector_fn(x), {"norm": qb.sum(x * x)}), has_aux=True))(
        qb.array(x))
    on.close(j, _vector_jacobian(x))
    on.close(aux["norm"], np.sum(x * x))
    # two arguments, a pytree output
    j = jac(lambda a, b: {"p": a * b, "q": qb.sum(a) * b}, argnums=(0, 1))(
        qb.array([1.0, 2.0]), qb.array([3.0, 4.0]))
    assert_close(j["p"][0], np.diag([3.0, 4.0]))
    assert_close(j["q"][1], 3.0 * np.eye(2))


def test_jacobian_falls_back_to_forward_mode_through_while():
    """Fewer outputs than inputs would pick reverse mode, which a while_loop refuses."""
    def f(x):
        return qb.while_loop(lambda c: c[1] < 3.0,
                             lambda c: (c[0] * x[0] + qb.sin(x[1]), c[1] + 1.0),
                             (qb.sum(x), 0.0))[0]

    x = qb.array([0.5, 1.0, 2.0])
    expected = qb.jacfwd(f)(x)
    assert_close(qb.jacobian(f)(x), expected)
    assert_close(expected, [_fd(lambda v: f(qb.stack([v, x[1], x[2]])), 0.5),
                            _fd(lambda v: f(qb.stack([x[0], v, x[2]])), 1.0),
                            _fd(lambda v: f(qb.stack([x[0], x[1], v])), 2.0)], rtol=1e-6)
    with pytest.raises(qb.UnsupportedOperationError):
        qb.jacrev(f)(x)
    with pytest.raises(TypeError, match="holomorphic"):
        qb.jacfwd(f, holomorphic=True)


def test_jacfwd_jacrev_match_jax(jax):
    jnp = jax.numpy

    def f(x):
        return jnp.stack([jnp.sum(x * x), x[0] * jnp.sin(x[1]), jnp.exp(x[2]) * x[0]])

    x = np.array([0.3, -1.2, 0.8])
    assert_close(qb.jacfwd(_vector_fn)(qb.array(x)), jax.jacfwd(f)(x))
    assert_close(qb.jacrev(_vector_fn)(qb.array(x)), jax.jacrev(f)(x))
    assert_close(qb.jacfwd(qb.jacrev(_vector_fn))(qb.array(x)), jax.jacfwd(jax.jacrev(f))(x))


# -- scan: reverse, unroll -------------------------------------------------------------------------

_XS = np.linspace(0.1, 1.3, 7)


def _scan_program(w, reverse, unroll, length):
    xs = qb.array(_XS)
    return qb.scan(lambda c, i: (qb.sin(c * w + xs[i]) + 0.1 * i, (c * i, {"a": qb.cos(c)})),
                   w, length=length, reverse=reverse, unroll=unroll)


def _python_scan(w, reverse, length):
    """The same loop in plain Python: rows of the ys in index order, whatever the direction."""
    c, ys, zs = w, [None] * length, [None] * length
    for i in (range(length - 1, -1, -1) if reverse else range(length)):
        ys[i], zs[i] = c * i, math.cos(c)
        c = math.sin(c * w + _XS[i]) + 0.1 * i
    return c, np.array(ys), np.array(zs)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("unroll", [False, True, 1, 2, 3, 9])
@pytest.mark.parametrize("length", [1, 5, 7])
def test_scan_reverse_and_unroll(reverse, unroll, length):
    c, (ys, zs) = _scan_program(qb.array(0.3), reverse, unroll, length)
    ec, eys, ezs = _python_scan(0.3, reverse, length)
    assert_close(c, ec)
    assert_close(ys, eys)
    assert_close(zs["a"], ezs)

    def loss(w):
        c, (ys, zs) = _scan_program(w, reverse, unroll, length)
        return c + qb.sum(ys * zs["a"])

    ref = qb.grad(lambda w: (lambda c, ys: c + qb.sum(ys[0] * ys[1]["a"]))(
        *_scan_program(w, reverse, True, length)))
    assert_close(qb.jit(qb.grad(loss))(qb.array(0.3)), ref(qb.array(0.3)), rtol=1e-12)
    assert_close(qb.jit(qb.grad(loss))(qb.array(0.3)), _fd(loss, 0.3), rtol=1e-6)


def test_scan_reverse_on_devices(on):
    def f(w):
        c, ys = qb.scan(lambda c, i: (qb.sin(c * w) + i, c * c), w, length=5, reverse=True,
                        unroll=2)
        return c + qb.sum(ys)

    on.close(on(f)(qb.array(0.4)), f(qb.array(0.4)), rtol=1e-9)
    on.close(on(qb.grad(f))(qb.array(0.4)), _fd(f, 0.4), rtol=1e-6, atol=1e-8)


def test_scan_unroll_builds_blocks():
    """``unroll=3`` over 7 steps: one loop of 2 iterations whose body holds 3 steps, and one
    step inlined after it."""
    graph = qb.jit(lambda w: _scan_program(w, False, 3, 7)).lower(qb.array(0.3)).graph
    scans = [n for n in graph.nodes if n.op == "scan"]
    assert len(scans) == 1 and scans[0].kw["length"] == 2
    assert sum(n.op == "sin" for n in scans[0].kw["body"].nodes) == 3


def test_scan_matches_jax(jax):
    jnp = jax.numpy

    def jf(w, reverse, unroll):
        xs = jnp.asarray(_XS)
        return jax.lax.scan(lambda c, i: (jnp.sin(c * w + xs[i]) + 0.1 * i,
                                          (c * i, {"a": jnp.cos(c)})),
                            w, jnp.arange(7), reverse=reverse, unroll=unroll)

    for reverse in (False, True):
        for unroll in (1, 3):
            ours = qb.tree.leaves(_scan_program(qb.array(0.3), reverse, unroll, 7))
            theirs = jax.tree_util.tree_leaves(jf(0.3, reverse, unroll))
            for a, b in zip(ours, theirs):
                assert_close(a, b)


def test_scan_argument_errors():
    with pytest.raises(ValueError, match="zero-extent"):
        qb.scan(lambda c, i: (c, c), qb.array(0.0), length=0)
    c, ys = qb.scan(lambda c, i: (c + 1.0, ()), qb.array(0.0), length=0)
    assert float(c) == 0.0 and ys == ()
    with pytest.raises(TypeError, match="positive int"):
        qb.scan(lambda c, i: (c, ()), qb.array(0.0), length=3, unroll=0)
    with pytest.raises(ValueError, match="static bounds"):
        qb.jit(lambda n: qb.fori_loop(0, n, lambda i, c: c + i, 0.0, unroll=2))(qb.array(3.0))
    assert float(qb.fori_loop(2, 9, lambda i, c: c + i, 0.0, unroll=3)) == 35.0


# -- fractional indices ---------------------------------------------------------------------------

def test_eager_fractional_index_raises():
    xs = qb.array([10.0, 20.0, 30.0])
    for bad in (1.7, -0.5, float("nan"), float("inf")):
        with pytest.raises(TypeError, match="whole number"):
            xs[qb.array(bad)]
    assert float(xs[qb.array(2.0)]) == 30.0 and float(xs[qb.array(-1.0)]) == 30.0


def test_traced_fractional_index_rounds_down(on):
    """Documented: a traced index that is not a whole number is rounded down, then wrapped
    (negative) and clamped as any traced index."""
    xs = qb.array([10.0, 20.0, 30.0, 40.0])
    read = qb.jit(lambda xs, i: xs[i], device=on.device)  # traced on every device
    for i, expected in [(1.7, 20.0), (2.999, 30.0), (-0.5, 40.0), (-1.2, 30.0), (3.5, 40.0),
                        (7.0, 40.0), (-7.0, 10.0), (float("nan"), 10.0)]:
        assert float(read(xs, qb.array(i))) == expected, i
    c, ys = on(lambda xs: qb.scan(lambda c, i: (c + xs[i + 0.5], xs[-i - 0.5]), 0.0,
                                  length=4))(xs)
    assert float(c) == 100.0
    on.close(ys, [40.0, 30.0, 20.0, 10.0])


# -- optimizers: gradients are matched to parameters by structure -----------------------------

@pytest.mark.parametrize("opt", [qb.optim.SGD(0.1), qb.optim.Adam(0.1)],
                         ids=lambda o: type(o).__name__)
def test_gradient_structure_must_match_parameters(opt):
    params = {"a": qb.array(1.0), "b": qb.array(2.0)}
    state = opt.init(params)
    for wrong in ({"b": qb.array(1.0), "c": qb.array(1.0)}, [qb.array(1.0), qb.array(1.0)],
                  {"a": qb.array(1.0), "b": [qb.array(1.0)]}, {"a": qb.array(1.0)}):
        with pytest.raises(ValueError, match=r"gradients .* do not match parameters"):
            opt.update(params, wrong, state)
    nested = {"w": [qb.array([1.0, 2.0]), None, qb.array(3.0)]}
    state = opt.init(nested)
    new, _ = opt.update(nested, {"w": [None, None, qb.array(1.0)]}, state)
    assert_close(new["w"][0], [1.0, 2.0])  # a None gradient leaves its parameter alone
    assert new["w"][1] is None
    assert float(new["w"][2]) < 3.0


def test_matched_gradients_follow_optax_sgd_momentum():
    opt = qb.optim.SGD(0.1, momentum=0.9)
    params = {"b": qb.array(1.0), "a": qb.array([1.0, -1.0])}
    state = opt.init(params)
    grads = {"a": qb.array([0.5, 0.25]), "b": qb.array(2.0)}
    trace_a, trace_b = np.zeros(2), 0.0
    a, b = np.array([1.0, -1.0]), 1.0
    for _ in range(3):
        params, state = opt.update(params, grads, state)
        trace_a = 0.9 * trace_a + np.array([0.5, 0.25])  # optax.sgd(0.1, momentum=0.9)
        trace_b = 0.9 * trace_b + 2.0
        a, b = a - 0.1 * trace_a, b - 0.1 * trace_b
    assert_close(params["a"], a)
    assert_close(params["b"], b)


# -- a loop whose body runs in row tiles ----------------------------------------------------------

def _van_der_pol_rk4(mu, y, steps):
    """RK4 of a Van der Pol oscillator, ``mu`` closed over: vmapped over 32 or more states, the
    body's elementwise work runs in tiles of rows, each exported to the full carry."""
    def f(y):
        return qb.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])

    def body(i, y):
        stages = [f(y)]
        for c in (0.005, 0.005, 0.01):  # the classic stages: half, half and a whole step
            stages.append(f(y + c * stages[-1]))
        k1, k2, k3, k4 = stages
        return y + 0.01 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return qb.fori_loop(0, steps, body, y)


@pytest.mark.parametrize("rows", [32, 33, 64, 80])
def test_a_loop_body_in_row_tiles_keeps_its_carries(rows, backend):
    """A tile's name is its full array after the tile loop; on the loop's next pass it must
    name the tile again, or the tiles are written into the carry that pass reads (seen as a
    wrong gradient: the saved carries of the forward pass were overwritten)."""
    y0 = qb.array(np.random.default_rng(11).normal(size=(rows, 2)))

    def loss(mu):
        ys = qb.vmap(lambda y: _van_der_pol_rk4(mu, y, 3))(y0)
        return qb.sum(ys * ys), ys

    (value, ys), grad = qb.jit(qb.value_and_grad(loss, has_aux=True))(qb.array(1.3))
    expected = np.asarray(y0)
    for _ in range(3):  # the carries, row by row in NumPy
        y = expected
        def f(y):
            return np.stack([y[:, 1], 1.3 * (1 - y[:, 0] ** 2) * y[:, 1] - y[:, 0]], axis=1)
        k1 = f(y)
        k2 = f(y + 0.005 * k1)
        k3 = f(y + 0.005 * k2)
        k4 = f(y + 0.01 * k3)
        expected = y + 0.01 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    assert_close(ys, expected, rtol=1e-13)
    assert_close(value, np.sum(expected ** 2), rtol=1e-13)
    fd = _fd(lambda m: float(loss(qb.array(m))[0]), 1.3)
    assert_close(grad, fd, rtol=1e-6)
