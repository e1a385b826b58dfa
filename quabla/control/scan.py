"""The ``scan`` region (``scan``, and ``fori_loop`` with static bounds): every rule of one
primitive.

Operands ``(*init, *consts)``; params ``body``, ``length``, ``lower``, ``reverse``,
``n_carry``. ``body`` maps ``(i, *carry, *consts)`` to ``(*carry, *ys)`` for
``i = lower, ..., lower + length - 1`` (in reverse order if ``reverse``); the results are the
final carry and each ``y`` stacked with its row ``i - lower``. The index is a weak float64
scalar (``INDEX_DTYPE``: Quabla has no integer dtype).

- Reference: runs the body with the interpreter, step by step.
- Dependence: ``loop_closure`` of the body's (a final carry depends on its start).
- JVP: a scan carrying the nonzero tangents beside the carry, stacking the ys' tangents.
- VJP: a forward scan that also stacks, per step (row ``i - lower``), the carry it starts
  from and the step's residuals: the costly values the body's VJP reads (transcendental
  functions, divisions, reductions, products; ``_residuals``). Then a scan in the opposite
  direction whose body reads its step's carry, residuals and cotangents of the ``ys`` with
  ``dynamic_index``, computes again only the cheap rest of the step (arithmetic, moves of
  elements) and applies its VJP; the cotangents of the carry and of the loop constants are
  its carry. The forward scan has the primal scan's operands, so the rewriter merges them:
  the forward loop runs once. When carries and residuals together exceed
  ``CHECKPOINT_BYTES`` only the carries are stored and the reverse pass computes the whole
  step again. When the stored carries alone (``length`` times the carry's bytes) exceed
  ``CHECKPOINT_BYTES`` (256 MiB) and ``length >= 4``, the scan is differentiated as the same
  loop split into segments of ``ceil(sqrt(length))`` steps (an outer scan over segments, each
  an inner scan, plus a scan over the remaining steps): the outer scan stores only the
  carries at segment starts, and its backward pass recomputes each segment's carries from
  them, about ``2 sqrt(length)`` stored carries for one more forward pass (applied again to
  a segment loop that is itself too large).
- Batching: the index is never batched; a carry is batched when its start or the body makes
  it so (a fixpoint), a batched ``y`` gets the batch axis in front of the loop axis.
- Rewriter: keeps the results read and the carries they need through the body (a fixpoint),
  drops unread constants; merges scans over the same operands whose bodies compute the same
  carries into one stacking the ys of all.

Lowering: ``scan`` in ``lowering/numba_cpu/regions.py`` (a ``for`` loop, down for
``reverse``), ``scan`` in ``lowering/numba_cuda/regions.py``, ``_scan`` in
``lowering/mlx/rules.py``.
"""

import functools
import math

import numpy as np

from .. import dtypes as _dt
from .. import ops
from ..core.dependence import loop_closure, output_dependence
from ..core.interpret import evaluate
from ..core.primitives import PRIMITIVES, Primitive, register
from ..core.rewrite import REGION_RULES, RegionRules, simplify
from ..core.tracing import bind
from ..transforms.inline import inline
from ..transforms.vjp import vjp_graph
from .region_rules import (carry_fixpoint, check_operands, dense, flags, index_map, lift,
                           loop_jvp, named, pick, split, spread, with_params)
from .regions import (avals, bits, graph_input, hoist, input_masks, merge_graphs, nonzero,
                      reading, restrict, returning, rewire, traced)

__all__ = ["INDEX_DTYPE", "CHECKPOINT_BYTES"]

INDEX_DTYPE = _dt.float64  # the loop index: a weak scalar, as a Python int would be
CHECKPOINT_BYTES = 256 << 20  # stored carries beyond this switch a scan's VJP to checkpoints


def _shape(*operands, body, length, lower, reverse, n_carry):
    check_operands("scan", body, operands, first=1)
    ys = [((length,) + s, d, w) for s, d, w in avals(body.nodes[o] for o in body.outputs[n_carry:])]
    return avals(operands[:n_carry]) + ys


def _impl(*operands, body, length, lower, reverse, n_carry):
    carry, consts = list(operands[:n_carry]), list(operands[n_carry:])
    ys = [np.empty((length,) + body.nodes[o].shape, body.nodes[o].dtype.numpy)
          for o in body.outputs[n_carry:]]
    for k in (range(length - 1, -1, -1) if reverse else range(length)):
        outs = evaluate(body, [np.asarray(float(lower + k))] + carry + consts)
        carry = outs[:n_carry]
        for stack, y in zip(ys, outs[n_carry:]):
            stack[k] = y
    return carry + ys


