"""An entry's statements cut into parts, each compiled as an entry of its own.

Numba's front end and typing, its lowering and LLVM's optimisation all cost more than linearly
in the size of one function (liveness over every block and variable, alias queries over every
load and store), and a deep program's entry is thousands of lines. Cut at top-level statements
into parts of about ``PART_LINES`` rendered lines, each part is a function of the same argument
tuple: it reads what earlier parts computed through a ``passes.Handover`` (views replayed,
0-d values through spill slots of the shared scratch), so the parts called in order compute
what the whole entry would. Each part is compiled, cached and linked on its own
(numba_cpu/__init__.py), and a part equal to one compiled before (the same layer in another
program, the unchanged half of an edited one) is not compiled again.
"""

import hashlib
import re

from .passes import Handover
from .statements import Block, render

__all__ = ["PART_LINES", "split", "canonical"]

# Rendered lines per part, about; an entry below twice this is not cut (a part costs Numba
# ~30 ms of its own, and a cut a store and a load per value crossing it).
PART_LINES = 160


def split(e, graph, items, part_lines=None):
    """``items`` (an entry's top-level statements) as a list of part bodies, each with the
    statements that hand over what it reads from the parts before it first and the stores
    of what the parts after it read last; ``[items]`` for an entry too short to cut or with
    no place to cut."""
    size = part_lines or PART_LINES
    lengths = [len(render([item])) for item in items]
    if sum(lengths) < 2 * size:
        return [items]
    cuts = [k for k in _candidate_cuts(items, lengths, size) if not _continues(items[k])]
    while True:
        handover = Handover(e, graph)
        bounds = list(zip([0] + cuts, cuts + [len(items)]))
        intros, failed = [], None
        for k, (a, b) in enumerate(bounds):
            intro = [] if k == 0 else handover.take_over(items[a:b])
            if intro is None:
                failed = k
                break
            intros.append(intro)
            handover.add(items[a:b])
        if failed is None:
            break
        cuts.pop(failed - 1)  # that part joins the one before it
        if not cuts:
            return [items]
    handover.allocate()
    return [intro + items[a:b] + handover.stores(items[a:b])
            for intro, (a, b) in zip(intros, bounds)]


def _continues(item):
    """Whether ``item`` continues the statement before it (``elif``, ``else``)."""
    return isinstance(item, Block) and item.header.startswith(("elif", "else"))


def _candidate_cuts(items, lengths, size):
    """Where to cut: after a statement whose canonical text hashes to 0 mod 4 once a part has
    half of ``size`` lines, and after any statement once it has twice ``size``; none that
    would leave the last part under half. Cuts chosen by content fall at the same statements
    in an edited program after the edit as before it, so its later parts are the same text
    (``canonical``) and come from the cache."""
    cuts, run, left = [], 0, sum(lengths)
    for k, (item, n) in enumerate(zip(items, lengths)):
        run += n
        left -= n
        if left < size // 2:
            break
        if run >= 2 * size or (run >= size // 2 and _marks_a_cut(item)):
            cuts.append(k + 1)
            run = 0
    return cuts


def _marks_a_cut(item):
    text = "\n".join(canonical(render([item]))[0])
    return hashlib.blake2b(text.encode(), digest_size=2).digest()[0] % 4 == 0


_ARG = re.compile(r"_arg\(args, (\d+), (\d+), ")
_OFFSET = re.compile(r"_offset\((\w+), (\d+)\)")
_BOUND = re.compile(r"^\s*(?:for (\w+) in |([\w, ]+?) (?:=|\+=|-=) )")
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def canonical(lines):
    """``(lines, table)``: a part's rendered ``lines`` in a form that does not depend on where
    its program put things, and the integers taken out of it. Which arguments it reads and at
    which offsets of the scratch buffers (``_arg(args, k, start, ...)``, ``_offset(p, n)``)
    become ``tab[i]``, ``table[i]`` being the integer; its local variables are renamed
    ``x0``, ``x1``... in the order they first appear. Two parts computing the same thing on
    arrays of the same shapes (a layer of an edited program) are then the same text."""
    table = []

    def slot(value):
        table.append(int(value))
        return f"tab[{len(table) - 1}]"

    lines = [_OFFSET.sub(lambda m: f"_offset({m.group(1)}, {slot(m.group(2))})",
                         _ARG.sub(lambda m: f"_arg(args, {slot(m.group(1))}, "
                                            f"{slot(m.group(2))}, ", line))
             for line in lines]
    bound = set()
    for line in lines:
        match = _BOUND.match(line)
        if match:
            bound.update(name.strip() for name in (match.group(1) or match.group(2)).split(","))
    bound -= {"args", "tab"}
    names = {}
    for line in lines:
        for word in _WORD.findall(line):
            if word in bound and word not in names:
                names[word] = f"x{len(names)}"
    if names:
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
        lines = [pattern.sub(lambda m: names[m.group(1)], line) for line in lines]
    return lines, table
