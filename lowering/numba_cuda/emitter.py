"""The state of one CUDA program's generation: ``Emitter`` emits a graph (the main program, or
a region's sub-graph) as kernels of the module and the lines of its host function, and tracks
where each value lives (a scratch slot of device memory, a view, a literal).

What a statement becomes is decided elsewhere: fused groups in ``groups.py``, every other op by
its entry of the lowering table (``table.LOWERINGS``, filled by ``structural.py``,
``linalg.py`` and ``regions.py``).
"""

import math

from quabla.core.primitives import PRIMITIVES
from ..loopnest.buffers import ScratchPlan
from ..loopnest.gathers import composed, gather_expression
from ..loopnest.schedule import Group, Single, kind, last_uses, schedule
from ..loopnest.templates import literal, np_dtype, scalar_expression
from .groups import emit_group
from .source import ARRAY, array_type, blocks, canonical, indent, nbytes, order, unflatten
from .table import LOWERINGS

__all__ = ["Module", "Emitter", "ENTRY", "RESIDENT", "device_statements"]

ENTRY = "quabla_device_run"  # the host function of the main program
RESIDENT = "quabla_device_resident"  # the same on device arrays, returning device arrays
# (in device shape: a 0-d value is an array of one element; results may be scratch views)


class Module:
    """What a program and its regions' programs share: the kernels, the constants and the
    programs' host functions with their scratch plans."""

    def __init__(self, launch):
        self.launch = launch
        self.kernels = []    # module-level source lines
        self.constants = []  # non-scalar constant arrays, uploaded once
        self.programs = []   # (host function name, source, buffers, slots)
        self.regions = 0     # region programs so far
        self.signatures = {}  # kernel name -> its Numba signature (C-contiguous arrays)
        self.texts = {}      # kernel name -> its body (canonical: no name of a value in it)
        self.named = {}      # (body, signature) -> its kernel's name
        self.traffic = 0     # bytes of the arrays the main program's kernels name, once each


