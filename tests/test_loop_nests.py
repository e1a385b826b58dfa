"""The loop-nest optimisations of the Numba CPU back end against the reference interpreter:

- the vectorisable tanh of ``lowering/numba_cpu/runtime.py`` (accuracy, special values);
- rematerialisation (``schedule._rematerialize``): cheap values that later loop nests compute
  again instead of loading a stored copy;
- tiles of the batch axis (``schedule._tile``): row-wise statements run block by block of rows,
  with sums over the rows accumulated, values needed after the loop exported, and programs
  that cannot run that way left alone;
- matrix products with transposed operands (views or copies for BLAS), scratch slot layout.

No timing here: what is checked is that the optimised code computes what the interpreter does.
"""

import re

import numpy as np
import pytest

import quabla as qb
from helpers import mlp_net
from lowering.loopnest.buffers import ScratchPlan
from quabla.core.interpret import evaluate
from lowering.numba_cpu import compile_graph
from lowering.numba_cpu.codegen import generate
from lowering.loopnest.schedule import Group, TileBegin, schedule

TOL = {qb.float64: dict(rtol=1e-10, atol=1e-12), qb.float32: dict(rtol=2e-5, atol=2e-6)}


def _check(fn, *args, dtype=qb.float64):
    """``fn`` staged for ``args``: the Numba executable (called twice: the second call reuses
    the scratch of the first) against the interpreter. Returns the graph."""
    args = tuple(qb.tree.map(lambda a: qb.array(np.asarray(a), dtype=dtype), a) for a in args)
    graph = qb.jit(fn).lower(*args).graph
    values = [leaf.numpy() for leaf in qb.tree.leaves(args)]
    expected = evaluate(graph, values)
    executable = compile_graph(graph, {})
    first = executable(*values)
    again = executable(*values)
    for a, b, e in zip(first, again, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_allclose(a, e, **TOL[dtype])
        np.testing.assert_array_equal(a, b)
    return graph


# -- tanh ------------------------------------------------------------------------------------

def _ulps(actual, x, dtype):
    exact = np.tanh(x.astype(np.longdouble))
    spacing = np.spacing(np.abs(exact).astype(dtype)).astype(np.longdouble)
    spacing = np.maximum(spacing, np.finfo(dtype).smallest_subnormal)
    return float(np.max(np.abs(actual.astype(np.longdouble) - exact) / spacing))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("low, high", [(-1e-9, 1e-9), (-0.7, 0.7), (0.6, 0.65), (-4.0, 4.0),
                                       (-30.0, 30.0), (-800.0, 800.0)])
def test_tanh_is_within_two_ulp(dtype, low, high):
    x = np.random.default_rng(11).uniform(low, high, 200_000).astype(dtype)
    out = np.asarray(qb.jit(qb.tanh)(qb.array(x)))
    assert out.dtype == dtype
    assert _ulps(out, x, dtype) <= 2.0
    if np.finfo(np.longdouble).eps < np.finfo(np.float64).eps:  # a real extended type
        assert _ulps(out, x, dtype) <= (1.5 if dtype == np.float64 else 0.51)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tanh_special_values(dtype):
    tiny = np.finfo(dtype).smallest_subnormal
    big = np.finfo(dtype).max
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, tiny, -tiny, 1e-30, -1e-30,
                  0.625, -0.625, np.nextafter(0.625, 0), 22.0, -22.0, 23.0, 709.0, 711.0,
                  big, -big], dtype=dtype)
    out = np.asarray(qb.jit(qb.tanh)(qb.array(x)))
    ref = np.tanh(x)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(np.signbit(out[~np.isnan(ref)]), np.signbit(ref[~np.isnan(ref)]))
    np.testing.assert_allclose(out, ref, rtol=4 * np.finfo(dtype).eps, atol=0)


def test_tanh_derivatives_in_loops_match_the_interpreter():
    x = np.random.default_rng(1).uniform(-3, 3, (40, 7))
    _check(lambda x: qb.grad(lambda x: qb.sum(qb.tanh(x) ** 3))(x), x)


