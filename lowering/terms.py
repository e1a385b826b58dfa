"""A program whose outputs are sums of terms that share no work, cut into two programs: the
main term and the rest.

A loss written as a sum (a PDE's residual plus a boundary term, a misfit plus a penalty) gives
outputs that are sums: its value, and each gradient, an add tree with a leaf per term (a
term's own leaves, for a gradient that reaches a parameter several ways). Compiled as one
program, an added term moves everything: its nodes fuse into the first loop nests, its values
take the first scratch offsets, every name after them changes, and an edit that evaluates
the network again shared no part with its original. Cut, each half a program of its own
(compiled, cached and kept under its own key, numba_cpu/programs.py), the main term of an
edit is the original program itself, found in the cache without generating anything, and
the edit compiles the rest alone.

Leaves whose cones (what they are computed from) meet are one group, except at free nodes,
computed from inputs and constants by index maps, reshapes and casts alone (a parameter
reshaped or broadcast), which each group computes for itself. The main term is the group of
the first output's first leaf (the loss's first term, as the user wrote it: an edit adds
terms after it); every other group is the rest. The main term writes every output (zeros
where it has no leaf, made and placed as a gradient transform makes them), each output's add
tree pruned to its own leaves, its nodes in their order in the whole: the graph its original
was, once ``canonical`` (free nodes placed before their first reader: simplification keeps the
first of equal nodes, which an added term may have made first) and without the inputs it
does not read (an edit may add an argument, its term's data). The rest reads the inputs it
uses, then the main term's outputs it adds to, and writes their sums: the sums are done in
its own loops, and a step makes one call more. A program with inputs it does not read is one
term without them, so that it is its edit's main term.
"""

import math
from typing import NamedTuple

import numpy as np

from quabla.core.graph import Const, Graph, Node
from quabla.core.primitives import PRIMITIVES

__all__ = ["Term", "split", "canonical", "SPLIT_NODES", "CARRIED_ELEMENTS"]

# A program of fewer nodes (its regions' bodies counted) is not cut: it compiles in a few
# milliseconds, about what a second program costs (its key, its generation, its linking), and
# a call of a few microseconds would make two.
SPLIT_NODES = 40
# Nor one whose rest would carry more elements than this in the sums it adds to: each is read
# and written once more per call (per-example gradients of a classifier, 6.5 million: their
# step took twice as long).
CARRIED_ELEMENTS = 1 << 20


class Term(NamedTuple):
    """A group of terms as a program: ``graph`` reads the whole's ``inputs`` (their positions
    there) and writes its ``outputs`` (positions). A term after the first reads after its
    inputs the sum so far of each of its outputs, and adds its own to it."""
    graph: Graph
    inputs: tuple
    outputs: tuple


def split(graph):
    """``graph`` as ``Term``s to run in order, each output the last writer's: the main term
    and the rest, or the whole alone (``canonical``) where its outputs are not sums of terms
    that share no work, where the rest would write an output that is not a float or only one
    of several (a loss's value whose gradient a step then reads, as an optimizer's does: the
    main term changes with the added term anyway), where it has fewer than ``SPLIT_NODES``
    nodes or the rest would carry more than ``CARRIED_ELEMENTS``. Each term's graph reads
    only the inputs it uses: an edit may add an argument (its term's data), and the original
    may have one its loss does not read (a network's last bias, under two derivatives)."""
    cut = _cut(graph)
    if cut is not None:
        return cut
    read = {o for node in graph.nodes for o in node.operands} | set(graph.outputs)
    if all(nid in read for nid in graph.inputs):
        return [Term(canonical(graph), tuple(range(len(graph.inputs))),
                     tuple(range(len(graph.outputs))))]
    return [_term(graph, set(), set(graph.outputs), main=True)]  # without the unused inputs


