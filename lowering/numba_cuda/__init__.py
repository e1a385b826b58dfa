"""The numba.cuda back end: generated kernels (lowering/numba_cuda/codegen.py) launched by a
generated host function, for ``jit(f, device="cuda:N")``.

Each call uploads the inputs, runs the kernels on the program's device with intermediates in a
pooled device scratch set (one per concurrent call, as on the CPU) and downloads the results;
the resident call (``CudaExecutable.resident``, what the Trainer drives) takes and returns
device arrays instead, so values stay on the device between calls.
On a GPU, every kernel is compiled for its signature when the executable is made, and the
PTX and cubins go into the on-disk compile cache (lowering/numba_cuda/compiled.py), so a warm
process compiles nothing; under ``NUMBA_ENABLE_CUDASIM=1`` kernels run as Python and there is
nothing to compile or store.
Large matrix products call cuBLAS where nvmath-python is installed (lowering/numba_cuda/blas.py),
else a generated tiled kernel.
"""

import contextlib
import threading

import numpy as np

from quabla.errors import UnsupportedOperationError
from . import blas, compiled
from .codegen import ENTRY, RESIDENT, Launch, check_supported, generate

__all__ = ["device_count", "simulated", "compile_graph", "module_source", "default_launch",
           "CudaExecutable", "Launch", "SIMULATOR_LAUNCH"]

# The simulator runs every thread as a Python thread: few, small blocks (still more than one,
# so the cross-block paths run).
SIMULATOR_LAUNCH = Launch(threads=8, blocks=2, rows=2, tile=4)


def simulated():
    """Is numba.cuda its simulator in this process (NUMBA_ENABLE_CUDASIM=1 when Numba was
    first imported)?"""
    import numba

    return bool(numba.config.ENABLE_CUDASIM)


def device_count():
    """How many GPUs numba.cuda sees: 1 under its simulator, 0 without numba-cuda, a driver
    or a GPU."""
    try:
        from numba import cuda

        return len(cuda.gpus) if cuda.is_available() else 0
    except ImportError:  # numba-cuda missing, or CudaSupportError (an ImportError)
        return 0


def default_launch():
    """This process's launch configuration: the simulator's, or a GPU's with cuBLAS where
    nvmath-python is installed."""
    return SIMULATOR_LAUNCH if simulated() else Launch(cublas=blas.available())


def module_source(graph, index=0):
    """The module ``compile_graph`` generates for ``graph`` (its kernels and host function),
    for this process's launch configuration; an op this back end cannot lower raises."""
    check_supported(graph, f"cuda:{index}")
    return generate(graph, default_launch()).source


def compile_graph(graph, index=0, options=None, launch=None):
    """A ``CudaExecutable`` of ``graph`` on GPU ``index``. Every op is checked first (also in
    the graphs that nodes' params hold): one this back end cannot lower raises
    UnsupportedOperationError before anything is compiled or run. ``launch``: the launch
    configuration (by default ``default_launch()``)."""
    device = f"cuda:{index}"
    check_supported(graph, device)
    count = device_count()
    if not 0 <= index < count:
        raise UnsupportedOperationError(
            f"device {device!r} is not available: numba-cuda sees {count} GPU(s) "
            "(install the 'cuda' extra, or set NUMBA_ENABLE_CUDASIM=1 for its simulator)",
            op="jit", device=device)
    generated = generate(graph, launch or default_launch())
    return CudaExecutable(graph, index, generated)


class CudaExecutable:
    """Called with one ndarray per input, returns a list of ndarrays, one per output; ``run``
    is the same without checks (C-contiguous arrays of the graph's dtypes and shapes).
    ``resident`` is ``run`` on device arrays (``to_device(array)``; a 0-d value is an array of
    one element), returning device arrays of its own (copies out of the scratch set, so they
    may be passed to the next call); ``to_host(value, shape, dtype)`` reads one back.
    ``traffic``: the bytes of device memory a call's kernels read and write, estimated from
    the arrays each one names (what a bandwidth figure divides); ``kernels``: the module's
    numba.cuda kernels, by name."""

    def __init__(self, graph, index, generated):
        from numba import cuda

        self.graph = graph
        self.source = generated.source
        self.device = f"cuda:{index}"
        self.traffic = generated.traffic
        name = f"quabla_cuda_{graph.fingerprint()[:16]}"
        gpu = cuda.gpus[index]
        self._gpu = gpu
        with gpu:
            module = (compiled.load(self.source, name) if simulated() else
                      compiled.bind(self.source, name, generated.signatures,
                                    generated.texts, gpu))
            fixed = tuple(cuda.to_device(np.ascontiguousarray(c)) for c in generated.constants)
        entry, resident = getattr(module, ENTRY), getattr(module, RESIDENT)
        self.kernels = {k: getattr(module, k) for k in generated.signatures}
        pool = []
        # the simulator runs one kernel at a time (and swaps the kernels' global ``cuda``
        # while it does): calls are serialised there
        guard = threading.Lock() if simulated() else contextlib.nullcontext()

        def scratch():
            """One scratch set: per program (the main one and each region body's), the views
            its host function unpacks, in buffers of its own."""
            with gpu:
                return {name: _views(buffers, slots)
                        for name, buffers, slots in generated.programs}

        def call(function, arrays, own=False):
            w = pool.pop() if pool else scratch()
            try:
                with guard, gpu:
                    outs = function(w, fixed, *arrays)
                    return [_owned(o) for o in outs] if own else outs
            finally:
                pool.append(w)

        self.run = lambda *arrays: call(entry, arrays)
        self.resident = lambda *values: call(resident, values, own=True)

    def to_device(self, array):
        from numba import cuda

        with self._gpu:
            # C order: the layout every kernel is compiled for (another would compile again)
            return cuda.to_device(np.ascontiguousarray(array).reshape(array.shape or (1,)))

    def to_host(self, value, shape, dtype):
        with self._gpu:
            return value.copy_to_host().reshape(shape).astype(dtype, copy=False)

    def __call__(self, *args):
        """``run`` for arrays of any layout and dtype: each is checked and converted first."""
        nodes = self.graph.nodes
        if len(args) != len(self.graph.inputs):
            raise TypeError(f"expected {len(self.graph.inputs)} arrays, got {len(args)}")
        arrays = []
        for a, nid in zip(args, self.graph.inputs):
            a = np.asarray(a, nodes[nid].dtype.numpy, order="C")
            if a.shape != tuple(nodes[nid].shape):
                raise ValueError(f"expected shape {tuple(nodes[nid].shape)}, got {a.shape}")
            arrays.append(a)
        return self.run(*arrays)


def _owned(value):
    """A device array of its own holding ``value`` (a scratch view, an input or a constant)."""
    from numba import cuda

    out = cuda.device_array(value.shape, value.dtype)
    out.copy_to_device(value)
    return out


def _views(buffers, slots):
    from numba import cuda

    whole = {name: cuda.device_array(size, np.bool_ if name == "bool" else name)
             for name, size in buffers}
    return tuple(whole[name][start:start + int(np.prod(shape))].reshape(shape)
                 for _, name, start, shape in slots)