# -- exp, log, log1p, softplus: vectorisable bodies ------------------------------------------

def _long_ulps(actual, exact, dtype):
    finite = np.isfinite(exact) & (np.abs(exact) < np.finfo(dtype).max)
    spacing = np.spacing(np.abs(exact[finite]).astype(dtype)).astype(np.longdouble)
    spacing = np.maximum(spacing, np.finfo(dtype).smallest_subnormal)
    return float(np.max(np.abs(actual[finite].astype(np.longdouble) - exact[finite]) / spacing))


_SOFTPLUS = lambda x: np.logaddexp(x, np.longdouble(0))  # noqa: E731
# (function, its long-double reference, ranges, ulps in float64 with an extended reference)
TRANSCENDENTAL = [
    (qb.exp, np.exp, [(-1e-9, 1e-9), (-0.4, 0.4), (-30.0, 30.0), (-745.2, -700.0),
                      (-700.0, 709.7)], 1.0),
    (qb.log, np.log, [(1e-300, 1e-290), (0.5, 2.0), (0.9, 1.1), (1e-5, 1e5), (1.0, 1e300)], 1.0),
    (qb.log1p, np.log1p, [(-0.999, -0.5), (-0.5, 0.5), (-1e-10, 1e-10), (0.5, 1e6)], 2.1),
    (qb.nn.softplus, _SOFTPLUS, [(-50.0, 50.0), (-1.0, 1.0), (-800.0, -700.0), (30.0, 40.0)],
     2.6),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fn, exact, ranges, ulps", TRANSCENDENTAL,
                         ids=[f[0].__name__ for f in TRANSCENDENTAL])
def test_vectorisable_transcendentals_in_loops_and_libm_for_one_element(
        fn, exact, ranges, ulps, dtype):
    """A loop of them vectorises (``_exp``, ``_log``, ``_log1p``, ``_softplus``: no call), also
    one that sums them (its adds reordered, partial sums in vector lanes); one element computed
    on its own calls libm (the ``serial`` template, ``math.exp``, ``_libm_log``...): all within their
    bound, subnormals included."""
    rng = np.random.default_rng(12)
    mapped = qb.jit(lambda x: fn(x))
    summed = qb.jit(lambda x: (qb.sum(fn(x)), fn(x)))
    one = qb.jit(lambda x: fn(x))
    for low, high in ranges:
        if dtype == np.float32 and (low < -100.0 or high > 1e30 or 0 < low < 1e-37):
            continue  # beyond float32's range
        x = (rng.uniform(low, high, 50_000) if high - low < 1e6 or low <= 0
             else np.exp(rng.uniform(np.log(low), np.log(high), 50_000))).astype(dtype)
        for f in (mapped, summed):
            assert "_libm_" not in f.lower(qb.array(x)).source
            assert "math.exp(" not in f.lower(qb.array(x)).source
        scalar = one.lower(qb.array(x[0])).source
        assert "math.exp(" in scalar or "_libm_" in scalar
        with np.errstate(all="ignore"):
            reference = exact(x.astype(np.longdouble))
        total, values = summed(qb.array(x))
        outs = [mapped(qb.array(x)), values,
                np.array([one(qb.array(v)) for v in x[:300]]).astype(dtype)]
        np.testing.assert_array_equal(np.asarray(values), np.asarray(outs[0]))
        with np.errstate(all="ignore"):  # its adds reordered: partial sums in vector lanes
            want = np.sum(np.asarray(values).astype(np.longdouble))
            if np.isfinite(want):
                np.testing.assert_allclose(float(total), float(want),
                                           rtol=1e-4 if dtype == np.float32 else 1e-11)
        for out, ref in zip(outs, (reference, reference, reference[:300])):
            out = np.asarray(out)
            assert out.dtype == dtype
            assert _long_ulps(out, ref, dtype) <= ulps + 0.6
            if np.finfo(np.longdouble).eps < np.finfo(np.float64).eps:  # a real extended type
                assert _long_ulps(out, ref, dtype) <= (
                    ulps if dtype == np.float64 else 1.5)  # libm's float32 ones (one element)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_transcendental_special_values(dtype):
    big = np.finfo(dtype).max
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 709.782712893384, 709.7827128933841,
                  710.0, 88.72, 88.73, -745.1332191019411, -745.1332191019412, -746.0, -103.9,
                  -104.0, 1e-300, -708.4, -708.5, -740.0, big, -big, 1.0, -1.0, -0.5, 5e-324,
                  2.2250738585072014e-308, 37.0, -37.0], dtype=dtype)
    wide = x.astype(np.float64)  # references rounded once (float32's expf flushes earlier)
    for fn, reference in ((qb.exp, np.exp), (qb.log, np.log), (qb.log1p, np.log1p),
                          (qb.nn.softplus, lambda v: np.logaddexp(v, 0.0)),
                          (qb.nn.sigmoid, lambda v: 1 / (1 + np.exp(-v)))):
        with np.errstate(all="ignore"):
            ref = reference(wide).astype(dtype)
        out = np.asarray(qb.jit(fn)(qb.array(x)))
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref), err_msg=fn.__name__)
        number = ~np.isnan(ref)
        np.testing.assert_array_equal(np.signbit(out[number]), np.signbit(ref[number]),
                                      err_msg=fn.__name__)
        np.testing.assert_allclose(out, ref, rtol=3 * np.finfo(dtype).eps, atol=0,
                                   err_msg=fn.__name__)


