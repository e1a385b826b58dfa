"""Back ends: turn an IR ``Graph`` into an ``Executable``.

The one entry is ``compile(graph, device, options)``; a device is one more name here, and each
back end lowers from the same graph (the loop-nest ones from the same ``schedule.py``). This
package imports only the IR of ``quabla.core`` (graphs and the primitive registry), never the
transform layer.
"""

import os
import re

__all__ = ["compile", "source", "backend_for", "BACKENDS", "available_devices",
           "canonical_device", "walk"]

BACKENDS = ("numba", "interpret")  # what ``QUABLA_BACKEND`` may name
EXTRAS = {"cuda": "pip install 'quabla[cuda]'", "mlx": "pip install 'quabla[mlx]'"}
DEVICE_NAME = re.compile(r"cpu|mlx|cuda(:[0-9]+)?")  # what a device may be called


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


def canonical_device(device):
    """``None`` is ``"cpu"`` and ``"cuda"`` is ``"cuda:0"``; other names are kept as given."""
    if device is None:
        return "cpu"
    return "cuda:0" if device == "cuda" else device


def _cuda_count():
    try:
        from .numba_cuda import device_count
    except ImportError:
        return 0
    return device_count()


def _mlx_imports():
    try:
        import mlx.core  # noqa: F401
    except ImportError:
        return False
    return True


def available_devices():
    """What this installation can run: ``"cpu"``, ``"cuda:N"`` per GPU numba-cuda finds (one
    under its simulator), ``"mlx"`` when MLX imports."""
    found = ["cpu"] + [f"cuda:{i}" for i in range(_cuda_count())]
    return found + ["mlx"] if _mlx_imports() else found


def _absent(device):
    """The error for a device this installation cannot run, naming what it can."""
    from quabla.errors import UnsupportedOperationError

    named = isinstance(device, str) and DEVICE_NAME.fullmatch(device)
    family = device.split(":")[0] if named else None
    install = f"; {EXTRAS[family]} installs it" if family in EXTRAS else ""
    known = "'cpu', 'cuda', 'cuda:N' or 'mlx'"
    what = "is not available" if family in EXTRAS else f"is not a device (expected {known})"
    return UnsupportedOperationError(
        f"device {device!r} {what}; this installation has "
        f"{', '.join(map(repr, available_devices()))}{install}",
        device=device,
    )


def walk(graph):
    """Every node of ``graph`` and of the sub-graphs its nodes' params hold (regions), so a
    back end can check a whole program, inactive branches and loop bodies included."""
    from quabla.core.graph import Graph

    for node in graph.nodes:
        yield node
        for _, value in node.params:
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, Graph):
                    yield from walk(item)


def _resolve(graph, device):
    """``(graph with its solvers expanded, canonical device, back-end name)``; a device this
    installation cannot run raises ``UnsupportedOperationError``."""
    from quabla.core.expand import expand

    name = canonical_device(device)
    backend = backend_for(name)
    if backend not in BACKENDS and name not in available_devices():
        raise _absent(device)
    return expand(graph), name, backend  # back ends see regions and plain ops, not solvers


def compile(graph, device=None, options=None):  # noqa: A001 - the package's one verb
    """An ``Executable`` for ``graph`` on ``device``: called with one ndarray per input, it
    returns a sequence of ndarrays, one per output. Its ``run`` attribute is the same call
    without indirection. ``options`` may hold ``precision`` (jit's ``precision=``) and the
    ``name``/``function`` a warning names."""
    graph, name, backend = _resolve(graph, device)
    options = options or {}
    if backend == "interpret":
        from .interpret import Interpreter

        return Interpreter(graph)
    if backend == "numba":
        from .numba_cpu import compile_graph

        return compile_graph(graph, options)
    if name == "mlx":
        from .mlx import compile_graph

        return compile_graph(graph, options)
    from .numba_cuda import compile_graph

    return compile_graph(graph, int(name[5:]), options)


def source(graph, device=None):
    """The text ``compile`` generates for ``graph`` on ``device`` and has Numba compile (the
    module of the CPU entry, or of the CUDA kernels and their host function); None where a
    back end generates none (MLX calls ``mlx.core`` from its rule table; the interpreter walks
    the graph). Ops the back end cannot lower raise as ``compile`` does."""
    graph, name, backend = _resolve(graph, device)
    if backend == "interpret":
        return None
    if backend == "numba":
        from .numba_cpu import module_source

        return module_source(graph)[0]
    if name == "mlx":
        from .mlx import check_supported

        check_supported(graph)
        return None
    from .numba_cuda import module_source

    return module_source(graph, int(name[5:]))
