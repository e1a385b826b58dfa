"""Generates the source of one flat Numba function per graph.

Fused groups become loop nests, 0-d values become scalar locals, and whole-array operations
(reshape, pad, concatenate, dot_general through BLAS, solve, cholesky) become NumPy calls that
Numba compiles. Non-scalar constants are passed in as trailing arguments by the wrapper.
"""

import math

import numpy as np

from quabla.core.primitives import PRIMITIVES
from ..buffers import ScratchPlan
from ..schedule import INDEX_MAPS, REDUCTIONS, Group, schedule

__all__ = ["generate", "FUNCTION_NAME", "BLAS_THRESHOLD"]

# Products with at least this many multiply-adds go to BLAS when SciPy (which Numba needs for
# np.dot) is installed and QUABLA_BLAS is not 0; smaller ones are faster as loops, with no BLAS
# threads to wake.
BLAS_THRESHOLD = 1 << 18


def blas_available():
    import importlib.util
    import os

    return os.environ.get("QUABLA_BLAS", "1") != "0" and importlib.util.find_spec("scipy") is not None

FUNCTION_NAME = "quabla_entry"

_OPERAND_NAMES = {"select": ("pred", "x", "y"), "cast": ("x",)}


def _operand_names(op):
    names = _OPERAND_NAMES.get(op)
    if names is None:
        names = tuple(PRIMITIVES[op].spec["operands"])
    return names


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


