"""Generates the source of one flat Numba C entry per graph.

The entry takes one tuple of arrays (see lowering/native.py): the inputs, the result arrays the
caller allocated, the non-scalar constants and one scratch buffer per dtype, in that order.
Every array is a typed pointer to its first element, indexed with its row-major offset
(shapes are static; ``_Emitter.at``): Numba types and lowers that as a load or store, where an
array object would cost its getitem templates, an array struct and wraparound code per index.
Only the runtime's array kernels get ``carray`` views. Fused groups become loop nests, 0-d
values become scalar locals, whole-array operations become loops or runtime kernels. Nothing
is allocated: every array is a result, a scratch slot (lowering/buffers.py) or a view of one,
so the machine code needs no Numba runtime and loads without Numba.
"""

import functools
import itertools
import math
import os
import re

from quabla.core.graph import Node
from quabla.core.primitives import PRIMITIVES
from .. import native
from ..buffers import PRIVATE, ScratchPlan, dtype_of
from ..templates import operand_names, scalar_expression
from ..schedule import INDEX_MAPS, REDUCTIONS, Group, TileBegin, TileEnd, last_uses, schedule
from . import threads

__all__ = ["generate", "check_supported", "FUNCTION_NAME", "KERNELS", "BLAS_THRESHOLD"]

# Products with at least this many multiply-adds go to BLAS when SciPy (whose dgemm generated
# code calls) is installed and QUABLA_BLAS is not 0; smaller ones are faster as loops, with no
# BLAS threads to wake.
BLAS_THRESHOLD = 1 << 18
# OpenBLAS computes products up to this many multiply-adds with its small-matrix kernels.
SMALL_PRODUCT = 1_000_000
# Products without BLAS of at most this many multiply-adds are emitted as plain loops: the
# first call of the runtime's _matmul costs a Numba compile of its own (~0.4 s).
SMALL_LOOP = 4096


def blas_available():
    """Whether large products go to BLAS: QUABLA_BLAS is not 0 and SciPy's dgemm is found."""
    return os.environ.get("QUABLA_BLAS", "1") != "0" and bool(native.blas_symbols())

FUNCTION_NAME = "quabla_entry"
# the array kernels (kernels.py) the entry may call on carray views
KERNELS = ("_matmul", "_solve", "_cholesky", "_triangular_solve")

# A spliced expression deeper or longer than this is bound to a local instead: Python refuses
# source nested about 200 brackets deep, and each local costs Numba compile time.
SPLICE_DEPTH = 40
SPLICE_LENGTH = 2000

def _literal(value, dtype):
    if dtype.name == "bool":
        return "True" if value else "False"
    value = float(value)
    if math.isnan(value):
        text = "math.nan"
    elif math.isinf(value):
        text = "math.inf" if value > 0 else "(-math.inf)"
    else:
        text = repr(value)
    return f"np.float32({text})" if dtype.name == "float32" else text


def _np_dtype(dtype):
    return {"float64": "np.float64", "float32": "np.float32", "bool": "np.bool_"}[dtype.name]


class _Named:
    """A dtype known by name only (constants and scratch buffers)."""

    def __init__(self, name):
        self.name = name


_FLOAT64 = _Named("float64")


