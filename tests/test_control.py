"""The control-flow front end: cond, fori_loop, scan and while_loop as regions (issue 8).

Values are checked against plain Python loops over NumPy, eagerly and under jit, and under jit
on every device (tests that take ``on``, helpers.OnDevice); the IR is checked for one region
node per construct, implicit captures and hoisted invariants; misuse raises errors that name
both sides. Derivatives, batching and the Numba lowering have their
own files (test_control_autodiff.py, test_control_vmap.py, test_control_lowering.py).
"""

import numpy as np
import pytest

import quabla as qb

pytestmark = pytest.mark.filterwarnings("ignore::quabla.PrecisionWarning")  # MLX's float32
X = np.array([0.5, -1.0, 2.0, 0.25])


def _scan_program(x):
    def step(c, i):
        c = 0.5 * c + x[i] * qb.sin(x).sum()  # sin(x).sum() is loop-invariant
        return c, c * c
    return qb.scan(step, 0.0, length=4)


def _scan_reference(x):
    c, ys, s = 0.0, [], np.sin(x).sum()
    for i in range(4):
        c = 0.5 * c + x[i] * s
        ys.append(c * c)
    return c, np.array(ys)


def test_scan_values(on):
    rc, rys = _scan_reference(X)
    for run in on.forms(_scan_program):
        c, ys = run(qb.array(X))
        on.close(c, rc, rtol=1e-14, atol=0)
        on.close(ys, rys, rtol=1e-14, atol=0)


def test_scan_is_one_region_with_the_invariant_hoisted():
    text = qb.jit(_scan_program).lower(qb.array(X)).as_text()
    body = text[text.index("body="):]
    assert text.count("= scan ") == 1
    assert "sin" in text[:text.index("body=")] and "sin" not in body


def test_fori_loop_pytree_carry_and_operands(on):
    def f(x, w):
        def body(i, carry, w):
            a, b = carry["a"], carry["b"]
            return {"a": a + i * w, "b": b * 0.9 + a.sum()}
        return qb.fori_loop(2, 6, body, {"a": x, "b": 1.0}, operands=(w,))
    a, b = X.copy(), 1.0
    for i in range(2, 6):
        a, b = a + i * 3.0, b * 0.9 + a.sum()
    for run in on.forms(f):
        out = run(qb.array(X), qb.array(3.0))
        on.close(out["a"], a, rtol=1e-14, atol=0)
        on.close(out["b"], b, rtol=1e-14, atol=0)


def test_fori_loop_traced_bounds_is_a_while_loop():
    f = qb.jit(lambda x, n: qb.fori_loop(0, n, lambda i, c: c + i * x, qb.zeros(4)))
    np.testing.assert_allclose(np.asarray(f(qb.array(X), qb.array(5.0))), 10 * X)
    np.testing.assert_allclose(np.asarray(f(qb.array(X), qb.array(0.0))), 0 * X)
    assert "= while " in f.lower(qb.array(X), qb.array(5.0)).as_text()


def test_empty_fori_loop_returns_the_init():
    out = qb.jit(lambda x: qb.fori_loop(3, 1, lambda i, c: c * 2.0, x))(qb.array(X))
    np.testing.assert_array_equal(np.asarray(out), X)


@pytest.mark.parametrize("wrap", [lambda f: f, qb.jit], ids=["eager", "jit"])
def test_while_loop(wrap):
    def f(a):  # Heron's square root per element, until every element converged
        def body(state):
            x, n = state
            return 0.5 * (x + a / x), n + 1.0
        return qb.while_loop(lambda s: qb.any(qb.abs(s[0] * s[0] - a) > 1e-12), body, (a, 0.0))
    a = np.array([2.0, 9.0, 0.5])
    x, n = wrap(f)(qb.array(a))
    np.testing.assert_allclose(np.asarray(x), np.sqrt(a), rtol=1e-12)
    assert 3 <= float(n) <= 10


def test_cond_traced_predicate_and_captures(on):
    def f(x, s):
        return qb.cond(x.sum() > s, lambda v: v * s, lambda v: v - qb.exp(s), x)
    for run in on.forms(f):
        for s in (0.0, 10.0):
            out = run(qb.array(X), qb.array(s))
            want = X * s if X.sum() > s else X - np.exp(s)
            on.close(out, want, rtol=1e-14, atol=0)


def test_cond_concrete_predicate_calls_one_branch():
    called = []
    out = qb.cond(True, lambda: called.append("t") or 1.0, lambda: called.append("f") or 2.0)
    assert out == 1.0 and called == ["t"]


