"""Back ends: turn an IR ``Graph`` into an ``Executable``.

The one entry is ``compile(graph, device, options)``; a device is one entry of the registry
(``backends.BACKENDS``), and each back end lowers from the same graph (the loop-nest ones from
the same ``schedule.py``). This package imports only ``quabla.core`` (graphs, the primitive
registry, the reference interpreter, the version) and the leaf modules ``quabla.dtypes`` and
``quabla.errors``, never the transform layer; a graph arrives fully expanded (solvers already
loops: ``quabla.lower`` expands it).
"""

import os
import re

from quabla.core.primitives import PRIMITIVES

from .backends import BACKENDS, for_device

__all__ = ["compile", "source", "prepare", "backend_for", "FORCEABLE", "available_devices",
           "canonical_device"]

FORCEABLE = ("numba", "interpret")  # what ``QUABLA_BACKEND`` may name
EXTRAS = {"cuda": "pip install 'quabla[cuda]'", "mlx": "pip install 'quabla[mlx]'"}
DEVICE_NAME = re.compile(r"cpu|mlx|cuda(:[0-9]+)?")  # what a device may be called


def canonical_device(device):
    """``None`` is ``"cpu"`` and ``"cuda"`` is ``"cuda:0"``; other names are kept as given."""
    if device is None:
        return "cpu"
    return "cuda:0" if device == "cuda" else device


def backend_for(device):
    """The name of the back end that runs ``device``; ``QUABLA_BACKEND`` forces one."""
    forced = os.environ.get("QUABLA_BACKEND")
    if forced:
        if forced not in FORCEABLE:
            raise ValueError(f"QUABLA_BACKEND={forced!r} names no back end; valid values are "
                             f"{', '.join(map(repr, FORCEABLE))} (or leave it unset)")
        return forced
    name = canonical_device(device)
    return for_device(name).name if DEVICE_NAME.fullmatch(name) else None


def available_devices():
    """What this installation can run: ``"cpu"``, ``"cuda:N"`` per GPU numba-cuda finds (one
    under its simulator), ``"mlx"`` when MLX imports."""
    return [device for name in ("numba", "cuda", "mlx") for device in BACKENDS[name].devices()]


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


def _resolve(graph, device):
    """``(back end, canonical device)``; a device this installation cannot run raises
    ``UnsupportedOperationError``, a graph with unexpanded solvers ``ValueError``."""
    name = canonical_device(device)
    forced = os.environ.get("QUABLA_BACKEND")
    backend = backend_for(name)
    if not forced and (backend is None or name not in BACKENDS[backend].devices()):
        raise _absent(device)
    unexpanded = {n.op for n in graph.walk() if n.op in PRIMITIVES and PRIMITIVES[n.op].expand}
    if unexpanded:
        raise ValueError(f"lowering needs a graph without {sorted(unexpanded)}: expand it "
                         "first (quabla.core.expand, as quabla.lower does)")
    return BACKENDS[backend], name


def compile(graph, device=None, options=None):  # noqa: A001 - the package's one verb
    """An ``Executable`` for ``graph`` on ``device``: called with one ndarray per input, it
    returns a sequence of ndarrays, one per output. Its ``run`` attribute is the same call
    without indirection. ``options`` may hold ``precision`` (jit's ``precision=``), the
    ``name``/``function`` a warning names, and the ``origin`` naming the function as an edit
    of its source keeps it (quabla.staging.staged.function_origin)."""
    backend, name = _resolve(graph, device)
    backend.check_supported(graph, name)
    return backend.compile(graph, name, options or {})


def prepare(device=None):
    """Start, on a thread, what a first ``compile`` for ``device`` will wait for (its back
    end's ``prepare``: the CPU's loads LLVM), so that it overlaps the tracing of the graph. A
    device or ``QUABLA_BACKEND`` that ``compile`` would refuse is left to ``compile`` to name."""
    try:
        backend = backend_for(device)
    except (TypeError, ValueError):
        return
    if backend is not None:
        BACKENDS[backend].prepare(canonical_device(device))


def source(graph, device=None):
    """The text ``compile`` generates for ``graph`` on ``device`` and has Numba compile (the
    module of the CPU entry, or of the CUDA kernels and their host function); None where a
    back end generates none (MLX calls ``mlx.core`` from its rule table; the interpreter walks
    the graph). Ops the back end cannot lower raise as ``compile`` does."""
    backend, name = _resolve(graph, device)
    backend.check_supported(graph, name)
    return backend.source(graph, name)
