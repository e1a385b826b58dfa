"""JVP and VJP rules of the region primitives.

Every rule builds new region nodes whose sub-graphs are the JVP or VJP of the old ones
(``jvp_graph``/``vjp_graph``) and binds only ordinary primitives and regions, so the rules of
those apply in turn: that is what makes second order (a Hessian through a scan, ``grad`` of
``grad`` through a ``fori_loop``) work.

Symbolic zeros stay symbolic. A carry whose tangent (or cotangent) is zero at entry may become
nonzero through the body, so loops find the carries with nonzero tangents by a fixpoint; the
others, and outputs whose tangent is zero in every branch, are not computed at all. A tangent
or cotangent output of a sub-graph is zero exactly when it does not depend on the tangent or
cotangent inputs (it is linear in them).

Forward mode (all four regions): ``cond`` runs the JVP of the chosen branch; ``scan`` and
``while`` carry the tangents beside the primal carry (``while``'s ``cond_fun`` sees only the
primals).

Reverse mode (``cond``, ``scan``, so ``fori_loop`` with static bounds): ``cond`` runs a forward
cond that returns the chosen branch's results and the residuals its VJP needs, then a cond of
the VJP's part that reads the cotangents. ``scan`` runs a forward scan that also stacks the carry at the start of
every step (row ``i - lower``), then a scan in the opposite direction whose body reads its
step's carry and cotangents of the ``ys`` with ``dynamic_index``, recomputes the step and
applies its VJP; the cotangents of the carry and of the loop constants are its carry. Both
forward regions have the same operands as the primal region, so the rewriter merges them
with it (``rewriting.py``): the forward loop or branch runs once. Memory:
the stored carries take ``length`` times the carry's bytes. When that exceeds
``CHECKPOINT_BYTES`` (256 MiB) and ``length >= 4``, the scan is differentiated as the same
loop split into segments of ``ceil(sqrt(length))`` steps (an outer scan over segments, each an
inner scan, plus a scan over the remaining steps): the outer scan stores only the carries at
segment starts, and its backward pass recomputes each segment's carries from them, about
``2 sqrt(length)`` stored carries for one more forward pass (applied again to a segment loop
that is itself too large). ``while_loop`` has no reverse mode (its trip count is unknown
before it runs), as in JAX, unless no cotangent needs to cross it (``while_vjp``).
"""

import math

from .. import ops
from ..core.dependence import loop_closure, output_dependence
from ..core.primitives import Zero, is_zero
from ..core.rewrite import simplify
from ..core.tracing import TraceFrame, bind, trace_frame
from ..errors import UnsupportedOperationError
from ..transforms.inline import inline
from ..transforms.jvp import jvp_graph, materialize
from ..transforms.vjp import vjp_graph
from .regions import hoist, with_inputs

__all__ = ["CHECKPOINT_BYTES", "cond_jvp", "cond_vjp", "scan_jvp", "scan_vjp", "while_jvp",
           "while_vjp"]

CHECKPOINT_BYTES = 256 << 20  # stored carries beyond this switch a scan's VJP to checkpoints


# -- graph plumbing -----------------------------------------------------------------------------

def _input(graph, k):
    node = graph.nodes[graph.inputs[k]]
    return node.shape, node.dtype, node.weak, graph.input_names[k]


def _traced(inputs, fun):
    """The graph of ``fun(tracers) -> values`` over inputs ``(shape, dtype, weak, name)``."""
    frame = TraceFrame()
    with trace_frame(frame):
        args = [frame.new_input(s, d, name, w) for s, d, w, name in inputs]
        graph = frame.build([frame.operand(v) for v in fun(args)])
    return simplify(graph)


def _rewire(graph, order, outputs):
    """``graph`` whose input ``k`` is its old input ``order[k]``, returning ``outputs``."""
    def fun(args):
        full = [None] * len(order)
        for position, k in enumerate(order):
            full[k] = args[position]
        outs = inline(graph, full)
        return [outs[k] for k in outputs]
    return _traced([_input(graph, k) for k in order], fun)


def _nonzero(graph, first, outputs):
    """For each of ``outputs`` (indices), whether it depends on the inputs from ``first`` on."""
    active = set(graph.inputs[first:])
    for nid, node in enumerate(graph.nodes):
        if any(o in active for o in node.operands):
            active.add(nid)
    return [graph.outputs[k] in active for k in outputs]


def _flags(values):
    return [not is_zero(v) and v.dtype.is_floating for v in values]


def _pick(values, flags):
    return [v for v, f in zip(values, flags) if f]


def _spread(values, flags, like):
    """``values`` back at the positions where ``flags`` hold; ``Zero`` elsewhere."""
    it = iter(values)
    return [next(it) if f else Zero(x.shape, x.dtype) for f, x in zip(flags, like)]


