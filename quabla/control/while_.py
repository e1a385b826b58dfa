"""The ``while`` region (``while_loop``, and ``fori_loop`` with traced bounds): every rule of
one primitive.

Operands ``(*init, *consts)``; params ``cond_fun``, ``body``, ``n_carry``. ``cond_fun`` maps
``(*carry, *consts)`` to a bool scalar, ``body`` maps them to the next carry; the results are
the final carry.

- Reference: runs the test and the body with the interpreter.
- Dependence: ``loop_closure`` of the body's (a final carry depends on its start).
- JVP: a while loop carrying the nonzero tangents beside the carry (``cond_fun`` sees only
  the primals).
- VJP: none, as in JAX (the trip count is only known when the loop runs), except where no
  cotangent needs to cross the loop: then there is nothing to compute.
- Batching: an unbatched predicate stays a plain loop over batched carries; a batched one
  runs while any lane is active, with a per-lane ``active`` flag in the carry and the lanes
  that are done frozen, so each lane ends where it would have ended alone.
- Rewriter: keeps the carries read and those they (or ``cond_fun``) need through the body,
  drops unread constants. (Equal ``while`` regions are plain CSE.)

Lowering: ``while_loop`` in ``lowering/numba_cpu/regions.py`` (``while True: ... break``),
``while_loop`` in ``lowering/numba_cuda/regions.py``, ``_while`` in ``lowering/mlx/rules.py``.
"""

from .. import dtypes as _dt
from .. import ops
from ..core.dependence import loop_closure, output_dependence
from ..core.interpret import evaluate
from ..core.primitives import Primitive, register
from ..core.rewrite import REGION_RULES, RegionRules, simplify
from ..core.tracing import bind
from ..errors import UnsupportedOperationError
from ..transforms.batching import batch_graph
from ..transforms.inline import inline
from .region_rules import (carry_fixpoint, check_operands, dense, flags, index_map, lift,
                           loop_jvp, pick, select, spread, with_params)
from .regions import avals, bits, graph_input, input_masks, restrict, rewire, traced, with_inputs

__all__ = []


def _shape(*operands, cond_fun, body, n_carry):
    check_operands("while", cond_fun, operands)
    check_operands("while", body, operands)
    return avals(operands[:n_carry])


def _impl(*operands, cond_fun, body, n_carry):
    carry, consts = list(operands[:n_carry]), list(operands[n_carry:])
    while bool(evaluate(cond_fun, carry + consts)[0]):
        carry = evaluate(body, carry + consts)
    return carry


def _dependence(*, cond_fun, body, n_carry):
    return [sorted(d) for d in loop_closure(output_dependence(body), 0, n_carry)]


# -- derivatives --------------------------------------------------------------------------------

def _jvp(primals, tangents, outs, *, cond_fun, body, n_carry):
    """A while loop carrying the nonzero tangents beside the carry; ``cond_fun`` takes the
    tangents as unused inputs."""
    n = n_carry
    m = len(primals) - n
    graph, carry_f, const_f, _ = loop_jvp(body, 0, tangents[:n], tangents[n:], 0)
    a = sum(carry_f)
    order = (list(range(n)) + list(range(n + m, n + m + a)) + list(range(n, n + m))
             + list(range(n + m + a, len(graph.inputs))))
    new_body = rewire(graph, order, list(range(n)) + [n + k for k in range(n) if carry_f[k]])
    init_t = dense(pick(tangents[:n], carry_f), pick(primals[:n], carry_f))
    const_t = pick(tangents[n:], const_f)
    test = with_inputs(cond_fun, avals(pick(primals[:n], carry_f)), n)
    test = with_inputs(test, avals(const_t), n + a + m)
    res = bind("while", *primals[:n], *init_t, *primals[n:], *const_t, cond_fun=test,
               body=new_body, n_carry=n + a)
    return spread(res[n:], carry_f, outs)


