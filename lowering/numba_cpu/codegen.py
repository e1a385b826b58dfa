"""Generates the source of one flat Numba C entry per graph.

The entry takes one tuple of arrays (see lowering/native.py): the inputs, the result arrays the
caller allocated, the non-scalar constants and one scratch buffer per dtype, in that order, and
views them with ``carray``. Fused groups become loop nests, 0-d values become scalar locals,
whole-array operations become loops or runtime kernels. Nothing is allocated: every array is a
result, a scratch slot (lowering/buffers.py) or a view of one, so the machine code needs no
Numba runtime and loads without Numba.
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


class _Named:
    """A dtype known by name only (constants and scratch buffers)."""

    def __init__(self, name):
        self.name = name


_FLOAT64 = _Named("float64")


class _Emitter:
    def __init__(self, graph):
        self.graph = graph
        self.nodes = graph.nodes
        self.lines = []
        self.results = {}    # output node -> the index of the first result it is
        for k, o in enumerate(graph.outputs):
            self.results.setdefault(o, k)
        self.result_of = {}  # variable -> index of the result array it is (a view of)
        self.constants = []  # non-scalar constant arrays, passed as trailing arguments
        self.inlined = {}    # group member -> its expression, spliced into its single consumer
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

    def emit(self, line, depth=1):
        self.lines.append("    " * depth + line)

    def alloc(self, var, shape, dtype, fill=None, result=None, expiry=None):
        """``var`` = an array of ``shape``: the result array of output node ``result``, else a
        slot of the scratch buffer of its dtype (see lowering/buffers.py), free again after
        statement ``expiry`` (the last reader of node ``var``; this statement for temporaries)."""
        shape = tuple(shape)
        k = self.results.get(result)
        if k is not None and self.nodes[result].shape != ():
            same = shape == tuple(self.nodes[result].shape)
            self.emit(f"{var} = r{k}" if same else f"{var} = {reshaped(f'r{k}', shape)}")
            self.result_of[var] = k
        else:
            size = int(np.prod(shape, dtype=np.int64))
            if expiry is None:
                expiry = self.last_use.get(node_id(var), self.now) if var[0] == "v" else self.now
            start = self.plan.take(var, dtype.name, size, expiry)
            self.slots.append((var, dtype.name, start, shape))  # viewed in the prologue
            self.root[var] = var
        if fill is not None:
            self.emit(f"{var}.fill({fill})")

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
            self.alloc(f"v{nid}", node.shape, node.dtype, fill=init, result=nid)

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
            self.alloc(out, new_shape, node.dtype, fill=args[0], result=node_id(out))
        elif new_shape == ():
            self.emit(f"{out} = {args[0]}[{', '.join('0' * len(src.shape))}]")
        else:
            self.emit(f"{out} = {reshaped(args[0], new_shape)}")
            self.view(out, args[0], node_id(out))

    def op_pad(self, node, out, args, low, high, interior):
        """Zeros with the operand scattered in: plain loops (slice assignment would make Numba
        compile its error-message machinery, seconds per process)."""
        src = self.nodes[node.operands[0]]
        self.alloc(out, node.shape, node.dtype, fill="0", result=node_id(out))
        idx = [f"i{k}" for k in range(len(src.shape))]
        target = [f"{lo} + {it + 1} * {i}" for i, lo, it in zip(idx, low, interior)]
        self.loops(src.shape, f"{out}[{', '.join(target)}] = {args[0]}[{', '.join(idx)}]")

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
            self.loops(shape, f"{out}[{', '.join(target)}] = {name}[{', '.join(idx)}]")
            offset += shape[axis]

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
        self.alloc(t, (B, M, N), node.dtype, result=node_id(out),
                   expiry=self.last_use.get(node_id(out), self.now))
        if B * M * N * K >= BLAS_THRESHOLD and blas_available():
            self.emit(f"for b in range({B}):")
            self.emit(f"np.dot({t}a[b], {t}b[b], {t}[b])", 2)
        else:
            self.emit(f"_matmul({t}a, {t}b, {t})")
        if node.shape == ():
            self.emit(f"{out} = {t}[0, 0, 0]")
        else:
            self.emit(f"{out} = {reshaped(t, node.shape)}")
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
        self.emit(f"{target} = {reshaped(name, shape3)}")

    def op_solve(self, node, out, args):
        rank = len(self.nodes[node.operands[0]].shape)  # a is [*batch, n, n]
        n = node.shape[rank - 2]
        m = int(np.prod(node.shape[rank - 1:], dtype=np.int64))  # 1 for a stack of vectors
        self.stacked("_solve", node, out, args, [(n, n), (n, m), (n, m)],
                     [(f"t{out}lu", (n, n)), (f"t{out}x", (n, m))])

    def op_cholesky(self, node, out, args):
        n = node.shape[-1]
        self.stacked("_cholesky", node, out, args, [(n, n), (n, n)], [(f"t{out}low", (n, n))])

    def stacked(self, kernel, node, out, args, matrices, workspaces):
        """``kernel`` on each matrix of a stack (the leading axes), through 2-d views of the
        operands and of ``out`` (of shapes ``matrices``, out's last); the float64 ``workspaces``
        are shared by all matrices."""
        self.alloc(out, node.shape, node.dtype, result=node_id(out))
        for name, shape in workspaces:
            self.alloc(name, shape, _FLOAT64)
        batch = int(np.prod(node.shape, dtype=np.int64)) // int(np.prod(matrices[-1]))
        views = [f"{reshaped(v, (batch,) + shape)}[b]" for v, shape in zip(args + [out], matrices)]
        self.emit(f"for b in range({batch}):")
        self.emit(f"{kernel}({', '.join(views + [name for name, _ in workspaces])})", 2)


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


def reshaped(var, shape):
    """A view of the C-contiguous array ``var`` with ``shape`` (no Numba reshape: its error
    path needs Numba's runtime)."""
    return f"carray(_data({var}), {tuple(shape)})"


def _argument(k, dtype, shape, start=0):
    pointer = f"_arg(args, {k}, {start}, {_np_dtype(dtype)})"
    return f"carray({pointer}, {tuple(shape) or (1,)})"


def generate(graph):
    """Returns ``(body_source, constants, buffers)``: the entry function's source, the constant
    arrays and the scratch buffers (``(dtype name, elements)`` each) that follow the inputs and
    results in its argument tuple."""
    e = _Emitter(graph)
    statements = schedule(graph)
    e.last_use = _last_uses(graph, statements)
    for k, stmt in enumerate(statements):
        e.now = k
        if isinstance(stmt, Group):
            e.group(stmt)
        else:
            e.single(stmt.nid)
        e.plan.release(k)
    nodes = graph.nodes
    n_in, n_out = len(graph.inputs), len(graph.outputs)
    for k, o in enumerate(graph.outputs):  # results not computed in place are copied there
        node, var = nodes[o], f"v{o}"
        if node.shape == ():
            e.emit(f"{_argument(n_in + k, node.dtype, ())}[0] = {var}")
        elif e.result_of.get(var) != k:
            idx = ", ".join(f"i{d}" for d in range(len(node.shape)))
            e.loops(node.shape, f"r{k}[{idx}] = {var}[{idx}]")
    prologue = []
    for k, nid in enumerate(graph.inputs):
        node = nodes[nid]
        suffix = "[0]" if node.shape == () else ""
        prologue.append(f"v{nid} = {_argument(k, node.dtype, node.shape)}{suffix}")
    for k, o in enumerate(graph.outputs):
        if nodes[o].shape != ():
            prologue.append(f"r{k} = {_argument(n_in + k, nodes[o].dtype, nodes[o].shape)}")
    first = n_in + n_out
    for k, c in enumerate(e.constants):
        dtype = {"f4": "float32", "f8": "float64", "b1": "bool"}[c.dtype.str[1:]]
        prologue.append(f"c{k} = {_argument(first + k, _Named(dtype), c.shape)}")
    names = sorted(e.plan.size)
    first += len(e.constants)
    for var, name, start, shape in e.slots:
        prologue.append(f"{var} = {_argument(first + names.index(name), _Named(name), shape, start)}")
    head = f"def {FUNCTION_NAME}(args):"
    body = [head] + ["    " + line for line in prologue] + e.lines
    return "\n".join(body) + "\n", e.constants, [(name, e.plan.size[name]) for name in names]
