"""vmap's engine: batch a graph over a leading axis of selected inputs, rule by rule."""

from .. import ops
from ..core.graph import RESULTS
from ..core.primitives import PRIMITIVES
from ..core.replay import replay
from ..core.rewrite import simplify
from ..core.tracing import TraceFrame, bind, trace_frame

__all__ = ["batch_graph"]


def batch_graph(graph, mapped, size, out_mapped=None):
    """Inputs with ``mapped`` set gain a leading axis of ``size``.

    Returns ``(graph, out_batched)``. With ``out_mapped`` given (one flag per output), every
    output with its flag set is batched, broadcasting those that do not depend on a mapped
    input; the others are returned as they are (the caller checks they are unbatched).
    """
    frame = TraceFrame()
    with trace_frame(frame):
        inputs = [(frame.input_like(graph, k, ((size,) if flag else ()) + tuple(shape)), flag)
                  for k, (flag, (shape, _)) in enumerate(zip(mapped, graph.in_avals))]

        def batch_node(node, args):
            """``(value, batched)`` of ``node`` (a list of pairs for a multi-result node)."""
            values, flags = [v for v, _ in args], [f for _, f in args]
            if any(flags):
                out, batched = PRIMITIVES[node.op].batch(values, flags, size, **node.kw)
            else:
                out = bind(node.op, *values, **node.kw)
                batched = [False] * len(out) if node.dtype is RESULTS else False
            return list(zip(out, batched)) if node.dtype is RESULTS else (out, batched)

        outs, out_flags = [], []
        for k, (value, flag) in enumerate(replay(graph, inputs, batch_node,
                                                 constant=lambda c: (c, False))):
            if out_mapped is not None and out_mapped[k] and not flag:
                value, flag = ops.broadcast_to(value, (size,) + tuple(value.shape)), True
            outs.append(value)
            out_flags.append(flag)
        result = frame.build([frame.operand(v) for v in outs])
    return simplify(result), tuple(out_flags)
