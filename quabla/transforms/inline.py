"""Inline: splice a graph into whatever is being traced (or evaluate it eagerly)."""

from ..core.graph import aval_text
from ..core.replay import replay

__all__ = ["inline"]


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
    return replay(graph, args)
