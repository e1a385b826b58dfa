"""Generates the source of one flat Numba C entry per graph.

The entry takes one tuple of arrays (see lowering/native.py): the inputs, the result arrays the
caller allocated, one scratch buffer per dtype (a threaded entry's: then each thread's own
buffers and its control row) and the non-scalar constants, in that order: an edit that adds a
constant (a term's data) moves no index a part of the original reads.
Every array is a typed pointer to its first element, indexed with its row-major offset
(shapes are static; ``Emitter.at``): Numba types and lowers that as a load or store, where an
array object would cost its getitem templates, an array struct and wraparound code per index.
Only the runtime's array kernels get ``carray`` views. Fused groups become loop nests, 0-d
values become scalar locals, whole-array operations become loops or runtime kernels. Nothing
is allocated: every array is a result, a scratch slot (lowering/loopnest/buffers.py) or a view
of one, so the machine code needs no Numba runtime and loads without Numba.

The modules: ``emitter.py`` (the state of a generation), ``groups.py`` (fused loop nests),
``tiles.py`` (tile loops and threads' partials), the lowering table ``table.py`` filled by
``structural.py``, ``linalg.py`` and ``regions.py``, ``statements.py`` (the statement tree
the emitter builds, rendered last) and ``passes.py`` (the phases of a threaded entry, the
prologue's views).
"""

from quabla.errors import UnsupportedOperationError
from ..loopnest.buffers import PRIVATE, dtype_of
from ..loopnest.schedule import fused, tail_last
from . import linalg, regions, structural  # noqa: F401  (they fill the lowering table)
from . import parts
from .emitter import Emitter
from .linalg import BLAS_THRESHOLD
from .passes import check_integers, phased, private_buffers, propagate, views
from .source import Named, argument
from .statements import Assign, exposed, names_in, render, text
from .table import LOWERINGS
from .workload import quick_parts, work

__all__ = ["generate", "check_supported", "lowers", "FUNCTION_NAME", "KERNELS", "BLAS_THRESHOLD"]

FUNCTION_NAME = "quabla_entry"
# the array kernels (kernels.py) the entry may call on carray views
KERNELS = ("_sort", "_slogdet", "_eigh", "_svd", "_qr", "_eigh_lapack", "_svd_lapack",
           "_slogdet_lapack", "_solve_lapack")


def lowers(op):
    """Whether the entry can compute ``op``: fused by its kind, or by its table entry."""
    return op in ("input", "constant") or op in LOWERINGS or fused(op)


def check_supported(graph, device="cpu"):
    """``UnsupportedOperationError`` for the first op (in ``graph`` or a sub-graph, such as a
    region's body) this back end cannot lower (``lowers``), before anything is emitted."""
    for node in graph.walk():
        if not lowers(node.op):
            raise UnsupportedOperationError(op=node.op, device=device)


def _control(e, first, shared):
    """The index of a threaded entry's control row in its argument tuple: after the scratch
    buffers shared by all threads and each thread's own (``first``: the first shared one)."""
    return first + len(shared) + e.threads * len(private_buffers(e))


def _first_constant(e, first, shared):
    """The index of the first constant in the argument tuple: after the scratch buffers
    (``first``: the first one) and a threaded entry's control row."""
    return first + len(shared) if e.threaded is None else _control(e, first, shared) + 1


