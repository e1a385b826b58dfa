"""vmap: ``in_axes``/``out_axes`` as pytree prefixes, the mapped axes moved to the front,
``batch_graph``, then the batch axis moved to ``out_axes``."""

import numbers

from .. import ops, tree
from ..array import as_index
from ..core.rewrite import simplify
from ..core.tracing import TraceFrame, trace_frame
from ..transforms import batch_graph, inline
from .signature import Aval
from .staged import Staged, function_name
from .transform import Transform, trace_function

__all__ = ["Vmap", "staged_vmap"]


class Vmap(Transform):
    def __init__(self, in_axes, out_axes, axis_size=None):
        self.in_axes = in_axes
        self.out_axes = out_axes
        self.axis_size = axis_size

    def name(self, inner):
        return f"vmap({inner})"

    def trace(self, fun, treedef, template):
        example, _, _ = self._unmapped(treedef, template)
        return trace_function(fun, treedef, example, function_name(fun))

    def _unmapped(self, treedef, template):
        """The template the function sees (mapped axes removed), each leaf's axis, the size."""
        in_axes = self.in_axes
        if isinstance(in_axes, list):
            in_axes = tuple(in_axes)
        n_args = len(treedef.children())
        if isinstance(in_axes, tuple) and len(in_axes) != n_args:
            raise ValueError(f"vmap: in_axes has {len(in_axes)} entries for {n_args} arguments")
        full = treedef.unflatten(template)
        prefix = in_axes if isinstance(in_axes, tuple) else (in_axes,) * n_args
        axes = tree.broadcast_prefix(prefix, full, is_leaf=lambda x: x is None)
        size = self.axis_size
        example = []
        mapped = []
        for leaf, axis in zip(template, axes):
            if axis is not None and not isinstance(axis, numbers.Integral):
                raise TypeError(f"vmap: in_axes entries must be ints or None, got {axis!r}")
            if type(leaf) is not Aval:
                if axis is not None:
                    raise ValueError("vmap: Python scalars and static values must have in_axes None")
                example.append(leaf)
                continue
            if axis is None:
                example.append(leaf)
                mapped.append(None)
                continue
            ndim = len(leaf.shape)
            if not -ndim <= axis < ndim:
                raise ValueError(f"vmap: in_axes {axis} is out of range for an argument of rank {ndim}")
            axis %= ndim
            n = leaf.shape[axis]
            if size is None:
                size = n
            elif n != size:
                given = " (axis_size)" if size == self.axis_size else ""
                raise ValueError(
                    f"vmap got inconsistent sizes for the mapped axes: {size}{given} and {n}"
                )
            example.append(Aval(leaf.shape[:axis] + leaf.shape[axis + 1:], leaf.dtype, leaf.weak))
            mapped.append(axis)
        if size is None:
            raise ValueError("vmap needs at least one mapped argument (in_axes are all None) "
                             "or axis_size")
        return example, mapped, size

    def stage(self, traced, treedef, template):
        _, mapped, size = self._unmapped(treedef, template)
        out_tree = traced.out_tree
        out_axes = self.out_axes
        if isinstance(out_axes, list):
            out_axes = tuple(out_axes)
        outs_prefix = tree.broadcast_prefix(
            out_axes, out_tree.unflatten([0] * out_tree.num_leaves), is_leaf=lambda x: x is None
        ) if not isinstance(out_axes, (int, type(None))) else [out_axes] * out_tree.num_leaves
        flags = [m is not None for m in mapped] + [False] * len(traced.captures)
        batched, out_batched = batch_graph(traced.graph, flags, size,
                                           [a is not None for a in outs_prefix])
        for flag, axis in zip(out_batched, outs_prefix):
            if axis is None and flag:
                raise ValueError("vmap: an output with out_axes=None depends on a mapped input")
        # the staged graph takes the arguments as given: move mapped axes to the front first
        frame = TraceFrame()
        with trace_frame(frame):
            inputs = [frame.new_input(leaf.shape, leaf.dtype, f"arg{k}", leaf.weak)
                      for k, leaf in enumerate(l for l in template if type(l) is Aval)]
            captures = [frame.new_input(c.shape, c.dtype, f"__quabla_capture/{k}", c.weak)
                        for k, c in enumerate(traced.captures)]
            moved = [x if a in (None, 0) else ops.transpose(
                x, (a,) + tuple(d for d in range(x.ndim) if d != a))
                for x, a in zip(inputs, mapped)]
            outs = inline(batched, moved + captures)
            final = []
            for value, axis in zip(outs, outs_prefix):
                if axis is not None:
                    ndim = value.ndim
                    if not -ndim <= axis < ndim:
                        raise ValueError(f"vmap: out_axes {axis} is out of range for rank {ndim}")
                    axis %= ndim
                    if axis:
                        perm = list(range(1, ndim))
                        perm.insert(axis, 0)
                        value = ops.transpose(value, tuple(perm))
                final.append(frame.operand(value))
            graph = frame.build(final)
        return simplify(graph), out_tree.unflatten


def staged_vmap(fun, in_axes, out_axes, axis_size=None):
    """``vmap`` of ``fun`` as a Staged, sharing its caches where the axes are hashable."""
    if axis_size is not None:
        axis_size = as_index(axis_size)
        if axis_size < 0:
            raise ValueError(f"vmap: axis_size must be nonnegative, got {axis_size}")
    return Staged(fun, Vmap(in_axes, out_axes, axis_size),
                  config=_vmap_config(in_axes, out_axes, axis_size))


def _vmap_config(in_axes, out_axes, axis_size):
    """A hashable key of the in_axes/out_axes prefix trees, or None (then nothing is shared)."""
    try:
        key = ("vmap", axis_size) + tuple(
            (type(axes), tuple(leaves), treedef)
            for axes in (in_axes, out_axes) for leaves, treedef in [tree.flatten(axes)]
        )
        hash(key)
        return key
    except (TypeError, ValueError):
        return None
