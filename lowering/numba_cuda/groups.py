"""Fused groups: a ``Group`` of the schedule is one kernel, a grid-stride loop over its
elements with the members as scalar locals. Its reductions over one set of axes become a
block-level tree reduction in shared memory per kept element (then a second kernel over the
blocks' partials when more than one block took part: the order of every sum depends only on
the launch configuration); reductions over other axes read its stored values in kernels of
their own; a short sum, or one keeping a long last axis, is a loop in order per element."""

import math

from quabla.core.primitives import PRIMITIVES
from ..loopnest.schedule import kind
from ..loopnest.templates import combine, literal, np_dtype
from .source import bind_loads, blocks, indent, unflatten

__all__ = ["emit_group", "member_lines"]


def member_lines(e, group, members, idx):
    lines = []
    for m in members:
        node = e.nodes[m]
        if kind(node) == "reduction":
            continue
        if kind(node) == "index_map":
            expr = e.gather(node, group, idx)
        elif node.op == "dynamic_index":  # a fused loop's row of an array (fused_loop_shape)
            x, i = node.operands
            row = f"_row({e.read(i, group, [])}, {e.nodes[x].shape[0]})"
            expr = e.read(x, None, [row] + idx)
        else:
            expr = e.scalar_expr(node, [e.read(o, group, idx) for o in node.operands])
        lines.append(f"s{m} = {expr}")
        if m in group.materialized:
            lines.append(f"v{m}[{', '.join(idx)}] = s{m}")
    return bind_loads(lines)


def emit_group(e, group):
    shape = tuple(group.shape)
    reductions = [m for m in group.members if kind(e.nodes[m]) == "reduction"]
    axes = dict(e.nodes[reductions[0]].params)["axes"] if reductions else None
    primary = [r for r in reductions if dict(e.nodes[r].params)["axes"] == axes]
    others = [r for r in reductions if r not in primary]
    for r in others:  # reduced in kernels of their own, from a stored operand
        source = e.nodes[r].operands[0]
        if source in group.member_set and kind(e.nodes[source]) != "index_map":
            group.materialized.add(source)
    e.stored |= group.materialized
    for m in group.members:
        node = e.nodes[m]
        if m in group.materialized or kind(node) == "reduction":
            e.alloc(f"v{m}", node.shape, node.dtype.name)
    if not primary:
        e.grid_stride(shape, lambda idx: member_lines(e, group, group.members, idx))
    else:
        accumulators = [(r, e.nodes[r].op, e.nodes[r].dtype.name,
                         lambda idx, s=e.nodes[r].operands[0]: e.read(s, group, idx))
                        for r in primary]
        tree_reduction(e, shape, axes, accumulators,
                       lambda idx: member_lines(e, group, group.members, idx))
    for r in others:
        node = e.nodes[r]
        source = node.operands[0]
        tree_reduction(e, shape, dict(node.params)["axes"],
                       [(r, node.op, node.dtype.name,
                              lambda idx, s=source: e.read(s, None, idx))],
                       lambda idx: [])


def tree_reduction(e, shape, axes, accumulators, element_lines):
    """Kernels reducing ``shape`` over ``axes`` for each ``(nid, op, dtype, value)`` of
    ``accumulators`` (``value(idx)``: the element's expression after
    ``element_lines(idx)``), into flat views ``v{nid}r`` of the results."""
    kept = [d for d in range(len(shape)) if d not in axes]
    K = math.prod(shape[d] for d in kept)
    L = math.prod(shape[d] for d in axes)
    if K == 0:
        return
    T = e.launch.threads
    idx = [f"i{d}" for d in range(len(shape))]
    element = unflatten("kk", kept, shape) + unflatten("j", list(axes), shape)
    element += element_lines(idx)
    if L <= T or (len(shape) - 1 not in axes and K >= 16 * T):
        # a short sum, or enough kept elements along the last axis to fill the device:
        # each thread reduces its kept elements alone, in order (neighbouring threads
        # read neighbouring elements)
        body = [f"for kk in range(cuda.grid(1), {K}, cuda.gridsize(1)):"]
        loop = [f"a{nid} = {literal(PRIMITIVES[op].identity, dtype)}" for nid, op, dtype, _ in accumulators]
        loop += [f"for j in range({L}):"] + indent(element + [
            f"a{nid} = {combine(op, f'a{nid}', value(idx))}"
            for nid, op, dtype, value in accumulators], 1)
        for nid, *_ in accumulators:
            loop.append(f"{e.as_shape(f'v{nid}', (K,), f'v{nid}r', nid)}[kk] = a{nid}")
        e.kernel(body + indent(loop, 1), blocks(K, T, e.launch.blocks), T)
        return
    nb = blocks(L, T, e.launch.blocks)
    rows = min(K, e.launch.rows)
    targets = []
    for nid, op, dtype, value in accumulators:
        e.as_shape(f"v{nid}", (K,), f"v{nid}r", nid)
        if nb > 1:
            e.alloc(f"p{nid}", (K, nb), dtype, expiry=e.now)
            targets.append(f"p{nid}[kk, cuda.blockIdx.x]")
        else:
            targets.append(f"v{nid}r[kk]")
        element.append(f"a{nid} = {combine(op, f'a{nid}', value(idx))}")
    e.kernel(block_tree(e, K, L, accumulators, element, targets), (nb, rows), T)
    if nb > 1:  # the blocks' partials, reduced by one block per kept element
        element = [f"a{nid} = {combine(op, f'a{nid}', f'p{nid}[kk, j]')}"
                   for nid, op, _, _ in accumulators]
        targets = [f"v{nid}r[kk]" for nid, *_ in accumulators]
        e.kernel(block_tree(e, K, nb, accumulators, element, targets), (1, rows), T)


def block_tree(e, K, L, accumulators, element, targets):
    """The accumulators are reduced one after another, so those of one dtype share one
    shared array (a block's static shared memory is at most 48 KiB)."""
    T = e.launch.threads
    body = [f"sm_{dtype} = cuda.shared.array({T}, {np_dtype(dtype)})"
            for dtype in sorted({dtype for _, _, dtype, _ in accumulators})]
    body += ["t = cuda.threadIdx.x",
             f"for kk in range(cuda.blockIdx.y, {K}, cuda.gridDim.y):"]
    loop = [f"a{nid} = {literal(PRIMITIVES[op].identity, dtype)}" for nid, op, dtype, _ in accumulators]
    loop.append(f"for j in range(cuda.blockIdx.x * {T} + t, {L}, cuda.gridDim.x * {T}):")
    loop += indent(element, 1)
    for (nid, op, dtype, _), target in zip(accumulators, targets):
        sm = f"sm_{dtype}"
        both = combine(op, f"{sm}[t]", f"{sm}[t + s]")
        loop += [f"{sm}[t] = a{nid}", "cuda.syncthreads()", f"s = {T // 2}",
                 "while s > 0:", "    if t < s:", f"        {sm}[t] = {both}",
                 "    cuda.syncthreads()", "    s //= 2",
                 # every thread is past its read of sm[0] before the next one is written
                 "if t == 0:", f"    {target} = {sm}[0]", "cuda.syncthreads()"]
    return body + indent(loop, 1)
