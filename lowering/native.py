"""Native entries without Numba: the calling convention and the object-code loader.

A compiled entry is a C function ``void entry(PyObject *args)`` whose one argument is a tuple of
NumPy arrays (inputs, results, scratch buffers, constants). It reads each array's data pointer
straight from the array object, so a call through ``ctypes`` costs one tuple and one foreign
call, with no per-array conversion. Its machine code is an object file that llvmlite's MCJIT
links into this process, so a process that finds the object in the compile cache runs it
without importing Numba (whose import and dispatcher start-up dominate a warm first call).
Each distinct object is linked once, by an engine of its own, and freed with its last user.
"""

import ctypes
import hashlib
import importlib.util
import os
import sys
import threading
import weakref
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader

from . import cache
from .abi import ARRAY_DATA, TUPLE_ITEMS

__all__ = ["load", "LoadError", "entry_function", "linked_objects", "sequence", "resolver",
           "resolve", "load_extension", "preload_llvm"]


def entry_function(address, hold_gil=False):
    """A callable of the entry at ``address``: through ctypes, which releases the GIL while
    the entry runs, or with ``hold_gil`` a built-in function that calls it directly (a quarter
    of a microsecond less per call: for entries shorter than releasing and retaking the GIL)."""
    if not hold_gil:
        return ctypes.CFUNCTYPE(None, ctypes.py_object)(address)
    return _new_builtin(ctypes.addressof(_direct_call()), address, None)


class _MethodDef(ctypes.Structure):
    """CPython's PyMethodDef."""
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_METH_O = 0x0008
_new_builtin = ctypes.pythonapi.PyCFunction_NewEx
_new_builtin.restype = ctypes.py_object
_new_builtin.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]
_direct = []  # the method definition of every direct entry, and the engine holding its code

# The glue: one object, compiled once per cache (``_glue``), that every process links, so that
# an edit (its parts, their number, a short term that holds the GIL) never compiles glue:
# ``void quabla_sequence(i8* args)`` calls the entries whose addresses are in the table
# ``quabla_table`` (``quabla_count`` of them) in order, or, where ``quabla_control`` is an
# argument's index (else -1), only those of the phase that the first element of that int64
# array names: part p for p below ``quabla_last``, every part from ``quabla_last`` on for any
# other p (the phases of a threaded entry); the table and the numbers are each engine's own
# data, set once it has linked the parts (``_Sequence``). ``PyObject *quabla_direct(PyObject
# *address, PyObject *args)`` calls the entry whose address is the built-in's ``self`` (an
# int) and returns None, with the GIL held.
_GLUE_IR = f"""
@quabla_table = global void (i8*)** null
@quabla_count = global i64 0
@quabla_control = global i64 -1
@quabla_last = global i64 0
define void @quabla_sequence(i8* %args) {{
entry:
  %n = load i64, i64* @quabla_count
  %control = load i64, i64* @quabla_control
  %threaded = icmp sge i64 %control, 0
  br i1 %threaded, label %phase, label %loop
phase:
  %offset = mul i64 %control, 8
  %at = add i64 %offset, {TUPLE_ITEMS}
  %item = getelementptr i8, i8* %args, i64 %at
  %itemp = bitcast i8* %item to i8**
  %array = load i8*, i8** %itemp
  %field = getelementptr i8, i8* %array, i64 {ARRAY_DATA}
  %fieldp = bitcast i8* %field to i64**
  %row = load i64*, i64** %fieldp
  %p = load i64, i64* %row
  %last = load i64, i64* @quabla_last
  %one = icmp ult i64 %p, %last
  %next = add i64 %p, 1
  %first = select i1 %one, i64 %p, i64 %last
  %stop = select i1 %one, i64 %next, i64 %n
  br label %loop
loop:
  %k = phi i64 [0, %entry], [%first, %phase], [%k1, %call]
  %end = phi i64 [%n, %entry], [%stop, %phase], [%end, %call]
  %more = icmp slt i64 %k, %end
  br i1 %more, label %call, label %done
call:
  %table = load void (i8*)**, void (i8*)*** @quabla_table
  %slot = getelementptr void (i8*)*, void (i8*)** %table, i64 %k
  %f = load void (i8*)*, void (i8*)** %slot
  call void %f(i8* %args)
  %k1 = add i64 %k, 1
  br label %loop
done:
  ret void
}}
@_Py_NoneStruct = external global i8
declare i8* @PyLong_AsVoidPtr(i8*)
declare void @Py_IncRef(i8*)
define i8* @quabla_direct(i8* %address, i8* %args) {{
  %raw = call i8* @PyLong_AsVoidPtr(i8* %address)
  %entry = bitcast i8* %raw to void (i8*)*
  call void %entry(i8* %args)
  call void @Py_IncRef(i8* @_Py_NoneStruct)
  ret i8* @_Py_NoneStruct
}}
"""


