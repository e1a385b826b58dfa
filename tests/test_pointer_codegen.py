"""The Numba CPU entry indexes typed pointers with static row-major offsets (no ``carray``
arrays, no tuple indices) and computes what the interpreter computes: multi-dimensional,
strided, reversed, padded, reshaped and bool arrays, products of every kind (loops, the
runtime's ``_matmul``, BLAS with transposed operands, batched BLAS), stacked linear algebra
and loop-carried region buffers."""

import re

import numpy as np
import pytest

import quabla as qb
from helpers import assert_results_match
from quabla.core.interpret import evaluate
from lowering.numba_cpu import compile_graph
from lowering.numba_cpu.codegen import KERNELS
from lowering.numba_cpu.linalg import blas_available
from lowering.numba_cpu.source import flat_index
from quabla.core.tracing import bind

# the runtime's kernels that take arrays: the only place a carray view may appear
_ARRAY_KERNELS = ("_matmul(",) + tuple(kernel + "(" for kernel in KERNELS)
_TUPLE_INDEX = re.compile(r"\w\[[^\[\]]*,[^\[\]]*\]")


def _without_calls(line):
    """``line`` with every bracketed group left out (call arguments hold commas)."""
    while True:
        shorter = re.sub(r"\([^()]*\)", "", line)
        if shorter == line:
            return line
        line = shorter


def _structural(x, y, i):
    t = qb.transpose(x)                                  # (6, 4)
    strided = x[::2, 1::2]                               # (2, 3)
    flipped = bind("rev", x, dimensions=(0, 1))
    padded = bind("pad", strided, low=(1, 0), high=(0, 2), interior=(1, 0))   # (4, 5)
    joined = qb.concat([x, flipped * 2.0], axis=1)       # (4, 12)
    reshaped = qb.reshape(joined, (3, 16))
    row = reshaped[i]                                    # a dynamic row (16,)
    mask = (t @ y) > 0.0                                 # a bool (6, 6) result
    picked = qb.where(mask, t @ y, -1.0)
    return (qb.sum(reshaped * reshaped, axis=0), padded, row, mask, picked,
            qb.sum(strided) + qb.max(t))


def _products(a, b, c, d):
    small = qb.einsum("bij,bjk->bik", c, c)              # a loop nest (B = 2)
    medium = a[:16, :16] @ b[:16, :32]                   # _matmul: 8192 multiply-adds
    big_t = qb.tanh(a.T @ b.T)                           # BLAS, both operands transposed
    batched = qb.einsum("bij,bjk->bik", d, d)            # batched BLAS
    return small, medium, big_t, batched


def _regions(xs, h0, m):
    def body(carry, k):
        h, grid = carry
        h = qb.tanh(h * 0.9 + xs[k])
        grid = grid * 0.5 + m
        return (h, grid), (h * 2.0, grid[1])

    (h, grid), (hs, rows) = qb.scan(body, (h0, m), length=5)
    ok = qb.cond(qb.sum(h) > 0.0, lambda g: g * 2.0, lambda g: -g, grid)
    n, w = qb.while_loop(lambda s: s[0] < 4.0, lambda s: (s[0] + 1.0, s[1] @ m * 0.5),
                         (qb.array(0.0), m))
    return h, hs, rows, ok, w, n


def _scan_loss(xs, h0):
    def body(h, k):
        return qb.tanh(h * 0.7 + xs[k]), qb.sum(h)

    h, ys = qb.scan(body, h0, length=4)
    return qb.sum(h * h) + qb.sum(ys)


def _linalg(a, b):
    spd = a @ qb.transpose(a, (0, 2, 1)) + 3.0 * qb.eye(3)
    return qb.linalg.solve(spd, b), qb.linalg.cholesky(spd)


def _mlp(params, x):
    h = x[:, None]
    for w, c in params[:-1]:
        h = qb.tanh(h @ w + c)
    w, c = params[-1]
    return qb.sum((h @ w + c) ** 2)


rng = np.random.default_rng(21)
_u = lambda *shape: rng.uniform(-1.0, 1.0, shape)
_mlp_params = [(_u(a, b), _u(b)) for a, b in [(1, 8), (8, 8), (8, 1)]]

