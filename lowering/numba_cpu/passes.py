"""Passes over an entry's statements: ``phased`` splits an entry around its threaded tile
loop, ``views`` writes the prologue's scratch views, ``propagate`` reads copies and literals in
place of the names bound to them, and ``check_integers`` refuses integers beyond int64 in the
rendered lines.
"""

import collections
import math
import re

from ..loopnest.buffers import PRIVATE, dtype_of
from . import threads
from .source import Named, argument
from .statements import (Assign, Block, Loop, assigned, assignments, exposed, names, render,
                         walk)

__all__ = ["check_integers", "views", "propagate", "phased", "private_buffers", "Handover"]


_LONG_INTEGER = re.compile(r"\b\d{19,}\b")


def check_integers(lines):
    """Compiled code computes with int64: a larger integer (an extent, an offset) is refused
    here with a clear error, not by Numba's type inference."""
    for literal in _LONG_INTEGER.findall("\n".join(lines)):
        if int(literal) >= 2**63:
            raise ValueError(f"the integer {literal} in this program does not fit the int64 "
                             "arithmetic of compiled code")


def views(slots, pointers):
    """Assignments binding each ``(variable, buffer, offset)`` of ``slots`` to the element ``offset``
    of a scratch buffer: ``pointers[buffer]`` (an ``_arg`` of its start) is bound once, to the
    name ``buffer``; a slot is an ``_offset`` of it, or an alias of the variable bound to the
    same slot before (an ``_arg`` costs Numba more to type than either)."""
    lines, first, bound = [], {}, set()
    for var, buffer, start in slots:
        if buffer not in bound:
            bound.add(buffer)
            lines.append(Assign(buffer, pointers[buffer]))
        same = first.setdefault((buffer, start), var)
        if same == var:
            same = f"_offset({buffer}, {start})" if start else buffer
        lines.append(Assign(var, same))
    return lines


# an index of integer literals only, once a counter is substituted (``v3[2 * 1 + 0]``)
_CONSTANT_INDEX = re.compile(r"\[(\d+(?: [+*] \d+)+)\]")
# a loop of at most this many steps and statements in all, of statements that are not blocks,
# is written out: Numba's passes cost per block and variable, LLVM unrolls it anyway
UNROLL_STEPS, UNROLL_STATEMENTS = 4, 8


def _folded(index):
    """The value of an index of integer literals, sums of products (``2 * 1 + 0``)."""
    return sum(math.prod(int(f) for f in term.split("*")) for term in index.split("+"))


def _unrolled(loop):
    if not all(isinstance(b, int) for b in (loop.start, loop.stop, loop.step)):
        return False
    steps = len(range(loop.start, loop.stop, loop.step))
    return steps == 1 or (steps <= UNROLL_STEPS and steps * len(loop.body) <= UNROLL_STATEMENTS
                          and not any(isinstance(item, (Loop, Block)) for item in loop.body))


_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")
_REBINDS = re.compile(r"^([A-Za-z_]\w*) *[-+*/]?=(?!=)")  # a plain-string statement binding a name
_WORDS = re.compile(r"\b[A-Za-z_]\w*\b")


def _bindings(items):
    """How many times each name is bound along one path through ``items`` (2 for a loop's
    counter or an augmented assignment): the branches of an ``if``/``elif``/``else`` chain
    are exclusive, so a name bound once in each of them is bound once (the branches of a
    ``cond`` region each bind their own copies and literals)."""
    total, branches = collections.Counter(), None
    for item in items:
        if isinstance(item, Block) and item.header.startswith(("elif", "else")):
            branches |= _bindings(item.body)  # Counter union: the larger count
            continue
        if branches:
            total.update(branches)
        branches = None
        if isinstance(item, Block) and item.header.startswith("if "):
            branches = _bindings(item.body)
        elif isinstance(item, (Block, Loop)):
            total.update(_bindings(item.body))
            if isinstance(item, Loop):
                total[item.var] += 2
        elif isinstance(item, Assign):
            total.update(item.targets)
        elif isinstance(item, str):
            rebinds = _REBINDS.match(item)
            if rebinds:
                total[rebinds.group(1)] += 2
    if branches:
        total.update(branches)
    return total


