"""Every back end against the reference interpreter (DESIGN "Testing that means something").

For every primitive case of ``test_rules`` (and the primitives without a derivative), one graph
holds the function and its gradient; the Numba CPU executable must give what the NumPy
interpreter gives, in float64 and float32.
"""

import numpy as np
import pytest

import quabla as qb
from lowering.interpret import evaluate
from lowering.numba_cpu import compile_graph
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
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        if a.dtype == np.bool_:
            np.testing.assert_array_equal(a, e)
        else:
            np.testing.assert_allclose(a, e, **TOL[dtype])


def test_large_products_match_the_interpreter():
    """Above BLAS_THRESHOLD products go to BLAS when SciPy is installed, else to the loop nest."""
    rng = np.random.default_rng(3)
    a, b = qb.array(rng.uniform(-1, 1, (128, 64))), qb.array(rng.uniform(-1, 1, (64, 64)))
    graph = qb.jit(lambda a, b: qb.tanh(a @ b) @ b.T).lower(a, b).graph
    values = [a.numpy(), b.numpy()]
    (expected,) = evaluate(graph, values)
    (actual,) = compile_graph(graph, {})(*values)
    np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=1e-12)
