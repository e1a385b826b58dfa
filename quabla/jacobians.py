"""``jacobian`` and ``hessian`` as single staged programs (spec 003 §3.4, 000 "S4 as landed").

The Jacobian is the JVP (forward mode) or the VJP (reverse mode) of the traced function,
batched over basis vectors with ``batch_graph``: one program, whatever the input size, that
compiles, inlines into enclosing traces and transforms further like any other. Reverse mode is
used when the floating output has fewer elements than the selected inputs (and every output is
floating); forward mode otherwise, and always for float64 outputs of a graph that computes in
float32 too, so no derivative is narrowed before its block is assembled.
"""

import numpy as np

from . import ops
from .api import arg_ranges, argnum_leaves, normalize_argnums, staged_grad
from .array import Tensor
from .core.rewrite import simplify
from .core.tracing import TraceFrame, trace_frame
from .staging import Aval, Staged, Transform
from .transforms import batch_graph, inline, jvp_graph, vjp_graph

__all__ = ["jacobian", "hessian"]


class _Jacobian(Transform):
    def __init__(self, argnums):
        self.argnums, self.single = normalize_argnums(argnums)

    def name(self, inner):
        return f"jacobian({inner})"

    def differentiated(self, treedef):
        return argnum_leaves(self.argnums, treedef)

    def stage(self, traced, treedef, template):
        graph = traced.graph
        ranges, arg_trees = arg_ranges(treedef)
        input_of_leaf, k = {}, 0
        for i, leaf in enumerate(template):
            if type(leaf) is Aval:
                input_of_leaf[i] = k
                k += 1
        layout = []  # per argnum, per leaf: its graph input, or None (no block)
        for a in self.argnums:
            row = []
            for i in ranges[a]:
                leaf = template[i]
                if type(leaf) is not Aval:
                    raise TypeError(f"jacobian: argument {a} has a non-array leaf {leaf!r}")
                row.append(input_of_leaf[i] if leaf.dtype.is_floating else None)
            layout.append(row)
        # The derivative is taken once per graph input, in graph order, whatever the order (or
        # repetition) of argnums: forward mode's tangent inputs come in that order too.
        selected = sorted({j for row in layout for j in row if j is not None})
        layout = [[None if j is None else selected.index(j) for j in row] for row in layout]
        in_avals = [graph.in_avals[j] for j in selected]
        out_avals = graph.out_avals
        sizes_in = [int(np.prod(s, dtype=np.int64)) for s, _ in in_avals]
        floating_out = [d.is_floating for _, d in out_avals]
        sizes_out = [int(np.prod(s, dtype=np.int64)) if f else 0
                     for (s, _), f in zip(out_avals, floating_out)]
        P, Q = sum(sizes_in), sum(sizes_out)
        mixed = any(n.dtype.name == "float32" for n in graph.nodes) and any(
            d.name == "float64" for _, d in out_avals)
        reverse = 0 < Q < P and all(floating_out) and not mixed
        jac_graph, blocks = _jacobian_graph(graph, selected, in_avals, out_avals, reverse)
        n_out = len(out_avals)
        out_tree = traced.out_tree
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
            return out_tree.unflatten(per_output)

        return jac_graph, assemble


def _basis(sizes, index, shape, dtype):
    """The basis vectors of one leaf, stacked: ``[sum(sizes), *shape]`` with a one-hot row."""
    total = sum(sizes)
    start = sum(sizes[:index])
    eye = np.zeros((total, sizes[index]), dtype.numpy)
    eye[np.arange(start, start + sizes[index]), np.arange(sizes[index])] = 1
    return Tensor._wrap(eye.reshape((total,) + tuple(shape)))


def _jacobian_graph(graph, selected, in_avals, out_avals, reverse):
    """The graph of every block, and ``blocks[o][s]``: the output holding the block of graph
    output ``o`` and selected input ``s``. Forward mode seeds the inputs with basis vectors and
    stacks one JVP per output; reverse mode seeds the outputs and stacks one VJP per input."""
    n_in, n_out = len(graph.inputs), len(out_avals)
    if reverse:
        derivative = vjp_graph(graph, selected, ["input"] * n_out)
        seeds, results = out_avals, in_avals
    else:
        mask = [j in selected for j in range(n_in)]
        derivative = jvp_graph(graph, mask)
        seeds, results = in_avals, out_avals
    sizes = [int(np.prod(shape, dtype=np.int64)) for shape, _ in seeds]
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
                o, s = (k, r) if reverse else (r, k)
                blocks[o][s] = len(outputs)
                shape = tuple(out_avals[o][0]) + tuple(in_avals[s][0])
                outputs.append(frame.operand(ops.reshape(segment, shape)))
                start += size
    return simplify(frame.build(outputs)), blocks


def jacobian(fun, argnums=0):
    """Dense Jacobian blocks ``[*out.shape, *in.shape]`` of ``fun`` (pytrees nest the blocks)."""
    transform = _Jacobian(argnums)
    return Staged(fun, transform, config=("jacobian", transform.argnums, transform.single))


def hessian(fun, argnums=0):
    """Dense Hessian blocks ``[*in.shape, *in.shape]``: forward mode over reverse mode."""
    return jacobian(staged_grad(fun, argnums, False, False, "grad"), argnums)
