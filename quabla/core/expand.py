"""Expansion: replace every node whose primitive has an ``expand`` rule by that rule's graph.

Solvers (``quabla.linalg.cg``, ``quabla.newton``, ``quabla.odeint``, ...) are primitives so that
the transforms see one node with implicit-differentiation rules; to run them, a back end only
needs their iteration, which ``expand`` writes with ordinary ops and control-flow regions.
Back ends only meet regions and plain ops.
Sub-graphs held in params (region bodies, a solver's operator) are expanded first, and an
expansion is expanded again until no such node is left. ``quabla.lower`` runs it before it
hands a graph to ``lowering``.
"""

from .graph import Graph
from .primitives import PRIMITIVES
from .replay import replay
from .rewrite import simplify
from .tracing import TraceFrame, bind, trace_frame

__all__ = ["expand", "needs_expansion"]


def needs_expansion(graph):
    """Whether ``graph`` or a sub-graph of its nodes holds an op with an ``expand`` rule."""
    return any(node.op in PRIMITIVES and PRIMITIVES[node.op].expand is not None
               for node in graph.walk())


def _expand_node(node, args):
    """``node``'s expansion, or the node itself with its sub-graphs expanded."""
    params = Graph.map_sub_graphs(node, expand)
    rule = PRIMITIVES[node.op].expand
    return rule(*args, **params) if rule is not None else bind(node.op, *args, **params)


def expand(graph):
    """``graph`` with every expandable node replaced by its expansion (the same graph if none)."""
    if not needs_expansion(graph):
        return graph
    frame = TraceFrame()
    with trace_frame(frame):
        inputs = [frame.input_like(graph, k) for k in range(len(graph.inputs))]
        outs = replay(graph, inputs, _expand_node)
        result = frame.build([frame.operand(v) for v in outs])
    return expand(simplify(result))