class _Emitter:
    def __init__(self, graph):
        self.graph = graph
        self.nodes = graph.nodes
        self.lines = []
        self.constants = []  # non-scalar constant arrays, passed as trailing arguments
        self.inlined = {}    # group member -> its expression, spliced into its single consumer
        self.plan = ScratchPlan()  # where intermediates live in the scratch buffers
        self.slots = []      # (variable, dtype name, offset, shape) of each scratch view
        self.root = {}       # variable in the scratch buffers -> the variable owning its slot
        self.now = 0         # index of the statement being emitted
        self.last_use = {}   # node id -> index of the last statement that reads it
        self.outputs = set(graph.outputs)
        self.stored = set()  # group members that have a buffer
        self.consumers = {}
        for nid, node in enumerate(graph.nodes):
            for o in node.operands:
                self.consumers.setdefault(o, []).append(nid)

    def emit(self, line, depth=1):
        self.lines.append("    " * depth + line)

    def alloc(self, var, shape, dtype, fill=None, fresh=False, expiry=None):
        """``var`` = an array of ``shape``: fresh memory for what the caller receives, else a
        slot of the scratch buffer of its dtype (see lowering/buffers.py), free again after
        statement ``expiry`` (the last reader of node ``var``; this statement for temporaries)."""
        shape = tuple(shape)
        if fresh:
            init = "np.empty" if fill is None else "np.zeros" if fill == "0" else None
            if init:
                self.emit(f"{var} = {init}({shape}, {_np_dtype(dtype)})")
            else:
                self.emit(f"{var} = np.full({shape}, {fill}, {_np_dtype(dtype)})")
            return
        size = int(np.prod(shape, dtype=np.int64))
        if expiry is None:
            expiry = self.last_use.get(node_id(var), self.now) if var[0] == "v" else self.now
        start = self.plan.take(var, dtype.name, size, expiry)
        self.slots.append((var, dtype.name, start, shape))  # a view the wrapper passes in
        if fill is not None:
            self.emit(f"{var}.fill({fill})")
        self.root[var] = var

    def view(self, var, of, nid):
        """``var`` (node ``nid``) is a view of ``of``: it keeps the slot of ``of`` alive."""
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
        return f"v{nid}[{', '.join(idx)}]"

    def scalar_expr(self, node, args):
        prim = PRIMITIVES[node.op]
        params = dict(node.params)
        fields = dict(zip(_operand_names(node.op), args))
        if node.op == "cast":
            fields["dtype"] = params["dtype"].name
        else:
            fields.update(params)
        return prim.scalar.format(**fields)

    def gather(self, node, group, idx):
        """Index maps read their (materialised) source at a remapped index."""
        source = node.operands[0]
        src = self.nodes[source]
        if src.shape == ():
            return f"v{source}"
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
        return f"v{source}[{', '.join(sidx)}]"

    # -- statements --------------------------------------------------------------------------
    def group(self, group):
        shape = group.shape
        self.stored |= group.materialized
        idx = [f"i{k}" for k in range(len(shape))]
        for m in group.members:
            node = self.nodes[m]
            if node.op in REDUCTIONS:
                self.reduction_init(node, m)
            elif m in group.materialized:
                self.alloc(f"v{m}", shape, node.dtype, fresh=m in self.outputs)
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
            else:
                expr = self.scalar_expr(node, [self.read(o, group, idx) for o in node.operands])
            if m in single_use:
                self.inlined[m] = expr
                continue
            self.emit(f"s{m} = {expr}", depth)
            if m in group.materialized:
                self.emit(f"v{m}[{', '.join(idx)}] = s{m}", depth)

    def single_uses(self, group):
        """Members read exactly once, by another member whose template names that operand once:
        their expression is spliced into the reader (fewer locals: Numba compiles faster)."""
        uses = {}
        for m in group.members:
            node = self.nodes[m]
            if node.op in INDEX_MAPS:
                continue
            template = PRIMITIVES[node.op].scalar if node.op not in REDUCTIONS else "{x}"
            names = ("x",) if node.op in REDUCTIONS else _operand_names(node.op)
            for o, name in zip(node.operands, names):
                weight = template.count("{" + name + "}")
                uses[o] = uses.get(o, 0) + weight
        return {
            m for m in group.members
            if uses.get(m) == 1 and m not in group.materialized
            and self.nodes[m].op not in REDUCTIONS and self.consumers_in(m, group)
        }

    def consumers_in(self, nid, group):
        return all(c in group.member_set for c in self.consumers.get(nid, ()))

    _INIT = {"reduce_sum": "0", "reduce_max": "-math.inf", "reduce_min": "math.inf",
             "reduce_or": "False", "reduce_and": "True"}

    def reduction_init(self, node, nid):
        init = self._INIT[node.op]
        if node.op in ("reduce_sum", "reduce_max", "reduce_min"):
            init = _literal(float(eval(init, {"math": math})), node.dtype)
        if node.shape == ():
            self.emit(f"v{nid} = {init}")
        else:
            self.alloc(f"v{nid}", node.shape, node.dtype, fill=init, fresh=nid in self.outputs)

    def reduction_step(self, node, nid, group, idx, depth):
        axes = dict(node.params)["axes"]
        value = self.read(node.operands[0], group, idx)
        target = f"v{nid}" if node.shape == () else (
            f"v{nid}[{', '.join(i for k, i in enumerate(idx) if k not in axes)}]"
        )
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
                self.constants.append(value)
            return
        if node.shape == () and PRIMITIVES[op].elementwise:
            self.emit(f"{out} = {self.scalar_expr(node, args)}")
            return
        handler = getattr(self, "op_" + op, None)
        if handler is None:
            from quabla.errors import UnsupportedOperationError

            raise UnsupportedOperationError(op=op, device="cpu")
        handler(node, out, args, **params)

    # -- whole-array operations ----------------------------------------------------------------
    def op_reshape(self, node, out, args, new_shape):
        src = self.nodes[node.operands[0]]
        if src.shape == ():
            self.alloc(out, new_shape, node.dtype, fill=args[0], fresh=True)
        elif new_shape == ():
            self.emit(f"{out} = {args[0]}.ravel()[0]")
        else:
            self.emit(f"{out} = {args[0]}.reshape({tuple(new_shape)})")
            self.view(out, args[0], node_id(out))

    def op_pad(self, node, out, args, low, high, interior):
        """Zeros with the operand scattered in: plain loops (slice assignment would make Numba
        compile its error-message machinery, seconds per process)."""
        src = self.nodes[node.operands[0]]
        self.alloc(out, node.shape, node.dtype, fill="0", fresh=node_id(out) in self.outputs)
        idx = [f"i{k}" for k in range(len(src.shape))]
        target = [f"{lo} + {it + 1} * {i}" for i, lo, it in zip(idx, low, interior)]
        self.loops(src.shape, f"{out}[{', '.join(target)}] = {args[0]}[{', '.join(idx)}]")

    def loops(self, shape, statement):
        for depth, n in enumerate(shape):
            self.emit(f"for i{depth} in range({n}):", depth + 1)
        self.emit(statement, len(shape) + 1)

    def op_concatenate(self, node, out, args, axis):
        self.emit(f"{out} = np.concatenate(({', '.join(args)},), axis={axis})")

    def op_dot_general(self, node, out, args, dimension_numbers):
        """Operands arranged as (batch, rows, contraction) and (batch, contraction, cols);
        BLAS (np.dot, which needs SciPy) for large products, a vectorisable loop nest else."""
        (lc, rc), (lb, rb) = dimension_numbers
        lhs, rhs = (self.nodes[o] for o in node.operands)
        if lhs.shape == () or rhs.shape == ():
            self.emit(f"{out} = {args[0]} * {args[1]}")
            return
        lf = [d for d in range(len(lhs.shape)) if d not in lc and d not in lb]
        rf = [d for d in range(len(rhs.shape)) if d not in rc and d not in rb]
        prod = lambda shape, dims: int(np.prod([shape[d] for d in dims], dtype=np.int64))
        B, M, K, N = prod(lhs.shape, lb), prod(lhs.shape, lf), prod(lhs.shape, lc), prod(rhs.shape, rf)
        t = f"t{out}"
        self.arrange(f"{t}a", args[0], lhs, tuple(lb) + tuple(lf) + tuple(lc), (B, M, K))
        self.arrange(f"{t}b", args[1], rhs, tuple(rb) + tuple(rc) + tuple(rf), (B, K, N))
        self.alloc(t, (B, M, N), node.dtype, fresh=node_id(out) in self.outputs,
                   expiry=self.last_use.get(node_id(out), self.now))
        if B * M * N * K >= BLAS_THRESHOLD and blas_available():
            self.emit(f"for b in range({B}):")
            self.emit(f"np.dot({t}a[b], {t}b[b], {t}[b])", 2)
        else:
            self.emit(f"_matmul({t}a, {t}b, {t})")
        if node.shape == ():
            self.emit(f"{out} = {t}[0, 0, 0]")
        else:
            self.emit(f"{out} = {t}.reshape({tuple(node.shape)})")
            self.view(out, t, node_id(out))

    def arrange(self, target, name, node, perm, shape3):
        """``target`` = the operand with axes in ``perm`` order, as a C-contiguous 3-d array;
        a permutation is copied with loops (cheaper to compile than np.ascontiguousarray)."""
        if perm != tuple(range(len(node.shape))):
            permuted = tuple(node.shape[p] for p in perm)
            self.alloc(target, permuted, node.dtype)
            source = [None] * len(perm)
            for k, p in enumerate(perm):
                source[p] = f"i{k}"
            idx = ", ".join(f"i{k}" for k in range(len(perm)))
            self.loops(permuted, f"{target}[{idx}] = {name}[{', '.join(source)}]")
            name = target
        self.emit(f"{target} = {name}.reshape({shape3})")

    def op_solve(self, node, out, args):
        self.emit(f"{out} = _solve({args[0]}, {args[1]})")

    def op_cholesky(self, node, out, args):
        self.emit(f"{out} = _cholesky({args[0]})")