def _dependence(*, body, length, lower, reverse, n_carry):
    return [sorted(d) for d in loop_closure(output_dependence(body), 1, n_carry)]


def _bind(body, init, consts, **params):
    """Bind a scan, hoisting what its body computes from the constants alone."""
    graph, outer = hoist(body, 1 + len(init))
    return bind("scan", *init, *inline(outer, list(consts)), body=graph,
                n_carry=len(init), **params)


# -- forward mode -------------------------------------------------------------------------------

def _jvp(primals, tangents, outs, *, body, length, lower, reverse, n_carry):
    """A scan carrying the primal carry and the nonzero tangents, stacking the tangents of
    the ys (the primal ys stay those of the original node)."""
    n = n_carry
    m, n_ys = len(primals) - n, len(outs) - n
    graph, carry_f, const_f, ys_f = loop_jvp(body, 1, tangents[:n], tangents[n:], n_ys)
    a = sum(carry_f)
    # inputs (i, *carry, *carry tangents, *consts, *const tangents)
    order = ([0] + list(range(1, 1 + n)) + list(range(1 + n + m, 1 + n + m + a))
             + list(range(1 + n, 1 + n + m)) + list(range(1 + n + m + a, len(graph.inputs))))
    # outputs (*carry, *carry tangents, *ys tangents)
    keep = (list(range(n)) + [n + n_ys + k for k in range(n) if carry_f[k]]
            + [2 * n + n_ys + k for k in range(n_ys) if ys_f[k]])
    new_body = rewire(graph, order, keep)
    init_t = dense(pick(tangents[:n], carry_f), pick(primals[:n], carry_f))
    res = _bind(new_body, list(primals[:n]) + init_t,
                list(primals[n:]) + pick(tangents[n:], const_f),
                length=length, lower=lower, reverse=reverse)
    return (spread(res[n:n + a], carry_f, outs[:n])
            + spread(res[n + a:], ys_f, outs[n:]))


# -- reverse mode -------------------------------------------------------------------------------

def _stored_bytes(carry, length):
    return length * sum(math.prod(c.shape) * c.dtype.numpy.itemsize for c in carry)


def _vjp(cts, primals, outs, *, body, length, lower, reverse, n_carry, wanted):
    params = dict(body=body, length=length, lower=lower, reverse=reverse, n_carry=n_carry,
                  wanted=wanted)
    if length >= 4 and _stored_bytes(primals[:n_carry], length) > CHECKPOINT_BYTES:
        return _checkpointed_vjp(cts, primals, **params)
    return _stored_vjp(cts, primals, **params)


def _stored_vjp(cts, primals, *, body, length, lower, reverse, n_carry, wanted):
    """Store every step's carry and residuals in a forward scan, then run the body's VJP
    backwards."""
    n = n_carry
    init, consts = list(primals[:n]), list(primals[n:])
    m, n_in = len(consts), len(body.inputs)
    graph, carry_f, const_f, grad_at = _loop_vjp(body, n, flags(cts[:n]), flags(cts[n:]),
                                                 _needed(body, n, wanted))
    a, b = sum(carry_f), sum(const_f)
    if not a + b:
        return [None] * len(primals)
    kept = _residuals(graph, n_in, 1 + n)
    if _stored_bytes(init + [graph.nodes[r] for r in kept], length) > CHECKPOINT_BYTES:
        kept = []
    stash = _bind(_stash(body, n, returning(graph, kept, n_in)), init, consts, length=length,
                  lower=lower, reverse=reverse)[n:]
    graph = reading(graph, kept, "residual")
    ys_ct = pick(cts[n:], flags(cts[n:]))

    def step(args):
        i, ct_carry, acc, rows, k_consts, y_cts = split(
            args, [1, a, b, n + len(kept), m, len(ys_ct)])
        i = i[0]
        row = i if lower == 0 else ops.subtract(i, float(lower))
        at_row = [bind("dynamic_index", s, row) for s in rows]
        outs = inline(graph, [i] + at_row[:n] + k_consts + ct_carry
                      + [bind("dynamic_index", y, row) for y in y_cts] + at_row[n:])
        return ([outs[grad_at[1 + k]] for k in range(n) if carry_f[k]]
                + [ops.add(s, outs[grad_at[1 + n + k]])
                   for s, k in zip(acc, (k for k in range(m) if const_f[k]))])

    ct_init, ct_consts = pick(init, carry_f), pick(consts, const_f)
    back = traced([graph_input(body, 0)] + named(ct_init, "ct/carry")
                  + named(ct_consts, "ct/const") + named(stash, "stash")
                  + named(consts, "const") + named(ys_ct, "ct/ys"), step)
    start = dense(pick(cts[:n], carry_f), ct_init) + dense([None] * b, ct_consts)
    res = _bind(back, start, stash + consts + ys_ct, length=length, lower=lower,
                reverse=not reverse)
    return spread(res[:a], carry_f, init) + spread(res[a:], const_f, consts)


