"""Deep, wide and huge programs compile (issue 12, items 1, 8 and part of 10).

- Deep chains, wide sums and long unrolled loops: the code generator splices single-use
  expressions into their reader, bounded in nesting depth and line length, so Python parses the
  generated source (it refuses about 200 nested parentheses).
- Huge extents: scheduling (tile selection) costs nothing proportional to an extent.
- Huge integers in params (exponents, slice steps): compiled code agrees with eager mode.

Values are checked against the reference interpreter (``quabla.core.interpret``), NumPy or finite
differences; compiled programs are shared by module-level fixtures.
"""

import functools
import re

import numpy as np
import pytest

import quabla as qb
from quabla.core.rules.elementwise import power_by_squaring
from quabla.core.interpret import evaluate
from lowering.numba_cpu import compile_graph, module_source
from lowering.loopnest.schedule import TILE_BYTES, MIN_TILE_ROWS, _tile_rows

TOL = dict(rtol=1e-10, atol=1e-12)


def _nesting(source):
    """The deepest nesting of brackets on any line of ``source``."""
    deepest = depth = 0
    for ch in source:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


def _compiled_against_interpreter(fn, *args):
    """``fn`` staged for ``args``: the compiled result and the interpreter's, and the source."""
    graph = qb.jit(fn).lower(*args).graph
    values = [leaf.numpy() for leaf in qb.tree.leaves(args)]
    expected = evaluate(graph, values)
    actual = compile_graph(graph, {}).run(*values)
    source = "\n".join(module_source(graph)[0])
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, **TOL)
    return actual, source


def _check_source_bounds(source):
    assert _nesting(source) <= 80
    assert max(len(line) for line in source.splitlines()) <= 10_000


# -- deep chains -----------------------------------------------------------------------------

def _step(x, i):
    """One of four ops, contracting overall (rounding differences between back ends shrink)."""
    return [qb.sin, qb.tanh, lambda y: y * 0.5, lambda y: y + 0.25][i % 4](x)


def _chain(x, n=1000):
    for i in range(n):
        x = _step(x, i)
    return x


def _chain_numpy(x, n=1000):
    for i in range(n):
        x = [np.sin, np.tanh, lambda y: y * 0.5, lambda y: y + 0.25][i % 4](x)
    return x


def test_chain_of_1000_ops_compiles():
    x = qb.array([-1.5, 0.3, 2.0])
    (out,), source = _compiled_against_interpreter(_chain, x)
    np.testing.assert_allclose(out, _chain_numpy(x.numpy()), **TOL)
    _check_source_bounds(source)


def test_chain_of_200_sines_under_jit():
    """The issue's reproducer, through the public path."""
    def f(x):
        for _ in range(200):
            x = qb.sin(x)
        return x

    x = np.array([1.0, 2.0, -0.5])
    ref = x.copy()
    for _ in range(200):
        ref = np.sin(ref)
    np.testing.assert_allclose(np.asarray(qb.jit(f)(qb.array(x))), ref, **TOL)


def test_gradient_of_300_chained_tanh():
    def f(x):
        for _ in range(300):
            x = qb.tanh(x)
        return qb.sum(x)

    x = np.array([0.9, -0.2, 0.05])
    (dx,), source = _compiled_against_interpreter(qb.grad(f), qb.array(x))
    y, d = x.copy(), np.ones_like(x)
    for _ in range(300):
        y = np.tanh(y)
        d *= 1.0 - y * y
    np.testing.assert_allclose(dx, d, **TOL)
    _check_source_bounds(source)


# -- wide sums -------------------------------------------------------------------------------

WIDE = 1000


def test_python_sum_of_a_list_of_arrays():
    """Each input array costs Numba compile time superlinearly (a view per array: 1000 take
    ~20 s), so 400 are compiled and run; the source for 1000 is checked to parse."""
    xs = [qb.array([0.001 * k, -0.5 * k]) for k in range(WIDE)]
    source = qb.jit(lambda xs: sum(xs)).lower(xs).source
    compile(source, "<sum of 1000 arrays>", "exec")
    _check_source_bounds(source)
    (out,), source = _compiled_against_interpreter(lambda xs: sum(xs), xs[:400])
    np.testing.assert_allclose(out, sum(x.numpy() for x in xs[:400]), **TOL)


def test_gradient_of_a_wide_sum_of_terms():
    """1000 terms of one input read 1000 times, summed left to right, under grad: the forward
    sum and the fan-out of the cotangent are both 1000 wide."""
    def f(x):
        return qb.sum(functools.reduce(qb.add, [qb.sin(x * (k / WIDE)) for k in range(WIDE)]))

    x = np.array([0.7, -1.1])
    (dx,), source = _compiled_against_interpreter(qb.grad(f), qb.array(x))
    ks = np.arange(WIDE)[:, None] / WIDE
    np.testing.assert_allclose(dx, np.sum(ks * np.cos(ks * x), axis=0), **TOL)
    _check_source_bounds(source)


# -- an unrolled explicit integrator under grad -----------------------------------------------

STEPS, DT = 500, 0.01


def _oscillators(c, k, x0):
    """Four damped oscillators, 500 explicit Euler steps; the final squared amplitude. (A
    scalar damping compiles too, but its gradient holds 500 sums over the oscillators, and
    Numba's SSA passes take time quadratic in such accumulators: ~40 s.)"""
    x, v = x0, x0 * 0.0
    for _ in range(STEPS):
        x, v = x + DT * v, v + DT * (-k * x - c * v)
    return qb.sum(x * x)


