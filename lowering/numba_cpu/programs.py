"""What code generation made of a whole program, kept in the compile cache by the program's
graph, so a warm process links its parts without generating them again.

Generating an entry (scheduling, emitting, the passes, cutting it into parts) is pure Python:
20-60 ms for a PINN, 90 ms for an adjoint ODE solve, on every warm first call, which otherwise
only reads and links objects. Its result is a function of the expanded graph (its
``fingerprint``: every node, param and constant's bits), of the code generator's own code, and
of what it asks of this process: threads for tile loops, and which BLAS and LAPACK it may call
(``fortran.origin``). ``key`` names all of them. A stored program is an entry of the cache like
a part's (``cache.read_object``: the same ownership, manifest and digest checks, the same bound
and eviction) whose "object" is ``encode``'s bytes: the parts' module sources, the constants,
the scratch buffers and a threaded entry's control rows. It is used only when every part it
names is in the cache too (``load_cached``); otherwise the program is generated again, as
before.
"""

import functools
import hashlib
import json
import os
import re
import sys

import numpy as np

from quabla.core.graph import Const, Graph
from quabla.dtypes import DType

from .. import cache, fortran
from . import codegen  # noqa: F401  (loaded first: its modules' settings key a program)
from .threads import Phases

__all__ = ["KEEP", "MAX_CONSTANT_BYTES", "key", "code_digest", "tree_digest", "settings",
           "encode", "decode", "load", "store", "family", "load_finished", "store_finished",
           "origin", "revises"]

# Whether generated programs are kept (a test that watches the generator at work turns it off)
KEEP = True
# A program whose constants hold more than this is not kept: its bits would be stored again
# (the parts' objects hold none), and fingerprinting them costs a pass over every byte.
MAX_CONSTANT_BYTES = 1 << 22
_DTYPES = ("<f8", "<f4", "|b1")  # the constants' dtypes code generation passes (codegen.py)
_FIELDS = {"sources": list, "constants": list, "buffers": list, "phases": (list, type(None))}
# params written the same way by every process (a sub-graph's are checked as it is walked)
_STABLE = (bool, int, float, complex, str, type(None), Graph, DType)
_CODE = ("lowering", os.path.join("quabla", "core"))  # what turns a graph into sources
# the generator's modules: those loaded once code generation is (the same in every process)
_GENERATOR = tuple(sorted(name for name in sys.modules if name.startswith(
    ("lowering.numba_cpu.", "lowering.loopnest.")) and name != __name__))


@functools.lru_cache(maxsize=None)
def code_digest():
    """A digest of the code that turns an expanded graph into sources (``_CODE``'s Python
    files and tables, ``tree_digest``), read once per process: a changed generator never
    reuses what an older one made, whatever its version says. None if a file cannot be read."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return tree_digest(root, _CODE)


def tree_digest(root, packages):
    """A digest of the names and bytes of the Python files and tables under ``root``'s
    ``packages`` (folders), or None if one cannot be read. Reading and hashing them all took
    2-4 ms of every process's first call, so the digest is kept in the compile cache under
    the files' paths, sizes and modification times (what Python trusts to reuse a file's
    bytecode), and the files are read again only when one of those changed."""
    files = _files(root, packages)
    if files is None:
        return None
    memo = cache.entry_key("# code digest " + ";".join(
        f"{path}:{st.st_size}:{st.st_mtime_ns}" for _, path, st in files))
    stored = cache.read_object(memo)
    if stored is not None and _DIGEST.fullmatch(stored[0]):
        return stored[0].decode()
    digest = hashlib.sha256()
    for name, path, _ in files:
        digest.update(name.encode())
        try:
            with open(path, "rb") as f:
                digest.update(f.read())
        except OSError:  # unreadable: nothing is kept
            return None
    digest = digest.hexdigest()[:16]
    cache.write_object(memo, digest.encode(), f"quabla_code_{memo}", [])
    return digest


_DIGEST = re.compile(rb"[0-9a-f]{16}")


def _files(root, packages):
    """``[(name, path, stat)]`` of the Python files and tables under ``root``'s ``packages``
    in the order ``tree_digest`` reads them, or None if one cannot be looked at."""
    files = []
    for package in packages:
        for folder, dirs, names in os.walk(os.path.join(root, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(names):
                if name.endswith((".py", ".yaml")):
                    path = os.path.join(folder, name)
                    try:
                        files.append((name, path, os.stat(path)))
                    except OSError:
                        return None
    return files


def _constant_bytes(graph):
    """The bytes of ``graph``'s constants; None if a param is of a kind whose text
    (``Graph.fingerprint`` writes params by ``repr``) may not be the same in every process."""
    total = 0
    for node in graph.walk():
        for _, value in node.params:
            for item in _leaves(value):
                if isinstance(item, Const):
                    total += item.value.nbytes
                elif not isinstance(item, _STABLE):
                    return None
    return total


def _leaves(value):
    if isinstance(value, tuple):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def settings():
    """A digest of the code generator's settings: the upper-case constants of its modules
    (``PART_LINES``, ``SHARE``, ``BLAS_THRESHOLD``...), which a test or a user may change."""
    items = [f"{name}.{k}={v!r}" for name in _GENERATOR
             for k, v in sorted(vars(sys.modules[name]).items())
             if k.isupper() and isinstance(v, (bool, int, float, str, tuple))]
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]


def key(graph, n_threads, light=False):
    """The cache key of ``graph``'s generated program for ``n_threads`` tile-loop threads
    (``light``: as a light term, every part quick: workload.py), or None for a program not
    kept (``KEEP``, ``MAX_CONSTANT_BYTES``, a param of a kind whose text may differ between
    processes)."""
    constants = _constant_bytes(graph) if KEEP and code_digest() is not None else None
    if constants is None or constants > MAX_CONSTANT_BYTES:
        return None
    return cache.entry_key(
        f"# program {graph.fingerprint()} {_generator(n_threads)} light={light}")


def _generator(n_threads):
    """What a generated program depends on besides its graph: the tile-loop threads, the
    BLAS and LAPACK it may call, the generator's code and settings."""
    return (f"threads={n_threads} blas={fortran.origin()} code={code_digest()} "
            f"settings={settings()}")


