"""Tile loops: the statements between a ``TileBegin`` and its ``TileEnd`` run once per block
of rows of their arrays' leading axis (see ``loopnest/schedule.py``), and, split across
threads, each thread sums its rows into partials of its own, combined after the loop thread
by thread in order (``combine_partials``; the phases of such an entry are ``passes.phased``)."""

import math

from ..loopnest.schedule import kind
from ..loopnest.templates import combine
from . import threads
from .groups import reduction_init
from .linalg import local_product, product_result, rhs_operand
from .statements import Assign, Loop

__all__ = ["begin_tile", "end_tile"]


def begin_tile(e, begin, end, singles):
    """Full-size copies of exported tiles, right operands of the loop's products that are
    computed before it and need copying (see ``operand_2d``), the accumulators, then the
    loop header. In a threaded loop the accumulators are each thread's own partials, set
    up in the loop's phase (see ``generate``)."""
    for nid in sorted(begin.exports):
        node = e.nodes[nid]
        e.alloc(f"f{nid}", node.shape, node.dtype, result=nid,
                expiry=e.last_use.get(nid, e.now))
    e.loop_end = end
    shared = {}  # operands arranged alike are copied once
    for nid in singles:
        node = e.nodes[nid]
        if node.op == "dot_general" and node.shape and node.operands[1] not in begin.values:
            e.tile = begin  # shapes as in the loop
            key = (node.operands[1], dict(node.params)["dimension_numbers"][0][1],
                   local_product(e, node).dims)
            if key not in shared:
                shared[key] = rhs_operand(e, node, f"tv{nid}b", expiry=end)
            e.hoisted[nid] = shared[key]
            e.tile = None
    e.threads = min(e.threads, begin.extent // begin.tile)  # a tile each at least
    if e.threads > 1 and e.indent == 0 and _worth_threads(e.nodes, begin):
        e.threaded = begin
        e.split = (len(e.code.items), None)
        e.private = True
    for nid in sorted(begin.accumulated):
        node = e.nodes[nid]
        if kind(node) == "reduction":
            reduction_init(e, node, nid)
        else:  # a product summed over the rows
            B, M, K, N = local_product(e, node).dims
            e.alloc(f"tv{nid}", (B, M, N), node.dtype, fill="0", result=nid,
                    expiry=e.last_use.get(nid, e.now))
    rows = ("ctl[2]", "ctl[3]") if e.threaded is begin else (0, begin.extent)
    e.tile_loop = Loop("r", rows[1], start=rows[0], step=begin.tile)
    e.emit(e.tile_loop)
    e.indent += 1
    e.tile = begin


def end_tile(e, begin):
    """Closes the loop: combines a threaded loop's partials, completes the products summed
    over the rows, and names each exported tile's full array as the value from here on. In
    a loop (a region's body), the tile loop first names its tile again: on the next pass the
    name would still be the full array, the output of the pass before, which may be this
    pass's input."""
    e.indent -= 1
    e.tile = None
    if e.threaded is begin:
        combine_partials(e, begin)
    for nid in sorted(begin.accumulated):
        node = e.nodes[nid]
        if node.op == "dot_general":
            product_result(e, node, f"v{nid}", f"tv{nid}")
    for nid in sorted(begin.exports):
        var, full = f"v{nid}", f"f{nid}"
        slot = e.slot_of.get(var)
        if e.indent > 0 and slot is not None:
            tile = f"{var}_tile"
            e.slots.append((tile, *slot, e.shapes[var]))  # the same view, another name
            e.tile_loop.body.insert(0, Assign(var, tile))
        e.assign(var, full)
        for key in [k for k, v in e.views.items() if v == var]:
            del e.views[key]  # the name is the full array from here on
        for table in (e.root, e.slot_of, e.shapes, e.result_of):
            table.pop(var, None)
            if full in table:
                table[var] = table[full]


def combine_partials(e, begin):
    """Ends the loop's phase of a threaded loop: each thread leaves its partial sums in its
    scratch (a 0-d one stored to a slot), and the phase after the loop starts by combining
    them, thread by thread in order, into the accumulators that code reads: one loop per
    size for all the accumulators of that size, one statement per accumulator (each loop
    and statement costs Numba's front end as much as any)."""
    accumulated = []
    for nid in sorted(begin.accumulated):
        node = e.nodes[nid]
        var = f"v{nid}" if kind(node) == "reduction" else f"tv{nid}"
        if node.shape == () and kind(node) == "reduction":
            e.alloc(f"a{nid}", (1,), node.dtype, expiry=e.now)
            e.emit(f"a{nid}[0] = {var}")
            var = f"a{nid}"
        accumulated.append((nid, node, var, e.slot_of[var], e.shapes[var]))
    e.private = False
    e.split = (e.split[0], len(e.code.items))
    by_size = {}
    for nid, node, var, (buffer, start), shape in accumulated:
        parts = [f"{var}_p{t}" for t in range(e.threads)]
        e.partials += [(p, buffer, start, shape, t) for t, p in enumerate(parts)]
        index = "[0]" if var == f"a{nid}" else "[i0]"
        total = f"{parts[0]}{index}"
        for p in parts[1:]:
            total = combine(node.op, total, f"{p}{index}")
        if var == f"a{nid}":  # a 0-d sum
            e.assign(f"v{nid}", total)
            continue
        if kind(node) == "reduction":
            e.alloc(var, shape, node.dtype, result=nid)
        else:
            e.alloc(var, shape, node.dtype, result=nid,
                    expiry=e.last_use.get(nid, e.now))
        by_size.setdefault(math.prod(shape), []).append(f"{var}[i0] = {total}")
    for size, statements in by_size.items():
        e.loop("i0", size)
        for statement in statements:
            e.emit(statement, 2)


def _worth_threads(nodes, begin):
    """Does the tile loop write enough to pay for waking other threads?"""
    return sum(math.prod(nodes[nid].shape) for nid in begin.values) >= threads.WORTH_ELEMENTS