def _oscillators_numpy(c, k, x0):
    x, v = x0.copy(), np.zeros_like(x0)
    for _ in range(STEPS):
        x, v = x + DT * v, v + DT * (-k * x - c * v)
    return np.sum(x * x)


def test_500_step_integrator_under_grad():
    c, k, x0 = np.array([0.3, 0.1, 0.5, 0.2]), np.array([1.0, 4.0, 9.0, 0.5]), \
        np.array([1.0, -0.5, 0.25, 2.0])
    (value, dc, dk), source = _compiled_against_interpreter(
        qb.value_and_grad(_oscillators, argnums=(0, 1)), qb.array(c), qb.array(k), qb.array(x0))
    np.testing.assert_allclose(value, _oscillators_numpy(c, k, x0), **TOL)
    eps = 1e-6
    fd = lambda f: [(f(eps * e) - f(-eps * e)) / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(dc, fd(lambda d: _oscillators_numpy(c + d, k, x0)), rtol=1e-6)
    np.testing.assert_allclose(dk, fd(lambda d: _oscillators_numpy(c, k + d, x0)), rtol=1e-6)
    _check_source_bounds(source)


# -- huge extents: scheduling is bounded ------------------------------------------------------

def _tile_rows_reference(extent, row_bytes):
    fits = [t for t in range(MIN_TILE_ROWS, min(extent // 2, TILE_BYTES // row_bytes) + 1)
            if extent % t == 0]
    return max(fits, default=None)


@pytest.mark.parametrize("extent", [10**12, 2 * 10**8, 1_000_000_007, 2 * 1_000_000_007,
                                    2**40, 3**25, 64, 48, 31, 16, 8])
@pytest.mark.parametrize("row_bytes", [1, 8, 24, 2048, 4096])
def test_tile_rows_of_any_extent(extent, row_bytes):
    assert _tile_rows(extent, row_bytes) == _tile_rows_reference(extent, row_bytes)


@pytest.mark.parametrize("extent", [10**12, 2 * 10**8 + 1, 999_999_937])
def test_huge_extents_lower(extent):
    """A fused broadcast sum and a tiled row-wise product over a huge batch axis: code
    generation does not loop over the rows."""
    def f(x, w):
        rows = qb.broadcast_to(x, (extent, 4))
        return qb.sum(qb.broadcast_to(qb.sum(x), (extent,))), qb.sum(qb.tanh(rows @ w), axis=0)

    source = qb.jit(f).lower(qb.ones(4), qb.ones((4, 4))).source
    # a loop over the rows, or a tile loop over all of them or a thread's block of them
    # (lowering/numba_cpu/threads.py)
    assert f"< {extent}:" in source or "< ctl[3]:" in source


def test_huge_broadcast_sum_runs():
    n = 2 * 10**8
    out = qb.jit(lambda x: qb.sum(qb.broadcast_to(x, (n,))))(qb.ones(1))
    assert float(np.asarray(out)) == n


# -- huge integers in params -------------------------------------------------------------------

SPECIAL = [-2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, np.nan, np.inf, -np.inf,
           1 - 2**-53, 1 + 2**-52, -(1 - 2**-53), 5e-324, -1.0000001]
EXPONENTS = [10**20, 10**20 + 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 + 3, 3**60, 10**40 + 1]


@pytest.mark.parametrize("dtype", [qb.float64, qb.float32])
def test_huge_integer_powers_agree_with_eager(dtype):
    x = qb.array(np.array(SPECIAL), dtype=dtype)
    f = lambda x: [x ** n for n in EXPONENTS]
    compiled = qb.jit(f)(x)
    for n, eager, out in zip(EXPONENTS, f(x), compiled):
        # repeated squaring with the exponent as it is, in the dtype of x
        with np.errstate(all="ignore"):
            exact = power_by_squaring(np.ones_like(x.numpy()), x.numpy(), n)
        for value in (eager, out):
            np.testing.assert_array_equal(np.asarray(value), exact, err_msg=f"n={n}")
            np.testing.assert_array_equal(np.signbit(np.asarray(value)), np.signbit(exact))


def test_huge_integer_power_gradient_agrees_with_eager_value_rule():
    """d/dx x**n = n x**(n-1): at 1 and -1 finite (n and -n for odd n), elsewhere 0 or inf."""
    n = 10**20 + 1
    x = qb.array([1.0, -1.0, 0.5])
    (dx,), _ = _compiled_against_interpreter(qb.grad(lambda x: qb.sum(x ** n)), x)
    np.testing.assert_allclose(dx, [float(n), float(n), 0.0], rtol=1e-12)


def test_huge_slice_steps_agree_with_eager():
    m = qb.array(np.arange(12.0).reshape(3, 4))
    f = lambda m: (m[::10**30], m[::-(10**30)], m[1::10**20, ::-(10**19)], m[:, 2::2**64])
    for eager, out in zip(f(m), qb.jit(f)(m)):
        assert out.shape == eager.shape
        np.testing.assert_array_equal(np.asarray(out), np.asarray(eager))


def test_generated_source_has_only_int64_literals():
    n = 10**20
    f = lambda x: (x ** n, x[::10**30])
    source = qb.jit(f).lower(qb.ones(3)).source
    assert all(abs(int(m)) < 2**63 for m in re.findall(r"\b\d+\b", source))


def test_integers_beyond_int64_are_refused_by_code_generation():
    """Whatever reaches the code generator with an integer compiled code cannot hold gets a
    clear ValueError, not Numba's TypingError (here a primitive bound directly)."""
    from quabla.core.tracing import bind

    lowered = qb.jit(lambda x: bind("integer_pow", x, n=2**64)).lower(qb.ones(3))
    with pytest.raises(ValueError, match="int64"):
        lowered.source