def _glue_engine():
    """An MCJIT engine of its own holding the glue (the caller holds ``_lock``)."""
    llvm = _binding()
    if not _glue_symbols:  # the interpreter's symbols the glue names
        _glue_symbols.append(True)
        llvm.add_symbol("_Py_NoneStruct", id(None))
        for name in ("PyLong_AsVoidPtr", "Py_IncRef"):
            llvm.add_symbol(name, _address(name))
    return _engine(_glue(_GLUE_IR))


_glue_symbols = []  # whether LLVM knows the interpreter's symbols that the glue names


def _direct_call():
    """The method definition shared by every direct entry (its code linked once)."""
    with _lock:
        if not _direct:
            engine = _glue_engine()
            engine.finalize_object()
            method = _MethodDef(b"quabla_entry", engine.get_function_address("quabla_direct"),
                                _METH_O, None)
            _direct.extend([method, engine])
        return _direct[0]


def _engine(code=None):
    """An MCJIT engine of its own holding object ``code`` (if any)."""
    llvm = _binding()
    target = llvm.Target.from_default_triple().create_target_machine()
    empty = llvm.parse_assembly("")
    engine = llvm.create_mcjit_compiler(empty, target)
    # MCJIT starts from a module; left in, the empty one went through LLVM's code generation
    # when the engine was finalised: ~1 ms an engine, and LLVM's first-use set-up (~4 ms) in
    # a warm process, which otherwise generates no code
    engine.remove_module(empty)
    if code is not None:
        engine.add_object_file(llvm.ObjectFileRef.from_data(code))
    return engine


def _glue(ir):
    """The object code of ``ir``, a few lines of LLVM IR calling entries (``_GLUE_IR``): from
    the compile cache, else compiled by LLVM's quick instruction selection and stored, so a
    warm process compiles none (an engine compiling such a module itself took a warm first
    call 2-5 ms, and compiling it 2.5-4 ms of an edit)."""
    key = cache.entry_key("# glue\n" + ir)
    found = cache.read_object(key)
    if found is not None:
        return found[0]
    llvm = _binding()
    target = llvm.Target.from_default_triple().create_target_machine(opt=0)
    code = target.emit_object(llvm.parse_assembly(ir))
    cache.write_object(key, code, f"quabla_glue_{key}", [])
    return code


class LoadError(Exception):
    """A cached object cannot be linked here (an unknown symbol): compile it afresh instead."""


_llvm = None
_lock = threading.RLock()  # llvmlite releases the GIL; an engine may be freed by the collector
_linked = weakref.WeakValueDictionary()  # object digest -> the _Linked holding it
_helpers = None  # Numba's C helpers by symbol


_preloads = []  # the thread loading LLVM's library (once a process)


def preload_llvm():
    """Start loading llvmlite's LLVM library on a thread of its own, so that the loader's
    8-17 ms (a 175 MB library's relocations) overlap the caller's tracing and imports: libc's
    ``dlopen`` called through ctypes runs without the GIL, where ``import llvmlite.binding``
    (ctypes.CDLL) holds it. llvmlite's own load then finds the library loaded. A fork waits
    for it: a child forked amid a load could load no library."""
    with _lock:
        if _preloads or os.name != "posix" or "llvmlite.binding" in sys.modules:
            return
        spec = importlib.util.find_spec("llvmlite")
        name = "libllvmlite.dylib" if sys.platform == "darwin" else "libllvmlite.so"
        path = os.path.join(os.path.dirname(spec.origin), "binding", name) if spec else ""
        dlopen = getattr(ctypes.CDLL(None), "dlopen", None)
        if dlopen is None or not os.path.exists(path):
            return
        dlopen.argtypes, dlopen.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_void_p
        thread = threading.Thread(target=dlopen, args=(os.fsencode(path),
                                                       os.RTLD_NOW | os.RTLD_LOCAL),
                                  name="quabla-load-llvm", daemon=True)
        _preloads.append(thread)
        thread.start()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=thread.join)


