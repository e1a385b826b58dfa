"""Lowerings of the whole-array structural ops: reshape (a view), ``dynamic_index`` and
``dynamic_update_add`` (a row read or updated in place where it can), ``sort`` (the runtime's
merge sort per matrix). Pad and concatenate are index maps (loopnest/gathers.py)."""

import math

from .linalg import stacked
from .source import node_id
from .table import register

__all__ = []


def reshape(e, node, out, args, new_shape):
    new_shape = e.local_shape(node_id(out))
    src = e.nodes[node.operands[0]]
    if src.shape == ():
        e.alloc(out, new_shape, node.dtype, fill=args[0], result=node_id(out))
    elif new_shape == ():
        e.assign(out, f"{args[0]}[0]")
    else:
        e.reshaped(args[0], new_shape, out)
        e.view(out, args[0], node_id(out))


def per_row(e, nid, shape, b, index, n, statement):
    """Loops over the ``b`` leading (batch) axes of ``shape``, the clamped row ``j<nid>`` of
    each, then over the rest; ``statement(batch, row, rest)`` gets the index lists."""
    idx = [f"i{k}" for k in range(len(shape))]
    for depth, extent in enumerate(shape[:b]):
        e.loop(f"i{depth}", extent, depth + 1)
    at = e.at(index, idx[:b]) if b else index
    e.assign(f"j{nid}", f"_clamp_index({at}, {n})", b + 1)
    for depth, extent in enumerate(shape[b:], b):
        e.loop(f"i{depth}", extent, depth + 1)
    e.emit(statement(idx[:b], f"j{nid}", idx[b:]), len(shape) + 1)


def dynamic_index(e, node, out, args):
    """An unbatched index reads a row as a view (a scalar local for a vector); a batched
    one copies the row of each batch."""
    x, i = (e.nodes[o] for o in node.operands)
    b, nid = len(i.shape), node_id(out)
    if b == 0:
        row = f"_clamp_index({args[1]}, {x.shape[0]})"
        size = math.prod(node.shape)
        e.assign(out, f"{args[0]}[{row}]" if node.shape == () else
                 f"_offset({args[0]}, {row} * {size})")
        if node.shape != ():
            e.shapes[out] = tuple(node.shape)
            e.view(out, args[0], nid)
        return
    e.alloc(out, node.shape, node.dtype, result=nid)
    per_row(e, nid, node.shape, b, args[1], x.shape[b], lambda bi, j, rest:
            f"{e.at(out, bi + rest)} = {e.at(args[0], bi + [j] + rest)}")


def updated_copy(e, node, out, args):
    """``out``: the array an update of ``args[0]`` writes into. ``args[0]``'s own buffer when
    it is the result buffer already (a carry the loop updates in place, see ``carries``) or its
    scratch slot is dead after this statement and no other operand aliases it, else a copy."""
    nid = node_id(out)
    k = e.results.get(nid)
    root = e.root.get(args[0])
    if k is not None and e.result_of.get(args[0]) == k:
        e.alloc(out, node.shape, node.dtype, result=nid)
    elif (k is None and root is not None and e.plan.expiry(root) <= e.now
          and all(e.root.get(a) != root for a in args[1:])):
        e.assign(out, args[0])
        e.shapes[out] = tuple(node.shape)
        if args[0] in e.slot_of:
            e.slot_of[out] = e.slot_of[args[0]]
        e.view(out, args[0], nid)
    else:
        e.alloc(out, node.shape, node.dtype, result=nid)
        e.copy(out, args[0], node.shape)


def dynamic_update_add(e, node, out, args):
    """``x`` with ``v`` added to the selected rows: in place when ``out`` is the buffer
    already holding ``x`` (a carry the loop updates in place, see ``carries``) or when
    ``x``'s scratch slot is dead after this statement, else into a copy."""
    x, i, v = (e.nodes[o] for o in node.operands)
    b, nid = len(i.shape), node_id(out)
    updated_copy(e, node, out, args)
    per_row(e, nid, v.shape, b, args[1], x.shape[b], lambda bi, j, rest:
            f"{e.at(out, bi + [j] + rest)} += "
            + (e.at(args[2], bi + rest) if v.shape != () else args[2]))


def sort(e, node, out, args):
    """``sort`` of each (m, n) matrix of the stack: the merge sort of the runtime's ``_sort``
    (lowering/matrix_kernels.py) in two float64 workspaces of n column numbers, each with
    room for n keys after them (where external.py's sort merges the keys with the numbers)."""
    m, n = node.shape[-2:]
    stacked(e, "_sort", node, out, args, [(m, n), (m, n)],
            [(f"t{out}p", (2 * n,)), (f"t{out}q", (2 * n,))])


register({"reshape": reshape, "dynamic_index": dynamic_index,
          "dynamic_update_add": dynamic_update_add, "sort": sort})


# -- gather / scatter (quabla/core/rules/gather.py) -------------------------------------------

def gather(e, node, out, args, batch_dims):
    """``x[b, j, r]`` for each batch and index entry ``(b, s)``, ``j`` the clamped row of
    ``idx[b, s]`` (``_clamp_index``, once per entry), then each element ``r`` of the row."""
    x, i = (e.nodes[o] for o in node.operands)
    n, k = x.shape[batch_dims], len(i.shape)
    if node.shape == ():
        e.assign(out, f"{args[0]}[_clamp_index({args[1]}, {n})]")
        return
    e.alloc(out, node.shape, node.dtype, result=node_id(out))
    per_row(e, node_id(out), node.shape, k, args[1], n, lambda bs, j, rest:
            f"{e.at(out, bs + rest)} = {e.at(args[0], bs[:batch_dims] + [j] + rest)}")


_COMBINE = {"add": "{old} + {new}", "set": "{new}", "mul": "{old} * {new}",
            "min": "_min({old}, {new})", "max": "_max({old}, {new})"}


def scatter(e, node, out, args, batch_dims, mode):
    """``x`` with each update combined into its clamped row, one after another in the C order
    of the index entries (so repeated rows add up in order, and the last ``set`` wins). The
    updates go into ``x``'s own buffer when it is dead after this statement and neither the
    indices nor the updates alias it (as ``dynamic_update_add``), else into a copy."""
    x, i, v = (e.nodes[o] for o in node.operands)
    nid = node_id(out)
    updated_copy(e, node, out, args)
    b = batch_dims

    def statement(bs, j, rest):
        target = e.at(out, bs[:b] + [j] + rest)
        new = e.at(args[2], bs + rest) if v.shape != () else args[2]
        return f"{target} = " + _COMBINE[mode].format(old=target, new=new)
    per_row(e, nid, v.shape, len(i.shape), args[1], x.shape[b], statement)


register({"gather": gather, "scatter": scatter})
