"""The statement tree of a generated entry, built by the emitter and rendered to source last.

An entry's body is a list of statements: a plain string (a store, a call, ``break``: it binds
no name), an ``Assign`` (binds its targets), a counted ``Loop`` or a ``Block`` (``if``,
``elif``, ``else``, ``while``) holding a body of its own. Loop structure and the names each
statement binds are fields of the tree, so what needs them (the phases of a threaded entry,
the form each loop is rendered in) reads them instead of parsing generated text.

Rendering (``render``) chooses each loop's form: a counted loop over literal bounds (or a
threaded entry's control row) is ``i = a`` / ``while i < b:`` / ``i += step``, and a loop of
one iteration is ``i = 0`` and its body. Numba lowers ``range`` through its iterator protocol
(a range object, ``iternext``, a pair per step): the while form is a fifth less compile time
for a typical entry, and no slower (a scan's step loop ran twice as fast). An innermost loop
binds each element offset it computes more than once to a local first (``bound_offsets``).
"""

import functools
import itertools
import re

__all__ = ["Assign", "Loop", "Block", "Code", "render", "walk", "assignments", "assigned",
           "names", "names_in", "text", "exposed"]


class Assign:
    """``targets = value``: binds the names ``targets`` (one, or several for a tuple)."""

    __slots__ = ("targets", "value")

    def __init__(self, targets, value):
        self.targets = (targets,) if isinstance(targets, str) else tuple(targets)
        self.value = value

    def __str__(self):
        return f"{', '.join(self.targets)} = {self.value}"


class Loop:
    """``for var in range(start, stop, step)``; bounds are integers or expressions."""

    __slots__ = ("var", "start", "stop", "step", "body")

    def __init__(self, var, stop, start=0, step=1):
        self.var, self.start, self.stop, self.step = var, start, stop, step
        self.body = []

    def once(self):
        return self.step == 1 and isinstance(self.start, int) and self.stop == self.start + 1

    def counted(self):
        """Whether it renders as a ``while`` loop: literal bounds, or the control row's."""
        return isinstance(self.step, int) and all(
            isinstance(b, int) or _CONTROL.match(b) for b in (self.start, self.stop))


_CONTROL = re.compile(r"^ctl\[\d\]$")


class Block:
    """A compound statement other than a counted loop: ``header`` (``if q:``, ``else:``,
    ``while True:``) and its body; ``loops`` tells whether it repeats its body."""

    __slots__ = ("header", "body", "loops")

    def __init__(self, header, body=None, loops=False):
        self.header, self.loops = header, loops
        self.body = [] if body is None else body


class Code:
    """Builds a statement list from statements added at a nesting depth (1: the entry's
    body): a statement goes into the body of the last ``Loop`` or ``Block`` added one level
    up, so an emitter writes a loop's header and then its body, as in source."""

    def __init__(self):
        self.items = []
        self._open = [self.items]  # _open[d - 1]: where statements of depth d go

    def add(self, statement, depth):
        if not 1 <= depth <= len(self._open):
            raise AssertionError(f"a statement at depth {depth} under no block: {statement}")
        del self._open[depth:]
        self._open[depth - 1].append(statement)
        if isinstance(statement, (Loop, Block)):
            self._open.append(statement.body)


def walk(items):
    """Every statement of ``items``, nested ones included, in source order."""
    for item in items:
        yield item
        if isinstance(item, (Loop, Block)):
            yield from walk(item.body)


def assignments(items):
    """The ``Assign`` statements of ``items``, nested ones included."""
    return [item for item in walk(items) if isinstance(item, Assign)]


def assigned(items):
    """The names the assignments of ``items`` bind, nested ones included."""
    return {name for item in assignments(items) for name in item.targets}


_NAME = re.compile(r"[A-Za-z_]\w*")


def names(items):
    """Every name ``items`` mention (read or bound)."""
    return names_in(text(items))


def names_in(written):
    """Every name in ``written`` (``text``'s)."""
    return set(_NAME.findall(written))


def text(items):
    """The statements of ``items`` (nested ones included) as one string that tells apart any
    two lists that render or transform differently: each statement's text, marked by its kind
    (a loop's counter and bounds, a block's header), a nested body closed by a mark."""
    out = []
    _text(items, out)
    return "\n".join(out)


def _text(items, out):
    for item in items:
        if isinstance(item, Loop):
            out.append(f"\x01{item.var} {item.start!r} {item.stop!r} {item.step!r}")
            _text(item.body, out)
            out.append("\x04")
        elif isinstance(item, Block):
            out.append(("\x02" if item.loops else "\x03") + item.header)
            _text(item.body, out)
            out.append("\x04")
        elif isinstance(item, Assign):  # (its targets apart: each is a name it binds)
            out.append("\x05" + "\x07".join(item.targets) + f" = {item.value}")
        else:
            out.append(item if isinstance(item, str) else f"\x06{type(item).__name__} {item}")


