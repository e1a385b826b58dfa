"""The on-disk compile cache (its security model: docs/compile-cache.md).

Entries are named by a key: a hash of the generated source (which encodes the canonical graph
and argument types), the versions of Quabla, Numba, llvmlite, NumPy and Python, the object
layouts compiled code assumes, and a digest of the runtime helpers the code links in. An entry
is the generated source (for people; it is never imported from here), the entry's object code,
and a manifest naming the key, the entry symbol, the external symbols and the object's SHA-256.

New entries go to one private directory of this user (mode 0700; ``QUABLA_CACHE_DIR``, by
default under the user's cache directory). A directory that others could write is purged, not
trusted; one this process may not write (a shared or image cache) is only read, and new entries
go to a private fallback that every such process reuses. An entry is used only if its files
are this user's or the directory owner's and nobody else may write them, its manifest has the
exact schema and names the key being loaded, and the object matches the recorded digest;
anything else is recompiled, never linked.

The private directory is bounded (``QUABLA_CACHE_MAX_BYTES``, default 2 GiB): after a write
that takes it over the bound, the least recently used entries are deleted, manifest first
(writers keep its size in a ledger file, counted again by a scan at least hourly). A
hit marks its entry used by touching the manifest (once per process and entry). Every change
to the directory is made under its lock file; reads take no lock, and since each file is
replaced whole and the manifest checks the object's digest, a reader sees a whole entry or a
miss (and recompiles). ``python -m quabla.cache`` shows and clears the cache.
"""

import contextlib
import functools
import hashlib
import json
import os
import platform
import re
import stat
import sys
import tempfile
import time
import warnings
from typing import NamedTuple

try:
    import fcntl
except ImportError:  # no advisory locks here: changes are still atomic per file
    fcntl = None

__all__ = ["cache_dir", "entry_key", "sources_digest", "write_source", "read_object", "write_object",
           "max_bytes", "info", "clear"]

_PREFIX = "qb_"  # every file the cache writes starts with it (and only those are ever purged)
_SUFFIXES = (".manifest.json", ".o", ".py")  # an entry's files, in the order they are deleted
_ENTRY_FILE = re.compile(r"(qb_[0-9a-f]{32})(\.manifest\.json|\.o|\.py)\Z")
_TEMPORARY = re.compile(r"qb_[a-z0-9_]+\.tmp\Z")  # a write in progress, or a killed writer's
_LOCK = "qb_lock"
_LEDGER = "qb_size"  # "<bytes> <ns>": the directory's size as counted by writers, and when scanned
RESCAN_SECONDS = 3600  # the ledger is checked against a scan of the directory at least this often
_DEFAULT_MAX_BYTES = 2 * 1024**3
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_MANIFEST = {"key": str, "entry": str, "symbols": list, "sha256": str}
_DIRS = None  # (directory new entries go to, ((directory, owner uid) read in order, ...))


# the modules of lowering whose code is compiled into every entry's machine code
_LINKED_IN = ("numba_cpu/runtime.py", "numba_cpu/kernels.py", "numba_cpu/target.py",
              "numba_cpu/scalar_ir.py", "numba_cpu/direct.py", "numba_cpu/machine.py",
              "numba_cpu/kernel_calls.py", "numba_cpu/lapack.py", "numba_cpu/lapack_kernels.py",
              "matrix_kernels.py")


