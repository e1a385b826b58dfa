"""Which inputs a graph's values depend on *differentiably*: through primitives with a
derivative, and through the results of a multi-result node only as its ``dependence`` rule
says (a region's result depends on the operands its sub-graphs read for it, not on all).

Reverse mode reads it to decide which nodes carry a cotangent (``vjp_graph``), and the region
rules to decide which of their operands need one: a ``while_loop`` is reverse-differentiable
exactly where no needed cotangent crosses it, so a coarse answer would refuse programs JAX
differentiates.
"""

import functools

from .primitives import PRIMITIVES

__all__ = ["node_dependence", "output_dependence", "loop_closure"]

_NONE = frozenset()


@functools.lru_cache(maxsize=512)
def node_dependence(graph):
    """Per node id, the frozenset of input positions its value depends on differentiably."""
    deps = {nid: frozenset((k,)) for k, nid in enumerate(graph.inputs)}
    per_result = {}
    for nid, node in enumerate(graph.nodes):
        if nid in deps:
            continue
        if node.op == "get":
            deps[nid] = per_result[node.operands[0]](node.kw["index"])
            continue
        prim = PRIMITIVES.get(node.op)
        operand_deps = [deps[o] for o in node.operands]
        if prim is None or not prim.differentiable:
            deps[nid] = _NONE
            continue
        # a multi-result node itself depends on all its operands (its rule runs when any
        # result has a cotangent); each of its ``get``s as its ``dependence`` rule says
        every = deps[nid] = frozenset().union(*operand_deps)
        if prim.multiple_results and prim.dependence is None:
            per_result[nid] = lambda index, every=every: every
        elif prim.multiple_results:
            by_result = prim.dependence(**node.kw)
            per_result[nid] = (lambda index, by_result=by_result, operand_deps=operand_deps:
                               frozenset().union(*(operand_deps[k] for k in by_result[index])))
    return deps


def output_dependence(graph):
    """Per output, the input positions it depends on differentiably."""
    deps = node_dependence(graph)
    return [deps[o] for o in graph.outputs]


def loop_closure(step, first, n_carry):
    """A loop's results in terms of its operands ``(*carry, *consts)``: ``step`` is its body's
    ``output_dependence`` (body input ``first + j`` is operand ``j``; outputs are the next
    carries, then per-step values). A final carry depends on its own start (the loop may run
    no step) and on what the body reads for it, carries closed over every step."""
    def operands(body_inputs, carry):
        out = set()
        for p in body_inputs:
            if p >= first:
                out |= carry[p - first] if p - first < n_carry else {p - first}
        return out

    carry = [{k} for k in range(n_carry)]
    while True:
        grown = [c | operands(step[k], carry) for k, c in enumerate(carry)]
        if grown == carry:
            break
        carry = grown
    return [frozenset(c) for c in carry] + [frozenset(operands(s, carry)) for s in step[n_carry:]]
