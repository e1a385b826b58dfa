"""The array kernels (kernels.py: the solvers, decompositions and sort) as C functions of
pointers and sizes, which parts translated without Numba (direct.py) call by symbol.

A kernel is Python that Numba compiles (lowering/matrix_kernels.py, which numba.cuda compiles
too). A part that Numba compiles calls it on ``carray`` views, linked into the part; a
translated part instead calls ``quabla_n_<kernel>__<kinds>``: a C function taking each array as
its data pointer and sizes and each flag as an int64, which makes the views and calls the
kernel. That function is compiled by Numba the first time a process needs it and cached like
an entry (its object code, verified, keyed by its symbol and the kernels' sources), so a
process that finds it in the cache links it without importing Numba: a program that solves,
factors or sorts compiles in a fresh process as one that does not.
"""

import threading

from .. import cache, native

__all__ = ["PREFIX", "symbol", "array_kind", "address"]

PREFIX = "quabla_n_"
_CODES = {"f64": "f8", "f32": "f4", "i64": "i8", "bool": "b1"}
_DTYPES = {"f8": "float64", "f4": "float32", "i8": "int64", "b1": "boolean"}
_FUNCTION = "quabla_kernel_call"

_lock = threading.RLock()
_linked = {}  # symbol -> (handle, address)


def array_kind(element, ndim):
    """The kind of an array argument: its element type (direct.py's name) and rank."""
    return f"{_CODES[element]}x{ndim}"


def symbol(kernel, kinds):
    """The symbol of ``kernel`` (its name in generated code) called with arguments of
    ``kinds``: ``array_kind``s, ``"b"`` for a bool flag, ``"i"`` for an integer one."""
    return f"{PREFIX}{kernel.lstrip('_')}__{'_'.join(kinds)}"


def _parse(name):
    kernel, kinds = name[len(PREFIX):].split("__")
    return "_" + kernel, kinds.split("_")


def _source(kernel, kinds):
    """The Python of the C function: views made from pointers and sizes, flags converted."""
    params, args = [], []
    for k, kind in enumerate(kinds):
        if kind in ("b", "i"):
            params.append(f"f{k}")
            args.append(f"f{k} != 0" if kind == "b" else f"f{k}")
            continue
        rank = int(kind.split("x")[1])
        sizes = [f"p{k}s{d}" for d in range(rank)]
        params += [f"p{k}"] + sizes
        args.append(f"carray(p{k}, ({', '.join(sizes)}{',' if rank == 1 else ''}))")
    return (f"from numba import carray\nfrom lowering.numba_cpu.kernels import {kernel}\n\n\n"
            f"def {_FUNCTION}({', '.join(params)}):\n    {kernel}({', '.join(args)})\n")


def _compile(name, key):
    """``(object code, entry, symbols)`` of kernel call ``name``, compiled by Numba."""
    import types as pytypes

    from numba import types

    from . import lean_pipeline
    from .target import c_function

    kernel, kinds = _parse(name)
    argtypes = []
    for kind in kinds:
        if kind in ("b", "i"):
            argtypes.append(types.int64)
        else:
            code, rank = kind.split("x")
            argtypes += [types.CPointer(getattr(types, _DTYPES[code]))] + [types.int64] * int(rank)
    module = pytypes.ModuleType(f"quabla_cache.{key}")
    exec(compile(_source(kernel, kinds), f"<{name}>", "exec"), module.__dict__)
    entry = c_function(getattr(module, _FUNCTION), argtypes, lean_pipeline(), nrt=True)
    code, symbols = entry.result()
    return code, entry.native_name, symbols


def address(name):
    """The address of kernel call ``name`` in this process: its object linked from the cache,
    or compiled by Numba and cached first."""
    with _lock:
        if name not in _linked:
            key = cache.entry_key(name)  # the kernels' sources are in every key
            stored = cache.read_object(key)
            linked = None
            if stored is not None:
                try:
                    linked = native.load(stored[0], stored[1]["entry"],
                                         native.resolve(stored[1]["symbols"]))
                except native.LoadError:
                    linked = None
            if linked is None:
                code, entry, symbols = _compile(name, key)
                cache.write_object(key, code, entry, symbols)
                linked = native.load(code, entry, native.resolve(symbols))
            _linked[name] = linked
        return _linked[name][1]