def family(graph, n_threads):
    """The cache key of the finished parts (``parts.Finished``) last generated for a program
    with ``graph``'s inputs and outputs: an edit of a program (another loss term) has them too.
    Programs of one signature share it, the last one's parts replacing the one's before."""
    avals = [(shape, dtype.name) for shape, dtype in graph.in_avals + graph.out_avals]
    return cache.entry_key(f"# finished parts {avals!r} {_generator(n_threads)}")


def load_finished(family):
    """The finished parts stored as ``family`` (a ``family`` key): ``{key: (lines, work
    estimate)}``, empty where there are none or they are not such."""
    stored = cache.read_object(family)
    try:
        found = json.loads(stored[0]) if stored is not None else {}
        return {key: (lines, tuple(estimate)) for key, (lines, estimate) in found.items()
                if isinstance(key, str) and isinstance(lines, list)
                and all(isinstance(line, str) for line in lines)
                and isinstance(estimate, list) and len(estimate) == 3
                and all(type(n) in (int, bool) for n in estimate)}
    except (ValueError, TypeError, AttributeError):  # (a JSON error is a ValueError)
        return {}


def store_finished(family, finished):
    """Keep ``finished`` (``{key: (lines, work estimate)}``) as ``family``."""
    cache.write_object(family, json.dumps(finished).encode(), f"quabla_finished_{family}", [])


def origin(name):
    """The cache key of the record of the program last compiled for the function that
    ``name`` names (jit's ``origin`` option: quabla.staging.staged.function_origin), or None
    where it names none."""
    return cache.entry_key(f"# origin {name}") if isinstance(name, str) else None


def revises(origin, program):
    """Whether ``program`` (a ``key``) revises another one compiled for the function that
    ``origin`` names; ``program`` is recorded as its latest. A record only chooses which
    pipeline compiles first (the bits are the same: numba_cpu/__init__.py's tiers)."""
    if origin is None or program is None:
        return False
    stored = cache.read_object(origin)
    last = stored[0] if stored is not None else None
    if last != program.encode():
        cache.write_object(origin, program.encode(), f"quabla_origin_{origin}", [])
    return last is not None and last != program.encode()


def encode(sources, constants, buffers, phases):
    """The bytes of a generated program: a JSON header (its length first, 8 bytes) and each
    constant's bits after it."""
    layout, offset = [], 0
    for c in constants:
        layout.append([c.dtype.str, list(c.shape), offset])
        offset += c.nbytes
    header = json.dumps({
        "sources": list(sources), "constants": layout,
        "buffers": [[name, int(size)] for name, size in buffers],
        "phases": None if phases is None else
        [[[[int(n) for n in row] for row in rows] for rows in phases.rows], bool(phases.blas)]},
    ).encode()
    return b"".join([len(header).to_bytes(8, "little"), header]
                    + [np.ascontiguousarray(c).tobytes() for c in constants])


def decode(data):
    """``(sources, constants, buffers, phases)`` from ``encode``'s bytes (constants read-only
    views of them), or None where they are not such bytes."""
    try:
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + size])
        if not (isinstance(header, dict) and header.keys() == _FIELDS.keys()
                and all(isinstance(header[k], t) for k, t in _FIELDS.items())):
            return None
        sources = tuple(header["sources"])
        if not sources or not all(isinstance(s, str) for s in sources):
            return None
        constants, body = [], memoryview(data)[8 + size:]
        for dtype, shape, offset in header["constants"]:
            if dtype not in _DTYPES:
                return None
            count = int(np.prod(shape, dtype=np.int64))
            array = np.frombuffer(body, dtype, count, offset).reshape(shape)
            constants.append(array)
        buffers = [(str(name), int(n)) for name, n in header["buffers"]]
        phases = header["phases"]
        if phases is not None:
            (before, each, after), blas = phases
            if not all(_rows(rows) for rows in (before, each, after)):
                return None
            phases = Phases(before, each, after, bool(blas))
        return sources, constants, buffers, phases
    except (ValueError, TypeError, KeyError):  # (a JSON error is a ValueError)
        return None


def _rows(rows):
    """Whether ``rows`` is a list of control rows (lists of integers)."""
    return isinstance(rows, list) and all(
        isinstance(row, list) and all(type(n) is int for n in row) for row in rows)


def load(program):
    """The generated program stored as ``program`` (a ``key``), or None."""
    stored = cache.read_object(program)
    return None if stored is None else decode(stored[0])


def store(program, sources, constants, buffers, phases):
    """Keep a generated program as ``program`` (a ``key``)."""
    cache.write_object(program, encode(sources, constants, buffers, phases),
                       f"quabla_program_{program}", [])
