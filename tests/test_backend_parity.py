"""Every back end against the reference interpreter (DESIGN "Testing that means something").

For every primitive case of ``test_rules`` (and the primitives without a derivative), one graph
holds the function and its gradient; the Numba CPU executable must give what the NumPy
interpreter gives, in float64 and float32.
"""

import numpy as np
import pytest

import quabla as qb
from helpers import FLOAT_ELEMENTWISE, assert_results_match, mlp_net
from quabla.core.interpret import evaluate
from lowering.numba_cpu import compile_graph, load_cached
from test_rules import CASES, NONDIFF_CASES

TOL = {qb.float64: dict(rtol=1e-10, atol=1e-12), qb.float32: dict(rtol=2e-5, atol=2e-6)}


def _with_gradient(fn):
    def both(*args):
        out = fn(*args)
        grads = qb.grad(lambda *a: qb.sum(qb.sin(fn(*a))), argnums=tuple(range(len(args))))(*args)
        return out, grads
    return both


def _params():
    out = []
    for name, cases in sorted(CASES.items()):
        for i, case in enumerate(cases):
            for dtype in (qb.float64, qb.float32):
                out.append(pytest.param(case.fn, case.args, dtype, True,
                                        id=f"{name}-{case.name or i}-{dtype}"))
    for name, fn in sorted(NONDIFF_CASES.items()):
        out.append(pytest.param(fn, lambda rng: [rng.uniform(0.1, 2.0, (2, 3)),
                                                 rng.uniform(-1, 1, (2, 3))],
                                qb.float64, False, id=f"{name}"))
    return out


@pytest.mark.parametrize("fn, make_args, dtype, differentiate", _params())
def test_numba_matches_interpreter(fn, make_args, dtype, differentiate):
    rng = np.random.default_rng(7)
    args = [qb.array(a, dtype=dtype) for a in make_args(rng)]
    staged = qb.jit(_with_gradient(fn) if differentiate else fn)
    graph = staged.lower(*args).graph
    values = [a.numpy() for a in args]
    expected = evaluate(graph, values)
    actual = compile_graph(graph, {})(*values)
    _assert_matches(actual, expected, dtype)
    # as a warm process runs it: the cached object code, linked without Numba
    _assert_matches(load_cached(graph)(*values), expected, dtype)


def _assert_matches(actual, expected, dtype):
    assert_results_match(actual, expected, **TOL[dtype])


def test_large_products_match_the_interpreter():
    """Above BLAS_THRESHOLD products go to BLAS when SciPy is installed, else to the loop nest."""
    rng = np.random.default_rng(3)
    a, b = qb.array(rng.uniform(-1, 1, (128, 64))), qb.array(rng.uniform(-1, 1, (64, 64)))
    graph = qb.jit(lambda a, b: qb.tanh(a @ b) @ b.T).lower(a, b).graph
    values = [a.numpy(), b.numpy()]
    (expected,) = evaluate(graph, values)
    (actual,) = compile_graph(graph, {})(*values)
    np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=1e-12)
    (reloaded,) = load_cached(graph)(*values)
    np.testing.assert_allclose(reloaded, expected, rtol=1e-10, atol=1e-12)


def _mlp_pinn_loss(p, x):
    u_xx = qb.vmap(qb.grad(qb.grad(lambda t: mlp_net(p, t))))
    return qb.mean((u_xx(x) + qb.sin(3.0 * x)) ** 2)


def _big_programs():
    """Whole programs whose intermediates share scratch slots (lowering/loopnest/buffers.py)."""
    rng = np.random.default_rng(5)
    params = {"W1": qb.array(rng.normal(size=(1, 16))), "b1": qb.array(rng.normal(size=16)),
              "W2": qb.array(rng.normal(size=(16, 16)) / 4), "b2": qb.array(rng.normal(size=16)),
              "W3": qb.array(rng.normal(size=(16, 1)) / 4), "b3": qb.array(rng.normal(size=1))}
    hess_f = lambda x: qb.sum(qb.sin(x) * x[0] + qb.exp(x * x[1]) * qb.sum(x))
    return [
        pytest.param(qb.value_and_grad(_mlp_pinn_loss), (params, qb.linspace(0.0, 1.0, 64)),
                     id="mlp pinn value_and_grad"),
        pytest.param(qb.hessian(hess_f), (qb.array([0.3, -0.7, 1.1]),), id="hessian"),
        pytest.param(qb.jacobian(lambda x: qb.tanh(x[:, None] * x[None, :]) @ x),
                     (qb.array(rng.normal(size=6)),), id="jacobian"),
    ]


@pytest.mark.parametrize("fn, args", _big_programs())
def test_whole_programs_match_the_interpreter(fn, args):
    staged = qb.jit(fn)
    graph = staged.lower(*args).graph
    values = [leaf.numpy() for leaf in qb.tree.leaves(args)]
    expected = evaluate(graph, values)
    executable = compile_graph(graph, {})
    first = executable(*values)
    again = executable(*values)  # the second call reuses the scratch buffers of the first
    reloaded = load_cached(graph)(*values)
    for a, e in zip(first + again + reloaded, expected * 3):
        np.testing.assert_allclose(a, e, rtol=1e-10, atol=1e-12)


def test_concurrent_calls_do_not_share_scratch():
    """The entry runs without the GIL; each concurrent call takes its own scratch set (with one
    shared set, this test sees hundreds of wrong results)."""
    from concurrent.futures import ThreadPoolExecutor

    fn, (params, _) = _big_programs()[0].values
    args = (params, qb.linspace(0.0, 1.0, 2048))  # long enough for calls to overlap
    graph = qb.jit(fn).lower(*args).graph
    rng = np.random.default_rng(11)
    inputs = [[leaf.numpy() * rng.uniform(0.5, 1.5) for leaf in qb.tree.leaves(args)]
              for _ in range(8)]
    expected = [evaluate(graph, values) for values in inputs]
    executable = compile_graph(graph, {})
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda values: executable.run(*values), inputs * 16))
    for got, want in zip(results, expected * 16):
        for a, e in zip(got, want):
            np.testing.assert_allclose(a, e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(FLOAT_ELEMENTWISE))
def test_a_float32_value_is_the_same_stored_and_used_in_place(name, on):
    """A value that one loop stores and also uses in place (here in a max, whose comparisons
    read the stored copy back) must be one float32: a helper that computed in float64 left the
    in-place copy unrounded, no element equalled the max, and grad(max(sigmoid(x))) of a
    float32 x was NaN on the CPU."""
    op = FLOAT_ELEMENTWISE[name]
    x = np.array([0.3, 0.71, 0.45, 0.2], np.float32)
    y = np.array([1.3, 0.4, 2.1, 0.9], np.float32)

    def maxima(x, y):
        v = op(x, y) * 1.7
        return qb.sum(qb.where(qb.equal(v, qb.max(v)), 1.0, 0.0).astype(qb.float32))

    assert float(on(maxima)(x, y)) >= 1
    grad = on(qb.grad(lambda x, y: qb.max(op(x, y) * 1.7)))(x, y)
    assert grad.dtype is qb.float32 and np.isfinite(np.asarray(grad)).all()
