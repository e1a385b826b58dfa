"""The Jacobian as one staged program (spec 003 §3.4, 000 "S4 as landed"): ``jacobian``,
``jacfwd``, ``jacrev`` and, through ``grad``, ``hessian``.

The Jacobian is the JVP (forward mode) or the VJP (reverse mode) of the traced function,
batched over basis vectors with ``batch_graph``: one program, whatever the input size, that
compiles, inlines into enclosing traces and transforms further like any other. ``jacfwd`` and
``jacrev`` pick the mode, as JAX's do. ``jacobian`` picks reverse mode when the floating
output has fewer elements than the selected inputs (and every output is floating), forward
mode otherwise, and always for float64 outputs of a graph that computes in float32 too, so no
derivative is narrowed before its block is assembled; where reverse mode is impossible (a
cotangent would cross a ``while_loop``) it falls back to forward mode.
"""

import math

import numpy as np

from .. import ops
from ..array import Tensor
from ..core.graph import Graph
from ..core.rewrite import simplify
from ..core.tracing import TraceFrame, trace_frame
from ..errors import UnsupportedOperationError
from ..transforms import batch_graph, inline, jvp_graph, vjp_graph
from .signature import Aval
from .staged import Staged
from .transform import Transform, arg_ranges, argnum_leaves, graph_inputs, normalize_argnums

__all__ = ["Jacobian", "staged_jacobian"]


class Jacobian(Transform):
    """Dense blocks ``[*out.shape, *in.shape]`` of every output and argument in ``argnums``,
    by ``mode``: ``"forward"``, ``"reverse"`` or ``"auto"`` (reverse where it is cheaper)."""

    def __init__(self, argnums, mode, has_aux, kind):
        self.argnums, self.single = normalize_argnums(argnums)
        self.mode, self.has_aux, self.kind = mode, bool(has_aux), kind

    def name(self, inner):
        return f"{self.kind}({inner})"

    def differentiated(self, treedef):
        return argnum_leaves(self.argnums, treedef)

    def stage(self, traced, treedef, template):
        graph, out_tree, n_aux = traced.graph, traced.out_tree, 0
        if self.has_aux:
            children = out_tree.children()
            if out_tree.node_type is not tuple or len(children) != 2:
                raise TypeError(f"{self.kind}(has_aux=True) needs a function returning "
                                "(output, aux)")
            out_tree, aux_tree = children
            n_aux = aux_tree.num_leaves
        ranges, arg_trees = arg_ranges(treedef)
        input_of_leaf = graph_inputs(template)
        layout = []  # per argnum, per leaf: its graph input, or None (no block)
        for a in self.argnums:
            row = []
            for i in ranges[a]:
                leaf = template[i]
                if type(leaf) is not Aval:
                    raise TypeError(f"{self.kind}: argument {a} has a non-array leaf {leaf!r}")
                row.append(input_of_leaf[i] if leaf.dtype.is_floating else None)
            layout.append(row)
        # The derivative is taken once per graph input, in graph order, whatever the order (or
        # repetition) of argnums: forward mode's tangent inputs come in that order too.
        selected = sorted({j for row in layout for j in row if j is not None})
        layout = [[None if j is None else selected.index(j) for j in row] for row in layout]
        in_avals = [graph.in_avals[j] for j in selected]
        n_out = len(graph.outputs) - n_aux
        out_avals = graph.out_avals[:n_out]
        floating_out = [d.is_floating for _, d in out_avals]
        reverse = self.mode == "reverse" or (
            self.mode == "auto" and _prefers_reverse(graph, in_avals, out_avals))
        try:
            jac_graph, blocks = _jacobian_graph(graph, selected, in_avals, n_out, reverse)
        except UnsupportedOperationError:  # reverse mode is impossible: forward mode is not
            if self.mode != "auto" or not reverse:
                raise
            jac_graph, blocks = _jacobian_graph(graph, selected, in_avals, n_out, False)
        argnum_trees = [arg_trees[a] for a in self.argnums]

        def assemble(outs):
            per_output = []
            for o in range(n_out):
                per_arg = [
                    t.unflatten([None if s is None or not floating_out[o] else outs[blocks[o][s]]
                                 for s in row])
                    for t, row in zip(argnum_trees, layout)
                ]
                per_output.append(per_arg[0] if self.single else tuple(per_arg))
            jac = out_tree.unflatten(per_output)
            if self.has_aux:
                return jac, aux_tree.unflatten(outs[len(outs) - n_aux:])
            return jac

        return jac_graph, assemble


