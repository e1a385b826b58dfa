"""Ahead of time: what ``lower`` and ``compile`` give.

``jit(f).lower(*args)`` is a ``Lowered``: the staged program of one signature (its
``CallSignature``), to inspect or compile. Its ``compile()`` is a ``Compiled``: the jitted
function fixed to that signature, with the unchecked flat ``run`` (what the Trainer drives) and,
on the CPU, ``.numba`` for users' own Numba code. ``Program``/``Executable`` are the name-keyed
layer of 000 §3.1 (inputs by name, outputs in order; spec 000 §3.5, "S5-S9 as implemented"),
which ``Lowered.program`` and ``Compiler`` (``jit.py``) make.
"""

from .. import tree
from ..array import adopt, asarray
from ..core.graph import Graph
from ..errors import TracerError, UnsupportedOperationError
from ..lower import compile_graph, graph_source
from .signature import BadLeaf, classify_leaves

__all__ = ["CallSignature", "Lowered", "Compiled", "Program", "Executable"]


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
        args = staged.staged_args(args, kwargs)
        leaves, treedef = tree.flatten(args)
        try:
            parts, dynamic, traced = classify_leaves(leaves, self.diff)
        except BadLeaf as bad:
            raise staged.argument_error(args, bad.index) from None
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


class Lowered:
    """The transformed IR of a function for one signature (``as_text``, ``program``), its
    generated source, and ``compile()``: a callable with exactly that signature (``Compiled``).
    ``options`` are lowering.compile's (jit's precision and names)."""

    def __init__(self, graph, device, name, signature, options=None):
        self.graph = graph
        self.device = device
        self.name = name
        self.signature = signature
        self.options = options
        self._source = None

    def as_text(self):
        """The IR, one node per line."""
        return self.graph.as_text()

    @property
    def source(self):
        """The Python source this device's back end generates and has Numba compile: the CPU
        entry's module, or the CUDA kernels' and their host function's; None on MLX, whose
        program is calls of ``mlx.core``, not generated text."""
        if self._source is None:
            self._source = graph_source(self.graph, self.device)
        return self._source

    @property
    def program(self):
        """The name-keyed ``Program`` of the IR, its outputs in order; an input is named by its
        argument's path (``0``, ``1['w']``, ...)."""
        g = self.graph
        return Program(Graph(g.nodes, g.inputs, g.outputs, self.signature.input_names()))

    def compile(self):
        """The function compiled for this signature, called as the jitted function is."""
        return Compiled(compile_graph(self.graph, self.device, self.options), self.signature,
                        self.device)

    def __repr__(self):
        return f"<Lowered {self.name}: {self.graph!r}>"


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
            from lowering.numba_cpu import NativeExecutable, TermsExecutable

            if not isinstance(self.executable, (NativeExecutable, TermsExecutable)):
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
