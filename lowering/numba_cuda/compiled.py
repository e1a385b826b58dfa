"""A CUDA module's kernels compiled for their signatures (``Generated.signatures``): on a GPU
through the on-disk compile cache, or to PTX for a compute capability with no GPU at hand.

numba.cuda compiles a kernel in two steps: NVVM turns Numba's IR into PTX (most of the time),
then the driver's linker turns PTX into a cubin. One cache entry holds both results for every
kernel of a module, as numba-cuda's own cache stores a kernel (the state its ``_Kernel``
reduces to, pickled), so a warm process runs neither. The entry's key names the module source,
the signatures, the compute capability, numba-cuda's version and the device functions' source
(runtime.py). Like every entry, it is read only after lowering/cache.py has checked its owner,
its permissions and its digest (docs/compile-cache.md): a pickle is trusted exactly as far as
the object code the CPU back end links into the process.
"""

import hashlib
import os
import pickle
import types

from .. import cache

__all__ = ["load", "bind", "ptx"]


def load(source, name, filename=None):
    """The module of ``source`` (its kernels not compiled yet)."""
    module = types.ModuleType(name)
    exec(compile(source, filename or f"<quabla cuda {name}>", "exec"), module.__dict__)
    return module


def cache_key(source, signatures, cc):
    import numba_cuda

    with open(os.path.join(os.path.dirname(__file__), "runtime.py"), "rb") as f:
        runtime = hashlib.sha256(f.read()).hexdigest()[:16]
    return cache.entry_key(f"# CUDA sm_{cc[0]}{cc[1]}; numba-cuda={numba_cuda.__version__}; "
                           f"runtime={runtime}\n# {sorted(signatures.items())!r}\n{source}")


def bind(source, name, signatures, gpu):
    """The module of ``source`` with every kernel compiled for its signature and loaded on
    ``gpu`` (whose context is current): read from the cache entry when there is a valid one,
    else compiled and stored."""
    from numba.cuda.dispatcher import _Kernel

    key = cache_key(source, signatures, gpu.compute_capability)
    module = load(source, name, cache.write_source(key, source))
    states = _stored(key, signatures)
    if states is not None:
        for kernel_name, state in states.items():
            kernel = _Kernel._rebuild(**state)
            kernel.bind()
            getattr(module, kernel_name).add_overload(kernel, kernel.argument_types)
        return module
    kernels = {k: getattr(module, k).compile(sig) for k, sig in signatures.items()}
    try:
        code = pickle.dumps({k: kernel._reduce_states() for k, kernel in kernels.items()})
    except (RuntimeError, pickle.PicklingError):  # a kernel linking a file of numba-cuda's
        return module  # (not one that this code generator writes): it is compiled each time
    cache.write_object(key, code, key, sorted(kernels))
    return module


def _stored(key, signatures):
    """The kernels' states of entry ``key``, or None (no valid entry, or one that does not
    hold exactly these kernels)."""
    found = cache.read_object(key)
    if found is None:
        return None
    try:
        states = pickle.loads(found[0])
    except Exception:  # a verified entry of another numba-cuda build: compile again
        return None
    return states if isinstance(states, dict) and states.keys() == signatures.keys() else None


def ptx(source, signatures, cc):
    """``{kernel: PTX}`` of every kernel of ``source`` for compute capability ``cc`` (a
    ``(major, minor)`` pair), by NVVM alone: no GPU or driver is needed, only numba-cuda's
    compiler libraries (NVVM and NVRTC)."""
    from numba import cuda

    module = load(source, "quabla_cuda_ptx")
    return {k: cuda.compile_ptx(getattr(module, k).py_func, sig, cc=cc)[0]
            for k, sig in signatures.items()}
