"""The IR: an immutable SSA ``Graph`` of ``Node``s in topological order.

Every node has an op name, operand node ids, static hashable params, a static shape, a dtype
and a weak flag (for values born of Python scalars). Inputs are ``input`` nodes, constants are
``constant`` nodes holding a ``Const``. A primitive with several results (a control-flow region)
is one node of dtype ``RESULTS`` followed by one ``get`` node per result (param ``index``), which
is what every other node reads. Graphs hash structurally (input names excluded), so the compile
cache and the trace caches can key on them.
"""

import hashlib

import numpy as np

from .. import dtypes as _dt

__all__ = ["Node", "Graph", "GraphBuilder", "Const", "aval_text", "RESULTS"]

# The dtype of a node with several results; its values are the ``get`` nodes that follow it.
RESULTS = _dt.DType("results", object)


class Const:
    """A constant payload: hashes and compares by dtype, shape and exact bits.

    Megabyte payloads pass through every trace, transform and rewrite of a program, so nothing
    here reads all the bits unless it must: the hash reads a fixed sample of elements, equality
    is by identity of the payload first, and the digest of all the bits (``digest``: what
    fingerprints and tells apart two large payloads) is computed once, on first need.
    """

    __slots__ = ("value", "_hash", "_digest", "_splat")

    def __init__(self, value):
        value = np.array(value, copy=not (value.flags.c_contiguous and not value.flags.writeable))
        value.flags.writeable = False
        self.value = value
        self._digest = None
        self._splat = ()  # not known yet
        self._hash = hash((value.dtype.str, value.shape, _sample(value).tobytes()))

    @property
    def digest(self):
        """16 bytes of blake2b over the bits, dtype and shape."""
        if self._digest is None:
            h = hashlib.blake2b(digest_size=16)
            h.update(self.value.data)
            h.update(str((self.value.dtype.str, self.value.shape)).encode())
            self._digest = h.digest()
        return self._digest

    def __hash__(self):
        return self._hash

    def __reduce__(self):  # the hash is recomputed: it is Python's, salted per process
        return Const, (self.value,)

    def __eq__(self, other):
        if self is other:
            return True
        if not isinstance(other, Const) or self._hash != other._hash:
            return False
        a, b = self.value, other.value
        if a is b:
            return True
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.size <= _SAMPLE:
            return a.tobytes() == b.tobytes()
        return self.digest == other.digest

    def scalar(self):
        """The Python value of a one-element constant, else None."""
        return self.value.item() if self.value.size == 1 else None

    def splat(self):
        """The 0-d array of the element every element equals bit for bit, else None."""
        if self._splat == ():
            flat = self.value.reshape(-1)
            bits = flat.view(f"u{flat.itemsize}")
            sample = _sample(bits)  # a cheap refusal first: most payloads are no splat
            same = bits.size and (sample == sample[0]).all() and (bits == bits[0]).all()
            self._splat = flat[:1].copy().reshape(()) if same else None  # not a view of all
        return self._splat

    def __repr__(self):
        if self.value.ndim == 0:
            return repr(self.value.item())
        return "dense"


_SAMPLE = 64  # elements a Const's hash reads


def _sample(value):
    """At most ``_SAMPLE`` elements of ``value``, evenly spaced, the first and last among them."""
    flat = value.reshape(-1)
    if flat.size <= _SAMPLE:
        return flat
    return flat[np.linspace(0, flat.size - 1, _SAMPLE).astype(np.intp)]


class Node:
    __slots__ = ("op", "operands", "params", "shape", "dtype", "weak")

    def __init__(self, op, operands, params, shape, dtype, weak=False):
        self.op = op
        self.operands = operands
        self.params = params  # a tuple of (name, value) pairs, sorted by name
        self.shape = shape
        self.dtype = dtype
        self.weak = weak

    @property
    def kw(self):
        return dict(self.params)

    def key(self):
        return (self.op, self.operands, self.params, self.shape, self.dtype.name, self.weak)


def aval_text(shape, dtype):
    return f"{dtype.name}[{', '.join(map(str, shape))}]"


