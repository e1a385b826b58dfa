"""Ahead of time: abstract arguments, compiled signatures and the name-keyed advanced layer.

``jit(f).lower(*args)`` takes arrays or ``ShapeDtype`` leaves; its ``compile()`` is a
``Compiled``: the jitted function fixed to that one signature, with the unchecked flat ``run``
(what the Trainer drives) and, on the CPU, ``.numba`` for users' own Numba code.
``Compiler``/``Program``/``Executable`` are the spec-first layer of 000 §3.1: inputs declared by
name, outputs in order (spec 000 §3.5, "S5-S9 as implemented").
"""

from . import dtypes, tree
from .array import adopt, array_shape, asarray
from .errors import TracerError, UnsupportedOperationError
from .staging import BadLeaf, classify_leaves, function_name, trace_function

__all__ = ["ShapeDtype", "CallSignature", "Compiled", "Compiler", "Program", "Executable"]

_LEAF = tree.flatten(0)[1]


class ShapeDtype:
    """An abstract array argument of ``lower``: a shape and a dtype, no data."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype=dtypes.float64):
        self.shape = array_shape(shape)
        self.dtype = dtypes.dtype(dtype)

    @property
    def part(self):
        """This leaf's part of a signature: that of a strong array of this shape and dtype."""
        return (self.shape, self.dtype.numpy, False)

    def __eq__(self, other):
        return isinstance(other, ShapeDtype) and (self.shape, self.dtype) == (other.shape,
                                                                               other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype.name))

    def __repr__(self):
        return f"ShapeDtype({self.shape}, {self.dtype})"


class CallSignature:
    """The arguments a function was lowered for, and how its results are assembled."""

    __slots__ = ("staged", "treedef", "parts", "diff", "assemble")

    def __init__(self, staged, treedef, parts, diff, assemble):
        self.staged = staged
        self.treedef = treedef
        self.parts = parts
        self.diff = diff
        self.assemble = assemble

    def arrays(self, args, kwargs):
        """The ndarrays of a call's array leaves, or a TypeError naming both signatures."""
        staged = self.staged
        args = staged._staged_args(args, kwargs)
        leaves, treedef = tree.flatten(args)
        try:
            parts, dynamic, traced = classify_leaves(leaves, self.diff)
        except BadLeaf as bad:
            raise staged._argument_error(args, bad.index) from None
        if traced:
            raise TracerError(f"the compiled {staged.name} runs concrete arrays; inside a trace, "
                              "call the jitted function itself")
        if treedef != self.treedef or parts != self.parts:
            raise TypeError(f"{staged.name} was compiled for arguments "
                            f"{staged.describe(self.treedef, self.parts)}, got "
                            f"{staged.describe(treedef, parts)}")
        return [d.value for d in dynamic]

    def input_names(self):
        """Each array leaf named by its path in the call: ``0``, ``1['w']``, ..."""
        n = self.treedef.num_leaves
        paths = tree.flatten_with_path(self.treedef.unflatten(list(range(n))))[0]
        return [self.staged.argument_name(path[0]) + "".join(f"[{key!r}]" for key in path[1:])
                for (path, _), part in zip(paths, self.parts) if part[0] != "static"]


class Compiled:
    """A lowered function compiled for its one signature: called like the jitted function
    (same pytrees, shapes and dtypes), it returns the same result. ``run`` is the unchecked
    flat call (one C-contiguous ndarray per array leaf, a list of ndarrays back)."""

    def __init__(self, executable, signature, device):
        self.executable = executable
        self.run = getattr(executable, "run", executable)
        self.signature = signature
        self.device = device
        self._numba = None

    def __call__(self, *args, **kwargs):
        outs = self.run(*self.signature.arrays(args, kwargs))
        return self.signature.assemble(list(map(adopt, outs)))

    @property
    def numba(self):
        """A ``numba.njit`` function for users' own ``@njit`` code (docs/numba-interop.md):
        one NumPy array per array leaf, returning the result's leaves (one: the array itself,
        a 0-d one as a scalar; several: a tuple)."""
        if self._numba is None:
            from lowering.numba_cpu import NativeExecutable

            if not isinstance(self.executable, NativeExecutable):
                raise UnsupportedOperationError(
                    f".numba needs the Numba CPU back end; {self.signature.staged.name} was "
                    f"compiled for device {self.device!r} by {type(self.executable).__name__}",
                    op="numba", device=self.device)
            from lowering.numba_cpu.interop import numba_function

            self._numba = numba_function(self.executable, "quabla_" + _identifier(
                self.signature.staged.name))
        return self._numba

    def __repr__(self):
        staged, sig = self.signature.staged, self.signature
        return f"<Compiled {staged.name} for {staged.describe(sig.treedef, sig.parts)}>"