def _last_uses(graph, statements):
    """Node id -> index of the last statement reading it (outputs live to the end). Reading an
    index map may gather from its source again (see ``_Emitter.read``), so that reads the
    source too."""
    last = {}

    def mark(o, k):
        last[o] = k
        if graph.nodes[o].op in INDEX_MAPS:
            for source in graph.nodes[o].operands:
                mark(source, k)

    for k, stmt in enumerate(statements):
        for nid in stmt.members if isinstance(stmt, Group) else (stmt.nid,):
            for o in graph.nodes[nid].operands:
                mark(o, k)
    for o in graph.outputs:
        last[o] = len(statements)
    return last


def node_id(var):
    """The node id of a value variable ``v12``."""
    return int(var[1:])


def generate(graph):
    """Returns ``(body_source, constants, workspace)``: the entry function's source, the
    constant arrays to pass after the inputs, and the scratch plan: ``({dtype name: elements},
    slots)``, each slot ``(variable, dtype name, offset, shape)`` a view of the scratch buffer of
    its dtype, passed after the constants in that order."""
    e = _Emitter(graph)
    for k, nid in enumerate(graph.inputs):
        node = graph.nodes[nid]
        e.emit(f"v{nid} = a{k}[()]" if node.shape == () else f"v{nid} = a{k}")
    statements = schedule(graph)
    e.last_use = _last_uses(graph, statements)
    for k, stmt in enumerate(statements):
        e.now = k
        if isinstance(stmt, Group):
            e.group(stmt)
        else:
            e.single(stmt.nid)
        e.plan.release(k)
    # what the caller receives must not live in the scratch buffers the next call reuses
    outs = ", ".join(f"v{o}.copy()" if f"v{o}" in e.root else f"v{o}" for o in graph.outputs)
    e.emit(f"return ({outs},)")
    workspace = (dict(e.plan.size), tuple(e.slots))
    params = [f"a{k}" for k in range(len(graph.inputs))] + [f"c{k}" for k in range(len(e.constants))]
    params += [var for var, _, _, _ in e.slots]
    head = f"def {FUNCTION_NAME}({', '.join(params)}):"
    return "\n".join([head] + e.lines) + "\n", e.constants, workspace
