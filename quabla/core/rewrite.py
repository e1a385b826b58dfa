"""The rewriter: common subexpression elimination, constant folding, NaN-safe algebraic
identities and dead code elimination, applied after every transform.

Symbolic AD bloats graphs (every ``x * 1``, every re-broadcast); this pass is what keeps the
generated code small. It rebuilds the graph in one forward sweep with hash-consing, so a node
is only ever created in canonical form, merges regions that share their operands and loop
(``REGION_RULES``), then drops what the outputs do not need, inside regions too.
"""

import collections
import math

import numpy as np

from .graph import Const, Graph, GraphBuilder
from .primitives import PRIMITIVES

__all__ = ["REGION_RULES", "RegionRules", "simplify"]

FOLD_LIMIT = 1 << 16  # fold constant expressions up to this many elements


class RegionRules:
    """How the rewriter sees into a region (each region primitive registers its own):

    - ``prune(node, read)`` -> None when every result index in ``read`` and every operand is
      needed, else ``(kept operand positions, params, {old result index: new index})``;
    - ``merge_key(node)`` -> None or a hashable key: regions with equal keys compute the same
      loop (or branch) over the same operands, so one region can give the results of all;
    - ``merge(nodes)`` -> ``(params, [{old result index: new index} per node])``.
    """

    __slots__ = ("prune", "merge_key", "merge")

    def __init__(self, prune, merge_key=None, merge=None):
        self.prune = prune
        self.merge_key = merge_key or (lambda node: None)
        self.merge = merge


REGION_RULES = {}  # op -> its RegionRules (filled by ``quabla.control``)


def simplify(graph, max_passes=4):
    """Return an equivalent, smaller graph (the same inputs, in the same order). A sweep
    leaves every node in canonical form (the rules' own nodes are rewritten too), so another
    would change nothing unless regions were merged or pruned meanwhile: only then is the
    graph swept again, until nothing changes."""
    for _ in range(max_passes):
        swept = _sweep(graph)
        merged = _merge(swept)
        new, pruned = _dce(merged)
        if merged is swept and not pruned:
            return new
        if len(new.nodes) == len(graph.nodes) and new == graph:
            return new
        graph = new
    return graph


class _Sweep:
    def __init__(self):
        self.b = GraphBuilder()
        self.table = {}
        self.readers = collections.Counter()  # new node -> how many of the swept graph read it

    def node(self, i):
        return self.b.nodes[i]

    def rewrite(self, op, operands, params, shape, dtype, weak=False):
        """The node ``op(operands)`` in canonical form: a rule's node gets every rule too."""
        return _rewrite(self, _Spec(op, params, shape, dtype, weak), operands)

    def emit(self, op, operands, params, shape, dtype, weak=False):
        key = (op, operands, params, shape, dtype.name, weak)
        found = self.table.get(key)
        if found is not None:
            return found
        nid = self.b.add(op, operands, params, shape, dtype, weak)
        self.table[key] = nid
        return nid

    def constant(self, value, dtype, weak):
        """A constant node for a folded value."""
        return self.const(Const(np.asarray(value, dtype=dtype.numpy)), dtype, weak)

    def const(self, const, dtype, weak):
        """A constant node holding ``const`` itself (its hash and digest are kept), or a
        broadcast of a scalar when every element has the same bits."""
        if const.value.dtype != dtype.numpy:
            return self.constant(const.value, dtype, weak)
        shape = const.value.shape
        splat = const.splat() if shape else None
        if splat is not None:
            scalar = self.const(Const(splat), dtype, weak)
            return self.emit("broadcast_in_dim", (scalar,),
                             (("broadcast_dimensions", ()), ("shape", shape)), shape, dtype, weak)
        return self.emit("constant", (), (("value", const),), shape, dtype, weak)

    # -- inspection helpers ---------------------------------------------------------------------
    def splat(self, i):
        """The scalar value of a constant or a broadcast of a scalar constant, else None."""
        n = self.node(i)
        if n.op == "broadcast_in_dim":
            n = self.node(n.operands[0])
        if n.op == "constant" and n.kw["value"].value.size == 1:
            return n.kw["value"].value.item()
        return None

    def is_const(self, i):
        return self.node(i).op == "constant"


