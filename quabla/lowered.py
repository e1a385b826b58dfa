"""``jit(f).lower(*args)``: the staged program for one signature, to inspect or compile."""

__all__ = ["Lowered"]


class Lowered:
    """The transformed IR of a function for one signature (``as_text``, ``program``), its
    generated source, and ``compile()``: a callable with exactly that signature
    (``quabla.aot.Compiled``)."""

    options = None  # lowering.compile's options (jit's precision), set by jit's lower

    def __init__(self, graph, device, name, signature):
        self.graph = graph
        self.device = device
        self.name = name
        self.signature = signature  # a quabla.aot.CallSignature
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
            from .lower import graph_source

            self._source = graph_source(self.graph, self.device)
        return self._source

    @property
    def program(self):
        """The name-keyed ``Program`` of the IR, its outputs in order; an input is named by its
        argument's path (``0``, ``1['w']``, ...)."""
        from .aot import Program
        from .core.graph import Graph

        g = self.graph
        return Program(Graph(g.nodes, g.inputs, g.outputs, self.signature.input_names()))

    def compile(self):
        """The function compiled for this signature, called as the jitted function is."""
        from .aot import Compiled
        from .lower import compile_graph

        return Compiled(compile_graph(self.graph, self.device, self.options), self.signature,
                        self.device)

    def __repr__(self):
        return f"<Lowered {self.name}: {self.graph!r}>"
