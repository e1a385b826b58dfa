"""Expansion: replace every node whose primitive has an ``expand`` rule by that rule's graph.

Solvers (``quabla.linalg.cg``, ``quabla.newton``, ``quabla.odeint``, ...) are primitives so that
the transforms see one node with implicit-differentiation rules; to run them, a back end only
needs their iteration, which ``expand`` writes with ordinary ops and control-flow regions.
Back ends only meet regions and plain ops.
Sub-graphs held in params (region bodies, a solver's operator) are expanded first, and an
expansion is expanded again until no such node is left. ``quabla.lower`` runs it before it
hands a graph to ``lowering``.
"""

from ..array import Tensor
from .graph import Graph
from .primitives import PRIMITIVES
from .rewrite import simplify
from .tracing import TraceFrame, bind, trace_frame

__all__ = ["expand", "needs_expansion"]


def needs_expansion(graph):
    """Whether ``graph`` or a sub-graph of its nodes holds an op with an ``expand`` rule."""
    return any(node.op in PRIMITIVES and PRIMITIVES[node.op].expand is not None
               for node in graph.walk())


def _expanded_params(node):
    params = {}
    for name, value in node.params:
        if isinstance(value, Graph):
            value = expand(value)
        elif isinstance(value, tuple) and any(isinstance(v, Graph) for v in value):
            value = tuple(expand(v) if isinstance(v, Graph) else v for v in value)
        params[name] = value
    return params


def expand(graph):
    """``graph`` with every expandable node replaced by its expansion (the same graph if none)."""
    if not needs_expansion(graph):
        return graph
    frame = TraceFrame()
    with trace_frame(frame):
        env = {nid: frame.input_like(graph, k) for k, nid in enumerate(graph.inputs)}
        for nid, node in enumerate(graph.nodes):
            if node.op == "input":
                continue
            if node.op == "constant":
                env[nid] = Tensor.wrap(node.kw["value"].value, node.weak)
                continue
            if node.op == "get":
                env[nid] = env[node.operands[0]][node.kw["index"]]
                continue
            args = [env[o] for o in node.operands]
            params = _expanded_params(node)
            rule = PRIMITIVES[node.op].expand
            env[nid] = rule(*args, **params) if rule is not None else bind(node.op, *args, **params)
        result = frame.build([frame.operand(env[o]) for o in graph.outputs])
    return expand(simplify(result))
