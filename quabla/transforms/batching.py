"""vmap's engine: batch a graph over a leading axis of selected inputs, rule by rule."""

from .. import ops
from ..core.graph import RESULTS
from ..core.primitives import PRIMITIVES
from ..core.rewrite import simplify
from ..core.tracing import TraceFrame, bind, trace_frame
from .inline import constant_tensor

__all__ = ["batch_graph"]


def batch_graph(graph, mapped, size, out_mapped=None):
    """Inputs with ``mapped`` set gain a leading axis of ``size``.

    Returns ``(graph, out_batched)``. With ``out_mapped`` given (one flag per output), every
    output with its flag set is batched, broadcasting those that do not depend on a mapped
    input; the others are returned as they are (the caller checks they are unbatched).
    """
    frame = TraceFrame()
    with trace_frame(frame):
        env, batched = {}, {}
        for k, (nid, flag) in enumerate(zip(graph.inputs, mapped)):
            shape, dtype = graph.in_avals[k]
            env[nid] = frame.input_like(graph, k, ((size,) if flag else ()) + tuple(shape))
            batched[nid] = flag
        for nid, node in enumerate(graph.nodes):
            if node.op == "input":
                continue
            if node.op == "constant":
                env[nid], batched[nid] = constant_tensor(node), False
                continue
            if node.op == "get":  # one result of a multi-result node
                k = node.kw["index"]
                env[nid], batched[nid] = env[node.operands[0]][k], batched[node.operands[0]][k]
                continue
            args = [env[o] for o in node.operands]
            flags = [batched[o] for o in node.operands]
            params = dict(node.params)
            if any(flags):
                env[nid], batched[nid] = PRIMITIVES[node.op].batch(args, flags, size, **params)
            else:
                env[nid] = bind(node.op, *args, **params)
                batched[nid] = [False] * len(env[nid]) if node.dtype is RESULTS else False
        outs, out_flags = [], []
        for k, o in enumerate(graph.outputs):
            value, flag = env[o], batched[o]
            if out_mapped is not None and out_mapped[k] and not flag:
                value, flag = ops.broadcast_to(value, (size,) + tuple(value.shape)), True
            outs.append(value)
            out_flags.append(flag)
        result = frame.build([frame.operand(v) for v in outs])
    return simplify(result), tuple(out_flags)
