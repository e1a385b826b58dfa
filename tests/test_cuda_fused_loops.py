"""numba.cuda: a loop region whose body is elementwise runs as ONE kernel (each thread carries
its elements through every step), other loops as host loops around the body's kernels
(lowering/numba_cuda/codegen.py, ``fused_loop_shape``).

The cases run as tests/cuda_runner.py says: in one subprocess under Numba's CUDA simulator, or
in this process when NUMBA_ENABLE_CUDASIM is set already (``pytest -m cuda`` on a GPU machine).
"""

import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
for path in (HERE, os.path.dirname(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

import cuda_runner  # noqa: E402  (needs HERE on the path)

pytestmark = pytest.mark.cuda
cuda_runner.require_numba_cuda()

X = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)
Y = np.linspace(0.5, 2.0, 6, dtype=np.float32).reshape(2, 3)
SHIFT = np.array([0.25, -0.5, 1.0], np.float32)  # a constant array inside the bodies


def fori_program(x, y):
    """Three carries (one bool), a closed-over array, the loop index, a select."""
    import quabla as qb

    def body(i, carry):
        a, b, flip = carry
        a2 = a * 0.5 + qb.sin(b) * y + i * 0.1
        b2 = qb.where(flip, b - a2 * SHIFT, qb.tanh(b) + 1.0)
        return a2, b2, a2 > b2
    return qb.fori_loop(2, 9, body, (x, x * 2.0, x > 0.0))


def scan_program(x, y):
    """A scan stacking elementwise ys of every step."""
    import quabla as qb

    def body(carry, i):
        c, d = carry
        c2 = c * 0.9 + qb.exp(-d * d) * i
        return (c2, d + y * c2), (c2 * SHIFT, d - 1.0)
    return qb.scan(body, (x, y), length=5)


def reduction_program(x, y):
    """A body that sums its carry: not elementwise, so a host loop."""
    import quabla as qb

    return qb.fori_loop(0, 4, lambda i, c: c * 0.5 + qb.sum(c) * y, x)


def loss(x, y):
    import quabla as qb

    (c, d), (ys, zs) = scan_program(x, y)
    return qb.sum(c * d) + qb.sum(qb.sin(ys)) + qb.sum(zs * zs)


def grad_program(x, y):
    import quabla as qb

    return qb.grad(loss, argnums=(0, 1))(x, y)


def _executable(f, *args):
    import quabla as qb
    from quabla.lower import compile_graph as lower_compile

    graph = qb.jit(f).lower(*args).graph
    return graph, lower_compile(graph, "cuda")


def _parity(f, *args):
    """Compiles ``f`` for CUDA, checks two calls against the interpreter, returns the
    executable."""
    from quabla.core.interpret import evaluate

    graph, executable = _executable(f, *args)
    expected = evaluate(graph, list(args))
    first, second = executable(*args), executable(*args)
    assert len(first) == len(expected)
    for a, b, e in zip(first, second, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, e, rtol=2e-5, atol=1e-6)
    return executable


def _functions(source):
    """``{name: (is a kernel, body lines)}`` of the generated module."""
    out, name, kernel = {}, None, False
    for line in source.splitlines():
        if line.startswith("@cuda.jit"):
            kernel = True
        elif line.startswith("def "):
            name = line[4:line.index("(")]
            out[name] = (kernel, [])
            kernel = False
        elif name and line.startswith(" "):
            out[name][1].append(line)
    return out


def _host_loops(source):
    return [line for kernel, body in _functions(source).values() if not kernel
            for line in body if line.strip().startswith(("for ", "while "))]


def _loop_kernels(source):
    """The kernels that hold a loop over steps (a fused loop region)."""
    return [name for name, (kernel, body) in _functions(source).items()
            if kernel and any("for step in" in line for line in body)]


def case_fori_loop_is_one_kernel():
    executable = _parity(fori_program, X, Y)
    assert _host_loops(executable.source) == []
    assert len(_loop_kernels(executable.source)) == 1
    assert "for step in range(7):" in executable.source


def case_scan_with_ys_is_one_kernel():
    executable = _parity(scan_program, X, Y)
    assert _host_loops(executable.source) == []
    assert len(_loop_kernels(executable.source)) == 1


def case_reduction_body_keeps_the_host_loop():
    executable = _parity(reduction_program, X, Y)
    assert _host_loops(executable.source) == ["    for step in range(4):"]
    assert _loop_kernels(executable.source) == []


def case_scan_gradient_loops_are_kernels():
    """Reverse mode: the forward scan stacking its carries and the backward scan reading its
    step's rows (dynamic_index by the loop index) are both one kernel each."""
    executable = _parity(grad_program, X, Y)
    assert _host_loops(executable.source) == []
    assert len(_loop_kernels(executable.source)) == 2
    assert "range(4, -1, -1)" in executable.source  # the backward loop, in a kernel


def case_scalar_carries_and_float64():
    """0-d carries: one thread runs the loop."""
    import quabla as qb

    def f(x):
        return qb.fori_loop(0, 6, lambda i, c: (c[0] * 0.5 + i, qb.cos(c[1]) + c[0]),
                            (x[0], x[1]))
    executable = _parity(f, np.array([0.3, -0.7]))
    assert _host_loops(executable.source) == []


def case_nested_loop_stays_on_the_host():
    """A body holding a loop is a region: the outer loop stays a host loop (its inner loop
    is elementwise, a kernel)."""
    import quabla as qb

    def f(x):
        return qb.fori_loop(0, 3, lambda i, c: qb.fori_loop(0, 2, lambda j, d: d * 0.5 + j,
                                                            c) + 1.0, x)
    executable = _parity(f, X)
    assert _host_loops(executable.source) == ["    for step in range(3):"]
    assert len(_loop_kernels(executable.source)) == 1


def case_mixed_scalar_and_array_carries():
    """A 0-d carry beside array carries: every thread computes it alike."""
    import quabla as qb

    def f(x, y):
        def body(carry, i):
            t, a = carry
            return (t * 0.5 + i, a * qb.cos(t) + y), t * 2.0
        return qb.scan(body, (qb.sum(x), x), length=4)
    executable = _parity(f, X, Y)
    assert _host_loops(executable.source) == []
    assert len(_loop_kernels(executable.source)) == 1


def case_while_with_traced_bounds_is_one_kernel():
    """fori_loop with traced bounds is a while loop over (i, carry): its predicate reads the
    0-d counter only, so every thread runs the same steps in one kernel."""
    import quabla as qb

    def f(x, n):
        return qb.fori_loop(1, n, lambda i, c: qb.where(c > 0.0, c * 0.75, c + i), x)
    executable = _parity(f, X, np.float64(6.0))
    assert _host_loops(executable.source) == []
    assert "while True:" in executable.source


def case_while_with_a_reduced_predicate_keeps_the_host_loop():
    import quabla as qb

    def f(x, y):
        return qb.while_loop(lambda c: qb.sum(c * c) > 0.05, lambda c: c * 0.5 + y * 0.01, x)
    executable = _parity(f, X, Y)
    assert [line.split("(")[0] for line in _host_loops(executable.source)] == [
        "    while region0"]
    assert "while True:" not in executable.source


CASES = {name[5:]: fn for name, fn in list(globals().items()) if name.startswith("case_")}


def run_all():
    return cuda_runner.run_cases(CASES.items())


@pytest.fixture(scope="module")
def results():
    return cuda_runner.results(__file__, run_all, timeout=600)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_loops(results, name):
    assert results[name] == "ok", results[name]


if __name__ == "__main__":
    print(json.dumps(run_all()))
