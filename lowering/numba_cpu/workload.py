"""Which parts of an entry are quick, compiled by LLVM's bare pipeline (``machine.BARE``), and
which revisions of a function run quick code first.

LLVM's optimisation of a part (vectorising its loops, scheduling, allocating registers) is paid
on every cold call and on every edit that changes the part; it is repaid only by the time the
part runs. A part whose own statements do at most ``1 / SHARE`` of its program's work (a
penalty term and its gradient, the copies of results, a threaded entry's sum of partials)
cannot repay it: it compiles by LLVM's O0 pipeline and its fast instruction selector, in about
a tenth of O1's time (the translation's IR is in SSA form already). An edit that adds a term
mostly changes such a part (the program's tail), so it is what an edit recompiles.

Work is estimated from the statement tree: statements executed, a loop's body once per trip (a
threaded entry's loop over the control row: once per tile), and the multiplies of each product
a part hands to BLAS or the product kernel (``_gemm``, ``_matmul_*``). Products count toward
the program's work but not the part's own: their code is compiled elsewhere, whatever the
part's pipeline. A part with a loop of unknown length (a ``while`` region) is never quick.

A program cut into terms (lowering/terms.py) is one program for this rule too: a term after
the main one (a penalty and its gradient added to a loss) whose work is at most ``1 / SHARE``
of the whole's has every part quick (``light``). Its work is estimated from its graph, before
any code is generated, as the main term of an edit is not.

The same estimate says whether a program that revises one compiled before for the same function
(programs.py: ``revises``), its parts all new, may run its first call as LLVM's quick pipeline
compiles it while the optimised code is compiled on a thread (numba_cpu/__init__.py): where its
parts' own statements execute at most ``TIER_WORK`` times per call (``short``), the quick code's
unvectorised loops cost its first call less than the quick compile saves. Where they execute at
most ``BARE_WORK``, an edit's new part without a marked sum runs the bare pipeline's code first
(the same bits; a third of the quick compile).
"""

import math
import re

from quabla.core.graph import Graph

from .statements import Block, Loop

__all__ = ["SHARE", "PRODUCT_SPEED", "TIER_WORK", "BARE_WORK", "work", "quick_parts", "short",
           "graph_work", "light"]

SHARE = 100
# a multiply of a product (BLAS, the product kernel) takes about a tenth of a statement's time
PRODUCT_SPEED = 10
# The most statements a revision's parts may execute per call (products aside: their code is
# compiled elsewhere) for its first call to run quick code (``short``): at a few nanoseconds a
# statement more than the optimised code's, 5 million cost less than the ~100 ms the quick
# compile saves on a part of a few hundred lines.
TIER_WORK = 5_000_000
# The most statements a program's parts may execute per call for an edit's new parts without a
# marked sum (direct.py: ``sums_marked``) to run bare code first, not the quick pipeline's: its
# compile takes a third of the time, its unoptimised loops a few nanoseconds a statement more
# (per-example gradients, 33 million statements, lost in their first call what they saved).
BARE_WORK = 500_000
_PRODUCT = re.compile(r"^_(?:gemm|matmul_float\d+)\(.*?((?:, \d+){3,4}), [01], [01]\)$")


def work(items, tiles):
    """``(own, products, known)`` of the statements ``items``: the statements they execute,
    the multiplies of the products they call, and whether every loop's length is known (the
    control row's loop runs over ``tiles`` tiles)."""
    own = products = 0
    known = True
    for item in items:
        if isinstance(item, Loop):
            if all(isinstance(b, int) for b in (item.start, item.stop, item.step)):
                trips = len(range(item.start, item.stop, item.step))
            elif item.counted():  # over the control row's tiles
                trips = tiles
            else:
                trips, known = 1, False
            body = work(item.body, tiles)
            own, products = own + 1 + trips * body[0], products + trips * body[1]
            known = known and body[2]
        elif isinstance(item, Block):
            body = work(item.body, tiles)
            own, products = own + 1 + body[0], products + body[1]
            known = known and body[2] and not item.loops
        else:
            own += 1
            product = _PRODUCT.match(item) if isinstance(item, str) else None
            if product:
                products += math.prod(int(n) for n in product.group(1)[2:].split(", "))
    return own, products, known


def quick_parts(estimates):
    """Whether each part (its ``work``) is quick: its length known and its own work at most
    ``1 / SHARE`` of the program's. A program of one part has none."""
    total = sum(own + products // PRODUCT_SPEED for own, products, _ in estimates)
    return [len(estimates) > 1 and known and own * SHARE <= total
            for own, _, known in estimates]


def short(estimates, most=None):
    """Whether a program whose parts have these ``work`` estimates runs at most ``most``
    statements (default ``TIER_WORK``), every loop's length known: few enough for its first
    call to run quick code."""
    estimates = list(estimates)
    return (all(known for _, _, known in estimates)
            and sum(own for own, _, _ in estimates) <= (TIER_WORK if most is None else most))


def graph_work(graph):
    """The work of ``graph`` estimated from its nodes: each node's elements, a product's
    multiplies at ``PRODUCT_SPEED``, a scan's body once per step, every body of another
    region (a branch, a rematerialised block); None where a loop's length is not known (a
    ``while`` region)."""
    total = 0
    for node in graph.nodes:
        bodies = list(Graph.sub_graphs(node))
        if node.op == "while":
            return None
        if bodies:
            inner = [graph_work(body) for body in bodies]
            if None in inner:
                return None
            total += sum(inner) * (node.kw["length"] if node.op == "scan" else 1)
        elif node.op == "dot_general":
            (contract, _), _ = node.kw["dimension_numbers"]
            lhs = graph.nodes[node.operands[0]].shape
            size = math.prod(lhs[d] for d in contract)
            total += math.prod(node.shape) * size // PRODUCT_SPEED
        else:
            total += math.prod(node.shape)
    return total


def light(term, whole):
    """Whether a term after the main one (its graph ``term``) compiles every part with the
    bare pipeline: its work known and at most ``1 / SHARE`` of ``whole`` (``graph_work`` of
    the program it is cut from; None: unknown, a loop's length)."""
    own = graph_work(term)
    return own is not None and (whole is None or own * SHARE <= whole)
