"""The registry of back ends: one ``Backend`` entry per way of running a graph, so a new device
is one more entry here, not another branch in ``compile``.

An entry names its back end and gives ``devices()`` (the device names of this installation it
runs), ``compile(graph, device, options)``, ``source(graph, device)`` (the text it has Numba
compile, or None) and ``check_supported(graph, device)`` (``UnsupportedOperationError`` for
the first op it cannot lower, before anything runs), and may give ``prepare(device)``, which
starts on a thread what a first compile waits for, called as a jit call begins to trace (the
CPU's loads LLVM). Each imports its back end's package only
when called: Numba and MLX cost a fraction of a second to import.
"""

from typing import Callable, NamedTuple

__all__ = ["Backend", "BACKENDS", "for_device"]


class Backend(NamedTuple):
    name: str
    devices: Callable          # () -> [device name]
    compile: Callable          # (graph, device, options) -> Executable
    source: Callable           # (graph, device) -> str | None
    check_supported: Callable  # (graph, device) -> None, or raises
    prepare: Callable = lambda device: None  # starts what a first compile waits for


def _index(device):
    return int(device.split(":")[1]) if ":" in device else 0


# -- the Numba CPU entry ---------------------------------------------------------------------

def _cpu_compile(graph, device, options):
    from .numba_cpu import compile_graph
    return compile_graph(graph, options)


def _cpu_source(graph, device):
    from .numba_cpu import sources
    return "\n".join(sources(graph))


def _cpu_check(graph, device):
    from .numba_cpu.codegen import check_supported
    check_supported(graph, device)


def _cpu_prepare(device):
    from .native import preload_llvm
    preload_llvm()


# -- the NumPy reference interpreter ---------------------------------------------------------

def _interpret_compile(graph, device, options):
    from quabla.core.interpret import Interpreter
    return Interpreter(graph)


def _nothing(graph, device):
    """No source to show, or nothing to refuse (the interpreter runs every primitive)."""
    return None


# -- numba.cuda --------------------------------------------------------------------------------

def _cuda_devices():
    try:
        from .numba_cuda import device_count
    except ImportError:
        return []
    return [f"cuda:{i}" for i in range(device_count())]


def _cuda_compile(graph, device, options):
    from .numba_cuda import compile_graph
    return compile_graph(graph, _index(device), options)


def _cuda_source(graph, device):
    from .numba_cuda import module_source
    return module_source(graph, _index(device))


def _cuda_check(graph, device):
    from .numba_cuda.codegen import check_supported
    check_supported(graph, device)


# -- MLX ---------------------------------------------------------------------------------------

def _mlx_devices():
    try:
        import mlx.core  # noqa: F401
    except ImportError:
        return []
    return ["mlx"]


def _mlx_compile(graph, device, options):
    from .mlx import compile_graph
    return compile_graph(graph, options)


def _mlx_check(graph, device):
    from .mlx import check_supported
    check_supported(graph, device)


BACKENDS = {
    "numba": Backend("numba", lambda: ["cpu"], _cpu_compile, _cpu_source, _cpu_check,
                     _cpu_prepare),
    "interpret": Backend("interpret", lambda: ["cpu"], _interpret_compile, _nothing, _nothing),
    "cuda": Backend("cuda", _cuda_devices, _cuda_compile, _cuda_source, _cuda_check),
    "mlx": Backend("mlx", _mlx_devices, _mlx_compile, _nothing, _mlx_check),
}


def for_device(device):
    """The entry that runs a canonical device name (``QUABLA_BACKEND`` aside)."""
    if device == "cpu":
        return BACKENDS["numba"]
    return BACKENDS["cuda" if device.startswith("cuda") else device]