def propagate(items):
    """``items`` with every copy read in place of its name: a name bound once to another name
    bound once before it (``x5 = x2``: a view of the same slot, a reshape, a region's carried
    value), or to a literal (``x7 = 0.5``), is replaced by its value in the statements that
    follow it in its block, and its assignment dropped when nothing else reads it; a loop of
    one step, or of a few steps over a few plain statements, becomes its bodies, its counter
    read as a literal (and indices of literals folded). Views,
    reshapes and the constants of region bodies bind a third of a deep entry's names; each
    costs Numba's front end, typing, lowering and liveness analysis as much as arithmetic,
    and LLVM removes none of that cost."""
    binds = _bindings(items)
    seen, copies = set(), set()

    def sub(text, env):
        if not env:
            return text
        if not env.keys().isdisjoint(_WORDS.findall(text)):
            text = _WORDS.sub(lambda m: env.get(m.group(0), m.group(0)), text)
        return _CONSTANT_INDEX.sub(lambda m: f"[{_folded(m.group(1))}]", text)

    def run(items, env):
        out, env = [], dict(env)
        for item in items:
            if isinstance(item, Assign):
                value = sub(item.value, env)
                item = Assign(item.targets, value)
                name = item.targets[0]
                if len(item.targets) == 1 and binds[name] == 1 and (
                        _LITERAL.match(value) and not _IDENTIFIER.match(value)
                        or _IDENTIFIER.match(value) and (binds[value] == 0 or
                                                         binds[value] == 1 and value in seen)):
                    env[name] = f"({value})" if value.startswith("-") else value
                    copies.add(id(item))
                seen.update(item.targets)
            elif isinstance(item, Loop) and _unrolled(item):  # its bodies, the counter literal
                seen.add(item.var)
                for k in range(item.start, item.stop, item.step):
                    out += run(item.body, {**env, item.var: str(k)})
                continue
            elif isinstance(item, Loop):
                loop = Loop(item.var, *(sub(str(b), env) if isinstance(b, str) else b
                                        for b in (item.stop, item.start, item.step)))
                seen.add(item.var)
                loop.body = run(item.body, env)
                item = loop
            elif isinstance(item, Block):
                item = Block(sub(item.header, env), run(item.body, env), item.loops)
            else:
                item = sub(item, env)
            out.append(item)
        return out

    def drop(items, unread):
        out = []
        for item in items:
            if isinstance(item, Assign) and id(item) in copies and item.targets[0] in unread:
                continue
            if isinstance(item, (Loop, Block)):
                item.body = drop(item.body, unread)
            out.append(item)
        return out

    result = run(items, {})
    read = collections.Counter()
    for item in walk(result):
        read.update(_WORDS.findall(
            item.value if isinstance(item, Assign) else item.header if isinstance(item, Block)
            else f"{item.start} {item.stop} {item.step}" if isinstance(item, Loop) else item))
    kept = [item for item in walk(result) if isinstance(item, Assign) and id(item) in copies]
    while True:
        unread = {item.targets[0] for item in kept if not read[item.targets[0]]}
        if not unread:
            return result
        result = drop(result, unread)
        for item in kept:  # a dropped copy no longer reads what it copied
            if item.targets[0] in unread:
                read.subtract(_WORDS.findall(item.value))
        kept = [item for item in kept if item.targets[0] not in unread]


def private_buffers(e):
    return sorted(n for n in e.plan.size if n.endswith(PRIVATE))


_LITERAL = re.compile(r"^(?:np\.float32\()?\(?-?(?:[\d.e+-]+|math\.inf|math\.nan|True|False)\)?\)?$")


def _thread_buffer(k, thread):
    """The name of the pointer to per-thread buffer ``k`` (of the running thread if None)."""
    return f"wt{k}" if thread is None else f"wt{k}_{thread}"


class Handover:
    """What a later part of an entry reads from the statements before it, given to it again:
    a view or an alias of one (its one assignment replayed), a literal (replayed), any other
    0-d value through a slot of shared scratch (``spills``: name -> dtype; ``allocate`` makes
    the slots, the earlier part stores the value there: ``stores``). An array variable rebound before (which array
    it is depends on the run) cannot be handed over."""

    def __init__(self, e, graph):
        self.e, self.nodes = e, graph.nodes
        self.before = []                 # the statements before, in order
        self.top, self.rebound = {}, set()  # names bound once at the top level; otherwise
        self.spills = {}
        self.late = {}  # spilled value first read by the tail -> the phase of its first reader

    def add(self, items):
        """``items`` now come before the parts still to hand over to."""
        self.before += items
        for item in items:
            if isinstance(item, Assign) and len(item.targets) == 1:
                self.top.setdefault(item.targets[0], []).append(item)
            else:
                self.rebound |= assigned([item])

    def take_over(self, block, late=0):
        """The statements that give ``block`` what it reads from before (None: cannot);
        ``late``: the phase of the schedule's tail that it is a part of (0: none)."""
        defined = set(self.top) | self.rebound
        replay, spills = {}, {}
        needed, todo = set(), sorted(exposed(block) & defined)
        while todo:
            name = todo.pop()
            if name in needed:
                continue
            needed.add(name)
            defs = self.top.get(name, [])
            value = defs[0].value if len(defs) == 1 and name not in self.rebound else None
            if name in self.e.shapes or (value is not None and _LITERAL.match(value)):
                if value is None:
                    return None  # an array variable rebound: which array it is depends on the run
                replay[name] = defs[0]
                todo += sorted(names([value]) & defined)
            elif name[0] == "v" and name[1:].isdigit() and int(name[1:]) < len(self.nodes) \
                    and self.nodes[int(name[1:])].shape == ():
                if name not in self.spills:
                    spills[name] = self.nodes[int(name[1:])].dtype.name
            else:
                return None
        self.spills.update(spills)
        if late:
            self.late.update((name, late) for name in spills)
        chosen = {id(replay[n]) for n in needed if n in replay}
        return ([item for item in self.before if id(item) in chosen]
                + [Assign(n, f"sp{n}[0]") for n in sorted(needed) if n in self.spills])

    def allocate(self):
        """A slot of shared scratch for each spilled value (once the parts are settled), in
        the order of their nodes; those first read by the tail last, by the phase of their
        first reader, the latest node first: a term an edit adds to the tail (a penalty on the
        parameters) reads the parameters, or a value the program computed early on that it
        now shares (CG's first residual norm and an L2 penalty on the source are one sum),
        whose slot then comes after those of the program's own results, which keep theirs.
        Values the tail's last phases compute (``schedule.tail_phases``: 2 and 3, a penalty's
        value) come after all others, for the same reason."""
        def order(item):
            node = int(item[0][1:])
            late = self.late.get(item[0], 0)
            return self.e.phase.get(node, 0) >= 2, late, -node if late else node
        for name, dtype in sorted(self.spills.items(), key=order):
            self.e.slots.append((f"sp{name}", dtype, self.e.plan.append(dtype, 1), (1,)))

    def stores(self, items):
        """The statements that keep the spilled values ``items`` bind for the parts after."""
        return [f"sp{n}[0] = {n}" for n in sorted(assigned(items) & set(self.spills))]


