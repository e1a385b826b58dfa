"""Batching rules of the region primitives: ``batch(args, batched, size, **params) -> (outs,
out_batched)`` with the batch axis leading.

Each rule batches its sub-graphs with ``batch_graph`` and binds a new region node. A loop
carry is batched when its initial value is or when the body makes it so (a fixpoint; its
initial value is then broadcast). A predicate that differs per lane cannot steer one branch
or loop for all lanes: ``cond`` then runs both branches and selects per lane, and ``while``
runs while any lane is active, freezing the lanes that are done, so each lane ends where it
would have ended alone.
"""

from .. import dtypes as _dt
from .. import ops
from ..core.rewrite import simplify
from ..core.tracing import TraceFrame, bind, trace_frame
from ..transforms.batching import batch_graph
from ..transforms.inline import inline

__all__ = ["cond_batch", "scan_batch", "while_batch"]


def _lift(xs, have, want, size):
    """The initial carry with the batch axis where ``want`` says (broadcast where missing)."""
    return [ops.broadcast_to(x, (size,) + tuple(x.shape)) if w and not h else x
            for x, h, w in zip(xs, have, want)]


def _select(pred, xs, ys):
    """``xs`` in the lanes where the per-lane ``pred`` (shape ``(size,)``) holds, else ``ys``."""
    return [bind("select", bind("broadcast_in_dim", pred, shape=tuple(x.shape),
                                broadcast_dimensions=(0,)), x, y) for x, y in zip(xs, ys)]


def _carry_fixpoint(body, lead, carry, consts, size, n_extra=0):
    """Batch a loop body whose inputs are ``(*lead, *carry, *consts)`` and whose outputs are
    ``(*carry, *extra)``: a carry unbatched at entry becomes batched once the body's new value
    for it is. Returns ``(graph, carry flags, extra flags)``."""
    while True:
        graph, out = batch_graph(body, lead + carry + consts, size,
                                 out_mapped=carry + [False] * n_extra)
        settled = [c or o for c, o in zip(carry, out)]
        if settled == carry:
            return graph, carry, list(out[len(carry):])
        carry = settled


# -- cond ---------------------------------------------------------------------------------------

def cond_batch(args, batched, size, *, true_fun, false_fun):
    """An unbatched predicate stays one branch (a result batched in either branch is batched
    in both); a batched one runs both branches and selects per lane."""
    pred, operands, flags = args[0], list(args[1:]), list(batched[1:])
    if batched[0]:
        out_b = [True] * len(true_fun.outputs)
    else:
        out_b = [t or f for t, f in zip(batch_graph(true_fun, flags, size)[1],
                                        batch_graph(false_fun, flags, size)[1])]
    t, f = (batch_graph(g, flags, size, out_mapped=out_b)[0] for g in (true_fun, false_fun))
    if batched[0]:
        return _select(pred, inline(t, operands), inline(f, operands)), out_b
    return bind("cond", pred, *operands, true_fun=t, false_fun=f), out_b


# -- scan ---------------------------------------------------------------------------------------

def scan_batch(args, batched, size, *, body, length, lower, reverse, n_carry):
    """The index is never batched; a ``y`` is batched when it depends on batched values (the
    stacked result has the loop axis first; the batch axis is moved in front of it)."""
    n_ys = len(body.outputs) - n_carry
    consts = list(batched[n_carry:])
    graph, carry_b, ys_b = _carry_fixpoint(body, [False], list(batched[:n_carry]), consts, size,
                                           n_ys)
    init = _lift(args[:n_carry], batched[:n_carry], carry_b, size)
    outs = bind("scan", *init, *args[n_carry:], body=graph, length=length, lower=lower,
                reverse=reverse, n_carry=n_carry)
    ys = [bind("transpose", y, permutation=(1, 0) + tuple(range(2, y.ndim))) if f else y
          for y, f in zip(outs[n_carry:], ys_b)]
    return list(outs[:n_carry]) + ys, carry_b + ys_b


# -- while --------------------------------------------------------------------------------------

def while_batch(args, batched, size, *, cond_fun, body, n_carry):
    """An unbatched predicate stays a plain loop over batched carries. A batched one makes
    every carry batched and carries one more value, the per-lane ``active`` flag: the loop
    runs while any lane is active, and a finished lane keeps its carry."""
    consts_b = list(batched[n_carry:])
    graph, carry_b, _ = _carry_fixpoint(body, [], list(batched[:n_carry]), consts_b, size)
    test, (pred_b,) = batch_graph(cond_fun, carry_b + consts_b, size)
    if pred_b and not all(carry_b):
        carry_b = [True] * n_carry
        graph, _ = batch_graph(body, carry_b + consts_b, size, out_mapped=carry_b)
        test, _ = batch_graph(cond_fun, carry_b + consts_b, size)
    init = _lift(args[:n_carry], batched[:n_carry], carry_b, size)
    consts = list(args[n_carry:])
    if not pred_b:
        outs = bind("while", *init, *consts, cond_fun=test, body=graph, n_carry=n_carry)
        return list(outs), carry_b
    active = inline(test, init + consts)[0]
    outs = bind("while", *init, active, *consts, cond_fun=_any_active(graph, n_carry, size),
                body=_frozen_step(graph, test, n_carry, size), n_carry=n_carry + 1)
    return list(outs[:n_carry]), carry_b


def _with_active(like, n_carry, size, fun):
    """A graph over ``(*carry, active, *consts)`` (the inputs of ``like`` with the per-lane
    flag inserted after the carry) computing ``fun(carry, active, consts)``."""
    frame = TraceFrame()
    with trace_frame(frame):
        carry = [frame.input_like(like, k) for k in range(n_carry)]
        active = frame.new_input((size,), _dt.bool_, "active")
        consts = [frame.input_like(like, k) for k in range(n_carry, len(like.inputs))]
        outs = fun(carry, active, consts)
        graph = frame.build([frame.operand(v) for v in outs])
    return simplify(graph)


def _any_active(body, n_carry, size):
    return _with_active(body, n_carry, size, lambda carry, active, consts: [ops.any(active)])


def _frozen_step(body, test, n_carry, size):
    """One step of the active lanes; the others keep their carry (so their predicate, computed
    on the kept carry, stays false)."""
    def step(carry, active, consts):
        new = _select(active, inline(body, carry + consts), carry)
        return new + inline(test, new + consts)
    return _with_active(body, n_carry, size, step)
