"""The MLX back end: a graph becomes one Python function of ``mlx.core`` calls (``rules.lowering``),
wrapped in ``mx.compile``. A graph holding a loop region is not one compiled function: its loops
are Python loops calling their compiled bodies.

Every op of the graph, sub-graphs of regions included, is checked against the table before
anything runs. A program runs in float32 on the default device (Apple's GPU; mlx[cpu] on Linux
has only the CPU), a float64 one narrowed with one ``PrecisionWarning`` per function;
``precision="float64"`` keeps float64 on MLX's CPU stream instead (refusing sin and cos, which
MLX computes there only to float32 accuracy). MLX's graph building and
evaluation are not thread-safe, so calls run under one process-wide lock.
"""

import threading

import mlx.core as mx
import numpy as np

from quabla import dtypes as _dt
from quabla.errors import UnsupportedOperationError

from ..precision import requested, warn_narrowed
from .rules import FLOAT32_ACCURATE, lowering

__all__ = ["compile_graph", "check_supported", "check_float64", "MlxExecutable", "DEVICE"]

DEVICE = "mlx"
_LOCK = threading.Lock()


def check_supported(graph, device=DEVICE):
    """Raise ``UnsupportedOperationError`` for the first op (in any region) MLX cannot lower."""
    for node in graph.walk():
        if node.op not in ("input", "constant") and lowering(node.op) is None:
            raise UnsupportedOperationError(
                f"operation {node.op!r} has no MLX lowering; run this function on device='cpu'",
                op=node.op, device=DEVICE,
            )


def check_float64(graph):
    """Under ``precision="float64"``: raise for an op MLX computes in float64 only to float32
    accuracy (sin, cos), rather than return float32-accurate float64 results."""
    for node in graph.walk():
        if node.op in FLOAT32_ACCURATE and node.dtype is _dt.float64:
            raise UnsupportedOperationError(
                f"MLX computes {node.op!r} in float64 only to float32 accuracy, so it cannot "
                "keep precision='float64'; run this function on device='cpu', or without "
                "precision= in float32",
                op=node.op, device=DEVICE,
            )


class _Context:
    """What the rules need to know: the MLX dtype of each program dtype, the linalg stream, and
    the lowered function of each (sub-)graph, made once per graph."""

    def __init__(self, float64):
        self.types = {_dt.float32: mx.float32, _dt.bool_: mx.bool_,
                      _dt.float64: mx.float64 if float64 else mx.float32}
        self.linalg = mx.cpu
        self._functions = {}

    def dtype(self, dtype):
        return self.types[dtype]

    @staticmethod
    def loops(graph):
        """Whether ``graph`` holds a loop (in any region): its Python loop, and a ``while``'s
        test, run on the host, so the graph cannot be one compiled MLX function."""
        return any(node.op in ("scan", "while") for node in graph.walk())

    def inline(self, graph):
        """``graph`` as a function of MLX arrays, to be traced into the caller's program."""
        return _program(graph, self)

    def function(self, graph):
        """``graph`` lowered on its own: compiled with ``mx.compile`` unless it loops."""
        fn = self._functions.get(graph)
        if fn is None:
            fn = self._functions[graph] = (
                self.inline(graph) if self.loops(graph) else mx.compile(self.inline(graph)))
        return fn


def _program(graph, ctx):
    """The graph as a function of MLX arrays (one per input) returning a list of arrays."""
    constants = {nid: mx.array(node.kw["value"].value, dtype=ctx.dtype(node.dtype))
                 for nid, node in enumerate(graph.nodes) if node.op == "constant"}
    steps = [(nid, lowering(node.op), node.operands, dict(node.params))
             for nid, node in enumerate(graph.nodes) if node.op not in ("input", "constant")]

    def program(*inputs):
        env = dict(constants)
        env.update(zip(graph.inputs, inputs))
        for nid, rule, operands, params in steps:
            env[nid] = rule(ctx, *[env[o] for o in operands], **params)
        return [env[o] for o in graph.outputs]

    return program


class MlxExecutable:
    """Called with one ndarray per input, it returns a list of C-contiguous ndarrays in the
    program's declared dtypes; ``run`` is the same call.

    The resident call keeps values in MLX memory between calls (the Trainer's steps):
    ``to_device(array)`` makes an ``mx.array`` in the dtype the program runs, ``resident(*xs)``
    takes and returns ``mx.array``s, evaluated (so no lazy graph grows across calls) but not
    copied out, and ``to_host(x, shape, dtype)`` is the explicit readback."""

    source = None  # no generated text: the program is the table's calls

    def __init__(self, graph, compiled, stream, ctx):
        self.graph = graph
        self._compiled = compiled
        self._stream = stream
        self._in_types = [ctx.dtype(graph.nodes[i].dtype) for i in graph.inputs]
        self._out_types = [graph.nodes[o].dtype.numpy for o in graph.outputs]
        self._types = {dtype.numpy: ctx.dtype(dtype) for dtype in ctx.types}

    def __call__(self, *args):
        return self.run(*args)

    def run(self, *args):
        with _LOCK, mx.stream(self._stream):
            outs = self._compiled(*[mx.array(a, dtype=t) for a, t in zip(args, self._in_types)])
            mx.eval(outs)
            return [np.array(o, dtype=t, order="C") for o, t in zip(outs, self._out_types)]

    def resident(self, *values):
        with _LOCK, mx.stream(self._stream):
            outs = self._compiled(*values)
            mx.eval(outs)
            return outs

    def to_device(self, array):
        with _LOCK:
            return mx.array(array, dtype=self._types[array.dtype])

    def to_host(self, value, shape, dtype):
        with _LOCK:
            return np.array(value, dtype=dtype, order="C").reshape(shape)


def compile_graph(graph, options):
    """An executable for ``graph`` on MLX (``options``: ``precision``, and ``name``/``function``
    naming the program in the precision warning)."""
    check_supported(graph)
    keep = requested(options) == "float64"
    if keep:
        check_float64(graph)
    else:
        warn_narrowed(graph, DEVICE, options)
    ctx = _Context(float64=keep)
    stream = mx.cpu if keep else mx.default_device()
    return MlxExecutable(graph, ctx.function(graph), stream, ctx)
