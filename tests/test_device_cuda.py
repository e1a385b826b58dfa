"""The numba.cuda back end (lowering/numba_cuda/): the device parity corpus and CUDA-specific
checks (reductions across blocks, determinism, tiled products of odd shapes, stacked solves,
regions as host loops, typed rejections, the Lennard-Jones benchmark).

The cases run as tests/cuda_runner.py says: in ONE subprocess under the simulator (once per test
session, shared by xdist workers) unless NUMBA_ENABLE_CUDASIM is set, so ``pytest -m cuda``
alone on a GPU machine tests the real device.
"""

import json
import os
import sys
import threading

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (HERE, ROOT, os.path.join(ROOT, "benchmarks")):
    if path not in sys.path:
        sys.path.insert(0, path)

import cuda_runner  # noqa: E402  (needs HERE on the path)

pytestmark = pytest.mark.cuda
cuda_runner.require_numba_cuda()

import device_cases  # noqa: E402

CORPUS = [case.name for case in device_cases.cases()]


def _program(f, *args):
    import quabla as qb

    return qb.jit(f).lower(*args).graph


def _compile(graph):
    from quabla.lower import compile_graph as lower_compile

    return lower_compile(graph, "cuda")


def _parity(f, *args, exact=False):
    """Runs ``f`` on CUDA twice; both calls must equal the interpreter (float64: to 1e-12),
    and compile nothing (``_compiled_once``)."""
    from quabla.core.interpret import evaluate

    graph = _program(f, *args)
    executable = _compile(graph)
    values = [np.asarray(a) for a in args]
    expected = evaluate(graph, values)
    first, second = executable(*values), executable(*values)
    for a, b, e in zip(first, second, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_array_equal(a, b)  # deterministic for one launch configuration
        np.testing.assert_allclose(a, e, rtol=1e-12 if exact else 2e-5, atol=1e-12)
    _compiled_once(executable)
    return executable


def case_device_count():
    from lowering import numba_cuda

    assert numba_cuda.device_count() >= 1


def case_reductions_across_blocks():
    """Sizes that are no multiple of the block: sums and maxima take the two-kernel path
    (per-block partials, then one block per kept element) and match the reference."""
    import quabla as qb
    from lowering.numba_cuda import SIMULATOR_LAUNCH, Launch, simulated

    threads = (SIMULATOR_LAUNCH if simulated() else Launch()).threads
    n = 2 * threads + 5
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=n), rng.normal(size=(n + 2, 3))
    executable = _parity(lambda x, y: (qb.sum(x), qb.max(y, axis=0), qb.sum(y * y, axis=1),
                                       qb.min(y), qb.any(y > 2.0), qb.all(y < 2.0, axis=0),
                                       qb.sum(qb.exp(y), axis=0)),
                         x, y, exact=True)
    assert "cuda.blockIdx.x] = sm" in executable.source  # partials of several blocks
    # the max, the exp sum and the all over axis 0 are one kernel's, reduced one after another
    # in one shared array per dtype
    assert "sm_float64 = cuda.shared.array" in executable.source
    assert "sm_bool = cuda.shared.array" in executable.source


def case_sum_is_deterministic():
    """float32 sums over many blocks give the same bits on every call."""
    import quabla as qb

    x = np.random.default_rng(2).normal(size=(3, 600)).astype(np.float32)
    executable = _compile(_program(lambda x: (qb.sum(x), qb.sum(x, axis=1)), x))
    runs = [executable(x) for _ in range(3)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(runs[0][0], x.astype(np.float64).sum(), rtol=1e-5)


def case_tiled_products_of_odd_shapes():
    """Tiles that do not divide any extent, a transposed operand read in place, batches."""
    import quabla as qb
    from quabla import ops

    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(5, 7)), rng.normal(size=(3, 7))
    c, d, e = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 3, 6)), rng.normal(size=(2, 5, 9))
    _parity(lambda a, b, c, d, e: (a @ b.T, qb.matmul(c, d), a[0] @ a[1],
                                   ops.dot_general(c, e, ((1,), (1,)), ((0,), (0,)))),
            a, b, c, d, e, exact=True)