def _sweep(graph):
    s = _Sweep()
    reads = collections.Counter(o for node in graph.nodes for o in node.operands)
    reads.update(graph.outputs)
    remap = {}
    for nid, node in enumerate(graph.nodes):
        if node.op == "input":
            remap[nid] = s.b.input(node.shape, node.dtype, graph.input_names[len(s.b.inputs)],
                                   node.weak)
            continue
        if node.op == "constant":
            remap[nid] = s.const(node.kw["value"], node.dtype, node.weak)
            continue
        remap[nid] = _rewrite(s, node, tuple([remap[o] for o in node.operands]))
        s.readers[remap[nid]] += reads[nid]
    return s.b.build([remap[o] for o in graph.outputs])


def _rewrite(s, node, operands):
    op, params, shape, dtype, weak = node.op, node.params, node.shape, node.dtype, node.weak
    simpler = _identity(s, op, operands, node)
    if simpler is not None:
        return simpler
    prim = PRIMITIVES[op]
    if prim.foldable and operands and all(s.is_const(o) for o in operands) and (
        int(math.prod(shape)) <= FOLD_LIMIT
    ):
        with np.errstate(all="ignore"):
            value = prim.impl(*[s.node(o).kw["value"].value for o in operands], **dict(params))
        return s.constant(value, dtype, weak)
    if prim.elementwise and len(operands) > 0:
        hoisted = _hoist_broadcast(s, node, operands)
        if hoisted is not None:
            return hoisted
    return s.emit(op, operands, params, shape, dtype, weak)


def _same_aval(s, i, node):
    n = s.node(i)
    return n.shape == node.shape and n.dtype is node.dtype


def _identity(s, op, operands, node):
    """NaN-safe algebraic identities; returns an existing node id or None."""
    kw = dict(node.params)
    if op in ("add", "sub"):
        x, y = operands
        if s.splat(y) == 0 and _same_aval(s, x, node):
            return x
        if op == "add" and s.splat(x) == 0 and _same_aval(s, y, node):
            return y
        if op == "add":  # x + (zeros with row i += v) -> x with row i += v: O(row), in place
            for acc, upd in ((x, y), (y, x)):
                u = s.node(upd)
                if (u.op == "dynamic_update_add" and s.splat(u.operands[0]) == 0
                        and _same_aval(s, acc, node) and _same_aval(s, upd, node)):
                    return s.rewrite("dynamic_update_add", (acc,) + u.operands[1:], u.params,
                                     node.shape, node.dtype, node.weak)
    elif op in ("mul", "div"):
        x, y = operands
        if s.splat(y) == 1 and _same_aval(s, x, node):
            return x
        if op == "mul" and s.splat(x) == 1 and _same_aval(s, y, node):
            return y
    elif op == "neg":
        inner = s.node(operands[0])
        if inner.op == "neg":
            return inner.operands[0]
    elif op == "integer_pow" and kw["n"] == 1:
        return operands[0]
    elif op == "select":
        p, x, y = operands
        if x == y:
            return x
        truth = s.splat(p)
        if truth is not None:
            return x if truth else y
    elif op == "cast":
        if s.node(operands[0]).dtype is kw["dtype"]:
            return operands[0]
    elif op == "reshape":
        x = operands[0]
        inner = s.node(x)
        if inner.shape == node.shape:
            return x
        if inner.op == "reshape":
            return s.rewrite("reshape", inner.operands, node.params, node.shape, node.dtype,
                             node.weak)
    elif op == "transpose":
        inner = s.node(operands[0])
        perm = kw["permutation"]
        if perm == tuple(range(len(perm))):
            return operands[0]
        if inner.op == "transpose":
            first = inner.kw["permutation"]
            composed = tuple(first[p] for p in perm)
            if composed == tuple(range(len(composed))):
                return inner.operands[0]
            return s.rewrite("transpose", inner.operands, (("permutation", composed),),
                             node.shape, node.dtype, node.weak)
    elif op == "rev":
        inner = s.node(operands[0])
        if not kw["dimensions"]:
            return operands[0]
        if inner.op == "rev" and inner.kw["dimensions"] == kw["dimensions"]:
            return inner.operands[0]
    elif op in ("pad", "concatenate", "slice"):
        if len(operands) == 1 and _same_aval(s, operands[0], node) and (
                op != "pad" or not any(kw["low"] + kw["interior"])):
            return operands[0]  # nothing padded, one operand, everything sliced
        if op == "slice":
            return _sink_slice(s, operands[0], node, kw)
    elif op == "broadcast_in_dim":
        x = operands[0]
        inner = s.node(x)
        if inner.shape == node.shape:
            return x
        if inner.op == "broadcast_in_dim":
            dims = kw["broadcast_dimensions"]
            composed = tuple(dims[d] for d in inner.kw["broadcast_dimensions"])
            return s.rewrite("broadcast_in_dim", inner.operands,
                             (("broadcast_dimensions", composed), ("shape", node.shape)),
                             node.shape, node.dtype, node.weak)
    elif PRIMITIVES[op].kind == "reduction":
        if not kw["axes"]:
            return operands[0]
    elif op == "dot_general":
        return (_single_term_product(s, operands, node, kw["dimension_numbers"])
                or _fold_transposes(s, operands, node, kw["dimension_numbers"]))
    return None