def _residuals(graph, n_in, n_variant):
    """The forward values a scan's reverse pass reads from the forward pass's stacks rather
    than computing them again: of the values of one step of ``graph`` (the body's VJP, inputs
    ``(i, *carry, *consts, *seeds)``) that the cotangents read and that change from step to
    step (they depend on one of the first ``n_variant`` inputs), the costly ones, and those
    the cheap ones are computed from (arithmetic, comparisons and moves of elements are
    computed again: storing them would cost as much memory traffic as it saves). What
    depends on the constants alone is computed before the reverse loop, once."""
    nodes = graph.nodes
    linear, varies = set(graph.inputs[n_in:]), set(graph.inputs[:n_variant])
    for nid, node in enumerate(nodes):
        if any(o in linear for o in node.operands):
            linear.add(nid)
        elif any(o in varies for o in node.operands):
            varies.add(nid)
    inputs = set(graph.inputs)
    todo = sorted({o for nid in linear for o in nodes[nid].operands
                   if o in varies and o not in linear and o not in inputs})
    kept, seen = set(), set()
    while todo:
        nid = todo.pop()
        if nid in seen or nid in inputs:
            continue
        seen.add(nid)
        if _costly(nodes[nid]):
            kept.add(nid)
        else:
            todo.extend(o for o in nodes[nid].operands if o in varies)
    return sorted(kept)


def _costly(node):
    """Whether a reverse pass stores a forward value of this node rather than computes it
    again: floating values that are neither index maps nor cheap (the rule table's ``cheap``:
    arithmetic, a reshape, a loop's row read by its index)."""
    rule = PRIMITIVES[node.op]
    return node.dtype.is_floating and not (rule.kind == "index_map" or rule.cheap(node.kw))


def _needed(body, n, wanted):
    """The body inputs of a scan (``(i, *carry, *consts)``) whose cotangents its VJP
    computes: the wanted operands, and the carries whose cotangent reaches one of them through
    the body (a needless one could cross an inner ``while_loop`` that JAX differentiates)."""
    step = output_dependence(body)
    need = {1 + k for k, w in enumerate(wanted) if w}
    while True:
        grown = need | {1 + k for k in range(n) if step[k] & need}
        if grown == need:
            return need
        need = grown


def _loop_vjp(body, n, carry_f, ys_f, needed):
    """The VJP of a scan body ``(i, *carry, *consts) -> (*carry, *ys)`` with respect to the
    ``needed`` inputs, seeded at the flagged carries and ys, at the fixpoint of which carries
    have nonzero cotangents. Returns ``(graph, carry flags, const flags, grad_at)``: the
    graph's inputs are the primals, then the seeds; ``grad_at`` maps a body input to the
    graph output of its gradient."""
    n_in, n_out = len(body.inputs), len(body.outputs)
    wrt = [k for k in range(1, n_in)
           if body.nodes[body.inputs[k]].dtype.is_floating and k in needed]
    carry_f = [f and 1 + k in wrt for k, f in enumerate(carry_f)]
    grad_at = {k: n_out + j for j, k in enumerate(wrt)}
    while True:
        graph = vjp_graph(body, wrt, ["input" if f else None for f in carry_f + ys_f])
        found = dict(zip(wrt, nonzero(graph, n_in, [grad_at[k] for k in wrt])))
        settled = [c or found.get(1 + k, False) for k, c in enumerate(carry_f)]
        if settled == carry_f:
            const_f = [found.get(k, False) for k in range(1 + n, n_in)]
            return graph, carry_f, const_f, grad_at
        carry_f = settled


def _stash(body, n, residuals):
    """``body`` returning its new carry and, as ys, the carry it starts from and the values
    of the graph ``residuals`` (over the body's inputs)."""
    return traced([graph_input(body, k) for k in range(len(body.inputs))],
                  lambda args: inline(body, args)[:n] + args[1:1 + n] + inline(residuals, args))


