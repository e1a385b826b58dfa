"""Lowerings of the control-flow regions: host loops and branches around the host functions
of their bodies, except a ``scan`` or ``while`` whose body (with the predicate) is elementwise
(``fused_loop_shape``): that loop is ONE kernel, each thread carrying its elements through
every step in scalar locals (``fused_loop``)."""

import math

import numpy as np

from quabla.core.graph import Graph, Node
from quabla.core.primitives import PRIMITIVES
from ..loopnest.schedule import Group, kind
from ..loopnest.templates import np_dtype
from .emitter import Emitter
from .groups import member_lines
from .source import indent
from .table import register

__all__ = ["fused_loop_shape"]


def region_results(e, node, nid):
    """One slot per result, ``v{nid}x{k}``, alive until the last ``get`` of it."""
    names = []
    for k, (shape, dtype) in enumerate(result_avals(node)):
        names.append(f"v{nid}x{k}")
        e.alloc(names[-1], shape, dtype, expiry=e.last_use.get(nid, e.now))
    return names


def copy_into(e, targets, results):
    e.host_block([f"{t}.copy_to_device({r})" for t, r in zip(targets, results)])


def sub_program(e, graph):
    name = f"region{e.module.regions}"
    e.module.regions += 1
    Emitter(graph, e.module, name, top=False).build()
    return name


def get(e, node, nid, index):
    e.as_shape(f"v{node.operands[0]}x{index}", node.shape, f"v{nid}", nid)


def cond(e, node, nid, true_fun, false_fun):
    pred, *operands = node.operands
    results = region_results(e, node, nid)
    args = ", ".join(e.value(o) for o in operands)
    branches = [sub_program(e, true_fun), sub_program(e, false_fun)]
    test = e.literals.get(pred, f"v{pred}.copy_to_host()[0]")
    e.host_block([f"if {test}:", f"    r = {branches[0]}(w, c, {args})",
                  "else:", f"    r = {branches[1]}(w, c, {args})"])
    copy_into(e, results, [f"r[{k}]" for k in range(len(results))])


def remat(e, node, nid, fun):
    """The sub-graph as a host function of its own, called once."""
    results = region_results(e, node, nid)
    args = ", ".join(e.value(o) for o in node.operands)
    e.host_block([f"r = {sub_program(e, fun)}(w, c, {args})"])
    copy_into(e, results, [f"r[{k}]" for k in range(len(results))])


def scan(e, node, nid, body, length, lower, reverse, n_carry):
    results = region_results(e, node, nid)
    operands = [e.value(o) for o in node.operands]
    index, *rest = body.inputs
    if fused_loop_shape(body, rest[:n_carry]) is not None:
        order = f"range({length - 1}, -1, -1)" if reverse else f"range({length})"
        dtype = np_dtype(body.nodes[index].dtype.name)
        loop = [f"for step in {order}:", f"s{index} = {dtype}({lower} + step)"]
        fused_region(e, body, rest, n_carry, operands + results, loop, [index])
        return
    copy_into(e, results[:n_carry], operands[:n_carry])
    program = sub_program(e, body)
    index = e.constant(np.arange(lower, lower + length,
                                 dtype=body.nodes[body.inputs[0]].dtype.numpy))
    args = ", ".join(results[:n_carry] + operands[n_carry:])
    order = f"range({length - 1}, -1, -1)" if reverse else f"range({length})"
    loop = [f"r = {program}(w, c, {index}[step:step + 1], {args})"]
    loop += [f"{t}.copy_to_device(r[{k}])" for k, t in enumerate(results[:n_carry])]
    for k, stack in enumerate(results[n_carry:], n_carry):
        size = math.prod(result_avals(node)[k][0][1:])
        rows = e.as_shape(stack, (length, size), f"{stack}r")
        loop.append(f"{rows}[step:step + 1].copy_to_device(r[{k}].reshape((1, {size})))")
    e.host_block([f"for step in {order}:"] + indent(loop, 1))


def while_loop(e, node, nid, cond_fun, body, n_carry):
    results = region_results(e, node, nid)
    operands = [e.value(o) for o in node.operands]
    merged, pred = test_then_step(cond_fun, body)
    if fused_loop_shape(merged, merged.inputs[:n_carry]) is not None:
        fused_region(e, merged, merged.inputs, n_carry, operands + results,
                     ["while True:"],
                     test=lambda read: [f"if not {read(pred)}:", "    break"])
        return
    copy_into(e, results, operands[:n_carry])
    test, step = sub_program(e, cond_fun), sub_program(e, body)
    args = ", ".join(results + operands[n_carry:])
    e.host_block([f"while {test}(w, c, {args})[0].copy_to_host()[0]:",
                  f"    r = {step}(w, c, {args})"])
    e.host_block([f"{t}.copy_to_device(r[{k}])" for k, t in enumerate(results)], 1)


def fused_region(e, graph, inputs, n_carry, arrays, loop, locals_=(),
                 test=lambda read: []):
    """Calls a host function running a loop over ``graph`` (``fused_loop_shape``) as ONE
    kernel (``fused_loop``) on ``arrays``: the region's operands (``inputs`` of the
    graph), then the arrays of its results."""
    name = f"region{e.module.regions}"
    e.module.regions += 1
    child = Emitter(graph, e.module, name, top=False)
    results = fused_loop(child, inputs[:n_carry], loop, locals_, test,
                         [e.arrays[a] for a in arrays[len(inputs):]])
    params = [f"a{k}" for k in range(len(inputs))] + results
    source = [f"def {name}(w, c, {', '.join(params)}):"]
    source += [f"    v{nid} = a{k}" for k, nid in enumerate(inputs)]
    source += indent(child.host, 1)
    e.module.programs.append((name, "\n".join(source) + "\n", [], []))
    e.host_block([f"{name}(w, c, {', '.join(arrays)})"])


