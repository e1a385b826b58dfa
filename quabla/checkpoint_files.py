"""Saving and loading pytrees of arrays and Python values (spec 004 §6.3).

``save(file, tree)`` writes, and ``load(file)`` reads, the Quabla checkpoint format that
``docs/checkpoint-format.md`` specifies byte for byte:

    magic (8 bytes)  b"QUABLA\\x00\\x01"
    header length    8-byte little-endian unsigned integer H
    header           H bytes of UTF-8 JSON describing the tree
    data             ``data_size`` bytes of raw little-endian, C-order array data

Loading never executes anything from the file (no pickle, no eval, no class lookup). Every
malformed, truncated or hostile file raises ``ValueError``; nothing is allocated for array data
before the header has been checked against the bytes the file actually holds.
"""

import io
import json
import os
import re
import struct
import tempfile

import numpy as np

from . import dtypes as _dt
from .array import Array, Tensor
from .staging.signature import Count

__all__ = ["save", "load", "MAGIC", "FORMAT_VERSION"]

MAGIC = b"QUABLA\x00\x01"
FORMAT_VERSION = 1

#: Most container levels (dict/list/tuple inside each other) a checkpoint may hold.
MAX_TREE_DEPTH = 128
#: Most JSON nesting levels the header may hold (checked before the JSON is parsed).
MAX_JSON_DEPTH = 512
#: Most dimensions an array may have (NumPy's own limit).
MAX_NDIM = 64
#: Array offsets written by ``save`` are multiples of this; ``load`` accepts any offset.
ALIGN = 8

_PREFIX = struct.Struct("<8sQ")
_PREFIX_SIZE = _PREFIX.size  # 16
_DTYPES = {"float32": _dt.float32, "float64": _dt.float64, "bool": _dt.bool_}
_INT_RE = re.compile(r"-?0x(?:0|[1-9a-f][0-9a-f]*)")
_BITS_RE = re.compile(r"[0-9a-f]{16}")
_CHUNK = 1 << 16
_MAX_CHUNK = 1 << 24


# ============================================================================================
# save
# ============================================================================================

#: Error messages quote at most this many characters of any key or value from the tree or file
#: and at most this many steps of a path, so that they stay short whatever the file holds.
_QUOTE_LIMIT = 80
_PATH_STEPS = 8
_MESSAGE_LIMIT = 2000


def _cut(text, limit=_QUOTE_LIMIT):
    return text if len(text) <= limit else text[:limit] + "..."


def _quote(value):
    """``repr(value)``, cut to ``_QUOTE_LIMIT`` characters with an ellipsis."""
    return _cut(repr(value))