def _dense(values, like):
    return [materialize(v, tuple(x.shape), x.dtype) for v, x in zip(values, like)]


def _split(values, sizes):
    """``values`` cut into consecutive pieces of ``sizes``."""
    pieces, start = [], 0
    for size in sizes:
        pieces.append(list(values[start:start + size]))
        start += size
    return pieces


def _named(values, what):
    """Graph inputs like ``values``, named ``what0``, ``what1``, ..."""
    return [(tuple(v.shape), v.dtype, v.weak, f"{what}{k}") for k, v in enumerate(values)]


def _avals(values):
    return [(tuple(v.shape), v.dtype, v.weak) for v in values]


def _bind_scan(body, init, consts, **params):
    """Bind a scan, hoisting what its body computes from the constants alone."""
    graph, outer = hoist(body, 1 + len(init))
    return bind("scan", *init, *inline(outer, list(consts)), body=graph,
                n_carry=len(init), **params)


def _loop_jvp(body, lead, carry_t, const_t, n_ys):
    """The JVP of a loop body with inputs ``(*lead, *carry, *consts)`` and outputs
    ``(*carry, *ys)``, at the fixpoint of which carries have nonzero tangents. Returns
    ``(graph, carry flags, const flags, ys flags)``; the graph's inputs are the primals,
    then the tangents of the flagged carries and constants."""
    n, first = len(carry_t), len(body.inputs)
    carry_f, const_f = _flags(carry_t), _flags(const_t)
    while True:
        graph = jvp_graph(body, [False] * lead + carry_f + const_f)
        out_f = _nonzero(graph, first, range(n + n_ys, 2 * (n + n_ys)))
        settled = [c or o for c, o in zip(carry_f, out_f[:n])]
        if settled == carry_f:
            return graph, carry_f, const_f, out_f[n:]
        carry_f = settled


# -- cond ---------------------------------------------------------------------------------------

def cond_jvp(primals, tangents, outs, *, true_fun, false_fun):
    """A second cond over the operands and their tangents, returning the tangents (the
    primal results stay those of the original node)."""
    pred, operands = primals[0], primals[1:]
    flags = _flags(tangents[1:])
    n_in, n_out = len(operands), len(outs)
    graphs = [jvp_graph(g, flags) for g in (true_fun, false_fun)]
    out_f = [any(f) for f in zip(*(_nonzero(g, n_in, range(n_out, 2 * n_out)) for g in graphs))]
    if not any(out_f):
        return _spread([], out_f, outs)
    keep = [n_out + k for k in range(n_out) if out_f[k]]
    t, f = (_rewire(g, range(len(g.inputs)), keep) for g in graphs)
    res = bind("cond", pred, *operands, *_pick(tangents[1:], flags), true_fun=t, false_fun=f)
    return _spread(res, out_f, outs)


def cond_vjp(cts, primals, outs, *, true_fun, false_fun, wanted):
    """A forward cond returning the branch's results and its residuals (zeros for the other
    branch's), which the rewriter merges with the primal cond, then a cond of what needs the
    cotangents, reading the residuals: the branch runs forward once."""
    pred, operands = primals[0], primals[1:]
    n_in, n_out = len(operands), len(outs)
    flags = _flags(cts)
    seeds = ["input" if f else None for f in flags]
    wrt = [k for k, x in enumerate(operands) if x.dtype.is_floating and wanted[1 + k]]
    graphs = [vjp_graph(g, wrt, seeds) for g in (true_fun, false_fun)]
    grad_f = [any(f) for f in zip(*(_nonzero(g, n_in, range(n_out, n_out + len(wrt)))
                                    for g in graphs))]
    if not any(grad_f):
        return [None] * len(primals)
    keep = [n_out + j for j, f in enumerate(grad_f) if f]
    n_ct = len(graphs[0].inputs) - n_in
    # per branch: (back over (cts, *boundary), outer over the operands -> boundary)
    splits = [hoist(_rewire(g, list(range(n_in, n_in + n_ct)) + list(range(n_in)), keep), n_ct)
              for g in graphs]
    passed = [[outer.inputs.index(o) if o in outer.inputs else None for o in outer.outputs]
              for _, outer in splits]  # a boundary value that is an operand: passed as it is
    res = [[k for k, p in enumerate(ps) if p is None] for ps in passed]
    res_avals = [[_input(back, n_ct + k) for k in r] for (back, _), r in zip(splits, res)]
    operand_in = [_input(true_fun, k) for k in range(n_in)]

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
        return _traced(operand_in, fun)

    fwd = bind("cond", pred, *operands, true_fun=forward(0), false_fun=forward(1))[n_out:]
    stored = _split(fwd, [len(r) for r in res])

    def backward(branch):
        (back, _), ps = splits[branch], passed[branch]

        def fun(args):
            ops_, mine, ct = (_split(args, [n_in, len(res[0]), len(res[1]), n_ct])[k]
                              for k in (0, 1 + branch, 3))
            it = iter(mine)
            return inline(back, ct + [ops_[p] if p is not None else next(it) for p in ps])
        return _traced(operand_in + res_avals[0] + res_avals[1]
                       + _named(_pick(cts, flags), "cotangent"), fun)

    grads = iter(bind("cond", pred, *operands, *stored[0], *stored[1], *_pick(cts, flags),
                      true_fun=backward(0), false_fun=backward(1)))
    by_operand = {k: next(grads) for k, f in zip(wrt, grad_f) if f}
    return [None] + [by_operand.get(k) for k in range(n_in)]