def fused_loop(e, carries, loop, locals_, test, result_arrays):
    """The kernel of a fused loop: each thread keeps its elements of the ``carries`` in
    scalar locals through every step (``loop``: the loop's first line, then the lines
    starting a step and binding the ``locals_``; ``test(read)``: lines after the body,
    given the expression ``read(nid)`` of a value), writes its elements of each step's ys
    (the outputs after the carries, at row ``step``), then of the final carries. Returns
    the names of the result arrays its kernel writes (``result_arrays``: their dtypes and
    shapes)."""
    nodes, outputs = e.nodes, e.graph.outputs
    group = Group(fused_loop_shape(e.graph, carries))
    for k, node in enumerate(nodes):
        if node.op == "constant":
            e.single(k)
        elif node.op != "input":
            group.members.append(k)
    group.member_set = set(group.members) | set(carries) | set(locals_)
    n = len(carries)
    results = [f"v{len(nodes) + k}" for k in range(len(outputs))]
    e.arrays.update(zip(results, result_arrays))

    def lines(idx):
        def at(nid, lead=()):  # a 0-d value is element 0 (of row ``step``)
            return ", ".join([*lead, *(idx if nodes[nid].shape else [])]) or "0"

        def read(nid):
            return e.read(nid, group, idx)
        step = loop[1:] + member_lines(e, group, group.members, idx) + test(read)
        step += [f"{y}[{at(o, ['step'])}] = {read(o)}"
                 for y, o in zip(results[n:], outputs[n:])]
        step.append(", ".join(f"s{c}" for c in carries) + " = "
                    + ", ".join(read(o) for o in outputs[:n]))
        return ([f"s{c} = {e.read(c, None, idx)}" for c in carries] + loop[:1]
                + indent(step, 1)
                + [f"{r}[{at(c)}] = s{c}" for r, c in zip(results, carries)])
    e.grid_stride(tuple(group.shape), lines)
    return results


def result_avals(node):
    """(shape, dtype name) of each result of a region node."""
    params = dict(node.params)
    if node.op in ("cond", "remat"):
        graph = params["true_fun" if node.op == "cond" else "fun"]
        return [(graph.nodes[o].shape, graph.nodes[o].dtype.name) for o in graph.outputs]
    body = params["body"]
    n = params["n_carry"]
    carry = [(body.nodes[o].shape, body.nodes[o].dtype.name) for o in body.outputs[:n]]
    if node.op == "while":
        return carry
    return carry + [((params["length"],) + tuple(body.nodes[o].shape), body.nodes[o].dtype.name)
                    for o in body.outputs[n:]]


def fused_loop_shape(graph, carries):
    """The shape S of the carries when a loop body ``graph`` maps element j of its carries to
    element j of its outputs (next carries, ys), so that one kernel can run the whole loop
    (``fused_loop``), else None. Its carries and outputs have shape S (at least one element)
    or are 0-d; every other node but inputs and constants has shape S or () and is
    - an elementwise op on operands of its own shape (a 0-d one then depends on 0-d values
      only, which every thread computes alike),
    - an index map of a 0-d value or of a loop invariant (an input other than the carries,
      or a constant), which a thread may read anywhere,
    - or a row read ``dynamic_index(x, i)`` with a 0-d ``i`` of an invariant ``x`` of shape
      (n, *S) (how a VJP's backward loop reads its step's carry).
    Anything else (a reduction, a product, an index map of a carry, other indexing, a nested
    region) leaves the loop on the host."""
    nodes = graph.nodes
    shapes = {tuple(nodes[o].shape) for o in list(carries) + list(graph.outputs)} - {()}
    if len(shapes) > 1 or not carries:
        return None
    shape = shapes.pop() if shapes else ()
    if math.prod(shape) == 0:
        return None
    invariant = lambda nid: nodes[nid].op == "constant" or (nodes[nid].op == "input"
                                                            and nid not in carries)
    for node in nodes:
        if node.op in ("input", "constant"):
            continue
        operands = [nodes[o] for o in node.operands]
        if PRIMITIVES[node.op].elementwise:
            ok = all(o.shape == node.shape for o in operands)
        elif kind(node) == "index_map":
            ok = all(o.shape == () or invariant(n) for o, n in zip(operands, node.operands))
        elif node.op == "dynamic_index":
            ok = (operands[1].shape == () and invariant(node.operands[0])
                  and tuple(operands[0].shape[1:]) == shape)
        else:
            ok = False
        if not ok or tuple(node.shape) not in (shape, ()):
            return None
    return shape


def test_then_step(cond_fun, body):
    """A while loop's ``cond_fun`` and ``body`` as one graph over the body's inputs, which
    returns the next carries, and the node of the predicate of the carries it was given."""
    nodes, at = list(body.nodes), dict(zip(cond_fun.inputs, body.inputs))
    for k, node in enumerate(cond_fun.nodes):
        if k not in at:
            at[k] = len(nodes)
            nodes.append(Node(node.op, tuple(at[o] for o in node.operands), node.params,
                              node.shape, node.dtype, node.weak))
    return Graph(nodes, body.inputs, body.outputs), at[cond_fun.outputs[0]]


register({"get": get, "cond": cond, "remat": remat, "scan": scan, "while": while_loop})