def phased(e, graph, first, tail_lines):
    """The bodies of a threaded entry's phases, each compiled as a function of its own (a
    part; ``native.sequence`` calls the one ``ctl[0]`` names). Phase 0 runs what comes before
    the tile loop; phase 1, on thread ``ctl[1]``, runs tiles from row ``ctl[2]`` to ``ctl[3]``
    with that thread's scratch; phase 2 combines the threads' partials and runs the rest,
    in two parts where the last phase of the schedule's tail begins after at least
    ``tail_lines`` lines of it (a penalty on the parameters then recompiles that alone). What
    a later part reads from an earlier one is handed over (``Handover``). Returns ``(bodies,
    threads.Phases)``, or None if something else would cross (an array variable rebound in a
    loop)."""
    a, b = e.split
    pre, loop, post = e.code.items[:a], e.code.items[a:b], e.code.items[b:]
    post_assigned = {item.targets[0] for item in assignments(post) if len(item.targets) == 1}
    if (assigned(loop) & names(post)) - post_assigned:
        return None
    handover = Handover(e, graph)
    handover.add(pre)
    take_over = handover.take_over
    into_loop = take_over(loop)
    head, tail, into_tail = post, [], []
    starts = [k - b for phase, k in e.phase_items.items() if phase and b < k < len(e.code.items)]
    if starts and len(render(post[:max(starts)])) >= tail_lines:
        head, tail = post[:max(starts)], post[max(starts):]
    into_post = take_over(head)
    if tail:
        handover.add(head)
        into_tail = take_over(tail, late=max(
            phase for phase, k in e.phase_items.items() if k == b + len(head)))
    if into_loop is None or into_post is None:
        return None
    if into_tail is None:  # the tail cannot be handed what it reads: one part after the loop
        return phased(e, graph, first, tail_lines=math.inf)
    handover.allocate()
    shared = sorted(n for n in e.plan.size if not n.endswith(PRIVATE))
    private = private_buffers(e)
    base = first + len(shared)

    def pointers(thread):
        """The start of each per-thread buffer (the running thread's if ``thread`` is None)."""
        index = (lambda k: f"{base + k} + {len(private)} * thread") if thread is None else \
            (lambda k: base + thread * len(private) + k)
        return {_thread_buffer(k, thread): argument(index(k), Named(dtype_of(name)))
                for k, name in enumerate(private)}

    named_loop = names(loop)
    own = views([(var, _thread_buffer(private.index(name), None), start)
                  for var, name, start, _ in e.slots if name in private and var in named_loop],
                 pointers(None))
    parts = views([(var, _thread_buffer(private.index(name), t), start)
                    for var, name, start, _, t in e.partials],
                   {k: v for t in range(e.threads) for k, v in pointers(t).items()})
    bodies = [pre + handover.stores(pre), [Assign("thread", "ctl[1]")] + own + into_loop + loop,
              into_post + parts + head + handover.stores(head)]
    if tail:  # (with the partials' views if it reads one)
        read = names(tail) & {item.targets[0] for item in parts}
        bodies.append(into_tail + (parts if read else []) + tail)
    t = e.threaded
    phases = threads.Phases([(0, 0, 0, 0)], [(1, k, lo, hi) for k, (lo, hi) in enumerate(
        threads.blocks(t.extent, t.tile, e.threads))], [(2, 0, 0, 0)],
        blas=e.tile_blas > threads.SERIAL_BLAS)
    return bodies, phases
