"""Scheduling: group a graph into statements for the loop-nest back ends (Numba CPU, CUDA).

Elementwise nodes of one shape, the index maps that read materialised arrays (broadcast,
transpose, slice, rev), and the reductions consuming them are fused into one loop nest (a
``Group``); everything else is a ``Single`` statement on materialised values, placed as early
as its inputs allow. A node joins the latest group of its shape when all its inputs are ready
before that group runs, so fusion never reorders a dependency. A member needs a buffer only if
something outside its group (or the graph's outputs) reads it.
"""

from quabla.core.primitives import PRIMITIVES

__all__ = ["Group", "Single", "schedule", "INDEX_MAPS", "REDUCTIONS"]

INDEX_MAPS = frozenset({"broadcast_in_dim", "transpose", "slice", "rev"})
REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_or", "reduce_and"})


class Group:
    """One loop nest over ``shape``: ``members`` in order (reductions among them)."""

    def __init__(self, shape):
        self.shape = shape
        self.members = []
        self.member_set = set()
        self.materialized = set()

    def __repr__(self):
        return f"Group({list(self.shape)}, {self.members})"


class Single:
    """One node computed on its own: scalar code, or an op on whole materialised arrays."""

    def __init__(self, nid):
        self.nid = nid

    def __repr__(self):
        return f"Single({self.nid})"


def _fusible(node):
    if node.shape == () or node.op == "constant":
        return False
    if node.op in INDEX_MAPS:
        return True
    return PRIMITIVES[node.op].elementwise


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


def schedule(graph):
    """Returns the statements in execution order."""
    nodes = graph.nodes
    plan = _Plan()
    last_group = {}  # shape -> the latest group of that shape
    for nid, node in enumerate(nodes):
        if node.op == "input":
            continue
        if node.op in REDUCTIONS:
            source = node.operands[0]
            group, inside = plan.home.get(source, (None, False))
            if not (isinstance(group, Group) and inside and group.shape == nodes[source].shape):
                group = _new_group(plan, nodes[source].shape, last_group, node, nid)
            _join(plan, group, nid, inside=False)
            continue
        if _fusible(node):
            candidate = last_group.get(node.shape)
            if candidate is None or not _can_join(plan, candidate, node):
                candidate = _new_group(plan, node.shape, last_group, node, nid)
            _join(plan, candidate, nid, inside=True)
            continue
        stmt = Single(nid)
        plan.insert(max([plan.ready_at(o) for o in node.operands] + [0]), stmt)
        plan.home[nid] = (stmt, False)
    statements = plan.statements
    _mark_materialized(graph, statements, plan)
    return statements


def _new_group(plan, shape, last_group, node, nid):
    group = Group(shape)
    plan.insert(len(plan.statements), group)
    last_group[shape] = group
    return group


def _join(plan, group, nid, inside):
    group.members.append(nid)
    group.member_set.add(nid)
    plan.home[nid] = (group, inside)


def _can_join(plan, group, node):
    gathers = node.op in INDEX_MAPS
    here = plan.pos(group)
    for o in node.operands:
        stmt, inside = plan.home.get(o, (None, False))
        if stmt is group and inside and not gathers:
            continue
        if plan.ready_at(o) > here:
            return False
    return True


def _mark_materialized(graph, statements, plan):
    """A member gets a buffer if the outputs or a statement outside its group read it. An index
    map read by other groups is not stored: each reader gathers from its source again."""
    consumers = {}
    for nid, node in enumerate(graph.nodes):
        for o in node.operands:
            consumers.setdefault(o, []).append(nid)
    outputs = set(graph.outputs)
    for stmt in statements:
        if not isinstance(stmt, Group):
            continue
        for m in stmt.members:
            node = graph.nodes[m]
            if node.op in REDUCTIONS:
                continue
            regather = node.op in INDEX_MAPS
            for c in consumers.get(m, ()):
                home = plan.home[c][0]
                reader_fuses = isinstance(home, Group) and graph.nodes[c].op not in INDEX_MAPS \
                    and graph.nodes[c].op not in REDUCTIONS
                if home is stmt and graph.nodes[c].op not in INDEX_MAPS:
                    continue
                if regather and reader_fuses:
                    continue
                stmt.materialized.add(m)
                break
            if m in outputs:
                stmt.materialized.add(m)
