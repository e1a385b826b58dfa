"""Passes over an entry's generated lines, and the phases of a threaded entry.

They read the text back: ``while_loops`` rewrites counted ``for`` loops (and binds each
innermost loop's repeated offsets to locals, ``bound_offsets``), ``phased`` splits an entry
around its threaded tile loop, ``views`` writes the prologue's scratch views, and
``check_integers`` refuses integers beyond int64.
"""

import itertools
import re

from ..loopnest.buffers import PRIVATE, dtype_of
from . import threads
from .source import Named, argument

__all__ = ["check_integers", "views", "while_loops", "phased", "private_buffers"]


def check_integers(lines):
    """Compiled code computes with int64: a larger integer (an extent, an offset) is refused
    here with a clear error, not by Numba's type inference."""
    for line in lines:
        for literal in re.findall(r"\b\d{19,}\b", line):
            if int(literal) >= 2**63:
                raise ValueError(f"the integer {literal} in this program does not fit the int64 "
                                 "arithmetic of compiled code")


def views(slots, pointers):
    """Lines binding each ``(variable, buffer, offset)`` of ``slots`` to the element ``offset``
    of a scratch buffer: ``pointers[buffer]`` (an ``_arg`` of its start) is bound once, to the
    name ``buffer``; a slot is an ``_offset`` of it, or an alias of the variable bound to the
    same slot before (an ``_arg`` costs Numba more to type than either)."""
    lines, first, bound = [], {}, set()
    for var, buffer, start in slots:
        if buffer not in bound:
            bound.add(buffer)
            lines.append(f"{buffer} = {pointers[buffer]}")
        same = first.setdefault((buffer, start), var)
        if same == var:
            same = f"_offset({buffer}, {start})" if start else buffer
        lines.append(f"{var} = {same}")
    return lines


_RANGE = re.compile(r"^( *)for (\w+) in range\(([^()]*)\):$")
_BOUND = re.compile(r"^(-?\d+|ctl\[\d\])$")


def while_loops(lines):
    """``lines`` with each ``for i in range(a, b, step)`` over literal bounds (or a threaded
    entry's control row) written as ``i = a`` / ``while i < b:`` / ``i += step``, and a loop
    of one iteration as ``i = 0`` and its body. Numba lowers ``range`` through its iterator
    protocol (a range object, ``iternext``, a pair per step): the while form is a fifth less
    compile time for a typical entry, and no slower (a scan's step loop ran twice as fast)."""
    out, k = [], 0
    while k < len(lines):
        line = lines[k]
        m = _RANGE.match(line)
        k += 1
        if m is None:
            out.append(line)
            continue
        indent, var, bounds = m.groups()
        end = k
        while end < len(lines) and (not lines[end].strip()
                                    or len(lines[end]) - len(lines[end].lstrip()) > len(indent)):
            end += 1
        body = while_loops(lines[k:end])
        if not any(_LOOP.match(b) for b in body):
            body = bound_offsets(body, indent + "    ")
        parts = [b.strip() for b in bounds.split(",")]
        start, stop, step = ((["0"] if len(parts) == 1 else []) + parts + ["1"])[:3]
        if not all(_BOUND.match(b) for b in (start, stop, step)) or step.startswith("ctl"):
            out += [line] + body
        elif (start, stop, step) == ("0", "1", "1"):
            out += [f"{indent}{var} = 0"] + [b[4:] for b in body]
        else:
            test = "<" if int(step) > 0 else ">"
            out += [f"{indent}{var} = {start}", f"{indent}while {var} {test} {stop}:"] + body
            out.append(f"{indent}    {var} += {step}")
        k = end
    return out


_LOOP = re.compile(r"^ *(?:for|while) ")
_INDEX = re.compile(r"\[([^\[\]]+)\]")
_LOOP_INDEX = re.compile(r"^(?:\d+ \* )?(?:i\d+|r)(?: \+ (?:\d+ \* )?(?:i\d+|r|\d+))*$")


def bound_offsets(body, indent):
    """An innermost loop ``body`` with each element offset that it computes more than once
    (``v5[32 * i0 + i1]``, ``v6[r + i0]``) bound to a local ``o<k>`` first: Numba types and
    lowers every occurrence of the arithmetic (LLVM would merge them later). Offsets are of
    loop counters only, and of none that the body assigns."""
    assigned = set()  # a loop of one iteration is its body after "i2 = 0": not from the start
    for line in body:
        m = _ASSIGNED.match(line)
        if m is not None:
            assigned.update(n.strip() for n in m.group(2).split(","))
    counts = {}
    for line in body:
        for index in _INDEX.findall(line):
            if "+" in index and _LOOP_INDEX.match(index) \
                    and not assigned & set(re.findall(r"[A-Za-z_]\w*", index)):
                counts[index] = counts.get(index, 0) + 1
    # names the body does not bind already (a one-iteration loop lifted into it binds its own)
    free = (f"o{k}" for k in itertools.count() if f"o{k}" not in assigned)
    names = {index: next(free) for index, n in counts.items() if n > 1}
    if not names:
        return body
    pattern = re.compile(r"\[(" + "|".join(map(re.escape, names)) + r")\]")
    return ([f"{indent}{name} = {index}" for index, name in names.items()]
            + [pattern.sub(lambda m: f"[{names[m.group(1)]}]", line) for line in body])