def _sink_slice(s, x, node, kw):
    """A slice taken before what it slices is computed: of a slice, one slice; of a broadcast,
    a broadcast of a slice of its operand (none of a scalar); of a pad, the
    pad with its widths cut (negative where it crops: zeros where it reads only padding, a
    slice where it reads none); of an elementwise op read by nothing else, the op on slices
    of its operands. A stencil's gradient, ``slice(pad(a) + pad(b))``, then reads ``a`` and
    ``b`` in place instead of writing the padded sum first."""
    start, limit, stride = kw["start_indices"], kw["limit_indices"], kw["strides"]
    inner = s.node(x)
    if inner.op == "slice":
        first, step = inner.kw["start_indices"], inner.kw["strides"]
        begin = tuple(a + b * c for a, b, c in zip(first, start, step))
        steps = tuple(a * b for a, b in zip(step, stride))
        end = tuple(b + (n - 1) * st + 1 for b, n, st in zip(begin, node.shape, steps))
        return s.rewrite("slice", inner.operands, (("limit_indices", end), ("start_indices", begin),
                                                   ("strides", steps)),
                         node.shape, node.dtype, node.weak)
    if inner.op == "broadcast_in_dim":
        source = s.node(inner.operands[0])
        dims = inner.kw["broadcast_dimensions"]
        keep = [source.shape[j] == 1 for j in range(len(dims))]
        y = inner.operands[0]
        if not all(keep):
            begin = tuple(0 if k else start[d] for k, d in zip(keep, dims))
            steps = tuple(1 if k else stride[d] for k, d in zip(keep, dims))
            shape = tuple(1 if k else node.shape[d] for k, d in zip(keep, dims))
            end = tuple(b + (n - 1) * st + 1 for b, n, st in zip(begin, shape, steps))
            y = s.rewrite("slice", (y,), (("limit_indices", end), ("start_indices", begin),
                                          ("strides", steps)), shape, source.dtype, source.weak)
        return s.rewrite("broadcast_in_dim", (y,), (("broadcast_dimensions", dims),
                                                    ("shape", node.shape)),
                         node.shape, node.dtype, node.weak)
    if inner.op == "pad" and not any(inner.kw["interior"]) and set(stride) == {1}:
        source = s.node(inner.operands[0]).shape
        low = tuple(lo - b for lo, b in zip(inner.kw["low"], start))
        high = tuple(n - lo - m for n, lo, m in zip(node.shape, low, source))
        if any(lo >= n or -lo >= m for lo, n, m in zip(low, node.shape, source)):
            zero = s.constant(np.zeros((), node.dtype.numpy), node.dtype, node.weak)
            return s.rewrite("broadcast_in_dim", (zero,), (("broadcast_dimensions", ()),
                                                          ("shape", node.shape)),
                             node.shape, node.dtype, node.weak)
        if max(low + high) <= 0:
            begin = tuple(-lo for lo in low)
            end = tuple(b + n for b, n in zip(begin, node.shape))
            return s.rewrite("slice", inner.operands, (("limit_indices", end),
                                                       ("start_indices", begin),
                                                       ("strides", stride)),
                             node.shape, node.dtype, node.weak)
        return s.rewrite("pad", inner.operands, (("high", high), ("interior", inner.kw["interior"]),
                                                 ("low", low)),
                         node.shape, node.dtype, node.weak)
    prim = PRIMITIVES.get(inner.op)
    if (prim is not None and prim.kind == "elementwise" and s.readers[x] == 1
            and all(s.node(o).shape == inner.shape for o in inner.operands)):
        sliced = tuple(s.rewrite("slice", (o,), node.params, node.shape, s.node(o).dtype,
                                 s.node(o).weak) for o in inner.operands)
        return s.rewrite(inner.op, sliced, inner.params, node.shape, inner.dtype, inner.weak)
    return None


