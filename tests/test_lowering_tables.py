"""Every primitive is lowered by every back end's table (or fused by its kind), and a new
elementwise op is one entry of an elementwise table and nothing else, on every back end."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import quabla as qb  # noqa: F401  (registers every primitive)
from quabla.core.primitives import PRIMITIVES

import cuda_runner

HERE = pathlib.Path(__file__).resolve().parent


def _lowered_primitives():
    """Every primitive a back end can meet: solvers are expanded into loops before lowering
    (``quabla.lower``), so no back end has or needs an entry for them."""
    return sorted(name for name, prim in PRIMITIVES.items() if prim.expand is None)


def test_cpu_lowers_every_primitive():
    from lowering.numba_cpu.codegen import lowers

    assert [op for op in _lowered_primitives() if not lowers(op)] == []


def test_cuda_lowers_every_primitive():
    pytest.importorskip("numba.cuda")
    from lowering.numba_cuda.codegen import lowers

    assert [op for op in _lowered_primitives() if not lowers(op)] == []


def test_mlx_lowers_every_primitive():
    pytest.importorskip("mlx.core")
    from lowering.mlx.rules import lowering

    assert [op for op in _lowered_primitives() if lowering(op) is None] == []


def test_op_kinds_are_declared_once_in_the_core():
    kinds = {name: prim.kind for name, prim in PRIMITIVES.items()}
    assert {kinds[op] for op in ("broadcast_in_dim", "transpose", "slice", "rev")} == {"index_map"}
    assert {op for op, k in kinds.items() if k == "reduction"} == {
        "reduce_sum", "reduce_max", "reduce_min", "reduce_or", "reduce_and"}
    assert {op for op, k in kinds.items() if k == "region"} == {"cond", "scan", "while", "remat"}
    assert all(PRIMITIVES[op].identity is not None for op, k in kinds.items() if k == "reduction")
    assert PRIMITIVES["add"].cheap({}) and not PRIMITIVES["exp"].cheap({})
    assert PRIMITIVES["integer_pow"].cheap({"n": 3}) and not PRIMITIVES["integer_pow"].cheap({"n": 9})


_NEW_OP = textwrap.dedent("""
    import os, sys
    import numpy as np
    import quabla as qb
    from quabla.core.rules.elementwise import register_table
    from quabla.core.tracing import bind

    register_table(sys.argv[1])
    x = qb.array(np.linspace(-2.0, 2.0, 7))
    expected = np.asarray(x) / (1.0 + np.abs(np.asarray(x)))
    expected_grad = 1.0 / (1.0 + np.abs(np.asarray(x))) ** 2

    def f(x):
        return qb.sum(bind("softsign", x))

    runs = [(device, None) for device in qb.devices()] + [("cpu", "interpret")]
    for device, backend in runs:
        if backend:
            os.environ["QUABLA_BACKEND"] = backend
        value = qb.jit(lambda x: bind("softsign", x), device=device)(x)
        grad = qb.jit(qb.grad(f), device=device)(x)
        tol = 1e-5 if device == "mlx" else 1e-12
        np.testing.assert_allclose(np.asarray(value), expected, rtol=tol, atol=tol)
        np.testing.assert_allclose(np.asarray(grad), expected_grad, rtol=tol, atol=tol)
        os.environ.pop("QUABLA_BACKEND", None)
        print(device, backend or "", "ok")
""")


def test_a_new_elementwise_op_is_one_table_entry():
    """A test-only table adds ``softsign``; its value and gradient are right under ``jit`` on
    the CPU, the interpreter, MLX and the CUDA simulator (a subprocess: the registry is
    global, and numba.cuda picks its simulator when Numba is first imported)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-c", _NEW_OP, str(HERE / "data" / "extra_elementwise.yaml")],
                          env=env, cwd=cuda_runner.ROOT, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = {line.split()[0] for line in done.stdout.splitlines() if line.endswith("ok")}
    assert {"cpu"} <= ran
    expected = {"cpu", "cuda:0"} | ({"mlx"} if "mlx" in qb.devices() else set())
    cuda = subprocess.run([sys.executable, "-c", "import numba.cuda"], capture_output=True)
    if cuda.returncode != 0:
        expected.discard("cuda:0")
    assert expected <= ran, done.stdout