def private_buffers(e):
    return sorted(n for n in e.plan.size if n.endswith(PRIVATE))


_ASSIGNED = re.compile(r"^( *)([A-Za-z_][\w, ]*?) (?:[-+*/]?=) ")
_LITERAL = re.compile(r"^(?:np\.float32\()?\(?-?(?:[\d.e+-]+|math\.inf|math\.nan|True|False)\)?\)?$")


def _thread_buffer(k, thread):
    """The name of the pointer to per-thread buffer ``k`` (of the running thread if None)."""
    return f"wt{k}" if thread is None else f"wt{k}_{thread}"


def phased(e, graph, first):
    """The body of a threaded entry: ``ctl[0]`` picks the phase. Phase 0 runs what comes before
    the tile loop; phase 1, on thread ``ctl[1]``, runs tiles from row ``ctl[2]`` to ``ctl[3]``
    with that thread's scratch; phase 2 combines the threads' partials and runs the rest. What
    a later phase reads from an earlier one is taken over: views again, a literal again,
    any other 0-d value through a slot of shared scratch. Returns ``(lines, control rows)``,
    or None if something else would cross (an array variable rebound in a loop)."""
    nodes = graph.nodes
    a, b = e.split
    pre, loop, post = e.lines[:a], e.lines[a:b], e.lines[b:]
    top, rebound = {}, set()
    for line in pre:
        m = _ASSIGNED.match(line)
        if m is None:
            continue
        names = [n.strip() for n in m.group(2).split(",")]
        if m.group(1) == "    " and len(names) == 1:
            top.setdefault(names[0], []).append(line)
        else:
            rebound.update(names)
    assigned_loop = set()
    for line in loop:
        m = _ASSIGNED.match(line)
        if m is not None:
            assigned_loop.update(n.strip() for n in m.group(2).split(","))
    words = lambda block: set(re.findall(r"[A-Za-z_]\w*", "\n".join(block)))
    post_assigned = {m.group(2) for m in map(_ASSIGNED.match, post) if m}
    if (assigned_loop & words(post)) - post_assigned:
        return None
    defined = set(top) | rebound
    replay, spills = {}, {}   # name -> its one line; name -> (dtype, offset of its slot)

    def take_over(block):
        """The lines that give ``block`` what it reads from before the loop (None: cannot)."""
        needed, todo = set(), sorted(words(block) & defined)
        while todo:
            name = todo.pop()
            if name in needed:
                continue
            needed.add(name)
            defs = top.get(name, [])
            value = defs[0].split(" = ", 1)[1] if len(defs) == 1 and name not in rebound else None
            if name in e.shapes or (value is not None and _LITERAL.match(value)):
                if value is None:
                    return None  # an array variable rebound: which array it is depends on the run
                replay[name] = defs[0]
                todo += sorted(words([value]) & defined)
            elif name[0] == "v" and name[1:].isdigit() and int(name[1:]) < len(nodes) \
                    and nodes[int(name[1:])].shape == ():
                if name not in spills:
                    dtype = nodes[int(name[1:])].dtype.name
                    spills[name] = (dtype, e.plan.append(dtype, 1))
            else:
                return None
        lines = [line for line in pre if line in {replay[n] for n in needed if n in replay}]
        return lines + [f"    {n} = sp{n}[0]" for n in sorted(needed) if n in spills]

    into_loop, into_post = take_over(loop), take_over(post)
    if into_loop is None or into_post is None:
        return None
    shared = sorted(n for n in e.plan.size if not n.endswith(PRIVATE))
    private = private_buffers(e)
    base = first + len(shared)

    def pointers(thread):
        """The start of each per-thread buffer (the running thread's if ``thread`` is None)."""
        index = (lambda k: f"{base + k} + {len(private)} * thread") if thread is None else \
            (lambda k: base + thread * len(private) + k)
        return {_thread_buffer(k, thread): argument(index(k), Named(dtype_of(name)))
                for k, name in enumerate(private)}

    named_loop = words(loop)
    own = views([(var, _thread_buffer(private.index(name), None), start)
                  for var, name, start, _ in e.slots if name in private and var in named_loop],
                 pointers(None))
    parts = views([(var, _thread_buffer(private.index(name), t), start)
                    for var, name, start, _, t in e.partials],
                   {k: v for t in range(e.threads) for k, v in pointers(t).items()})
    own, parts = (["    " + line for line in block] for block in (own, parts))
    for name, (dtype, start) in spills.items():
        e.slots.append((f"sp{name}", dtype, start, (1,)))
    indent = lambda block: ["    " + line for line in block] or ["        pass"]
    stores = [f"    sp{n}[0] = {n}" for n in sorted(spills)]
    lines = (["    if ctl[0] == 0:"] + indent(pre + stores)
             + ["    elif ctl[0] == 1:", "        thread = ctl[1]"] + indent(own + into_loop + loop)
             + ["    else:"] + indent(into_post + parts + post))
    t = e.threaded
    phases = ([(0, 0, 0, 0)], [(1, k, lo, hi) for k, (lo, hi) in
                               enumerate(threads.blocks(t.extent, t.tile, e.threads))], [(2, 0, 0, 0)])
    return lines, phases