# -- rematerialisation -----------------------------------------------------------------------

def _program(w, x):
    """Cheap values (mul, add, neg, select, abs, max, integer_pow) computed before one product
    and read after it and after a second one."""
    h = qb.tanh(x @ w)
    a = 1.0 - h * h
    b = qb.where(h > 0.1, a * 2.0, -a)
    c = qb.maximum(qb.abs(b), a) ** 2
    y = (a * b) @ w
    z = (c + y) @ w.T
    return qb.sum(z * a + b * c - y, axis=1), qb.grad(lambda w: qb.sum(qb.tanh((x @ w) * 0.5)))(w)


def test_rematerialised_values_match_the_interpreter():
    rng = np.random.default_rng(2)
    w, x = rng.uniform(-1, 1, (12, 12)), rng.uniform(-1, 1, (24, 12))
    graph = _check(_program, w, x)
    statements = schedule(graph)
    assert any(isinstance(s, Group) and s.clones for s in statements)  # something was recomputed
    for s in statements:
        if isinstance(s, Group):
            assert not (s.clones & s.materialized)
            # clones come first and in program order: they read only stored values and each other
            k = len(s.clones)
            assert s.members[:k] == sorted(s.clones)


def test_rematerialised_values_in_float32():
    rng = np.random.default_rng(3)
    _check(_program, rng.uniform(-1, 1, (12, 12)), rng.uniform(-1, 1, (24, 12)),
           dtype=qb.float32)


@pytest.mark.parametrize("n", [7, 15, 16, 1000])
def test_long_sums_reorder_their_adds_and_short_ones_sum_in_order(n):
    """A sum along an innermost axis of ``REORDERED_SUMS`` elements or more may have its adds
    reordered (``_sum_add``: LLVM keeps partial sums in vector lanes); a shorter one is summed
    in order, as NumPy sums fewer than eight."""
    from lowering.numba_cpu.groups import REORDERED_SUMS

    x = np.random.default_rng(n).uniform(-1.0, 1.0, (3, n))
    f = qb.jit(lambda x: (qb.sum(x * x, axis=1), qb.sum(x * x)))
    assert ("_sum_add(" in f.lower(qb.array(x)).source) == (n >= REORDERED_SUMS)
    rows, total = (np.asarray(v) for v in f(qb.array(x)))
    in_order = np.cumsum(x * x, axis=1)[:, -1]
    if n < REORDERED_SUMS:
        np.testing.assert_array_equal(rows, in_order)
        np.testing.assert_array_equal(total, np.cumsum(x * x)[-1])
    np.testing.assert_allclose(rows, in_order, rtol=1e-13)
    np.testing.assert_allclose(total, np.sum(x * x), rtol=1e-13)