class _Emitter:
    """Emits the statements of ``graph`` (the entry's, or a region's sub-graph inside its loop
    or branch: ``parent`` is then the emitter of the enclosing graph, whose lines, constants
    and node numbering it shares). Output k is stored to ``targets[k]``: an array variable, or
    for a 0-d output an assignable expression."""

    def __init__(self, graph, targets, parent=None):
        self.graph = graph
        self.nodes = graph.nodes
        self.lines = parent.lines if parent else []
        self.targets = targets
        self.results = {}    # output node -> the index of the first result it is
        for k, o in enumerate(graph.outputs):
            self.results.setdefault(o, k)
        self.result_of = {}  # variable -> index of the result array it is (a view of)
        # non-scalar constant arrays, in the argument tuple after the results
        self.constants = parent.constants if parent else []
        self.numbered = parent.numbered if parent else [len(graph.nodes)]  # next node id free
        self.region_results = {}  # region node -> the variables of its results
        self.inlined = {}    # group member -> its expression, spliced into its single consumer
        self.nesting = {}    # group member -> the bracket depth of its expression
        self.plan = ScratchPlan()  # where intermediates live in the scratch buffers
        self.slots = []      # (variable, dtype name, offset, shape) of each scratch view
        self.root = {}       # variable in the scratch buffers -> the variable owning its slot
        self.now = 0         # index of the statement being emitted
        self.last_use = {}   # node id -> index of the last statement that reads it
        self.stored = set()  # group members that have a buffer
        self.consumers = {}
        for nid, node in enumerate(graph.nodes):
            for o in node.operands:
                self.consumers.setdefault(o, []).append(nid)
        self.tile = None     # the TileBegin of the tile loop being emitted (schedule._tile)
        self.loop_end = 0    # index of its TileEnd
        self.indent = parent.indent + 1 if parent else 0  # extra indentation: + 1 in a loop
        self.shapes = {}     # variable -> the shape of the array it names, where known
        self.slot_of = {}    # variable in the scratch buffers -> (dtype name, offset)
        self.views = {}      # (dtype name, offset, shape) -> the prologue view of that slot
        self.hoisted = {}    # product in a tile loop -> its right operand, arranged before it
        self.threads = 1     # threads the tile loop may be split across (see threads.py)
        self.threaded = None  # the TileBegin split across them, if any
        self.private = False  # allocating per-thread scratch (in a threaded loop)
        self.split = None    # (first line of the loop phase, first line after it)
        self.partials = []   # (variable, buffer, offset, shape, thread) of each partial's view

    def emit(self, line, depth=1):
        self.lines.append("    " * (depth + self.indent) + line)

    def run(self):
        """Emits the statements of the graph, then stores its outputs to their targets."""
        graph = self.graph
        for nid in graph.inputs:
            self.shapes[f"v{nid}"] = tuple(graph.nodes[nid].shape)
        statements = schedule(graph)
        self.last_use = last_uses(graph, statements)
        for k, stmt in enumerate(statements):
            self.now = k
            if isinstance(stmt, Group):
                self.group(stmt)
            elif isinstance(stmt, TileBegin):
                end = next(j for j in range(k, len(statements))
                           if isinstance(statements[j], TileEnd))
                self.begin_tile(stmt, end, [st.nid for st in statements[k + 1:end]
                                            if not isinstance(st, Group)])
            elif isinstance(stmt, TileEnd):
                self.end_tile(stmt.begin)
            else:
                self.single(stmt.nid)
            self.plan.release(k)
        self.now = len(statements)
        for k, o in enumerate(graph.outputs):  # results not computed in place are copied there
            node, var = graph.nodes[o], f"v{o}"
            if node.shape == ():
                self.emit(f"{self.targets[k]} = _cast_{node.dtype.name}({var})")
            elif self.result_of.get(var) != k:
                self.copy(self.targets[k], var, node.shape)

    # -- tiles: inside the tile loop, values computed there are tiles of ``tile`` rows; arrays
    #    from before it hold every row, read at row ``r + i0`` --------------------------------
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

    def begin_tile(self, begin, end, singles):
        """Full-size copies of exported tiles, right operands of the loop's products that are
        computed before it and need copying (see ``operand_2d``), the accumulators, then the
        loop header. In a threaded loop the accumulators are each thread's own partials, set
        up in the loop's phase (see ``generate``)."""
        for nid in sorted(begin.exports):
            node = self.nodes[nid]
            self.alloc(f"f{nid}", node.shape, node.dtype, result=nid,
                       expiry=self.last_use.get(nid, self.now))
        self.loop_end = end
        shared = {}  # operands arranged alike are copied once
        for nid in singles:
            node = self.nodes[nid]
            if node.op == "dot_general" and node.shape and node.operands[1] not in begin.values:
                self.tile = begin  # shapes as in the loop
                key = (node.operands[1], dict(node.params)["dimension_numbers"][0][1],
                       self.product_dims(node))
                if key not in shared:
                    shared[key] = self.rhs_operand(node, f"tv{nid}b", expiry=end)
                self.hoisted[nid] = shared[key]
                self.tile = None
        self.threads = min(self.threads, begin.extent // begin.tile)  # a tile each at least
        if self.threads > 1 and self.indent == 0 and _worth_threads(self.nodes, begin):
            self.threaded = begin
            self.split = (len(self.lines), None)
            self.private = True
        for nid in sorted(begin.accumulated):
            node = self.nodes[nid]
            if node.op in REDUCTIONS:
                self.reduction_init(node, nid)
            else:  # a product summed over the rows
                B, M, K, N = self.product_dims(node)
                self.alloc(f"tv{nid}", (B, M, N), node.dtype, fill="0", result=nid,
                           expiry=self.last_use.get(nid, self.now))
        rows = "ctl[2], ctl[3]" if self.threaded is begin else f"0, {begin.extent}"
        self.emit(f"for r in range({rows}, {begin.tile}):")
        self.indent += 1
        self.tile = begin

    def end_tile(self, begin):
        self.indent -= 1
        self.tile = None
        if self.threaded is begin:
            self.combine_partials(begin)
        for nid in sorted(begin.accumulated):
            node = self.nodes[nid]
            if node.op == "dot_general":
                self.product_result(node, f"v{nid}", f"tv{nid}")
        for nid in sorted(begin.exports):
            var, full = f"v{nid}", f"f{nid}"
            self.emit(f"{var} = {full}")
            for key in [k for k, v in self.views.items() if v == var]:
                del self.views[key]  # the name is the full array from here on
            for table in (self.root, self.slot_of, self.shapes, self.result_of):
                table.pop(var, None)
                if full in table:
                    table[var] = table[full]

    _COMBINE = {"reduce_sum": "{a} + {b}", "reduce_max": "_max({a}, {b})",
                "reduce_min": "_min({a}, {b})", "reduce_or": "{a} or {b}",
                "reduce_and": "{a} and {b}", "dot_general": "{a} + {b}"}

    def combine_partials(self, begin):
        """Ends the loop's phase of a threaded loop: each thread leaves its partial sums in its
        scratch (a 0-d one stored to a slot), and the phase after the loop starts by combining
        them, thread by thread in order, into the accumulators that code reads."""
        accumulated = []
        for nid in sorted(begin.accumulated):
            node = self.nodes[nid]
            var = f"v{nid}" if node.op in REDUCTIONS else f"tv{nid}"
            if node.shape == () and node.op in REDUCTIONS:
                self.alloc(f"a{nid}", (1,), node.dtype, expiry=self.now)
                self.emit(f"a{nid}[0] = {var}")
                var = f"a{nid}"
            accumulated.append((nid, node, var, self.slot_of[var], self.shapes[var]))
        self.private = False
        self.split = (self.split[0], len(self.lines))
        for nid, node, var, (buffer, start), shape in accumulated:
            parts = [f"{var}_p{t}" for t in range(self.threads)]
            self.partials += [(p, buffer, start, shape, t) for t, p in enumerate(parts)]
            combine = self._COMBINE[node.op]
            if var == f"a{nid}":  # a 0-d sum
                self.emit(f"v{nid} = {parts[0]}[0]")
                for p in parts[1:]:
                    self.emit(f"v{nid} = {combine.format(a=f'v{nid}', b=f'{p}[0]')}")
                continue
            if node.op in REDUCTIONS:
                self.alloc(var, shape, node.dtype, result=nid)
            else:
                self.alloc(var, shape, node.dtype, result=nid,
                           expiry=self.last_use.get(nid, self.now))
            self.emit(f"for i0 in range({math.prod(shape)}):")
            self.emit(f"{var}[i0] = {parts[0]}[i0]", 2)
            for p in parts[1:]:
                self.emit(f"{var}[i0] = {combine.format(a=var + '[i0]', b=p + '[i0]')}", 2)

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
        slot of the scratch buffer of its dtype (see lowering/buffers.py), free again after
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
            self.emit(f"{var} = {self.targets[k]}")  # a pointer: any shape
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
        if fill is not None and fill in _ZERO_BITS:
            self.emit(f"_zero({var}, {math.prod(shape)})")
        elif fill is not None:  # a loop: ndarray.fill costs a Numba compile per array type
            self.loops((math.prod(shape),), f"{var}[i0] = {fill}")

    def at(self, var, idx):
        """The element of array ``var`` at index ``idx`` (expressions, one per axis)."""
        return f"{var}[{_flat_index(self.shapes[var], idx)}]"

    def copy(self, target, source, shape):
        """``target`` = ``source``, both C-contiguous arrays of ``shape`` and one dtype."""
        self.emit(f"_copy({target}, {source}, {math.prod(shape)})")

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
                self.emit(f"{var} = {known}")
            var = var or known
            self.slot_of[var] = slot
            self.root[var] = self.root.get(name, name)
        elif var is None:
            return name
        else:
            self.emit(f"{var} = {name}")
        self.shapes[var] = shape
        return var

    def view(self, var, of, nid):
        """``var`` (node ``nid``) is a view of ``of``: it keeps the slot of ``of`` alive."""
        if of in self.result_of:
            self.result_of[var] = self.result_of[of]
        if of in self.root:
            self.root[var] = self.root[of]
            self.plan.extend(self.root[of], self.last_use.get(nid, self.now))

    # -- values ------------------------------------------------------------------------------
    def read(self, nid, group, idx):
        """The expression for node ``nid``'s value at loop index ``idx`` inside ``group``."""
        node = self.nodes[nid]
        if group is not None and nid in group.member_set and node.op not in REDUCTIONS:
            return self.inlined.pop(nid, f"s{nid}")
        if node.op in INDEX_MAPS and nid not in self.stored:
            return self.gather(node, group, idx)  # an index map of another group: gather again
        if node.shape == ():
            return f"v{nid}"
        return self.at(f"v{nid}", self.rows(nid, idx))

    def gather(self, node, group, idx):
        """Index maps read their (materialised) source at a remapped index."""
        source = node.operands[0]
        src = self.nodes[source]
        if src.shape == ():
            return f"v{source}"
        idx = self.rows(source, idx)
        params = dict(node.params)
        if node.op == "broadcast_in_dim":
            sidx = [idx[d] for d in params["broadcast_dimensions"]]
        elif node.op == "transpose":
            perm = params["permutation"]
            sidx = [None] * len(perm)
            for k, p in enumerate(perm):
                sidx[p] = idx[k]
        elif node.op == "rev":
            flipped = params["dimensions"]
            sidx = [f"{n - 1} - {i}" if d in flipped else i
                    for d, (i, n) in enumerate(zip(idx, src.shape))]
        else:  # slice
            sidx = [
                f"{s} + {st} * {i}" if st != 1 else (f"{s} + {i}" if s else i)
                for i, s, st in zip(idx, params["start_indices"], params["strides"])
            ]
        return self.at(f"v{source}", sidx)

    # -- statements --------------------------------------------------------------------------
    def group(self, group):
        shape = tuple(group.shape)
        if self.tile is not None:
            shape = (self.tile.tile,) + shape[1:]
        self.stored |= group.materialized
        idx = [f"i{k}" for k in range(len(shape))]
        for m in group.members:
            node = self.nodes[m]
            if node.op in REDUCTIONS:
                self.reduction_init(node, m)
            elif m in group.materialized:
                self.alloc(f"v{m}", shape, node.dtype, result=m)
        for depth, (i, n) in enumerate(zip(idx, shape)):
            self.emit(f"for {i} in range({n}):", depth + 1)
        depth = len(shape) + 1
        single_use = self.single_uses(group)
        for m in group.members:
            node = self.nodes[m]
            if node.op in REDUCTIONS:
                self.reduction_step(node, m, group, idx, depth)
                continue
            if node.op in INDEX_MAPS:
                expr = self.gather(node, group, idx)
                nesting = 2
            else:
                nesting = _nesting(PRIMITIVES[node.op].scalar) + max(
                    [self.nesting.get(o, 2) for o in node.operands if o in self.inlined] + [2])
                expr = scalar_expression(node, [self.read(o, group, idx) for o in node.operands])
            if m in single_use and nesting <= SPLICE_DEPTH and len(expr) <= SPLICE_LENGTH:
                self.inlined[m] = expr
                self.nesting[m] = nesting
                continue
            self.emit(f"s{m} = {expr}", depth)
            if m in group.materialized:
                self.emit(f"{self.at(f'v{m}', idx)} = s{m}", depth)
            if self.tile is not None and m in self.tile.exports:
                self.emit(f"{self.at(f'f{m}', self.global_rows(idx))} = s{m}", depth)
        for m in group.members:
            if self.nodes[m].op in REDUCTIONS:
                self.export(m)

    def single_uses(self, group):
        """Members read exactly once, by another member whose template names that operand once:
        their expression is spliced into the reader (fewer locals: Numba compiles faster)."""
        uses = {}
        for m in group.members:
            node = self.nodes[m]
            if node.op in INDEX_MAPS:
                continue
            template = PRIMITIVES[node.op].scalar if node.op not in REDUCTIONS else "{x}"
            names = ("x",) if node.op in REDUCTIONS else operand_names(node.op)
            for o, name in zip(node.operands, names):
                weight = template.count("{" + name + "}")
                uses[o] = uses.get(o, 0) + weight
        return {
            m for m in group.members
            if uses.get(m) == 1 and m not in group.materialized
            and self.nodes[m].op not in REDUCTIONS and self.consumers_in(m, group)
        }

    def consumers_in(self, nid, group):
        """Every reader of ``nid`` is in ``group``; a clone (a member recomputed here, see
        schedule._rematerialize) has readers elsewhere too, but here only these read it."""
        return nid in group.clones or all(c in group.member_set for c in self.consumers.get(nid, ()))

    _INIT = {"reduce_sum": "0", "reduce_max": "-math.inf", "reduce_min": "math.inf",
             "reduce_or": "False", "reduce_and": "True"}

    def reduction_init(self, node, nid):
        if self.tile is not None and nid in self.tile.accumulated:
            return  # initialised before the tile loop
        init = self._INIT[node.op]
        if node.op in ("reduce_sum", "reduce_max", "reduce_min"):
            init = _literal(float(eval(init, {"math": math})), node.dtype)
        if node.shape == ():
            self.emit(f"v{nid} = {init}")
        else:
            self.alloc(f"v{nid}", self.local_shape(nid), node.dtype, fill=init, result=nid)

    def reduction_step(self, node, nid, group, idx, depth):
        axes = dict(node.params)["axes"]
        value = self.read(node.operands[0], group, idx)
        target = f"v{nid}" if node.shape == () else (
            self.at(f"v{nid}", [i for k, i in enumerate(idx) if k not in axes]))
        combine = {
            "reduce_sum": f"{target} + {value}",
            "reduce_max": f"_max({target}, {value})",
            "reduce_min": f"_min({target}, {value})",
            "reduce_or": f"{target} or {value}",
            "reduce_and": f"{target} and {value}",
        }[node.op]
        self.emit(f"{target} = {combine}", depth)

    def single(self, nid):
        node = self.nodes[nid]
        op = node.op
        params = dict(node.params)
        args = [f"v{o}" for o in node.operands]
        out = f"v{nid}"
        if op == "constant":
            value = params["value"].value
            if node.shape == ():
                self.emit(f"{out} = {_literal(value.item(), node.dtype)}")
            else:
                self.emit(f"{out} = c{len(self.constants)}")
                self.shapes[out] = tuple(node.shape)
                self.constants.append(value)
            return
        if node.shape == () and PRIMITIVES[op].elementwise:
            self.emit(f"{out} = {scalar_expression(node, args)}")
            return
        getattr(self, "op_" + op)(node, out, args, **params)
        self.export(nid)

    # -- whole-array operations ----------------------------------------------------------------
    def op_reshape(self, node, out, args, new_shape):
        new_shape = self.local_shape(node_id(out))
        src = self.nodes[node.operands[0]]
        if src.shape == ():
            self.alloc(out, new_shape, node.dtype, fill=args[0], result=node_id(out))
        elif new_shape == ():
            self.emit(f"{out} = {args[0]}[0]")
        else:
            self.reshaped(args[0], new_shape, out)
            self.view(out, args[0], node_id(out))

    def op_pad(self, node, out, args, low, high, interior):
        """Zeros with the operand scattered in: plain loops (slice assignment would make Numba
        compile its error-message machinery, seconds per process)."""
        src = self.nodes[node.operands[0]]
        self.alloc(out, node.shape, node.dtype, fill="0", result=node_id(out))
        idx = [f"i{k}" for k in range(len(src.shape))]
        target = [f"{lo} + {it + 1} * {i}" for i, lo, it in zip(idx, low, interior)]
        self.loops(src.shape, f"{self.at(out, target)} = {self.at(args[0], idx)}")

    def loops(self, shape, statement):
        for depth, n in enumerate(shape):
            self.emit(f"for i{depth} in range({n}):", depth + 1)
        self.emit(statement, len(shape) + 1)

    def op_concatenate(self, node, out, args, axis):
        self.alloc(out, node.shape, node.dtype, result=node_id(out))
        offset = 0
        for name, o in zip(args, node.operands):
            shape = self.nodes[o].shape
            idx = [f"i{k}" for k in range(len(shape))]
            target = list(idx)
            target[axis] = f"{offset} + i{axis}" if offset else f"i{axis}"
            self.loops(shape, f"{self.at(out, target)} = {self.at(name, idx)}")
            offset += shape[axis]

    def product_dims(self, node):
        """(B, M, K, N) of a dot_general where it is emitted (a tile's rows in the loop)."""
        (lc, rc), (lb, rb) = dict(node.params)["dimension_numbers"]
        lshape, rshape = (self.local_shape(o) for o in node.operands)
        lf = [d for d in range(len(lshape)) if d not in lc and d not in lb]
        rf = [d for d in range(len(rshape)) if d not in rc and d not in rb]
        prod = lambda shape, dims: math.prod(shape[d] for d in dims)
        return prod(lshape, lb), prod(lshape, lf), prod(lshape, lc), prod(rshape, rf)

    def product_result(self, node, out, t):
        if node.shape == ():
            self.emit(f"{out} = {t}[0]")
        else:
            self.reshaped(t, self.local_shape(node_id(out)), out)
            self.view(out, t, node_id(out))

    def op_dot_general(self, node, out, args, dimension_numbers):
        """Operands arranged as (batch, rows, contraction) and (batch, contraction, cols);
        BLAS (runtime._gemm, which needs SciPy) for large products, a vectorisable loop nest
        else.
        In a tile loop, a product that sums over the rows adds each tile's part to its
        accumulator (set up before the loop)."""
        (lc, rc), (lb, rb) = dimension_numbers
        lhs, rhs = (self.nodes[o] for o in node.operands)
        nid = node_id(out)
        lshape = self.local_shape(node.operands[0])
        lf = [d for d in range(len(lshape)) if d not in lc and d not in lb]
        B, M, K, N = self.product_dims(node)
        blas, _ = self.blas_2d(node)
        t = f"t{out}"
        accumulate = self.tile is not None and nid in self.tile.accumulated
        target = f"p{out}" if accumulate else t
        expiry = self.now if accumulate else self.last_use.get(nid, self.now)
        if self.in_tile(nid):
            expiry = min(expiry, self.loop_end)
        result = nid if self.tile is None else None
        if blas and B == 1:
            # one 2-d product: a transposed operand is passed with its flag (BLAS reads
            # it in place), not copied into a permuted scratch array first
            a, ta = self.operand_2d(f"{t}a", args[0], lshape, lf, lc, M, K, lhs.dtype)
            b, tb = self.hoisted.get(nid) or self.rhs_operand(node, f"{t}b")
            self.alloc(target, (B, M, N), node.dtype, result=result, expiry=expiry)
            self.emit(f"_gemm({a}, {b}, {target}, {M}, {K}, {N}, {int(ta)}, {int(tb)})")
        else:
            a = self.arrange(f"{t}a", args[0], lshape, lhs.dtype,
                             tuple(lb) + tuple(lf) + tuple(lc), (B, M, K))
            b = self.hoisted.get(nid) or self.rhs_operand(node, f"{t}b")
            self.alloc(target, (B, M, N), node.dtype, result=result, expiry=expiry)
            if blas:
                self.emit(f"for b in range({B}):")
                self.emit(f"_gemm(_offset({a}, b * {M * K}), _offset({b}, b * {K * N}), "
                          f"_offset({target}, b * {M * N}), {M}, {K}, {N}, 0, 0)", 2)
            elif B * M * K * N <= SMALL_LOOP:
                self.small_product(a, b, target, (B, M, K, N), node.dtype)
            else:
                views = [f"carray({v}, {shape})" for v, shape in
                         zip((a, b, target), ((B, M, K), (B, K, N), (B, M, N)))]
                self.emit(f"_matmul({', '.join(views)})")
        if accumulate:
            self.loops((B * M * N,), f"{t}[i0] += {target}[i0]")
        else:
            self.product_result(node, out, t)

    def small_product(self, a, b, out, dims, dtype):
        """``out`` = (B, M, K) x (B, K, N) as a plain loop nest summing over k in order (as
        ``_matmul`` does, so the same bits): cheaper to compile than a first call of
        ``_matmul``, and as fast for products this small."""
        B, M, K, N = dims
        acc = f"{out}s"
        self.emit(f"for i0 in range({B}):")
        self.emit(f"for i1 in range({M}):", 2)
        self.emit(f"for i2 in range({N}):", 3)
        self.emit(f"{acc} = {_literal(0.0, dtype)}", 4)
        self.emit(f"for k in range({K}):", 4)
        self.emit(f"{acc} = {acc} + {self.at(a, ['i0', 'i1', 'k'])} * "
                  f"{self.at(b, ['i0', 'k', 'i2'])}", 5)
        self.emit(f"{self.at(out, ['i0', 'i1', 'i2'])} = {acc}", 4)

    def blas_2d(self, node):
        """Does this product go to BLAS as a single 2-d product?"""
        B, M, K, N = self.product_dims(node)
        work = B * M * N * K
        if self.tile is not None:  # the whole product decides, not one tile of it
            work = work * (self.tile.extent // self.tile.tile)
        return work >= BLAS_THRESHOLD and blas_available(), B == 1

    def rhs_operand(self, node, target, expiry=None):
        """The right operand of a product as the kernel takes it: (contraction, cols) for a
        2-d BLAS product (with its transposition flag, see ``operand_2d``), else (batch,
        contraction, cols). For a small BLAS product (OpenBLAS's
        small-matrix kernels, up to 1e6 multiply-adds) with 16 rows or more it is copied when it
        would be read transposed: those kernels multiply by a transposed right operand ~1.5x
        slower (8 x 128x32 @ 32x32: 57 us instead of 38 us); the copy is smaller than the
        left operand."""
        (lc, rc), (lb, rb) = dict(node.params)["dimension_numbers"]
        rhs = self.nodes[node.operands[1]]
        rshape = self.local_shape(node.operands[1])
        rf = [d for d in range(len(rshape)) if d not in rc and d not in rb]
        B, M, K, N = self.product_dims(node)
        name = f"v{node.operands[1]}"
        blas, two_d = self.blas_2d(node)
        if blas and two_d:
            small = M * K * N <= SMALL_PRODUCT and M >= 16 and K * N <= M * K
            return self.operand_2d(target, name, rshape, rc, rf, K, N, rhs.dtype,
                                   copy_transposed=small, expiry=expiry)
        return self.arrange(target, name, rshape, rhs.dtype, tuple(rb) + tuple(rc) + tuple(rf),
                            (B, K, N), expiry=expiry)

    def operand_2d(self, target, name, shape, first, second, rows, cols, dtype=None,
                   copy_transposed=False, expiry=None):
        """``(pointer, transposed)``: the operand (of ``shape``) with axes ``first`` as rows and
        ``second`` as columns as _gemm takes it without a copy: its own memory when those axes
        are already in memory order, the same read as transposed when they are in the opposite
        order, else a copy into a C-contiguous scratch array."""
        order = lambda dims: [d for d in dims if shape[d] != 1]
        increasing = lambda dims: all(a < b for a, b in zip(dims, dims[1:]))
        if increasing(order(first) + order(second)):
            return name, False
        if increasing(order(second) + order(first)) and not copy_transposed:
            return name, True
        return self.arrange(target, name, shape, dtype, tuple(first) + tuple(second),
                            (1, rows, cols), expiry=expiry), False

    def arrange(self, target, name, shape, dtype, perm, shape3, expiry=None):
        """The operand (of ``shape``) with axes in ``perm`` order, as a C-contiguous 3-d array
        (returns its variable); a permutation is copied with loops into ``target`` (cheaper to
        compile than np.ascontiguousarray)."""
        if perm != tuple(range(len(shape))):
            permuted = tuple(shape[p] for p in perm)
            self.alloc(target, permuted, dtype, expiry=expiry)
            source = [None] * len(perm)
            for k, p in enumerate(perm):
                source[p] = f"i{k}"
            idx = [f"i{k}" for k in range(len(perm))]
            self.loops(permuted, f"{self.at(target, idx)} = {self.at(name, source)}")
            name = target
        return self.reshaped(name, shape3, f"{target}3")

    # -- dynamic indexing: x[i] along axis i.ndim, i a float index per leading batch ----------
    def per_row(self, nid, shape, b, index, n, statement):
        """Loops over the ``b`` leading (batch) axes of ``shape``, the clamped row ``j<nid>`` of
        each, then over the rest; ``statement(batch, row, rest)`` gets the index lists."""
        idx = [f"i{k}" for k in range(len(shape))]
        for depth, extent in enumerate(shape[:b]):
            self.emit(f"for i{depth} in range({extent}):", depth + 1)
        at = self.at(index, idx[:b]) if b else index
        self.emit(f"j{nid} = _clamp_index({at}, {n})", b + 1)
        for depth, extent in enumerate(shape[b:], b):
            self.emit(f"for i{depth} in range({extent}):", depth + 1)
        self.emit(statement(idx[:b], f"j{nid}", idx[b:]), len(shape) + 1)

    def op_dynamic_index(self, node, out, args):
        """An unbatched index reads a row as a view (a scalar local for a vector); a batched
        one copies the row of each batch."""
        x, i = (self.nodes[o] for o in node.operands)
        b, nid = len(i.shape), node_id(out)
        if b == 0:
            row = f"_clamp_index({args[1]}, {x.shape[0]})"
            size = math.prod(node.shape)
            self.emit(f"{out} = {args[0]}[{row}]" if node.shape == () else
                      f"{out} = _offset({args[0]}, {row} * {size})")
            if node.shape != ():
                self.shapes[out] = tuple(node.shape)
                self.view(out, args[0], nid)
            return
        self.alloc(out, node.shape, node.dtype, result=nid)
        self.per_row(nid, node.shape, b, args[1], x.shape[b], lambda bi, j, rest:
                     f"{self.at(out, bi + rest)} = {self.at(args[0], bi + [j] + rest)}")

    def op_dynamic_update_add(self, node, out, args):
        """``x`` with ``v`` added to the selected rows: in place when ``out`` is the buffer
        already holding ``x`` (a carry the loop updates in place, see ``carries``) or when
        ``x``'s scratch slot is dead after this statement, else into a copy."""
        x, i, v = (self.nodes[o] for o in node.operands)
        b, nid = len(i.shape), node_id(out)
        k = self.results.get(nid)
        root = self.root.get(args[0])
        if k is not None and self.result_of.get(args[0]) == k:
            self.alloc(out, node.shape, node.dtype, result=nid)
        elif k is None and root is not None and self.plan.expiry(root) <= self.now:
            self.emit(f"{out} = {args[0]}")
            self.shapes[out] = tuple(node.shape)
            if args[0] in self.slot_of:
                self.slot_of[out] = self.slot_of[args[0]]
            self.view(out, args[0], nid)
        else:
            self.alloc(out, node.shape, node.dtype, result=nid)
            self.copy(out, args[0], node.shape)
        self.per_row(nid, v.shape, b, args[1], x.shape[b], lambda bi, j, rest:
                     f"{self.at(out, bi + [j] + rest)} += "
                     + (self.at(args[2], bi + rest) if v.shape != () else args[2]))

    # -- control-flow regions: real loops and branches around their sub-graphs' statements ----
    def sub_graph(self, graph, inputs, targets, in_place=None):
        """Emits a region's sub-graph ``graph`` at this point (in the loop or branch just
        opened): its inputs are this graph's variables ``inputs``, its outputs go to
        ``targets``; ``in_place`` maps input positions to the outputs whose target that input
        already is. Its nodes are numbered after all others, so its variables are its own; its
        intermediates get a scratch plan of their own, placed by ``place_blocks``."""
        base = self.numbered[0]
        self.numbered[0] += len(graph.nodes)
        child = _Emitter(_Renumbered(graph, base), targets, parent=self)
        for p, (nid, var) in enumerate(zip(child.graph.inputs, inputs)):
            child.emit(f"v{nid} = {var}")
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

    def region_array(self, var, gets, shape, dtype, swapped=False):
        """A buffer for a region's result, live as long as its ``gets`` are: the graph's result
        array if one of them is an output (unless the buffer is ``swapped`` with another each
        iteration), else a scratch slot."""
        expiry = max([self.last_use.get(g, self.now) for g in gets] + [self.now])
        result = None if swapped else next((g for g in gets if g in self.results), None)
        self.alloc(var, shape, dtype, result=result, expiry=expiry)
        if swapped:  # the variable names either slot in turn: it stands for neither
            self.views = {key: v for key, v in self.views.items() if v != var}
            self.slot_of.pop(var, None)

    def carries(self, nid, body, inits, offset):
        """The carry of loop ``nid``, its initial values copied in: ``(current, next,
        in_place)``. A 0-d carry is a local; an array carry is two slots, the body reading one
        and writing the other, swapped after each iteration (``swap``), or one slot updated in
        place when the body passes it through or only adds rows to it (its one reader a
        ``dynamic_update_add`` giving the new carry). The carry is input ``offset + k`` of the
        body and output k."""
        gets = self.results_of(nid)
        readers = {}
        for c, n in enumerate(body.nodes):
            for o in n.operands:
                readers.setdefault(o, []).append(c)
        current, following, in_place = [], [], {}
        for k, init in enumerate(inits):
            inp, res = body.inputs[offset + k], body.outputs[k]
            node, var = body.nodes[inp], f"q{nid}_{k}"
            if node.shape == ():
                self.emit(f"{var} = _cast_{node.dtype.name}({init})")
                current.append(var)
                following.append(var)
                continue
            single = res == inp or (
                body.nodes[res].op == "dynamic_update_add" and readers.get(inp) == [res]
                and inp not in body.outputs)
            self.region_array(var, gets.get(k, ()), node.shape, node.dtype, swapped=not single)
            self.copy(var, init, node.shape)
            current.append(var)
            if single:
                following.append(var)
                in_place[offset + k] = k
            else:
                self.region_array(var + "n", gets.get(k, ()), node.shape, node.dtype, swapped=True)
                self.plan.tie(var, var + "n")
                following.append(var + "n")
        return current, following, in_place

    def swap(self, current, following):
        for a, b in zip(current, following):
            if a != b:
                self.emit(f"{a}, {b} = {b}, {a}", 2)

    def op_scan(self, node, out, args, body, length, lower, reverse, n_carry):
        """A ``for`` loop over the steps (down for ``reverse``); each y is written to row k of
        its stack."""
        nid = node_id(out)
        current, following, in_place = self.carries(nid, body, args[:n_carry], 1)
        gets, stacks, targets, rows = self.results_of(nid), [], list(following), []
        for j, o in enumerate(body.outputs[n_carry:], n_carry):
            y, stack = body.nodes[o], f"q{nid}_{j}"
            self.region_array(stack, gets.get(j, ()), (length,) + tuple(y.shape), y.dtype)
            stacks.append(stack)
            if y.shape == ():
                targets.append(f"{stack}[k{nid}]")
            else:
                targets.append(f"{stack}r")
                rows.append(f"{stack}r = _offset({stack}, k{nid} * {math.prod(y.shape)})")
        steps = f"{length - 1}, -1, -1" if reverse else f"{length}"
        self.emit(f"for k{nid} in range({steps}):")
        for line in rows:
            self.emit(line, 2)
        index = f"np.float64(k{nid} + {lower})" if lower else f"np.float64(k{nid})"
        child = self.sub_graph(body, [index] + current + args[n_carry:], targets, in_place)
        self.swap(current, following)
        self.place_blocks([child])
        self.region_results[nid] = current + stacks

    def op_while(self, node, out, args, cond_fun, body, n_carry):
        nid = node_id(out)
        current, following, in_place = self.carries(nid, body, args[:n_carry], 0)
        operands = current + args[n_carry:]
        self.emit("while True:")
        test = self.sub_graph(cond_fun, operands, [f"q{nid}_go"])
        self.emit(f"if not q{nid}_go:", 2)
        self.emit("break", 3)
        child = self.sub_graph(body, operands, following, in_place)
        self.swap(current, following)
        self.place_blocks([test, child])
        self.region_results[nid] = current

    def op_cond(self, node, out, args, true_fun, false_fun):
        """``if``/``else``; both branches store their results to the same variables."""
        nid = node_id(out)
        gets, targets = self.results_of(nid), []
        for k, o in enumerate(true_fun.outputs):
            r, var = true_fun.nodes[o], f"q{nid}_{k}"
            if r.shape != ():
                self.region_array(var, gets.get(k, ()), r.shape, r.dtype)
            targets.append(var)
        self.emit(f"if {args[0]}:")
        yes = self.sub_graph(true_fun, args[1:], targets)
        self.emit("else:")
        no = self.sub_graph(false_fun, args[1:], targets)
        self.place_blocks([yes, no])
        self.region_results[nid] = targets

    def op_get(self, node, out, args, index):
        """A region's result: the variable holding it."""
        var = self.region_results[node.operands[0]][index]
        self.emit(f"{out} = {var}")
        if node.shape != ():
            self.shapes[out] = tuple(node.shape)
            self.view(out, var, node_id(out))

    def op_solve(self, node, out, args):
        rank = len(self.nodes[node.operands[0]].shape)  # a is [*batch, n, n]
        n = node.shape[rank - 2]
        m = math.prod(node.shape[rank - 1:])  # 1 for a stack of vectors
        self.stacked("_solve", node, out, args, [(n, n), (n, m), (n, m)],
                     [(f"t{out}lu", (n, n)), (f"t{out}x", (n, m))])

    def op_cholesky(self, node, out, args):
        n = node.shape[-1]
        self.stacked("_cholesky", node, out, args, [(n, n), (n, n)], [(f"t{out}low", (n, n))])

    def op_triangular_solve(self, node, out, args, lower, transpose_a):
        rank = len(self.nodes[node.operands[0]].shape)  # a is [*batch, n, n]
        n = node.shape[rank - 2]
        m = math.prod(node.shape[rank - 1:])  # 1 for a stack of vectors
        self.stacked("_triangular_solve", node, out, args, [(n, n), (n, m), (n, m)],
                     [(f"t{out}x", (n, m))], flags=(lower, transpose_a))

    def stacked(self, kernel, node, out, args, matrices, workspaces, flags=()):
        """``kernel`` on each matrix of a stack (the leading axes), through 2-d views of the
        operands and of ``out`` (of shapes ``matrices``, out's last); the float64 ``workspaces``
        are shared by all matrices, the static ``flags`` follow them."""
        self.alloc(out, node.shape, node.dtype, result=node_id(out))
        for name, shape in workspaces:
            self.alloc(name, shape, _FLOAT64)
        workspaces = [(f"carray({name}, {shape})", shape) for name, shape in workspaces]
        batch = math.prod(node.shape) // math.prod(matrices[-1])
        views = [f"carray(_offset({v}, b * {math.prod(shape)}), {shape})"
                 for v, shape in zip(args + [out], matrices)]
        self.emit(f"for b in range({batch}):")
        names = [name for name, _ in workspaces] + [repr(flag) for flag in flags]
        self.emit(f"{kernel}({', '.join(views + names)})", 2)


class _Renumbered:
    """A region's sub-graph with its node ids moved up by ``base`` (the ids below are
    placeholders): the variables named after its nodes (``v12``, ``s12``) are then distinct
    from those of the graphs around it."""

    _PLACEHOLDER = Node("input", (), (), (), None)

    def __init__(self, graph, base):
        self.nodes = [self._PLACEHOLDER] * base + [
            Node(n.op, tuple(o + base for o in n.operands), n.params, n.shape, n.dtype, n.weak)
            for n in graph.nodes]
        self.inputs = [i + base for i in graph.inputs]
        self.outputs = [o + base for o in graph.outputs]


@functools.lru_cache(maxsize=None)
def _nesting(template):
    """How deep ``template`` nests brackets around its operands (at most)."""
    deepest = depth = 0
    for ch in re.sub(r"{\w+}", "", template):
        depth += (ch in "([") - (ch in ")]")
        deepest = max(deepest, depth)
    return deepest


def _check_integers(lines):
    """Compiled code computes with int64: a larger integer (an extent, an offset) is refused
    here with a clear error, not by Numba's type inference."""
    for line in lines:
        for literal in re.findall(r"\b\d{19,}\b", line):
            if int(literal) >= 2**63:
                raise ValueError(f"the integer {literal} in this program does not fit the int64 "
                                 "arithmetic of compiled code")


def _worth_threads(nodes, begin):
    """Does the tile loop write enough to pay for waking other threads?"""
    return sum(math.prod(nodes[nid].shape) for nid in begin.values) >= threads.WORTH_ELEMENTS


def node_id(var):
    """The node id of a value variable ``v12``."""
    return int(var[1:])


_INTEGER = re.compile(r"^-?\d+$")
_ATOM = re.compile(r"^(\w+|\([^()]*\))$")


# Fill values whose bits are all zero: a memset (runtime._zero) instead of a loop.
_ZERO_BITS = frozenset(["0", "0.0", "False", "np.float32(0.0)"])


def _flat_index(shape, idx):
    """The row-major offset of index ``idx`` (expressions, one per axis) in an array of the
    static ``shape``: literal indices folded into one constant, axes of extent 1 (index 0)
    left out."""
    constant, terms, stride = 0, [], 1
    for n, i in reversed(list(zip(shape, idx))):
        i = str(i)
        if _INTEGER.match(i):
            constant += int(i) * stride
        elif n != 1:
            terms.append(i if stride == 1 else
                         f"{stride} * {i if _ATOM.match(i) else f'({i})'}")
        stride *= n
    terms.reverse()
    if constant or not terms:
        terms.append(str(constant))
    return " + ".join(terms)


def _argument(k, dtype, start=0):
    """The typed pointer to element ``start`` of argument ``k``."""
    return f"_arg(args, {k}, {start}, {_np_dtype(dtype)})"


def _views(slots, pointers):
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


def check_supported(graph, device="cpu"):
    """``UnsupportedOperationError`` for the first op (in ``graph`` or a sub-graph) the entry
    cannot emit: fused ops (elementwise with a scalar template, index maps, reductions) and
    those with an ``op_`` method of the emitter, before emission starts."""
    for node in graph.walk():
        prim = PRIMITIVES.get(node.op)
        fused = prim is not None and ((prim.elementwise and prim.scalar) or
                                      node.op in INDEX_MAPS or node.op in REDUCTIONS)
        if not fused and node.op not in ("input", "constant") and \
                not hasattr(_Emitter, "op_" + node.op):
            from quabla.errors import UnsupportedOperationError

            raise UnsupportedOperationError(op=node.op, device=device)


def generate(graph, n_threads=1):
    """Returns ``(body_source, constants, buffers, phases)``: the entry function's source, the
    constant arrays, the scratch buffers (``(dtype name, elements)`` each) that follow the
    inputs and results in its argument tuple, and ``phases``: None for an entry called once,
    else the control rows of a threaded entry's calls (``_phased``): ``[before the loop]``,
    one per thread, ``[after it]``."""
    nodes = graph.nodes
    n_in, n_out = len(graph.inputs), len(graph.outputs)
    targets = [_argument(n_in + k, nodes[o].dtype) + "[0]" if nodes[o].shape == () else f"r{k}"
               for k, o in enumerate(graph.outputs)]
    e = _Emitter(graph, targets)
    e.threads = n_threads
    e.run()
    prologue = []
    for k, nid in enumerate(graph.inputs):
        node = nodes[nid]
        suffix = "[0]" if node.shape == () else ""
        prologue.append(f"v{nid} = {_argument(k, node.dtype)}{suffix}")
    for k, o in enumerate(graph.outputs):
        if nodes[o].shape != ():
            prologue.append(f"r{k} = {_argument(n_in + k, nodes[o].dtype)}")
    first = n_in + n_out
    for k, c in enumerate(e.constants):
        dtype = {"f4": "float32", "f8": "float64", "b1": "bool"}[c.dtype.str[1:]]
        prologue.append(f"c{k} = {_argument(first + k, _Named(dtype))}")
    first += len(e.constants)
    lines, phases = e.lines, None
    if e.threaded is not None:
        phased = _phased(e, graph, first)
        if phased is None:  # something crosses the loop that a phase cannot take over
            return generate(graph, n_threads=1)
        lines, phases = phased
    shared = sorted(n for n in e.plan.size if not n.endswith(PRIVATE))
    named = set(re.findall(r"[A-Za-z_]\w*", "\n".join(lines)))
    starts = {f"ws{k}": _argument(first + k, _Named(name)) for k, name in enumerate(shared)}
    prologue += _views([(var, f"ws{shared.index(name)}", start) for var, name, start, _ in e.slots
                        if var in named and name in shared],  # an unused view costs compile time
                       starts)
    if phases is not None:
        control = first + len(shared) + e.threads * len(_private(e))
        prologue.append(f"ctl = _arg(args, {control}, 0, np.int64)")
    lines = _while_loops(lines)
    _check_integers(prologue + lines)
    head = f"def {FUNCTION_NAME}(args):"
    body = [head] + ["    " + line for line in prologue] + lines
    buffers = [(name, e.plan.size[name]) for name in shared]
    buffers += [(dtype_of(name), e.plan.size[name]) for _ in range(e.threads if phases else 0)
                for name in _private(e)]
    return "\n".join(body) + "\n", e.constants, buffers, phases


_RANGE = re.compile(r"^( *)for (\w+) in range\(([^()]*)\):$")
_BOUND = re.compile(r"^(-?\d+|ctl\[\d\])$")


def _while_loops(lines):
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
        body = _while_loops(lines[k:end])
        if not any(_LOOP.match(b) for b in body):
            body = _bound_offsets(body, indent + "    ")
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


def _bound_offsets(body, indent):
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


def _private(e):
    return sorted(n for n in e.plan.size if n.endswith(PRIVATE))


_ASSIGNED = re.compile(r"^( *)([A-Za-z_][\w, ]*?) (?:[-+*/]?=) ")
_LITERAL = re.compile(r"^(?:np\.float32\()?\(?-?(?:[\d.e+-]+|math\.inf|math\.nan|True|False)\)?\)?$")


def _thread_buffer(k, thread):
    """The name of the pointer to per-thread buffer ``k`` (of the running thread if None)."""
    return f"wt{k}" if thread is None else f"wt{k}_{thread}"


def _phased(e, graph, first):
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
    private = _private(e)
    base = first + len(shared)

    def pointers(thread):
        """The start of each per-thread buffer (the running thread's if ``thread`` is None)."""
        index = (lambda k: f"{base + k} + {len(private)} * thread") if thread is None else \
            (lambda k: base + thread * len(private) + k)
        return {_thread_buffer(k, thread): _argument(index(k), _Named(dtype_of(name)))
                for k, name in enumerate(private)}

    named_loop = words(loop)
    own = _views([(var, _thread_buffer(private.index(name), None), start)
                  for var, name, start, _ in e.slots if name in private and var in named_loop],
                 pointers(None))
    parts = _views([(var, _thread_buffer(private.index(name), t), start)
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
