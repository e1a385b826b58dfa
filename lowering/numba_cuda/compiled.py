"""A CUDA module's kernels compiled for their signatures (``Generated.signatures``): on a GPU
through the on-disk compile cache, or to PTX for a compute capability with no GPU at hand.

numba.cuda compiles a kernel in two steps: NVVM turns Numba's IR into PTX (most of the time),
then the driver's linker turns PTX into a cubin. A cache entry holds both results for one
kernel, as numba-cuda's own cache stores a kernel (the state its ``_Kernel`` reduces to,
pickled), so a warm process runs neither. Its key names the kernel's body and signature (its
names are canonical, so the same kernel in another program, such as the unchanged part of an
edited loss, has the same key), the compute capability, numba-cuda's version and the device
functions' source (runtime.py). Like every entry, it is read only after lowering/cache.py has
checked its owner, its permissions and its digest (docs/compile-cache.md): a pickle is trusted
exactly as far as the object code the CPU back end links into the process.
"""

import pickle
import types

from .. import cache

__all__ = ["load", "bind", "ptx", "cache_key"]


def load(source, name):
    """The module of ``source`` (its kernels not compiled yet)."""
    module = types.ModuleType(name)
    exec(compile(source, f"<quabla cuda {name}>", "exec"), module.__dict__)
    return module


def cache_key(text, signature, cc):
    """The key of the entry of a kernel with body ``text`` and ``signature``, compiled for
    compute capability ``cc``."""
    import numba_cuda

    runtime = cache.sources_digest(("numba_cuda/runtime.py",))
    return cache.entry_key(f"# CUDA sm_{cc[0]}{cc[1]}; numba-cuda={numba_cuda.__version__}; "
                           f"runtime={runtime}\n# {signature}\n{text}")


def bind(source, name, signatures, texts, gpu):
    """The module of ``source`` with every kernel compiled for its signature and loaded on
    ``gpu`` (whose context is current): each read from its cache entry where there is a valid
    one, else compiled and stored."""
    module = load(source, name)
    for k, signature in signatures.items():
        key = cache_key(texts[k], signature, gpu.compute_capability)
        dispatcher = getattr(module, k)
        kernel = _stored(key)
        if kernel is None:
            _store(key, texts[k], dispatcher.compile(signature))
        else:
            kernel.bind()
            dispatcher.add_overload(kernel, kernel.argument_types)
    return module


def _stored(key):
    """The kernel of entry ``key``, or None (no valid entry, or one that does not rebuild)."""
    from numba.cuda.dispatcher import _Kernel

    found = cache.read_object(key)
    if found is None:
        return None
    try:
        return _Kernel._rebuild(**pickle.loads(found[0]))
    except Exception:  # a verified entry that this numba-cuda cannot rebuild: compile again
        return None


def _store(key, text, kernel):
    try:
        code = pickle.dumps(kernel._reduce_states())
    except (RuntimeError, pickle.PicklingError):  # a kernel linking a file of numba-cuda's
        return  # (not one that this code generator writes): it is compiled each time
    cache.write_source(key, text)
    cache.write_object(key, code, key, [kernel.entry_name])


def ptx(source, signatures, cc):
    """``{kernel: PTX}`` of every kernel of ``source`` for compute capability ``cc`` (a
    ``(major, minor)`` pair), by NVVM alone: no GPU or driver is needed, only numba-cuda's
    compiler libraries (NVVM and NVRTC)."""
    from numba import cuda

    module = load(source, "quabla_cuda_ptx")
    return {k: cuda.compile_ptx(getattr(module, k).py_func, sig, cc=cc)[0]
            for k, sig in signatures.items()}
