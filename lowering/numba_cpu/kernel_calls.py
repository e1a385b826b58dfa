"""The array kernels (kernels.py: the solvers, decompositions and sort) as C functions of
pointers and sizes, and the special functions (runtime.py: digamma, polygamma, the inverse
error function, ndtri) as C functions of numbers, which parts translated without Numba
(direct.py) call by symbol.

A kernel is Python that Numba compiles (lowering/matrix_kernels.py, which numba.cuda compiles
too). A part that Numba compiles calls it on ``carray`` views, linked into the part; a
translated part instead calls ``quabla_n_<kernel>__<kinds>``: a C function taking each array as
its data pointer and sizes and each flag as an int64, which makes the views and calls the
kernel (a special function's takes and returns its numbers). That function is compiled by
Numba the first time a process needs it and cached like an entry (its object code, verified,
keyed by its symbol and the kernels' sources), so a process that finds it in the cache links
it without importing Numba: a program that solves or factors compiles in a fresh process as
one that does not. A float matrix's sort is built by external.py in LLVM IR instead (the same
order, a stable sort having one), so a program that sorts never imports Numba.
"""

import threading

from .. import cache, native

__all__ = ["PREFIX", "SCALAR_KERNELS", "symbol", "array_kind", "scalar_kind", "address"]

PREFIX = "quabla_n_"
_CODES = {"f64": "f8", "f32": "f4", "i64": "i8", "bool": "b1"}
_DTYPES = {"f8": "float64", "f4": "float32", "i8": "int64", "b1": "boolean"}
_FUNCTION = "quabla_kernel_call"
# the special functions: Numba functions of numbers (runtime.py), whose result has the type of
# their (last) float argument
SCALAR_KERNELS = ("_digamma", "_polygamma", "_erf_inv", "_ndtri")

_lock = threading.RLock()
_linked = {}  # symbol -> (handle, address)


def array_kind(element, ndim):
    """The kind of an array argument: its element type (direct.py's name) and rank."""
    return f"{_CODES[element]}x{ndim}"


def scalar_kind(kind):
    """The kind of a number argument of a special function (direct.py's type name)."""
    return _CODES[kind]


def symbol(kernel, kinds):
    """The symbol of ``kernel`` (its name in generated code) called with arguments of
    ``kinds``: ``array_kind``s, ``"b"`` for a bool flag, ``"i"`` for an integer one, or a
    special function's ``scalar_kind``s."""
    return f"{PREFIX}{kernel.lstrip('_')}__{'_'.join(kinds)}"


def _parse(name):
    kernel, kinds = name[len(PREFIX):].split("__")
    return "_" + kernel, kinds.split("_")


def _source(kernel, kinds):
    """The Python of the C function: views made from pointers and sizes, flags converted;
    or a special function's call."""
    if kernel in SCALAR_KERNELS:
        params = ", ".join(f"a{k}" for k in range(len(kinds)))
        return (f"from lowering.numba_cpu.runtime import {kernel}\n\n\n"
                f"def {_FUNCTION}({params}):\n    return {kernel}({params})\n")
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

    from .target import c_function, lean_pipeline

    kernel, kinds = _parse(name)
    argtypes, restype = [], types.void
    for kind in kinds:
        if kind in ("b", "i"):
            argtypes.append(types.int64)
        elif kind in _DTYPES:  # a number
            argtypes.append(getattr(types, _DTYPES[kind]))
            restype = argtypes[-1]
        else:
            code, rank = kind.split("x")
            argtypes += [types.CPointer(getattr(types, _DTYPES[code]))] + [types.int64] * int(rank)
    module = pytypes.ModuleType(f"quabla_cache.{key}")
    exec(compile(_source(kernel, kinds), f"<{name}>", "exec"), module.__dict__)
    entry = c_function(getattr(module, _FUNCTION), argtypes, lean_pipeline(), nrt=True,
                       restype=restype)
    code, symbols = entry.result()
    return code, entry.native_name, symbols


def _built_in_ir(name):
    """The dtype of kernel call ``name`` where external.py builds it in LLVM IR (a sort of a
    float matrix), else None: Numba compiles the others."""
    kernel, kinds = _parse(name)
    if kernel == "_sort" and len(kinds) == 4 and kinds[0] == kinds[1] in ("f8x2", "f4x2") \
            and kinds[2:] == ["f8x1", "f8x1"]:
        return _DTYPES[kinds[0][:2]]
    return None


def _compile_in_ir(name, key, dtype):
    """``(object code, entry, symbols)`` of kernel call ``name``, built by external.py."""
    from . import external, machine

    entry = f"{name}_{key}"
    return machine.compile_module(external.sort_text(entry, dtype)), entry, []


def address(name):
    """The address of kernel call ``name`` in this process: its object linked from the cache,
    or compiled (by external.py or Numba) and cached first."""
    with _lock:
        if name not in _linked:
            dtype = _built_in_ir(name)
            # the kernels' sources are in every key; external.py's in those it builds
            key = cache.entry_key(name if dtype is None else
                                  f"{name} {cache.sources_digest(('numba_cpu/external.py',))}")
            stored = cache.read_object(key)
            linked = None
            if stored is not None:
                try:
                    linked = native.load(stored[0], stored[1]["entry"],
                                         native.resolve(stored[1]["symbols"]))
                except native.LoadError:
                    linked = None
            if linked is None:
                code, entry, symbols = (_compile(name, key) if dtype is None
                                        else _compile_in_ir(name, key, dtype))
                cache.write_object(key, code, entry, symbols)
                linked = native.load(code, entry, native.resolve(symbols))
            _linked[name] = linked
        return _linked[name][1]
