"""The MLX back end (``lowering/mlx``) against the interpreter, and the device plumbing every
back end shares: ``qb.devices()``, unknown and absent devices, precision, typed rejections."""

import sys
import threading
import warnings

import numpy as np
import pytest

import quabla as qb
import lowering
from quabla.core.interpret import evaluate
from quabla.lower import compile_graph

mx = pytest.importorskip("mlx.core")

import device_cases  # noqa: E402  (after the skip: it imports the whole rule-test corpus)
from lowering.mlx import rules as mlx_rules  # noqa: E402
from quabla.core.primitives import PRIMITIVES  # noqa: E402

CASES = device_cases.cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_matches_the_interpreter(case):
    device_cases.check("mlx", case)


def test_the_corpus_covers_every_primitive():
    """Every primitive (regions included) is lowered by some case, so has a parity test. The
    solvers are not: ``quabla.lower`` replaces them by their ``expand`` rule (loops of
    ordinary primitives) before any back end sees them."""
    seen = set()
    for case in CASES:
        seen.update(node.op for node in qb.jit(case.fn).lower(*case.args).graph.walk())
    lowered = {name for name, prim in PRIMITIVES.items() if prim.expand is None}
    assert lowered - seen == set()
    assert all(mlx_rules.lowering(op) is not None for op in lowered)


# -- devices ------------------------------------------------------------------------------------

def test_devices_lists_cpu_first_and_mlx():
    found = qb.devices()
    assert found[0] == "cpu" and "mlx" in found
    try:
        from lowering.numba_cuda import device_count
    except ImportError:
        count = 0
    else:
        count = device_count()
    assert [d for d in found if d.startswith("cuda")] == [f"cuda:{i}" for i in range(count)]


def test_devices_without_mlx_or_numba_cuda(monkeypatch):
    """A missing package (an import that fails) removes its devices; using one then raises
    a typed error naming what is installed and the extra that installs it."""
    monkeypatch.setitem(sys.modules, "mlx", None)
    monkeypatch.setitem(sys.modules, "mlx.core", None)
    monkeypatch.setitem(sys.modules, "lowering.numba_cuda", None)
    assert qb.devices() == ["cpu"]
    for device, extra in (("mlx", "quabla[mlx]"), ("cuda", "quabla[cuda]"),
                          ("cuda:1", "quabla[cuda]")):
        f = qb.jit(lambda x: x * 2.0, device=device)
        with pytest.raises(qb.UnsupportedOperationError) as info:
            f(qb.array([1.0]))
        assert info.value.device == device
        assert extra in str(info.value) and "'cpu'" in str(info.value)


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "gpu", "cuda:99", "mlx:0"])
def test_an_unknown_or_absent_device_raises_when_lowered(device):
    f = qb.jit(lambda x: qb.sin(x), device=device)  # not at jit(): at the first call
    with pytest.raises(qb.UnsupportedOperationError) as info:
        f(qb.array([1.0, 2.0]))
    assert info.value.device == device
    assert "'cpu'" in str(info.value) and "'mlx'" in str(info.value)
    # a malformed name is not a device; a well-formed one this machine lacks is not available
    assert ("is not available" if device == "cuda:99" else "is not a device") in str(info.value)
    with pytest.raises(qb.UnsupportedOperationError):
        f.lower(qb.array([1.0, 2.0])).compile()
    with pytest.raises(qb.UnsupportedOperationError):
        f.lower(qb.array([1.0, 2.0])).source


def test_device_names():
    assert lowering.canonical_device("cuda") == "cuda:0"
    assert lowering.canonical_device(None) == "cpu"
    with pytest.raises(TypeError, match="device"):
        qb.jit(lambda x: x, device=0)


def test_jit_on_mlx_returns_pytrees_in_the_declared_dtypes():
    f = qb.jit(lambda d: {"s": qb.sum(d["x"] ** 2), "big": d["x"] > 0.5}, device="mlx")
    x = qb.array([0.25, 0.75, 1.5], dtype=qb.float32)
    for _ in range(2):
        out = f({"x": x})
        assert out["s"].dtype is qb.float32 and out["big"].dtype is qb.bool_
        np.testing.assert_allclose(float(out["s"]), 0.25**2 + 0.75**2 + 1.5**2, rtol=1e-6)
        assert out["big"].numpy().tolist() == [False, True, True]


def test_concurrent_calls_share_one_executable():
    """Calls run under one process-wide lock, so threads get their own right answers."""
    f = qb.jit(lambda x: qb.tanh(x) @ x.T, device="mlx")
    inputs = [qb.array(np.full((3, 3), k / 10.0), dtype=qb.float32) for k in range(8)]
    expected = [np.tanh(x.numpy()) @ x.numpy().T for x in inputs]
    f(inputs[0])
    errors = []

    def work(k):
        for _ in range(10):
            if not np.allclose(f(inputs[k]).numpy(), expected[k], rtol=1e-6):
                errors.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# -- precision ----------------------------------------------------------------------------------

def _energy(x):
    return qb.sum(qb.exp(-x * x) + qb.tanh(x) * qb.log1p(x * x))


