"""The state of one entry's generation: ``Emitter`` emits the statements of a graph (the
entry's, or a region's sub-graph inside its loop or branch) as lines of Python source, and
tracks where each value lives (a result array, a scratch slot, a view, a scalar local).

What a statement becomes is decided elsewhere: fused groups in ``groups.py``, tile loops in
``tiles.py``, every other op by its entry of the lowering table (``table.LOWERINGS``, filled
by ``structural.py``, ``linalg.py`` and ``regions.py``). Every array is a typed pointer to its
first element, indexed with its row-major offset (``at``).
"""

import math

from quabla.core.graph import Node
from quabla.core.primitives import PRIMITIVES
from ..loopnest.buffers import PRIVATE, ScratchPlan
from ..loopnest.gathers import below, composed, gather_expression
from ..loopnest.schedule import (Group, Single, TileBegin, TileEnd, kind, last_uses, node_ids,
                                 schedule)
from ..loopnest.templates import literal, scalar_expression
from .groups import SUMS_APART, emit_group
from .source import ZERO_BITS, flat_index, node_id
from .statements import Assign, Code, Loop
from .table import LOWERINGS
from .tiles import begin_tile, end_tile

__all__ = ["Emitter", "Renumbered"]


# Sub-graphs' node ids start at a multiple of this (``Emitter.numbered``).
REGION_IDS = 4096
# A result of at most this many elements computed before the tail's last phase
# (schedule.tail_phases) is copied into place at the end, not computed there.
HELD_ELEMENTS = 4096


def _held(graph, phase):
    """The small results computed before the tail's last ``phase``: in scratch, then copied
    (``run``). A term an edit adds to one (an L2 penalty on a gradient) then changes the last
    phase alone, not the statement that computes it (a result is written where it is
    computed)."""
    return {o for o in graph.outputs if phase.get(o, 0) < 2 and graph.nodes[o].op != "input"
            and math.prod(graph.nodes[o].shape) <= HELD_ELEMENTS}


def _updated_in_place(graph, phase, readers):
    """``{value: k}``: for each output ``k`` of the tail's last phases (``schedule.tail_phases``:
    2 and 3) that adds terms of those phases to one value computed before them (an L2
    penalty's gradient added to a gradient), that value, computed into result ``k`` and
    updated there in place: the statements before those phases are then those of the program
    without the terms, where the value is result ``k`` itself. Small results are held instead
    (``_held``). ``readers``: node -> the nodes that read it."""
    nodes, found = graph.nodes, {}
    outputs = set(graph.outputs)
    for k, o in enumerate(graph.outputs):
        if phase.get(o, 0) < 2 or math.prod(nodes[o].shape) <= HELD_ELEMENTS:
            continue
        node, chain = nodes[o], o
        while nodes[chain].op == "add" and phase.get(chain, 0) >= 2:
            late = [x for x in nodes[chain].operands if phase.get(x, 0) >= 2]
            early = [x for x in nodes[chain].operands if phase.get(x, 0) < 2]
            if len(early) == 1 and len(late) == 1:
                v = early[0]
                if (nodes[v].shape, nodes[v].dtype) == (node.shape, node.dtype) \
                        and nodes[v].op not in ("input", "constant") and v not in outputs \
                        and v not in found and all(phase.get(r, 0) < 2 or r == chain
                                                   for r in readers.get(v, ())):
                    found[v] = k
                break
            if len(late) != 2 or all(nodes[x].op == "add" for x in late):
                break  # (two chains: which one is the value's is not known)
            chain = next((x for x in late if nodes[x].op == "add"
                          and nodes[x].shape == node.shape), None)
            if chain is None or len(readers.get(chain, ())) != 1:
                break
    return found


