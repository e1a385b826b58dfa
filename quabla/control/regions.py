"""Region bodies: user functions traced into sub-graphs, and the graph surgery regions need.

A body is traced in a fresh ``TraceFrame`` with one input per leaf of its arguments; what it
closes over becomes capture inputs (enclosing tracers) or constants (eager arrays), so a region
node's operands are its explicit inputs followed by the outer values of its captures. Loop
bodies then have their loop-invariant part hoisted out (``hoist``): it runs once, before the
loop, and reaches the body as operands.
"""

import numpy as np

from .. import dtypes as _dt
from .. import tree
from ..array import Array, asarray
from ..core.graph import GraphBuilder, aval_text
from ..core.rewrite import simplify
from ..core.tracing import TraceFrame, trace_frame
from ..ops import astype, weak_scalar

__all__ = ["Body", "trace_body", "as_leaf", "hoist", "with_inputs", "aval", "aval_texts"]

_PYTHON_SCALARS = (bool, int, float)


def as_leaf(value, what):
    """An array for one leaf of a carry, an operand or a body's result: Python numbers become
    weak scalars (they adopt the dtype of the arrays they meet), NumPy data is imported."""
    if isinstance(value, Array):
        return value
    if isinstance(value, _PYTHON_SCALARS):
        return weak_scalar(value, _dt.bool_ if isinstance(value, bool) else _dt.float64)
    if isinstance(value, (np.ndarray, np.generic)):
        return asarray(value)
    raise TypeError(f"{what} has a {type(value).__name__} leaf; carries, operands and results of "
                    "control flow must be arrays, Python numbers or pytrees of them")


def aval(x):
    """(shape, dtype) of an array or a graph node."""
    return tuple(x.shape), x.dtype


def aval_texts(avals):
    return "(" + ", ".join(aval_text(*a) for a in avals) + ")"


class Body:
    """A traced body: ``graph`` (inputs: the argument leaves, then one per capture), the outer
    values of its ``captures``, and the treedef of its result."""

    __slots__ = ("graph", "captures", "out_tree")

    def __init__(self, graph, captures, out_tree):
        self.graph = graph
        self.captures = captures
        self.out_tree = out_tree

    @property
    def out_avals(self):
        return self.graph.out_avals


def trace_body(fun, args, what, cast=None):
    """Trace ``fun(*args)`` where ``args`` are pytrees of arrays (only their avals and weak flags
    are used). ``cast``: a dtype (or None) per result leaf, applied to the results (a weak
    Python number returned where an array of another dtype is expected)."""
    frame = TraceFrame()
    with trace_frame(frame):
        call_args = []
        for a in args:
            leaves, treedef = tree.flatten(a)
            call_args.append(treedef.unflatten([
                frame.new_input(leaf.shape, leaf.dtype, f"{what}/in{len(frame.inputs)}",
                                leaf.weak) for leaf in leaves]))
        out_leaves, out_tree = tree.flatten(fun(*call_args))
        results = [as_leaf(leaf, f"the result of {what}") for leaf in out_leaves]
        if cast is not None:
            results = [r if d is None or r.dtype is d else astype(r, d)
                       for r, d in zip(results, cast)]
        graph = frame.build([frame.operand(r) for r in results])
    return Body(simplify(graph), list(frame.captures), out_tree)


def with_inputs(graph, avals, at):
    """``graph`` with unused inputs of ``avals`` (``(shape, dtype, weak)``) inserted before its
    input ``at``: branches and loop parts that take one shared operand list."""
    b = GraphBuilder()
    remap = {}
    olds = list(graph.inputs)
    for k, nid in enumerate(olds[:at]):
        remap[nid] = b.input(*aval(graph.nodes[nid]), graph.input_names[k], graph.nodes[nid].weak)
    for shape, dtype, weak in avals:
        b.input(shape, dtype, f"unused{len(b.inputs)}", weak)
    for k, nid in enumerate(olds[at:], at):
        remap[nid] = b.input(*aval(graph.nodes[nid]), graph.input_names[k], graph.nodes[nid].weak)
    for nid, node in enumerate(graph.nodes):
        if node.op != "input":
            remap[nid] = b.add(node.op, tuple(remap[o] for o in node.operands), node.params,
                               node.shape, node.dtype, node.weak)
    return b.build([remap[o] for o in graph.outputs])


def hoist(graph, n_variant):
    """Split a loop part whose first ``n_variant`` inputs change per iteration.

    Returns ``(body, outer)``: ``outer`` maps the other inputs to the values the body needs
    from them (inputs passed through, or loop-invariant computations, run once before the
    loop); ``body`` takes the variant inputs, then one input per output of ``outer``.
    Constant-only expressions and broadcasts stay in the body, where they cost nothing.
    """
    nodes = graph.nodes
    variant = set(graph.inputs[:n_variant])
    rest = set(graph.inputs[n_variant:])
    reads_rest = set(rest)  # invariant nodes computed from the non-variant inputs
    for nid, node in enumerate(nodes):
        if node.op == "input":
            continue
        if any(o in variant for o in node.operands):
            variant.add(nid)
        elif any(o in reads_rest for o in node.operands):
            reads_rest.add(nid)

    def stays_inside(nid):  # copied into the body rather than passed in
        node = nodes[nid]
        return nid not in reads_rest or (node.op == "broadcast_in_dim" and nid not in rest)

    boundary, inside = [], set()
    needed = [o for o in graph.outputs]
    for nid in variant:
        if nodes[nid].op != "input":
            needed.extend(nodes[nid].operands)
    seen = set()
    while needed:
        nid = needed.pop()
        if nid in seen or nid in variant:
            continue
        seen.add(nid)
        if stays_inside(nid):
            inside.add(nid)
            needed.extend(nodes[nid].operands)
        else:
            boundary.append(nid)
    boundary.sort()

    b = GraphBuilder()
    remap = {}
    for k, nid in enumerate(graph.inputs[:n_variant]):
        remap[nid] = b.input(*aval(nodes[nid]), graph.input_names[k], nodes[nid].weak)
    for nid in boundary:
        remap[nid] = b.input(*aval(nodes[nid]), f"hoisted{len(b.inputs)}", nodes[nid].weak)
    for nid, node in enumerate(nodes):
        if node.op != "input" and (nid in variant or nid in inside) and nid not in remap:
            remap[nid] = b.add(node.op, tuple(remap[o] for o in node.operands), node.params,
                               node.shape, node.dtype, node.weak)
    body = simplify(b.build([remap[o] for o in graph.outputs]))

    ob = GraphBuilder()
    oremap = {}
    for k, nid in enumerate(graph.inputs[n_variant:], n_variant):
        oremap[nid] = ob.input(*aval(nodes[nid]), graph.input_names[k], nodes[nid].weak)
    for nid, node in enumerate(nodes):
        if node.op != "input" and nid not in variant:
            oremap[nid] = ob.add(node.op, tuple(oremap[o] for o in node.operands), node.params,
                                 node.shape, node.dtype, node.weak)
    outer = simplify(ob.build([oremap[o] for o in boundary]))
    return body, outer