class Emitter:
    """One program: the main graph (``top``: it uploads its inputs and downloads its results)
    or a region's sub-graph (device arrays in and out)."""

    def __init__(self, graph, module, name, top):
        self.graph = graph
        self.nodes = graph.nodes
        self.module = module
        self.launch = module.launch
        self.name = name
        self.top = top
        self.host = []       # lines of the host function's body
        self.plan = ScratchPlan()
        self.slots = []      # (variable, dtype name, offset, device shape) of each scratch view
        self.slot_of = {}    # variable -> (dtype name, offset) of its scratch slot
        self.root = {}       # variable -> the variable owning its slot
        self.literals = {}   # scalar constant -> its literal
        self.arrays = {}     # device array variable -> (dtype name, device shape)
        for nid in graph.inputs:
            self.arrays[f"v{nid}"] = (graph.nodes[nid].dtype.name, tuple(graph.nodes[nid].shape)
                                      or (1,))
        self.stored = set()  # group members with a buffer
        self.last_use = {}
        self.now = 0

    def alloc(self, var, shape, dtype, expiry=None):
        shape = tuple(shape) or (1,)
        if expiry is None:
            value = var[0] == "v" and var[1:].isdigit()  # a node's value, else a temporary
            expiry = self.last_use.get(int(var[1:]), self.now) if value else self.now
        start = self.plan.take(var, dtype, math.prod(shape), expiry)
        self.slots.append((var, dtype, start, shape))
        self.slot_of[var] = (dtype, start)
        self.root[var] = var
        self.arrays[var] = (dtype, shape)

    def as_shape(self, name, shape, var, nid=None):
        """``var`` = ``name`` seen with ``shape`` (same memory, C order); a view of a value
        (node ``nid``) keeps its slot alive as long as the view is read."""
        shape = tuple(shape) or (1,)
        self.arrays[var] = (self.arrays[name][0], shape)
        slot = self.slot_of.get(name)
        if slot is not None:
            self.slots.append((var, slot[0], slot[1], shape))
            self.slot_of[var] = slot
            self.root[var] = self.root[name]
            if nid is not None:
                self.plan.extend(self.root[name], self.last_use.get(nid, self.now))
        else:
            self.host.append(f"{var} = {name}.reshape({shape})")
        return var

    def read(self, nid, group, idx):
        node = self.nodes[nid]
        if group is not None and nid in group.member_set and kind(node) != "reduction":
            return f"s{nid}"
        if nid in self.literals:
            return self.literals[nid]
        if kind(node) == "index_map" and nid not in self.stored:
            return self.gather(node, group, idx)
        if node.shape == ():
            return f"v{nid}[0]"
        return f"v{nid}[{', '.join(idx)}]"

    def gather(self, node, group, idx):
        """Index map ``node`` at ``idx`` (loopnest/gathers.py); an operand that is an index map
        not stored, or one of this kernel (whose buffer it is still writing), is gathered in
        turn; a 0-d member of the group is its scalar local."""
        def read(k, sidx):
            o = node.operands[k]
            source = self.nodes[o]
            if source.shape == ():
                return self.read(o, group, [])
            if composed(self.nodes, o, self.stored, group):
                return self.gather(source, group, sidx)
            return self.read(o, None, sidx)
        return gather_expression(node, [self.nodes[o].shape for o in node.operands],
                                 [idx] * len(node.operands), read)

    def scalar_expr(self, node, args):
        expr = scalar_expression(node, args)
        if node.dtype.name == "float32" and expr.startswith("_"):
            expr = f"_f32({expr})"  # helpers compute with float64 literals
        return expr

    def kernel(self, body, grid, block):
        """Adds the launch of a kernel with ``body`` (lines at depth 1) on the device arrays
        the body names, and the kernel unless the module has it already: kernels are written
        with canonical names (``_canonical``), so one that differs from an earlier one only in
        the names of its values (a gradient repeats the same elementwise step) is compiled
        once."""
        arrays = sorted(set(ARRAY.findall("\n".join(body))), key=order)
        if self.top:
            self.module.traffic += sum(nbytes(*self.arrays[a]) for a in arrays)
        signature = "void(%s)" % ", ".join(array_type(*self.arrays[a]) for a in arrays)
        text = canonical(body, arrays)
        name = self.module.named.get((text, signature))
        if name is None:
            name = self.module.named[text, signature] = f"k{len(self.module.named)}"
            self.module.signatures[name] = signature
            self.module.texts[name] = text
            params = ", ".join(f"x{k}" for k in range(len(arrays)))
            self.module.kernels += ["", "@cuda.jit", f"def {name}({params}):"] + indent(
                text.split("\n"), 1)
        self.host.append(f"{name}[{grid}, {block}]({', '.join(arrays)})")

    def grid_stride(self, shape, lines_at):
        """A kernel over the elements of ``shape``: ``lines_at(idx)`` computes one."""
        total = math.prod(shape)
        if total == 0:
            return
        idx = [f"i{d}" for d in range(len(shape))]
        body = ["for n in range(cuda.grid(1), %d, cuda.gridsize(1)):" % total]
        body += indent(unflatten("n", list(range(len(shape))), shape) + lines_at(idx), 1)
        t = self.launch.threads
        self.kernel(body, blocks(total, t, self.launch.blocks), t)

    def single(self, nid):
        node = self.nodes[nid]
        params = dict(node.params)
        out = f"v{nid}"
        if node.op == "constant":
            value = params["value"].value
            if node.shape == ():
                self.literals[nid] = literal(value.item(), node.dtype.name)
            else:
                self.host.append(f"{out} = {self.constant(value)}")
                self.arrays[out] = (node.dtype.name, value.shape)
            return
        if node.shape == () and (PRIMITIVES[node.op].elementwise or kind(node) == "index_map"):
            self.alloc(out, (), node.dtype.name)
            expr = (self.gather(node, None, []) if kind(node) == "index_map" else
                    self.scalar_expr(node, [self.read(o, None, []) for o in node.operands]))
            self.kernel([f"{out}[0] = {expr}"], 1, 1)
            return
        LOWERINGS[node.op](self, node, nid, **params)

    def build(self):
        """Emits the statements and registers this program's host function with the module."""
        statements = device_statements(self.graph)
        self.last_use = last_uses(self.graph, statements)
        for k, stmt in enumerate(statements):
            self.now = k
            if isinstance(stmt, Group):
                emit_group(self, stmt)
            else:
                self.single(stmt.nid)
            self.plan.release(k)
        self.now = len(statements)
        results = [self.result(o) for o in self.graph.outputs]
        nodes = self.nodes
        params = "".join(f"a{k}, " for k in range(len(self.graph.inputs)))
        lines = [f"def {RESIDENT if self.top else self.name}(w, c, {params}):"]
        lines += [f"    v{nid} = a{k}" for k, nid in enumerate(self.graph.inputs)]
        if self.slots:
            views = "".join(var + ", " for var, *_ in self.slots)
            lines.append(f"    ({views}) = w[{self.name!r}]")
        lines += ["    " + line for line in self.host]
        lines.append(f"    return [{', '.join(results)}]")
        if self.top:  # the host-array entry: upload, the resident function, download
            uploads = "".join(f"cuda.to_device(a{k}.reshape({tuple(nodes[nid].shape) or (1,)})), "
                              for k, nid in enumerate(self.graph.inputs))
            downloads = ", ".join(self.download(k, nid)
                                  for k, nid in enumerate(self.graph.outputs))
            lines += ["", "", f"def {self.name}(w, c, {params}):",
                      f"    r = {RESIDENT}(w, c, {uploads})", f"    return [{downloads}]"]
        self.module.programs.append((self.name, "\n".join(lines) + "\n",
                                     sorted(self.plan.size.items()), self.slots))

    def result(self, nid):
        """The expression the host function returns for output ``nid``: in the main program,
        the device array holding it (which may be a scratch view: ``download`` copies it out,
        as the resident caller does); in a region's, a device array of this program's own
        scratch (so a caller copying results into its carries never reads one it has
        overwritten)."""
        node = self.nodes[nid]
        if self.top:
            return self.value(nid)
        if f"v{nid}" in self.slot_of and self.root[f"v{nid}"] == f"v{nid}":
            return f"v{nid}"
        out = f"v{nid}q"
        self.alloc(out, node.shape, node.dtype.name)
        shape = tuple(node.shape) or (1,)
        self.grid_stride(shape, lambda idx: [
            f"{out}[{', '.join(idx)}] = {self.read(nid, None, idx[:len(node.shape)])}"])
        return out

    def download(self, k, nid):
        """The host array of output ``k`` (node ``nid``) of the main program, from the resident
        function's results ``r``."""
        node = self.nodes[nid]
        if nid in self.literals:
            return f"np.full((), {self.literals[nid]}, {np_dtype(node.dtype.name)})"
        return f"r[{k}].copy_to_host().reshape({tuple(node.shape)})"

    def constant(self, value):
        """The host expression of a constant array (uploaded once, shared by all programs)."""
        self.module.constants.append(value)
        return f"c[{len(self.module.constants) - 1}]"

    def value(self, nid):
        """A device array holding node ``nid`` (a scalar constant is uploaded once)."""
        if nid in self.literals:
            return self.constant(dict(self.nodes[nid].params)["value"].value.reshape(1))
        return f"v{nid}"

    def host_block(self, lines, depth=0):
        self.host += ["    " * depth + line for line in lines]


def device_statements(graph):
    """The schedule without its tile loops (see the module docstring)."""
    return [s for s in schedule(graph, {}) if isinstance(s, (Group, Single))]
