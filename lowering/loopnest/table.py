"""A back end's lowering table: op name -> the function that lowers it. Each back end keeps
one (``numba_cpu/table.py``, ``numba_cuda/table.py``), filled by its family modules."""

__all__ = ["LoweringTable"]


class LoweringTable(dict):
    """``{op name: lowering}`` of the back end ``name``; an op is lowered one way only."""

    def __init__(self, name):
        super().__init__()
        self.name = name

    def register(self, entries):
        for op, fn in entries.items():
            if op in self:
                raise ValueError(f"the {self.name} lowering of {op!r} is registered twice")
            self[op] = fn
