"""Lowerings of the control-flow regions: real ``for`` loops (``scan``, down for ``reverse``),
``while True: ... break``, ``if``/``else`` and ``remat``'s block around their sub-graphs, emitted once by a child
emitter (``Emitter.sub_graph``) whose scratch becomes one block of the parent's. Scalar carries
are locals; an array carry is two slots swapped every iteration, or one updated in place.
After a loop, each swapped carry read later is copied to a slot of its own (``settle``): which
of the two holds the result depends on the run, and a statement that names a fixed slot can be
handed to a later part of the entry (parts.py) or phase of a threaded one."""

import math

from .source import node_id
from .statements import Assign, Block
from .table import register

__all__ = []


def region_array(e, var, gets, shape, dtype, swapped=False):
    """A buffer for a region's result, live as long as its ``gets`` are: the graph's result
    array if one of them is an output (unless the buffer is ``swapped`` with another each
    iteration), else a scratch slot."""
    expiry = max([e.last_use.get(g, e.now) for g in gets] + [e.now])
    result = None if swapped else next((g for g in gets if g in e.results), None)
    e.alloc(var, shape, dtype, result=result, expiry=expiry)
    if swapped:  # the variable names either slot in turn: it stands for neither
        e.views = {key: v for key, v in e.views.items() if v != var}
        e.slot_of.pop(var, None)


def carries(e, nid, body, inits, offset):
    """The carry of loop ``nid``, its initial values copied in: ``(current, next,
    in_place)``. A 0-d carry is a local; an array carry is two slots, the body reading one
    and writing the other, swapped after each iteration (``swap``), or one slot updated in
    place when the body passes it through or only adds rows to it (its one reader a
    ``dynamic_update_add`` giving the new carry). The carry is input ``offset + k`` of the
    body and output k."""
    gets = e.results_of(nid)
    readers = {}
    for c, n in enumerate(body.nodes):
        for o in n.operands:
            readers.setdefault(o, []).append(c)
    current, following, in_place = [], [], {}
    for k, init in enumerate(inits):
        inp, res = body.inputs[offset + k], body.outputs[k]
        node, var = body.nodes[inp], f"q{nid}_{k}"
        if node.shape == ():
            e.assign(var, f"_cast_{node.dtype.name}({init})")
            current.append(var)
            following.append(var)
            continue
        single = res == inp or (
            body.nodes[res].op == "dynamic_update_add" and readers.get(inp) == [res]
            and inp not in body.outputs)
        # a swapped pair lives through the loop alone: ``settle`` copies the result out
        region_array(e, var, () if not single else gets.get(k, ()), node.shape, node.dtype,
                     swapped=not single)
        e.copy(var, init, node.shape)
        current.append(var)
        if single:
            following.append(var)
            in_place[offset + k] = k
        else:
            region_array(e, var + "n", (), node.shape, node.dtype, swapped=True)
            e.plan.tie(var, var + "n")
            following.append(var + "n")
    return current, following, in_place


def swap(e, current, following):
    for a, b in zip(current, following):
        if a != b:
            e.emit(Assign((a, b), f"{b}, {a}"), 2)


def settle(e, nid, body, current, following, offset):
    """The variables of loop ``nid``'s carries after it: each swapped array carry that is
    read later copied, after the loop, to a slot of its own (the result array if it is an
    output)."""
    gets, settled = e.results_of(nid), []
    for k, (a, b) in enumerate(zip(current, following)):
        if a == b or k not in gets:
            settled.append(a)
            continue
        node = body.nodes[body.inputs[offset + k]]
        region_array(e, f"{a}o", gets[k], node.shape, node.dtype)
        e.copy(f"{a}o", a, node.shape)
        settled.append(f"{a}o")
    return settled


def scan(e, node, out, args, body, length, lower, reverse, n_carry):
    """A ``for`` loop over the steps (down for ``reverse``); each y is written to row k of
    its stack."""
    nid = node_id(out)
    current, following, in_place = carries(e, nid, body, args[:n_carry], 1)
    gets, stacks, targets, rows = e.results_of(nid), [], list(following), []
    for j, o in enumerate(body.outputs[n_carry:], n_carry):
        y, stack = body.nodes[o], f"q{nid}_{j}"
        region_array(e, stack, gets.get(j, ()), (length,) + tuple(y.shape), y.dtype)
        stacks.append(stack)
        if y.shape == ():
            targets.append(f"{stack}[k{nid}]")
        else:
            targets.append(f"{stack}r")
            rows.append(Assign(f"{stack}r", f"_offset({stack}, k{nid} * {math.prod(y.shape)})"))
    if reverse:
        e.loop(f"k{nid}", -1, start=length - 1, step=-1)
    else:
        e.loop(f"k{nid}", length)
    for row in rows:
        e.emit(row, 2)
    index = f"np.float64(k{nid} + {lower})" if lower else f"np.float64(k{nid})"
    child = e.sub_graph(body, [index] + current + args[n_carry:], targets, in_place)
    swap(e, current, following)
    e.place_blocks([child])
    e.region_results[nid] = settle(e, nid, body, current, following, 1) + stacks


def while_loop(e, node, out, args, cond_fun, body, n_carry):
    nid = node_id(out)
    current, following, in_place = carries(e, nid, body, args[:n_carry], 0)
    operands = current + args[n_carry:]
    e.emit(Block("while True:", loops=True))
    test = e.sub_graph(cond_fun, operands, [f"q{nid}_go"])
    e.emit(Block(f"if not q{nid}_go:"), 2)
    e.emit("break", 3)
    child = e.sub_graph(body, operands, following, in_place)
    swap(e, current, following)
    e.place_blocks([test, child])
    e.region_results[nid] = settle(e, nid, body, current, following, 0)


def result_targets(e, nid, graph):
    """The variables region ``nid`` stores the results of ``graph`` to: a buffer for an
    array, a local for a 0-d value."""
    gets, targets = e.results_of(nid), []
    for k, o in enumerate(graph.outputs):
        r, var = graph.nodes[o], f"q{nid}_{k}"
        if r.shape != ():
            region_array(e, var, gets.get(k, ()), r.shape, r.dtype)
        targets.append(var)
    return targets


def cond(e, node, out, args, true_fun, false_fun):
    """``if``/``else``; both branches store their results to the same variables."""
    nid = node_id(out)
    targets = result_targets(e, nid, true_fun)
    e.emit(Block(f"if {args[0]}:"))
    yes = e.sub_graph(true_fun, args[1:], targets)
    e.emit(Block("else:"))
    no = e.sub_graph(false_fun, args[1:], targets)
    e.place_blocks([yes, no])
    e.region_results[nid] = targets


def remat(e, node, out, args, fun):
    """The sub-graph in place, in a block of its own (a loop of one step, rendered as its
    body): its intermediates live in the block's scratch, apart from the graph around it."""
    nid = node_id(out)
    targets = result_targets(e, nid, fun)
    e.loop(f"k{nid}", 1)
    child = e.sub_graph(fun, args, targets)
    e.place_blocks([child])
    e.region_results[nid] = targets


def get(e, node, out, args, index):
    """A region's result: the variable holding it."""
    var = e.region_results[node.operands[0]][index]
    e.assign(out, var)
    if node.shape != ():
        e.shapes[out] = tuple(node.shape)
        e.view(out, var, node_id(out))


register({"scan": scan, "while": while_loop, "cond": cond, "remat": remat, "get": get})
