"""Scheduling: group a graph into statements for the loop-nest back ends (Numba CPU, CUDA).

Elementwise nodes of one shape, the index maps that read materialised arrays or other index
maps (broadcast, transpose, slice, rev, pad, concatenate: loopnest/gathers.py), and the
reductions consuming them are fused into one loop nest (a ``Group``); everything else is a ``Single`` statement on materialised values, placed as early
as its inputs allow. A node joins the latest group of its shape when all its inputs are ready
before that group runs, so fusion never reorders a dependency. A member needs a buffer only if
something outside its group (or the graph's outputs) reads it.

Cheap members (arithmetic without transcendental functions or divisions) that later groups read
are not stored when those groups can compute them again from values they have (or almost
have) anyway: a stored intermediate costs a store stream in its group and a load stream in each
reader, recomputing costs a few arithmetic instructions, and the loops are bound by memory
traffic (see ``_rematerialize``).

Control-flow regions and their ``get`` projections are Singles: a region runs its
sub-graphs' own statements inside its loop or branch, so nothing fuses or tiles across it.

The tail (``tail_phases``: what only the outputs need through elementwise and scalar
arithmetic, such as each gradient's last sums, then what of it is computed from the inputs
alone, such as a penalty on the parameters) comes last, each phase fusing only with itself, so
an edit that adds such a term leaves every statement before it unchanged.
"""

from quabla.core.graph import Graph, Node
from quabla.core.primitives import PRIMITIVES

__all__ = ["Group", "Single", "TileBegin", "TileEnd", "schedule", "last_uses", "kind", "fused",
           "node_ids", "tail_phases", "tail_last"]

REMAT_CONE = 16           # the most nodes one reader group recomputes for one value
TILE_BYTES = 32 * 1024    # a tile of the widest row-wise array: what stays in L1/L2
MIN_TILE_ROWS = 16
# The most statements a tile loop runs: the loop is one statement of its entry, which
# parts.py cannot cut, and LLVM's time grows faster than a function's length (the deep 2D
# PINN's 206-statement loop compiled in 1.2 s against 0.7 s untiled, for a 1.5x faster step).
TILE_STATEMENTS = 64


def node_ids(graph):
    """The ids of ``graph``'s nodes. A region's sub-graph renumbered after the graphs around it
    (numba_cpu's ``Renumbered``) starts at its ``base``: the thousands of ids below are
    placeholders, which every pass over its nodes would otherwise walk."""
    return range(getattr(graph, "base", 0), len(graph.nodes))


def kind(node):
    """The class of a node's op (``Primitive.kind``: elementwise, index map, reduction,
    region), which decides how it is scheduled; None for inputs and constants."""
    found = _KINDS.get(node.op)
    if found is None:
        prim = PRIMITIVES.get(node.op)
        if prim is None:
            return None
        found = _KINDS[node.op] = prim.kind
    return found


_KINDS = {}  # op -> the kind of its registered primitive (a primitive is never replaced)


def fused(op):
    """Whether a loop nest computes ``op`` by its kind alone (no lowering-table entry): an
    elementwise op with a scalar template, an index map, a reduction."""
    prim = PRIMITIVES.get(op)
    return prim is not None and (prim.kind in ("index_map", "reduction") or (
        prim.elementwise and prim.scalar is not None))


class Group:
    """One loop nest over ``shape``: ``members`` in order (reductions among them)."""

    def __init__(self, shape):
        self.shape = shape
        self.members = []
        self.member_set = set()
        self.materialized = set()
        self.clones = set()  # members recomputed here whose home is an earlier group

    def __repr__(self):
        return f"Group({list(self.shape)}, {self.members})"


class TileBegin:
    """The statements up to the matching ``TileEnd`` run once per block of ``tile`` rows of
    their arrays' leading axis (``extent`` rows), so the intermediates of a batch (vmap) axis
    live in tile-sized buffers that stay in cache. ``values``: the nodes computed in the loop,
    held as tiles; ``accumulated``: sums over the rows (reductions over axis 0, products that
    contract it), complete after the loop; ``exports``: tiles that statements after the loop
    or the outputs read, copied into full arrays as they are computed."""

    def __init__(self, extent, tile):
        self.extent = extent
        self.tile = tile
        self.values = set()
        self.accumulated = set()
        self.exports = set()

    def __repr__(self):
        return f"TileBegin({self.extent} by {self.tile})"


