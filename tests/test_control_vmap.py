"""vmap of control flow (issue 8, item 4): each batched region equals a Python loop over the
batch of the same function applied per example. Tests that take ``on`` run the batched
function on every device (helpers.OnDevice); those of while loops with float64 tolerances in
their conditions run on the CPU only (MLX would run them in float32, where they never end)."""

import numpy as np
import pytest

import quabla as qb
from helpers import OnDevice

pytestmark = pytest.mark.filterwarnings("ignore::quabla.PrecisionWarning")  # MLX's float32
CPU = OnDevice("cpu")
RNG = np.random.default_rng(8)


def per_example(f, args, in_axes):
    """``f`` applied to each example eagerly, results stacked: the reference of vmap."""
    size = next(np.shape(a)[0] for a, ax in zip(args, in_axes) if ax is not None)
    rows = []
    for k in range(size):
        example = [qb.asarray(np.asarray(a)[k]) if ax is not None else qb.asarray(a)
                   for a, ax in zip(args, in_axes)]
        out = f(*example)
        rows.append([np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))])
    return [np.stack(col) for col in zip(*rows)]


def check_vmap(on, f, args, in_axes, rtol=1e-12):
    """vmap of ``f`` on ``on``'s device against ``per_example`` (on the CPU)."""
    got = on(qb.vmap(f, in_axes=in_axes))(*[qb.asarray(a) for a in args])
    got = got if isinstance(got, tuple) else (got,)
    want = per_example(f, args, in_axes)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        on.close(g, w, rtol=rtol, atol=1e-12)
    return got


def program_text(f, args, in_axes):
    return qb.jit(qb.vmap(f, in_axes=in_axes)).lower(*[qb.asarray(a) for a in args]).as_text()


# -- scan ---------------------------------------------------------------------------------------

def scan_program(c0, xs, w):
    """carry and two ys: one reads xs[i] and the carry, one depends on the index only."""
    def step(c, i):
        c = c * w + qb.sin(xs[i]) * i
        return c, (c * c, i * 2.0)
    c, (ys, idx) = qb.scan(step, c0, length=xs.shape[0])
    return c, ys, idx


@pytest.mark.parametrize("in_axes", [(0, 0, 0), (None, 0, None), (0, None, None),
                                     (None, None, 0)])
def test_scan_batched_init_xs_and_closure(in_axes, on):
    size, n = 3, 4
    args = [RNG.normal(size=(size,)), RNG.normal(size=(size, n)), RNG.uniform(0.5, 1.0, size)]
    args = [a if ax is not None else a[0] for a, ax in zip(args, in_axes)]
    check_vmap(on, scan_program, args, in_axes)


def test_scan_carry_made_batched_by_the_body_takes_a_fixpoint():
    """c depends on b, b on a, a on the batched xs: each becomes batched one round later;
    the counter stays as it is."""
    def f(xs):
        def step(carry, i):
            a, b, c, count = carry
            return (a + xs[i], a * 2.0, b + c, count + 1.0), c
        return qb.scan(step, (0.0, 0.0, 1.0, 0.0), length=5)

    xs = RNG.normal(size=(3, 5))
    got = qb.vmap(f)(qb.asarray(xs))
    for k in range(3):
        (a, b, c, count), cs = f(qb.asarray(xs[k]))
        for g, w in zip([*got[0], got[1]], [a, b, c, count, cs]):
            np.testing.assert_allclose(np.asarray(g)[k], np.asarray(w), rtol=1e-12)


def test_scan_over_a_matrix_carry_with_batched_closure_matrix(on):
    def f(x0, a):
        def step(x, i):
            x = qb.tanh(qb.matmul(a, x)) + i * 0.1
            return x, qb.sum(x)
        return qb.scan(step, x0, length=3)

    args = [RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3, 3))]
    check_vmap(on, f, args, (0, 0))
    check_vmap(on, f, [args[0], args[1][0]], (0, None))


