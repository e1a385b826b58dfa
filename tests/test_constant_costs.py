"""What large constants cost the front end: each payload's bits are digested at most once (and
only when something needs the digest), the rewriter keeps constants it does not change, and
payloads that differ in any bit still stay apart (graphs, fingerprints, CSE, results)."""

import hashlib

import numpy as np
import pytest

import quabla as qb
from quabla.core import graph as graph_module
from quabla.core.graph import Const, GraphBuilder
from quabla.core.rewrite import simplify

N = 48  # particles: eye(N) is a constant of N * N elements


def energy(x):
    """Lennard-Jones energy of all pairs by broadcasting (as benchmarks/problems.py writes it)."""
    eye = qb.eye(N)
    d = qb.expand_dims(x, 1) - qb.expand_dims(x, 0)
    r2 = qb.sum(d * d, axis=-1) + eye
    inv6 = (1.0 / r2) ** 3
    return 2.0 * qb.sum((inv6 * inv6 - inv6) * (1.0 - eye))


def positions():
    side = np.arange(4) * 1.1
    grid = np.stack(np.meshgrid(side, side, side[:3], indexing="ij"), -1).reshape(-1, 3)
    return grid + np.random.default_rng(1).uniform(-0.05, 0.05, grid.shape)


def energy_np(x):
    d = x[:, None, :] - x[None, :, :]
    r2 = np.sum(d * d, axis=-1) + np.eye(len(x))
    inv6 = (1.0 / r2) ** 3
    return 2.0 * np.sum((inv6 * inv6 - inv6) * (1.0 - np.eye(len(x))))


class _Counting:
    """Stands in for ``hashlib`` in quabla.core.graph, counting the digests of constants."""

    def __init__(self):
        self.calls = 0

    def blake2b(self, *args, **kwargs):
        self.calls += 1
        return hashlib.blake2b(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(hashlib, name)


def _constants(graph):
    return [n.kw["value"] for n in graph.nodes if n.op == "constant"]


def test_staging_digests_no_constant_and_fingerprint_digests_each_once(monkeypatch):
    counting = _Counting()
    monkeypatch.setattr(graph_module, "hashlib", counting)
    lowered = qb.jit(qb.value_and_grad(energy)).lower(qb.array(positions()))
    graph = lowered.graph
    assert any(c.value.shape == (N, N) for c in _constants(graph))
    assert counting.calls == 0  # tracing, the transforms and the rewriter need no digest
    first = graph.fingerprint()
    assert counting.calls == len({id(c) for c in _constants(graph)})
    assert graph.fingerprint() == first
    assert counting.calls == len({id(c) for c in _constants(graph)})  # memoised


def test_rewriter_keeps_the_constants_it_does_not_change():
    b = GraphBuilder()
    x = b.input((N, N), qb.float64)
    c = b.constant(np.eye(N))
    y = b.add("mul", (x, c), (), (N, N), qb.float64)
    before = b.build([y])
    after = simplify(before)
    assert [id(k) for k in _constants(after)] == [id(before.nodes[c].kw["value"])]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.bool_])
def test_payloads_differing_in_any_one_element_differ(dtype):
    base = np.zeros(300, dtype)
    const = Const(base)
    for k in range(base.size):
        other = base.copy()
        other[k] = 1
        changed = Const(other)
        assert changed != const and const != changed
        assert Const(other.copy()) == changed
        assert hash(Const(other.copy())) == hash(changed)


def test_sign_of_zero_and_nan_payloads_are_bits():
    zeros = np.zeros(1000)
    signed = zeros.copy()
    signed[777] = -0.0
    assert Const(zeros) != Const(signed)
    nan = np.full(1000, np.nan)
    other_nan = nan.copy()
    other_nan.view(np.uint64)[500] ^= 1  # another NaN payload
    assert Const(nan) != Const(other_nan)
    assert Const(nan) == Const(nan.copy())


def test_splat_constants_become_broadcasts_by_bits():
    b = GraphBuilder()
    x = b.input((40, 40), qb.float64)
    twos = b.constant(np.full((40, 40), 2.0))
    signed = np.zeros((40, 40))
    signed[39, 39] = -0.0
    zeros = b.constant(signed)
    y = b.add("mul", (x, twos), (), (40, 40), qb.float64)
    z = b.add("add", (y, zeros), (), (40, 40), qb.float64)
    graph = simplify(b.build([z]))
    ops = [n.op for n in graph.nodes]
    assert ops.count("broadcast_in_dim") == 1  # the twos: a scalar broadcast
    assert [c.value.shape for c in _constants(graph)] == [(), (40, 40)]  # -0.0 breaks the splat


