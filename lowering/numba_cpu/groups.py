"""Fused groups: a ``Group`` of the schedule (elementwise ops, index maps and the reductions
consuming them, over one shape) becomes one loop nest whose members are scalar locals; a
member read once is spliced into its reader's expression instead (fewer locals, which Numba
compiles faster), up to ``SPLICE_DEPTH`` brackets and ``SPLICE_LENGTH`` characters (deeper,
Python refuses the source)."""

import functools
import re

from quabla.core.primitives import PRIMITIVES
from ..loopnest.schedule import kind
from ..loopnest.templates import combine, literal, operand_names, scalar_expression

__all__ = ["emit_group", "reduction_init", "SPLICE_DEPTH", "SPLICE_LENGTH", "REORDERED_SUMS",
           "SUMS_APART"]

SPLICE_DEPTH = 40
SPLICE_LENGTH = 2000
SEGMENTS = 6  # the most loops one loop is split into
# Sums along an innermost axis of at least this many elements may have their adds reordered
# (``_sum_add``): LLVM then vectorises their loops, keeping partial sums in vector lanes (a
# 400 000-element sum of squares 1.3x faster; of tanh, with its own loop, 1.4x). A shorter
# one is summed in order, as NumPy sums fewer than eight; so is a shorter segment of a loop
# split at its guarded reads (``_segments``): its loop is too short for the marked width.
REORDERED_SUMS = 16
# Sums along an innermost axis shorter than this get a loop of their own, after the costly
# members of their group (loopnest/schedule.py's ``_sums_apart``).
SUMS_APART = 2 * REORDERED_SUMS


def emit_group(e, group):
    """The loop nest of ``group``: accumulators and stored members first, then one loop per
    axis, each member a local (or spliced), reductions accumulated in place. Where guarded
    reads (a pad's, a concatenate's: loopnest/gathers.py) change along the innermost axis
    that has them, that loop is split there into up to ``SEGMENTS`` loops, in order, each
    reading without guards: the stencil's middle runs branch-free and vectorises."""
    shape = tuple(group.shape)
    if e.tile is not None:
        shape = (e.tile.tile,) + shape[1:]
    e.stored |= group.materialized
    idx = [f"i{k}" for k in range(len(shape))]
    for m in group.members:
        node = e.nodes[m]
        if kind(node) == "reduction":
            reduction_init(e, node, m)
        elif m in group.materialized:
            e.alloc(f"v{m}", shape, node.dtype, result=m)
    axis, segments = _segments(e, group, idx, shape)
    for depth in range(axis):
        e.loop(idx[depth], shape[depth], depth + 1)
    held = _held_sums(e, group, idx)
    for lo, hi in segments:
        e.ranges[idx[axis]] = (lo, hi)
        loops = [(idx[axis], hi, axis + 1, lo)] + [
            (idx[depth], shape[depth], depth + 1, 0) for depth in range(axis + 1, len(shape))]
        reads = {}
        for i, stop, depth, start in loops:
            if depth == len(shape):
                for m, target in held.items():
                    e.assign(f"acc{m}", target, depth)
                reads = _invariant_reads(e, group, idx)
                for o, expr in reads.items():
                    e.assign(f"h{o}", expr, depth)
            e.loop(i, stop, depth, start=start)
        _body(e, group, idx, len(shape) + 1, held, reads)
        for m, target in held.items():
            e.emit(f"{target} = acc{m}", len(shape))
    e.ranges = {}
    for m in group.members:
        if kind(e.nodes[m]) == "reduction":
            e.export(m)


def _segments(e, group, idx, shape):
    """``(axis, [(lo, hi), ...])``: the loop to split and its segments, from where the
    group's guarded reads change (asked of every read once, without emitting); the first axis
    whole if none do, or if more than ``SEGMENTS`` segments would be needed."""
    e.ranges, e.splits = {i: (0, n) for i, n in zip(idx, shape)}, {}
    for m in group.members:
        node = e.nodes[m]
        if kind(node) == "index_map":
            e.gather(node, group, idx)
            continue
        for o in node.operands:
            if o not in group.member_set or kind(e.nodes[o]) == "reduction":
                e.read(o, group, idx)
    splits, e.splits = e.splits, None
    for axis in range(len(shape) - 1, -1, -1):
        cuts = sorted(t for t in splits.get(idx[axis], ()) if 0 < t < shape[axis])
        if cuts and len(cuts) < SEGMENTS:
            ends = [0] + cuts + [shape[axis]]
            return axis, list(zip(ends, ends[1:]))
    return 0, [(0, shape[0])]


def _held_sums(e, group, idx):
    """Reduction member -> its accumulator's element, for the reductions along the innermost
    axis into an array: each row's sum is held in a local (``acc<m>``) over the innermost
    loop, read before it and stored after. Summed in memory, the adds would wait on a store
    LLVM cannot prove apart from the loop's other stores (the scratch is one array), and the
    loop would not vectorise (a softmax's exponentials); the order of the adds is the same."""
    innermost = len(idx) - 1
    return {m: _target(e, e.nodes[m], m, idx) for m in group.members
            if kind(e.nodes[m]) == "reduction" and e.nodes[m].shape != ()
            and innermost in dict(e.nodes[m].params)["axes"]}


