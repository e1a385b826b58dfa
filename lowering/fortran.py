"""The BLAS and LAPACK routines generated code calls, and the library they come from.

NumPy's wheels carry OpenBLAS (``scipy-openblas``), which NumPy loads and starts at its own
import: its routines are found by name at no cost, and every install of Quabla has them.
Without it (a NumPy built on another BLAS), SciPy's ``cython_blas`` and ``cython_lapack``
export theirs (loading them costs ~15 ms); without either, generated code uses loops of its
own. One library serves all routines, so the width of the Fortran integers (64 bits in
NumPy's OpenBLAS, 32 in SciPy's) is one setting (``integer_bits``), and it is in every
symbol generated code calls (``symbol``): an object made for one library never links against
the other. ``origin()`` names the library without loading any (for the compile-cache key).
``QUABLA_BLAS=0`` turns both off (generated code's own loops), ``QUABLA_BLAS=scipy`` takes
SciPy's even where NumPy's is found.
"""

import ctypes
import glob
import importlib.util
import os
import sys
import threading

from . import native

__all__ = ["BLAS", "LAPACK", "origin", "available", "integer_bits", "symbol", "linked", "load"]

BLAS = ("dgemm", "sgemm", "dtrsm", "strsm")
LAPACK = ("dsyevd", "dgesdd", "dgetrf", "dgetrs", "dpotrf")
_PREFIX = "quabla_fortran_"

# NumPy's OpenBLAS: (the names of its routines, integer bits), by the build's naming
_NUMPY_NAMES = (("scipy_{}_64_", 64), ("scipy_{}_", 32), ("{}_64_", 64))
# SciPy's Cython exports and the routines taken from each (their integers checked to be 32-bit)
_SCIPY = {"scipy.linalg.cython_blas": BLAS, "scipy.linalg.cython_lapack": LAPACK}

_lock = threading.Lock()
_library = None  # (origin, integer bits, {routine: address}), found on first use
_extensions = []  # the library found, or SciPy's extension modules holding it: kept loaded


def _disabled():
    return os.environ.get("QUABLA_BLAS", "1") == "0"


def _numpy_openblas():
    """``(integer bits, {routine: address})`` of the OpenBLAS NumPy loaded, or None."""
    numpy = sys.modules.get("numpy") or __import__("numpy")
    here = os.path.dirname(numpy.__file__)
    candidates = sorted(glob.glob(os.path.join(here + ".libs", "*openblas*"))
                        + glob.glob(os.path.join(here, ".dylibs", "*openblas*")))
    for path in candidates:
        try:
            library = ctypes.CDLL(path)  # already loaded by NumPy: the same handle
        except OSError:
            continue
        for pattern, bits in _NUMPY_NAMES:
            try:
                found = {r: ctypes.cast(getattr(library, pattern.format(r)), ctypes.c_void_p).value
                         for r in BLAS + LAPACK}
            except AttributeError:
                continue
            _extensions.append(library)
            return bits, found
    return None


def _scipy_routines():
    """``{routine: address}`` from SciPy's Cython exports (each loaded without importing
    ``scipy.linalg``, ~0.15 s), or None without SciPy or if its integers are not 32-bit."""
    found = {}
    for name, routines in _SCIPY.items():
        module = sys.modules.get(name) or native.load_extension(name)
        if module is None:
            return None
        _extensions.append(module)
        for routine in routines:
            capsule = module.__pyx_capi__[routine]
            signature = _capsule_name(capsule)
            if b"int *" not in signature or b"long" in signature:
                return None
            found[routine] = _capsule_pointer(capsule, signature)
    return found


_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def load():
    """``(origin, integer bits, {routine: address})`` of the library generated code calls
    (``("", 0, {})`` without one, or with QUABLA_BLAS=0), found once."""
    global _library
    with _lock:
        if _library is None:
            _library = _numpy_library()
        if _library is None:
            scipy = _scipy_routines() if importlib.util.find_spec("scipy") else None
            _library = ("scipy", 32, scipy) if scipy else ("", 0, {})
    return ("", 0, {}) if _disabled() else _library


def _numpy_library():
    found = None if os.environ.get("QUABLA_BLAS") == "scipy" else _numpy_openblas()
    return None if found is None else ("numpy", *found)


def origin():
    """Which library generated code calls: ``"numpy64"``, ``"scipy32"`` (its integers'
    bits), or ``""``; without loading SciPy's (for the compile-cache key)."""
    global _library
    if _disabled():
        return ""
    with _lock:
        if _library is None:
            _library = _numpy_library()
        known = _library
    if known is None:
        return "scipy32" if importlib.util.find_spec("scipy") else ""
    return f"{known[0]}{known[1]}" if known[0] else ""


def available(routines=BLAS):
    """Whether generated code may call ``routines``."""
    found = load()[2]
    return all(r in found for r in routines)


def integer_bits():
    """The bits of the library's Fortran integers (sizes, ``info``, pivots)."""
    return load()[1]


def symbol(routine):
    """The symbol generated code calls ``routine`` by: its library's integer width is in it."""
    return f"{_PREFIX}{routine}_i{integer_bits()}"


def linked(routine):
    """``symbol(routine)``, made known to LLVM's linker in this process (for code Numba
    compiles and links here)."""
    from llvmlite import binding

    name = symbol(routine)
    binding.add_symbol(name, load()[2][routine])
    return name


def _address(name):
    routine, _, bits = name[len(_PREFIX):].rpartition("_i")
    _, width, found = load()
    if routine not in found or bits != str(width):
        raise native.LoadError(f"no {name} here (BLAS/LAPACK {origin() or 'off'})")
    return found[routine]


native.resolver(_PREFIX, _address)