def _costly_sums(x, w):
    """Row sums of transcendental values (a log-sum-exp, a Poisson loss), a column sum, and
    a cheap row sum: only the sums along the innermost axis of costly members move."""
    z = x @ w
    lse = qb.log(qb.sum(qb.exp(z - 1.0), axis=1))
    loss = qb.sum(qb.logaddexp(z, 0.0) - x[:, :6] * qb.log1p(z * z))
    return lse, loss, qb.sum(qb.tanh(z), axis=0), qb.sum(x * x, axis=1)


@pytest.mark.parametrize("dtype", [qb.float64, qb.float32])
def test_short_sums_along_the_innermost_axis_of_costly_members_get_a_loop_of_their_own(dtype):
    """Rows of 6 (shorter than ``SUMS_APART``): the log-sum-exp's and the loss's sums move
    after the group computing exp, logaddexp and log1p; the cheap row sum stays."""
    from lowering.numba_cpu.groups import SUMS_APART

    rng = np.random.default_rng(8)
    graph = _check(_costly_sums, rng.uniform(-1, 1, (40, 9)), rng.uniform(-1, 1, (9, 6)),
                   dtype=dtype)
    nodes = graph.nodes
    together = schedule(graph, {})
    apart = schedule(graph, {}, sums_apart=SUMS_APART)
    assert list(map(repr, schedule(graph, {}, sums_apart=6))) == list(map(repr, together))
    for statements in (together, apart):
        assert sorted(m for s in statements if isinstance(s, Group) for m in s.members) == \
            sorted(m for s in together if isinstance(s, Group) for m in s.members)

    def innermost_sums(group):
        last = len(group.shape) - 1
        return [m for m in group.members
                if nodes[m].op.startswith("reduce") and last in nodes[m].kw["axes"]]

    costly = {"exp", "log", "log1p", "softplus", "tanh", "div"}
    moved = 0
    for s in apart:
        if isinstance(s, Group) and innermost_sums(s):
            ops = {nodes[m].op for m in s.members}
            assert not ops & costly  # the costly members vectorise in the loop before
            if len(s.members) == len(innermost_sums(s)):
                moved += len(s.members)
    assert moved == 2  # the log-sum-exp's and the loss's sums; the cheap row sum stays
    assert any(isinstance(s, Group) and {"mul", "reduce_sum"} <= {nodes[m].op for m in s.members}
               for s in apart)


# -- tiles of the batch axis ----------------------------------------------------------------

def _tiles(graph):
    return [s for s in schedule(graph) if isinstance(s, TileBegin)]


def mlp(p, x):
    """An MLP PINN loss with a row-wise aux (test_threads runs it threaded too)."""
    u_xx = qb.vmap(qb.grad(qb.grad(lambda t: mlp_net(p, t))))
    r = u_xx(x) + qb.sin(3.0 * x)
    return qb.mean(r ** 2), r  # r: a row-wise value the loop must hand out whole


def mlp_params(width, rng):
    """Random parameters of ``mlp`` (float64 ndarrays), for this file and test_threads."""
    return {"W1": rng.normal(size=(1, width)), "b1": rng.normal(size=width),
            "W2": rng.normal(size=(width, width)) / 4, "b2": rng.normal(size=width),
            "W3": rng.normal(size=(width, 1)) / 4, "b3": rng.normal(size=1)}


@pytest.mark.parametrize("dtype", [qb.float64, qb.float32])
def test_tiled_mlp_pinn_matches_the_interpreter(dtype):
    rng = np.random.default_rng(4)
    params, x = mlp_params(16, rng), np.linspace(0.0, 1.0, 384)
    fn = qb.value_and_grad(mlp, has_aux=True)
    graph = _check(fn, params, x, dtype=dtype)
    (begin,) = _tiles(graph)
    assert begin.extent == 384 and 384 % begin.tile == 0 and begin.tile < 384
    assert begin.accumulated and begin.exports