class TileEnd:
    def __init__(self, begin):
        self.begin = begin

    def __repr__(self):
        return "TileEnd()"


class Single:
    """One node computed on its own: scalar code, or an op on whole materialised arrays."""

    def __init__(self, nid):
        self.nid = nid

    def __repr__(self):
        return f"Single({self.nid})"


def _fusible(node):
    if node.shape == () or node.op in ("constant", "get"):
        return False
    return kind(node) in ("index_map", "elementwise")


class _Plan:
    """The statement list being built; positions are recomputed when a Single is inserted."""

    def __init__(self):
        self.statements = []
        self.position = {}   # id(statement) -> index
        self.home = {}       # node id -> (statement, inside) ; inside: readable within its group

    def pos(self, stmt):
        return self.position[id(stmt)]

    def insert(self, index, stmt):
        self.statements.insert(index, stmt)
        for k in range(index, len(self.statements)):
            self.position[id(self.statements[k])] = k

    def ready_at(self, nid):
        """The first statement position at which node ``nid`` can be read from outside."""
        stmt, _ = self.home.get(nid, (None, False))
        return -1 if stmt is None else self.pos(stmt) + 1


def schedule(graph, phase=None, sums_apart=0):
    """Returns the statements in execution order, the tail's ``phase``s last (``tail_phases``,
    computed when None: a CPU entry's graph, cut into parts when long). ``{}`` schedules
    nothing apart: a region's body, whose statements all run in its loop, and a CUDA program,
    compiled whole, fuse as they can. ``sums_apart``: a sum along a group's innermost axis
    shorter than this that would keep costly members from vectorising gets a group of its own
    (``_sums_apart``: the CPU's loops)."""
    nodes = graph.nodes
    plan = _Plan()
    last_group = {}  # shape -> the latest group of that shape
    phase = tail_phases(graph) if phase is None else phase
    current, start = 0, 0  # the phase being scheduled, where its statements begin
    for nid in sorted(node_ids(graph), key=lambda n: (phase.get(n, 0), n)):
        node = nodes[nid]
        if node.op == "input":
            continue
        if phase.get(nid, 0) != current:
            last_group = {}  # a phase fuses with nothing before it, and comes after it
            current, start = phase[nid], len(plan.statements)
        if kind(node) == "reduction":
            source = node.operands[0]
            group, inside = plan.home.get(source, (None, False))
            if not (isinstance(group, Group) and inside and group.shape == nodes[source].shape):
                group = _new_group(plan, nodes[source].shape, last_group, node, nid)
            _join(plan, group, nid, inside=False)
            continue
        if _fusible(node):
            candidate = last_group.get(node.shape)
            if candidate is None or not _can_join(plan, candidate, node, nodes):
                candidate = _new_group(plan, node.shape, last_group, node, nid)
            _join(plan, candidate, nid, inside=True)
            continue
        stmt = Single(nid)
        plan.insert(max([plan.ready_at(o) for o in node.operands] + [start]), stmt)
        plan.home[nid] = (stmt, False)
    if sums_apart:
        _sums_apart(nodes, plan, sums_apart)
    statements = plan.statements
    _mark_materialized(graph, statements, plan)
    _rematerialize(graph, statements, plan, phase)
    statements = [s for s in statements if not isinstance(s, Group) or s.members]  # none: dead
    return _tile(graph, statements, plan, phase)