def test_fori_loop_batched_init_and_operands(on):
    def f(x, a):
        return qb.fori_loop(1, 5, lambda i, c, a: c * a + i, x, operands=(a,))

    check_vmap(on, f, [RNG.normal(size=(4, 2)), RNG.normal(size=(4,))], (0, 0))
    check_vmap(on, f, [RNG.normal(size=(2,)), RNG.normal(size=(4,))], (None, 0))


def test_fori_loop_with_traced_bound_batched_lane_counts(on):
    """A traced upper bound makes a while loop; batched, lanes run different trip counts."""
    def f(x, n):
        return qb.fori_loop(0, n, lambda i, c: c * 1.5 + i, x)

    check_vmap(on, f, [RNG.normal(size=(4,)), np.array([0.0, 1.0, 3.0, 6.0])], (0, 0))


# -- cond ---------------------------------------------------------------------------------------

def cond_program(p, x, y):
    """Two results: the first batched in one branch only (via x), the second only in the
    other (via y); the false branch would give NaN where it is not taken."""
    return qb.cond(p > 0, lambda x, y: (x * 2.0, qb.ones(())),
                   lambda x, y: (qb.ones(x.shape), qb.log(y)), x, y)


@pytest.mark.parametrize("in_axes", [(None, 0, None), (None, None, 0), (None, 0, 0)])
def test_cond_unbatched_predicate_stays_a_branch(in_axes, on):
    args = [np.array(1.0), RNG.normal(size=(3, 2)), RNG.uniform(0.5, 2.0, size=(3,))]
    args = [a if ax is not None else (a if a.ndim == 0 else a[0]) for a, ax in
            zip(args, in_axes)]
    for p in (1.0, -1.0):
        check_vmap(on, cond_program, [np.array(p)] + args[1:], in_axes)
    assert "= cond " in program_text(cond_program, args, in_axes)


@pytest.mark.parametrize("in_axes", [(0, None, None), (0, 0, None), (0, 0, 0)])
def test_cond_batched_predicate_selects_per_lane(in_axes, on):
    p = np.array([1.0, -1.0, 2.0, -3.0])
    x, y = RNG.normal(size=(4, 2)), np.array([-1.0, 2.0, 0.5, 3.0])  # lane 0 takes true_fun
    args = [p, x if in_axes[1] is not None else x[0], y if in_axes[2] is not None else y[2]]
    got = check_vmap(on, cond_program, args, in_axes)
    assert np.isfinite(np.asarray(got[1])).all()
    assert "= cond " not in program_text(cond_program, args, in_axes)


def test_cond_batched_predicate_inside_scan(on):
    def f(x):
        def step(c, i):
            return qb.cond(c > 0, lambda c: c - i, lambda c: c * c + 1.0, c), c
        return qb.scan(step, x, length=4)

    check_vmap(on, f, [np.array([0.5, 3.0, -2.0, 10.0])], (0,))


# -- while --------------------------------------------------------------------------------------

def newton_sqrt(a):
    """sqrt(a) by Newton's iteration to a tolerance, counting the steps."""
    def body(state):
        x, k = state
        return 0.5 * (x + a / x), k + 1.0
    return qb.while_loop(lambda s: qb.abs(s[0] * s[0] - a) > 1e-12 * a, body, (a + 1.0, 0.0))


def test_while_batched_predicate_lanes_finish_at_different_counts():
    a = np.array([1.0, 2.0, 9.0, 1e6, 0.25])
    x, k = check_vmap(CPU, newton_sqrt, [a], (0,))
    np.testing.assert_allclose(np.asarray(x), np.sqrt(a), rtol=1e-12)
    assert len(set(np.asarray(k).tolist())) > 2  # the lanes really ran different counts
    assert "reduce_or" in program_text(newton_sqrt, [a], (0,))


def test_while_batched_predicate_from_a_closure_only(on):
    """The carry starts unbatched; only the closed-over limit is batched: every carry becomes
    batched and each lane stops on its own."""
    def halvings(limit):
        return qb.while_loop(lambda s: s[0] >= limit, lambda s: (s[0] * 0.5, s[1] + 1.0),
                             (100.0, 0.0))

    x, k = check_vmap(on, halvings, [np.array([1.0, 7.0, 0.3, 200.0])], (0,))
    np.testing.assert_array_equal(np.asarray(k), [7.0, 4.0, 9.0, 0.0])