def _binding():
    global _llvm
    if _llvm is None:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _llvm = llvm
    return _llvm


def _numba_helpers():
    """Numba's C helpers (``numba_gil_ensure``, ...) by symbol, from its ``_helperlib``
    extension loaded on its own: importing the ``numba`` package costs ~0.3 s."""
    global _helpers
    if _helpers is None:
        module = sys.modules.get("numba._helperlib") or load_extension("numba._helperlib")
        _helpers = {"numba_" + name: address for name, address in module.c_helpers.items()}
    return _helpers


_libraries = []  # the interpreter with libc, then libm (found on first use)

# Numba runtime calls that an object may name without needing the runtime. Generated code
# allocates nothing (an object that names an NRT allocator does not load), so no reference
# count ever drops to zero (carray views have none), and the only NRT memory freed would be a
# dynamic exception's, allocated by NRT's default allocator, malloc.
_NRT_STANDINS = {"NRT_MemInfo_call_dtor": "abort", "NRT_Free": "free"}


def load_extension(name):
    """The extension module ``name`` executed without importing its package (SciPy's
    ``cython_blas`` alone loads in ~15 ms, ``scipy.linalg`` in ~0.15 s), or None where it is
    not installed. Left out of ``sys.modules``: loaded before its package it would lack its
    attribute there (the package's own import later gets the same module)."""
    package, _, leaf = name.rpartition(".")
    top = importlib.util.find_spec(package.split(".")[0])
    if top is None or top.origin is None:
        return None
    folder = os.path.join(os.path.dirname(top.origin), *package.split(".")[1:])
    try:
        (path,) = [os.path.join(folder, f) for f in os.listdir(folder)
                   if f.startswith(leaf + ".") and f.endswith(tuple(EXTENSION_SUFFIXES))]
    except (OSError, ValueError):
        return None
    known = name in sys.modules
    loader = ExtensionFileLoader(name, path)
    module = importlib.util.module_from_spec(
        importlib.util.spec_from_file_location(name, path, loader=loader))
    loader.exec_module(module)
    if not known:  # (Cython registers its modules there itself)
        sys.modules.pop(name, None)
    return module


_resolvers = {}  # symbol prefix -> the function giving such a symbol's address


def resolver(prefix, find):
    """Symbols starting with ``prefix`` are where ``find(symbol)`` says (code of this package
    that objects call by name, such as numba_cpu/external.py's kernels)."""
    _resolvers[prefix] = find


def _address(name):
    """Where symbol ``name`` lives in this process."""
    for prefix, find in _resolvers.items():
        if name.startswith(prefix):
            return find(name)
    if name.startswith("numba_") and name in _numba_helpers():
        return _numba_helpers()[name]
    if name.startswith("NRT_") and name not in _NRT_STANDINS:
        raise LoadError(f"needs Numba's runtime ({name})")
    if not _libraries:
        _libraries.extend([ctypes.PyDLL(None), _libm()])
    for library in _libraries:
        try:
            return ctypes.cast(getattr(library, _NRT_STANDINS.get(name, name)), ctypes.c_void_p).value
        except AttributeError:
            continue
    raise LoadError(f"unknown symbol {name}")