def exposed(items, bound=frozenset()):
    """The names ``items`` may read before binding them (reads of values from before
    ``items``), given the names ``bound`` already. Only top-level assignments bind for the
    statements after them: a loop may not run and a block may not be taken, so what they bind
    counts inside them only (in order: a loop-carried read is exposed)."""
    found = set()
    _exposed(items, set(bound), found)
    return found


@functools.lru_cache(maxsize=1 << 13)
def _names_of(written):
    """The names in one statement's text: a part's statements are read when it is cut
    (``parts.split``) and again when it is finished (a few thousand for a large program)."""
    return frozenset(_NAME.findall(written))


def _exposed(items, bound, found):
    """``exposed``'s walk: ``bound`` grows by what ``items`` bind and is restored on return
    (one set for the whole tree: a copy per nested loop was quadratic in a deep entry)."""
    added = []

    def read(written):
        found.update(_names_of(written).difference(bound))

    def bind(name):
        if name not in bound:
            bound.add(name)
            added.append(name)

    for item in items:
        if isinstance(item, Assign):
            read(item.value)
            for name in item.targets:
                bind(name)
        elif isinstance(item, Loop):
            read(f"{item.start} {item.stop} {item.step}")
            counter = item.var not in bound
            bound.add(item.var)
            _exposed(item.body, bound, found)
            if counter:
                bound.discard(item.var)
        elif isinstance(item, Block):
            read(item.header)
            _exposed(item.body, bound, found)
        else:
            read(str(item))
    for name in added:
        bound.discard(name)


def _repeats(items):
    """Whether rendering ``items`` gives a loop (``Loop.once`` loops render as their body)."""
    return any(isinstance(item, Loop) and not item.once()
               or isinstance(item, Block) and item.loops for item in walk(items))


def render(items, depth=1):
    """The source lines of ``items`` at ``depth`` (4 spaces each)."""
    return _render(items, depth)[0]


def _render(items, depth):
    """``(lines, offsets)``: the lines, and the offset locals ``bound_offsets`` bound in them."""
    pad, lines, offsets = "    " * depth, [], set()
    for item in items:
        if isinstance(item, Loop):
            more, bound = _render_loop(item, depth)
            lines += more
            offsets |= bound
        elif isinstance(item, Block):
            body, bound = _render(item.body, depth + 1)
            lines += [pad + item.header] + (body or [pad + "    pass"])
            offsets |= bound
        else:
            lines.append(pad + str(item))
    return lines, offsets


def _render_loop(loop, depth):
    pad = "    " * depth
    inner = depth if loop.once() else depth + 1
    body, offsets = _render(loop.body, inner)
    if not _repeats(loop.body):
        counters = {item.var for item in walk(loop.body) if isinstance(item, Loop)}
        body, bound = bound_offsets(body, "    " * inner, assigned(loop.body) | counters | offsets)
        offsets |= bound
    var = loop.var
    if loop.once():
        return [f"{pad}{var} = {loop.start}"] + body, offsets
    if not loop.counted():
        bounds = ([] if loop.start == 0 and loop.step == 1 else [loop.start]) + [loop.stop] \
            + ([] if loop.step == 1 else [loop.step])
        return [f"{pad}for {var} in range({', '.join(map(str, bounds))}):"] + body, offsets
    test = "<" if loop.step > 0 else ">"
    return ([f"{pad}{var} = {loop.start}", f"{pad}while {var} {test} {loop.stop}:"] + body
            + [f"{pad}    {var} += {loop.step}"]), offsets


_INDEX = re.compile(r"\[([^\[\]]+)\]")
_LOOP_INDEX = re.compile(r"^(?:\d+ \* )?(?:i\d+|r)(?: \+ (?:\d+ \* )?(?:i\d+|r|\d+))*$")


def bound_offsets(body, indent, bound):
    """An innermost loop's rendered ``body`` with each element offset that it computes more
    than once (``v5[32 * i0 + i1]``, ``v6[r + i0]``) bound to a local ``o<k>`` first: Numba
    types and lowers every occurrence of the arithmetic (LLVM would merge them later).
    Offsets are of loop counters only, and of none of the names ``bound`` in the body.
    Returns the lines and the names of the new locals."""
    counts = {}
    for line in body:
        for index in _INDEX.findall(line):
            if "+" in index and _LOOP_INDEX.match(index) and not bound & set(_NAME.findall(index)):
                counts[index] = counts.get(index, 0) + 1
    free = (f"o{k}" for k in itertools.count() if f"o{k}" not in bound)
    local = {index: next(free) for index, n in counts.items() if n > 1}
    if not local:
        return body, set()
    pattern = re.compile(r"\[(" + "|".join(map(re.escape, local)) + r")\]")
    return ([f"{indent}{name} = {index}" for index, name in local.items()]
            + [pattern.sub(lambda m: f"[{local[m.group(1)]}]", line) for line in body]), \
        set(local.values())