def test_cond_weak_branch_adopts_the_other_dtype(on):
    f = qb.jit(lambda x: qb.cond(x.sum() > 0, lambda: x, lambda: 0.0 * x + 1.0), device=on.device)
    out = f(qb.array(X, dtype=qb.float32))
    assert out.dtype == qb.float32
    g = qb.jit(lambda x: qb.cond(x > 0, lambda: x * 2, lambda: 0.0), device=on.device)
    assert g(qb.array(1.5, dtype=qb.float32)).dtype == qb.float32


def test_nested_regions_and_closures(on):
    def f(x):
        def outer(i, c):
            inner = qb.fori_loop(0, 3, lambda j, d: d + x[j] * i, 0.0)
            return qb.cond(inner > 2.0, lambda: c + inner, lambda: c - 1.0)
        return qb.fori_loop(0, 4, outer, 0.0)
    ref = 0.0
    for i in range(4):
        inner = sum(X[j] * i for j in range(3))
        ref = ref + inner if inner > 2.0 else ref - 1.0
    for run in on.forms(f):
        on.close(run(qb.array(X)), ref, rtol=1e-14, atol=0)


def test_dynamic_index_clamps_like_jax(on):
    x = qb.array(np.arange(12.0).reshape(4, 3))
    pick = qb.jit(lambda x, i: x[i], device=on.device)
    for i, row in [(0, 0), (2, 2), (-1, 3), (-4, 0), (7, 3), (-9, 0), (2.7, 2)]:
        np.testing.assert_array_equal(np.asarray(pick(x, qb.array(float(i)))),
                                      np.arange(12.0).reshape(4, 3)[row])
    col = qb.jit(lambda x, i: x[1:, i], device=on.device)(x, qb.array(-1.0))
    np.testing.assert_array_equal(np.asarray(col), [5.0, 8.0, 11.0])


def test_float32_carry_stays_float32(on):
    f = qb.jit(lambda x: qb.scan(lambda c, i: (c * 0.5 + x[i], c), 0.0, length=4),
               device=on.device)
    c, ys = f(qb.array(X, dtype=qb.float32))
    assert c.dtype == qb.float32 and ys.dtype == qb.float32


# -- misuse -------------------------------------------------------------------------------------

def test_branches_with_different_results_name_both():
    with pytest.raises(TypeError, match=r"true_fun returns \(float64\[4\]\).*false_fun returns "
                                        r"\(float64\[\]\)"):
        qb.jit(lambda x: qb.cond(x.sum() > 0, lambda: x, lambda: x.sum()))(qb.array(X))
    with pytest.raises(TypeError, match="true_fun returns .*false_fun returns"):
        qb.jit(lambda x: qb.cond(x.sum() > 0, lambda: (x, x), lambda: x))(qb.array(X))


def test_carry_changing_shape_names_both():
    with pytest.raises(TypeError, match=r"starts as \(float64\[4\]\) but the body returns "
                                        r"\(float64\[\]\)"):
        qb.jit(lambda x: qb.fori_loop(0, 3, lambda i, c: c.sum(), x))(qb.array(X))
    with pytest.raises(TypeError, match="changes structure"):
        qb.jit(lambda x: qb.while_loop(lambda c: c[0] < 3, lambda c: c[0], (x.sum(), x)))(
            qb.array(X))
    with pytest.raises(TypeError, match=r"starts as \(float32\[4\]\).*\(float64\[4\]\)"):
        qb.jit(lambda x, y: qb.fori_loop(0, 2, lambda i, c: c.astype(qb.float64) + y, x))(
            qb.array(X, dtype=qb.float32), qb.array(X))


def test_scan_body_must_return_a_pair():
    with pytest.raises(TypeError, match=r"pair \(carry, y\)"):
        qb.scan(lambda c, i: c, 0.0, length=3)


def test_while_condition_must_be_a_bool_scalar():
    with pytest.raises(TypeError, match="cond_fun must return a bool scalar"):
        qb.jit(lambda x: qb.while_loop(lambda c: c, lambda c: c - 1.0, x.sum()))(qb.array(X))


def test_bad_leaves_and_arguments():
    with pytest.raises(TypeError, match="str leaf"):
        qb.fori_loop(0, 2, lambda i, c: c, "text")
    with pytest.raises(TypeError, match="predicate must be a scalar"):
        qb.cond(qb.array(X) > 0, lambda: 1.0, lambda: 2.0)
    with pytest.raises(ValueError, match="length must be >= 0"):
        qb.scan(lambda c, i: (c, c), 0.0, length=-1)
    with pytest.raises(TypeError, match="unroll must be a bool or a positive int"):
        qb.scan(lambda c, i: (c, c), 0.0, length=3, unroll=2.5)
    with pytest.raises(TypeError, match="whole numbers"):
        qb.array(X)[qb.array([1.5, 2.0])]
