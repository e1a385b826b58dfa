"""The user package's one door to the back ends: a staged graph has its solvers expanded here
(``core.expand``: their iterations as loops), then ``lowering`` compiles it, so ``lowering``
never runs a transform and imports nothing above ``quabla.core``. ``lowering`` is imported on
the first compile: eager ops never load it (nor Numba)."""

from .core.expand import expand

__all__ = ["compile_graph", "graph_source", "compile_in_background", "prepare"]


def prepare(device=None):
    """``lowering.prepare``: the back end starts what its first compile waits for, on a thread,
    while the caller traces the graph."""
    import lowering

    lowering.prepare(device)


def compile_graph(graph, device=None, options=None):
    """``lowering.compile`` of the expanded graph: an executable for ``device``."""
    import lowering

    return lowering.compile(expand(graph), device, options)


def graph_source(graph, device=None):
    """``lowering.source`` of the expanded graph: the text the device's back end compiles."""
    import lowering

    return lowering.source(expand(graph), device)


def compile_in_background(graph, device, label, on_native, options=None):
    """``lowering.background.compile_in_background`` of the expanded graph."""
    from lowering.background import compile_in_background as background

    return background(expand(graph), device, label, on_native, options)