def tiled_rows(x, w, v):
    """Row-wise work with everything the loop handles: products by matrices computed before it
    (one of them transposed), products summing over the rows, reductions over the rows and
    within rows, index maps of inputs read at the global row (a reversal and a broadcast),
    exported values read by statements after the loop (a reversal over the rows, a product
    of the whole thing) and an output that is a whole row-wise array."""
    h = qb.tanh(x @ w + v[None, :])
    g = (h * x[::-1]) @ w.T
    s = qb.sum(g * h, axis=1)                      # within rows: a tile of it per block
    total = qb.sum(g, axis=0) + qb.max(h, axis=0)  # over the rows: accumulated
    gram = h.T @ g                                 # sums over the rows: accumulated
    after = (g[::-1] @ w)[:5]                      # reads the whole of g after the loop
    return s, total, gram, after, qb.sum(s * s)


@pytest.mark.parametrize("n", [256, 320])
def test_tiled_row_programs_match_the_interpreter(n):
    rng = np.random.default_rng(5)
    x, w, v = rng.uniform(-1, 1, (n, 32)), rng.uniform(-1, 1, (32, 32)) / 4, rng.uniform(-1, 1, 32)
    graph = _check(tiled_rows, x, w, v)
    (begin,) = _tiles(graph)
    assert begin.extent == n and n % begin.tile == 0


def test_tiles_with_full_inputs_read_by_global_rows():
    """Inputs indexed through transposes, reversals and slices inside the loop."""
    rng = np.random.default_rng(6)
    a, b, w = rng.uniform(-1, 1, (32, 256)), rng.uniform(-1, 1, (260, 32)), rng.uniform(-1, 1, (32, 32))

    def f(a, b, w):
        rows = a.T * b[2:258][::-1] + b[:256]   # (256, 32) from inputs only
        return qb.sum((qb.tanh(rows) @ w) * rows, axis=0), qb.tanh(rows) @ w

    graph = _check(f, a, b, w)
    assert _tiles(graph)


def test_no_tiles_when_rows_need_a_sum_over_all_rows():
    """Normalising by the batch mean needs the whole sum before any row: no tile loop."""
    rng = np.random.default_rng(7)
    x, w = rng.uniform(-1, 1, (256, 32)), rng.uniform(-1, 1, (32, 32))

    def f(x, w):
        h = qb.tanh(x @ w)
        h = h - qb.mean(h, axis=0)
        return qb.sum((h @ w) ** 2)

    graph = _check(f, x, w)
    assert not _tiles(graph)


@pytest.mark.parametrize("width, tiled", [(32, True), (128, False)])
def test_no_tiles_for_products_by_large_matrices(width, tiled):
    """Every tile would stream a large matrix again: such products run whole."""
    x, w = qb.zeros((512, width)), qb.zeros((width, width))
    graph = qb.jit(lambda x, w: qb.sum(qb.tanh(x @ w) @ w, axis=0)).lower(x, w).graph
    assert bool(_tiles(graph)) == tiled


@pytest.mark.parametrize("n", [31, 37, 64])
def test_short_or_prime_batches(n):
    rng = np.random.default_rng(8)
    x, w = rng.uniform(-1, 1, (n, 32)), rng.uniform(-1, 1, (32, 32))
    graph = _check(lambda x, w: (qb.tanh(x @ w) @ w, qb.sum(qb.tanh(x @ w), axis=0)), x, w)
    if n in (31, 37):
        assert not _tiles(graph)  # no divisor that makes tiles of 16 rows or more


def test_batched_products_inside_a_batch():
    """A product batched over the rows is not row-wise in the loop's sense: it runs after."""
    rng = np.random.default_rng(9)
    a, b, w = rng.uniform(-1, 1, (256, 8, 8)), rng.uniform(-1, 1, (256, 8)), rng.uniform(-1, 1, (8, 8))

    def f(a, b, w):
        h = qb.tanh(b @ w)
        return qb.vmap(lambda m, v: m @ v)(a, h), qb.sum(h, axis=0)

    _check(f, a, b, w)


# -- products, scratch ----------------------------------------------------------------------

