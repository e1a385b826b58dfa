"""The ``cond`` region: every rule of one primitive.

Operands ``(pred, *operands)``; params ``true_fun``/``false_fun``, each mapping the operands
to the results (``constructs.cond`` gives both branches the same inputs: each branch's
captures, unused by the other). A node with several results: one ``get`` per result.

- Reference: runs the chosen branch with the interpreter.
- Dependence: a result depends on the operands either branch reads for it.
- JVP: a second cond over the operands and their nonzero tangents.
- VJP: a forward cond returning the chosen branch's results and the residuals its VJP needs
  (zeros for the other branch's), which the rewriter merges with the primal cond, then a cond
  of the VJP's part that reads the cotangents: the branch runs forward once.
- Batching: an unbatched predicate stays one branch; a batched one runs both and selects per
  lane.
- Rewriter: prunes unread results and the operands no kept result reads; merges conds over
  the same operands into one.

Lowering: ``cond`` in ``lowering/numba_cpu/regions.py`` (an ``if``/``else`` around the
branches), ``cond`` in ``lowering/numba_cuda/regions.py``, ``_cond`` in
``lowering/mlx/rules.py``.
"""

from ..core.dependence import output_dependence
from ..core.interpret import evaluate
from ..core.primitives import Primitive, Zero, register
from ..core.rewrite import REGION_RULES, RegionRules, simplify
from ..core.tracing import bind
from ..transforms.batching import batch_graph
from ..transforms.inline import inline
from ..transforms.jvp import jvp_graph, materialize
from ..transforms.vjp import vjp_graph
from .region_rules import (check_operands, flags, index_map, named, pick, select, split,
                           spread, with_params)
from .regions import (avals, bits, graph_input, hoist, input_masks, merge_graphs, nonzero,
                      restrict, rewire, traced)

__all__ = []


def _shape(pred, *operands, true_fun, false_fun):
    check_operands("cond", true_fun, operands)
    check_operands("cond", false_fun, operands)
    t, f = (avals(g.nodes[o] for o in g.outputs) for g in (true_fun, false_fun))
    return [(s, d, wt and wf) for (s, d, wt), (_, _, wf) in zip(t, f)]


def _impl(pred, *operands, true_fun, false_fun):
    return evaluate(true_fun if bool(pred) else false_fun, list(operands))


def _dependence(*, true_fun, false_fun):
    """A result depends on the operands either branch reads for it (the predicate has no
    derivative)."""
    return [[1 + k for k in sorted(t | f)] for t, f in
            zip(output_dependence(true_fun), output_dependence(false_fun))]


# -- derivatives --------------------------------------------------------------------------------

def _jvp(primals, tangents, outs, *, true_fun, false_fun):
    """A second cond over the operands and their tangents, returning the tangents (the
    primal results stay those of the original node)."""
    pred, operands = primals[0], primals[1:]
    tangent_f = flags(tangents[1:])
    n_in, n_out = len(operands), len(outs)
    graphs = [jvp_graph(g, tangent_f) for g in (true_fun, false_fun)]
    out_f = [any(f) for f in zip(*(nonzero(g, n_in, range(n_out, 2 * n_out)) for g in graphs))]
    if not any(out_f):
        return spread([], out_f, outs)
    keep = [n_out + k for k in range(n_out) if out_f[k]]
    t, f = (rewire(g, range(len(g.inputs)), keep) for g in graphs)
    res = bind("cond", pred, *operands, *pick(tangents[1:], tangent_f), true_fun=t, false_fun=f)
    return spread(res, out_f, outs)