class Emitter:
    """Emits the statements of ``graph`` (the entry's, or a region's sub-graph inside its loop
    or branch: ``parent`` is then the emitter of the enclosing graph, whose lines, constants
    and node numbering it shares). Output k is stored to ``targets[k]``: an array variable, or
    for a 0-d output an assignable expression. ``phase``: the entry's tail
    (``schedule.tail_last``), scheduled last."""

    def __init__(self, graph, targets, parent=None, phase=None):
        self.graph = graph
        self.nodes = graph.nodes
        self.code = parent.code if parent else Code()  # the statements, shared with children
        self.targets = targets
        self.results = {}    # output node -> the index of the first result it is
        self.entry = parent is None  # the entry's own graph, not a region's
        self.phase = (phase or {}) if self.entry else {}  # node -> its phase of the tail
        # the index of the first top-level item of each phase (0: before the tail, 1-3: the
        # tail's; the last begins with the copies of the results at the latest)
        self.phase_items = {}
        self.consumers = {}  # node -> the nodes that read it
        for nid in node_ids(graph):
            for o in graph.nodes[nid].operands:
                self.consumers.setdefault(o, []).append(nid)
        held = _held(graph, self.phase) if self.entry else set()
        for k, o in enumerate(graph.outputs):
            if o not in held:
                self.results.setdefault(o, k)
        if self.entry:
            for v, k in _updated_in_place(graph, self.phase, self.consumers).items():
                self.results[v] = k
        self.result_of = {}  # variable -> index of the result array it is (a view of)
        # non-scalar constant arrays, in the argument tuple after the results
        self.constants = parent.constants if parent else []
        # the next node id free for a region's sub-graph: from the first multiple of
        # REGION_IDS above the entry's, so that a few more nodes in the entry (an edited
        # program's tail) leave the names in its regions as they were
        self.numbered = parent.numbered if parent else [
            -(-(len(graph.nodes) + 1) // REGION_IDS) * REGION_IDS]
        self.region_results = {}  # region node -> the variables of its results
        self.inlined = {}    # group member -> its expression, spliced into its single consumer
        self.nesting = {}    # group member -> the bracket depth of its expression
        self.plan = ScratchPlan()  # where intermediates live in the scratch buffers
        self.slots = []      # (variable, dtype name, offset, shape) of each scratch view
        self.root = {}       # variable in the scratch buffers -> the variable owning its slot
        self.now = 0         # index of the statement being emitted
        self.last_use = {}   # node id -> index of the last statement that reads it
        self.stored = set()  # group members that have a buffer
        self.ranges = {}     # loop index -> (lo, hi) of the loop nest being emitted (groups.py)
        self.splits = None   # loop index -> indices where a guarded read changes, when asked
        self.tile = None     # the TileBegin of the tile loop being emitted (schedule._tile)
        self.loop_end = 0    # index of its TileEnd
        self.tile_loop = None  # the Loop statement of that tile loop
        self.indent = parent.indent + 1 if parent else 0  # extra indentation: + 1 in a loop
        self.shapes = {}     # variable -> the shape of the array it names, where known
        self.slot_of = {}    # variable in the scratch buffers -> (dtype name, offset)
        self.views = {}      # (dtype name, offset, shape) -> the prologue view of that slot
        self.hoisted = {}    # product in a tile loop -> its right operand, arranged before it
        self.threads = 1     # threads the tile loop may be split across (see threads.py)
        self.tile_blas = 0   # the largest BLAS product (m * k * n) in a tile loop
        self.threaded = None  # the TileBegin split across them, if any
        self.private = False  # allocating per-thread scratch (in a threaded loop)
        self.split = None    # (first line of the loop phase, first line after it)
        self.partials = []   # (variable, buffer, offset, shape, thread) of each partial's view

    def emit(self, statement, depth=1):
        """Adds ``statement`` (a string binding no name, an ``Assign``, a ``Loop`` or a
        ``Block``, whose body the statements of the next depth fill) at ``depth``."""
        self.code.add(statement, depth + self.indent)

    def assign(self, target, value, depth=1):
        """``target = value``: an ``Assign`` when ``target`` is a name (it binds one), a
        store otherwise (an element, ``r[0]``)."""
        self.emit(Assign(target, value) if target.isidentifier() else f"{target} = {value}", depth)

    def loop(self, var, stop, depth=1, start=0, step=1):
        self.emit(Loop(var, stop, start, step), depth)

    def run(self):
        """Emits the statements of the graph, then stores its outputs to their targets."""
        graph = self.graph
        for nid in graph.inputs:
            self.shapes[f"v{nid}"] = tuple(graph.nodes[nid].shape)
        statements = schedule(graph, self.phase, sums_apart=SUMS_APART)
        self.last_use = last_uses(graph, statements)
        constants = None  # (phase, first item) of the constants just emitted
        for k, stmt in enumerate(statements):
            self.now = k
            if self.entry and self.tile is None and not isinstance(stmt, TileEnd):
                now = self.phase.get(stmt.nid if isinstance(stmt, Single) else
                                     stmt.members[0] if isinstance(stmt, Group) else None, 0)
                if isinstance(stmt, Single) and self.nodes[stmt.nid].op == "constant":
                    if constants is None or constants[0] != now:
                        constants = (now, len(self.code.items))
                else:  # a phase begins with its constants just before it, not with those
                    # that go ahead of a tile loop that reads them
                    start = constants[1] if constants and constants[0] == now else None
                    self.phase_items.setdefault(now, len(self.code.items) if start is None
                                                else start)
                    constants = None
            if isinstance(stmt, Group):
                emit_group(self, stmt)
            elif isinstance(stmt, TileBegin):
                end = next(j for j in range(k, len(statements))
                           if isinstance(statements[j], TileEnd))
                begin_tile(self, stmt, end, [st.nid for st in statements[k + 1:end]
                                             if not isinstance(st, Group)])
            elif isinstance(stmt, TileEnd):
                end_tile(self, stmt.begin)
            else:
                self.single(stmt.nid)
            self.plan.release(k)
        self.now = len(statements)
        if self.entry:  # the copies of the results begin the last phase at the latest
            self.phase_items.setdefault(max([2, *self.phase_items]), len(self.code.items))
        for k, o in enumerate(graph.outputs):  # results not computed in place are copied there
            node, var = graph.nodes[o], f"v{o}"
            if node.shape == ():
                self.assign(self.targets[k], f"_cast_{node.dtype.name}({var})")
            elif self.result_of.get(var) != k:
                self.copy(self.targets[k], var, node.shape)

    def in_tile(self, nid):
        return self.tile is not None and nid in self.tile.values

    def local_shape(self, nid):
        """The shape of node ``nid``'s array where it is being emitted: a tile in the loop."""
        shape = tuple(self.nodes[nid].shape)
        return (self.tile.tile,) + shape[1:] if self.in_tile(nid) else shape

    def rows(self, nid, idx):
        """``idx`` (loop indices of a tile) for reading node ``nid``'s array: the global row if
        that array holds all rows."""
        if self.tile is None or self.in_tile(nid) or not idx:
            return list(idx)
        return self.global_rows(idx)

    @staticmethod
    def global_rows(idx):
        return [f"(r + {idx[0]})"] + list(idx[1:])

    def export(self, nid):
        """Copies the tile of ``nid`` into its full-size array, if statements after the loop
        (or the outputs) read it."""
        if self.tile is None or nid not in self.tile.exports:
            return
        shape = self.local_shape(nid)
        idx = [f"i{k}" for k in range(len(shape))]
        self.loops(shape, f"{self.at(f'f{nid}', self.global_rows(idx))} = "
                          f"{self.at(f'v{nid}', idx)}")

    def alloc(self, var, shape, dtype, fill=None, result=None, expiry=None):
        """``var`` = an array of ``shape``: the result array of output node ``result``, else a
        slot of the scratch buffer of its dtype (see lowering/loopnest/buffers.py), free again after
        statement ``expiry`` (the last reader of node ``var``; this statement for temporaries)."""
        shape = tuple(shape)
        if var[0] == "v" and self.in_tile(node_id(var)):
            # a tile: scratch (an exported one is copied out), free after the loop at the latest
            result = None
            expiry = min(self.last_use.get(node_id(var), self.now), self.loop_end)
        if self.private:  # each thread's own: a partial sum is combined into the result later
            result = None
        k = self.results.get(result)
        if k is not None and self.nodes[result].shape != ():
            self.assign(var, self.targets[k])  # a pointer: any shape
            self.result_of[var] = k
        else:
            size = math.prod(shape)  # exact: too big to allocate fails at the call
            if expiry is None:
                expiry = self.last_use.get(node_id(var), self.now) if var[0] == "v" else self.now
            buffer = dtype.name + (PRIVATE if self.private else "")
            start = self.plan.take(var, buffer, size, expiry)
            self.slots.append((var, buffer, start, shape))  # viewed in the prologue
            self.root[var] = var
            self.slot_of[var] = (buffer, start)
            self.views[(buffer, start, shape)] = var
        self.shapes[var] = shape
        if fill is not None and fill in ZERO_BITS:
            self.emit(f"_zero({var}, {math.prod(shape)})")
        elif fill is not None:  # a loop: ndarray.fill costs a Numba compile per array type
            self.loops((math.prod(shape),), f"{var}[i0] = {fill}")

    def at(self, var, idx):
        """The element of array ``var`` at index ``idx`` (expressions, one per axis)."""
        return f"{var}[{flat_index(self.shapes[var], idx)}]"

    def copy(self, target, source, shape):
        """``target`` = ``source``, both C-contiguous arrays of ``shape`` and one dtype."""
        self.emit(f"_copy({target}, {source}, {math.prod(shape)})")

    def loops(self, shape, statement):
        for depth, n in enumerate(shape):
            self.loop(f"i{depth}", n, depth + 1)
        self.emit(statement, len(shape) + 1)

    def reshaped(self, name, shape, var=None):
        """``name`` seen with ``shape`` (C order), as ``var`` if given: ``name`` itself when
        it has that shape already, another view of its scratch slot when it lives in one (made
        in the prologue with the others, once per slot and shape), else the same pointer."""
        shape = tuple(shape)
        if self.shapes.get(name) == shape and var is None:
            return name
        slot = self.slot_of.get(name)
        if slot is not None:
            # the same memory seen the same way is the same array: one argument for it
            known = name if self.shapes.get(name) == shape else self.views.get(slot + (shape,))
            if known is None:
                known = self.views[slot + (shape,)] = var or f"{name}_{len(self.slots)}"
                self.slots.append((known, slot[0], slot[1], shape))
            elif var is not None:
                self.assign(var, known)
            var = var or known
            self.slot_of[var] = slot
            self.root[var] = self.root.get(name, name)
        elif var is None:
            return name
        else:
            self.assign(var, name)
        self.shapes[var] = shape
        return var

    def view(self, var, of, nid):
        """``var`` (node ``nid``) is a view of ``of``: it keeps the slot of ``of`` alive."""
        if of in self.result_of:
            self.result_of[var] = self.result_of[of]
        if of in self.root:
            self.root[var] = self.root[of]
            self.plan.extend(self.root[of], self.last_use.get(nid, self.now))

    def read(self, nid, group, idx):
        """The expression for node ``nid``'s value at loop index ``idx`` inside ``group``."""
        node = self.nodes[nid]
        if group is not None and nid in group.member_set and kind(node) != "reduction":
            return self.inlined.pop(nid, f"s{nid}")
        if kind(node) == "index_map" and nid not in self.stored:
            return self.gather(node, group, idx)  # an index map of another group: gather again
        if node.shape == ():
            return f"v{nid}"
        return self.at(f"v{nid}", self.rows(nid, idx))

    def gather(self, node, group, idx, local=None):
        """Index map ``node`` at ``idx`` (loopnest/gathers.py): each operand read where the map
        sends the index, one that is ``composed`` gathered in turn (deciding its rows again).
        In a tile loop, ``idx`` counts the rows of the tile: an array that holds all rows is
        read at the global row, the row the maps keep in place when they read the tile's arrays
        (schedule._keeps_rows), else the index is made global before it is mapped."""
        if local is None:
            local = self.tile is not None and bool(idx)
            if local and not self.reads_tile(node, group):
                idx, local = self.global_rows(idx), False

        def read(k, sidx):
            o = node.operands[k]
            if self.nodes[o].shape == ():
                return f"v{o}"
            if composed(self.nodes, o, self.stored, group):
                return self.gather(self.nodes[o], group, sidx, None if local else False)
            return self.at(f"v{o}", self.rows(o, sidx) if local else sidx)
        return gather_expression(node, [self.nodes[o].shape for o in node.operands],
                                 [idx] * len(node.operands), read,
                                 lambda expr, bound: below(expr, bound, self.ranges, self.splits))

    def reads_tile(self, node, group):
        """Whether gathering index map ``node`` reads an array of the tile loop."""
        return any(self.reads_tile(self.nodes[o], group)
                   if composed(self.nodes, o, self.stored, group) else self.in_tile(o)
                   for o in node.operands)

    def single(self, nid):
        node = self.nodes[nid]
        op = node.op
        params = dict(node.params)
        args = [f"v{o}" for o in node.operands]
        out = f"v{nid}"
        if op == "constant":
            value = params["value"].value
            if node.shape == ():
                self.assign(out, literal(value.item(), node.dtype.name))
            else:
                self.assign(out, f"c{len(self.constants)}")
                self.shapes[out] = tuple(node.shape)
                self.constants.append(value)
            return
        if node.shape == () and PRIMITIVES[op].elementwise:
            self.assign(out, scalar_expression(node, args, serial=True))  # one element
            return
        LOWERINGS[op](self, node, out, args, **params)
        self.export(nid)

    def sub_graph(self, graph, inputs, targets, in_place=None):
        """Emits a region's sub-graph ``graph`` at this point (in the loop or branch just
        opened): its inputs are this graph's variables ``inputs``, its outputs go to
        ``targets``; ``in_place`` maps input positions to the outputs whose target that input
        already is. Its nodes are numbered after all others, so its variables are its own; its
        intermediates get a scratch plan of their own, placed by ``place_blocks``."""
        base = self.numbered[0]
        self.numbered[0] += len(graph.nodes)
        child = Emitter(Renumbered(graph, base), targets, parent=self)
        for p, (nid, var) in enumerate(zip(child.graph.inputs, inputs)):
            child.assign(f"v{nid}", var)
            if p in (in_place or {}):
                child.result_of[f"v{nid}"] = in_place[p]
        if not graph.inputs:
            child.emit("pass")
        child.run()
        return child

    def place_blocks(self, children):
        """Reserves a block of this graph's scratch buffers for the intermediates of the
        region's sub-graphs ``children`` (one at a time runs, so they share it) and places
        their slots in it."""
        for name in sorted(set().union(*(c.plan.size for c in children))):
            size = max(c.plan.size.get(name, 0) for c in children)
            start = self.plan.take(("block", self.now, name), name, size, self.now)
            for c in children:
                self.slots += [(var, n, s + start, shape) for var, n, s, shape in c.slots
                               if n == name]

    def results_of(self, nid):
        """The ``get`` nodes of region ``nid``, by result index."""
        gets = {}
        for c in self.consumers.get(nid, ()):
            if self.nodes[c].op == "get":
                gets.setdefault(dict(self.nodes[c].params)["index"], []).append(c)
        return gets


class Renumbered:
    """A region's sub-graph with its node ids moved up by ``base`` (the ids below are
    placeholders): the variables named after its nodes (``v12``, ``s12``) are then distinct
    from those of the graphs around it."""

    _PLACEHOLDER = Node("input", (), (), (), None)

    def __init__(self, graph, base):
        self.base = base
        self.nodes = [self._PLACEHOLDER] * base + [
            Node(n.op, tuple(o + base for o in n.operands), n.params, n.shape, n.dtype, n.weak)
            for n in graph.nodes]
        self.inputs = [i + base for i in graph.inputs]
        self.outputs = [o + base for o in graph.outputs]