@pytest.mark.parametrize("form", ["ab", "aTb", "abT", "aTbT", "3d"])
def test_products_with_transposed_operands(form):
    """Large enough for BLAS when SciPy is there: transposed operands are views or copies."""
    rng = np.random.default_rng(10)
    a, b = rng.uniform(-1, 1, (96, 64)), rng.uniform(-1, 1, (64, 96))
    fns = {
        "ab": lambda a, b: qb.tanh(a @ b) @ a,
        "aTb": lambda a, b: qb.tanh(a.T @ b.T) @ a.T,
        "abT": lambda a, b: qb.tanh(a @ a.T) @ b.T,
        "aTbT": lambda a, b: qb.tanh(b.T @ a.T),
        "3d": lambda a, b: qb.einsum("ijk,kl->ijl", qb.reshape(a, (96, 2, 32)),
                                     qb.reshape(b[:32, :48], (32, 48))),
    }
    _check(fns[form], a, b)


def test_generated_code_has_no_reshape_of_scratch():
    """Scratch arrays seen with another shape are views made once in the prologue, not views
    made where they are used (each costs Numba compile time), and nothing calls reshape."""
    import re

    rng = np.random.default_rng(12)
    params, x = mlp_params(8, rng), np.linspace(0.0, 1.0, 256)
    args = (qb.tree.map(qb.array, params), qb.array(x))
    graph = qb.jit(qb.value_and_grad(mlp, has_aux=True)).lower(*args).graph
    bodies, constants, _, _ = generate(graph)
    body = "".join(text for text, _ in bodies)
    first_buffer = len(graph.inputs) + len(graph.outputs) + len(constants)
    scratch = {name for name, k in re.findall(r"^    (\w+) = _arg\(args, (\d+),", body, re.M)
               if int(k) >= first_buffer}
    assert scratch
    assert ".reshape(" not in body
    for name in scratch:
        assert f"_data({name})" not in body, name


def test_large_scratch_slots_start_at_different_offsets_in_a_page():
    plan = ScratchPlan()
    starts = [plan.take(k, "float64", 32768, expiry=10) for k in range(16)]
    assert len({s * 8 % 4096 for s in starts}) == 16
    assert all(b - a >= 32768 for a, b in zip(starts, starts[1:]))
    plan.release(10)
    again = [plan.take(100 + k, "float64", 32768, expiry=20) for k in range(16)]
    assert sorted(again) == sorted(starts)  # freed slots are handed out again
    small = [plan.take(200 + k, "float32", 100, expiry=30) for k in range(3)]
    assert all(s % 8 == 0 for s in small)


# -- every kind of primitive inside a tile loop ---------------------------------------------

TILED_CASES = ["abs", "broadcast_in_dim", "cast", "concatenate", "integer_pow", "max", "pad",
               "pow", "reduce_max", "reduce_sum", "reshape", "rev", "select", "slice",
               "transpose"]


def tiled_case_params():
    """The rule cases of TILED_CASES as pytest params (test_threads runs them threaded too)."""
    from test_rules import CASES

    return [pytest.param(case.fn, case.args, id=f"{name}-{k}")
            for name in TILED_CASES for k, case in enumerate(CASES[name])]


def batched_program(fn, make_args):
    """``vmap`` of a case over 64 rows, then a product by a matrix and sums over the rows, with
    the gradient: ``(program, args)``."""
    rows = 64
    rng = np.random.default_rng(13)
    samples = [make_args(rng) for _ in range(rows)]
    args = [np.stack([s[k] for s in samples]) for k in range(len(samples[0]))]
    width = int(np.prod(np.shape(fn(*[qb.array(a) for a in samples[0]]))))
    w = rng.uniform(-1, 1, (width, 8))

    def program(w, *args):
        out = qb.vmap(fn)(*args)
        flat = qb.reshape(out, (rows, -1))
        h = qb.tanh(flat @ w)
        grads = qb.grad(lambda *a: qb.sum(qb.sin(qb.vmap(fn)(*a))),
                        argnums=tuple(range(len(args))))
        return out, qb.sum(h, axis=0), h.T @ flat, grads(*args)

    return program, (w, *args)