# -- scan ---------------------------------------------------------------------------------------

def scan_jvp(primals, tangents, outs, *, body, length, lower, reverse, n_carry):
    """A scan carrying the primal carry and the nonzero tangents, stacking the tangents of
    the ys (the primal ys stay those of the original node)."""
    n = n_carry
    m, n_ys = len(primals) - n, len(outs) - n
    graph, carry_f, const_f, ys_f = _loop_jvp(body, 1, tangents[:n], tangents[n:], n_ys)
    a = sum(carry_f)
    # inputs (i, *carry, *carry tangents, *consts, *const tangents)
    order = ([0] + list(range(1, 1 + n)) + list(range(1 + n + m, 1 + n + m + a))
             + list(range(1 + n, 1 + n + m)) + list(range(1 + n + m + a, len(graph.inputs))))
    # outputs (*carry, *carry tangents, *ys tangents)
    keep = (list(range(n)) + [n + n_ys + k for k in range(n) if carry_f[k]]
            + [2 * n + n_ys + k for k in range(n_ys) if ys_f[k]])
    new_body = _rewire(graph, order, keep)
    init_t = _dense(_pick(tangents[:n], carry_f), _pick(primals[:n], carry_f))
    res = _bind_scan(new_body, list(primals[:n]) + init_t,
                     list(primals[n:]) + _pick(tangents[n:], const_f),
                     length=length, lower=lower, reverse=reverse)
    return (_spread(res[n:n + a], carry_f, outs[:n])
            + _spread(res[n + a:], ys_f, outs[n:]))


def _stored_bytes(carry, length):
    return length * sum(math.prod(c.shape) * c.dtype.numpy.itemsize for c in carry)


def scan_vjp(cts, primals, outs, *, body, length, lower, reverse, n_carry, wanted):
    params = dict(body=body, length=length, lower=lower, reverse=reverse, n_carry=n_carry,
                  wanted=wanted)
    if length >= 4 and _stored_bytes(primals[:n_carry], length) > CHECKPOINT_BYTES:
        return _checkpointed_vjp(cts, primals, **params)
    return _stored_vjp(cts, primals, **params)


def _stored_vjp(cts, primals, *, body, length, lower, reverse, n_carry, wanted):
    """Store every step's carry in a forward scan, then run the body's VJP backwards."""
    n = n_carry
    init, consts = list(primals[:n]), list(primals[n:])
    m = len(consts)
    stash = _bind_scan(_stash(body, n), init, consts, length=length, lower=lower,
                       reverse=reverse)[n:]
    graph, carry_f, const_f, grad_at = _loop_vjp(body, n, _flags(cts[:n]), _flags(cts[n:]),
                                                 _needed(body, n, wanted))
    a, b = sum(carry_f), sum(const_f)
    if not a + b:
        return [None] * len(primals)
    ys_ct = _pick(cts[n:], _flags(cts[n:]))

    def step(args):
        i, ct_carry, acc, rows, k_consts, y_cts = _split(args, [1, a, b, n, m, len(ys_ct)])
        i = i[0]
        row = i if lower == 0 else ops.subtract(i, float(lower))
        carry = [bind("dynamic_index", s, row) for s in rows]
        outs = inline(graph, [i] + carry + k_consts + ct_carry
                      + [bind("dynamic_index", y, row) for y in y_cts])
        return ([outs[grad_at[1 + k]] for k in range(n) if carry_f[k]]
                + [ops.add(s, outs[grad_at[1 + n + k]])
                   for s, k in zip(acc, (k for k in range(m) if const_f[k]))])

    ct_init, ct_consts = _pick(init, carry_f), _pick(consts, const_f)
    back = _traced([_input(body, 0)] + _named(ct_init, "ct/carry")
                   + _named(ct_consts, "ct/const") + _named(stash, "stash")
                   + _named(consts, "const") + _named(ys_ct, "ct/ys"), step)
    start = _dense(_pick(cts[:n], carry_f), ct_init) + _dense([None] * b, ct_consts)
    res = _bind_scan(back, start, stash + consts + ys_ct, length=length, lower=lower,
                     reverse=not reverse)
    return _spread(res[:a], carry_f, init) + _spread(res[a:], const_f, consts)


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
        nonzero = dict(zip(wrt, _nonzero(graph, n_in, [grad_at[k] for k in wrt])))
        settled = [c or nonzero.get(1 + k, False) for k, c in enumerate(carry_f)]
        if settled == carry_f:
            const_f = [nonzero.get(k, False) for k in range(1 + n, n_in)]
            return graph, carry_f, const_f, grad_at
        carry_f = settled


