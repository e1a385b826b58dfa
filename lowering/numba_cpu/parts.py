"""An entry's statements cut into parts, each compiled as an entry of its own.

Numba's front end and typing, its lowering and LLVM's optimisation all cost more than linearly
in the size of one function (liveness over every block and variable, alias queries over every
load and store), and a deep program's entry is thousands of lines. Cut at top-level statements
into parts of about ``PART_LINES`` rendered lines, each part is a function of the same argument
tuple: it reads what earlier parts computed through a ``passes.Handover`` (views replayed,
0-d values through spill slots of the shared scratch), so the parts called in order compute
what the whole entry would. Each part is compiled, cached and linked on its own
(numba_cpu/__init__.py), and a part equal to one compiled before (the unchanged first layers
of an edited program; everything before the schedule's tail when the edit is a term there,
such as a penalty on the parameters) is not compiled again.

A part is written as the entry would be, with its program's names, argument indices and
scratch offsets. Read from a table of integers, with its locals renamed in order (session
12), the offsets made every part the same text wherever its program put things, but LLVM
could then not tell the views of one scratch buffer apart: it versioned loops with run-time
overlap checks, and the deep 2D PINN's parts cost 50% more CPU to compile (3.0 against 2.0
s) for one more part shared after an edit (4 of 11, not 3; renaming alone shares none more).
"""

import hashlib
import re

from .passes import Handover
from .statements import Block, render

__all__ = ["PART_LINES", "TAIL_HEAD_LINES", "split", "Finished", "digest"]

# How many statements later a cut is tried where what follows it cannot be handed over.
SHIFTS = 4
# Rendered lines per part, about; an entry below twice this is cut only before its tail (if
# at least a quarter of this comes before it) and before the tail's last phase (if at least
# TAIL_HEAD_LINES of its part come first): a part costs a few ms of LLVM and linking of its
# own, and a cut a store and a load per value crossing it.
PART_LINES = 160
# The last phase of an entry's tail (a threaded entry's: of its work after the tile loop) is
# a part of its own where at least this many lines of its part come first: an added term then
# recompiles the last part only (mlp_hvp's edit: 64 new lines, not 112).
TAIL_HEAD_LINES = PART_LINES // 16


def split(e, graph, items, part_lines=None):
    """``items`` (an entry's top-level statements) as a list of part bodies, each with the
    statements that hand over what it reads from the parts before it first and the stores
    of what the parts after it read last; ``[items]`` for an entry too short to cut or with
    no place to cut (a short entry is cut before its tail and before its tail's last phase:
    an added loss term then recompiles the last part only)."""
    size = part_lines or PART_LINES
    lengths = [len(render([item])) for item in items]
    phases = sorted(k for phase, k in e.phase_items.items() if phase and 0 < k < len(items))
    if sum(lengths) < 2 * size:  # a short entry: its tail alone, after a long enough head
        cuts = [k for k in phases[:1] if sum(lengths[:k]) >= size // 4]
        # and the tail's last phase alone (an added penalty's), after enough of the tail
        cuts += [k for k in phases[1:] if sum(lengths[cuts[-1] if cuts else 0:k])
                 >= TAIL_HEAD_LINES]
        if not cuts:
            return [items]
    else:
        cuts = [k for k in _candidate_cuts(items, lengths, size, phases)
                if not _continues(items[k])]
    first = {k: k for k in cuts}  # where each cut was chosen
    while True:
        handover = Handover(e, graph)
        bounds = list(zip([0] + cuts, cuts + [len(items)]))
        intros, failed = [], None
        for k, (a, b) in enumerate(bounds):
            intro = [] if k == 0 else handover.take_over(
                items[a:b], late=sum(1 for start in phases if start <= a))
            if intro is None:
                failed = k
                break
            intros.append(intro)
            handover.add(items[a:b])
        if failed is None:
            break
        cut = cuts[failed - 1]
        end = cuts[failed] if failed < len(cuts) else len(items)
        if cut not in phases and cut + 1 < end and cut + 1 - first[cut] <= SHIFTS \
                and not _continues(items[cut + 1]):
            cuts[failed - 1] = cut + 1  # one statement later (after a loop's copies out)
            first[cut + 1] = first.pop(cut)
        else:
            cuts.pop(failed - 1)  # that part joins the one before it
        if not cuts:
            return [items]
    handover.allocate()
    return [intro + items[a:b] + handover.stores(items[a:b])
            for intro, (a, b) in zip(intros, bounds)]


def _continues(item):
    """Whether ``item`` continues the statement before it (``elif``, ``else``)."""
    return isinstance(item, Block) and item.header.startswith(("elif", "else"))


def _candidate_cuts(items, lengths, size, phases=()):
    """Where to cut: after a statement whose text (``_canonical``) hashes to 0 mod 4 once a
    part has half of ``size`` lines, and after any statement once it has twice ``size``; none
    that would leave the last part under half. Cuts chosen by content fall at the same
    statements in an edited program as in the original. Before each item of ``phases`` (the
    first of each phase of the schedule's tail, which an added loss term changes) there is
    always a cut, and none in the half part before it but another phase's."""
    cuts, run, left = [], 0, sum(lengths)
    for k, (item, n) in enumerate(zip(items, lengths)):
        if k in phases:
            if cuts and cuts[-1] not in phases and sum(lengths[cuts[-1]:k]) < size // 2:
                cuts.pop()
            cuts.append(k)
            run = 0
        run += n
        left -= n
        if left < size // 2:
            if phases and k < phases[-1]:
                continue
            break
        if run >= 2 * size or (run >= size // 2 and _marks_a_cut(item)):
            cuts.append(k + 1)
            run = 0
    return cuts


def _marks_a_cut(item):
    text = "\n".join(_canonical(render([item])))
    return hashlib.blake2b(text.encode(), digest_size=2).digest()[0] % 4 == 0


_BOUND = re.compile(r"^\s*(?:for (\w+) in |([\w, ]+?) (?:=|\+=|-=) )")
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


def _canonical(lines):
    """A statement's rendered ``lines`` with its local variables renamed ``x0``, ``x1``... in
    the order they first appear: whether it marks a cut does not depend on what its
    program's nodes are called."""
    bound = set()
    for line in lines:
        match = _BOUND.match(line)
        if match:
            bound.update(name.strip() for name in (match.group(1) or match.group(2)).split(","))
    bound -= {"args", "ctl", "thread"}  # a threaded phase's control row keeps its name
    names = {}
    for line in lines:
        for word in _WORD.findall(line):
            if word in bound and word not in names:
                names[word] = f"x{len(names)}"
    if not names:
        return lines
    return [_WORD.sub(lambda m: names.get(m.group(0), m.group(0)), line) for line in lines]


class Finished:
    """Finished parts (``codegen._finish``: rendered lines and work estimate) by the digest of
    everything finishing one reads, ``known`` from a program generated before (programs.py
    keeps them by the program's inputs and outputs): the parts an edit left alone are not run
    through the passes and rendered again, a third of generating a PINN's entry. ``used``:
    this program's, kept for the next edit."""

    def __init__(self, known=()):
        self.known, self.used = dict(known), {}

    def get(self, key, finish):
        """The finished part ``key``: known, or ``finish()``."""
        found = self.known.get(key)
        self.used[key] = found = finish() if found is None else found
        return found


def digest(*texts):
    """The key of a part to finish from the ``texts`` that say all it reads."""
    return hashlib.blake2b("\x00".join(texts).encode(), digest_size=16).hexdigest()
