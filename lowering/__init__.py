"""Back ends: turn an IR ``Graph`` into an ``Executable``.

The one entry is ``compile(graph, device, options)``. This package imports only the IR of
``quabla.core`` (graphs and the primitive registry), never the transform layer.
"""

import os

__all__ = ["compile", "backend_for", "BACKENDS"]

BACKENDS = ("numba", "interpret")  # what ``QUABLA_BACKEND`` may name


def backend_for(device):
    """The back-end name a device uses; ``QUABLA_BACKEND=interpret`` forces the reference."""
    forced = os.environ.get("QUABLA_BACKEND")
    if forced:
        if forced not in BACKENDS:
            raise ValueError(f"QUABLA_BACKEND={forced!r} names no back end; valid values are "
                             f"{', '.join(map(repr, BACKENDS))} (or leave it unset)")
        return forced
    if device in (None, "cpu"):
        return "numba"
    return device


def compile(graph, device=None, options=None):  # noqa: A001 - the package's one verb
    """An ``Executable`` for ``graph``: called with one ndarray per input, it returns a sequence
    of ndarrays, one per output. Its ``run`` attribute is the same call without indirection."""
    backend = backend_for(device)
    if backend == "interpret":
        from .interpret import Interpreter

        return Interpreter(graph)
    if backend == "numba":
        from .numba_cpu import compile_graph

        return compile_graph(graph, options or {})
    from quabla.errors import UnsupportedOperationError

    raise UnsupportedOperationError(
        f"device {device!r} is not available in this build yet; use device='cpu'",
        op="jit", device=device,
    )