def generate(graph, n_threads=1, part_lines=None, finished=None):
    """Returns ``(bodies, constants, buffers, phases)``: the source of each part of the
    entry (``parts.split``; one for most programs, called in order; a threaded entry's three
    phases) with whether LLVM compiles it quickly (``workload.py``), the constant arrays
    (last in the argument tuple), the scratch buffers (``(dtype name, elements)`` each) that
    follow the inputs and results in the argument tuple, and ``phases``: None for an entry
    called once, else how a threaded entry is called (``threads.Phases``, made by
    ``passes.phased``): control rows ``[before the loop]``, one per block of tiles, ``[after
    it]``; the first number of a row is the phase whose part it runs. ``finished``
    (``parts.Finished``): the parts finished before, which a part equal to one of them is taken
    from, and the parts of this program."""
    graph, phase = tail_last(graph)
    nodes = graph.nodes
    n_in, n_out = len(graph.inputs), len(graph.outputs)
    targets = [argument(n_in + k, nodes[o].dtype) + "[0]" if nodes[o].shape == () else f"r{k}"
               for k, o in enumerate(graph.outputs)]
    e = Emitter(graph, targets, phase=phase)
    e.threads = n_threads
    e.run()
    prologue = []
    for k, nid in enumerate(graph.inputs):
        node = nodes[nid]
        suffix = "[0]" if node.shape == () else ""
        prologue.append(Assign(f"v{nid}", f"{argument(k, node.dtype)}{suffix}"))
    for k, o in enumerate(graph.outputs):
        if nodes[o].shape != ():
            prologue.append(Assign(f"r{k}", argument(n_in + k, nodes[o].dtype)))
    first = n_in + n_out  # the first scratch buffer
    phases = None
    if e.threaded is not None:
        split = phased(e, graph, first, parts.TAIL_HEAD_LINES)
        if split is None:  # something crosses the loop that a phase cannot take over
            return generate(graph, n_threads=1, part_lines=part_lines, finished=finished)
        bodies, phases = split
    else:
        bodies = parts.split(e, graph, e.code.items, part_lines)
    shared = sorted(n for n in e.plan.size if not n.endswith(PRIVATE))  # spill slots included
    constant = _first_constant(e, first, shared)
    for k, c in enumerate(e.constants):
        dtype = {"f4": "float32", "f8": "float64", "b1": "bool"}[c.dtype.str[1:]]
        prologue.append(Assign(f"c{k}", argument(constant + k, Named(dtype))))
    starts = {f"ws{k}": argument(first + k, Named(name)) for k, name in enumerate(shared)}
    sources, estimates = [], []
    tiles = e.threaded.extent // e.threaded.tile if phases else 1
    finished = parts.Finished() if finished is None else finished
    for body in bodies:
        lines, estimate = _finish(e, body, prologue, first, shared, starts, tiles, finished)
        if not lines:  # nothing to do once its copies are read in place
            if phases is None and len(bodies) > 1 and (sources or body is not bodies[-1]):
                continue  # a part left out (the last one stays when all before it went)
            lines = ["    pass"]
        sources.append("\n".join([f"def {FUNCTION_NAME}(args):"] + lines) + "\n")
        estimates.append(estimate)
    buffers = [(name, e.plan.size[name]) for name in shared]
    buffers += [(dtype_of(name), e.plan.size[name]) for _ in range(e.threads if phases else 0)
                for name in private_buffers(e)]
    return list(zip(sources, quick_parts(estimates))), e.constants, buffers, phases


def _finish(e, body, prologue, first, shared, starts, tiles, finished):
    """``(lines, work estimate)`` of a part's ``body`` run through the passes with the
    prologue it needs (its arguments, its scratch views, a threaded phase's control row) and
    rendered; from ``finished`` (``parts.Finished``) where a part with the same statements,
    prologue and views was finished before."""
    written = text(body)
    named = names_in(written)
    own = [item for item in prologue if item.targets[0] in named]
    read = exposed(body)  # not a view the part binds again first (a thread's own scratch)
    slots = [(var, f"ws{shared.index(name)}", start) for var, name, start, _ in e.slots
             if var in read and name in shared]  # an unused view costs compile time
    control = _control(e, first, shared) if "ctl" in named else None
    key = parts.digest(written, text(own), repr(slots), repr(sorted(
        (ws, starts[ws]) for ws in {ws for _, ws, _ in slots})), repr((control, tiles)))

    def lines_and_work():
        items = own + views(slots, starts)
        if control is not None:  # a threaded entry's tile loop: its control row
            items.append(Assign("ctl", f"_arg(args, {control}, 0, np.int64)"))
        items = propagate(items + body)
        lines = render(items)
        check_integers(lines)
        return lines, work(items, tiles)
    return finished.get(key, lines_and_work)
