"""Generates the CUDA module of a graph: kernels for ``numba.cuda`` and the host function that
launches them, from the same schedule as the CPU back end (lowering/schedule.py).

Every value lives in device memory: inputs are uploaded per call (the resident entry takes them
as device arrays and returns its results as such), non-scalar constants once,
intermediates and results are slots of one pooled scratch buffer per dtype
(lowering/buffers.py); 0-d values are arrays of one element, scalar constants literals.

- A ``Group`` is one kernel: a grid-stride loop over its elements, the members as scalar locals.
  Its reductions over one set of axes become a block-level tree reduction in shared memory for
  each kept element (blocks along x share the reduced elements, grid rows along y the kept
  ones), then, when more than one block took part, a second kernel that reduces the per-block
  partials with the same tree: the order of every sum depends only on the launch
  configuration, so two calls give the same bits. Reductions over other axes of the same group
  read its stored values in kernels of their own. A short sum (at most a block's threads), or
  one keeping a long last axis (neighbouring threads then read neighbouring elements), is a
  loop in order per kept element instead.
- ``dot_general`` calls cuBLAS (lowering/numba_cuda/blas.py) with its operands arranged as
  (batch, rows, contraction) x (batch, contraction, cols), when ``Launch.cublas`` and the
  product is large; else it is a tiled kernel (shared-memory tiles of ``Launch.tile`` squared,
  each sum over k in order) reading its operands through their index maps, so nothing is
  copied.
- ``solve``, ``cholesky``, ``triangular_solve``: one thread per matrix of the stack.
- ``reshape`` is a view; ``pad``, ``concatenate`` and 0-d statements are small gather kernels.
- A ``scan`` or ``while`` region is a host loop calling its body's (and predicate's) host
  functions, unless its body is elementwise (``fused_loop_shape``): then the whole loop is
  ONE kernel, each thread carrying its elements through every step in scalar locals.

Tiling the batch axis (``TileBegin``/``TileEnd``) is a CPU cache optimisation: the statements
inside a tile loop are run once over whole arrays instead (their order stays valid).
"""

import math
import re
from typing import NamedTuple

import numpy as np

from quabla.core.graph import Graph, Node
from quabla.core.primitives import PRIMITIVES
from quabla.errors import UnsupportedOperationError
from .. import walk
from ..buffers import ScratchPlan
from ..templates import scalar_expression
from ..schedule import INDEX_MAPS, REDUCTIONS, Group, Single, last_uses, schedule

__all__ = ["Launch", "generate", "check_supported", "SUPPORTED", "ENTRY", "RESIDENT"]

ENTRY = "quabla_device_run"  # the host function of the main program
RESIDENT = "quabla_device_resident"  # the same on device arrays, returning device arrays
# (in device shape: a 0-d value is an array of one element; results may be scratch views)

STRUCTURAL = frozenset({"input", "constant", "reshape", "pad", "concatenate", "dot_general",
                        "solve", "cholesky", "triangular_solve", "dynamic_index",
                        "dynamic_update_add", "get", "cond", "scan", "while"})
ELEMENTWISE = frozenset(op for op, prim in PRIMITIVES.items() if prim.elementwise and prim.scalar)
SUPPORTED = STRUCTURAL | INDEX_MAPS | REDUCTIONS | ELEMENTWISE

_INIT = {"reduce_sum": 0.0, "reduce_max": -math.inf, "reduce_min": math.inf,
         "reduce_or": False, "reduce_and": True}
_COMBINE = {"reduce_sum": "{a} + {b}", "reduce_max": "_max({a}, {b})",
            "reduce_min": "_min({a}, {b})", "reduce_or": "{a} or {b}", "reduce_and": "{a} and {b}"}
_ARRAY = re.compile(r"\b[vpw]\d+[a-z]?\b")  # device arrays: values, partials, workspaces


CUBLAS_THRESHOLD = 1 << 15  # multiply-adds from which a product goes to cuBLAS (when it can)


class Launch(NamedTuple):
    """The launch configuration every kernel of a program is generated for (part of its
    source): threads per block (a power of two), most blocks along x and along the grid's
    other axes, the side of a product's tiles, and whether products may call cuBLAS."""
    threads: int = 256
    blocks: int = 1024
    rows: int = 65535
    tile: int = 16
    cublas: bool = False


def check_supported(graph, device):
    """Raises UnsupportedOperationError for the first op (in ``graph`` or any graph held by a
    node's params, such as a region's body) this back end cannot lower."""
    for node in walk(graph):
        if node.op not in SUPPORTED:
            raise UnsupportedOperationError(op=node.op, device=device)


def _literal(value, dtype):
    if dtype == "bool":
        return "True" if value else "False"
    value = float(value)
    text = ("math.nan" if math.isnan(value) else
            ("math.inf" if value > 0 else "(-math.inf)") if math.isinf(value) else repr(value))
    return f"np.float32({text})" if dtype == "float32" else text


def _np(dtype):
    return {"float64": "np.float64", "float32": "np.float32", "bool": "np.bool_"}[dtype]


