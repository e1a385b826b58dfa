"""Where an index map reads its operands: the source expression of each output element, shared
by the loop-nest back ends, whose emitters only say how one operand's element is read.

``broadcast_in_dim``, ``transpose``, ``rev`` and ``slice`` read their operand at a remapped
index. ``pad`` reads its operand where the output index falls on it and is zero elsewhere;
``concatenate`` reads the operand whose range along the axis holds the index, chosen by
comparisons arranged as a balanced tree (log2 of the operand count per element). Both are
guarded reads in the loop that reads them, as XLA's fused loops have, instead of copies into a
buffer of their own: a ``roll`` (two slices and a concatenate) and its transpose (pads) cost
no pass over memory of their own. A guard the loop's segment does not decide (``below``) is a
select, ``_where(guard, value, other)``, of a read whose index is clamped into its operand:
both sides are computed, no branch, so the loop still vectorises (a 2D stencil's rows).
"""

import functools
import re

from .schedule import kind
from .templates import literal

__all__ = ["gather_expression", "below", "composed"]


def gather_expression(node, shapes, idxs, read, below=lambda expr, bound: None):
    """The source expression of index map ``node`` at one output element. ``idxs[k]``: the
    output index (one expression per axis) as operand ``k`` is read at it; ``shapes[k]``:
    operand ``k``'s shape; ``read(k, sidx)``: the expression of operand ``k`` at ``sidx``;
    ``below(expr, bound)``: whether ``expr < bound`` is known where the expression is read
    (True, False; None: a guard tests it)."""
    params = dict(node.params)
    if node.op == "concatenate":
        return _concatenate(node, shapes, idxs, read, params["axis"], below)
    idx, shape = idxs[0], shapes[0]
    if node.op == "pad":
        return _pad(node, shape, idx, read, params, below) if shape else read(0, [])
    if not shape:
        return read(0, [])
    if node.op == "broadcast_in_dim":
        return read(0, [idx[d] for d in params["broadcast_dimensions"]])
    if node.op == "transpose":
        sidx = [None] * len(idx)
        for k, p in enumerate(params["permutation"]):
            sidx[p] = idx[k]
        return read(0, sidx)
    if node.op == "rev":
        return read(0, [f"{n - 1} - {_atom(i)}" if d in params["dimensions"] else i
                        for d, (i, n) in enumerate(zip(idx, shape))])
    if node.op == "slice":
        return read(0, [_affine(i, s, st) for i, s, st in
                        zip(idx, params["start_indices"], params["strides"])])
    raise ValueError(f"{node.op} is not an index map")


def composed(nodes, nid, stored, group):
    """Whether an index map reading node ``nid`` gathers it in turn: ``nid`` is an index map
    not ``stored``, or one of ``group``, whose buffer its loop is still writing."""
    return kind(nodes[nid]) == "index_map" and nodes[nid].shape != () and (
        nid not in stored or (group is not None and nid in group.member_set))


def _atom(i):
    """Index expression ``i`` as an operand of a product or a difference (an index map may
    read another's index expressions)."""
    if i.isidentifier() or i.isdigit():
        return i
    depth = 0
    for k, ch in enumerate(i):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return i if k == len(i) - 1 else f"({i})"
    return f"({i})"


def _affine(i, start, stride):
    """``start + stride * i``, spelled as briefly as it can be."""
    term = i if stride == 1 else f"{stride} * {_atom(i)}"
    return term if start == 0 else f"{start} + {term}"


