"""``jit(f).lower(*args)``: the staged program for one signature, for inspection."""

__all__ = ["Lowered"]


class Lowered:
    """The transformed IR of a function for one signature, and (lazily) its generated source."""

    def __init__(self, graph, device, name):
        self.graph = graph
        self.device = device
        self.name = name
        self._source = None

    def as_text(self):
        """The IR, one node per line."""
        return self.graph.as_text()

    @property
    def source(self):
        """The generated Python source that Numba compiles (CPU back end)."""
        if self._source is None:
            from lowering.numba_cpu import module_source

            self._source = module_source(self.graph)[0]
        return self._source

    def compile(self):
        """The executable: called with one NumPy array per array leaf, it returns a list."""
        from lowering import compile as lower_compile

        return lower_compile(self.graph, self.device)

    def __repr__(self):
        return f"<Lowered {self.name}: {self.graph!r}>"