def test_cse_keeps_constants_that_differ_in_one_element():
    a = np.arange(N * N, dtype=np.float64).reshape(N, N)
    b_ = a.copy()
    b_[N // 2, N // 3] += 1.0
    b = GraphBuilder()
    x = b.input((N, N), qb.float64)
    y1 = b.add("mul", (x, b.constant(a)), (), (N, N), qb.float64)
    y2 = b.add("mul", (x, b.constant(b_)), (), (N, N), qb.float64)
    y3 = b.add("mul", (x, b.constant(a.copy())), (), (N, N), qb.float64)
    graph = simplify(b.build([y1, y2, y3]))
    assert len(_constants(graph)) == 2
    assert graph.outputs[0] == graph.outputs[2] != graph.outputs[1]


def test_programs_differing_in_one_constant_element(tmp_path, monkeypatch):
    """The same generated source, so one on-disk entry (constants are run-time arguments of the
    entry), but different graphs, fingerprints and results: each its own constant's bits."""
    monkeypatch.setenv("QUABLA_CACHE_DIR", str(tmp_path))
    table = np.linspace(0.0, 1.0, 4096).reshape(64, 64)
    changed = table.copy()
    changed[40, 17] = -1.0
    x = np.random.default_rng(2).standard_normal((64, 64))
    programs = []
    for c in (table, changed):
        const = qb.array(c)
        f = qb.jit(lambda v, const=const: qb.sum(qb.sin(v) * const, axis=0))
        programs.append(f.lower(qb.array(x)).graph)
        assert np.array_equal(np.asarray(f(qb.array(x))), np.sum(np.sin(x) * c, axis=0))
    assert programs[0] != programs[1]
    assert programs[0].fingerprint() != programs[1].fingerprint()


def test_lennard_jones_value_and_grad_parity():
    x = positions()
    value, grad = qb.jit(qb.value_and_grad(energy))(qb.array(x))
    assert np.isclose(float(value), energy_np(x), rtol=1e-12)
    eager_value, eager_grad = qb.value_and_grad(energy)(qb.array(x))
    assert float(value) == pytest.approx(float(eager_value), rel=1e-13)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(eager_grad), rtol=1e-11, atol=1e-12)


def test_pickled_constants_hash_as_in_the_loading_process(tmp_path):
    """Background compiles send graphs to another process: a Const's hash must be that
    process's (Python salts the hashes of bytes per process)."""
    import os
    import pickle
    import subprocess
    import sys

    path = tmp_path / "const.pickle"
    code = ("import pickle, sys, numpy as np; from quabla.core.graph import Const; "
            "pickle.dump(Const(np.arange(500.0)), open(sys.argv[1], 'wb'))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=root)
    subprocess.run([sys.executable, "-c", code, str(path)], env=env, check=True)
    loaded = pickle.loads(path.read_bytes())
    local = Const(np.arange(500.0))
    assert loaded == local and hash(loaded) == hash(local)
    assert {local: 1}[loaded] == 1


def test_large_results_of_constants_are_staged_in_a_trace_not_computed():
    """Inside a trace, an op of eager arrays only is computed now when its result is small
    (``FOLD_LIMIT`` elements, as the rewriter folds) and recorded in the trace when it is
    larger: ``1.0 - eye(n)`` and a gradient seed times it were materialized at trace time (512
    MB each for n = 8192), where the program fuses them. Outside a trace nothing changes."""
    from quabla.core.rewrite import FOLD_LIMIT

    side = int(FOLD_LIMIT ** 0.5) + 1                      # side * side > FOLD_LIMIT
    big, small = qb.eye(side), qb.eye(8)

    def f(x):
        return qb.sum((1.0 - big) * x), qb.sum((1.0 - small) * x[:8, :8])

    x = np.random.default_rng(0).uniform(-1, 1, (side, side))
    graph = qb.jit(f).lower(x).graph
    constants = [n for n in graph.nodes if n.op == "constant" and n.shape]
    assert [n.shape for n in constants] == [(side, side), (8, 8)]  # eye(side), 1 - eye(8)
    for got, want in zip(qb.jit(f)(x), (np.sum((1 - np.eye(side)) * x),
                                        np.sum((1 - np.eye(8)) * x[:8, :8]))):
        np.testing.assert_allclose(float(got), want, rtol=1e-12)
    g = qb.jit(qb.grad(lambda x: f(x)[0]))(x)
    np.testing.assert_allclose(np.asarray(g), 1 - np.eye(side), rtol=0, atol=0)
    assert isinstance(1.0 - big, qb.Tensor)                  # eagerly: computed at once

    def needs_its_value(x):
        return x * float(np.asarray(1.0 - big).sum())       # a staged value is not concrete

    with pytest.raises(qb.TracerError, match="compute it before the transformed function"):
        qb.jit(needs_its_value)(x)