def _stash(body, n):
    """``body`` returning its new carry and, as ys, the carry it starts from."""
    return _traced([_input(body, k) for k in range(len(body.inputs))],
                   lambda args: inline(body, args)[:n] + args[1:1 + n])


def _checkpointed_vjp(cts, primals, *, body, length, lower, reverse, n_carry, wanted):
    """Differentiate the same loop split into segments (see the module docstring)."""
    n = n_carry
    seg = math.isqrt(length - 1) + 1  # ceil(sqrt(length))
    count, rest = divmod(length, seg)
    index, carry_in = _input(body, 0), [_input(body, 1 + k) for k in range(n)]
    const_in = [_input(body, k) for k in range(1 + n, len(body.inputs))]
    # one segment: the body at index i + offset, offset = lower + seg * (segment number)
    inner = _traced([index] + carry_in + [index[:3] + ("offset",)] + const_in,
                    lambda a: inline(body, [ops.add(a[0], a[1 + n])] + a[1:1 + n] + a[2 + n:]))
    outer = _traced([index] + carry_in + const_in, lambda a: bind(
        "scan", *a[1:1 + n], ops.add(ops.multiply(a[0], float(seg)), float(lower)), *a[1 + n:],
        body=inner, length=seg, lower=0, reverse=reverse, n_carry=n))

    def split(args):
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

    graph = _traced(_named(primals, "in"), split)
    flags = _flags(cts)
    wrt = [k for k, x in enumerate(primals) if x.dtype.is_floating and wanted[k]]
    vjp = vjp_graph(graph, wrt, ["input" if f else None for f in flags])
    grads = dict(zip(wrt, inline(vjp, list(primals) + _pick(cts, flags))[len(cts):]))
    return [grads.get(k) for k in range(len(primals))]


# -- while --------------------------------------------------------------------------------------

def while_jvp(primals, tangents, outs, *, cond_fun, body, n_carry):
    """A while loop carrying the nonzero tangents beside the carry; ``cond_fun`` takes the
    tangents as unused inputs."""
    n = n_carry
    m = len(primals) - n
    graph, carry_f, const_f, _ = _loop_jvp(body, 0, tangents[:n], tangents[n:], 0)
    a = sum(carry_f)
    order = (list(range(n)) + list(range(n + m, n + m + a)) + list(range(n, n + m))
             + list(range(n + m + a, len(graph.inputs))))
    new_body = _rewire(graph, order, list(range(n)) + [n + k for k in range(n) if carry_f[k]])
    init_t = _dense(_pick(tangents[:n], carry_f), _pick(primals[:n], carry_f))
    const_t = _pick(tangents[n:], const_f)
    test = with_inputs(cond_fun, _avals(_pick(primals[:n], carry_f)), n)
    test = with_inputs(test, _avals(const_t), n + a + m)
    res = bind("while", *primals[:n], *init_t, *primals[n:], *const_t, cond_fun=test,
               body=new_body, n_carry=n + a)
    return _spread(res[n:], carry_f, outs)


def while_vjp(cts, primals, outs, *, cond_fun, body, n_carry, wanted):
    """No cotangent for any operand when no result with a cotangent depends differentiably on
    a ``wanted`` operand (``loop_closure``: through the body to a fixpoint, and on its own
    start, as the loop may run no step): the loop then only computes values the gradient
    reads, as in JAX.
    A cotangent that must cross the loop raises."""
    depends = loop_closure(output_dependence(body), 0, n_carry)
    if not any(any(wanted[k] for k in d) for d, f in zip(depends, _flags(cts)) if f):
        return [None] * len(primals)
    raise UnsupportedOperationError(
        "reverse-mode differentiation of while_loop is not supported where a cotangent must "
        "flow through its carry: its trip count is only known when it runs, so the steps to "
        "store are unknown. Use fori_loop with static (Python int) bounds, or scan, which are "
        "reverse-mode differentiable; forward mode (jvp, jacfwd) works through while_loop",
        op="while", device=None)