def _libm():
    """The C maths library, by its usual names first: ``ctypes.util.find_library`` imports
    ``subprocess`` and asks ``ldconfig`` (4 ms of every process that links an entry)."""
    for name in ("libm.so.6", "libm.dylib"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    from ctypes.util import find_library

    return ctypes.CDLL(find_library("m"))


class _Linked:
    """An object file linked by an MCJIT engine of its own. Executables hold it while they may
    call into it; when the last lets go, the engine and the machine code go with it (MCJIT frees
    code only with its engine, so one engine per object is what makes freeing possible)."""

    __slots__ = ("engine", "__weakref__")

    def __init__(self, object_code, addresses):
        llvm = _binding()
        for name, address in addresses.items():  # all resolved before the engine sees it
            llvm.add_symbol(name, address)
        self.engine = _engine(object_code)
        self.engine.finalize_object()
        finalizer = weakref.finalize(self, _close, self.engine)
        finalizer.atexit = False  # the process's memory goes anyway


def _close(engine):
    with _lock:
        engine.close()


def load(object_code, entry, addresses):
    """``(handle, address)``: ``object_code`` linked into this process, the symbols it names
    at ``addresses`` (``resolve``), and where ``entry`` is in it. The code stays linked while
    someone holds the handle; an identical object loaded meanwhile (another function compiled
    to the same program) shares it."""
    digest = hashlib.sha256(object_code).digest()
    with _lock:
        linked = _linked.get(digest)
        if linked is None:
            linked = _linked[digest] = _Linked(object_code, addresses)
        address = linked.engine.get_function_address(entry)
    if not address:
        raise LoadError(f"no symbol {entry} in the object")
    return linked, address


class _Sequence:
    """One MCJIT engine holding the objects of a program's parts and the glue calling their
    entries in order (or the one part of a threaded entry's phase that the control row
    names): ``_GLUE_IR``, whose table of addresses and numbers are set once the engine has
    linked the parts. The machine code goes with it."""

    __slots__ = ("engine", "parts", "table", "__weakref__")

    def __init__(self, parts, addresses, control, phases):
        llvm = _binding()
        for name, address in addresses.items():
            llvm.add_symbol(name, address)
        self.engine = _glue_engine()
        finalizer = weakref.finalize(self, _close, self.engine)
        finalizer.atexit = False  # the process's memory goes anyway
        added = set()  # two parts of the same text are one object, added once
        for part in parts:
            if len(part) == 3 and part[1] not in added:
                added.add(part[1])
                self.engine.add_object_file(llvm.ObjectFileRef.from_data(part[0]))
        self.engine.finalize_object()
        self.table = (ctypes.c_void_p * len(parts))()
        for k, part in enumerate(parts):  # an entry linked here by name, else its address
            self.table[k] = self.engine.get_function_address(part[1]) if len(part) == 3 \
                else part[1]
            if not self.table[k]:
                raise LoadError(f"no symbol {part[1]} in the object")
        for name, value in (("quabla_table", ctypes.addressof(self.table)),
                            ("quabla_count", len(parts)),
                            ("quabla_control", -1 if control is None else control),
                            ("quabla_last", phases - 1)):
            ctypes.c_int64.from_address(self.engine.get_global_value_address(name)).value = value
        self.parts = [part[0] for part in parts if len(part) == 2]  # linked elsewhere


def sequence(parts, control=None, phases=None):
    """``(handle, address)`` of one entry ``void entry(args)`` that calls the entries of
    ``parts`` in order; with ``control``, only phase ``p``'s: the first element of the int64
    array ``args[control]``, which runs part ``p``, the last of ``phases`` (and any number past
    it) every part from there on: the phases of a threaded entry. A part is ``(object code,
    entry, addresses)`` (as ``load`` takes it),
    linked in the one engine with the others (an engine costs a warm first call ~1.5 ms), or
    ``(handle, address)`` of an entry linked elsewhere (``load``, or Numba's own copy)."""
    addresses = {}
    for part in parts:
        if len(part) == 3:
            addresses.update(part[2])
    with _lock:
        held = _Sequence(parts, addresses, control, phases or len(parts))
        address = held.engine.get_function_address("quabla_sequence")
    return held, address


def resolve(symbols):
    """The address of each of ``symbols`` in this process (``LoadError`` if one is unknown);
    call it outside ``_lock``: a resolver may load code."""
    return {name: _address(name) for name in symbols}


def linked_objects():
    """How many objects are linked into this process now."""
    return len(_linked)