def tail_phases(graph, from_inputs=None):
    """The nodes scheduled last, by phase: 1 for the tail, what reaches the outputs through
    elementwise and scalar arithmetic alone (the sums that make each gradient,
    quabla/transforms/vjp.py); 2 for the part of it that computes on inputs or their views
    (reductions included: a penalty on the parameters) and what reads that; 3 for the
    constants added last into a result that phase computes (``_constant_terms``). A term an
    edit adds that only the outputs need (an L2 penalty, its gradient, a quadratic penalty's
    constant Hessian) falls in the last phases: the statements before them keep their names
    and scratch slots, and so their compiled parts (numba_cpu/parts.py). A view of an input,
    or a value constants alone make, takes the phase of its first reader. ``from_inputs``:
    ``_from_inputs``'s set, when the caller has it."""
    nodes = graph.nodes
    from_inputs = _from_inputs(nodes) if from_inputs is None else from_inputs
    readers = {}
    for nid, node in enumerate(nodes):
        for o in node.operands:
            readers.setdefault(o, []).append(nid)
    outputs = set(graph.outputs)
    tail = set()
    for nid in range(len(nodes) - 1, -1, -1):
        node = nodes[nid]
        read = readers.get(nid, ())
        if (read or nid in outputs) and all(r in tail for r in read) \
                and (_fusible_or_scalar(node) or node.op == "constant") \
                and (kind(node) != "reduction" or nid in from_inputs):
            tail.add(nid)
    views, computes = set(), set()  # inputs and their views; arithmetic on those
    for nid in sorted(from_inputs):
        node = nodes[nid]
        if node.op == "input" or kind(node) == "index_map" and all(
                o in views for o in node.operands):
            views.add(nid)
        elif node.op != "constant" and any(o in computes or (o in views and kind(node) !=
                                                             "index_map")
                                           for o in node.operands):
            computes.add(nid)
    phase = {}
    for nid in sorted(tail):
        node = nodes[nid]
        if node.op == "constant":
            continue
        if nid in computes or any(phase.get(o) == 2 for o in node.operands):
            phase[nid] = 2
        elif nid not in from_inputs:
            phase[nid] = 1
    for nid in _constant_terms(graph, phase, from_inputs - computes - views, readers):
        phase[nid] = 3
    for nid in sorted(tail - set(phase), reverse=True):
        # a constant, a view of an input or what constants alone make: in the first phase
        # that reads it (``1 - tanh(x) ** 2``'s 1 is the derivative's, not a penalty's)
        phase[nid] = min((phase[r] for r in readers.get(nid, ())), default=2)
    return phase


def _constant_terms(graph, phase, constants, readers):
    """The nodes that add constants last into a result computed from inputs alone (the
    tail's phase 2 otherwise: a Hessian of a function of the inputs), through index maps (its
    transpose), from the first such add on, each read by the next alone: the Hessian of a
    quadratic penalty is such a constant. They are the tail's last phase (3), so the
    statements before them are those of the program without the term. ``constants``: the
    tail's values constants alone make."""
    nodes, found = graph.nodes, []
    for o in graph.outputs:
        chain, n, last = [], o, 0
        while n in phase and readers.get(n, []) == chain[-1:]:  # (a result: read by none)
            node = nodes[n]
            terms = [x for x in node.operands if x in constants]
            if node.op == "add" and len(terms) == 1 and len(node.operands) == 2:
                chain.append(n)
                last = len(chain)
                n = next(x for x in node.operands if x not in terms)
            elif kind(node) == "index_map" and len(node.operands) == 1:
                chain.append(n)
                n = node.operands[0]
            else:
                break
        if phase.get(n) == 2:
            found += chain[:last]
    return found


def _from_inputs(nodes):
    """The nodes computed from inputs and constants alone, by loop nests and scalar code."""
    found = set()
    for nid, node in enumerate(nodes):
        if node.op in ("input", "constant") or (
                node.operands and all(o in found for o in node.operands)
                and _fusible_or_scalar(node)):
            found.add(nid)
    return found


