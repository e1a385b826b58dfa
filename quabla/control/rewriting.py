"""How the rewriter sees into regions (``quabla.core.rewrite.REGION_RULES``).

- **Pruning** (dead code across regions): a region keeps only the results something reads and
  what they need: a carry stays while a kept result (or ``while``'s ``cond_fun``) depends on
  it, through the body, to a fixpoint; operands nothing kept reads are dropped. The
  sub-graphs are restricted to those inputs and outputs.
- **Merging**: two ``cond``s over the same operands are one ``cond`` giving the results of
  both; two ``scan``s over the same operands whose bodies compute the same carries are one
  scan stacking the ``ys`` of both. That is how reverse mode runs a forward loop once: the
  VJP's forward region, which also yields the residuals (per-step carries, a branch's
  intermediates), gives the primal results too. (Equal ``while`` regions are plain CSE.)
"""

import functools

from ..core.graph import Graph, GraphBuilder
from ..core.rewrite import REGION_RULES, simplify

__all__ = []


def _input_masks(graph):
    """Per output, a bit mask of the inputs (by position) it depends on."""
    masks = {nid: 1 << k for k, nid in enumerate(graph.inputs)}
    for nid, node in enumerate(graph.nodes):
        if node.op != "input":
            mask = 0
            for o in node.operands:
                mask |= masks[o]
            masks[nid] = mask
    return [masks[o] for o in graph.outputs]


def _bits(mask, positions):
    return [k for k in positions if mask >> k & 1]


def _restrict(graph, inputs, outputs):
    """``graph`` with only the inputs and outputs at the given positions (the dropped inputs
    are not read by the kept outputs)."""
    b = GraphBuilder()
    remap = {}
    for k in inputs:
        nid = graph.inputs[k]
        node = graph.nodes[nid]
        remap[nid] = b.input(node.shape, node.dtype, graph.input_names[k], node.weak)
    live = set(graph.outputs[k] for k in outputs)
    for nid in range(len(graph.nodes) - 1, -1, -1):
        if nid in live:
            live.update(graph.nodes[nid].operands)
    for nid, node in enumerate(graph.nodes):
        if nid in live and node.op != "input":
            remap[nid] = b.add(node.op, tuple(remap[o] for o in node.operands), node.params,
                               node.shape, node.dtype, node.weak)
    return b.build([remap[graph.outputs[k]] for k in outputs])


def _index_map(kept):
    return {old: new for new, old in enumerate(kept)}


def _with(node, **changes):
    return tuple(sorted({**node.kw, **changes}.items()))


def _merge_graphs(slots, fixed):
    """Merge each slot's graphs (one per region, all over the same inputs) into one graph
    returning the first's outputs, then the others' outputs after the first ``fixed`` ones
    (the shared carries); equal outputs are returned once. Returns the graphs and, per
    region, its map of old output positions to new ones."""
    merged = []
    for graphs in slots:
        b = GraphBuilder()
        first = graphs[0]
        ins = [b.input(first.nodes[nid].shape, first.nodes[nid].dtype, first.input_names[k],
                       first.nodes[nid].weak) for k, nid in enumerate(first.inputs)]
        outs = []
        for j, g in enumerate(graphs):
            remap = dict(zip(g.inputs, ins))
            for nid, node in enumerate(g.nodes):
                if node.op != "input":
                    remap[nid] = b.add(node.op, tuple(remap[o] for o in node.operands),
                                       node.params, node.shape, node.dtype, node.weak)
            outs.extend(remap[o] for o in (g.outputs if j == 0 else g.outputs[fixed:]))
        merged.append(simplify(b.build(outs)))
    unique, where, position = [], {}, []
    for p, key in enumerate(zip(*(g.outputs for g in merged))):
        if p >= fixed and key in where:
            position.append(where[key])
            continue
        if p >= fixed:  # a stacked y equal to a carry's node is still another result
            where[key] = len(unique)
        position.append(len(unique))
        unique.append(p)
    graphs = [Graph(g.nodes, g.inputs, [g.outputs[p] for p in unique], g.input_names)
              for g in merged]
    maps, start = [], 0
    for j, g in enumerate(slots[0]):
        count = len(g.outputs)
        maps.append({r: position[r if j == 0 or r < fixed else start + r - fixed]
                     for r in range(count)})
        start = count if j == 0 else start + count - fixed
    return graphs, maps


