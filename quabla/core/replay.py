"""Replay: a graph run node by node into whatever is being traced (or evaluated eagerly).

Every transform walks its source graph the same way (``inline``, ``jvp_graph``, the forward
sweep of ``vjp_graph``, ``batch_graph``, solver ``expand``): inputs take the given values,
constants become eager Tensors, a ``get`` picks one result of the multi-result node it reads,
and every other node is computed by the transform's own rule. ``replay`` is that walk, so a
transform writes only what it does with one node.

A transform that carries more than one value per node (a primal and its tangent, a value and
whether it is batched) makes each value a pair; a multi-result node's value is then a list
of pairs, one per result, so ``get`` needs no help.
"""

from ..array import Tensor
from .tracing import bind

__all__ = ["replay", "replay_values"]


def _bind_node(node, args):
    """``node``'s op bound to ``args``: the node as it is (``replay``'s default rule)."""
    return bind(node.op, *args, **node.kw)


def replay_values(graph, inputs, apply=_bind_node, constant=None):
    """The value of every node of ``graph`` (a list indexed by node id), its inputs taking
    ``inputs``: ``apply(node, args)`` computes a node from its operands' values;
    ``constant(tensor)``, if given, turns a constant's Tensor into a value."""
    values = [None] * len(graph.nodes)
    for nid, value in zip(graph.inputs, inputs):
        values[nid] = value
    given = set(graph.inputs)
    for nid, node in enumerate(graph.nodes):
        if nid in given:
            continue
        if node.op == "constant":
            value = Tensor.wrap(node.kw["value"].value, node.weak)
            values[nid] = value if constant is None else constant(value)
        elif node.op == "get":
            values[nid] = values[node.operands[0]][node.kw["index"]]
        else:
            values[nid] = apply(node, [values[o] for o in node.operands])
    return values


def replay(graph, inputs, apply=_bind_node, constant=None):
    """The values of ``graph``'s outputs (see ``replay_values``)."""
    values = replay_values(graph, inputs, apply, constant)
    return [values[o] for o in graph.outputs]