def _tail_copies(graph, phase, from_inputs):
    """``(graph, phase, place)``: ``graph`` where the tail's last phase computes again each
    value it reads from before the tail that inputs and constants alone make (in a cone of at
    most ``REMAT_CONE`` nodes), the copies added after every node, each placed (``place``) just
    before its reader. An edit's ``sum(s * s)`` that the rewriter merged with a solver's own
    ``b . b`` is then the tail's: the statements before the tail are those of the program
    without the edit, which would otherwise hand the value over and so change."""
    nodes = list(graph.nodes)

    def cone(nid, seen):
        node = nodes[nid]
        if nid in seen or node.op == "input" or (node.op == "constant" and node.shape):
            return seen  # read in place: an input, an array constant (an argument)
        seen.add(nid)
        for o in node.operands:
            cone(o, seen)
        return seen

    copies, place, readers = {}, {}, {}
    for nid, node in enumerate(graph.nodes):
        if phase.get(nid) != 2:
            continue
        cones = {o: cone(o, set()) for o in node.operands if o not in phase and o in from_inputs}
        reads = {o: made for o, made in cones.items() if 0 < len(made) <= REMAT_CONE}
        if not reads:
            continue
        for made in reads.values():
            for c in sorted(made - copies.keys()):  # operands first: in node order
                old = nodes[c]
                nodes.append(Node(old.op, tuple(copies.get(a, a) for a in old.operands),
                                  old.params, old.shape, old.dtype, old.weak))
                copies[c] = len(nodes) - 1
                phase[copies[c]] = 2
                place[copies[c]] = nid - 0.5
        readers[nid] = tuple(copies.get(o, o) if o in reads else o for o in node.operands)
    if not copies:
        return graph, phase, place
    for nid, operands in readers.items():
        n = nodes[nid]
        nodes[nid] = Node(n.op, operands, n.params, n.shape, n.dtype, n.weak)
    return Graph(nodes, graph.inputs, graph.outputs, graph.input_names), phase, place


def tail_last(graph):
    """``(graph, phase)``: ``graph`` with its nodes numbered as ``schedule`` takes them, the
    tail's phases (``tail_phases``, renumbered too) last: the generated code names values by
    node, so the rest of an edited program keeps its names as well as its statements. A
    constant is numbered just before its first reader of its own phase: where the trace made
    it depends on what else uses it (an edit's term that needs a 2 first makes the 2 that the
    rest of the program reads), where its reader is does not. The last phase computes again
    what it would read from before the tail that inputs alone make (``_tail_copies``)."""
    from_inputs = _from_inputs(graph.nodes)  # the tail's phases and its copies both ask
    graph, phase, place = _tail_copies(graph, tail_phases(graph, from_inputs), from_inputs)
    for k, node in enumerate(graph.nodes):
        for o in node.operands:
            if o not in place and graph.nodes[o].op == "constant" \
                    and phase.get(o, 0) == phase.get(k, 0):
                place[o] = k - 0.5
    order = sorted(range(len(graph.nodes)), key=lambda n: (phase.get(n, 0), place.get(n, n), n))
    if order == list(range(len(order))):
        return graph, phase
    new = {old: k for k, old in enumerate(order)}
    phase = {new[old]: p for old, p in phase.items()}
    nodes = [graph.nodes[old] for old in order]
    nodes = [Node(n.op, tuple(new[o] for o in n.operands), n.params, n.shape, n.dtype, n.weak)
             for n in nodes]
    return Graph(nodes, [new[i] for i in graph.inputs], [new[o] for o in graph.outputs],
                 graph.input_names), phase


def _fusible_or_scalar(node):
    """Whether ``node`` is computed in a loop nest or as scalar code by its kind."""
    return node.op not in ("input", "constant", "get") and kind(node) in (
        "elementwise", "index_map", "reduction")


def _new_group(plan, shape, last_group, node, nid):
    group = Group(shape)
    plan.insert(len(plan.statements), group)
    last_group[shape] = group
    return group


def _join(plan, group, nid, inside):
    group.members.append(nid)
    group.member_set.add(nid)
    plan.home[nid] = (group, inside)


def _can_join(plan, group, node, nodes):
    """Whether ``node`` can be computed in ``group``: its operands are ready before the group
    runs or computed in it, which an index map can only read from a stored value of an earlier
    statement or through another index map (gathered in turn: its sources are ready)."""
    gathers = kind(node) == "index_map"
    here = plan.pos(group)
    for o in node.operands:
        stmt, inside = plan.home.get(o, (None, False))
        if stmt is group and inside and (not gathers or kind(nodes[o]) == "index_map"):
            continue
        if plan.ready_at(o) > here:
            return False
    return True