CASES = {
    "structural": (_structural, lambda: [_u(4, 6), _u(4, 6), np.array(1.7)]),
    "products": (_products, lambda: [_u(64, 64), _u(64, 64), _u(2, 3, 3), _u(2, 64, 64)]),
    "regions": (_regions, lambda: [_u(5, 3), _u(3), _u(3, 3)]),
    "scan_grad": (qb.value_and_grad(_scan_loss, argnums=(0, 1)), lambda: [_u(4, 3), _u(3)]),
    "linalg": (_linalg, lambda: [_u(2, 3, 3), _u(2, 3, 2)]),
    "mlp_grad": (qb.value_and_grad(_mlp), lambda: [_mlp_params, np.linspace(0.0, 1.0, 256)]),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def compiled(request):
    fn, data = CASES[request.param]
    args = data()
    lowered = qb.jit(fn).lower(*qb.tree.map(qb.array, args))
    return request.param, lowered, compile_graph(lowered.graph, {}), data


def test_entry_indexes_pointers_only(compiled):
    name, lowered, _, _ = compiled
    lines = lowered.source.splitlines()
    for line in lines:
        if "carray(" in line:
            assert any(kernel in line for kernel in _ARRAY_KERNELS), line
        assert not _TUPLE_INDEX.search(_without_calls(line)), line
    if name == "products" and blas_available():
        # the 2-d product, and the batch of two (a loop this short is written out)
        assert sum("_gemm(" in line for line in lines) == 3


def test_matches_interpreter_twice(compiled):
    _, lowered, run, data = compiled
    graph = lowered.graph
    for args in (data(), data()):
        values = [np.array(a, dtype=graph.nodes[n].dtype.numpy)
                  for a, n in zip(qb.tree.leaves(args), graph.inputs)]
        assert_results_match(run(*values), evaluate(graph, values), rtol=1e-11, atol=1e-12)


def test_offsets_fold_literals_and_unit_axes():
    assert flat_index((3, 4, 5), ["i0", "i1", "i2"]) == "20 * i0 + 5 * i1 + i2"
    assert flat_index((3, 4, 5), ["2", "i1", "1"]) == "5 * i1 + 41"
    assert flat_index((1, 4), ["j", "k + 1"]) == "k + 1"
    assert flat_index((6, 2), ["(r + i0)", "3 - i1"]) == "2 * (r + i0) + 3 - i1"
    assert flat_index((2, 2), ["0", "0"]) == "0"


def test_copies_and_zero_fills_are_calls_not_loops():
    """Carry copies are one memmove (``_copy``) and zero fills one memset (``_zero``): a loop
    each cost Numba typing and LLVM a vectorised loop with overlap checks (a third of the
    scan integrator's cold compile)."""
    from lowering.numba_cpu import module_source

    def f(x, w):
        def body(c, i):
            return (c[0] * w + c[1], qb.sin(c[0])), c[0] * 2.0
        (a, b), ys = qb.scan(body, (x, x * 0.5), length=5)
        return qb.sum(a * b) + qb.sum(ys)

    spec = qb.ShapeDtype((16,), qb.float64)
    source = "".join(module_source(qb.jit(qb.value_and_grad(f)).lower(spec, spec).graph)[0])
    sums = qb.jit(lambda x: qb.sum(qb.sin(x), axis=0)).lower(qb.ShapeDtype((8, 16), qb.float64))
    source += "".join(module_source(sums.graph)[0])  # its accumulator row starts as zeros
    assert "_copy(" in source and "_zero(" in source
    single_copy_loop = re.compile(r"while i0 < \d+:\n +\w+\[i0\] = \w+\[i0\]\n +i0 \+= 1\n")
    zero_loop = re.compile(r"while i0 < \d+:\n +\w+\[i0\] = (0|0\.0|False)\n +i0 \+= 1\n")
    assert not single_copy_loop.search(source) and not zero_loop.search(source)


def test_an_offset_read_several_times_in_a_loop_body_is_computed_once():
    """An innermost loop body binds each element offset it reads more than once to a local
    (Numba types and lowers every occurrence of the arithmetic), and computes what the
    interpreter computes."""
    from lowering.numba_cpu import module_source

    def f(x, y):
        return qb.sin(x) * x + y * x, qb.sum(x * y, axis=1)

    specs = (qb.ShapeDtype((16, 8), qb.float64),) * 2
    lowered = qb.jit(f).lower(*specs)
    source = "".join(module_source(lowered.graph)[0])
    assert "o0 = 8 * i0 + i1" in source and "[8 * i0 + i1]" not in source
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((16, 8)), rng.standard_normal((16, 8))
    native = [np.asarray(a) for a in lowered.compile()(x, y)]
    assert_results_match(native, evaluate(lowered.graph, [x, y]), rtol=1e-13, atol=1e-14)
