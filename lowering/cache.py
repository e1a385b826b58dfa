"""The on-disk compile cache.

Generated sources live in a private directory (mode 0700; ``QUABLA_CACHE_DIR`` overrides the
default under the user's cache directory), one file per key: a hash of the generated source
(which encodes the canonical graph and argument types), the versions of Quabla, Numba,
llvmlite, NumPy and Python, and a digest of the runtime helpers the code links in. Numba's
``cache=True`` stores the machine code beside it, so a second process loads instead of
compiling. Every entry is verified before use: the source file
must equal the regenerated source, and Numba's cache files must match the SHA-256 digests
recorded in our manifest when they were written; anything else is deleted and recompiled, never
executed.
"""

import hashlib
import json
import os
import platform
import stat
import sys
import tempfile
import warnings

__all__ = ["cache_dir", "entry_key", "write_source", "verify_numba_files", "record_numba_files"]

_DIR = None


def _versions():
    import llvmlite
    import numba
    import numpy

    from quabla import __version__

    from .numba_cpu import runtime

    # the generated code links the runtime helpers into its machine code: a change to them
    # must not reuse entries compiled against the old ones
    with open(runtime.__file__, "rb") as f:
        helpers = hashlib.sha256(f.read()).hexdigest()[:16]
    return f"quabla={__version__};numba={numba.__version__};llvmlite={llvmlite.__version__};" \
           f"numpy={numpy.__version__};python={sys.version.split()[0]};{platform.machine()};" \
           f"runtime={helpers}"


def _is_private(path):
    st = os.stat(path)
    owner_ok = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    return owner_ok and not (st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def cache_dir():
    """The private cache directory, created on first use."""
    global _DIR
    if _DIR is not None:
        return _DIR
    path = os.environ.get("QUABLA_CACHE_DIR")
    if not path:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = os.path.join(base, "quabla")
    path = os.path.abspath(path)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        if not _is_private(path):
            if os.stat(path).st_uid == getattr(os, "getuid", lambda: -1)():
                os.chmod(path, 0o700)
            else:
                raise PermissionError(f"{path} is owned by another user")
        if not os.access(path, os.W_OK):
            raise PermissionError(f"{path} is not writable")
    except OSError as exc:
        fallback = tempfile.mkdtemp(prefix="quabla-cache-")
        warnings.warn(f"quabla: cannot use the compile cache at {path} ({exc}); using {fallback}")
        path = fallback
    _DIR = path
    return path


_VERSIONS = None


def entry_key(source):
    global _VERSIONS
    if _VERSIONS is None:
        _VERSIONS = _versions()
    return hashlib.sha256((_VERSIONS + "\n" + source).encode()).hexdigest()[:32]


def write_source(name, source):
    """Write ``source`` as module ``name`` unless an identical file is there; returns the path."""
    path = os.path.join(cache_dir(), name + ".py")
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == source:
                return path
    except (OSError, UnicodeDecodeError):
        pass
    # a missing, corrupted or planted source: replace it; its stale manifest no longer applies
    try:
        os.remove(_manifest_path(name))
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=cache_dir(), suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(source)
    os.replace(tmp, path)
    return path


def _manifest_path(name):
    return os.path.join(cache_dir(), name + ".manifest.json")


def _numba_files(name, folder):
    try:
        return sorted(
            os.path.join(folder, f) for f in os.listdir(folder)
            if f.startswith(name + ".") and f.endswith((".nbi", ".nbc"))
        )
    except OSError:
        return []


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _remove_numba_files(name, folder):
    for path in _numba_files(name, folder) + [_manifest_path(name)]:
        try:
            os.remove(path)
        except OSError:
            pass


def verify_numba_files(name, folder):
    """True if Numba's cache files for ``name`` (in ``folder``, where Numba keeps them) are
    exactly those we recorded; otherwise they are removed (so Numba compiles afresh) and False
    is returned."""
    files = _numba_files(name, folder)
    if not files:
        return False
    try:
        with open(_manifest_path(name), encoding="utf-8") as f:
            recorded = json.load(f)
        ok = recorded == {os.path.basename(p): _digest(p) for p in files}
    except (OSError, ValueError):
        ok = False
    if not ok:
        _remove_numba_files(name, folder)
    return ok


def record_numba_files(name, folder):
    manifest = {os.path.basename(p): _digest(p) for p in _numba_files(name, folder)}
    fd, tmp = tempfile.mkstemp(dir=cache_dir(), suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    os.replace(tmp, _manifest_path(name))
