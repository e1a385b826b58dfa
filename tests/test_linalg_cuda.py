"""The decompositions on the numba.cuda back end (one thread per matrix, the kernels of
lowering/matrix_kernels.py): values and gradients equal the reference interpreter. The cases
run as tests/cuda_runner.py says (one subprocess under the simulator); they are few and tiny."""

import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import cuda_runner  # noqa: E402

pytestmark = pytest.mark.cuda
cuda_runner.require_numba_cuda()


def _case():
    import quabla as qb
    from quabla.core.interpret import evaluate
    from quabla.lower import compile_graph

    from test_linalg_decompositions import ARGS, _primitives

    args = [qb.array(x) for x in ARGS[:4]]
    graph = qb.jit(_primitives).lower(*args).graph
    values = [np.asarray(a) for a in args]
    got = compile_graph(graph, "cuda")(*values)
    for k, (a, e) in enumerate(zip(got, evaluate(graph, values))):
        np.testing.assert_allclose(a, e, rtol=1e-10, atol=1e-12, err_msg=str(k))


def run_all():
    return cuda_runner.run_cases([("decompositions", _case)])


@pytest.fixture(scope="module")
def cuda_results():
    return cuda_runner.results(__file__, run_all, timeout=900)


def test_decompositions_match_the_interpreter_on_cuda(cuda_results):
    assert cuda_results["decompositions"] == "ok", cuda_results["decompositions"]


if __name__ == "__main__":
    print(json.dumps(run_all()))