def test_float64_runs_as_float32_with_one_warning_per_function():
    f = qb.jit(qb.value_and_grad(_energy), device="mlx")
    x64 = qb.array(np.linspace(-1.0, 1.0, 5))
    with pytest.warns(qb.PrecisionWarning, match=r"jit\(value_and_grad\(_energy\)\)") as record:
        value, grad = f(x64)
    assert len(record) == 1 and issubclass(record[0].category, RuntimeWarning)
    assert issubclass(record[0].category, UserWarning)  # spec Q6
    assert value.dtype is qb.float64 and grad.dtype is qb.float64
    expected = qb.value_and_grad(_energy)(x64)
    np.testing.assert_allclose(float(value), float(expected[0]), rtol=1e-6)
    np.testing.assert_allclose(grad.numpy(), expected[1].numpy(), rtol=1e-5, atol=1e-6)
    assert abs(float(value) - float(expected[0])) > 0  # it really ran in float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(x64)                                           # the same program: no warning
        f(qb.array(np.linspace(-1.0, 1.0, 7)))           # another signature: no warning
        f(qb.array([0.5, 1.0], dtype=qb.float32))        # a float32 program never warns
    with pytest.warns(qb.PrecisionWarning):             # another function warns once too
        qb.jit(lambda x: x * 2.0, device="mlx")(x64)


def test_loop_indices_and_solver_counts_do_not_make_a_float64_program():
    """Region indices, solvers' step counts and derivative rules' Python-number scalars are
    float64 in every program: a float32 program using them is not narrowed, so it does not
    warn. A cast of an array to float64 is, so it warns."""
    x = qb.array([0.5, 1.0, 2.0], dtype=qb.float32)
    programs = [
        lambda x: qb.fori_loop(0, 3, lambda i, c: c * 0.5 + i, x),
        lambda x: qb.scan(lambda c, i: (c + x[i], c), qb.zeros((), dtype=qb.float32), length=3),
        qb.grad(lambda x: qb.sum(qb.newton(lambda r, c: r * r - c, qb.ones(3, dtype=x.dtype),
                                           x))),
        qb.grad(lambda x: qb.max(qb.relu(x)) + qb.max(qb.maximum(x, 0.7))),  # where(..., 1.0, 0.0)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for program in programs:
            qb.jit(program, device="mlx")(x)
    with pytest.warns(qb.PrecisionWarning):
        qb.jit(lambda x: qb.sum(x.astype(qb.float64)), device="mlx")(x)


def test_precision_float64_keeps_float64_on_the_cpu_stream():
    """exp (MLX's own float64 exp is float32-accurate), log1p, tanh, products, solves and
    factorizations agree with the float64 interpreter to float64 accuracy."""
    def program(x, a):
        spd = a @ a.T + 3.0 * qb.eye(3)
        l = qb.cholesky(spd)
        z = qb.solve(spd, x[:3]) + qb.linalg.triangular_solve(l, x[3:], lower=True)
        return qb.grad(_energy)(x), z, qb.sigmoid(x), qb.softplus(10.0 * x)

    rng = np.random.default_rng(2)
    args = (qb.array(rng.uniform(-3, 3, 6)), qb.array(rng.uniform(-1, 1, (3, 3))))
    f = qb.jit(program, device="mlx", precision="float64")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outs = f(*args)
    graph = f.lower(*args).graph
    expected = evaluate(graph, [a.numpy() for a in args])
    for out, e in zip(outs, expected):
        assert out.dtype is qb.float64
        np.testing.assert_allclose(out.numpy(), e, rtol=1e-13, atol=1e-15)


def test_float64_exp_over_its_whole_range():
    x = np.concatenate([np.linspace(-745.0, 709.7, 4001), np.linspace(-1, 1, 101),
                        [np.inf, -np.inf, np.nan, 0.0, 710.0, -746.0, 1e300, -1e300]])
    (out,) = compile_graph(qb.jit(qb.exp).lower(qb.array(x)).graph, "mlx",
                              {"precision": "float64"})(x)
    with np.errstate(over="ignore"):
        expected = np.exp(x)
    tiny = np.abs(expected) < 1e-300
    np.testing.assert_allclose(out[~tiny], expected[~tiny], rtol=5e-16)
    np.testing.assert_allclose(out[tiny], expected[tiny], atol=1e-300)


def test_precision_float64_refuses_what_mlx_computes_to_float32_accuracy():
    """sin in float64 would come back float32-accurate: refused with the op, before running,
    also from the branch that a cond does not take."""
    x = qb.array([0.5, 1.0])
    f = qb.jit(lambda x: qb.cond(qb.sum(x) > 0.0, lambda y: y * 2.0, qb.sin, x),
               device="mlx", precision="float64")
    with pytest.raises(qb.UnsupportedOperationError) as info:
        f(x)
    assert (info.value.op, info.value.device) == ("sin", "mlx")
    # in float32, or without precision=, sin is fine
    assert qb.jit(qb.sin, device="mlx", precision="float64")(
        qb.array([0.5], dtype=qb.float32)).dtype is qb.float32
    with pytest.raises(ValueError, match="precision"):
        qb.jit(qb.sin, precision="float32")


# -- typed rejections ---------------------------------------------------------------------------

def _looped_cholesky(a):
    """cholesky only in a loop body, inside the branch a cond does not take."""
    body = lambda i, c: qb.cholesky(c @ c.T + qb.eye(2, dtype=c.dtype))
    return qb.cond(qb.sum(a) > 1e9, lambda m: qb.fori_loop(0, 2, body, m), lambda m: m * 2.0, a)


def test_an_op_without_a_rule_is_rejected_before_anything_runs(monkeypatch):
    monkeypatch.delitem(mlx_rules.RULES, "cholesky")
    a = qb.array(np.eye(2), dtype=qb.float32)
    graph = qb.jit(_looped_cholesky).lower(a).graph
    with pytest.raises(qb.UnsupportedOperationError) as info:
        compile_graph(graph, "mlx")  # at lowering: no executable is made
    assert (info.value.op, info.value.device) == ("cholesky", "mlx")
    with pytest.raises(qb.UnsupportedOperationError, match="cholesky"):
        qb.jit(_looped_cholesky, device="mlx")(a)