def test_while_unbatched_predicate_stays_a_plain_loop(on):
    def f(x, n):
        return qb.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1.0, s[1] * 2.0 - s[0]),
                             (0.0, x))

    args = [RNG.normal(size=(3, 2)), np.array(4.0)]
    check_vmap(on, f, args, (0, None))
    text = program_text(f, args, (0, None))
    assert "= while " in text and "reduce_or" not in text


# -- vmap of vmap, dynamic indexing -------------------------------------------------------------

def test_vmap_of_vmap_through_scan_cond_and_while():
    def f(a, xs):
        s, _ = qb.scan(lambda c, i: (c + xs[i] * a, ()), 0.0, length=xs.shape[0])
        s = qb.cond(s > 0, lambda s: qb.sqrt(s), lambda s: -s, s)
        x, k = newton_sqrt(a)
        return s + x, k

    a = RNG.uniform(0.5, 4.0, size=(2, 3))
    xs = RNG.normal(size=(2, 3, 4))
    got = qb.vmap(qb.vmap(f))(qb.asarray(a), qb.asarray(xs))
    for r in range(2):
        want = per_example(f, [a[r], xs[r]], (0, 0))
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g)[r], w, rtol=1e-12)
    got = qb.vmap(qb.vmap(f, in_axes=(0, None)), in_axes=(None, 0))(qb.asarray(a[0]),
                                                                    qb.asarray(xs[:, 0]))
    for r in range(2):
        want = per_example(f, [a[0], xs[r, 0]], (0, None))
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g)[r], w, rtol=1e-12)


@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0)])
def test_dynamic_index_batched_index_array_or_both(in_axes, on):
    x = RNG.normal(size=(3, 5, 2))
    i = np.array([0.0, 4.0, -1.0])  # -1 counts from the end
    args = [x if in_axes[0] is not None else x[0], i if in_axes[1] is not None else i[1]]
    check_vmap(on, lambda x, i: x[i] * 2.0, args, in_axes)
    check_vmap(on, lambda x, i: x[:, i], args, in_axes)  # along axis 1: a transpose first
    # the VJP of x[i] (dynamic_update_add) under vmap: per-example gradients
    check_vmap(on, qb.grad(lambda x, i: qb.sum(qb.sin(x[i]))), args, in_axes)


# -- jacobian and hessian (vmap of jvp / vjp) through regions, against JAX -----------------------

def _scan_loss(np_):
    """The same program written for Quabla (``np_`` = qb) and for JAX (``np_`` = jax ops)."""
    def f(x, scan, fori, cond, row):
        c, ys = scan(lambda c, i: (np_.sin(c * x[row(i)]) + c, c * c), x[0] * 0.0 + 0.5, 3)
        c = fori(0, 3, lambda i, c: np_.tanh(c) * x[1] + i * 0.1, c)
        c = cond(c > 0.5, lambda c: c * x[2], lambda c: c * c, c)
        return np_.sum(ys) + c
    return f


def _quabla_parts():
    def scan(body, init, length):
        return qb.scan(body, init, length=length)
    return qb, scan, qb.fori_loop, qb.cond, lambda i: i


def _jax_parts():
    import jax
    import jax.numpy as jnp

    def scan(body, init, length):
        return jax.lax.scan(lambda c, i: body(c, i.astype(jnp.float64)), init,
                            jnp.arange(length))

    def fori(lo, hi, body, init):
        return jax.lax.fori_loop(lo, hi, lambda i, c: body(i.astype(jnp.float64), c), init)

    return (jnp, scan, fori, lambda p, t, f, x: jax.lax.cond(p, t, f, x),
            lambda i: i.astype(jnp.int32))


@pytest.fixture(scope="module")
def jax64():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


