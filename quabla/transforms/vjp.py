"""Reverse mode: the VJP of a graph, as a new graph that returns the primal outputs and the
gradients of selected inputs. Cotangents are accumulated symbolically; zeros stay ``Zero``.

A value's cotangent is the sum of its uses' contributions in the order the uses were traced
(``_total``), not in the order the backward walk reaches them: a use traced later (another
loss term, an L2 penalty) then adds one node at the end of each sum and leaves the earlier
partial sums, and what the lowering builds from them, as they were (edit-and-rerun)."""

from .. import ops
from ..core.dependence import node_dependence
from ..core.primitives import PRIMITIVES, Zero, is_zero
from ..core.replay import replay_values
from ..core.rewrite import simplify
from ..core.tracing import TraceFrame, trace_frame
from .jvp import materialize

__all__ = ["vjp_graph"]


def vjp_graph(graph, wrt, seeds):
    """``wrt``: indices of the inputs to differentiate. ``seeds``: per output, "input" (a
    cotangent input is added), "ones" (seeded with ones, as grad does), or None.

    Inputs: the primal inputs, then one cotangent input per output seeded "input".
    Outputs: the primal outputs, then the gradient of each ``wrt`` input.
    """
    frame = TraceFrame()
    with trace_frame(frame):
        primals = [frame.input_like(graph, k) for k in range(len(graph.inputs))]
        env = replay_values(graph, primals)
        cts = {}
        for k, (o, seed) in enumerate(zip(graph.outputs, seeds)):
            shape, dtype = graph.out_avals[k]
            if seed is None or not dtype.is_floating:
                continue
            if seed == "input":
                ct = frame.new_input(shape, dtype, f"cotangent/{k}")
            else:
                ct = ops.broadcast_to(ops.weak_scalar(1, dtype), shape) if shape else ops.weak_scalar(1, dtype)
            _accumulate(cts, o, ct, dtype)
        wrt_positions = frozenset(wrt)
        active = {nid for nid, d in node_dependence(graph).items() if d & wrt_positions}
        for nid in range(len(graph.nodes) - 1, -1, -1):
            node = graph.nodes[nid]
            if nid not in cts or nid not in active or not node.operands:  # an input: nothing
                continue
            ct = cts[nid]  # a multi-result node's: a dict by result
            ct = ct if isinstance(ct, dict) else _total(ct)
            if node.op == "get":  # a multi-result node collects its cotangents per result
                cts.setdefault(node.operands[0], {})[node.kw["index"]] = ct
                continue
            prim = PRIMITIVES[node.op]
            if not prim.differentiable:
                continue
            args = [env[o] for o in node.operands]
            params = dict(node.params)
            if prim.multiple_results:
                ct = [ct.get(k, Zero(o.shape, o.dtype)) for k, o in enumerate(env[nid])]
            if prim.vjp_wanted:
                params["wanted"] = [o in active and graph.nodes[o].dtype.is_floating
                                    for o in node.operands]
            operand_cts = prim.vjp(ct, args, env[nid], **params)
            for o, oct in zip(node.operands, operand_cts):
                if not is_zero(oct) and o in active and graph.nodes[o].dtype.is_floating:
                    _accumulate(cts, o, oct, graph.nodes[o].dtype)
        outs = [env[o] for o in graph.outputs]
        grads = [
            materialize(_total(cts.get(graph.inputs[k])), *graph.in_avals[k]) for k in wrt
        ]
        result = frame.build([frame.operand(v) for v in outs + grads])
    return simplify(result)


def _accumulate(cts, nid, value, dtype):
    """Add ``value`` to the contributions to ``nid``'s cotangent, in ``nid``'s ``dtype``: a
    rule's weak float64 constants (a ``where(x > 0, 1.0, 0.0)`` partial) times a weak
    cotangent would otherwise widen a float32 program's gradients to float64."""
    cts.setdefault(nid, []).append(ops.astype(value, dtype))


def _total(contributions):
    """The sum of ``contributions`` (as the backward walk reached them, the last use first)
    in the order of their uses; None for none."""
    if not contributions:
        return None
    total = contributions[-1]
    for value in reversed(contributions[:-1]):
        total = ops.add(total, value)
    return total
