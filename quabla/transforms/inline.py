"""Inline: splice a graph into whatever is being traced (or evaluate it eagerly)."""

from ..array import Tensor
from ..core.graph import aval_text
from ..core.tracing import bind

__all__ = ["inline", "constant_tensor"]


def constant_tensor(node):
    """The eager Tensor that a ``constant`` node holds."""
    return Tensor.wrap(node.kw["value"].value, node.weak)


def inline(graph, args):
    """Bind every node of ``graph`` with ``args`` for its inputs; returns its outputs.

    Called inside a trace, the nodes join that trace (this is how transformed functions
    compose); called with eager Tensors, the graph is evaluated op by op.
    """
    if len(args) != len(graph.inputs):
        raise TypeError(f"inline: {len(args)} bindings for {len(graph.inputs)} graph inputs")
    for nid, name, arg in zip(graph.inputs, graph.input_names, args):
        node = graph.nodes[nid]
        if tuple(arg.shape) != node.shape or arg.dtype is not node.dtype:
            raise TypeError(
                f"inline: input {name} is {aval_text(node.shape, node.dtype)} but is bound to "
                f"{aval_text(tuple(arg.shape), arg.dtype)}"
            )
    env = dict(zip(graph.inputs, args))
    for nid, node in enumerate(graph.nodes):
        if node.op == "input":
            continue
        if node.op == "constant":
            env[nid] = constant_tensor(node)
        elif node.op == "get":
            env[nid] = env[node.operands[0]][node.kw["index"]]
        else:
            env[nid] = bind(node.op, *[env[o] for o in node.operands], **dict(node.params))
    return [env[o] for o in graph.outputs]