def _checkpointed_vjp(cts, primals, *, body, length, lower, reverse, n_carry, wanted):
    """Differentiate the same loop split into segments (see the module docstring)."""
    n = n_carry
    seg = math.isqrt(length - 1) + 1  # ceil(sqrt(length))
    count, rest = divmod(length, seg)
    index, carry_in = graph_input(body, 0), [graph_input(body, 1 + k) for k in range(n)]
    const_in = [graph_input(body, k) for k in range(1 + n, len(body.inputs))]
    # one segment: the body at index i + offset, offset = lower + seg * (segment number)
    inner = traced([index] + carry_in + [index[:3] + ("offset",)] + const_in,
                   lambda a: inline(body, [ops.add(a[0], a[1 + n])] + a[1:1 + n] + a[2 + n:]))
    outer = traced([index] + carry_in + const_in, lambda a: bind(
        "scan", *a[1:1 + n], ops.add(ops.multiply(a[0], float(seg)), float(lower)), *a[1 + n:],
        body=inner, length=seg, lower=0, reverse=reverse, n_carry=n))

    def segments(args):
        carry, consts = args[:n], args[n:]
        parts = [(outer, count, 0), (body, rest, lower + count * seg)][:2 if rest else 1]
        ys = {}
        for graph, steps, first in (parts[::-1] if reverse else parts):
            out = bind("scan", *carry, *consts, body=graph, length=steps, lower=first,
                       reverse=reverse, n_carry=n)
            carry, ys[graph] = out[:n], out[n:]
        stacked = [ops.reshape(y, (count * seg,) + tuple(y.shape[2:])) for y in ys[outer]]
        if rest:
            stacked = [ops.concat([y, r], axis=0) for y, r in zip(stacked, ys[body])]
        return list(carry) + stacked

    graph = traced(named(primals, "in"), segments)
    ct_f = flags(cts)
    wrt = [k for k, x in enumerate(primals) if x.dtype.is_floating and wanted[k]]
    vjp = vjp_graph(graph, wrt, ["input" if f else None for f in ct_f])
    grads = dict(zip(wrt, inline(vjp, list(primals) + pick(cts, ct_f))[len(cts):]))
    return [grads.get(k) for k in range(len(primals))]


# -- batching -----------------------------------------------------------------------------------

def _batch(args, batched, size, *, body, length, lower, reverse, n_carry):
    """The index is never batched; a ``y`` is batched when it depends on batched values (the
    stacked result has the loop axis first; the batch axis is moved in front of it)."""
    n_ys = len(body.outputs) - n_carry
    consts = list(batched[n_carry:])
    graph, carry_b, ys_b = carry_fixpoint(body, [False], list(batched[:n_carry]), consts, size,
                                          n_ys)
    init = lift(args[:n_carry], batched[:n_carry], carry_b, size)
    outs = bind("scan", *init, *args[n_carry:], body=graph, length=length, lower=lower,
                reverse=reverse, n_carry=n_carry)
    ys = [bind("transpose", y, permutation=(1, 0) + tuple(range(2, y.ndim))) if f else y
          for y, f in zip(outs[n_carry:], ys_b)]
    return list(outs[:n_carry]) + ys, carry_b + ys_b


# -- the rewriter -------------------------------------------------------------------------------

def _prune(node, read):
    """Body inputs ``(i, *carry, *consts)``, outputs ``(*carry, *ys)`` = the results."""
    body, n = node.kw["body"], node.kw["n_carry"]
    masks = input_masks(body)
    keep = set(read)
    while True:
        need = 0
        for r in keep:
            need |= masks[r]
        grown = keep | {k for k in range(n) if need >> (1 + k) & 1}
        if grown == keep:
            break
        keep = grown
    outputs = sorted(keep)
    carries = [k for k in outputs if k < n]
    consts = bits(need, range(1 + n, len(body.inputs)))
    if len(outputs) == len(body.outputs) and len(consts) == len(body.inputs) - 1 - n:
        return None
    new = simplify(restrict(body, [0] + [1 + k for k in carries] + consts, outputs))
    return (carries + [p - 1 for p in consts], with_params(node, body=new, n_carry=len(carries)),
            index_map(outputs))


@functools.lru_cache(maxsize=256)
def _carry_core(body, n):
    return restrict(body, range(len(body.inputs)), range(n))


def _merge_key(node):
    kw = node.kw
    return ("scan", node.operands, kw["length"], kw["lower"], kw["reverse"], kw["n_carry"],
            _carry_core(kw["body"], kw["n_carry"]))


def _merge(nodes):
    n = nodes[0].kw["n_carry"]
    (body,), maps = merge_graphs([[node.kw["body"] for node in nodes]], n)
    return with_params(nodes[0], body=body), maps


register(Primitive(
    "scan", shape_rule=_shape, impl=_impl, jvp=_jvp, vjp=_vjp, batch=_batch,
    multiple_results=True, foldable=False, dependence=_dependence, vjp_wanted=True, kind="region",
))
REGION_RULES["scan"] = RegionRules(_prune, _merge_key, _merge)
