"""Lowerings of the whole-array structural ops: reshape (a view, or a fill of a scalar
constant), ``dynamic_index`` and ``dynamic_update_add`` (one kernel each, the row from ``_row``
as the reference clamps it), ``sort`` (a merge sort per matrix). Pad and concatenate are index
maps (loopnest/gathers.py)."""

from .linalg import stacked
from .table import register

__all__ = []


def reshape(e, node, nid, new_shape):
    source = node.operands[0]
    if source in e.literals:  # a scalar constant made an array: a fill
        e.alloc(f"v{nid}", node.shape, node.dtype.name)
        idx = lambda i: ", ".join(i) or "0"
        e.grid_stride(node.shape, lambda i: [f"v{nid}[{idx(i)}] = {e.literals[source]}"])
    else:
        e.as_shape(f"v{source}", node.shape, f"v{nid}", nid)


def row_index(e, x, i, idx):
    """Lines binding ``k``, the row of axis len(i.shape) of ``x`` that ``i`` selects at the
    batch index ``idx[:len(i.shape)]``."""
    b = len(e.nodes[i].shape)
    n = e.nodes[x].shape[b]
    return [f"k = _row({e.read(i, None, list(idx[:b]))}, {n})"]


def dynamic_index(e, node, nid):
    x, i = node.operands
    b = len(e.nodes[i].shape)
    e.alloc(f"v{nid}", node.shape, node.dtype.name)
    target = lambda idx: f"v{nid}[{', '.join(idx) or '0'}]"
    e.grid_stride(tuple(node.shape), lambda idx: row_index(e, x, i, idx) + [
        f"{target(idx)} = {e.read(x, None, list(idx[:b]) + ['k'] + list(idx[b:]))}"])


def dynamic_update_add(e, node, nid):
    x, i, v = node.operands
    b = len(e.nodes[i].shape)
    e.alloc(f"v{nid}", node.shape, node.dtype.name)

    def lines(idx):
        rest = list(idx[:b]) + list(idx[b + 1:])
        old = e.read(x, None, idx)
        return row_index(e, x, i, idx) + [
            f"v{nid}[{', '.join(idx)}] = ({old} + {e.read(v, None, rest)}) "
            f"if {idx[b]} == k else {old}"]
    e.grid_stride(tuple(node.shape), lines)


def sort(e, node, nid):
    """``sort``: one thread per (m, n) matrix of the stack runs the merge sort of
    lowering/matrix_kernels.py (``runtime._sort``) in float64 workspaces of its own. A single
    long row is one thread's work: fine for the sizes medians and quantiles meet, not a
    device-wide sort."""
    m, n = node.shape[-2:]
    stacked(e, "_sort", node, nid, [(m, n), (m, n)], [(n,), (n,)])


register({"reshape": reshape, "dynamic_index": dynamic_index,
          "dynamic_update_add": dynamic_update_add, "sort": sort})


# -- gather / scatter (quabla/core/rules/gather.py) -------------------------------------------

def gather(e, node, nid, batch_dims):
    """One thread per output element: ``x[b, k, r]``, ``k`` the row ``_row`` clamps."""
    x, i = node.operands
    k = len(e.nodes[i].shape)
    n = e.nodes[x].shape[batch_dims]
    e.alloc(f"v{nid}", node.shape, node.dtype.name)
    e.grid_stride(tuple(node.shape), lambda idx: [
        f"k = _row({e.read(i, None, list(idx[:k]))}, {n})",
        (f"v{nid}[{', '.join(idx) or '0'}] = "
         f"{e.read(x, None, list(idx[:batch_dims]) + ['k'] + list(idx[k:]))}")])


_COMBINE = {"add": "{old} + {new}", "set": "{new}", "mul": "{old} * {new}",
            "min": "_min({old}, {new})", "max": "_max({old}, {new})"}


def scatter(e, node, nid, batch_dims, mode):
    """Deterministic, without atomics: one thread per element of (*B, *rest) owns that column
    of the result: it copies it from ``x``, then applies the updates that reach it in the C
    order of the index entries (repeated rows add up in order; the last ``set`` wins)."""
    x, i, v = node.operands
    b = batch_dims
    shape = tuple(e.nodes[x].shape)
    n = shape[b]
    entries = tuple(e.nodes[i].shape[b:])
    e.alloc(f"v{nid}", shape, node.dtype.name)

    def lines(idx):
        head, rest = list(idx[:b]), list(idx[b:])
        target = lambda row: f"v{nid}[{', '.join(head + [row] + rest)}]"
        body = [f"for j in range({n}):",
                f"    {target('j')} = {e.read(x, None, head + ['j'] + rest)}"]
        loops = [f"t{d}" for d in range(len(entries))]
        for d, m in enumerate(entries):
            body.append("    " * d + f"for t{d} in range({m}):")
        pad = "    " * len(entries)
        new = e.read(v, None, head + loops + rest)
        body += [pad + f"k = _row({e.read(i, None, head + loops)}, {n})",
                 pad + f"{target('k')} = " + _COMBINE[mode].format(old=target("k"), new=new)]
        return body
    e.grid_stride(shape[:b] + shape[b + 1:], lines)


register({"gather": gather, "scatter": scatter})
