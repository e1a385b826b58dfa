"""``checkpoint`` (JAX's ``jax.checkpoint``, alias ``remat``): a function whose intermediate
values reverse mode recomputes in the backward pass instead of storing them, and the ``remat``
region that makes it so.

Called on tracers, the function is traced into a sub-graph and bound as one ``remat`` node
(operands: the argument leaves, then the function's captures; param ``fun``). The node is a
region: the rewriter simplifies inside it but never merges its nodes with the graph around it,
and back ends run it as a block of its own (its intermediates live in that block's scratch).

- Reference: runs ``fun`` with the interpreter. Dependence: ``fun``'s.
- JVP: a ``remat`` of ``fun``'s JVP over the operands and their nonzero tangents.
- VJP: a ``remat`` of ``fun``'s VJP (its forward replay, then the cotangents): the forward
  values the backward pass needs are computed again inside it, so only the arguments are kept
  between the passes. Without the region the rewriter's CSE would merge the recomputation
  with the forward pass, and store every intermediate as plain reverse mode does.
- Batching: a ``remat`` of the batched ``fun``.
- Rewriter: results nothing reads are pruned, with the operands only they needed.

Lowering: ``remat`` in ``lowering/numba_cpu/regions.py`` (the sub-graph in place, in a block
of its own), in ``lowering/numba_cuda/regions.py`` (a host function, as a branch) and in
``lowering/mlx/rules.py`` (traced into the program: MLX's compiler may merge what this keeps
apart, so there it saves no memory).
"""

import functools

from .. import tree
from ..core.dependence import output_dependence
from ..core.interpret import evaluate
from ..core.primitives import Primitive, register
from ..core.rewrite import REGION_RULES, RegionRules, simplify
from ..core.tracing import TraceTensor, bind, current_frames
from ..transforms.batching import batch_graph
from ..transforms.jvp import jvp_graph
from ..transforms.vjp import vjp_graph
from .region_rules import check_operands, flags, index_map, pick, spread, with_params
from .regions import as_leaf, avals, bits, input_masks, nonzero, restrict, rewire, trace_body

__all__ = ["checkpoint"]


def checkpoint(fun, *, prevent_cse=True, static_argnums=()):
    """``fun`` whose intermediate values reverse mode recomputes rather than stores. Arguments
    at ``static_argnums`` are Python values the function is traced for. ``prevent_cse`` is
    accepted for JAX's signature: the recomputation is never merged with the forward pass."""
    static_argnums = tuple(sorted(set(static_argnums)))

    @functools.wraps(fun)
    def checkpointed(*args):
        n = len(args)
        static = {k % n for k in static_argnums if -n <= k < n}
        if len(static) != len(static_argnums):
            raise ValueError(f"checkpoint: static_argnums {static_argnums} out of range for "
                             f"{n} arguments")
        dynamic = [a for k, a in enumerate(args) if k not in static]
        leaves, in_tree = tree.flatten(dynamic)
        leaves = [as_leaf(x, "an argument of a checkpointed function") for x in leaves]
        if not (current_frames() or any(type(x) is TraceTensor for x in leaves)):
            return fun(*args)

        def call(*values):
            it = iter(values)
            return fun(*[args[k] if k in static else next(it) for k in range(n)])

        body = trace_body(call, in_tree.unflatten(leaves), "a checkpointed function")
        outs = bind("remat", *leaves, *body.captures, fun=body.graph)
        return body.out_tree.unflatten(outs)

    return checkpointed


# -- rules --------------------------------------------------------------------------------------

def _shape(*operands, fun):
    check_operands("remat", fun, operands)
    return avals(fun.nodes[o] for o in fun.outputs)


def _impl(*operands, fun):
    return evaluate(fun, list(operands))


def _dependence(*, fun):
    return [sorted(d) for d in output_dependence(fun)]


def _jvp(primals, tangents, outs, *, fun):
    tangent_f = flags(tangents)
    n_in, n_out = len(primals), len(outs)
    graph = jvp_graph(fun, tangent_f)
    out_f = nonzero(graph, n_in, range(n_out, 2 * n_out))
    if not any(out_f):
        return spread([], out_f, outs)
    keep = [n_out + k for k in range(n_out) if out_f[k]]
    res = bind("remat", *primals, *pick(tangents, tangent_f),
               fun=rewire(graph, range(len(graph.inputs)), keep))
    return spread(res, out_f, outs)


def _vjp(cts, primals, outs, *, fun, wanted):
    """The VJP of ``fun`` as one more region: it replays ``fun`` forward, then applies the
    cotangents, so the forward values are recomputed where they are needed."""
    ct_f = flags(cts)
    wrt = [k for k, x in enumerate(primals) if x.dtype.is_floating and wanted[k]]
    if not wrt or not any(ct_f):
        return [None] * len(primals)
    n_in, n_out = len(primals), len(outs)
    graph = vjp_graph(fun, wrt, ["input" if f else None for f in ct_f])
    grad_f = nonzero(graph, n_in, range(n_out, n_out + len(wrt)))
    if not any(grad_f):
        return [None] * len(primals)
    keep = [n_out + j for j, f in enumerate(grad_f) if f]
    grads = iter(bind("remat", *primals, *pick(cts, ct_f),
                      fun=rewire(graph, range(len(graph.inputs)), keep)))
    by_operand = {k: next(grads) for k, f in zip(wrt, grad_f) if f}
    return [by_operand.get(k) for k in range(n_in)]


def _batch(args, batched, size, *, fun):
    graph, out_b = batch_graph(fun, list(batched), size)
    return bind("remat", *args, fun=graph), out_b


def _prune(node, read):
    """Only the results read, and the operands they need."""
    fun = node.kw["fun"]
    outputs = sorted(read)
    masks = input_masks(fun)
    need = 0
    for r in outputs:
        need |= masks[r]
    inputs = bits(need, range(len(fun.inputs)))
    if len(outputs) == len(fun.outputs) and len(inputs) == len(fun.inputs):
        return None
    return inputs, with_params(node, fun=simplify(restrict(fun, inputs, outputs))), \
        index_map(outputs)


register(Primitive(
    "remat", shape_rule=_shape, impl=_impl, jvp=_jvp, vjp=_vjp, batch=_batch,
    multiple_results=True, foldable=False, dependence=_dependence, vjp_wanted=True,
    kind="region",
))
REGION_RULES["remat"] = RegionRules(_prune)