class _Rules:
    def __init__(self, prune, merge_key=None, merge=None):
        self.prune = prune
        self.merge_key = merge_key or (lambda node: None)
        self.merge = merge


# -- scan ---------------------------------------------------------------------------------------

def _scan_prune(node, read):
    """Body inputs ``(i, *carry, *consts)``, outputs ``(*carry, *ys)`` = the results."""
    body, n = node.kw["body"], node.kw["n_carry"]
    masks = _input_masks(body)
    keep = set(read)
    while True:
        need = 0
        for r in keep:
            need |= masks[r]
        grown = keep | {k for k in range(n) if need >> (1 + k) & 1}
        if grown == keep:
            break
        keep = grown
    outputs = sorted(keep)
    carries = [k for k in outputs if k < n]
    consts = _bits(need, range(1 + n, len(body.inputs)))
    if len(outputs) == len(body.outputs) and len(consts) == len(body.inputs) - 1 - n:
        return None
    new = simplify(_restrict(body, [0] + [1 + k for k in carries] + consts, outputs))
    return (carries + [p - 1 for p in consts], _with(node, body=new, n_carry=len(carries)),
            _index_map(outputs))


@functools.lru_cache(maxsize=256)
def _carry_core(body, n):
    return _restrict(body, range(len(body.inputs)), range(n))


def _scan_key(node):
    kw = node.kw
    return ("scan", node.operands, kw["length"], kw["lower"], kw["reverse"], kw["n_carry"],
            _carry_core(kw["body"], kw["n_carry"]))


def _scan_merge(nodes):
    n = nodes[0].kw["n_carry"]
    (body,), maps = _merge_graphs([[node.kw["body"] for node in nodes]], n)
    return _with(nodes[0], body=body), maps


# -- while --------------------------------------------------------------------------------------

def _while_prune(node, read):
    """``cond_fun`` and ``body`` take ``(*carry, *consts)``; the carries are the results."""
    test, body, n = node.kw["cond_fun"], node.kw["body"], node.kw["n_carry"]
    masks = _input_masks(body)
    need = _input_masks(test)[0]
    keep = set(read) | set(_bits(need, range(n)))
    while True:
        grown = set(keep)
        for k in keep:
            grown.update(_bits(masks[k], range(n)))
        if grown == keep:
            break
        keep = grown
    carries = sorted(keep)
    for k in carries:
        need |= masks[k]
    consts = _bits(need, range(n, len(body.inputs)))
    if len(carries) == n and len(consts) == len(body.inputs) - n:
        return None
    inputs = carries + consts
    return (inputs, _with(node, cond_fun=simplify(_restrict(test, inputs, [0])),
                          body=simplify(_restrict(body, inputs, carries)),
                          n_carry=len(carries)), _index_map(carries))


# -- cond ---------------------------------------------------------------------------------------

def _cond_prune(node, read):
    """Operands ``(pred, *operands)``; each branch maps the operands to the results."""
    branches = (node.kw["true_fun"], node.kw["false_fun"])
    outputs = sorted(read)
    need = 0
    for g in branches:
        masks = _input_masks(g)
        for r in outputs:
            need |= masks[r]
    n_in = len(branches[0].inputs)
    inputs = _bits(need, range(n_in))
    if len(outputs) == len(branches[0].outputs) and len(inputs) == n_in:
        return None
    t, f = (simplify(_restrict(g, inputs, outputs)) for g in branches)
    return ([0] + [1 + k for k in inputs], _with(node, true_fun=t, false_fun=f),
            _index_map(outputs))


def _cond_merge(nodes):
    (t, f), maps = _merge_graphs([[node.kw["true_fun"] for node in nodes],
                                  [node.kw["false_fun"] for node in nodes]], 0)
    return _with(nodes[0], true_fun=t, false_fun=f), maps


REGION_RULES["scan"] = _Rules(_scan_prune, _scan_key, _scan_merge)
REGION_RULES["while"] = _Rules(_while_prune)
REGION_RULES["cond"] = _Rules(_cond_prune, lambda node: ("cond", node.operands), _cond_merge)