@pytest.mark.parametrize("fn, make_args", tiled_case_params())
def test_primitives_batched_through_a_tile_loop(fn, make_args):
    """Each case batched by ``batched_program``: the loop nests of the batch run tile by tile
    (most of them)."""
    program, args = batched_program(fn, make_args)
    _check(program, *args)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("transposed", [False, True])
def test_small_matrix_vector_products_sum_each_row_in_order(dtype, transposed):
    # a small product times a vector runs its rows' sums side by side (k outside; 16 rows or
    # more stored by rows, the kernel's transposed 4 x 4 blocks): each row is still summed in
    # the order of k, so the bits are those of the row-by-row sum
    rng = np.random.default_rng(3)
    a = rng.normal(size=(30, 40) if transposed else (40, 30)).astype(dtype)
    v = rng.normal(size=30).astype(dtype)
    matrix = a.T if transposed else a
    expected = np.zeros(40, dtype)
    for k in range(30):
        expected = expected + matrix[:, k] * v[k]
    fn = qb.jit((lambda a, v: a.T @ v) if transposed else (lambda a, v: a @ v))
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(fn(a, v)), expected)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("spelling", ["row @ matrix", "matrix @ matrix", "matrix.T @ matrix",
                                      "matrix @ matrix.T"])
def test_small_products_with_rows_sum_along_them_in_order(dtype, spelling):
    """A small product whose right operand has rows (a first layer's weight gradient, ``x @
    delta`` of 1 x 24 x 20) sums each row of the result along b's row, k outside, each element
    from zero in the order of k: the bits of the element-by-element dots, and the loop runs
    along b's row (vectorised); with b transposed it stays element by element."""
    from lowering.numba_cpu import sources

    rng = np.random.default_rng(4)
    m = 1 if spelling.startswith("row") else 7
    a = rng.normal(size=(m, 24)).astype(dtype)
    b = rng.normal(size=(24, 20)).astype(dtype)
    expected = np.zeros((m, 20), dtype)
    for k in range(24):
        expected = expected + a[:, k:k + 1] * b[k]
    fn, args = {"row @ matrix": (lambda a, b: a[0] @ b, (a, b)),
                "matrix @ matrix": (lambda a, b: a @ b, (a, b)),
                "matrix.T @ matrix": (lambda at, b: at.T @ b, (a.T.copy(), b)),
                "matrix @ matrix.T": (lambda a, bt: a @ bt.T, (a, b.T.copy()))}[spelling]
    fn = qb.jit(fn)
    for _ in range(2):
        got = np.asarray(fn(*args))
        np.testing.assert_array_equal(got, expected[0] if m == 1 else expected)
    text = "".join(sources(fn.lower(*(qb.array(x) for x in args)).graph))
    along_rows = "while i2 < 20:" in text.split("while k < 24:")[-1]
    assert along_rows == (spelling != "matrix @ matrix.T")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_maxima_and_minima_along_rows_vectorise_whatever_the_order(dtype):
    """A row's maximum or minimum (a softmax's, a logsumexp's) is LLVM's ``maximum`` or
    ``minimum`` of each element into the row's local: NaN if any element is, +0.0 above
    -0.0, so no result depends on the order the elements come in, and LLVM vectorises the
    loop (it did not the select it was before: a Sinkhorn iteration's row maxima ran one
    element at a time). Elementwise ``maximum`` and ``minimum`` are the same functions."""
    import llvmlite.binding as llvm

    from lowering.numba_cpu import direct, machine, sources

    rng = np.random.default_rng(8)
    x = rng.normal(size=(40, 64)).astype(dtype)
    x[3, 17] = np.nan
    x[5, :] = -1.0
    x[5, 9], x[5, 40] = -0.0, 0.0
    x[6, :] = -1.0
    x[6, 9], x[6, 40] = 0.0, -0.0
    x[7, :] = 1.0
    x[7, 9], x[7, 40] = -0.0, 0.0
    fn = qb.jit(lambda x: (qb.max(x, axis=1), qb.min(x, axis=1), qb.maximum(x, x[::-1]),
                           qb.minimum(x, 0.0)))
    for _ in range(2):
        most, least, pairs, clipped = (np.asarray(a) for a in fn(x))
        want_most, want_least = np.max(x, axis=1), np.min(x, axis=1)
        np.testing.assert_array_equal(most, want_most)
        np.testing.assert_array_equal(least, want_least)
        assert np.isnan(most[3]) and np.isnan(least[3])
        assert not np.signbit(most[5]) and not np.signbit(most[6])
        assert np.signbit(least[7])
        np.testing.assert_array_equal(pairs, np.maximum(x, x[::-1]))
        np.testing.assert_array_equal(clipped, np.minimum(x, 0.0))
    source = [s for s in sources(fn.lower(qb.array(x)).graph) if "_max(" in s][0]
    module = llvm.parse_assembly(direct.translate(source, "rows"))
    module.triple, module.data_layout = machine.module_target()
    machine.optimise(module)
    assert re.search(r"call (fast )?<\d+ x (double|float)> @llvm\.maximum\.v", str(module))


