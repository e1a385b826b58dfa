"""jvp and vjp: forward and reverse mode with explicit tangents and cotangents.

``jvp`` is staged over (primals, tangents); ``vjp`` stages the function's value (``VjpForward``)
and, when ``vjp_fun`` is called, its pullback over (primals, cotangents) (``VjpBackward``).
Tangents and cotangents are checked against the primals and outputs before anything is traced.
"""

from .. import ops, tree
from ..array import asarray
from ..transforms import jvp_graph, vjp_graph
from .signature import Aval
from .staged import function_name
from .transform import Transform, trace_function

__all__ = ["Jvp", "VjpForward", "VjpBackward", "match_tangents", "match_cotangents"]


class _OverPrimals(Transform):
    """Staged over (primals, tangents or cotangents): the function sees the primals only."""

    def differentiated(self, treedef):
        return frozenset(range(treedef.num_leaves))

    def trace(self, fun, treedef, template):
        primals_tree, _ = treedef.children()
        return trace_function(fun, primals_tree, template[:primals_tree.num_leaves],
                              function_name(fun))


class Jvp(_OverPrimals):
    """Staged over (primals, tangents); a non-floating primal's tangent is None."""

    def name(self, inner):
        return f"jvp({inner})"

    def stage(self, traced, treedef, template):
        n = treedef.children()[0].num_leaves
        graph = traced.graph
        n_args, n_captures = traced.n_args, len(traced.captures)
        mask = [template[k].dtype.is_floating for k in range(n) if type(template[k]) is Aval]
        g = jvp_graph(graph, mask + [False] * n_captures)
        # jvp_graph's inputs are (args, captures, tangents); staged ones (args, tangents, captures)
        n_tangents = sum(mask)
        order = list(range(n_args)) + list(range(n_args + n_captures, n_args + n_captures + n_tangents)) \
            + list(range(n_args, n_args + n_captures))
        n_out = len(graph.outputs)
        out_tree = traced.out_tree

        def assemble(outs):
            return out_tree.unflatten(outs[:n_out]), out_tree.unflatten(outs[n_out:])

        return g.with_inputs(order), assemble


def match_tangents(primals, tangents):
    """``jvp``'s arguments as staged: the primals as a tuple, and one tangent per floating
    primal leaf (None for the others). Python numbers adopt their primal's dtype and shape,
    arrays must match exactly."""
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp: primals and tangents must be tuples with one entry per argument")
    if len(primals) != len(tangents):
        raise ValueError("jvp: primals and tangents must have the same length")
    primals = tuple(primals)
    p_leaves, p_tree = tree.flatten(primals)
    t_leaves, t_tree = tree.flatten(tuple(tangents), is_leaf=lambda x: x is None)
    if len(t_leaves) != len(p_leaves):
        raise ValueError(f"jvp: tangents {t_tree} do not match primals {p_tree}")
    out = []
    for p, t in zip(p_leaves, t_leaves):
        p = asarray(float(p) if isinstance(p, (int, float)) and not isinstance(p, bool) else p)
        if not p.dtype.is_floating:
            out.append(None)  # bool leaves have no tangent
            continue
        if t is None:
            raise ValueError("jvp: a floating primal needs a tangent (got None)")
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            t = ops.broadcast_to(ops.weak_scalar(t, p.dtype), p.shape)
        else:
            t = asarray(t)
        if tuple(t.shape) != tuple(p.shape) or t.dtype is not p.dtype:
            raise ValueError(
                f"jvp: tangent {t.dtype}{list(t.shape)} does not match primal {p.dtype}{list(p.shape)}"
            )
        out.append(t)
    return primals, p_tree.unflatten(out)


class VjpForward(Transform):
    """The value of ``vjp``: the function itself, with Python scalars as arrays."""

    def name(self, inner):
        return f"vjp({inner})"

    def differentiated(self, treedef):
        return frozenset(range(treedef.num_leaves))

    def stage(self, traced, treedef, template):
        return traced.graph, traced.out_tree.unflatten


class VjpBackward(_OverPrimals):
    """Staged over (primals, cotangents): returns one cotangent tree per primal."""

    def __init__(self, has_aux):
        self.has_aux = has_aux

    def name(self, inner):
        return f"vjp_fun({inner})"

    def stage(self, traced, treedef, template):
        primals_tree, _ = treedef.children()
        n = primals_tree.num_leaves
        graph = traced.graph
        out_tree = traced.out_tree
        n_out = len(graph.outputs)
        if self.has_aux:
            main_leaves = out_tree.children()[0].num_leaves
        else:
            main_leaves = n_out
        seeds = [
            "input" if (k < main_leaves and graph.out_avals[k][1].is_floating) else None
            for k in range(n_out)
        ]
        inputs = [k for k, leaf in enumerate(template[:n]) if type(leaf) is Aval]
        floating = [j for j, k in enumerate(inputs) if template[k].dtype.is_floating]
        g = vjp_graph(graph, floating, seeds)
        # vjp_graph's inputs are (args, captures, cotangents); staged ones (args, cotangents,
        # captures), with a cotangent for each floating output (the others pass None)
        n_args, n_inputs = traced.n_args, len(graph.inputs)
        n_cts = sum(1 for seed in seeds if seed)
        order = list(range(n_args)) + list(range(n_inputs, n_inputs + n_cts)) \
            + list(range(n_args, n_inputs))
        g = g.with_inputs(order)
        arg_trees = primals_tree.children()
        slots, j, start = [], 0, 0
        for t in arg_trees:
            row = []
            for i in range(start, start + t.num_leaves):
                leaf = template[i]
                if type(leaf) is Aval and leaf.dtype.is_floating:
                    row.append(n_out + j)
                    j += 1
                else:
                    row.append(None)
            slots.append(row)
            start += t.num_leaves

        def assemble(outs):
            return tuple(t.unflatten([None if s is None else outs[s] for s in row])
                         for t, row in zip(arg_trees, slots))

        return g, assemble


def match_cotangents(out, cotangent):
    """One cotangent per floating output leaf (None for the others): Python numbers adopt the
    output's dtype and shape, arrays must match exactly."""
    o_leaves, o_tree = tree.flatten(out)
    c_leaves, c_tree = tree.flatten(cotangent, is_leaf=lambda x: x is None)
    if len(o_leaves) != len(c_leaves):
        raise ValueError(f"vjp_fun: cotangent {c_tree} does not match the output {o_tree}")
    result = []
    for o, c in zip(o_leaves, c_leaves):
        if c is None:
            if o.dtype.is_floating:
                raise ValueError("vjp_fun: a floating output needs a cotangent (got None)")
        elif isinstance(c, (int, float)) and not isinstance(c, bool):
            c = ops.broadcast_to(ops.weak_scalar(c, o.dtype), o.shape)
        else:
            c = asarray(c)
        if c is not None and (tuple(c.shape) != tuple(o.shape) or c.dtype is not o.dtype):
            raise ValueError(
                f"vjp_fun: cotangent {c.dtype}{list(c.shape)} does not match output "
                f"{o.dtype}{list(o.shape)}"
            )
        result.append(c if o.dtype.is_floating else None)
    return o_tree.unflatten(result)