def _single_term_product(s, operands, node, dimension_numbers):
    """A product whose sums have one term (every contracted extent 1, or no contraction) is a
    broadcast multiply: elementwise, so it fuses with what reads it instead of being a product
    of its own. ``reshape(x, (1,)) @ w`` is ``x * w[0]``; an outer product written as a
    ``dot_general`` (or under ``vmap``) is ``a[:, None] * b[None, :]``."""
    (lc, rc), (lb, rb) = dimension_numbers
    lhs, rhs = s.node(operands[0]), s.node(operands[1])
    if any(lhs.shape[d] != 1 for d in lc):
        return None
    n_batch = len(lb)
    factors = []
    for o, n, contract, batch, first in ((operands[0], lhs, lc, lb, n_batch),
                                         (operands[1], rhs, rc, rb, None)):
        free = tuple(d for d in range(len(n.shape)) if d not in contract and d not in batch)
        kept = [d for d in range(len(n.shape)) if d not in contract]
        x = o
        if len(kept) != len(n.shape):  # drop the contracted axes of extent 1
            x = s.rewrite("reshape", (x,), (("new_shape", tuple(n.shape[d] for d in kept)),),
                          tuple(n.shape[d] for d in kept), n.dtype, n.weak)
        order = tuple(kept.index(d) for d in tuple(batch) + free)
        shape = tuple(n.shape[d] for d in tuple(batch) + free)
        if order != tuple(range(len(order))):
            x = s.rewrite("transpose", (x,), (("permutation", order),), shape, n.dtype, n.weak)
        if first is None:
            first = len(node.shape) - len(free)
        dims = tuple(range(n_batch)) + tuple(range(first, first + len(free)))
        if shape != tuple(node.shape):
            x = s.rewrite("broadcast_in_dim", (x,),
                          (("broadcast_dimensions", dims), ("shape", tuple(node.shape))),
                          tuple(node.shape), n.dtype, n.weak)
        factors.append(x)
    return s.rewrite("mul", tuple(factors), (), node.shape, node.dtype, node.weak)


def _fold_transposes(s, operands, node, dimension_numbers):
    """dot_general(transpose(a), b) -> dot_general(a, b) with the contracting and batch axes
    renumbered, when the transpose keeps the free axes in order (so the result's axes are
    the same): ``h.T @ g`` becomes a product summing over ``h``'s rows, which the back ends
    read in place (and a tile loop accumulates) instead of a transposed copy."""
    (lc, rc), (lb, rb) = dimension_numbers
    axes = [[lc, lb], [rc, rb]]
    folded = list(operands)
    for side in (0, 1):
        inner = s.node(operands[side])
        if inner.op != "transpose":
            continue
        perm = inner.kw["permutation"]
        contract, batch = axes[side]
        free = [perm[d] for d in range(len(perm)) if d not in contract and d not in batch]
        if free != sorted(free):
            continue
        axes[side] = [tuple(perm[d] for d in contract), tuple(perm[d] for d in batch)]
        folded[side] = inner.operands[0]
    if folded == list(operands):
        return None
    numbers = ((axes[0][0], axes[1][0]), (axes[0][1], axes[1][1]))
    params = tuple((k, numbers if k == "dimension_numbers" else v) for k, v in node.params)
    return s.rewrite("dot_general", tuple(folded), params, node.shape, node.dtype, node.weak)


def _hoist_broadcast(s, node, operands):
    """f(broadcast(a), broadcast(b)) -> broadcast(f(a, b)) when every operand is broadcast
    from one shape along the same axes: the op then runs on the small shape."""
    sources = []
    for o in operands:
        n = s.node(o)
        if n.op != "broadcast_in_dim":
            return None
        sources.append((n.operands[0], n.kw["broadcast_dimensions"]))
    dims = sources[0][1]
    small = s.node(sources[0][0]).shape
    if any(d != dims or s.node(src).shape != small for src, d in sources):
        return None
    inner = s.rewrite(node.op, tuple(src for src, _ in sources), node.params, small, node.dtype,
                      node.weak)
    return s.rewrite("broadcast_in_dim", (inner,),
                     (("broadcast_dimensions", dims), ("shape", node.shape)),
                     node.shape, node.dtype, node.weak)