def _cut(graph):
    """The main term and the rest, or None (``split`` says where)."""
    nodes = graph.nodes
    if sum(1 for _ in zip(range(SPLIT_NODES), graph.walk())) < SPLIT_NODES:
        return None
    trees, leaves = _add_trees(graph)
    group = _groups(nodes, leaves, _free(nodes))
    main = next((g for g in group if g is not None), None)
    # a free leaf (an output that is an input, a constant or a view of them) goes with it
    first = {leaf for (_, leaf), g in zip(leaves, group) if g in (main, None)}
    rest = {(k, leaf) for (k, leaf), g in zip(leaves, group) if g not in (main, None)}
    written = {k for k, _ in rest}
    if not rest or any(not nodes[graph.outputs[k]].dtype.is_floating for k in written) or (
            len(written) < min(2, len(graph.outputs))) or sum(
            math.prod(nodes[graph.outputs[k]].shape) for k in written) > CARRIED_ELEMENTS:
        return None
    return [_term(graph, trees, first, main=True),
            _term(graph, trees, {leaf for _, leaf in rest}, main=False)]


def _add_trees(graph):
    """``(trees, leaves)``: ``trees`` the add nodes of the outputs' sums (an add of two
    operands of its shape and dtype, read by nothing but its sum), ``leaves`` each sum's
    leaves as ``(output position, node)``, in order."""
    nodes = graph.nodes
    readers = [0] * len(nodes)
    for node in nodes:
        for o in node.operands:
            readers[o] += 1
    for o in graph.outputs:
        readers[o] += 1
    trees, leaves = set(), []
    for k, out in enumerate(graph.outputs):
        stack = [out]
        while stack:
            nid = stack.pop()
            node = nodes[nid]
            if node.op == "add" and readers[nid] == 1 and all(
                    nodes[o].shape == node.shape and nodes[o].dtype == node.dtype
                    for o in node.operands):
                trees.add(nid)
                stack.extend(reversed(node.operands))
            else:
                leaves.append((k, nid))
    return trees, leaves


def _free(nodes):
    """Whether each node is computed from inputs and constants by index maps and casts alone:
    each group computes such a node for itself."""
    free = []
    for node in nodes:
        free.append(node.op in ("input", "constant") or (
            (node.op in ("reshape", "cast") or node.op in PRIMITIVES
             and PRIMITIVES[node.op].kind == "index_map")
            and all(free[o] for o in node.operands)))
    return free