def _vjp(cts, primals, outs, *, cond_fun, body, n_carry, wanted):
    """No cotangent for any operand when no result with a cotangent depends differentiably on
    a ``wanted`` operand (``loop_closure``: through the body to a fixpoint, and on its own
    start, as the loop may run no step): the loop then only computes values the gradient
    reads, as in JAX.
    A cotangent that must cross the loop raises."""
    depends = loop_closure(output_dependence(body), 0, n_carry)
    if not any(any(wanted[k] for k in d) for d, f in zip(depends, flags(cts)) if f):
        return [None] * len(primals)
    raise UnsupportedOperationError(
        "reverse-mode differentiation of while_loop is not supported where a cotangent must "
        "flow through its carry: its trip count is only known when it runs, so the steps to "
        "store are unknown. Use fori_loop with static (Python int) bounds, or scan, which are "
        "reverse-mode differentiable; forward mode (jvp, jacfwd) works through while_loop",
        op="while", device=None)


# -- batching -----------------------------------------------------------------------------------

def _batch(args, batched, size, *, cond_fun, body, n_carry):
    """An unbatched predicate stays a plain loop over batched carries. A batched one makes
    every carry batched and carries one more value, the per-lane ``active`` flag: the loop
    runs while any lane is active, and a finished lane keeps its carry."""
    consts_b = list(batched[n_carry:])
    graph, carry_b, _ = carry_fixpoint(body, [], list(batched[:n_carry]), consts_b, size)
    test, (pred_b,) = batch_graph(cond_fun, carry_b + consts_b, size)
    if pred_b and not all(carry_b):
        carry_b = [True] * n_carry
        graph, _ = batch_graph(body, carry_b + consts_b, size, out_mapped=carry_b)
        test, _ = batch_graph(cond_fun, carry_b + consts_b, size)
    init = lift(args[:n_carry], batched[:n_carry], carry_b, size)
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
    inputs = [graph_input(like, k) for k in range(len(like.inputs))]
    inputs.insert(n_carry, ((size,), _dt.bool_, False, "active"))
    return traced(inputs, lambda args: fun(args[:n_carry], args[n_carry], args[n_carry + 1:]))


def _any_active(body, n_carry, size):
    return _with_active(body, n_carry, size, lambda carry, active, consts: [ops.any(active)])


def _frozen_step(body, test, n_carry, size):
    """One step of the active lanes; the others keep their carry (so their predicate, computed
    on the kept carry, stays false)."""
    def step(carry, active, consts):
        new = select(active, inline(body, carry + consts), carry)
        return new + inline(test, new + consts)
    return _with_active(body, n_carry, size, step)


# -- the rewriter -------------------------------------------------------------------------------

def _prune(node, read):
    """``cond_fun`` and ``body`` take ``(*carry, *consts)``; the carries are the results."""
    test, body, n = node.kw["cond_fun"], node.kw["body"], node.kw["n_carry"]
    masks = input_masks(body)
    need = input_masks(test)[0]
    keep = set(read) | set(bits(need, range(n)))
    while True:
        grown = set(keep)
        for k in keep:
            grown.update(bits(masks[k], range(n)))
        if grown == keep:
            break
        keep = grown
    carries = sorted(keep)
    for k in carries:
        need |= masks[k]
    consts = bits(need, range(n, len(body.inputs)))
    if len(carries) == n and len(consts) == len(body.inputs) - n:
        return None
    inputs = carries + consts
    return (inputs, with_params(node, cond_fun=simplify(restrict(test, inputs, [0])),
                                body=simplify(restrict(body, inputs, carries)),
                                n_carry=len(carries)), index_map(carries))


register(Primitive(
    "while", shape_rule=_shape, impl=_impl, jvp=_jvp, vjp=_vjp, batch=_batch,
    multiple_results=True, foldable=False, dependence=_dependence, vjp_wanted=True, kind="region",
))
REGION_RULES["while"] = RegionRules(_prune)