def _vjp(cts, primals, outs, *, true_fun, false_fun, wanted):
    """A forward cond returning the branch's results and its residuals (zeros for the other
    branch's), which the rewriter merges with the primal cond, then a cond of what needs the
    cotangents, reading the residuals: the branch runs forward once."""
    pred, operands = primals[0], primals[1:]
    n_in, n_out = len(operands), len(outs)
    ct_f = flags(cts)
    seeds = ["input" if f else None for f in ct_f]
    wrt = [k for k, x in enumerate(operands) if x.dtype.is_floating and wanted[1 + k]]
    graphs = [vjp_graph(g, wrt, seeds) for g in (true_fun, false_fun)]
    grad_f = [any(f) for f in zip(*(nonzero(g, n_in, range(n_out, n_out + len(wrt)))
                                    for g in graphs))]
    if not any(grad_f):
        return [None] * len(primals)
    keep = [n_out + j for j, f in enumerate(grad_f) if f]
    n_ct = len(graphs[0].inputs) - n_in
    # per branch: (back over (cts, *boundary), outer over the operands -> boundary)
    splits = [hoist(rewire(g, list(range(n_in, n_in + n_ct)) + list(range(n_in)), keep), n_ct)
              for g in graphs]
    passed = [[outer.inputs.index(o) if o in outer.inputs else None for o in outer.outputs]
              for _, outer in splits]  # a boundary value that is an operand: passed as it is
    res = [[k for k, p in enumerate(ps) if p is None] for ps in passed]
    res_avals = [[graph_input(back, n_ct + k) for k in r] for (back, _), r in zip(splits, res)]
    operand_in = [graph_input(true_fun, k) for k in range(n_in)]

    def forward(branch):
        def fun(args):
            values = inline((true_fun, false_fun)[branch], args)
            for b, ((_, outer), r) in enumerate(zip(splits, res)):
                if b == branch:
                    boundary = inline(outer, args)
                    values += [boundary[k] for k in r]
                else:
                    values += [materialize(Zero(s, d), s, d) for s, d, _, _ in res_avals[b]]
            return values
        return traced(operand_in, fun)

    fwd = bind("cond", pred, *operands, true_fun=forward(0), false_fun=forward(1))[n_out:]
    stored = split(fwd, [len(r) for r in res])

    def backward(branch):
        (back, _), ps = splits[branch], passed[branch]

        def fun(args):
            ops_, mine, ct = (split(args, [n_in, len(res[0]), len(res[1]), n_ct])[k]
                              for k in (0, 1 + branch, 3))
            it = iter(mine)
            return inline(back, ct + [ops_[p] if p is not None else next(it) for p in ps])
        return traced(operand_in + res_avals[0] + res_avals[1]
                      + named(pick(cts, ct_f), "cotangent"), fun)

    grads = iter(bind("cond", pred, *operands, *stored[0], *stored[1], *pick(cts, ct_f),
                      true_fun=backward(0), false_fun=backward(1)))
    by_operand = {k: next(grads) for k, f in zip(wrt, grad_f) if f}
    return [None] + [by_operand.get(k) for k in range(n_in)]


# -- batching -----------------------------------------------------------------------------------

def _batch(args, batched, size, *, true_fun, false_fun):
    """An unbatched predicate stays one branch (a result batched in either branch is batched
    in both); a batched one runs both branches and selects per lane."""
    pred, operands, operand_b = args[0], list(args[1:]), list(batched[1:])
    if batched[0]:
        out_b = [True] * len(true_fun.outputs)
    else:
        out_b = [t or f for t, f in zip(batch_graph(true_fun, operand_b, size)[1],
                                        batch_graph(false_fun, operand_b, size)[1])]
    t, f = (batch_graph(g, operand_b, size, out_mapped=out_b)[0] for g in (true_fun, false_fun))
    if batched[0]:
        return select(pred, inline(t, operands), inline(f, operands)), out_b
    return bind("cond", pred, *operands, true_fun=t, false_fun=f), out_b


# -- the rewriter -------------------------------------------------------------------------------

def _prune(node, read):
    """Operands ``(pred, *operands)``; each branch maps the operands to the results."""
    branches = (node.kw["true_fun"], node.kw["false_fun"])
    outputs = sorted(read)
    need = 0
    for g in branches:
        masks = input_masks(g)
        for r in outputs:
            need |= masks[r]
    n_in = len(branches[0].inputs)
    inputs = bits(need, range(n_in))
    if len(outputs) == len(branches[0].outputs) and len(inputs) == n_in:
        return None
    t, f = (simplify(restrict(g, inputs, outputs)) for g in branches)
    return ([0] + [1 + k for k in inputs], with_params(node, true_fun=t, false_fun=f),
            index_map(outputs))


def _merge(nodes):
    (t, f), maps = merge_graphs([[node.kw["true_fun"] for node in nodes],
                                 [node.kw["false_fun"] for node in nodes]], 0)
    return with_params(nodes[0], true_fun=t, false_fun=f), maps


register(Primitive(
    "cond", shape_rule=_shape, impl=_impl, jvp=_jvp, vjp=_vjp, batch=_batch,
    multiple_results=True, foldable=False, dependence=_dependence, vjp_wanted=True, kind="region",
))
REGION_RULES["cond"] = RegionRules(_prune, lambda node: ("cond", node.operands), _merge)
