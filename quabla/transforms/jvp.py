"""Forward mode: the JVP of a graph, as a new graph with tangent inputs and outputs."""

from .. import ops
from ..core.primitives import PRIMITIVES, Zero, is_zero
from ..core.replay import replay
from ..core.rewrite import simplify
from ..core.tracing import TraceFrame, bind, trace_frame

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
        pairs = replay(graph, list(zip(primals, tangents)), _jvp_node,
                       constant=lambda c: (c, Zero(c.shape, c.dtype)))
        outs = [p for p, _ in pairs]
        touts = [materialize(t, *graph.out_avals[k]) for k, (_, t) in enumerate(pairs)]
        result = frame.build([frame.operand(v) for v in outs + touts])
    return simplify(result)


def _jvp_node(node, args):
    """``(primal, tangent)`` of ``node`` from its operands' pairs (a list of pairs, one per
    result, for a multi-result node)."""
    primals, tangents = [p for p, _ in args], [t for _, t in args]
    params = node.kw
    out = bind(node.op, *primals, **params)
    prim = PRIMITIVES[node.op]
    zero = all(is_zero(t) for t in tangents)
    if prim.multiple_results:
        touts = ([Zero(o.shape, o.dtype) for o in out] if zero
                 else prim.jvp(primals, tangents, out, **params))
        return list(zip(out, touts))
    if zero or not prim.differentiable or not node.dtype.is_floating:
        return out, Zero(node.shape, node.dtype)
    return out, prim.jvp(primals, tangents, out, **params)
