"""Forward mode: the JVP of a graph, as a new graph with tangent inputs and outputs."""

from .. import ops
from ..core.primitives import PRIMITIVES, Zero, is_zero
from ..core.rewrite import simplify
from ..core.tracing import TraceFrame, bind, trace_frame
from .inline import constant_tensor

__all__ = ["jvp_graph", "materialize"]


def materialize(value, shape, dtype):
    """A concrete zero for a symbolic ``Zero`` where a graph output needs one."""
    if is_zero(value):
        return ops.broadcast_to(ops.weak_scalar(0, dtype), shape) if shape else ops.weak_scalar(0, dtype)
    return value


def jvp_graph(graph, tangent_mask):
    """Inputs: the primal inputs, then one tangent input per input with ``tangent_mask`` set.
    Outputs: the primal outputs, then one tangent per output (zeros where it has none)."""
    frame = TraceFrame()
    with trace_frame(frame):
        names = graph.input_names
        primals = [frame.input_like(graph, k) for k in range(len(graph.inputs))]
        tangents = [
            frame.new_input(shape, dtype, f"tangent/{names[k]}") if flag
            else Zero(shape, dtype)
            for k, (flag, (shape, dtype)) in enumerate(zip(tangent_mask, graph.in_avals))
        ]
        env = dict(zip(graph.inputs, primals))
        tenv = dict(zip(graph.inputs, tangents))
        for nid, node in enumerate(graph.nodes):
            if node.op == "input":
                continue
            if node.op == "constant":
                env[nid] = constant_tensor(node)
                tenv[nid] = Zero(node.shape, node.dtype)
                continue
            if node.op == "get":  # one result of a multi-result node
                k = node.kw["index"]
                env[nid], tenv[nid] = env[node.operands[0]][k], tenv[node.operands[0]][k]
                continue
            args = [env[o] for o in node.operands]
            params = dict(node.params)
            out = env[nid] = bind(node.op, *args, **params)
            ts = [tenv[o] for o in node.operands]
            prim = PRIMITIVES[node.op]
            if prim.multiple_results:
                tenv[nid] = (
                    prim.jvp(args, ts, out, **params) if not all(is_zero(t) for t in ts)
                    else [Zero(o.shape, o.dtype) for o in out]
                )
            elif not prim.differentiable or not node.dtype.is_floating or all(is_zero(t) for t in ts):
                tenv[nid] = Zero(node.shape, node.dtype)
            else:
                tenv[nid] = prim.jvp(args, ts, out, **params)
        outs = [env[o] for o in graph.outputs]
        touts = [materialize(tenv[o], *graph.out_avals[k]) for k, o in enumerate(graph.outputs)]
        result = frame.build([frame.operand(v) for v in outs + touts])
    return simplify(result)