def _sums_apart(nodes, plan, below):
    """A loop that carries a sum in order (any reduction but a long one, numba_cpu's
    ``REORDERED_SUMS``) runs element by element, and a short one that is vectorised reduces
    its vector of partial sums every few elements. Where a group summing along an innermost
    axis shorter than ``below`` also computes members that are not cheap (transcendental
    functions, divisions: what vectorised code does several times faster), those reductions
    move to a group of their own just after it, which reads their operands stored: the
    members vectorise (a sum of tanh along rows of 20, 1.5x faster). Along a longer axis the
    sum vectorises with its members, without a store and a load between them (rows of 40 or
    more: 1.2-1.5x faster than apart)."""
    for group in [s for s in plan.statements if isinstance(s, Group)]:
        last = len(group.shape) - 1
        if group.shape[last] >= below:
            continue
        sums = [m for m in group.members
                if kind(nodes[m]) == "reduction" and last in nodes[m].kw["axes"]]
        if not sums or all(_cheap(nodes[m]) for m in group.members
                           if kind(nodes[m]) == "elementwise"):
            continue
        apart = Group(group.shape)
        plan.insert(plan.pos(group) + 1, apart)
        for m in sums:
            group.members.remove(m)
            group.member_set.discard(m)
            _join(plan, apart, m, inside=False)


def _mark_materialized(graph, statements, plan):
    """A member gets a buffer if the outputs or a statement outside its group read it. An index
    map read by other groups' loops, or by other index maps, is not stored: each reader
    gathers from its source again."""
    consumers = {}
    for nid in node_ids(graph):
        for o in graph.nodes[nid].operands:
            consumers.setdefault(o, []).append(nid)
    outputs = set(graph.outputs)
    for stmt in statements:
        if not isinstance(stmt, Group):
            continue
        for m in stmt.members:
            node = graph.nodes[m]
            if kind(node) == "reduction":
                continue
            regather = kind(node) == "index_map"
            for c in consumers.get(m, ()):
                home = plan.home[c][0]
                reader_fuses = isinstance(home, Group) and kind(graph.nodes[c]) != "reduction"
                if home is stmt and kind(graph.nodes[c]) != "index_map":
                    continue
                if regather and reader_fuses:
                    continue
                stmt.materialized.add(m)
                break
            if m in outputs:
                stmt.materialized.add(m)


def _cheap(node):
    return PRIMITIVES[node.op].cheap(node.kw)


def _rematerialize(graph, statements, plan, phase):
    """Stop storing cheap members that only later loop nests read: each reader group computes
    them again (they become ``clones`` there, with the cheap, unstored members they are made
    of), from stored values. Decided value by value in program order, when the readers' loops
    together load no more arrays of their full size than the store and loads it saves: at most
    one more than the number of reader groups. Members that nothing reads any more are dropped
    from their group. What a later ``phase`` of the tail reads stays stored: what comes
    before does not depend on it."""
    nodes = graph.nodes
    outputs = set(graph.outputs)
    consumers = {}
    for nid in node_ids(graph):
        for o in nodes[nid].operands:
            consumers.setdefault(o, []).append(nid)
    home = {nid: stmt for nid, (stmt, _) in plan.home.items()}
    stored = set()
    for stmt in statements:
        if isinstance(stmt, Group):
            stored |= stmt.materialized

    def size(shape):
        n = 1
        for d in shape:
            n *= d
        return n

    def streams(group, nid, seen):
        """The arrays of the group's full size that reading node ``nid`` in ``group`` loads."""
        node = nodes[nid]
        if nid in group.member_set and kind(node) != "reduction":
            return
        if kind(node) == "index_map" and nid not in stored:
            for o in node.operands:  # gathered again from its source
                if nodes[o].shape != ():
                    streams(group, o, seen)
            return
        if size(node.shape) == size(group.shape) and node.shape != ():
            seen.add(nid)

    def group_streams(group):
        seen = set()
        for m in group.members:
            if kind(nodes[m]) != "index_map":
                for o in nodes[m].operands:
                    streams(group, o, seen)
        return seen

    def cone(group, nid, out):
        """Adds to ``out`` the members that ``group`` must compute to read ``nid`` without a
        stored copy; False if one of them is not cheap."""
        node = nodes[nid]
        if nid in group.member_set or nid in out:
            return True
        if not (isinstance(home.get(nid), Group) and kind(node) != "reduction"
                and kind(node) != "index_map" and nid not in stored):
            return True  # readable as it is: an input, a Single, a stored member, an index map
        if not _cheap(node) or len(out) >= REMAT_CONE:
            return False
        out.add(nid)
        return all(cone(group, o, out) for o in node.operands)

    for stmt in statements:
        if not isinstance(stmt, Group):
            continue
        for m in list(stmt.members):
            if m not in stored or m in outputs or not _cheap(nodes[m]):
                continue
            readers = []
            for c in consumers.get(m, ()):
                h = home.get(c)
                if kind(nodes[c]) == "index_map" or not isinstance(h, Group) \
                        or c not in h.member_set or phase.get(c, 0) > phase.get(m, 0):
                    break
                if h is not stmt and h not in readers:
                    readers.append(h)
            else:
                if not readers:
                    continue
                stored.discard(m)  # as if not stored: what would each reader recompute?
                plans = []
                for h in readers:
                    add = set()
                    if not cone(h, m, add):
                        break
                    before = group_streams(h)
                    after = set(before)
                    after.discard(m)
                    for k in add:
                        for o in nodes[k].operands:
                            if o not in add:
                                streams(h, o, after)
                    plans.append((h, add, len(after - before)))
                else:
                    if sum(extra for _, _, extra in plans) <= len(readers) + 1:
                        stmt.materialized.discard(m)
                        for h, add, _ in plans:
                            # clones read only stored values and each other: they go first,
                            # in program order
                            h.clones |= add
                            h.member_set |= add
                            h.members = sorted(h.clones) + [k for k in h.members
                                                            if k not in h.clones]
                        continue
                stored.add(m)
    for stmt in statements:
        if isinstance(stmt, Group):
            _drop_dead_members(graph, stmt)