def _pad(node, shape, idx, read, params, below):
    """The operand where the index lands on one of its elements (``low`` of them ahead of it,
    ``interior`` between its elements; negative widths crop), else zero."""
    conditions, sidx = [], []
    strided = False  # an axis read between interior zeros: its index divides where guarded
    for i, n, extent, low, gap in zip(idx, shape, node.shape, params["low"],
                                      params["interior"]):
        step = gap + 1
        guards = []
        last = low + (n - 1) * step  # where the operand's last element lands
        # (whether the guard is needed, the answer of ``below`` that passes it, the guard)
        for needed, passes, bound, guard in ((low > 0, False, low, f"{i} >= {low}"),
                                             (last < extent - 1, True, last + 1,
                                              f"{i} <= {last}")):
            known = below(i, bound) if needed else passes
            if known is None:
                conditions.append(guard)
                guards.append((guard, n - 1 if passes else 0))  # the edge it clamps to
            elif known is not passes:
                return literal(0, node.dtype.name)  # off the operand on this whole segment
        offset = i if low == 0 else f"{i} - {low}" if low > 0 else f"{i} + {-low}"
        if step > 1:
            offset = _atom(offset)
            conditions.append(f"{offset} % {step} == 0")
            offset = f"{offset} // {step}"
            strided = True
        elif guards:
            # clamped into the operand: read unconditionally, then picked (branch-free)
            for guard, edge in guards:
                offset = f"({offset} if {guard} else {edge})"
        sidx.append(offset)
    value = read(0, sidx)
    if not conditions:
        return value
    if not strided:
        return f"_where({' and '.join(conditions)}, {value}, {literal(0, node.dtype.name)})"
    return f"({value} if {' and '.join(conditions)} else {literal(0, node.dtype.name)})"


def _concatenate(node, shapes, idxs, read, axis, below):
    """The operand whose range along ``axis`` holds the index, by a balanced tree of
    comparisons (each a select of two reads clamped into their operands)."""
    starts = [0]
    for shape in shapes:
        starts.append(starts[-1] + shape[axis])

    def piece(k):
        sidx = list(idxs[k])
        i = sidx[axis]
        offset = f"{i} - {starts[k]}" if starts[k] else i
        if k > 0 and below(i, starts[k]) is not False:
            offset = f"({offset} if {i} >= {starts[k]} else 0)"
        if k < len(shapes) - 1 and below(i, starts[k + 1]) is not True:
            offset = f"({offset} if {i} < {starts[k + 1]} else {shapes[k][axis] - 1})"
        sidx[axis] = offset
        return read(k, sidx)

    def choose(lo, hi):
        if hi - lo == 1:
            return piece(lo)
        mid = (lo + hi) // 2
        first = below(idxs[0][axis], starts[mid])
        if first is not None:
            return choose(lo, mid) if first else choose(mid, hi)
        return f"_where({idxs[0][axis]} < {starts[mid]}, {choose(lo, mid)}, {choose(mid, hi)})"
    return choose(0, len(shapes))


_LOOP_VARIABLE = re.compile(r"\bi\d+\b")


@functools.lru_cache(maxsize=4096)
def _line(expr):
    """``(var, a, b)`` when index expression ``expr`` is ``a * var + b`` of one loop index
    (``i0``, ``i1``...) with integer ``a != 0`` and ``b``, else None."""
    names = set(_LOOP_VARIABLE.findall(expr))
    if len(names) != 1 or "//" in expr or "%" in expr \
            or re.search(r"[A-Za-z_]", _LOOP_VARIABLE.sub("", expr)):
        return None
    var = names.pop()
    at = [eval(expr, {"__builtins__": {}}, {var: v}) for v in (0, 1, 2)]
    a, b = at[1] - at[0], at[0]
    return (var, a, b) if a != 0 and at[2] == 2 * a + b else None


def below(expr, bound, ranges, splits=None):
    """Whether index ``expr < bound`` on the loop segment ``ranges`` (loop index -> ``(lo,
    hi)``, half open): True or False when that holds for every index of it, else None; then
    the index of its loop where the answer changes is added to ``splits`` (loop index -> set),
    where a loop split there would decide it."""
    line = _line(expr)
    if line is None:
        return None
    var, a, b = line
    lo, hi = ranges.get(var, (None, None))
    if lo is not None:
        ends = (a * lo + b, a * (hi - 1) + b)
        if max(ends) < bound:
            return True
        if min(ends) >= bound:
            return False
    if splits is not None:  # the first index where a * i + b < bound changes
        change = -((b - bound) // a) if a > 0 else (b - bound) // -a + 1
        splits.setdefault(var, set()).add(change)
    return None