class _Spec:
    """A node the rewriter is about to make: what ``_rewrite`` reads of one."""

    __slots__ = ("op", "params", "shape", "dtype", "weak")

    def __init__(self, op, params, shape, dtype, weak):
        self.op, self.params, self.shape, self.dtype, self.weak = op, params, shape, dtype, weak


def _merge(graph):
    """One region node for each group of regions with the same ``merge_key``, placed where
    the first of them was (they share their operands); their ``get``s read it."""
    groups = {}
    for nid, node in enumerate(graph.nodes):
        rule = REGION_RULES.get(node.op)
        key = rule.merge_key(node) if rule is not None else None
        if key is not None:
            groups.setdefault(key, []).append(nid)
    groups = [g for g in groups.values() if len(g) > 1]
    if not groups:
        return graph
    first, redirect = {}, {}  # region -> (members, params, maps); member -> (first, its map)
    for members in groups:
        nodes = [graph.nodes[m] for m in members]
        params, maps = REGION_RULES[nodes[0].op].merge(nodes)
        first[members[0]] = (members, params)
        redirect.update((m, (members[0], index_map)) for m, index_map in zip(members, maps))
    reads = {}  # merged region -> {new result index: get node}
    for nid, node in enumerate(graph.nodes):
        if node.op == "get" and node.operands[0] in redirect:
            lead, index_map = redirect[node.operands[0]]
            reads.setdefault(lead, {}).setdefault(index_map[node.kw["index"]], node)
    b = GraphBuilder()
    remap, merged_gets = {}, {}
    for nid, node in enumerate(graph.nodes):
        if node.op == "input":
            remap[nid] = b.input(node.shape, node.dtype, graph.input_names[len(b.inputs)],
                                 node.weak)
        elif nid in first:
            members, params = first[nid]
            region = b.add(node.op, tuple(remap[o] for o in node.operands), params, node.shape,
                           node.dtype, node.weak)
            for index, get in sorted(reads.get(nid, {}).items()):
                merged_gets[nid, index] = b.add("get", (region,), (("index", index),), get.shape,
                                                get.dtype, get.weak)
        elif nid in redirect:
            continue
        elif node.op == "get" and node.operands[0] in redirect:
            lead, index_map = redirect[node.operands[0]]
            remap[nid] = merged_gets[lead, index_map[node.kw["index"]]]
        else:
            remap[nid] = b.add(node.op, tuple(remap[o] for o in node.operands), node.params,
                               node.shape, node.dtype, node.weak)
    return b.build([remap[o] for o in graph.outputs])


def _dce(graph):
    """Drop what the outputs do not need; a region keeps only the results read and what they
    need (``REGION_RULES`` prune its sub-graphs and operands, its ``get``s are renumbered).
    Returns ``(graph, whether a region was pruned)``."""
    live = set(graph.outputs)
    reads, pruned = {}, {}
    for nid in range(len(graph.nodes) - 1, -1, -1):
        if nid not in live:
            continue
        node = graph.nodes[nid]
        if node.op == "get":
            reads.setdefault(node.operands[0], set()).add(node.kw["index"])
        rule = REGION_RULES.get(node.op)
        cut = rule.prune(node, reads.get(nid, set())) if rule is not None else None
        if cut is not None:
            pruned[nid] = cut
            live.update(node.operands[k] for k in cut[0])
        else:
            live.update(node.operands)
    live.update(graph.inputs)
    new_id = {}
    b = GraphBuilder()
    for nid, node in enumerate(graph.nodes):
        if nid not in live:
            continue
        operands, params = node.operands, node.params
        if node.op == "input":
            new_id[nid] = b.input(node.shape, node.dtype, graph.input_names[len(b.inputs)],
                                  node.weak)
            continue
        if nid in pruned:
            kept, params, _ = pruned[nid]
            operands = [operands[k] for k in kept]
        elif node.op == "get" and operands[0] in pruned:
            params = (("index", pruned[operands[0]][2][node.kw["index"]]),)
        new_id[nid] = b.add(node.op, tuple([new_id[o] for o in operands]), params, node.shape,
                            node.dtype, node.weak)
    return (Graph(b.nodes, b.inputs, [new_id[o] for o in graph.outputs], b.input_names),
            bool(pruned))