class Graph:
    """An immutable SSA graph: ``nodes`` in topological order, ``inputs`` and ``outputs`` as ids."""

    __slots__ = ("nodes", "inputs", "outputs", "input_names", "_hash")

    def __init__(self, nodes, inputs, outputs, input_names=None):
        self.nodes = tuple(nodes)
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.input_names = tuple(input_names) if input_names else tuple(
            f"in{i}" for i in range(len(self.inputs))
        )
        self._hash = None

    def _structure(self):
        return (tuple(n.key() for n in self.nodes), self.inputs, self.outputs)

    def __hash__(self):
        if self._hash is None:
            self._hash = hash(self._structure())
        return self._hash

    def __eq__(self, other):
        return (
            isinstance(other, Graph)
            and hash(self) == hash(other)
            and self._structure() == other._structure()
        )

    @property
    def in_avals(self):
        return [(self.nodes[i].shape, self.nodes[i].dtype) for i in self.inputs]

    @property
    def out_avals(self):
        return [(self.nodes[i].shape, self.nodes[i].dtype) for i in self.outputs]

    def with_inputs(self, order):
        """The same graph with its inputs permuted: input ``k`` is the old input ``order[k]``."""
        return Graph(self.nodes, [self.inputs[k] for k in order], self.outputs,
                     [self.input_names[k] for k in order])

    @staticmethod
    def sub_graphs(node):
        """The graphs a node's params hold (a region's bodies, a solver's operator)."""
        for _, value in node.params:
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, Graph):
                    yield item

    @staticmethod
    def map_sub_graphs(node, fun):
        """``node``'s params as a dict, each graph they hold replaced by ``fun(graph)``."""
        def mapped(value):
            if isinstance(value, Graph):
                return fun(value)
            if isinstance(value, tuple) and any(isinstance(v, Graph) for v in value):
                return tuple(mapped(v) for v in value)
            return value
        return {name: mapped(value) for name, value in node.params}

    def walk(self):
        """Every node of this graph and of the sub-graphs its nodes hold, depth first: what a
        whole-program check (a back end's support check, expansion) looks at."""
        for node in self.nodes:
            yield node
            for graph in Graph.sub_graphs(node):
                yield from graph.walk()

    def node_count(self, include_inputs=False):
        """Operation count: the measure the rewriter keeps small (inputs excluded by default)."""
        return sum(1 for n in self.nodes if include_inputs or n.op != "input")

    def fingerprint(self):
        """A stable digest of the structure, used by the on-disk compile cache."""
        h = hashlib.sha256()
        for n in self.nodes:
            params = tuple((k, _param_digest(v)) for k, v in n.params)
            h.update(repr((n.op, n.operands, params, n.shape, n.dtype.name, n.weak)).encode())
        h.update(repr((self.inputs, self.outputs)).encode())
        return h.hexdigest()

    def as_text(self):
        """A readable listing: one line per node, ``%id = op operands {params} : dtype[shape]``."""
        names = {i: name for i, name in zip(self.inputs, self.input_names)}
        head = ", ".join(
            f"%{i} {names[i]}: {aval_text(self.nodes[i].shape, self.nodes[i].dtype)}"
            for i in self.inputs
        )
        lines = [f"graph({head}) {{"]
        for i, n in enumerate(self.nodes):
            if n.op == "input":
                continue
            operands = ", ".join(f"%{o}" for o in n.operands)
            params = ", ".join(f"{k}={_param_text(v)}" for k, v in n.params)
            text = f"  %{i} = {n.op}"
            if operands:
                text += " " + operands
            if params:
                text += " {" + params + "}"
            text += " : " + aval_text(n.shape, n.dtype) + (" weak" if n.weak else "")
            lines.append(text)
        lines.append("  return " + ", ".join(f"%{o}" for o in self.outputs))
        lines.append("}")
        return "\n".join(lines)

    def __repr__(self):
        return f"<Graph: {len(self.inputs)} inputs, {self.node_count()} ops, {len(self.outputs)} outputs>"


def _param_digest(value):
    """A param as stable text for ``fingerprint``: constants and sub-graphs by their digests."""
    if isinstance(value, Const):
        return value.digest.hex()
    if isinstance(value, Graph):
        return value.fingerprint()
    if isinstance(value, tuple):
        return tuple(_param_digest(v) for v in value)
    return value


def _param_text(value):
    if isinstance(value, _dt.DType):
        return value.name
    if isinstance(value, Graph):
        return "{" + value.as_text().replace("\n", "\n  ") + "}"
    return repr(value)


class GraphBuilder:
    """Appends nodes to a graph under construction; ``build`` freezes it into a ``Graph``."""

    def __init__(self):
        self.nodes = []
        self.inputs = []
        self.input_names = []

    def input(self, shape, dtype, name=None, weak=False):
        nid = len(self.nodes)
        self.nodes.append(Node("input", (), (("index", len(self.inputs)),), tuple(shape), dtype,
                               weak))
        self.inputs.append(nid)
        self.input_names.append(name or f"in{len(self.inputs) - 1}")
        return nid

    def constant(self, value, weak=False):
        value = np.asarray(value)
        dtype = _dt.BY_NUMPY[value.dtype]
        return self.add("constant", (), (("value", Const(value)),), value.shape, dtype, weak)

    def add(self, op, operands, params, shape, dtype, weak=False):
        nid = len(self.nodes)
        self.nodes.append(Node(op, tuple(operands), params, tuple(shape), dtype, weak))
        return nid

    def add_results(self, op, operands, params, avals):
        """A node with several results: returns the ids of its ``get`` nodes, one per aval."""
        nid = self.add(op, operands, params, (), RESULTS)
        return [self.add("get", (nid,), (("index", k),), shape, dtype, weak)
                for k, (shape, dtype, weak) in enumerate(avals)]

    def copy_nodes(self, graph, remap, keep=None):
        """Append the nodes of ``graph`` that ``keep`` holds (all if None) and ``remap`` does
        not map yet, reading operand ``o`` as ``remap[o]``; ``remap`` (``graph``'s node ids to
        ids here) gains them. Inputs are never copied: ``remap`` maps those that are read."""
        inputs = set(graph.inputs)
        for nid, node in enumerate(graph.nodes):
            if nid not in remap and nid not in inputs and (keep is None or nid in keep):
                remap[nid] = self.add(node.op, tuple(remap[o] for o in node.operands),
                                      node.params, node.shape, node.dtype, node.weak)
        return remap

    def build(self, outputs):
        return Graph(self.nodes, self.inputs, outputs, self.input_names)