def _invariant_reads(e, group, idx):
    """Operand from outside the group (or index map member) -> its element at ``idx``, for
    those whose element does not change along the innermost loop (a row's maximum in a
    softmax): each is read into a local (``h<o>``) before that loop. Read in the loop from
    the scratch the loop also stores to, the load would keep LLVM from vectorising it (it
    cannot tell the store does not change the element)."""
    inner = re.compile(rf"\b{idx[-1]}\b")
    found = {}
    for m in group.members:
        node = e.nodes[m]
        if kind(node) == "index_map":  # a broadcast's gather, its own member
            expr = e.gather(node, group, idx)
            if "[" in expr and not inner.search(expr):
                found[m] = expr
            continue
        for o in node.operands:
            if o in group.member_set or o in found:
                continue
            expr = e.read(o, group, idx)
            if "[" in expr and not inner.search(expr):
                found[o] = expr
    return found


def _target(e, node, nid, idx):
    """A reduction's accumulator at loop index ``idx``: its local, or its array's element."""
    axes = dict(node.params)["axes"]
    return f"v{nid}" if node.shape == () else (
        e.at(f"v{nid}", [i for k, i in enumerate(idx) if k not in axes]))


def _body(e, group, idx, depth, held, reads):
    """The members of ``group`` at loop index ``idx``, statements at ``depth``; ``held``:
    the reductions summed in locals (``_held_sums``), ``reads``: the operands read before the
    innermost loop (``_invariant_reads``)."""
    single_use = single_uses(e, group)
    for m in group.members:
        node = e.nodes[m]
        if kind(node) == "reduction":
            reduction_step(e, node, m, group, idx, depth, f"acc{m}" if m in held else None,
                           reads)
            continue
        if kind(node) == "index_map":
            expr = f"h{m}" if m in reads else e.gather(node, group, idx)
            nesting = max(2, _depth(expr))
        else:
            nesting = _nesting(PRIMITIVES[node.op].scalar) + max(
                [e.nesting.get(o, 2) for o in node.operands if o in e.inlined] + [2])
            expr = scalar_expression(node, [f"h{o}" if o in reads else e.read(o, group, idx)
                                            for o in node.operands])
        if m in single_use and nesting <= SPLICE_DEPTH and len(expr) <= SPLICE_LENGTH:
            e.inlined[m] = expr
            e.nesting[m] = nesting
            continue
        e.assign(f"s{m}", expr, depth)
        if m in group.materialized:
            e.emit(f"{e.at(f'v{m}', idx)} = s{m}", depth)
        if e.tile is not None and m in e.tile.exports:
            e.emit(f"{e.at(f'f{m}', e.global_rows(idx))} = s{m}", depth)


def single_uses(e, group):
    """Members read exactly once, by another member whose template names that operand once:
    their expression is spliced into the reader (fewer locals: Numba compiles faster)."""
    uses = {}
    for m in group.members:
        node = e.nodes[m]
        if kind(node) == "index_map":
            continue
        template = PRIMITIVES[node.op].scalar if kind(node) != "reduction" else "{x}"
        names = ("x",) if kind(node) == "reduction" else operand_names(node.op)
        for o, name in zip(node.operands, names):
            weight = template.count("{" + name + "}")
            uses[o] = uses.get(o, 0) + weight
    return {
        m for m in group.members
        if uses.get(m) == 1 and m not in group.materialized
        and kind(e.nodes[m]) != "reduction" and consumers_in(e, m, group)
    }


def consumers_in(e, nid, group):
    """Every reader of ``nid`` is in ``group``; a clone (a member recomputed here, see
    schedule._rematerialize) has readers elsewhere too, but here only these read it."""
    return nid in group.clones or all(c in group.member_set for c in e.consumers.get(nid, ()))


def reduction_init(e, node, nid):
    """The accumulator of a reduction, set to the reduction's identity."""
    if e.tile is not None and nid in e.tile.accumulated:
        return  # initialised before the tile loop
    init = literal(PRIMITIVES[node.op].identity, node.dtype.name)
    if node.shape == ():
        e.assign(f"v{nid}", init)
    else:
        e.alloc(f"v{nid}", e.local_shape(nid), node.dtype, fill=init, result=nid)


def reduction_step(e, node, nid, group, idx, depth, local=None, reads=()):
    """One element into a reduction: into ``local`` where one holds the accumulator; an
    operand among ``reads`` is the local read before the innermost loop."""
    axes = dict(node.params)["axes"]
    operand = node.operands[0]
    value = f"h{operand}" if operand in reads else e.read(operand, group, idx)
    target = local or _target(e, node, nid, idx)
    lo, hi = e.ranges.get(idx[-1], (0, group.shape[-1]))  # a segment's (``_segments``)
    along = len(group.shape) - 1 in axes and hi - lo >= REORDERED_SUMS
    step = (f"_sum_add({target}, {value})" if node.op == "reduce_sum" and along
            else combine(node.op, target, value))
    e.assign(target, step, depth)


@functools.lru_cache(maxsize=None)
def _nesting(template):
    """How deep ``template`` nests brackets around its operands (at most)."""
    return _depth(re.sub(r"{\w+}", "", template))


def _depth(text):
    """How deep ``text`` nests brackets."""
    deepest = depth = 0
    for ch in text:
        depth += (ch in "([") - (ch in ")]")
        deepest = max(deepest, depth)
    return deepest