def case_products_arranged_for_cublas():
    """With cuBLAS on, products hand (batch, rows, contraction) x (batch, contraction, cols)
    arrays to ``blas.gemm``: views of operands stored in that order, copies of the others
    (here a stand-in for cuBLAS multiplies them; the simulator has none)."""
    from lowering import numba_cuda
    from quabla.core.interpret import evaluate
    from quabla import ops

    calls = []

    def host_gemm(a, b, out):
        calls.append((a.shape, b.shape))
        out.copy_to_device(np.matmul(a.copy_to_host(), b.copy_to_host()))
    rng = np.random.default_rng(6)
    x, y, z = rng.normal(size=(40, 30)), rng.normal(size=(30, 50)), rng.normal(size=(2, 30, 40))
    graph = _program(lambda x, y, z: (x @ y, ops.dot_general(z, x, ((1, 2), (1, 0)), ((), ())),
                                      qb_sum(ops.dot_general(z, y, ((1,), (0,)), ((), ())))),
                     x, y, z)
    launch = numba_cuda.SIMULATOR_LAUNCH._replace(cublas=True)
    original, numba_cuda.blas.gemm = numba_cuda.blas.gemm, host_gemm
    try:
        executable = numba_cuda.compile_graph(graph, 0, {}, launch=launch)
    finally:
        numba_cuda.blas.gemm = original
    values = [x, y, z]
    for got, want in zip(executable(*values), evaluate(graph, values)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    # the second product (2400 multiply-adds) is below the threshold: a tiled kernel
    assert sorted(calls) == [((1, 40, 30), (1, 30, 50)), ((1, 80, 30), (1, 30, 50))]
    assert executable.source.count("_gemm(") == 2


def qb_sum(x):
    import quabla as qb

    return qb.sum(x, axis=0)


def case_stacked_linear_algebra():
    import quabla as qb

    rng = np.random.default_rng(4)
    a = rng.normal(size=(3, 4, 4)) + 4 * np.eye(4)
    spd = a @ np.swapaxes(a, -1, -2)
    b = rng.normal(size=(3, 4, 2))
    _parity(lambda a, spd, b: (qb.linalg.solve(a, b), qb.linalg.cholesky(spd),
                               qb.linalg.triangular_solve(spd, b, lower=True)),
            a, spd, b, exact=True)


def case_float64_stays_float64():
    import quabla as qb

    x = np.linspace(0.1, 2.0, 11)
    _parity(lambda x: (qb.exp(qb.tanh(x)) / 3.0, qb.sum(qb.log(x))), x, exact=True)


def case_regions_are_host_loops():
    """A scan carrying a matrix product, a while loop and a cond around kernels."""
    import quabla as qb

    rng = np.random.default_rng(5)
    m, v = rng.normal(size=(3, 3)) / 3, rng.normal(size=3)

    shift = np.array([0.5, -1.0, 2.0])  # constants of a body and of the program after it

    def f(m, v):
        carry, ys = qb.scan(lambda c, i: (m @ qb.sin(c * shift) + i, qb.sum(c)), v, length=4)
        n, total = qb.while_loop(lambda s: s[0] < 5.0, lambda s: (s[0] + 1.0, s[1] * 1.5),
                                 (0.0, qb.sum(v * v)))
        picked = qb.cond(qb.sum(v) > 0.0, lambda v: v * 2.0, qb.cos, v)
        return carry, ys, n, total, picked * shift[::-1]
    executable = _parity(f, m, v, exact=True)
    assert "for step in range(4):" in executable.source


def _compiled_once(executable):
    """Every kernel of the module is one of ``executable.kernels``; on a GPU each was compiled
    (or loaded from the cache) once, when the executable was made, for the signature that its
    launches match: calls compiled nothing more."""
    import re

    from lowering.numba_cuda import simulated

    assert sorted(executable.kernels) == sorted(
        re.findall(r"^@cuda\.jit\ndef (k\d+)\(", executable.source, re.M))
    if not simulated():
        assert all(len(k.overloads) == 1 for k in executable.kernels.values())


def case_unsupported_op_is_rejected_before_running():
    """An op this back end cannot lower, even inside a branch, fails at compile time with
    the typed error naming the op and the device."""
    import quabla as qb
    from quabla.core.graph import Graph, Node
    from quabla.errors import UnsupportedOperationError

    graph = _program(lambda x: qb.cond(qb.sum(x) > 0.0, qb.sin, qb.cos, x), np.ones(2))
    cond = next(k for k, n in enumerate(graph.nodes) if n.op == "cond")
    params = dict(graph.nodes[cond].params)
    branch = params["true_fun"]
    nodes = [Node("not_an_op", n.operands, n.params, n.shape, n.dtype, n.weak)
             if n.op == "sin" else n for n in branch.nodes]
    params["true_fun"] = Graph(nodes, branch.inputs, branch.outputs)
    node = graph.nodes[cond]
    nodes = list(graph.nodes)
    nodes[cond] = Node("cond", node.operands, tuple(sorted(params.items())), node.shape,
                       node.dtype, node.weak)
    from lowering import numba_cuda

    with pytest.raises(UnsupportedOperationError) as info:
        numba_cuda.compile_graph(Graph(nodes, graph.inputs, graph.outputs), 0, {})
    assert (info.value.op, info.value.device) == ("not_an_op", "cuda:0")


def case_absent_device_index():
    from lowering import numba_cuda
    from quabla.errors import UnsupportedOperationError

    count = numba_cuda.device_count()
    with pytest.raises(UnsupportedOperationError) as info:
        numba_cuda.compile_graph(_program(lambda x: x + 1.0, np.ones(2)), count, {})
    assert info.value.device == f"cuda:{count}"


def case_concurrent_calls_use_their_own_scratch():
    import quabla as qb

    executable = _compile(_program(lambda x: qb.sum(qb.sin(x) * x, axis=0), np.ones((20, 2))))
    inputs = [np.full((20, 2), k / 10) for k in range(4)]
    results = [None] * 4

    def call(k):
        results[k] = executable(inputs[k])[0]
    threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, got in zip(inputs, results):
        np.testing.assert_allclose(got, (np.sin(x) * x).sum(0), rtol=1e-12)


def case_lennard_jones_benchmark():
    import cuda_lj

    assert cuda_lj.main(["--tiny"]) == 0


CUDA_CASES = {name[5:]: fn for name, fn in list(globals().items())
              if name.startswith("case_")}


def run_all():
    """Runs every case here (in the process that has the right NUMBA_ENABLE_CUDASIM): the
    result of each, "ok" or its error."""
    jobs = [(f"corpus:{case.name}", lambda c=case: device_cases.check("cuda", c))
            for case in device_cases.cases()]
    return cuda_runner.run_cases(jobs + list(CUDA_CASES.items()))


@pytest.fixture(scope="session")
def cuda_results(tmp_path_factory):
    # one subprocess for all xdist workers, through a directory they share: the session's
    # (a worker's basetemp is a folder of it). Without xdist, basetemp's parent is shared by
    # every pytest session of the user, so a file there would hand over an old run's results.
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return cuda_runner.results(__file__, run_all, timeout=1800, shared=shared)


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_parity(cuda_results, name):
    assert cuda_results[f"corpus:{name}"] == "ok", cuda_results[f"corpus:{name}"]


@pytest.mark.parametrize("name", sorted(CUDA_CASES))
def test_cuda(cuda_results, name):
    assert cuda_results[name] == "ok", cuda_results[name]


if __name__ == "__main__":
    print(json.dumps(run_all()))