def _identifier(name):
    return "".join(c if c.isalnum() else "_" for c in name).strip("_") or "f"


# -- the name-keyed layer -------------------------------------------------------------------------

class Program:
    """A traced program with named inputs: ``inputs`` (names), ``output_shapes``, its IR
    (``as_text``/``lower_text``), and ``compile(target)``. A single-output program returns a
    Tensor when executed, an ordered one a list."""

    def __init__(self, graph, single=False):
        self.graph = graph
        self.single = single

    @property
    def inputs(self):
        return list(self.graph.input_names)

    @property
    def input_shapes(self):
        return [tuple(self.graph.nodes[i].shape) for i in self.graph.inputs]

    @property
    def output_shapes(self):
        return [tuple(self.graph.nodes[o].shape) for o in self.graph.outputs]

    def as_text(self):
        """The IR, one node per line."""
        return self.graph.as_text()

    lower_text = as_text  # the v0.1 name

    def compile(self, target="cpu"):
        """An ``Executable`` for ``target`` (a device name, as ``jit``'s ``device=``)."""
        from .lower import compile_graph

        return Executable(self, compile_graph(self.graph, target))

    def __repr__(self):
        return f"<Program inputs={self.inputs} output_shapes={self.output_shapes}>"


class Executable:
    """A compiled ``Program``, called with its inputs by name (a dict, or keywords)."""

    def __init__(self, program, executable):
        self.program = program
        self.run = getattr(executable, "run", executable)

    def __call__(self, inputs=None, /, **named):
        given = dict(inputs or {}, **named)
        graph = self.program.graph
        names = graph.input_names
        missing = [n for n in names if n not in given]
        unexpected = sorted(set(given) - set(names))
        if missing or unexpected:
            raise TypeError(f"expected inputs {list(names)}; missing {missing}, "
                            f"unexpected {unexpected}")
        arrays = []
        for name, nid in zip(names, graph.inputs):
            node = graph.nodes[nid]
            value = given[name]
            # a Python number takes the declared dtype
            value = asarray(value, node.dtype if type(value) in (bool, int, float) else None)
            if tuple(value.shape) != tuple(node.shape) or value.dtype is not node.dtype:
                raise TypeError(f"input {name!r} must be {node.dtype}{list(node.shape)}, got "
                                f"{value.dtype}{list(value.shape)}")
            arrays.append(value.value)
        outs = list(map(adopt, self.run(*arrays)))
        return outs[0] if self.program.single else outs


class Compiler:
    """Traces functions against declared inputs: ``Compiler().trace(f, specs)``."""

    def trace(self, fun, specs):
        """A ``Program`` of ``fun`` called with one array per spec, in order; each spec is
        ``(name, shape)`` or ``(name, shape, dtype)`` (float64 by default)."""
        from .core.graph import Graph
        from .core.rewrite import simplify
        from .staging import Aval

        names, template = [], []
        for spec in specs:
            if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3) or not isinstance(
                    spec[0], str):
                raise TypeError(f"a spec is (name, shape) or (name, shape, dtype), got {spec!r}")
            if spec[0] in names:
                raise ValueError(f"input name {spec[0]!r} is declared twice")
            abstract = ShapeDtype(*spec[1:])
            names.append(spec[0])
            template.append(Aval(abstract.shape, abstract.dtype))
        treedef = tree.flatten(tuple(range(len(template))))[1]
        traced = trace_function(fun, treedef, template, function_name(fun))
        if traced.captures:
            raise TracerError(f"{function_name(fun)} closes over tracers of a trace in "
                              "progress; a Program traces a function on its own")
        graph = simplify(traced.graph)
        graph = Graph(graph.nodes, graph.inputs, graph.outputs, names)
        return Program(graph, single=traced.out_tree == _LEAF)
