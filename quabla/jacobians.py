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
from .api import _arg_ranges, _normalize_argnums, _staged_grad
from .array import Tensor
from .core.rewrite import simplify
from .core.tracing import TraceFrame, trace_frame
from .staging import Staged, Transform, _Aval, _function_name, trace_function
from .transforms import batch_graph, inline, jvp_graph, vjp_graph

__all__ = ["jacobian", "hessian"]


class _Jacobian(Transform):
    def __init__(self, argnums):
        self.argnums, self.single = _normalize_argnums(argnums)

    def name(self, inner):
        return f"jacobian({inner})"

    def differentiated(self, treedef):
        ranges, _ = _arg_ranges(treedef)
        return frozenset(i for a in self.argnums for i in ranges[a])

    def stage(self, fun, treedef, template):
        traced = trace_function(fun, treedef, template, _function_name(fun))
        graph = traced.graph
        ranges, arg_trees = _arg_ranges(treedef)
        input_of_leaf, k = {}, 0
        for i, leaf in enumerate(template):
            if type(leaf) is _Aval:
                input_of_leaf[i] = k
                k += 1
        selected = []  # graph input index per floating leaf of the differentiated arguments
        layout = []    # per argnum, per leaf: index into `selected`, or None (no block)
        for a in self.argnums:
            row = []
            for i in ranges[a]:
                leaf = template[i]
                if type(leaf) is not _Aval:
                    raise TypeError(f"jacobian: argument {a} has a non-array leaf {leaf!r}")
                if leaf.dtype.is_floating:
                    row.append(len(selected))
                    selected.append(input_of_leaf[i])
                else:
                    row.append(None)
            layout.append(row)
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
        blocks = _reverse_blocks(graph, selected, in_avals, out_avals, Q) if reverse else \
            _forward_blocks(graph, selected, in_avals, out_avals, P)
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

        return blocks.graph, assemble, traced.captures


class _Blocks(dict):
    """``blocks[o][s]``: the graph output holding the block of output ``o`` and input ``s``."""


def _basis(sizes, index, shape, dtype):
    """The basis vectors of one leaf, stacked: ``[sum(sizes), *shape]`` with a one-hot row."""
    total = sum(sizes)
    start = sum(sizes[:index])
    eye = np.zeros((total, sizes[index]), dtype.numpy)
    eye[np.arange(start, start + sizes[index]), np.arange(sizes[index])] = 1
    return Tensor._wrap(eye.reshape((total,) + tuple(shape)))


def _wrapper(graph):
    """A trace whose inputs are ``graph``'s inputs: where the basis batches are spliced in."""
    frame = TraceFrame()
    return frame, [frame.new_input(s, d, n) for (s, d), n in zip(graph.in_avals, graph.input_names)]


def _forward_blocks(graph, selected, in_avals, out_avals, P):
    mask = [False] * len(graph.inputs)
    for j in selected:
        mask[j] = True
    g = jvp_graph(graph, mask)
    n_in, n_out = len(graph.inputs), len(out_avals)
    mapped = [False] * n_in + [True] * len(selected)
    batched, _ = batch_graph(g, mapped, max(P, 1), [False] * n_out + [True] * n_out)
    frame, inputs = _wrapper(graph)
    blocks, outputs = _Blocks(), []
    sizes = [int(np.prod(s, dtype=np.int64)) for s, _ in in_avals]
    with trace_frame(frame):
        tangents = [_basis(sizes, s, shape, dtype) for s, (shape, dtype) in enumerate(in_avals)]
        outs = inline(batched, inputs + tangents)[n_out:]  # [P, *out] per output
        for o, (t, (oshape, _)) in enumerate(zip(outs, out_avals)):
            blocks[o] = {}
            moved = ops.transpose(t, tuple(range(1, t.ndim)) + (0,)) if t.ndim > 1 else t
            start = 0
            for s, (ishape, _) in enumerate(in_avals):
                part = moved[(slice(None),) * len(oshape) + (slice(start, start + sizes[s]),)]
                blocks[o][s] = len(outputs)
                outputs.append(frame.operand(ops.reshape(part, tuple(oshape) + tuple(ishape))))
                start += sizes[s]
    blocks.graph = simplify(frame.build(outputs))
    return blocks


def _reverse_blocks(graph, selected, in_avals, out_avals, Q):
    n_in, n_out = len(graph.inputs), len(out_avals)
    g = vjp_graph(graph, selected, ["input"] * n_out)
    mapped = [False] * n_in + [True] * n_out
    batched, _ = batch_graph(g, mapped, Q, [False] * n_out + [True] * len(selected))
    frame, inputs = _wrapper(graph)
    blocks, outputs = _Blocks(), []
    sizes = [int(np.prod(s, dtype=np.int64)) for s, _ in out_avals]
    with trace_frame(frame):
        cts = [_basis(sizes, o, shape, dtype) for o, (shape, dtype) in enumerate(out_avals)]
        grads = inline(batched, inputs + cts)[n_out:]  # [Q, *in] per input
        for o, (oshape, _) in enumerate(out_avals):
            blocks[o] = {}
        for s, (g_s, (ishape, _)) in enumerate(zip(grads, in_avals)):
            start = 0
            for o, (oshape, _) in enumerate(out_avals):
                part = g_s[start:start + sizes[o]]
                blocks[o][s] = len(outputs)
                outputs.append(frame.operand(ops.reshape(part, tuple(oshape) + tuple(ishape))))
                start += sizes[o]
    blocks.graph = simplify(frame.build(outputs))
    return blocks


def jacobian(fun, argnums=0):
    """Dense Jacobian blocks ``[*out.shape, *in.shape]`` of ``fun`` (pytrees nest the blocks)."""
    transform = _Jacobian(argnums)
    return Staged(fun, transform, config=("jacobian", transform.argnums, transform.single))


def hessian(fun, argnums=0):
    """Dense Hessian blocks ``[*in.shape, *in.shape]``: forward mode over reverse mode."""
    return jacobian(_staged_grad(fun, argnums, False, False, "grad"), argnums)