def _groups(nodes, leaves, free):
    """Each leaf's group (numbered from 0 in the order of their first leaves; None for a free
    leaf): leaves are one group where what they are computed from meets, free nodes aside."""
    parent = list(range(len(leaves)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner = {}
    for i, (_, leaf) in enumerate(leaves):
        stack = [leaf]
        while stack:
            nid = stack.pop()
            if free[nid]:
                continue
            seen = owner.get(nid)
            if seen is not None:
                a, b = find(seen), find(i)
                if a != b:
                    parent[max(a, b)] = min(a, b)
                continue
            owner[nid] = i
            stack.extend(nodes[nid].operands)
    number = {}
    return [None if free[leaf] else number.setdefault(find(i), len(number))
            for i, (_, leaf) in enumerate(leaves)]


def _prune(nodes, trees, root, mine, kept):
    """The root of the add tree at ``root`` with only the leaves in ``mine`` (None if it has
    none of them); ``kept``: each add left with both operands, by node, gets them. (A loop,
    not recursion: a sum of a thousand terms is a tree that deep.)"""
    pruned, stack = {}, [(root, False)]
    while stack:
        nid, ready = stack.pop()
        if nid not in trees:
            pruned[nid] = nid if nid in mine else None
        elif not ready:
            stack.append((nid, True))
            stack.extend((o, False) for o in nodes[nid].operands)
        else:
            a, b = (pruned[o] for o in nodes[nid].operands)
            if a is not None and b is not None:
                kept[nid] = (a, b)
            pruned[nid] = nid if a is not None and b is not None else a if b is None else b
    return pruned[root]


def _term(graph, trees, mine, main):
    """The ``Term`` of the leaves ``mine``: each output's tree pruned to them, the nodes that
    computes in their order in ``graph``, the inputs it reads. The ``main`` term writes every
    output (zeros for one it has no leaf of, as a gradient transform writes them): the
    program the whole was before the other terms were added. The other reads the sums so far
    of its outputs after its inputs, and adds its own."""
    nodes = graph.nodes
    roots, kept = [], {}
    for k, out in enumerate(graph.outputs):
        root = _prune(nodes, trees, out, mine, kept)
        if root is not None or main:
            roots.append((k, root))
    operands = {nid: kept.get(nid, node.operands) for nid, node in enumerate(nodes)
                if nid not in trees or nid in kept}
    used, stack = set(), [root for _, root in roots if root is not None]
    while stack:
        nid = stack.pop()
        if nid not in used:
            used.add(nid)
            stack.extend(operands[nid])
    inputs = tuple(k for k, nid in enumerate(graph.inputs) if nid in used)
    outputs = tuple(k for k, _ in roots)
    carried = () if main else outputs
    built, new = [], {}
    for position, nid in enumerate([graph.inputs[k] for k in inputs]
                                   + [graph.outputs[k] for k in carried]):
        node = nodes[nid]
        built.append(Node("input", (), (("index", position),), node.shape, node.dtype,
                          node.weak))
        if position < len(inputs):
            new[nid] = position
    order = [((nid, 0), nid) for nid in used if nodes[nid].op != "input"]
    # a transform makes an output's zeros after everything but the sums of the outputs after
    # it (quabla/transforms/vjp.py): after the others' nodes and the sums of those before
    last = max((nid for nid in used if nid not in kept), default=-1)
    for k, root in roots:
        if root is None:
            order.append(((last, 1, k), ("zero", k)))
        elif root in kept:
            last = max(last, root)
    zeros = {}
    for _, nid in sorted(order):
        if isinstance(nid, tuple):
            new[nid] = _zero(built, zeros, nodes[graph.outputs[nid[1]]])
            continue
        node = nodes[nid]
        new[nid] = len(built)
        built.append(Node(node.op, tuple(new[o] for o in operands[nid]), node.params,
                          node.shape, node.dtype, node.weak))
        if node.op == "constant":
            zeros.setdefault(node.key()[2:], len(built) - 1)
    results = []
    for k, root in roots:
        value = new[("zero", k) if root is None else root]
        if k in carried:  # the sum so far, read as an input, plus this group's
            node = nodes[graph.outputs[k]]
            built.append(Node("add", (len(inputs) + carried.index(k), value), (),
                              node.shape, node.dtype, node.weak))
            value = len(built) - 1
        results.append(value)
    names = [graph.input_names[k] for k in inputs] + [f"sum{k}" for k in carried]
    return Term(canonical(Graph(built, range(len(inputs) + len(carried)), results, names)),
                inputs, outputs)


def canonical(graph):
    """``graph`` with each free node (a parameter reshaped or broadcast, a constant) just
    before its first reader, the others in their order: where a trace put such a node
    depends on what else it traced (simplification keeps the first of equal nodes, made by
    whichever term came first), and a program's key, on its order."""
    nodes = graph.nodes
    free = _free(nodes)
    readers = [[] for _ in nodes]
    for nid, node in enumerate(nodes):
        for o in node.operands:
            readers[o].append(nid)
    key = [None] * len(nodes)
    for nid in range(len(nodes) - 1, -1, -1):
        if free[nid] and readers[nid] and nodes[nid].op != "input":
            key[nid] = min(key[r] for r in readers[nid])[:-1] + (-1, nid, 0)
        else:
            key[nid] = (nid, 0)
    order = sorted(range(len(nodes)), key=key.__getitem__)
    if order == list(range(len(nodes))):
        return graph
    new = {old: k for k, old in enumerate(order)}
    built = [Node(nodes[old].op, tuple(new[o] for o in nodes[old].operands), nodes[old].params,
                  nodes[old].shape, nodes[old].dtype, nodes[old].weak) for old in order]
    return Graph(built, [new[i] for i in graph.inputs], [new[o] for o in graph.outputs],
                 graph.input_names)


def _zero(built, constants, like):
    """A weak zero of ``like``'s shape and dtype appended to ``built`` (a gradient
    transform's: a 0-d constant, broadcast), its constant one of ``constants`` (node key
    -> position) where that holds it already."""
    params = (("value", Const(np.array(0, like.dtype.numpy))),)
    key = (params, (), like.dtype.name, True)
    if key not in constants:
        built.append(Node("constant", (), params, (), like.dtype, True))
        constants[key] = len(built) - 1
    if like.shape == ():
        return constants[key]
    built.append(Node("broadcast_in_dim", (constants[key],), (
        ("broadcast_dimensions", ()), ("shape", tuple(like.shape))), tuple(like.shape),
        like.dtype, True))
    return len(built) - 1
