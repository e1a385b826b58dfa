"""Region bodies: user functions traced into sub-graphs, and the graph surgery regions need.

A body is traced in a fresh ``TraceFrame`` with one input per leaf of its arguments; what it
closes over becomes capture inputs (enclosing tracers) or constants (eager arrays), so a region
node's operands are its explicit inputs followed by the outer values of its captures. Loop
bodies then have their loop-invariant part hoisted out (``hoist``): it runs once, before the
loop, and reaches the body as operands.

The rules of the regions build their new sub-graphs with the rest: ``traced`` (a function of
tracers as a graph), ``rewire`` (inputs reordered, outputs picked), ``with_inputs`` (unused
inputs inserted), ``restrict`` (inputs and outputs dropped), ``returning`` (inner nodes as
outputs), ``reading`` (inner nodes as inputs), ``merge_graphs`` (several graphs over the same
inputs as one), and read them with ``input_masks`` and ``nonzero``.
"""

import numpy as np

from .. import dtypes as _dt
from .. import tree
from ..array import Array, asarray
from ..core.graph import Graph, GraphBuilder, aval_text
from ..core.rewrite import simplify
from ..core.tracing import TraceFrame, trace_frame
from ..ops import astype, weak_scalar
from ..transforms.inline import inline

__all__ = ["Body", "trace_body", "as_leaf", "aval", "avals", "aval_texts", "graph_input",
           "traced", "rewire", "with_inputs", "hoist", "restrict", "returning", "reading",
           "merge_graphs",
           "input_masks", "bits", "nonzero"]

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


def avals(values):
    """``(shape, dtype, weak)`` of each array or graph node of ``values``."""
    return [(tuple(v.shape), v.dtype, v.weak) for v in values]


def aval_texts(pairs):
    """``(shape, dtype)`` pairs as text, for error messages."""
    return "(" + ", ".join(aval_text(*a) for a in pairs) + ")"


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


# -- building sub-graphs ------------------------------------------------------------------------

def graph_input(graph, k):
    """Input ``k`` of ``graph`` as ``traced`` takes it: ``(shape, dtype, weak, name)``."""
    node = graph.nodes[graph.inputs[k]]
    return node.shape, node.dtype, node.weak, graph.input_names[k]


def traced(inputs, fun):
    """The graph of ``fun(tracers) -> values`` over inputs ``(shape, dtype, weak, name)``."""
    frame = TraceFrame()
    with trace_frame(frame):
        args = [frame.new_input(s, d, name, w) for s, d, w, name in inputs]
        graph = frame.build([frame.operand(v) for v in fun(args)])
    return simplify(graph)


def rewire(graph, order, outputs):
    """``graph`` whose input ``k`` is its old input ``order[k]``, returning ``outputs``."""
    def fun(args):
        full = [None] * len(order)
        for position, k in enumerate(order):
            full[k] = args[position]
        outs = inline(graph, full)
        return [outs[k] for k in outputs]
    return traced([graph_input(graph, k) for k in order], fun)


def _copy_input(builder, graph, k, name=None):
    node = graph.nodes[graph.inputs[k]]
    return builder.input(node.shape, node.dtype, name or graph.input_names[k], node.weak)


def with_inputs(graph, unused, at):
    """``graph`` with unused inputs of avals ``unused`` (``(shape, dtype, weak)``) inserted
    before its input ``at``: branches and loop parts that take one shared operand list."""
    b = GraphBuilder()
    n = len(graph.inputs)
    remap = {graph.inputs[k]: _copy_input(b, graph, k) for k in range(at)}
    for shape, dtype, weak in unused:
        b.input(shape, dtype, f"unused{len(b.inputs)}", weak)
    remap.update((graph.inputs[k], _copy_input(b, graph, k)) for k in range(at, n))
    b.copy_nodes(graph, remap)
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
        if any(o in variant for o in node.operands):
            variant.add(nid)
        elif any(o in reads_rest for o in node.operands):
            reads_rest.add(nid)

    def stays_inside(nid):  # copied into the body rather than passed in
        node = nodes[nid]
        return nid not in reads_rest or (node.op == "broadcast_in_dim" and nid not in rest)

    boundary, inside = [], set()
    needed = list(graph.outputs)
    for nid in variant:
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
    remap = {graph.inputs[k]: _copy_input(b, graph, k) for k in range(n_variant)}
    for nid in boundary:
        remap[nid] = b.input(*aval(nodes[nid]), f"hoisted{len(b.inputs)}", nodes[nid].weak)
    b.copy_nodes(graph, remap, keep=variant | inside)
    body = simplify(b.build([remap[o] for o in graph.outputs]))

    ob = GraphBuilder()
    oremap = {graph.inputs[k]: _copy_input(ob, graph, k)
              for k in range(n_variant, len(graph.inputs))}
    ob.copy_nodes(graph, oremap, keep=set(range(len(nodes))) - variant)
    outer = simplify(ob.build([oremap[o] for o in boundary]))
    return body, outer