def _drop_dead_members(graph, group):
    """Keeps the members that are stored, reductions, or read by a kept member (an index map
    reads no member: it gathers from their sources)."""
    live = set()
    for m in reversed(group.members):
        node = graph.nodes[m]
        if m in group.materialized or kind(node) == "reduction" or m in live:
            live.add(m)
            if kind(node) != "index_map":
                live.update(o for o in node.operands if o in group.member_set)
    group.members = [m for m in group.members if m in live]
    group.member_set = set(group.members)
    group.clones &= group.member_set


# -- tiling the batch axis -------------------------------------------------------------------

def _tile_rows(extent, row_bytes):
    """The rows per tile: the largest divisor of ``extent`` whose tile of the widest array fits
    TILE_BYTES, with at least two tiles; None when there is none worth having. Only the row
    counts that fit are tried, so any extent costs at most TILE_BYTES steps."""
    for t in range(min(extent // 2, TILE_BYTES // row_bytes), MIN_TILE_ROWS - 1, -1):
        if extent % t == 0:
            return t
    return None


def _tile(graph, statements, plan, phase):
    """Runs the statements over the rows of one leading axis in tiles (``TileBegin``/``TileEnd``
    around them) when that axis is a batch axis: every row-wise statement computes row i of
    its result from row i of the others. Such statements are the groups whose shape leads with
    that extent, reshapes that keep it, products of a row-wise left operand by a matrix computed
    before the loop, and reductions and products that sum over it (accumulated across tiles,
    row by row in order, so sums come out as without tiles). Statements before the loop are
    those that read nothing computed in it, but for the tail's (``phase``, from
    ``tail_phases``: it stays last); statements after it read its results. If a row-wise
    statement needs one of those, or a product meets a matrix too large to stay in cache
    across tiles, nothing is tiled."""
    nodes = graph.nodes
    groups = [st for st in statements if isinstance(st, Group) and st.shape]
    if not groups:
        return statements

    def size(shape):
        n = 1
        for d in shape:
            n *= d
        return n

    extent = max(groups, key=lambda g: size(g.shape)).shape[0]
    row_groups = [g for g in groups if g.shape[0] == extent]
    row_bytes = max(size(g.shape[1:]) * graph.nodes[g.members[0]].dtype.numpy.itemsize
                    for g in row_groups)
    tile = _tile_rows(extent, row_bytes)
    if tile is None:
        return statements
    stored = set()
    for st in statements:
        if isinstance(st, Group):
            stored |= st.materialized
    producer = {}
    for st in statements:
        for m in (st.members if isinstance(st, Group) else (st.nid,)):
            producer.setdefault(m, st)

    def virtual(nid):
        """An index map with no buffer: its readers gather from its sources."""
        return kind(nodes[nid]) == "index_map" and nid not in stored and isinstance(
            plan.home.get(nid, (None,))[0], Group)

    def sources(nid, out):
        """The stored values read to read ``nid``."""
        if virtual(nid):
            for o in nodes[nid].operands:
                sources(o, out)
        else:
            out.add(nid)

    def reads(st):
        out = set()
        if isinstance(st, Group):
            for m in st.members:
                if kind(nodes[m]) == "index_map":
                    for o in nodes[m].operands:
                        sources(o, out)
                    continue
                for o in nodes[m].operands:
                    if o not in st.member_set or kind(nodes[o]) == "reduction":
                        sources(o, out)
            out -= {m for m in st.members if kind(nodes[m]) != "reduction"}
        else:
            for o in nodes[st.nid].operands:
                sources(o, out)
        return out

    # A loop nest that reads only arrays from before the loop runs in it too (the first layer
    # of a batch, say), unless a statement must read its result across rows (reversed over
    # the rows, ...): then it runs before the loop, in full, and the loop is planned again.
    ahead = set()
    for _ in range(len(statements)):
        planned = _plan_tiles(graph, statements, extent, tile, reads, virtual, producer, ahead,
                              phase)
        if not isinstance(planned, set):
            return planned
        if not planned or planned <= ahead:
            return statements
        ahead |= planned
    return statements


def _plan_tiles(graph, statements, extent, tile, reads, virtual, producer, ahead, phase):
    """The statements with the tile loop, or the statements that would have to run ahead of
    it for it to exist (an empty set: no loop)."""
    nodes = graph.nodes
    begin = TileBegin(extent, tile)
    inside, before, after = [], [], []
    late = set()   # values computed after the loop
    pure = set()   # ids of loop nests in the loop that read nothing computed in it
    for st in statements:
        r = reads(st)
        if id(st) in ahead:
            before.append(st)
            continue
        row_wise = _row_wise(graph, st, extent, begin, r, virtual)
        if r & late:
            if row_wise:
                return set()  # a row-wise statement would wait for the loop's results
            after.append(st)
            late |= set(st.members) if isinstance(st, Group) else {st.nid}
            continue
        if row_wise:
            inside.append(st)
            if isinstance(st, Group):
                if not r & (begin.values | begin.accumulated):
                    pure.add(id(st))
                for m in st.members:
                    node = nodes[m]
                    if kind(node) == "reduction" and 0 in dict(node.params)["axes"]:
                        begin.accumulated.add(m)
                    else:
                        begin.values.add(m)
            elif _contracts_rows(graph, st.nid, begin):
                begin.accumulated.add(st.nid)
            else:
                begin.values.add(st.nid)
        elif r & (begin.values | begin.accumulated):
            blocking = {id(producer[o]) for o in r & begin.values}
            if isinstance(st, Group) and blocking and blocking <= pure:
                return blocking  # would be row-wise if those ran ahead of the loop
            after.append(st)
            late |= set(st.members) if isinstance(st, Group) else {st.nid}
        elif (st.nid if isinstance(st, Single) else st.members[0]) in phase and not (
                isinstance(st, Single) and nodes[st.nid].op == "constant"):
            after.append(st)  # the tail stays last (its constants go ahead: its loops read them)
            late |= set(st.members) if isinstance(st, Group) else {st.nid}
        else:
            before.append(st)
    if not inside or not any(isinstance(st, Single) for st in inside):
        return set()  # only loop nests: tiles would gain nothing
    if len(inside) > TILE_STATEMENTS:
        return set()  # one function too long to compile in parts
    for st in inside:
        if not _small_product(graph, st, begin):
            return set()
    for st in after:
        begin.exports |= reads(st) & begin.values
    begin.exports |= set(graph.outputs) & begin.values
    return before + [begin] + inside + [TileEnd(begin)] + after


def _small_product(graph, st, begin):
    """Is the matrix that every tile of this product meets (the right operand, or the sum over
    the rows) small enough to stay in cache across tiles? Products by larger ones are faster
    whole: BLAS would stream the matrix again for every tile (a 1024-point MLP of width 256
    ran 2x slower in tiles, of width 32 1.2x faster)."""
    if isinstance(st, Group):
        return True
    node = graph.nodes[st.nid]
    if node.op != "dot_general":
        return True
    matrix = node if st.nid in begin.accumulated else graph.nodes[node.operands[1]]
    size = 1
    for d in matrix.shape:
        size *= d
    return size * matrix.dtype.numpy.itemsize <= TILE_BYTES


def _keeps_rows(nodes, nid, tiles, gathered):
    """Whether index map ``nid`` reads row i of the tile's arrays (``tiles``) at row i of its
    own, through the index maps it ``gathered`` in turn: a tile must keep its rows where they
    are. Every map on a way to an array of the tile must keep the row axis; one that reads
    only arrays holding all rows may move it (they are read at the global row)."""
    known = {}

    def reaches(n):  # None: a map on the way to the tile moves its rows
        if n not in known:
            found = False
            for o in nodes[n].operands:
                r = reaches(o) if gathered(o) else o in tiles
                if r is None:
                    found = None
                    break
                found = found or r
            known[n] = None if found and not _keeps_row_axis(nodes[n]) else found
        return known[n]
    return reaches(nid) is not None


def _keeps_row_axis(node):
    params = dict(node.params)
    if node.op == "broadcast_in_dim":
        return params["broadcast_dimensions"][:1] == (0,)
    if node.op == "transpose":
        return params["permutation"][0] == 0
    if node.op == "rev":
        return 0 not in params["dimensions"]
    if node.op == "slice":
        return params["start_indices"][0] == 0 and params["strides"][0] == 1
    if node.op == "pad":
        return (params["low"][0], params["high"][0], params["interior"][0]) == (0, 0, 0)
    return node.op != "concatenate" or params["axis"] != 0


def _contracts_rows(graph, nid, begin):
    node = graph.nodes[nid]
    if node.op != "dot_general":
        return False
    (lc, rc), _ = dict(node.params)["dimension_numbers"]
    return 0 in lc


def _row_wise(graph, st, extent, begin, reads, virtual):
    """Can ``st`` run tile by tile, given what the loop computes so far (``begin.values``)?"""
    nodes = graph.nodes
    tiles = begin.values
    if isinstance(st, Group):
        if not st.shape or st.shape[0] != extent:
            return False
        def gathered(o):
            return kind(nodes[o]) == "index_map" and (virtual(o) or o in st.member_set)
        if not all(_keeps_rows(nodes, m, tiles, gathered) for m in st.members
                   if kind(nodes[m]) == "index_map"):
            return False
        return all(o not in begin.accumulated for o in reads)
    node = nodes[st.nid]
    if not any(o in tiles for o in node.operands):
        return False
    if node.op == "reshape":
        new_shape = tuple(dict(node.params)["new_shape"])
        return new_shape[:1] == (extent,) and nodes[node.operands[0]].shape[:1] == (extent,)
    if node.op != "dot_general":
        return False
    (lc, rc), (lb, rb) = dict(node.params)["dimension_numbers"]
    lhs, rhs = node.operands
    if lb or rb:
        return False
    if lhs in tiles and rhs not in tiles and rhs not in begin.accumulated:
        return 0 not in lc     # rows of the left operand are the rows of the product
    if lhs in tiles and rhs in tiles:
        return 0 in lc and 0 in rc and lc.index(0) == rc.index(0)  # sums over the rows
    return False


def last_uses(graph, statements):
    """Node id -> index of the last statement of ``statements`` reading it (outputs live to the
    end), for the buffer planners of both loop-nest back ends. Reading an
    index map may gather from its source again (see ``_Emitter.read``), so that reads the
    source too. What a tile loop reads from before it is read again by every tile: it lives
    until the loop's end."""
    last = {}
    loop = None  # the values read in the tile loop being scanned

    def mark(o, k):
        last[o] = k
        if loop is not None:
            loop.add(o)
        if kind(graph.nodes[o]) == "index_map":
            for source in graph.nodes[o].operands:
                mark(source, k)

    for k, stmt in enumerate(statements):
        if isinstance(stmt, TileBegin):
            loop = set()
            continue
        if isinstance(stmt, TileEnd):
            made = stmt.begin.values | stmt.begin.accumulated
            for o in loop - made:
                last[o] = max(last[o], k)
            loop = None
            continue
        for nid in stmt.members if isinstance(stmt, Group) else (stmt.nid,):
            for o in graph.nodes[nid].operands:
                mark(o, k)
    for o in graph.outputs:
        last[o] = len(statements)
    return last
