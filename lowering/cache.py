"""The on-disk compile cache.

Entries live in a private directory (mode 0700; ``QUABLA_CACHE_DIR`` overrides the default
under the user's cache directory), named by a key: a hash of the generated source (which
encodes the canonical graph and argument types), the versions of Quabla, Numba, llvmlite,
NumPy and Python, the object layouts compiled code assumes, and a digest of the runtime helpers
the code links in. An entry is the generated source, the entry's object code, and a manifest
with the object's SHA-256 digest, symbol and external symbols. Every entry is verified before
use: a source that differs from the regenerated one is replaced, an object that does not match
its manifest is deleted and recompiled, never executed.
"""

import hashlib
import json
import os
import platform
import stat
import sys
import tempfile
import warnings

__all__ = ["cache_dir", "entry_key", "write_source", "read_object", "write_object"]

_DIR = None


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

    from quabla import __version__

    from .native import abi_tag

    # the generated code links the runtime helpers into its machine code: a change to them
    # must not reuse entries compiled against the old ones
    with open(os.path.join(os.path.dirname(__file__), "numba_cpu", "runtime.py"), "rb") as f:
        helpers = hashlib.sha256(f.read()).hexdigest()[:16]
    return f"quabla={__version__};numba={_numba_version()};llvmlite={llvmlite.__version__};" \
           f"numpy={numpy.__version__};python={sys.version.split()[0]};{platform.machine()};" \
           f"{abi_tag()};runtime={helpers}"


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
    _replace(path, source.encode("utf-8"))
    return path


def _path(name, suffix):
    return os.path.join(cache_dir(), name + suffix)


def _manifest_path(name):
    return _path(name, ".manifest.json")


def _replace(path, data):
    """Write ``data`` (bytes) to ``path`` atomically."""
    fd, tmp = tempfile.mkstemp(dir=cache_dir(), suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_object(name):
    """``(object code, manifest)`` of entry ``name`` if both are there and the code matches
    the digest recorded when it was written; otherwise None, and whatever was there is gone."""
    try:
        with open(_manifest_path(name), encoding="utf-8") as f:
            manifest = json.load(f)
        with open(_path(name, ".o"), "rb") as f:
            code = f.read()
        if (isinstance(manifest, dict) and manifest.get("sha256") == hashlib.sha256(code).hexdigest()
                and isinstance(manifest.get("entry"), str) and isinstance(manifest.get("symbols"), list)):
            return code, manifest
    except (OSError, ValueError):
        pass
    for path in (_path(name, ".o"), _manifest_path(name)):
        try:
            os.remove(path)
        except OSError:
            pass
    return None


def write_object(name, code, manifest):
    """Store entry ``name``'s object code, then the manifest that vouches for it."""
    _replace(_path(name, ".o"), code)
    manifest = dict(manifest, sha256=hashlib.sha256(code).hexdigest())
    _replace(_manifest_path(name), json.dumps(manifest).encode())