def _prefers_reverse(graph, in_avals, out_avals):
    """Reverse mode when the floating outputs have fewer elements than the inputs, every
    output is floating, and no float64 output's derivative would be narrowed to float32."""
    def size(shape):
        return int(math.prod(shape))

    if not all(d.is_floating for _, d in out_avals):
        return False
    mixed = any(n.dtype.name == "float32" for n in graph.nodes) and any(
        d.name == "float64" for _, d in out_avals)
    return 0 < sum(size(s) for s, _ in out_avals) < sum(size(s) for s, _ in in_avals) and not mixed


def _basis(sizes, index, shape, dtype):
    """The basis vectors of one leaf, stacked: ``[sum(sizes), *shape]`` with a one-hot row."""
    total = sum(sizes)
    start = sum(sizes[:index])
    eye = np.zeros((total, sizes[index]), dtype.numpy)
    eye[np.arange(start, start + sizes[index]), np.arange(sizes[index])] = 1
    return Tensor.wrap(eye.reshape((total,) + tuple(shape)))


def _jacobian_graph(graph, selected, in_avals, n_out, reverse):
    """The graph of every block of the first ``n_out`` outputs (the others, ``has_aux``'s,
    follow as values), and ``blocks[o][s]``: the output holding the block of graph output
    ``o`` and selected input ``s``. Forward mode seeds the inputs with basis vectors and
    stacks one JVP per output; reverse mode seeds the floating outputs and stacks one VJP per
    input."""
    n_in = len(graph.inputs)
    differentiated = Graph(graph.nodes, graph.inputs, graph.outputs[:n_out], graph.input_names)
    out_avals = differentiated.out_avals
    if reverse:
        diff_out = [o for o in range(n_out) if out_avals[o][1].is_floating]
        derivative = vjp_graph(differentiated, selected,
                               ["input" if o in diff_out else None for o in range(n_out)])
        seeds, results = [out_avals[o] for o in diff_out], in_avals
    else:
        mask = [j in selected for j in range(n_in)]
        derivative = jvp_graph(differentiated, mask)
        seeds, results = in_avals, out_avals
    sizes = [int(math.prod(shape)) for shape, _ in seeds]
    batched, _ = batch_graph(derivative, [False] * n_in + [True] * len(seeds),
                             max(sum(sizes), 1), [False] * n_out + [True] * len(results))
    frame = TraceFrame()
    inputs = [frame.input_like(graph, k) for k in range(len(graph.inputs))]
    blocks = {o: {} for o in range(n_out)}
    outputs = []
    with trace_frame(frame):
        basis = [_basis(sizes, k, shape, dtype) for k, (shape, dtype) in enumerate(seeds)]
        stacks = inline(batched, inputs + basis)[n_out:]  # [seeds, *result] per result
        for r, (stack, (rshape, _)) in enumerate(zip(stacks, results)):
            if not reverse:  # [*out, seeds]: the output axes lead the block
                stack = ops.transpose(stack, tuple(range(1, stack.ndim)) + (0,))
            start = 0
            for k, size in enumerate(sizes):
                lead = (slice(None),) * (0 if reverse else len(rshape))
                segment = stack[lead + (slice(start, start + size),)]
                o, s = (diff_out[k], r) if reverse else (r, k)
                blocks[o][s] = len(outputs)
                shape = tuple(out_avals[o][0]) + tuple(in_avals[s][0])
                outputs.append(frame.operand(ops.reshape(segment, shape)))
                start += size
        if n_out < len(graph.outputs):  # has_aux: the aux values
            outputs += [frame.operand(v) for v in inline(graph, inputs)[n_out:]]
    return simplify(frame.build(outputs)), blocks


def staged_jacobian(fun, argnums, mode, has_aux, holomorphic, kind):
    """``jacobian`` of ``fun`` in ``mode`` (``"auto"``, ``"forward"``, ``"reverse"``) as a Staged."""
    if holomorphic:
        raise TypeError(f"{kind}: holomorphic=True needs complex numbers, which Quabla does "
                        "not have")
    transform = Jacobian(argnums, mode, has_aux, kind)
    return Staged(fun, transform, config=(kind, transform.argnums, transform.single,
                                          transform.has_aux))