def _numba_version():
    """Read from Numba's version file, without importing Numba (a warm process never pays for
    that) or ``importlib.metadata`` (~40 ms)."""
    import importlib.util

    folder = os.path.dirname(importlib.util.find_spec("numba").origin)
    spec = importlib.util.spec_from_file_location("quabla._numba_version",
                                                  os.path.join(folder, "_version.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_versions()["version"]


def _versions():
    import llvmlite
    import numpy

    from quabla.core.version import __version__

    from .abi import abi_tag

    # the generated code links the runtime helpers and kernels into its machine code, compiled
    # for the entries' target: a change to any of them must not reuse entries compiled before
    return f"quabla={__version__};numba={_numba_version()};llvmlite={llvmlite.__version__};" \
           f"numpy={numpy.__version__};python={sys.version.split()[0]};{platform.machine()};" \
           f"{abi_tag()};runtime={sources_digest(_LINKED_IN)}"


@functools.lru_cache(maxsize=None)
def sources_digest(names):
    """A short digest of the files ``names`` (paths under lowering/), read once per process:
    what an entry's key says of the code compiled into it besides the generated source."""
    digest = hashlib.sha256()
    for name in names:
        with open(os.path.join(os.path.dirname(__file__), name), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


_UID = os.getuid() if hasattr(os, "getuid") else None


def _loose(st):
    """Whether users other than the owner may write the file or directory."""
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _purge(path):
    """Delete the cache's files in ``path``: someone else may have written them."""
    for name in os.listdir(path):
        if name.startswith(_PREFIX):
            try:
                os.remove(os.path.join(path, name))
            except OSError:
                pass


def _open(path):
    """``("write" | "read" | None, owner uid)``: how this process may use the directory
    ``path`` (created if missing). One that others could write is purged first (one warning)
    and made private again if it is this user's, else not used at all."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError:
        return None, None
    ours = _UID is None or st.st_uid == _UID
    if _loose(st):
        warnings.warn(f"quabla: the compile cache at {path} was writable by other users; its "
                      "entries were deleted, not trusted")
        try:
            _purge(path)
            if not ours:
                return None, None
            os.chmod(path, 0o700)
        except OSError:
            return None, None
    if ours and os.access(path, os.W_OK):
        return "write", st.st_uid
    return "read", st.st_uid


def _fallback():
    """The private directory for new entries when the configured one may not be written:
    the same for every process of this user, so what one compiles the next one loads."""
    path = os.path.join(tempfile.gettempdir(), f"quabla-cache-{_UID}")
    try:
        is_dir = stat.S_ISDIR(os.lstat(path).st_mode)  # a planted link is not followed
    except FileNotFoundError:
        is_dir = True
    except OSError:
        is_dir = False
    if is_dir and _open(path)[0] == "write":
        return path
    fresh = tempfile.mkdtemp(prefix="quabla-cache-")
    warnings.warn(f"quabla: cannot use {path} for compiled code; using {fresh}")
    return fresh


def _dirs():
    global _DIRS
    if _DIRS is None:
        path = os.environ.get("QUABLA_CACHE_DIR")
        if not path:
            base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                      ".cache")
            path = os.path.join(base, "quabla")
        path = os.path.abspath(path)
        use, owner = _open(path)
        if use == "write":
            _DIRS = (path, ((path, owner),))
        else:
            fallback = _fallback()
            shared = ((path, owner),) if use == "read" else ()
            _DIRS = (fallback, ((fallback, _UID),) + shared)
    return _DIRS


def cache_dir():
    """The private directory new entries are written to, created on first use."""
    return _dirs()[0]


_VERSIONS = None


def entry_key(source):
    """The key of ``source``'s entry; also the name of its files and of its module."""
    global _VERSIONS
    if _VERSIONS is None:
        _VERSIONS = _versions()
    return _PREFIX + hashlib.sha256((_VERSIONS + "\n" + source).encode()).hexdigest()[:32]


def _path(key, suffix):
    return os.path.join(cache_dir(), key + suffix)


def _remove(*paths):
    for path in paths:
        try:
            os.remove(path)
        except OSError:
            pass


def _replace(path, data):
    """Write ``data`` (bytes) to ``path`` atomically."""
    fd, tmp = tempfile.mkstemp(dir=cache_dir(), prefix=_PREFIX, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked():
    """Hold the private directory's lock. Every change to the directory is made under it, so
    no two processes interleave the files of one entry, and a temporary file seen while
    holding it was left by a writer that died."""
    fd = os.open(os.path.join(cache_dir(), _LOCK),
                 os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_source(key, source):
    """Write ``source`` as entry ``key``'s source unless an identical file is there; returns
    its path (for tracebacks: the module is compiled from the text, never imported from it)."""
    path, data = _path(key, ".py"), source.encode("utf-8")
    if _read(path, _UID) != data:
        with _locked():
            if _read(path, _UID) != data:
                # a missing, corrupted or planted source: replace it; its stale manifest no
                # longer applies
                _remove(_path(key, ".manifest.json"))
                _replace(path, data)
                _grew(len(data), max_bytes())
    return path


def _read(path, owner):
    """The bytes of the regular file at ``path`` if it is this user's or ``owner``'s and
    nobody else may write it; otherwise None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or _loose(st)
                or _UID is not None and st.st_uid not in (_UID, owner)):
            return None
        return f.read()


def _valid(manifest, key):
    """Whether ``manifest`` has exactly the fields and types the cache writes, for ``key``;
    the entry symbol must name the module compiled for the key."""
    return (isinstance(manifest, dict) and manifest.keys() == _MANIFEST.keys()
            and all(isinstance(manifest[k], t) for k, t in _MANIFEST.items())
            and all(isinstance(s, str) for s in manifest["symbols"])
            and manifest["key"] == key and key in manifest["entry"])


def _verified(folder, owner, key):
    """``(object code, manifest)`` of a valid entry ``key`` in ``folder``, else None."""
    code, text = (_read(os.path.join(folder, key + suffix), owner)
                  for suffix in (".o", ".manifest.json"))
    if code is None or text is None:
        return None
    try:
        manifest = json.loads(text)
    except ValueError:
        return None
    if _valid(manifest, key) and manifest["sha256"] == hashlib.sha256(code).hexdigest():
        return code, manifest
    return None


_USED = set()  # the keys whose manifest this process touched


def _mark_used(key):
    """Make entry ``key`` the most recently used one: its manifest's mtime is its last use."""
    if key not in _USED:
        _USED.add(key)
        with contextlib.suppress(OSError):  # evicted meanwhile
            os.utime(_path(key, ".manifest.json"), follow_symlinks=False)


def _private_entry(key):
    """Entry ``key`` from the private directory, marked used. An invalid one is deleted, after
    a second look under the lock (another process may have been writing it right then)."""
    found = _verified(cache_dir(), _UID, key)
    if found is None:
        with _locked():
            found = _verified(cache_dir(), _UID, key)
            if found is None:
                _remove(_path(key, ".o"), _path(key, ".manifest.json"))
    if found is not None:
        _mark_used(key)
    return found


def read_object(key):
    """``(object code, manifest)`` of entry ``key`` from the first directory holding a valid
    one; None if there is none, and an invalid one in the private directory is deleted."""
    for folder, owner in _dirs()[1]:
        found = _private_entry(key) if folder == cache_dir() else _verified(folder, owner, key)
        if found is not None:
            return found
    return None


def write_object(key, code, entry, symbols):
    """Store entry ``key``'s object code, then the manifest that vouches for it (a reader that
    meanwhile reads the old object and the new manifest looks again under the lock); then
    evict least recently used entries if the cache is over its bound (``_grew``)."""
    bound = max_bytes()
    manifest = json.dumps({"key": key, "entry": entry, "symbols": list(symbols),
                           "sha256": hashlib.sha256(code).hexdigest()}).encode()
    with _locked():
        _replace(_path(key, ".o"), code)
        _replace(_path(key, ".manifest.json"), manifest)
        _grew(len(code) + len(manifest), bound)


def _grew(added, bound):
    """Count ``added`` bytes just written to the private directory in its ledger (``_LEDGER``),
    and evict (``_evict``, which counts the directory again) when the count passes ``bound``,
    when the ledger is missing or unreadable, or when its last scan is over ``RESCAN_SECONDS``
    old. A write then costs one small file, not a look at every entry: 0.1 s per write in a
    cache of 20,000 entries. Files replaced or deleted in between only make the count high,
    which brings the next scan sooner. The caller holds the lock."""
    path = os.path.join(cache_dir(), _LEDGER)
    try:
        size, scanned = map(int, _read(path, _UID).split())
    except (AttributeError, ValueError):  # missing, or not a ledger
        size, scanned = None, 0
    read = size is not None
    now = time.time_ns()
    if size is None or size + added > bound or not 0 <= now - scanned <= RESCAN_SECONDS * 10**9:
        size, scanned = _evict(bound), now
    else:
        size += added
    data = f"{size:020d} {scanned:020d}".encode()  # one length: written over in place
    if read and os.path.exists(path):
        _overwrite(path, data)
    else:
        _replace(path, data)


def _overwrite(path, data):
    """Write ``data`` over the start of the file at ``path``, which the caller read as this
    user's under the lock. Renaming a new file over an existing one makes ext4 write the new
    file's blocks out first (``auto_da_alloc``): 0.1-5 ms each time an entry is stored."""
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)


def max_bytes():
    """The bound on the private directory's size: ``QUABLA_CACHE_MAX_BYTES`` (bytes, or with a
    K, M, G or T suffix, powers of 1024), default 2 GiB."""
    value = os.environ.get("QUABLA_CACHE_MAX_BYTES", "").strip()
    if not value:
        return _DEFAULT_MAX_BYTES
    match = re.fullmatch(r"(\d+)\s*([kmgt]?)", value.lower())
    if match is None:
        raise ValueError(f"QUABLA_CACHE_MAX_BYTES={value!r} is not a size: give a number of "
                         "bytes, optionally with a K, M, G or T suffix (e.g. 2G)")
    return int(match[1]) * _UNITS[match[2]]


class _Entry(NamedTuple):
    key: str
    paths: list  # in deletion order: manifest, object, source
    size: int
    used: int  # last use (ns): the manifest's mtime, else (being written, or left by a writer
    #            that died) its newest file's
    complete: bool  # has an object and a manifest


def _scan():
    """``(entries, temporary files)``: the cache's files in the private directory, entries
    least recently used first, temporary files as ``(path, size)``."""
    files, temporary = {}, []
    with os.scandir(cache_dir()) as listing:
        for item in listing:
            match = _ENTRY_FILE.match(item.name)
            if match is None and not _TEMPORARY.match(item.name):
                continue  # not the cache's
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:  # deleted meanwhile
                continue
            if match is None:
                temporary.append((item.path, st.st_size))
            else:
                files.setdefault(match[1], {})[match[2]] = (item.path, st)
    entries = []
    for key, parts in files.items():
        dated = [parts[".manifest.json"]] if ".manifest.json" in parts else parts.values()
        entries.append(_Entry(key, [parts[s][0] for s in _SUFFIXES if s in parts],
                              sum(st.st_size for _, st in parts.values()),
                              max(st.st_mtime_ns for _, st in dated),
                              ".o" in parts and ".manifest.json" in parts))
    entries.sort(key=lambda e: e.used)
    return entries, temporary


def _evict(bound):
    """Delete the temporary files of writers that died, then least recently used entries
    until the private directory holds at most ``bound`` bytes; returns the bytes it then
    holds. The caller holds the lock."""
    entries, temporary = _scan()
    _remove(*(path for path, _ in temporary))
    total = sum(e.size for e in entries)
    for e in entries:
        if total <= bound:
            break
        _remove(*e.paths)
        total -= e.size
    return total


def info():
    """What is in the cache: ``directory`` (where new entries go), ``read_only`` (directories
    only read), ``entries`` (complete ones), ``bytes`` (all the cache's files in the
    directory), ``max_bytes``, and ``last_used``: ``(least, most)`` recent, in ns, or None."""
    entries, temporary = _scan()
    used = [e.used for e in entries if e.complete]
    return {"directory": cache_dir(),
            "read_only": [folder for folder, _ in _dirs()[1] if folder != cache_dir()],
            "entries": len(used),
            "bytes": sum(e.size for e in entries) + sum(size for _, size in temporary),
            "max_bytes": max_bytes(),
            "last_used": (used[0], used[-1]) if used else None}


def clear():
    """Delete every entry (and temporary files of writers that died) in the private directory,
    and nothing else; returns ``(entries, bytes)`` removed. Read-only directories are left."""
    with _locked():
        entries, temporary = _scan()
        for e in entries:
            _remove(*e.paths)
        _remove(*(path for path, _ in temporary), os.path.join(cache_dir(), _LEDGER))
    return len(entries), sum(e.size for e in entries) + sum(size for _, size in temporary)