@pytest.mark.parametrize("x", [[0.3, 0.7, -0.2], [0.9, 1.3, 0.4]])  # both sides of the cond
def test_hessian_through_scan_fori_and_cond_matches_jax(jax64, x):
    """Forward over reverse: vmap of the JVP of the VJP of every region."""
    np_, *parts = _quabla_parts()
    f = _scan_loss(np_)
    fq = lambda x: f(x, *parts)  # noqa: E731
    jnp, *jparts = _jax_parts()
    fj = lambda x: _scan_loss(jnp)(x, *jparts)  # noqa: E731
    x = np.array(x)
    np.testing.assert_allclose(np.asarray(qb.hessian(fq)(qb.asarray(x))),
                               np.asarray(jax64.jit(jax64.hessian(fj))(x)), rtol=1e-10, atol=1e-12)


def _finite_difference_jacobian(f, x, eps=1e-6):
    cols = []
    for k in range(x.size):
        e = np.zeros_like(x)
        e.flat[k] = eps
        cols.append((np.asarray(f(qb.asarray(x + e))) - np.asarray(f(qb.asarray(x - e)))) /
                    (2 * eps))
    return np.stack(cols, axis=-1)


def test_jacobian_through_a_while_loop_and_a_vector_scan():
    def f(x):
        y, _ = qb.while_loop(lambda s: s[1] < 3.0, lambda s: (qb.sin(s[0]) * x, s[1] + 1.0),
                             (x, 0.0))
        ys = qb.scan(lambda c, i: (c * y + x[i], c), y, length=3)[1]
        return qb.sum(ys, axis=0)

    x = np.array([0.3, 0.7, -0.2])
    np.testing.assert_allclose(np.asarray(qb.jacobian(f)(qb.asarray(x))),
                               _finite_difference_jacobian(f, x), rtol=1e-6, atol=1e-8)


def test_per_example_gradients_through_a_batched_predicate():
    """vmap of a derivative (forward mode: a while has no VJP) where the cond's predicate and
    the while's trip count differ per lane."""
    def loss(a):
        x, _ = newton_sqrt(a)
        return qb.cond(a > 2.0, lambda x: qb.sin(x) * a, lambda x: x * x * x, x)

    a = np.array([0.5, 1.5, 4.0, 9.0])
    got = np.asarray(qb.vmap(qb.jacobian(loss))(qb.asarray(a)))
    s = np.sqrt(a)
    want = np.where(a > 2.0, np.cos(s) * a / (2 * s) + np.sin(s), 1.5 * s)
    np.testing.assert_allclose(got, want, rtol=1e-9)


def test_per_example_reverse_gradients_through_scan_and_a_batched_cond():
    def loss(a, xs):
        def step(c, i):
            c = qb.cond(c > 0.0, lambda c: qb.sin(c) * xs[i], lambda c: c * a + xs[i], c)
            return c, c * c
        c, ys = qb.scan(step, a, length=xs.shape[0])
        return qb.sum(ys) + c

    a, xs = np.array([0.5, -1.5, 2.0]), RNG.normal(size=(3, 4))
    grads = qb.vmap(qb.grad(loss, argnums=(0, 1)))(qb.asarray(a), qb.asarray(xs))
    for k in range(3):
        want = qb.grad(loss, argnums=(0, 1))(qb.asarray(a[k]), qb.asarray(xs[k]))
        for g, w in zip(grads, want):
            np.testing.assert_allclose(np.asarray(g)[k], np.asarray(w), rtol=1e-12)
        fd = _finite_difference_jacobian(lambda v: loss(v, qb.asarray(xs[k])), np.array(a[k]))
        np.testing.assert_allclose(np.asarray(grads[0])[k], fd, rtol=1e-6)


def test_newton_benchmark_solves_every_lane():
    """benchmarks/newton_vmap.py's Quabla side at a small size: each lane's root."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "benchmarks", "newton_vmap.py")
    spec = importlib.util.spec_from_file_location("quabla_benchmarks_newton_vmap", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    a, b = bench.problem(8)
    x, k = bench.quabla_solver()(a, b)
    np.testing.assert_allclose(x ** 3 + a * x, b, rtol=1e-12, atol=1e-10)
    assert k.min() < k.max() < bench.MAXITER
