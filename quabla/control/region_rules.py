"""What the rules of several region primitives share (``cond.py``, ``scan.py``, ``while_.py``).

- Shape rules: ``check_operands``.
- Symbolic zeros: the JVP and VJP rules compute only the tangents and cotangents that are
  nonzero. ``flags`` marks them, ``pick`` keeps the flagged values, ``spread`` puts them back
  among ``Zero``s, ``dense`` materialises the zeros where a region needs an operand.
- Fixpoints: a carry whose tangent (or batch axis) is absent at entry may gain one through the
  body, so loops find the carries that have one by iterating to a fixpoint (``loop_jvp``,
  ``carry_fixpoint``).
- Batching: ``lift`` a carry's initial value to the batch axis, ``select`` per lane.
- The rewriter's rules: ``with_params``, ``index_map``.
"""

from ..core.primitives import Zero, is_zero
from ..core.tracing import bind
from ..ops import broadcast_to
from ..transforms.batching import batch_graph
from ..transforms.jvp import jvp_graph, materialize
from .regions import nonzero

__all__ = ["check_operands", "flags", "pick", "spread", "dense", "split", "named", "loop_jvp",
           "carry_fixpoint", "lift", "select", "with_params", "index_map"]


def check_operands(op, graph, operands, first=0):
    """A region's operands must fit its sub-graph's inputs (from input ``first`` on): a rule
    that wires them wrongly fails here, where it binds, not when the loop runs."""
    wanted = [(g.shape, g.dtype) for g in (graph.nodes[i] for i in graph.inputs[first:])]
    given = [(tuple(a.shape), a.dtype) for a in operands]
    if wanted != given:
        raise ValueError(f"{op}: operands {given} do not fit the sub-graph's inputs {wanted}")


# -- symbolic zeros -----------------------------------------------------------------------------

def flags(values):
    """Per value, whether it is a nonzero tangent or cotangent (a floating array)."""
    return [not is_zero(v) and v.dtype.is_floating for v in values]


def pick(values, flags):
    return [v for v, f in zip(values, flags) if f]


def spread(values, flags, like):
    """``values`` back at the positions where ``flags`` hold; ``Zero`` elsewhere."""
    it = iter(values)
    return [next(it) if f else Zero(x.shape, x.dtype) for f, x in zip(flags, like)]


def dense(values, like):
    return [materialize(v, tuple(x.shape), x.dtype) for v, x in zip(values, like)]


def split(values, sizes):
    """``values`` cut into consecutive pieces of ``sizes``."""
    pieces, start = [], 0
    for size in sizes:
        pieces.append(list(values[start:start + size]))
        start += size
    return pieces


def named(values, what):
    """Graph inputs like ``values``, named ``what0``, ``what1``, ... (as ``traced`` takes
    them)."""
    return [(tuple(v.shape), v.dtype, v.weak, f"{what}{k}") for k, v in enumerate(values)]


# -- fixpoints ----------------------------------------------------------------------------------

def loop_jvp(body, lead, carry_t, const_t, n_ys):
    """The JVP of a loop body with inputs ``(*lead, *carry, *consts)`` and outputs
    ``(*carry, *ys)``, at the fixpoint of which carries have nonzero tangents. Returns
    ``(graph, carry flags, const flags, ys flags)``; the graph's inputs are the primals,
    then the tangents of the flagged carries and constants."""
    n, first = len(carry_t), len(body.inputs)
    carry_f, const_f = flags(carry_t), flags(const_t)
    while True:
        graph = jvp_graph(body, [False] * lead + carry_f + const_f)
        out_f = nonzero(graph, first, range(n + n_ys, 2 * (n + n_ys)))
        settled = [c or o for c, o in zip(carry_f, out_f[:n])]
        if settled == carry_f:
            return graph, carry_f, const_f, out_f[n:]
        carry_f = settled


def carry_fixpoint(body, lead, carry, consts, size, n_extra=0):
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


# -- batching -----------------------------------------------------------------------------------

def lift(xs, have, want, size):
    """The initial carry with the batch axis where ``want`` says (broadcast where missing)."""
    return [broadcast_to(x, (size,) + tuple(x.shape)) if w and not h else x
            for x, h, w in zip(xs, have, want)]


def select(pred, xs, ys):
    """``xs`` in the lanes where the per-lane ``pred`` (shape ``(size,)``) holds, else ``ys``."""
    return [bind("select", bind("broadcast_in_dim", pred, shape=tuple(x.shape),
                                broadcast_dimensions=(0,)), x, y) for x, y in zip(xs, ys)]


# -- the rewriter's rules -----------------------------------------------------------------------

def with_params(node, **changes):
    """``node``'s params with ``changes``, as a node holds them."""
    return tuple(sorted({**node.kw, **changes}.items()))


def index_map(kept):
    """Old result index -> new one, for the results ``kept`` (in order)."""
    return {old: new for new, old in enumerate(kept)}