# -- a sum beside a reversed read ------------------------------------------------------------

def test_a_sum_beside_a_reversed_read_and_a_store_compiles_quietly(capfd):
    """A Cox partial likelihood's gradient: a loop sums ``log`` of a reversed cumulative sum
    while storing another array, all in the one scratch. LLVM cannot tell the reversed read
    from the stores, so a loop marked to vectorise stayed scalar and LLVM wrote "loop not
    vectorized" to stderr on every cold compile; such a loop is left to LLVM's cost model."""
    rng = np.random.default_rng(31)
    event = qb.array((rng.uniform(size=1000) < 0.7).astype(float))

    def nll(eta):
        risk = qb.cumsum(qb.exp(eta)[::-1])[::-1]
        return -qb.sum(event * (eta - qb.log(risk)))

    _check(qb.value_and_grad(nll), rng.normal(size=1000) * 0.3)
    assert "not vectorized" not in capfd.readouterr().err


def test_a_sum_beside_a_transposed_read_and_a_store_compiles_quietly(capfd):
    """Regression on learnable RBF features by a solve, differentiated w.r.t. the centres: a
    loop sums while storing one array and reading another transposed (``200 * i1 + i0``),
    all in the one scratch, and LLVM wrote "loop not vectorized" on every cold compile; such
    a loop is left to LLVM's cost model as the reversed read is."""
    rng = np.random.default_rng(32)
    x, y = rng.uniform(-1, 1, (200, 3)), rng.normal(size=(200, 4))

    def loss(log_ell, centres):
        phi = qb.exp(-0.5 * qb.sum((x[:, None, :] - centres[None]) ** 2, axis=-1)
                     / qb.exp(log_ell) ** 2)
        w = qb.solve(phi.T @ phi + 1e-3 * qb.eye(40), phi.T @ y)
        return qb.mean((phi @ w - y) ** 2)

    _check(qb.grad(loss, argnums=(0, 1)), np.log(0.5), rng.uniform(-1, 1, (40, 3)))
    assert "not vectorized" not in capfd.readouterr().err


def test_a_sum_over_a_short_segment_is_in_order_and_compiles_quietly(capfd):
    """A sum over a concatenate of 16, 16 and 4 elements is three loops, one per piece
    (``groups._segments``): the pieces of 16 or more reorder their adds (a marked, vectorised
    loop), the piece of 4 adds in order. Marked, a 4-element loop cannot be vectorised 4 wide
    with 4 interleaved, and LLVM wrote "loop not vectorized" on every cold compile (an
    adaptive ODE's error norm over its state and its adjoints)."""
    rng = np.random.default_rng(33)

    def norm(a, b, c):
        x = qb.concatenate([a, b, c])
        return qb.sum((x / (1e-8 + qb.abs(x))) ** 2), x * 2.0

    _check(norm, rng.normal(size=16), rng.normal(size=16), rng.normal(size=4))
    assert "not vectorized" not in capfd.readouterr().err