class _Path:
    """A place in the tree, spelled out only when an error names it.

    Each step links to its parent, so walking a tree costs O(1) per node whatever the length
    of its keys; ``str()`` quotes a bounded part of the path (long keys cut, middle steps
    elided). ``note`` qualifies the place, as in "tree['a'] key 3".
    """

    __slots__ = ("parent", "key", "note")

    def __init__(self, parent=None, key=None, note=""):
        self.parent = parent
        self.key = key
        self.note = note

    def child(self, key):
        return _Path(self, key)

    def dict_key(self, i):
        return _Path(self.parent, self.key, f" key {i}")

    def __str__(self):
        keys = []
        node = self
        while node.parent is not None:
            keys.append(node.key)
            node = node.parent
        keys.reverse()
        if len(keys) > _PATH_STEPS:  # keys are str or int, so Ellipsis marks the elision
            keys = keys[:_PATH_STEPS // 2] + [Ellipsis] + keys[-(_PATH_STEPS // 2):]
        steps = ("..." if k is Ellipsis else f"[{_quote(k)}]" for k in keys)
        return "tree" + "".join(steps) + self.note


_ROOT = _Path()


def _int_hex(value):
    return hex(value)  # canonical: lowercase, no leading zeros, "-0x.." for negatives


class _Encoder:
    """Turns a tree into a JSON-ready header node plus the list of arrays to write."""

    def __init__(self):
        self.arrays = []  # (little-endian C-contiguous ndarray, offset)
        self.size = 0

    def node(self, x, path, depth):
        """The header node of ``x``; ``path`` (a ``_Path``) names it in errors."""
        t = type(x)
        if isinstance(x, Tensor):
            return self._array(x)
        if isinstance(x, Array):
            raise TypeError(
                f"cannot save {path}: a traced array has no concrete value "
                "(save outside the transform)"
            )
        if x is None:
            return {"type": "none"}
        if t is bool:
            return {"type": "bool", "value": x}
        if t is int or t is Count:  # an optimizer's step count loads as the int it is
            return {"type": "int", "value": _int_hex(x)}
        if t is float:
            return {"type": "float", "bits": struct.pack(">d", x).hex()}
        if t is str:
            return {"type": "str", "value": x}
        if t is dict or t is list or t is tuple:
            if depth >= MAX_TREE_DEPTH:
                raise ValueError(
                    f"cannot save {path}: the tree nests more than {MAX_TREE_DEPTH} "
                    "containers deep (or contains itself)"
                )
            if t is dict:
                items = []
                for key, value in x.items():
                    kt = type(key)
                    if kt is str:
                        knode = {"type": "str", "value": key}
                    elif kt is int:
                        knode = {"type": "int", "value": _int_hex(key)}
                    else:
                        raise TypeError(
                            f"cannot save {path}: dict key {_quote(key)} has type "
                            f"{kt.__name__}; checkpoint dict keys must be str or int"
                        )
                    items.append([knode, self.node(value, path.child(key), depth + 1)])
                return {"type": "dict", "items": items}
            items = [self.node(v, path.child(i), depth + 1) for i, v in enumerate(x)]
            return {"type": t.__name__, "items": items}
        if isinstance(x, tuple) and hasattr(t, "_fields"):
            raise TypeError(
                f"cannot save {path}: NamedTuple {t.__name__} is not serialized; "
                "save its fields (for example x._asdict()) and rebuild it after loading"
            )
        raise TypeError(
            f"cannot save {path}: objects of type {t.__module__}.{t.__qualname__} "
            "are not supported (checkpoint leaves are Quabla arrays, None, bool, int, float "
            "and str; containers are dict, list and tuple)"
        )

    def _array(self, t):
        value = np.asarray(t.numpy())
        qdtype = _dt.BY_NUMPY[value.dtype.newbyteorder("=")]
        le = np.asarray(value, dtype=value.dtype.newbyteorder("<"), order="C")  # keeps 0-d
        offset = -(-self.size // ALIGN) * ALIGN
        self.arrays.append((le, offset))
        self.size = offset + le.nbytes
        node = {
            "type": "array",
            "dtype": qdtype.name,
            "shape": [int(d) for d in le.shape],
            "offset": offset,
        }
        if t.weak:
            node["weak"] = True
        return node


def _encode(tree):
    enc = _Encoder()
    try:
        root = enc.node(tree, _ROOT, 0)
    except RecursionError:
        raise ValueError(
            f"cannot save the tree: it nests more deeply than {MAX_TREE_DEPTH} containers"
        ) from None
    header = {"version": FORMAT_VERSION, "data_size": enc.size, "tree": root}
    text = json.dumps(header, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    raw = text.encode("ascii")
    pad = (-(_PREFIX_SIZE + len(raw))) % ALIGN  # data section starts 8-aligned in the file
    raw += b" " * pad
    return raw, enc


def _write(f, raw_header, enc):
    f.write(_PREFIX.pack(MAGIC, len(raw_header)))
    f.write(raw_header)
    pos = 0
    for arr, offset in enc.arrays:
        if offset > pos:
            f.write(b"\x00" * (offset - pos))
        f.write(memoryview(arr.reshape(-1).view(np.uint8)))
        pos = offset + arr.nbytes
    if enc.size > pos:  # pragma: no cover - the last array always ends the section
        f.write(b"\x00" * (enc.size - pos))


def _umask():
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def save(file, tree):
    """Write ``tree`` to ``file`` (a path or a binary file object) as a Quabla checkpoint.

    Leaves may be Quabla arrays, None, bool, int, float and str; containers dict (str or int
    keys), list and tuple. Anything else raises TypeError naming where it is in the tree, and
    nothing is written. Saving to a path is atomic: the data goes to a temporary file in the
    same directory, which then replaces ``file``. A file object is written at its current
    position, and left positioned just after the checkpoint.
    """
    raw_header, enc = _encode(tree)
    if not isinstance(file, (str, bytes, os.PathLike)):
        if not hasattr(file, "write"):
            raise TypeError(
                f"save needs a path or a binary file object, got {type(file).__name__}"
            )
        if isinstance(file, io.TextIOBase):
            raise TypeError("save needs a binary file object, not a text one")
        _write(file, raw_header, enc)
        return
    path = os.fspath(file)
    directory = os.path.dirname(path) or (b"." if isinstance(path, bytes) else ".")
    base = os.path.basename(path)[:64]  # keep the temporary name within NAME_MAX
    prefix = (b"." + base + b".") if isinstance(path, bytes) else f".{base}."
    suffix = b".tmp" if isinstance(path, bytes) else ".tmp"
    try:
        mode = os.stat(path).st_mode & 0o7777
    except OSError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(suffix=suffix, prefix=prefix, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            _write(f, raw_header, enc)
            f.flush()
            try:
                os.fchmod(f.fileno(), mode)
            except (AttributeError, OSError):  # pragma: no cover - platform without fchmod
                pass
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable where the platform allows it
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover
        return
    try:
        os.fsync(dir_fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dir_fd)


# ============================================================================================
# load
# ============================================================================================

class _Malformed(Exception):
    """Internal: turned into a ValueError with a uniform prefix."""


class _UsageError(TypeError):
    """Internal: ``load`` was handed something that is not a binary file (passes through)."""


_TEXT_FILE = "load needs a binary file object, not a text one"


def _bad(message):
    raise _Malformed(message)


class _Source:
    """Reads exact byte counts from a binary file object without over-allocating.

    ``remaining`` is the number of bytes the stream holds from the current position when it
    can be known (a path, a seekable stream), else None; then reads grow chunk by chunk, so the
    memory used stays proportional to the bytes that really arrive.
    """

    def __init__(self, f, remaining):
        self.f = f
        self.remaining = remaining

    def read_exact(self, n, what):
        if self.remaining is None:
            return self._read_chunked(n, _CHUNK, what)
        if n > self.remaining:
            _bad(f"truncated file: {what} needs {n} bytes, only {self.remaining} remain")
        buf = bytearray(n)
        self._fill(memoryview(buf), what)
        self.remaining -= n
        return buf

    def _fill(self, view, what):
        n = len(view)
        got = 0
        while got < n:
            if hasattr(self.f, "readinto"):
                k = self.f.readinto(view[got:])
            else:  # a minimal file object with read() only
                piece = self.f.read(n - got)
                if isinstance(piece, str):
                    raise _UsageError(_TEXT_FILE)
                k = len(piece)
                if k > n - got:
                    _bad("the file object returned more bytes than asked for")
                view[got:got + k] = piece
            if not k:
                _bad(f"truncated file: {what} needs {n} bytes, the file ended after {got}")
            got += k

    def _read_chunked(self, n, chunk, what):
        buf = bytearray()
        while len(buf) < n:
            want = min(n - len(buf), chunk)
            piece = self.f.read(want)
            if isinstance(piece, str):
                raise _UsageError(_TEXT_FILE)
            if not piece:
                _bad(f"truncated file: {what} needs {n} bytes, the file ended after {len(buf)}")
            if len(piece) > want:  # pragma: no cover - a misbehaving file object
                _bad("the file object returned more bytes than asked for")
            buf += piece
            chunk = min(chunk * 2, _MAX_CHUNK)
        return buf

    def skip(self, n, what):
        if n <= 0:
            return
        if self.remaining is not None:
            if n > self.remaining:
                _bad(f"truncated file: {what} needs {n} bytes, only {self.remaining} remain")
            self.f.seek(n, io.SEEK_CUR)
            self.remaining -= n
            return
        left = n
        while left:
            piece = self.f.read(min(left, _CHUNK))
            if isinstance(piece, str):
                raise _UsageError(_TEXT_FILE)
            if not piece:
                _bad(f"truncated file: {what} ended early")
            left -= len(piece)

    def read_array(self, np_dtype, shape, nbytes, what):
        if self.remaining is None:
            data = self._read_chunked(nbytes, _CHUNK, what)
            return np.frombuffer(data, dtype=np_dtype).reshape(shape).copy()
        if nbytes > self.remaining:
            _bad(f"truncated file: {what} needs {nbytes} bytes, only {self.remaining} remain")
        out = np.empty(shape, dtype=np_dtype)
        self._fill(memoryview(out.reshape(-1).view(np.uint8)), what)
        self.remaining -= nbytes
        return out


def _seekable_remaining(f):
    try:
        if not f.seekable():
            return None
        pos = f.tell()
        end = f.seek(0, io.SEEK_END)
        f.seek(pos, io.SEEK_SET)
        if not isinstance(end, int) or not isinstance(pos, int) or end < pos:
            return None
        return end - pos
    except Exception:
        return None


def _check_depth(raw):
    """Reject JSON nested deeper than MAX_JSON_DEPTH, in linear time, before parsing it.

    Works on the UTF-8 bytes (quotes, backslashes and brackets never occur inside a multi-byte
    sequence). Escaped backslashes and escaped quotes are dropped first, so every quote left
    opens or closes a string; brackets outside strings are then counted chunk by chunk with
    small NumPy arrays. Up to the first syntax error this matches how the JSON parser nests,
    and the parser stops there, so it never recurses deeper than this count.
    """
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
        return
    raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    data = np.frombuffer(raw, dtype=np.uint8)
    in_string = 0
    depth = 0
    step = 4096
    for start in range(0, len(data), step):
        chunk = data[start:start + step]
        quotes = chunk == 34  # '"'
        outside = (np.cumsum(quotes, dtype=np.int32) + in_string) % 2 == 0
        opens = (chunk == 91) | (chunk == 123)  # '[' '{'
        closes = (chunk == 93) | (chunk == 125)  # ']' '}'
        moves = opens.view(np.int8) - closes.view(np.int8)
        moves *= outside.view(np.int8)
        levels = np.cumsum(moves, dtype=np.int32)
        if depth + int(levels.max()) > MAX_JSON_DEPTH:
            _bad(f"the header nests deeper than {MAX_JSON_DEPTH} levels")
        depth += int(levels[-1])
        in_string = (in_string + int(np.count_nonzero(quotes))) % 2


def _no_duplicates(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            _bad(f"the header repeats the JSON key {_quote(key)}")
        obj[key] = value
    return obj


def _parse_int(s):
    if len(s) > 40:
        _bad("the header holds an integer literal that is too long")
    return int(s)


def _parse_float(s):
    _bad(f"the header holds a JSON number {s[:40]!r} that is not an integer")


def _parse_constant(s):
    _bad(f"the header holds the non-standard JSON constant {s}")


def _parse_header(raw):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        _bad("the header is not valid UTF-8")
    _check_depth(raw)
    try:
        header = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
        )
    except _Malformed:
        raise
    except RecursionError:
        _bad("the header nests too deeply")
    except ValueError as exc:
        _bad(f"the header is not valid JSON ({exc})")
    return header


def _is_int(x):
    return type(x) is int


def _keys(node, required, optional=(), what="node"):
    if type(node) is not dict:
        _bad(f"{what} must be a JSON object, got {type(node).__name__}")
    keys = set(node)
    missing = [k for k in required if k not in keys]
    if missing:
        _bad(f"{what} lacks the field(s) {missing}")
    unknown = keys.difference(required).difference(optional)
    if unknown:
        _bad(f"{what} has unknown field(s) {_quote(sorted(unknown))}")


def _int_value(s, what):
    if type(s) is not str or _INT_RE.fullmatch(s) is None or s == "-0x0":
        _bad(f"{what}: an int must be a canonical hexadecimal string such as '0x4b0'")
    return int(s, 16)


class _Validator:
    """Checks every header node against the schema and collects the arrays it describes."""

    def __init__(self, data_size):
        self.data_size = data_size
        self.arrays = []  # (offset, nbytes, np_dtype, shape, index)

    def node(self, node, depth, where):
        if type(node) is not dict:
            _bad(f"{where}: a tree node must be a JSON object")
        kind = node.get("type")
        if kind == "none":
            _keys(node, ("type",), what=where)
        elif kind == "bool":
            _keys(node, ("type", "value"), what=where)
            if type(node["value"]) is not bool:
                _bad(f"{where}: a bool node needs a JSON true or false value")
        elif kind == "int":
            _keys(node, ("type", "value"), what=where)
            _int_value(node["value"], where)
        elif kind == "float":
            _keys(node, ("type", "bits"), what=where)
            bits = node["bits"]
            if type(bits) is not str or _BITS_RE.fullmatch(bits) is None:
                _bad(f"{where}: float bits must be 16 lowercase hexadecimal digits")
        elif kind == "str":
            _keys(node, ("type", "value"), what=where)
            if type(node["value"]) is not str:
                _bad(f"{where}: a str node needs a JSON string value")
        elif kind == "array":
            self._array(node, where)
        elif kind in ("list", "tuple", "dict"):
            _keys(node, ("type", "items"), what=where)
            items = node["items"]
            if type(items) is not list:
                _bad(f"{where}: items must be a JSON array")
            if depth >= MAX_TREE_DEPTH:
                _bad(f"{where}: the tree nests more than {MAX_TREE_DEPTH} containers deep")
            if kind == "dict":
                seen = set()
                for i, pair in enumerate(items):
                    if type(pair) is not list or len(pair) != 2:
                        _bad(f"{where}: dict item {i} must be a [key, value] pair")
                    knode, vnode = pair
                    if type(knode) is not dict:
                        _bad(f"{where}: dict key {i} must be a JSON object")
                    ktype = knode.get("type")
                    _keys(knode, ("type", "value"), what=where.dict_key(i))
                    if ktype == "str":
                        key = knode["value"]
                        if type(key) is not str:
                            _bad(f"{where}: dict key {i} must hold a JSON string")
                    elif ktype == "int":
                        key = _int_value(knode["value"], where.dict_key(i))
                    else:
                        _bad(f"{where}: dict key {i} must be of type 'str' or 'int'")
                    tagged = (ktype, key)
                    if tagged in seen:
                        _bad(f"{where}: the dict repeats the key {_quote(key)}")
                    seen.add(tagged)
                    self.node(vnode, depth + 1, where.child(key))
            else:
                for i, child in enumerate(items):
                    self.node(child, depth + 1, where.child(i))
        else:
            _bad(f"{where}: unknown node type {_quote(kind)}")

    def _array(self, node, where):
        _keys(node, ("type", "dtype", "shape", "offset"), ("weak",), what=where)
        name = node["dtype"]
        if type(name) is not str or name not in _DTYPES:
            _bad(f"{where}: unknown dtype {_quote(name)} (expected float32, float64 or bool)")
        shape = node["shape"]
        if type(shape) is not list or len(shape) > MAX_NDIM:
            _bad(f"{where}: shape must be a JSON array of at most {MAX_NDIM} integers")
        count = 1
        for d in shape:
            if not _is_int(d) or d < 0:
                _bad(f"{where}: shape entries must be non-negative integers")
            count *= d
            if count > self.data_size:
                break
        if count == 0:
            _bad(f"{where}: zero-extent arrays are not supported (shape {_quote(shape)})")
        qdtype = _DTYPES[name]
        nbytes = count * qdtype.itemsize
        offset = node["offset"]
        if not _is_int(offset) or offset < 0:
            _bad(f"{where}: offset must be a non-negative integer")
        if count > self.data_size or offset + nbytes > self.data_size:
            _bad(f"{where}: the array's {name} data (shape {_quote(shape)}) at offset {offset} "
                 f"does not fit in the {self.data_size}-byte data section")
        if "weak" in node and type(node["weak"]) is not bool:
            _bad(f"{where}: weak must be a JSON true or false")
        np_dtype = qdtype.numpy.newbyteorder("<")
        self.arrays.append((offset, nbytes, np_dtype, tuple(shape), len(self.arrays)))


class _Builder:
    def __init__(self, arrays):
        self.arrays = arrays
        self.next = 0

    def build(self, node):
        kind = node["type"]
        if kind == "none":
            return None
        if kind == "bool":
            return node["value"]
        if kind == "int":
            return int(node["value"], 16)
        if kind == "float":
            return struct.unpack(">d", bytes.fromhex(node["bits"]))[0]
        if kind == "str":
            return node["value"]
        if kind == "array":
            value = self.arrays[self.next]
            self.next += 1
            return Tensor.wrap(value, weak=node.get("weak", False))
        if kind == "list":
            return [self.build(c) for c in node["items"]]
        if kind == "tuple":
            return tuple(self.build(c) for c in node["items"])
        out = {}
        for knode, vnode in node["items"]:
            key = knode["value"] if knode["type"] == "str" else int(knode["value"], 16)
            out[key] = self.build(vnode)
        return out


def _load_from(f, remaining, exact):
    src = _Source(f, remaining)
    prefix = src.read_exact(_PREFIX_SIZE, "the magic and header length")
    magic, header_len = _PREFIX.unpack(prefix)
    if magic != MAGIC:
        _bad(f"not a Quabla checkpoint (magic {magic!r}, expected {MAGIC!r})")
    raw = src.read_exact(header_len, "the header")
    header = _parse_header(raw)
    _keys(header, ("version", "data_size", "tree"), what="the header")
    version = header["version"]
    if not _is_int(version) or version != FORMAT_VERSION:
        _bad(f"unsupported checkpoint version {_quote(version)} "
             f"(this Quabla reads {FORMAT_VERSION})")
    data_size = header["data_size"]
    if not _is_int(data_size) or data_size < 0:
        _bad("data_size must be a non-negative integer")
    if src.remaining is not None:
        if data_size > src.remaining:
            _bad(f"truncated file: the data section needs {data_size} bytes, "
                 f"only {src.remaining} remain")
        if exact and data_size != src.remaining:
            _bad(f"{src.remaining - data_size} unexpected bytes after the data section")
    validator = _Validator(data_size)
    try:
        validator.node(header["tree"], 0, _ROOT)
    except RecursionError:
        _bad("the tree nests too deeply")
    specs = sorted(validator.arrays, key=lambda s: s[0])
    pos = 0
    values = [None] * len(specs)
    for offset, nbytes, np_dtype, shape, index in specs:
        if offset < pos:
            _bad("two arrays overlap in the data section")
        src.skip(offset - pos, "the data section")
        arr = src.read_array(np_dtype, shape, nbytes, "the data section")
        if np_dtype.kind == "b":
            raw_bytes = arr.reshape(-1).view(np.uint8)
            if raw_bytes.max() > 1:
                _bad("a bool array holds bytes other than 0 and 1")
        elif not np_dtype.isnative:
            arr = arr.astype(np_dtype.newbyteorder("="))
        values[index] = arr
        pos = offset + nbytes
    src.skip(data_size - pos, "the data section")
    if exact and src.remaining is None and f.read(1):
        _bad("unexpected bytes after the data section")
    return _Builder(values).build(header["tree"])


def load(file):
    """Read a checkpoint written by ``save`` from a path or a binary file object.

    Returns the tree with arrays as Tensors (same shape, dtype and bits), Python scalars of
    their original type and value, dicts in their original key order and tuples as tuples.
    A malformed, truncated or hostile file raises ValueError. A path must hold exactly one
    checkpoint (trailing bytes are an error); from a file object, load reads one checkpoint
    starting at the current position and leaves the position just after it.
    """
    if isinstance(file, (str, bytes, os.PathLike)):
        f = open(file, "rb")  # a missing or unreadable file raises OSError, not ValueError
        try:
            try:
                size = os.fstat(f.fileno()).st_size
            except OSError:  # pragma: no cover
                size = None
            return _guarded(f, size, exact=True)
        finally:
            f.close()
    if not hasattr(file, "read"):
        raise TypeError(f"load needs a path or a binary file object, got {type(file).__name__}")
    if isinstance(file, io.TextIOBase):
        raise TypeError(_TEXT_FILE)
    return _guarded(file, _seekable_remaining(file), exact=False)


def _guarded(f, remaining, exact):
    """Run the loader, turning every way a hostile file can make it fail into ValueError."""
    try:
        return _load_from(f, remaining, exact)
    except _Malformed as exc:
        raise ValueError(_cut(f"malformed Quabla checkpoint: {exc}", _MESSAGE_LIMIT)) from None
    except (OSError, _UsageError):
        raise  # an I/O failure or a text-mode file object: not the file's content
    except MemoryError:
        raise ValueError(
            "cannot load the Quabla checkpoint: it needs more memory than is available"
        ) from None
    except RecursionError:
        raise ValueError("malformed Quabla checkpoint: it nests too deeply") from None
    except Exception as exc:  # anything else parsing hit means the file is malformed
        message = f"malformed Quabla checkpoint: {type(exc).__name__}: {exc}"
        raise ValueError(_cut(message, _MESSAGE_LIMIT)) from None