def restrict(graph, inputs, outputs):
    """``graph`` with only the inputs and outputs at the given positions (the dropped inputs
    are not read by the kept outputs)."""
    b = GraphBuilder()
    remap = {graph.inputs[k]: _copy_input(b, graph, k) for k in inputs}
    live = set(graph.outputs[k] for k in outputs)
    for nid in range(len(graph.nodes) - 1, -1, -1):
        if nid in live:
            live.update(graph.nodes[nid].operands)
    b.copy_nodes(graph, remap, keep=live)
    return b.build([remap[graph.outputs[k]] for k in outputs])


def returning(graph, nodes, n_inputs):
    """The graph of ``graph``'s first ``n_inputs`` inputs computing its ``nodes`` (ids), which
    read no other input."""
    return restrict(Graph(graph.nodes, graph.inputs, list(nodes), graph.input_names),
                    range(n_inputs), range(len(nodes)))


def reading(graph, nodes, name):
    """``graph`` with its ``nodes`` (ids) read from new inputs after its own (``name0``,
    ``name1``, ...) instead of computed: what only they needed is dropped."""
    b = GraphBuilder()
    remap = {graph.inputs[k]: _copy_input(b, graph, k) for k in range(len(graph.inputs))}
    for j, nid in enumerate(nodes):
        remap[nid] = b.input(*aval(graph.nodes[nid]), f"{name}{j}", graph.nodes[nid].weak)
    b.copy_nodes(graph, remap)
    return simplify(b.build([remap[o] for o in graph.outputs]))


def merge_graphs(slots, fixed):
    """Merge each slot's graphs (one per region, all over the same inputs) into one graph
    returning the first's outputs, then the others' outputs after the first ``fixed`` ones
    (the shared carries); equal outputs are returned once. Returns the graphs and, per
    region, its map of old output positions to new ones."""
    merged = []
    for graphs in slots:
        b = GraphBuilder()
        first = graphs[0]
        ins = [_copy_input(b, first, k) for k in range(len(first.inputs))]
        outs = []
        for j, g in enumerate(graphs):
            remap = b.copy_nodes(g, dict(zip(g.inputs, ins)))
            outs.extend(remap[o] for o in (g.outputs if j == 0 else g.outputs[fixed:]))
        merged.append(simplify(b.build(outs)))
    unique, where, position = [], {}, []
    for p, key in enumerate(zip(*(g.outputs for g in merged))):
        if p >= fixed and key in where:
            position.append(where[key])
            continue
        if p >= fixed:  # a stacked y equal to a carry's node is still another result
            where[key] = len(unique)
        position.append(len(unique))
        unique.append(p)
    graphs = [Graph(g.nodes, g.inputs, [g.outputs[p] for p in unique], g.input_names)
              for g in merged]
    maps, start = [], 0
    for j, g in enumerate(slots[0]):
        count = len(g.outputs)
        maps.append({r: position[r if j == 0 or r < fixed else start + r - fixed]
                     for r in range(count)})
        start = count if j == 0 else start + count - fixed
    return graphs, maps


# -- reading sub-graphs -------------------------------------------------------------------------

def input_masks(graph):
    """Per output, a bit mask of the inputs (by position) it depends on."""
    masks = {nid: 1 << k for k, nid in enumerate(graph.inputs)}
    for nid, node in enumerate(graph.nodes):
        if nid not in masks:
            mask = 0
            for o in node.operands:
                mask |= masks[o]
            masks[nid] = mask
    return [masks[o] for o in graph.outputs]


def bits(mask, positions):
    """The ``positions`` set in ``mask``."""
    return [k for k in positions if mask >> k & 1]


def nonzero(graph, first, outputs):
    """For each of ``outputs`` (indices), whether it depends on the inputs from ``first`` on:
    a tangent or cotangent output is zero exactly when it does not (it is linear in them)."""
    active = set(graph.inputs[first:])
    for nid, node in enumerate(graph.nodes):
        if any(o in active for o in node.operands):
            active.add(nid)
    return [graph.outputs[k] in active for k in outputs]