def _unflatten(var, dims, shape, prefix="i"):
    """Lines binding ``{prefix}{d}`` for each axis ``d`` of ``dims`` (C order) from the flat
    index ``var`` over those axes of ``shape``."""
    lines, stride = [], 1
    for d in reversed(dims):
        div = f"{var} // {stride}" if stride != 1 else var
        mod = f"({div}) % {shape[d]}" if d != dims[0] else div
        lines.append(f"{prefix}{d} = {mod}")
        stride *= shape[d]
    return lines


def _indent(lines, depth):
    return ["    " * depth + line for line in lines]


def _blocks(n, per_block, most):
    return max(1, min(-(-n // per_block), most))


class _Module:
    """What a program and its regions' programs share: the kernels, the constants and the
    programs' host functions with their scratch plans."""

    def __init__(self, launch):
        self.launch = launch
        self.kernels = []    # module-level source lines
        self.constants = []  # non-scalar constant arrays, uploaded once
        self.programs = []   # (host function name, source, buffers, slots)
        self.count = 0       # kernels so far
        self.regions = 0     # region programs so far
        self.traffic = 0     # bytes of the arrays the main program's kernels name, once each


class _Emitter:
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
        self.nbytes = {}     # device array variable -> its size in bytes
        for nid in graph.inputs:
            self.nbytes[f"v{nid}"] = _nbytes(graph.nodes[nid].shape, graph.nodes[nid].dtype.name)
        self.stored = set()  # group members with a buffer
        self.last_use = {}
        self.now = 0

    # -- memory --------------------------------------------------------------------------
    def alloc(self, var, shape, dtype, expiry=None):
        shape = tuple(shape) or (1,)
        if expiry is None:
            value = var[0] == "v" and var[1:].isdigit()  # a node's value, else a temporary
            expiry = self.last_use.get(int(var[1:]), self.now) if value else self.now
        start = self.plan.take(var, dtype, math.prod(shape), expiry)
        self.slots.append((var, dtype, start, shape))
        self.slot_of[var] = (dtype, start)
        self.root[var] = var
        self.nbytes[var] = _nbytes(shape, dtype)

    def as_shape(self, name, shape, var, nid=None):
        """``var`` = ``name`` seen with ``shape`` (same memory, C order); a view of a value
        (node ``nid``) keeps its slot alive as long as the view is read."""
        shape = tuple(shape) or (1,)
        self.nbytes[var] = self.nbytes.get(name, 0)
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

    # -- values inside kernels -----------------------------------------------------------
    def read(self, nid, group, idx):
        node = self.nodes[nid]
        if group is not None and nid in group.member_set and node.op not in REDUCTIONS:
            return f"s{nid}"
        if nid in self.literals:
            return self.literals[nid]
        if node.op in INDEX_MAPS and nid not in self.stored:
            return self.gather(node, group, idx)
        if node.shape == ():
            return f"v{nid}[0]"
        return f"v{nid}[{', '.join(idx)}]"

    def gather(self, node, group, idx):
        source = node.operands[0]
        src = self.nodes[source]
        params = dict(node.params)
        if src.shape == ():
            sidx = []
        elif node.op == "broadcast_in_dim":
            sidx = [idx[d] for d in params["broadcast_dimensions"]]
        elif node.op == "transpose":
            sidx = [None] * len(idx)
            for k, p in enumerate(params["permutation"]):
                sidx[p] = idx[k]
        elif node.op == "rev":
            sidx = [f"{n - 1} - {i}" if d in params["dimensions"] else i
                    for d, (i, n) in enumerate(zip(idx, src.shape))]
        else:  # slice
            sidx = [f"{s} + {st} * {i}" for i, s, st in
                    zip(idx, params["start_indices"], params["strides"])]
        # a 0-d member is a scalar local (only a fused loop's body has such members)
        return self.read(source, group if src.shape == () else None, sidx)

    def scalar_expr(self, node, args):
        expr = scalar_expression(node, args)
        if node.dtype.name == "float32" and expr.startswith("_"):
            expr = f"_f32({expr})"  # helpers compute with float64 literals
        return expr

    def member_lines(self, group, members, idx):
        lines = []
        for m in members:
            node = self.nodes[m]
            if node.op in REDUCTIONS:
                continue
            if node.op in INDEX_MAPS:
                expr = self.gather(node, group, idx)
            elif node.op == "dynamic_index":  # a fused loop's row of an array (fused_loop_shape)
                x, i = node.operands
                row = f"_row({self.read(i, group, [])}, {self.nodes[x].shape[0]})"
                expr = self.read(x, None, [row] + idx)
            else:
                expr = self.scalar_expr(node, [self.read(o, group, idx) for o in node.operands])
            lines.append(f"s{m} = {expr}")
            if m in group.materialized:
                lines.append(f"v{m}[{', '.join(idx)}] = s{m}")
        return lines

    # -- kernels -------------------------------------------------------------------------
    def kernel(self, body, grid, block):
        """Adds a kernel with ``body`` (lines at depth 1) and its launch; its parameters are
        the device arrays the body names."""
        name = f"k{self.module.count}"
        self.module.count += 1
        arrays = sorted(set(_ARRAY.findall("\n".join(body))), key=_order)
        params = ", ".join(arrays)
        if self.top:
            self.module.traffic += sum(self.nbytes.get(a, 0) for a in arrays)
        self.module.kernels += ["", "@cuda.jit", f"def {name}({params}):"] + _indent(body, 1)
        self.host.append(f"{name}[{grid}, {block}]({params})")

    def grid_stride(self, shape, lines_at):
        """A kernel over the elements of ``shape``: ``lines_at(idx)`` computes one."""
        total = math.prod(shape)
        if total == 0:
            return
        idx = [f"i{d}" for d in range(len(shape))]
        body = ["for n in range(cuda.grid(1), %d, cuda.gridsize(1)):" % total]
        body += _indent(_unflatten("n", list(range(len(shape))), shape) + lines_at(idx), 1)
        t = self.launch.threads
        self.kernel(body, _blocks(total, t, self.launch.blocks), t)

    def tree_reduction(self, shape, axes, accumulators, element_lines):
        """Kernels reducing ``shape`` over ``axes`` for each ``(nid, op, dtype, value)`` of
        ``accumulators`` (``value(idx)``: the element's expression after
        ``element_lines(idx)``), into flat views ``v{nid}r`` of the results."""
        kept = [d for d in range(len(shape)) if d not in axes]
        K = math.prod(shape[d] for d in kept)
        L = math.prod(shape[d] for d in axes)
        if K == 0:
            return
        T = self.launch.threads
        idx = [f"i{d}" for d in range(len(shape))]
        element = _unflatten("kk", kept, shape) + _unflatten("j", list(axes), shape)
        element += element_lines(idx)
        if L <= T or (len(shape) - 1 not in axes and K >= 16 * T):
            # a short sum, or enough kept elements along the last axis to fill the device:
            # each thread reduces its kept elements alone, in order (neighbouring threads
            # read neighbouring elements)
            body = [f"for kk in range(cuda.grid(1), {K}, cuda.gridsize(1)):"]
            loop = [f"a{nid} = {_literal(_INIT[op], dtype)}" for nid, op, dtype, _ in accumulators]
            loop += [f"for j in range({L}):"] + _indent(element + [
                f"a{nid} = {_COMBINE[op].format(a=f'a{nid}', b=value(idx))}"
                for nid, op, dtype, value in accumulators], 1)
            for nid, *_ in accumulators:
                loop.append(f"{self.as_shape(f'v{nid}', (K,), f'v{nid}r', nid)}[kk] = a{nid}")
            self.kernel(body + _indent(loop, 1), _blocks(K, T, self.launch.blocks), T)
            return
        nb = _blocks(L, T, self.launch.blocks)
        rows = min(K, self.launch.rows)
        targets = []
        for nid, op, dtype, value in accumulators:
            self.as_shape(f"v{nid}", (K,), f"v{nid}r", nid)
            if nb > 1:
                self.alloc(f"p{nid}", (K, nb), dtype, expiry=self.now)
                targets.append(f"p{nid}[kk, cuda.blockIdx.x]")
            else:
                targets.append(f"v{nid}r[kk]")
            element.append(f"a{nid} = {_COMBINE[op].format(a=f'a{nid}', b=value(idx))}")
        self.kernel(self.block_tree(K, L, accumulators, element, targets), (nb, rows), T)
        if nb > 1:  # the blocks' partials, reduced by one block per kept element
            element = [f"a{nid} = {_COMBINE[op].format(a=f'a{nid}', b=f'p{nid}[kk, j]')}"
                       for nid, op, _, _ in accumulators]
            targets = [f"v{nid}r[kk]" for nid, *_ in accumulators]
            self.kernel(self.block_tree(K, nb, accumulators, element, targets), (1, rows), T)

    def block_tree(self, K, L, accumulators, element, targets):
        T = self.launch.threads
        body = [f"sm{nid} = cuda.shared.array({T}, {_np(dtype)})"
                for nid, _, dtype, _ in accumulators]
        body += ["t = cuda.threadIdx.x",
                 f"for kk in range(cuda.blockIdx.y, {K}, cuda.gridDim.y):"]
        loop = [f"a{nid} = {_literal(_INIT[op], dtype)}" for nid, op, dtype, _ in accumulators]
        loop.append(f"for j in range(cuda.blockIdx.x * {T} + t, {L}, cuda.gridDim.x * {T}):")
        loop += _indent(element, 1)
        for (nid, op, dtype, _), target in zip(accumulators, targets):
            both = _COMBINE[op].format(a=f"sm{nid}[t]", b=f"sm{nid}[t + s]")
            loop += [f"sm{nid}[t] = a{nid}", "cuda.syncthreads()", f"s = {T // 2}",
                     "while s > 0:", "    if t < s:", f"        sm{nid}[t] = {both}",
                     "    cuda.syncthreads()", "    s //= 2",
                     "if t == 0:", f"    {target} = sm{nid}[0]", "cuda.syncthreads()"]
        return body + _indent(loop, 1)

    # -- statements ----------------------------------------------------------------------
    def group(self, group):
        shape = tuple(group.shape)
        reductions = [m for m in group.members if self.nodes[m].op in REDUCTIONS]
        axes = dict(self.nodes[reductions[0]].params)["axes"] if reductions else None
        primary = [r for r in reductions if dict(self.nodes[r].params)["axes"] == axes]
        others = [r for r in reductions if r not in primary]
        for r in others:  # reduced in kernels of their own, from a stored operand
            source = self.nodes[r].operands[0]
            if source in group.member_set and self.nodes[source].op not in INDEX_MAPS:
                group.materialized.add(source)
        self.stored |= group.materialized
        for m in group.members:
            node = self.nodes[m]
            if m in group.materialized or node.op in REDUCTIONS:
                self.alloc(f"v{m}", node.shape, node.dtype.name)
        if not primary:
            self.grid_stride(shape, lambda idx: self.member_lines(group, group.members, idx))
        else:
            accumulators = [(r, self.nodes[r].op, self.nodes[r].dtype.name,
                             lambda idx, s=self.nodes[r].operands[0]: self.read(s, group, idx))
                            for r in primary]
            self.tree_reduction(shape, axes, accumulators,
                                lambda idx: self.member_lines(group, group.members, idx))
        for r in others:
            node = self.nodes[r]
            source = node.operands[0]
            self.tree_reduction(shape, dict(node.params)["axes"],
                                [(r, node.op, node.dtype.name,
                                  lambda idx, s=source: self.read(s, None, idx))],
                                lambda idx: [])

    def single(self, nid):
        node = self.nodes[nid]
        params = dict(node.params)
        out = f"v{nid}"
        if node.op == "constant":
            value = params["value"].value
            if node.shape == ():
                self.literals[nid] = _literal(value.item(), node.dtype.name)
            else:
                self.host.append(f"{out} = {self.constant(value)}")
                self.nbytes[out] = value.nbytes
            return
        if node.shape == () and (PRIMITIVES[node.op].elementwise or node.op in INDEX_MAPS):
            self.alloc(out, (), node.dtype.name)
            expr = (self.gather(node, None, []) if node.op in INDEX_MAPS else
                    self.scalar_expr(node, [self.read(o, None, []) for o in node.operands]))
            self.kernel([f"{out}[0] = {expr}"], 1, 1)
            return
        getattr(self, "op_" + node.op)(node, nid, **params)

    def op_reshape(self, node, nid, new_shape):
        source = node.operands[0]
        if source in self.literals:  # a scalar constant made an array: a fill
            self.alloc(f"v{nid}", node.shape, node.dtype.name)
            idx = lambda i: ", ".join(i) or "0"
            self.grid_stride(node.shape, lambda i: [f"v{nid}[{idx(i)}] = {self.literals[source]}"])
        else:
            self.as_shape(f"v{source}", node.shape, f"v{nid}", nid)

    def op_pad(self, node, nid, low, high, interior):
        src = self.nodes[node.operands[0]]
        self.alloc(f"v{nid}", node.shape, node.dtype.name)

        def lines(idx):
            body, inside = [], []
            for d, (i, lo, it, n) in enumerate(zip(idx, low, interior, src.shape)):
                body.append(f"q{d} = {i} - {lo}")
                inside.append(f"q{d} >= 0 and q{d} % {it + 1} == 0 and q{d} // {it + 1} < {n}")
            value = self.read(node.operands[0], None, [f"q{d} // {it + 1}"
                                                       for d, it in enumerate(interior)])
            zero = _literal(0, node.dtype.name)
            return body + [f"v{nid}[{', '.join(idx)}] = {value} if "
                           f"{' and '.join(inside) or 'True'} else {zero}"]
        self.grid_stride(node.shape, lines)

    def op_concatenate(self, node, nid, axis):
        self.alloc(f"v{nid}", node.shape, node.dtype.name)

        def lines(idx):
            body, offset = [], 0
            for k, o in enumerate(node.operands):
                size = self.nodes[o].shape[axis]
                at = list(idx)
                at[axis] = f"{idx[axis]} - {offset}"
                test = "if" if k == 0 else "elif"
                if k == len(node.operands) - 1:
                    body.append("else:")
                else:
                    body.append(f"{test} {idx[axis]} < {offset + size}:")
                body.append(f"    v{nid}[{', '.join(idx)}] = {self.read(o, None, at)}")
                offset += size
            return body
        self.grid_stride(node.shape, lines)

    def op_dot_general(self, node, nid, dimension_numbers):
        (lc, rc), (lb, rb) = dimension_numbers
        lhs, rhs = node.operands
        lshape, rshape = self.nodes[lhs].shape, self.nodes[rhs].shape
        lf = [d for d in range(len(lshape)) if d not in lc and d not in lb]
        rf = [d for d in range(len(rshape)) if d not in rc and d not in rb]
        size = lambda shape, dims: math.prod(shape[d] for d in dims)
        B, M, K, N = size(lshape, lb), size(lshape, lf), size(lshape, lc), size(rshape, rf)
        dtype = node.dtype.name
        self.alloc(f"v{nid}", node.shape, dtype)
        if B * M * N == 0:
            return
        out = self.as_shape(f"v{nid}", (B, M, N), f"v{nid}m", nid)
        T = self.launch.tile
        zero = _literal(0, dtype)
        load_a = (_unflatten("b", list(lb), lshape, "l") + _unflatten("row", lf, lshape, "l")
                  + _unflatten("k", list(lc), lshape, "l"))
        load_b = (_unflatten("b", list(rb), rshape, "r") + _unflatten("k", list(rc), rshape, "r")
                  + _unflatten("col", rf, rshape, "r"))
        a = self.read(lhs, None, [f"l{d}" for d in range(len(lshape))])
        b = self.read(rhs, None, [f"r{d}" for d in range(len(rshape))])
        if self.launch.cublas and B * M * K * N >= CUBLAS_THRESHOLD:
            a3 = self.arranged(lhs, tuple(lb) + tuple(lf) + tuple(lc), (B, M, K),
                               ["b", "row", "k"], load_a, a, f"w{nid}a")
            b3 = self.arranged(rhs, tuple(rb) + tuple(rc) + tuple(rf), (B, K, N),
                               ["b", "k", "col"], load_b, b, f"w{nid}b")
            self.host.append(f"_gemm({a3}, {b3}, {out})")
            return
        body = [f"sa = cuda.shared.array(({T}, {T}), {_np(dtype)})",
                f"sb = cuda.shared.array(({T}, {T}), {_np(dtype)})",
                "tx = cuda.threadIdx.x", "ty = cuda.threadIdx.y",
                f"for b in range(cuda.blockIdx.z, {B}, cuda.gridDim.z):",
                f"    for rb in range(cuda.blockIdx.y * {T}, {M}, cuda.gridDim.y * {T}):",
                f"        for cb in range(cuda.blockIdx.x * {T}, {N}, cuda.gridDim.x * {T}):"]
        tile = ["row = rb + ty", "col = cb + tx", f"acc = {zero}",
                f"for k0 in range(0, {K}, {T}):",
                "    k = k0 + tx", f"    if row < {M} and k < {K}:"]
        tile += _indent(load_a + [f"sa[ty, tx] = {a}"], 2)
        tile += ["    else:", f"        sa[ty, tx] = {zero}",
                 "    k = k0 + ty", f"    if k < {K} and col < {N}:"]
        tile += _indent(load_b + [f"sb[ty, tx] = {b}"], 2)
        tile += ["    else:", f"        sb[ty, tx] = {zero}", "    cuda.syncthreads()",
                 f"    for q in range({T}):", "        acc += sa[ty, q] * sb[q, tx]",
                 "    cuda.syncthreads()",
                 f"if row < {M} and col < {N}:", f"    {out}[b, row, col] = acc"]
        body += _indent(tile, 3)
        grid = (_blocks(N, T, self.launch.blocks), _blocks(M, T, self.launch.rows),
                min(B, self.launch.rows))
        self.kernel(body, grid, (T, T))

    def arranged(self, nid, order, shape3, names, index_lines, value, var):
        """Operand ``nid`` as a C-contiguous 3-d array of ``shape3`` (axes ``order`` grouped
        as batch, rows, columns) for cuBLAS: a view when it is stored in that order, else a
        copy made by a kernel (``index_lines`` bind its indices from ``names``)."""
        node = self.nodes[nid]
        stored = nid not in self.literals and (node.op not in INDEX_MAPS or nid in self.stored)
        if stored and order == tuple(range(len(node.shape))):
            return self.as_shape(f"v{nid}", shape3, f"{var}v", nid)
        self.alloc(var, shape3, node.dtype.name, expiry=self.now)
        self.grid_stride(shape3, lambda idx: [f"{n} = {i}" for n, i in zip(names, idx)]
                         + index_lines + [f"{var}[{', '.join(idx)}] = {value}"])
        return var

    def op_solve(self, node, nid):
        rank = len(self.nodes[node.operands[0]].shape)
        n, m = node.shape[rank - 2], math.prod(node.shape[rank - 1:])
        self.stacked("_solve", node, nid, [(n, n), (n, m), (n, m)], [(n, n), (n, m)])

    def op_cholesky(self, node, nid):
        n = node.shape[-1]
        self.stacked("_cholesky", node, nid, [(n, n), (n, n)], [(n, n)])

    def op_triangular_solve(self, node, nid, lower, transpose_a):
        rank = len(self.nodes[node.operands[0]].shape)
        n, m = node.shape[rank - 2], math.prod(node.shape[rank - 1:])
        self.stacked("_triangular_solve", node, nid, [(n, n), (n, m), (n, m)], [(n, m)],
                     flags=(lower, transpose_a))

    def stacked(self, kernel, node, nid, matrices, workspaces, flags=()):
        """``kernel`` on each matrix of the stack (the leading axes), one thread each, with
        float64 workspaces of its own."""
        self.alloc(f"v{nid}", node.shape, node.dtype.name)
        batch = math.prod(node.shape) // math.prod(matrices[-1])
        if batch == 0:
            return
        names = [self.as_shape(f"v{o}", (batch,) + shape, f"v{o}{chr(97 + k)}", o)
                 for k, (o, shape) in enumerate(zip(node.operands, matrices))]
        names.append(self.as_shape(f"v{nid}", (batch,) + matrices[-1], f"v{nid}z", nid))
        for k, shape in enumerate(workspaces):
            self.alloc(f"w{nid}{chr(97 + k)}", (batch,) + shape, "float64", expiry=self.now)
            names.append(f"w{nid}{chr(97 + k)}")
        call = ", ".join([f"{v}[b]" for v in names] + [repr(f) for f in flags])
        T = self.launch.threads
        self.kernel([f"for b in range(cuda.grid(1), {batch}, cuda.gridsize(1)):",
                     f"    {kernel}({call})"], _blocks(batch, T, self.launch.blocks), T)


    # -- the program -----------------------------------------------------------------------
    def build(self):
        """Emits the statements and registers this program's host function with the module."""
        statements = _statements(self.graph)
        self.last_use = last_uses(self.graph, statements)
        for k, stmt in enumerate(statements):
            self.now = k
            if isinstance(stmt, Group):
                self.group(stmt)
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
            return f"np.full((), {self.literals[nid]}, {_np(node.dtype.name)})"
        return f"r[{k}].copy_to_host().reshape({tuple(node.shape)})"

    def constant(self, value):
        """The host expression of a constant array (uploaded once, shared by all programs)."""
        self.module.constants.append(value)
        return f"c[{len(self.module.constants) - 1}]"

    # -- regions: host loops and branches around the kernels of their bodies ----------------
    def sub_program(self, graph):
        name = f"region{self.module.regions}"
        self.module.regions += 1
        _Emitter(graph, self.module, name, top=False).build()
        return name

    def region_results(self, node, nid):
        """One slot per result, ``v{nid}x{k}``, alive until the last ``get`` of it."""
        names = []
        for k, (shape, dtype) in enumerate(_result_avals(node)):
            names.append(f"v{nid}x{k}")
            self.alloc(names[-1], shape, dtype, expiry=self.last_use.get(nid, self.now))
        return names

    def value(self, nid):
        """A device array holding node ``nid`` (a scalar constant is uploaded once)."""
        if nid in self.literals:
            return self.constant(dict(self.nodes[nid].params)["value"].value.reshape(1))
        return f"v{nid}"

    def copy_into(self, targets, results):
        self.host_block([f"{t}.copy_to_device({r})" for t, r in zip(targets, results)])

    def host_block(self, lines, depth=0):
        self.host += ["    " * depth + line for line in lines]

    def op_get(self, node, nid, index):
        self.as_shape(f"v{node.operands[0]}x{index}", node.shape, f"v{nid}", nid)

    def op_cond(self, node, nid, true_fun, false_fun):
        pred, *operands = node.operands
        results = self.region_results(node, nid)
        args = ", ".join(self.value(o) for o in operands)
        branches = [self.sub_program(true_fun), self.sub_program(false_fun)]
        test = self.literals.get(pred, f"v{pred}.copy_to_host()[0]")
        self.host_block([f"if {test}:", f"    r = {branches[0]}(w, c, {args})",
                         "else:", f"    r = {branches[1]}(w, c, {args})"])
        self.copy_into(results, [f"r[{k}]" for k in range(len(results))])

    def op_scan(self, node, nid, body, length, lower, reverse, n_carry):
        results = self.region_results(node, nid)
        operands = [self.value(o) for o in node.operands]
        index, *rest = body.inputs
        if fused_loop_shape(body, rest[:n_carry]) is not None:
            order = f"range({length - 1}, -1, -1)" if reverse else f"range({length})"
            dtype = _np(body.nodes[index].dtype.name)
            loop = [f"for step in {order}:", f"s{index} = {dtype}({lower} + step)"]
            self.fused_region(body, rest, n_carry, operands + results, loop, [index])
            return
        self.copy_into(results[:n_carry], operands[:n_carry])
        program = self.sub_program(body)
        index = self.constant(np.arange(lower, lower + length,
                                        dtype=body.nodes[body.inputs[0]].dtype.numpy))
        args = ", ".join(results[:n_carry] + operands[n_carry:])
        order = f"range({length - 1}, -1, -1)" if reverse else f"range({length})"
        loop = [f"r = {program}(w, c, {index}[step:step + 1], {args})"]
        loop += [f"{t}.copy_to_device(r[{k}])" for k, t in enumerate(results[:n_carry])]
        for k, stack in enumerate(results[n_carry:], n_carry):
            size = math.prod(_result_avals(node)[k][0][1:])
            rows = self.as_shape(stack, (length, size), f"{stack}r")
            loop.append(f"{rows}[step:step + 1].copy_to_device(r[{k}].reshape((1, {size})))")
        self.host_block([f"for step in {order}:"] + _indent(loop, 1))

    def op_while(self, node, nid, cond_fun, body, n_carry):
        results = self.region_results(node, nid)
        operands = [self.value(o) for o in node.operands]
        merged, pred = _test_then_step(cond_fun, body)
        if fused_loop_shape(merged, merged.inputs[:n_carry]) is not None:
            self.fused_region(merged, merged.inputs, n_carry, operands + results,
                              ["while True:"],
                              test=lambda read: [f"if not {read(pred)}:", "    break"])
            return
        self.copy_into(results, operands[:n_carry])
        test, step = self.sub_program(cond_fun), self.sub_program(body)
        args = ", ".join(results + operands[n_carry:])
        self.host_block([f"while {test}(w, c, {args})[0].copy_to_host()[0]:",
                         f"    r = {step}(w, c, {args})"])
        self.host_block([f"{t}.copy_to_device(r[{k}])" for k, t in enumerate(results)], 1)

    def fused_region(self, graph, inputs, n_carry, arrays, loop, locals_=(),
                     test=lambda read: []):
        """Calls a host function running a loop over ``graph`` (``fused_loop_shape``) as ONE
        kernel (``fused_loop``) on ``arrays``: the region's operands (``inputs`` of the
        graph), then the arrays of its results."""
        name = f"region{self.module.regions}"
        self.module.regions += 1
        child = _Emitter(graph, self.module, name, top=False)
        results = child.fused_loop(inputs[:n_carry], loop, locals_, test)
        params = [f"a{k}" for k in range(len(inputs))] + results
        source = [f"def {name}(w, c, {', '.join(params)}):"]
        source += [f"    v{nid} = a{k}" for k, nid in enumerate(inputs)]
        source += _indent(child.host, 1)
        self.module.programs.append((name, "\n".join(source) + "\n", [], []))
        self.host_block([f"{name}(w, c, {', '.join(arrays)})"])

    def fused_loop(self, carries, loop, locals_, test):
        """The kernel of a fused loop: each thread keeps its elements of the ``carries`` in
        scalar locals through every step (``loop``: the loop's first line, then the lines
        starting a step and binding the ``locals_``; ``test(read)``: lines after the body,
        given the expression ``read(nid)`` of a value), writes its elements of each step's ys
        (the outputs after the carries, at row ``step``), then of the final carries. Returns
        the names of the result arrays its kernel writes."""
        nodes, outputs = self.nodes, self.graph.outputs
        group = Group(fused_loop_shape(self.graph, carries))
        for k, node in enumerate(nodes):
            if node.op == "constant":
                self.single(k)
            elif node.op != "input":
                group.members.append(k)
        group.member_set = set(group.members) | set(carries) | set(locals_)
        n = len(carries)
        results = [f"v{len(nodes) + k}" for k in range(len(outputs))]

        def lines(idx):
            def at(nid, lead=()):  # a 0-d value is element 0 (of row ``step``)
                return ", ".join([*lead, *(idx if nodes[nid].shape else [])]) or "0"

            def read(nid):
                return self.read(nid, group, idx)
            step = loop[1:] + self.member_lines(group, group.members, idx) + test(read)
            step += [f"{y}[{at(o, ['step'])}] = {read(o)}"
                     for y, o in zip(results[n:], outputs[n:])]
            step.append(", ".join(f"s{c}" for c in carries) + " = "
                        + ", ".join(read(o) for o in outputs[:n]))
            return ([f"s{c} = {self.read(c, None, idx)}" for c in carries] + loop[:1]
                    + _indent(step, 1)
                    + [f"{r}[{at(c)}] = s{c}" for r, c in zip(results, carries)])
        self.grid_stride(tuple(group.shape), lines)
        return results

    # -- x[i] with a traced index (see quabla/core/rules/structural.py) ------------------------
    def row_index(self, x, i, idx):
        """Lines binding ``k``, the row of axis len(i.shape) of ``x`` that ``i`` selects at the
        batch index ``idx[:len(i.shape)]``."""
        b = len(self.nodes[i].shape)
        n = self.nodes[x].shape[b]
        return [f"k = _row({self.read(i, None, list(idx[:b]))}, {n})"]

    def op_dynamic_index(self, node, nid):
        x, i = node.operands
        b = len(self.nodes[i].shape)
        self.alloc(f"v{nid}", node.shape, node.dtype.name)
        target = lambda idx: f"v{nid}[{', '.join(idx) or '0'}]"
        self.grid_stride(tuple(node.shape), lambda idx: self.row_index(x, i, idx) + [
            f"{target(idx)} = {self.read(x, None, list(idx[:b]) + ['k'] + list(idx[b:]))}"])

    def op_dynamic_update_add(self, node, nid):
        x, i, v = node.operands
        b = len(self.nodes[i].shape)
        self.alloc(f"v{nid}", node.shape, node.dtype.name)

        def lines(idx):
            rest = list(idx[:b]) + list(idx[b + 1:])
            old = self.read(x, None, idx)
            return self.row_index(x, i, idx) + [
                f"v{nid}[{', '.join(idx)}] = ({old} + {self.read(v, None, rest)}) "
                f"if {idx[b]} == k else {old}"]
        self.grid_stride(tuple(node.shape), lines)


def _order(name):
    return (int(re.sub(r"\D", "", name)), name)


def _nbytes(shape, dtype):
    return math.prod(shape) * {"float64": 8, "float32": 4, "bool": 1}[dtype]


def _result_avals(node):
    """(shape, dtype name) of each result of a region node."""
    params = dict(node.params)
    if node.op == "cond":
        graph = params["true_fun"]
        return [(graph.nodes[o].shape, graph.nodes[o].dtype.name) for o in graph.outputs]
    body = params["body"]
    n = params["n_carry"]
    carry = [(body.nodes[o].shape, body.nodes[o].dtype.name) for o in body.outputs[:n]]
    if node.op == "while":
        return carry
    return carry + [((params["length"],) + tuple(body.nodes[o].shape), body.nodes[o].dtype.name)
                    for o in body.outputs[n:]]


def fused_loop_shape(graph, carries):
    """The shape S of the carries when a loop body ``graph`` maps element j of its carries to
    element j of its outputs (next carries, ys), so that one kernel can run the whole loop
    (``fused_loop``), else None. Its carries and outputs have shape S (at least one element)
    or are 0-d; every other node but inputs and constants has shape S or () and is
    - an elementwise op on operands of its own shape (a 0-d one then depends on 0-d values
      only, which every thread computes alike),
    - an index map of a 0-d value or of a loop invariant (an input other than the carries,
      or a constant), which a thread may read anywhere,
    - or a row read ``dynamic_index(x, i)`` with a 0-d ``i`` of an invariant ``x`` of shape
      (n, *S) (how a VJP's backward loop reads its step's carry).
    Anything else (a reduction, a product, an index map of a carry, other indexing, a nested
    region) leaves the loop on the host."""
    nodes = graph.nodes
    shapes = {tuple(nodes[o].shape) for o in list(carries) + list(graph.outputs)} - {()}
    if len(shapes) > 1 or not carries:
        return None
    shape = shapes.pop() if shapes else ()
    if math.prod(shape) == 0:
        return None
    invariant = lambda nid: nodes[nid].op == "constant" or (nodes[nid].op == "input"
                                                            and nid not in carries)
    for node in nodes:
        if node.op in ("input", "constant"):
            continue
        operands = [nodes[o] for o in node.operands]
        if node.op in ELEMENTWISE:
            ok = all(o.shape == node.shape for o in operands)
        elif node.op in INDEX_MAPS:
            ok = operands[0].shape == () or invariant(node.operands[0])
        elif node.op == "dynamic_index":
            ok = (operands[1].shape == () and invariant(node.operands[0])
                  and tuple(operands[0].shape[1:]) == shape)
        else:
            ok = False
        if not ok or tuple(node.shape) not in (shape, ()):
            return None
    return shape


def _test_then_step(cond_fun, body):
    """A while loop's ``cond_fun`` and ``body`` as one graph over the body's inputs, which
    returns the next carries, and the node of the predicate of the carries it was given."""
    nodes, at = list(body.nodes), dict(zip(cond_fun.inputs, body.inputs))
    for k, node in enumerate(cond_fun.nodes):
        if k not in at:
            at[k] = len(nodes)
            nodes.append(Node(node.op, tuple(at[o] for o in node.operands), node.params,
                              node.shape, node.dtype, node.weak))
    return Graph(nodes, body.inputs, body.outputs), at[cond_fun.outputs[0]]


def _statements(graph):
    """The schedule without its tile loops (see the module docstring)."""
    return [s for s in schedule(graph) if isinstance(s, (Group, Single))]


def generate(graph, launch):
    """``(source, constants, programs, traffic)``: the module source (kernels, then one host
    function per program: ``quabla_device_run(w, c, *inputs)`` for ``graph``, beside it
    ``quabla_device_resident`` on device arrays, one per region body),
    the constants (the ``c`` the host functions take) and ``(name, buffers, slots)`` per
    program: the scratch each needs (``w[name]``: the views ``slots``, (variable, dtype name,
    offset, shape) each, of buffers of ``buffers`` elements per dtype); ``traffic`` estimates
    the bytes a call of the main program moves (each array its kernels name, once per kernel;
    regions' bodies are not counted)."""
    module = _Module(launch)
    _Emitter(graph, module, ENTRY, top=True).build()
    hosts = [source for _, source, _, _ in module.programs]
    source = "\n".join(module.kernels) + "\n\n\n" + "\n\n".join(hosts)
    return (source, module.constants, [(n, b, s) for n, _, b, s in module.programs],
            module.traffic)
