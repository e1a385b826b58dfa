"""qb.save / qb.load (spec 004 §6.3; byte layout in docs/checkpoint-format.md)."""

import collections
import dataclasses
import io
import json
import math
import os
import stat
import struct
import sys
import tracemalloc
import typing

import numpy as np
import pytest

import quabla as qb
from quabla import checkpoint_files as ckpt
from quabla.array import Tensor

MAGIC = b"QUABLA\x00\x01"


# -- helpers -------------------------------------------------------------------------------------

def assert_same(a, b, path="tree"):
    """Exact equality: types, key order, dtypes, shapes, weak flags and every bit."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, Tensor):
        assert a.dtype is b.dtype, path
        assert a.shape == b.shape, path
        assert a.weak == b.weak, path
        x, y = a.numpy(), b.numpy()
        assert x.dtype == y.dtype and x.shape == y.shape, path
        assert x.tobytes() == y.tobytes(), path
    elif isinstance(a, float):
        assert struct.pack("<d", a) == struct.pack("<d", b), f"{path}: {a!r} != {b!r}"
    elif isinstance(a, dict):
        assert [(type(k), k) for k in a] == [(type(k), k) for k in b], path
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def dumps(tree):
    buf = io.BytesIO()
    qb.save(buf, tree)
    return buf.getvalue()


def loads(raw):
    return qb.load(io.BytesIO(raw))


def roundtrip(tree):
    out = loads(dumps(tree))
    assert_same(tree, out)
    return out


def split(raw):
    """(header dict, data bytes) of a checkpoint."""
    assert raw[:8] == MAGIC
    (n,) = struct.unpack("<Q", raw[8:16])
    return json.loads(raw[16:16 + n]), raw[16 + n:]


def join(header, data, header_len=None, pad=True):
    text = json.dumps(header).encode()
    if pad:
        text += b" " * ((-(16 + len(text))) % 8)
    n = len(text) if header_len is None else header_len
    return MAGIC + struct.pack("<Q", n) + text + data


class Stream:
    """A non-seekable binary stream with read() only (like a pipe or a socket file)."""

    def __init__(self, data):
        self._buf = io.BytesIO(data)

    def read(self, n=-1):
        return self._buf.read(n)


def f32(values):
    return qb.array(np.asarray(values, dtype=np.float32))


def f64(values):
    return qb.array(np.asarray(values, dtype=np.float64))


def bools(values):
    return qb.array(np.asarray(values, dtype=np.bool_))


def sample_tree():
    rng = np.random.default_rng(0)
    return {
        "params": {
            "w": f32(rng.standard_normal((3, 4))),
            "b": qb.zeros((4,), dtype=qb.float32),
            "scale": f64(2.5),
        },
        "mask": bools(rng.random((2, 3, 2)) < 0.5),
        "layers": [f64(rng.standard_normal((2,))), (f32([1.0]), None)],
        7: "seven",
        "step": 1200,
        "lr": 1e-3,
        "flags": (True, False),
    }


# -- round trips ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.bool_])
@pytest.mark.parametrize("shape", [(), (1,), (5,), (2, 3), (3, 1, 2), (2, 2, 2, 2, 1), (1,) * 10])
def test_array_roundtrip(dtype, shape):
    rng = np.random.default_rng(len(shape) * 7 + np.dtype(dtype).itemsize)
    if dtype is np.bool_:
        data = rng.random(shape) < 0.5
    else:
        data = np.asarray(rng.standard_normal(shape)).astype(dtype)
    t = qb.array(np.asarray(data))
    out = roundtrip(t)
    assert out.dtype is qb.dtypes.dtype(dtype)
    assert out.shape == list(shape)
    assert out.numpy().flags.c_contiguous
    assert not out.numpy().flags.writeable


def test_array_special_bits_survive():
    x64 = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, np.finfo(np.float64).max],
                   dtype=np.float64)
    nan_payload = np.array([0x7FF0000000000001, 0xFFF8DEADBEEF0001], dtype=np.uint64)
    x64 = np.concatenate([x64, nan_payload.view(np.float64)])
    x32 = np.concatenate([
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45], dtype=np.float32),
        np.array([0x7F800001, 0xFFC0FFEE], dtype=np.uint32).view(np.float32),
    ])
    for arr in (x64, x32):
        out = roundtrip(qb.array(arr))
        assert out.numpy().tobytes() == arr.tobytes()


def test_dtypes_and_constructors():
    tree = [qb.zeros((2, 2)), qb.ones((3,), dtype=qb.float32),
            qb.array([1.0, 2.0], dtype=qb.float32),
            qb.full((2,), True), qb.eye(3), qb.arange(5.0), qb.array(3.0)]
    out = roundtrip(tree)
    assert [t.dtype for t in out] == [qb.float64, qb.float32, qb.float32, qb.bool_, qb.float64,
                                      qb.float64, qb.float64]


def test_weak_flag_survives():
    weak = Tensor.wrap(np.array(2.0), weak=True)
    out = roundtrip({"w": weak, "s": qb.array(1.0)})
    assert out["w"].weak and not out["s"].weak


def test_scalars_roundtrip():
    tree = [
        None, True, False, 0, 1, -1, 2**63, -(2**64) - 5, 10**400, -(7**1000), 2**100000,
        0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), float("nan"), -float("nan"),
        5e-324, sys.float_info.max, 0.1,
        "", "hello", "ünïcødé ✓ 🙂", "\x00\n\"\\", "\ud800 lone surrogate", "{[\"]}",
        "x" * 10000,
    ]
    out = roundtrip(tree)
    assert out[1] is True and out[2] is False
    assert type(out[3]) is int and type(out[11]) is float
    assert math.copysign(1.0, out[12]) == -1.0
    assert math.isnan(out[17])
    assert out[10] == 2**100000


def test_nan_payload_scalar():
    value = struct.unpack("<d", struct.pack("<Q", 0xFFF0000000000ABC))[0]
    out = roundtrip(value)
    assert struct.pack("<d", out) == struct.pack("<d", value)


def test_containers_roundtrip():
    tree = {
        "z": 1, "a": 2, "m": 3,                         # insertion order, not sorted
        5: "int key", -3: "negative", 2**70: "big",    # int keys
        "5": "str key next to int 5",                   # distinct from 5
        "empty": {}, "el": [], "et": (),
        "nested": [[1, [2, (3, {"d": (None,)})]], ((),)],
        "tensors": (qb.zeros((1,)), [qb.ones((2, 2), dtype=qb.float32)]),
    }
    out = roundtrip(tree)
    assert list(out) == list(tree)
    assert isinstance(out["et"], tuple) and isinstance(out["el"], list)
    assert isinstance(out["nested"][0][1][1], tuple)
    assert out[5] == "int key" and out["5"] == "str key next to int 5"


def test_only_int_keys_and_mixed_key_order():
    roundtrip({3: 0, 1: 1, 2: 2})
    out = roundtrip({"b": 1, 0: 2, "a": 3, -1: 4})
    assert list(out) == ["b", 0, "a", -1]


def test_empty_and_trivial_trees():
    for tree in (None, {}, [], (), 0, "", qb.array(1.0)):
        roundtrip(tree)


def test_adam_like_state():
    rng = np.random.default_rng(1)
    params = {"dense": {"w": f32(rng.standard_normal((4, 3))), "b": f32(np.zeros(3))},
              "out": {"w": f64(rng.standard_normal((3, 1)))}}
    m = {k: {n: f32(rng.standard_normal(v.shape)) if v.dtype is qb.float32
              else f64(rng.standard_normal(v.shape)) for n, v in layer.items()}
         for k, layer in params.items()}
    v = {k: {n: qb.array(np.abs(t.numpy())) for n, t in layer.items()} for k, layer in m.items()}
    state = {"step": 3, "m": m, "v": v}
    out = roundtrip({"params": params, "opt": state, "step": 1200})
    assert list(out["opt"]) == ["step", "m", "v"]
    assert out["opt"]["step"] == 3 and type(out["opt"]["step"]) is int


def test_deep_nesting_within_limit():
    tree = qb.zeros((1,))
    for i in range(ckpt.MAX_TREE_DEPTH):
        tree = {"k": tree} if i % 3 == 0 else ([tree] if i % 3 == 1 else (tree,))
    roundtrip(tree)


def test_too_deep_or_cyclic_tree_is_rejected_on_save(tmp_path):
    tree = 1
    for _ in range(ckpt.MAX_TREE_DEPTH + 1):
        tree = [tree]
    with pytest.raises(ValueError, match="deep"):
        dumps(tree)
    cyclic = []
    cyclic.append(cyclic)
    with pytest.raises(ValueError):
        qb.save(tmp_path / "c.qb", cyclic)
    assert os.listdir(tmp_path) == []


def test_large_array_roundtrip_and_alignment():
    arr = np.random.default_rng(2).standard_normal((300, 300))
    raw = dumps({"a": qb.array(np.ones(3, dtype=np.float32)), "b": qb.array(arr)})
    header, data = split(raw)
    assert (16 + struct.unpack("<Q", raw[8:16])[0]) % 8 == 0
    offsets = [node["offset"] for _, node in header["tree"]["items"]]
    assert offsets == [0, 16]
    assert header["data_size"] == len(data) == 16 + arr.nbytes
    assert loads(raw)["b"].numpy().tobytes() == arr.tobytes()


def test_header_layout_is_as_documented():
    raw = dumps({"step": 1200, "x": 0.5, "ok": True, "n": None, "s": "hi",
                 "w": f32([[1.0, 2.0]]), 3: (1,), "l": []})
    header, data = split(raw)
    assert header["version"] == 1
    items = header["tree"]["items"]
    assert header["tree"]["type"] == "dict"
    assert items[0] == [{"type": "str", "value": "step"}, {"type": "int", "value": "0x4b0"}]
    assert items[1][1] == {"type": "float", "bits": "3fe0000000000000"}
    assert items[2][1] == {"type": "bool", "value": True}
    assert items[3][1] == {"type": "none"}
    assert items[4][1] == {"type": "str", "value": "hi"}
    assert items[5][1] == {"type": "array", "dtype": "float32", "shape": [1, 2], "offset": 0}
    assert items[6] == [{"type": "int", "value": "0x3"},
                        {"type": "tuple", "items": [{"type": "int", "value": "0x1"}]}]
    assert items[7][1] == {"type": "list", "items": []}
    assert data == np.array([1.0, 2.0], dtype="<f4").tobytes()


def test_reader_example_from_docs_agrees():
    """The pure-Python/NumPy reader sketched in docs/checkpoint-format.md."""
    tree = {"a": f32([[1, 2], [3, 4]]), "b": [1, -2**70, 0.25, None, "s", True],
            5: (bools([True, False]),)}
    raw = dumps(tree)

    def read(f):
        magic, n = struct.unpack("<8sQ", f.read(16))
        assert magic == MAGIC
        header = json.loads(f.read(n))
        data = f.read(header["data_size"])

        def build(node):
            t = node["type"]
            if t == "none":
                return None
            if t in ("bool", "str"):
                return node["value"]
            if t == "int":
                return int(node["value"], 16)
            if t == "float":
                return struct.unpack(">d", bytes.fromhex(node["bits"]))[0]
            if t == "array":
                dt = {"float32": "<f4", "float64": "<f8", "bool": "|b1"}[node["dtype"]]
                count = math.prod(node["shape"])
                return np.frombuffer(data, dt, count, node["offset"]).reshape(node["shape"])
            if t == "list":
                return [build(c) for c in node["items"]]
            if t == "tuple":
                return tuple(build(c) for c in node["items"])
            return {build(k): build(v) for k, v in node["items"]}

        return build(header["tree"])

    out = read(io.BytesIO(raw))
    assert list(out) == ["a", "b", 5]
    np.testing.assert_array_equal(out["a"], [[1, 2], [3, 4]])
    assert out["b"] == [1, -2**70, 0.25, None, "s", True]
    np.testing.assert_array_equal(out[5][0], [True, False])


# -- path and file-object forms ------------------------------------------------------------------

def test_path_forms(tmp_path):
    tree = sample_tree()
    p = tmp_path / "ckpt.qb"
    qb.save(p, tree)
    assert_same(tree, qb.load(p))
    assert_same(tree, qb.load(str(p)))
    qb.save(str(tmp_path / "b.qb"), tree)
    assert_same(tree, qb.load(os.fsencode(tmp_path / "b.qb")))
    assert (tmp_path / "b.qb").read_bytes() == p.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["b.qb", "ckpt.qb"]


def test_relative_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    qb.save("rel.qb", {"a": 1})
    assert qb.load("rel.qb") == {"a": 1}


def test_file_object_forms(tmp_path):
    tree = sample_tree()
    with open(tmp_path / "f.qb", "wb") as f:
        qb.save(f, tree)
    with open(tmp_path / "f.qb", "rb") as f:
        assert_same(tree, qb.load(f))
        assert f.read() == b""
    assert_same(tree, qb.load(Stream(dumps(tree))))


def test_several_checkpoints_in_one_stream():
    buf = io.BytesIO()
    buf.write(b"prefix")
    qb.save(buf, {"first": f32([1.0])})
    qb.save(buf, [2, qb.zeros((2,))])
    buf.write(b"tail")
    buf.seek(6)
    assert_same(qb.load(buf), {"first": f32([1.0])})
    assert_same(qb.load(buf), [2, qb.zeros((2,))])
    assert buf.read() == b"tail"
    stream = Stream(dumps(1) + dumps(2))
    assert qb.load(stream) == 1 and qb.load(stream) == 2


def test_trailing_bytes_policy(tmp_path):
    raw = dumps(sample_tree())
    p = tmp_path / "t.qb"
    p.write_bytes(raw + b"\x00")
    with pytest.raises(ValueError, match="after the data section"):
        qb.load(p)
    assert_same(loads(raw + b"garbage"), sample_tree())  # a stream stops after one checkpoint


def test_wrong_arguments(tmp_path):
    with pytest.raises(FileNotFoundError):
        qb.load(tmp_path / "missing.qb")
    with pytest.raises(FileNotFoundError):
        qb.save(tmp_path / "no" / "dir.qb", 1)
    with pytest.raises(TypeError):
        qb.load(12)
    with pytest.raises(TypeError):
        qb.save(12, 1)
    with pytest.raises(TypeError):
        qb.load(io.StringIO("QUABLA"))
    with pytest.raises(TypeError):
        qb.save(io.StringIO(), 1)
    with open(tmp_path / "t.txt", "w") as f:
        with pytest.raises(TypeError):
            qb.save(f, 1)


# -- atomic save ---------------------------------------------------------------------------------

def test_atomic_save_keeps_old_file_on_failure(tmp_path, monkeypatch):
    p = tmp_path / "model.qb"
    old = {"version": "old", "w": qb.zeros((4,))}
    qb.save(p, old)
    before = p.read_bytes()
    real_write = ckpt._write

    def crash(f, raw_header, enc):
        f.write(b"QUABLA\x00\x01 half a checkpoint")
        raise KeyboardInterrupt("simulated crash while writing")

    monkeypatch.setattr(ckpt, "_write", crash)
    with pytest.raises(KeyboardInterrupt):
        qb.save(p, {"version": "new", "w": qb.ones((1000,))})
    assert p.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.qb"]          # the temporary file is gone
    assert_same(qb.load(p), old)
    monkeypatch.setattr(ckpt, "_write", real_write)
    qb.save(p, {"version": "new"})
    assert qb.load(p) == {"version": "new"}
    assert os.listdir(tmp_path) == ["model.qb"]


def test_atomic_save_writes_to_temp_then_replaces(tmp_path, monkeypatch):
    p = tmp_path / "m.qb"
    calls = []
    real_replace = os.replace

    def spy(src, dst):
        calls.append((os.fspath(src), os.fspath(dst)))
        assert os.path.dirname(os.fspath(src)) == os.fspath(tmp_path)
        assert qb.load(src) == [1, 2]                   # complete before it gets the real name
        assert not p.exists()
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", spy)
    qb.save(p, [1, 2])
    assert len(calls) == 1 and calls[0][1] == os.fspath(p)
    assert qb.load(p) == [1, 2]


def test_type_error_writes_nothing(tmp_path):
    p = tmp_path / "x.qb"
    qb.save(p, 1)
    before = p.read_bytes()
    with pytest.raises(TypeError):
        qb.save(p, {"a": {1, 2}})
    assert p.read_bytes() == before and os.listdir(tmp_path) == ["x.qb"]
    buf = io.BytesIO()
    with pytest.raises(TypeError):
        qb.save(buf, [qb.zeros((2,)), object()])
    assert buf.getvalue() == b""


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_save_permissions(tmp_path):
    p = tmp_path / "perm.qb"
    old = os.umask(0o022)
    try:
        qb.save(p, 1)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o644
    os.chmod(p, 0o600)
    qb.save(p, 2)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600


# -- what cannot be saved ------------------------------------------------------------------------

class Point(typing.NamedTuple):
    x: float
    y: float


@dataclasses.dataclass
class DC:
    a: int = 1


class MyList(list):
    pass


@pytest.mark.parametrize("bad, where", [
    (Point(1.0, 2.0), "tree"),
    ({"p": [Point(1.0, 2.0)]}, "tree['p'][0]"),
    (collections.namedtuple("NT", "a")(1), "tree"),
    ({"d": DC()}, "tree['d']"),
    ([np.zeros(3)], "tree[0]"),
    ({"x": np.float64(1.0)}, "tree['x']"),
    ({"x": np.float32(1.0)}, "tree['x']"),
    ({"x": np.int64(1)}, "tree['x']"),
    ({"x": np.bool_(True)}, "tree['x']"),
    ((1, {2, 3}), "tree[1]"),
    (frozenset(), "tree"),
    ([b"bytes"], "tree[0]"),
    ([1 + 2j], "tree[0]"),
    ({"o": object()}, "tree['o']"),
    (collections.OrderedDict(a=1), "tree"),
    (MyList([1]), "tree"),
    ({"r": range(3)}, "tree['r']"),
    ({"k": qb.random.key(0) if hasattr(qb.random, "key") else object()}, "tree['k']"),
])
def test_unsupported_values_raise_type_error(bad, where):
    with pytest.raises(TypeError) as info:
        dumps(bad)
    assert where in str(info.value)


@pytest.mark.parametrize("key", [1.5, True, False, None, (1, 2), b"k", np.int64(1)])
def test_unsupported_dict_keys(key):
    with pytest.raises(TypeError, match="key"):
        dumps({"outer": {key: 1}})


def test_namedtuple_message_suggests_fields():
    with pytest.raises(TypeError, match="NamedTuple"):
        dumps([Point(1.0, 2.0)])


def test_bool_key_not_confused_with_int():
    # True == 1 in Python; a bool key would load as int, so it is rejected outright.
    with pytest.raises(TypeError):
        dumps({True: 1})


# -- malformed files -----------------------------------------------------------------------------

def bad(raw, match=None):
    with pytest.raises(ValueError, match=match):
        loads(raw)
    with pytest.raises(ValueError, match=match):
        qb.load(Stream(raw))


def test_empty_and_short_files(tmp_path):
    for raw in (b"", b"Q", MAGIC, MAGIC + b"\x00" * 7):
        bad(raw, "truncated")
    bad(b"NOTQBLA!" + b"\x00" * 8, "magic")
    bad(b"\x89PNG\r\n\x1a\n" + b"\x00" * 100, "magic")
    p = tmp_path / "empty.qb"
    p.write_bytes(b"")
    with pytest.raises(ValueError):
        qb.load(p)


def test_pickle_and_other_formats_are_rejected():
    import pickle

    bad(pickle.dumps({"a": 1}))
    bad(pickle.dumps(qb.zeros((2,))))
    buf = io.BytesIO()
    np.save(buf, np.zeros(3))
    bad(buf.getvalue())
    bad(MAGIC + struct.pack("<Q", 20) + pickle.dumps(1, protocol=0)[:20])


def test_every_truncation_raises():
    raw = dumps(sample_tree())
    for n in range(len(raw)):
        bad(raw[:n])


def test_header_length_field():
    raw = dumps({"a": f32([1.0, 2.0])})
    header, data = split(raw)
    n = struct.unpack("<Q", raw[8:16])[0]
    for claimed in (0, 1, 8, n + 1, n + len(data), n + len(data) + 1, 2**63, 2**64 - 1):
        bad(MAGIC + struct.pack("<Q", claimed) + raw[16:])


@pytest.mark.parametrize("text", [
    b"", b"   ", b"null", b"[]", b"1", b'"s"', b"{", b"{}",
    b'{"version":1,"data_size":0}',
    b'{"version":1,"data_size":0,"tree":{"type":"none"},"extra":1}',
    b'{"version":2,"data_size":0,"tree":{"type":"none"}}',
    b'{"version":1.0,"data_size":0,"tree":{"type":"none"}}',
    b'{"version":true,"data_size":0,"tree":{"type":"none"}}',
    b'{"version":1,"data_size":-1,"tree":{"type":"none"}}',
    b'{"version":1,"data_size":0,"tree":{"type":"none"},"version":1}',
    b'{"version":1,"data_size":NaN,"tree":{"type":"none"}}',
    b'{"version":1,"data_size":1e400,"tree":{"type":"none"}}',
    b'{"version":1,"data_size":' + b"9" * 5000 + b',"tree":{"type":"none"}}',
    b'{"version":1,"data_size":0,"tree":{"type":"none"}} trailing',
    b'\xef\xbb\xbf{"version":1,"data_size":0,"tree":{"type":"none"}}',
    b'{"version":1,"data_size":0,"tree":{"type":"str","value":"\xff"}}',
    b'{"version":1,"data_size":0,"tree":{"type":"str","value":"\xed\xa0\x80"}}',
    b'{"version":1,"data_size":0,"tree":' + b"[" * 100000 + b"]" * 100000 + b"}",
    b'{"version":1,"data_size":0,"tree":' + b'{"a":' * 100000 + b"1" + b"}" * 100000 + b"}",
    b"[" * 1000000,
    b'"' + b'\\"' * 50000,
    b'{"version":1,"data_size":0,"tree":{"type":"none","type":"none"}}',
], ids=lambda text: f"{text[:24]!r}...{len(text)}")
def test_bad_headers(text):
    bad(MAGIC + struct.pack("<Q", len(text)) + text)


def test_well_formed_minimal_header_loads():
    text = b'{"version":1,"data_size":0,"tree":{"type":"none"}}'
    assert loads(MAGIC + struct.pack("<Q", len(text)) + text) is None
    text = b' { "tree" : {"type":"int","value":"-0x1f"}, "data_size":0, "version":1 } \n'
    assert loads(MAGIC + struct.pack("<Q", len(text)) + text) == -31


def _node_header(node, data_size=0):
    return {"version": 1, "data_size": data_size, "tree": node}


@pytest.mark.parametrize("node", [
    {"type": "nope"}, {}, [], None, 1, "none", {"type": None}, {"type": ["none"]},
    {"type": "none", "value": None},
    {"type": "bool"}, {"type": "bool", "value": 1}, {"type": "bool", "value": "true"},
    {"type": "int", "value": 1}, {"type": "int", "value": "1"}, {"type": "int", "value": "0x"},
    {"type": "int", "value": "0X1"}, {"type": "int", "value": "0xA"},
    {"type": "int", "value": "0x01"}, {"type": "int", "value": "-0x0"},
    {"type": "int", "value": "+0x1"}, {"type": "int", "value": " 0x1"},
    {"type": "int", "value": "0x1_0"}, {"type": "int", "value": "0x1", "extra": 0},
    {"type": "float", "bits": "3ff"}, {"type": "float", "bits": "3FF0000000000000"},
    {"type": "float", "bits": 1.0}, {"type": "float", "value": "3ff0000000000000"},
    {"type": "float", "bits": "3ff0000000000000 "}, {"type": "float", "bits": "0x3ff00000000000"},
    {"type": "str", "value": 1}, {"type": "str"},
    {"type": "list"}, {"type": "list", "items": {}}, {"type": "list", "items": [1]},
    {"type": "tuple", "items": [{"type": "bogus"}]},
    {"type": "dict", "items": [["a", {"type": "none"}]]},
    {"type": "dict", "items": [[{"type": "str", "value": "a"}]]},
    {"type": "dict", "items": [[{"type": "float", "bits": "0" * 16}, {"type": "none"}]]},
    {"type": "dict", "items": [[{"type": "none"}, {"type": "none"}]]},
    {"type": "dict", "items": [[{"type": "str", "value": "a"}, {"type": "none"}],
                               [{"type": "str", "value": "a"}, {"type": "none"}]]},
    {"type": "dict", "items": [[{"type": "int", "value": "0x1"}, {"type": "none"}],
                               [{"type": "int", "value": "0x1"}, {"type": "none"}]]},
    {"type": "dict", "items": [[{"type": "str", "value": "a", "x": 1}, {"type": "none"}]]},
])
def test_bad_nodes(node):
    bad(join(_node_header(node), b""))


def test_distinct_int_and_str_keys_are_not_duplicates():
    node = {"type": "dict", "items": [[{"type": "int", "value": "0x1"}, {"type": "none"}],
                                      [{"type": "str", "value": "1"}, {"type": "none"}]]}
    assert loads(join(_node_header(node), b"")) == {1: None, "1": None}


def _arr(**fields):
    node = {"type": "array", "dtype": "float64", "shape": [2], "offset": 0}
    node.update(fields)
    return {k: v for k, v in node.items() if v is not ...}


@pytest.mark.parametrize("node, data_size", [
    (_arr(dtype="int32"), 16), (_arr(dtype="float16"), 16), (_arr(dtype="bool_"), 16),
    (_arr(dtype="<f8"), 16), (_arr(dtype=None), 16), (_arr(dtype=...), 16),
    (_arr(shape=[0]), 16), (_arr(shape=[2, 0]), 16), (_arr(shape=[-2]), 16),
    (_arr(shape=[2.0]), 16), (_arr(shape=[True, 2]), 16), (_arr(shape="2"), 16),
    (_arr(shape=2), 16), (_arr(shape=[3]), 16), (_arr(shape=[10**12]), 16),
    (_arr(shape=[2**62, 2**62, 2**62]), 16), (_arr(shape=[1] * 65), 16),
    (_arr(shape=[10**12, 0]), 16), (_arr(shape=...), 16),
    (_arr(offset=-8), 16), (_arr(offset=8), 16), (_arr(offset=2**63), 16), (_arr(offset=1.0), 16),
    (_arr(offset="0"), 16), (_arr(offset=...), 16),
    (_arr(weak=1), 16), (_arr(extra=1), 16), (_arr(), 15),
])
def test_bad_array_nodes(node, data_size):
    bad(join(_node_header(node, data_size), b"\x00" * data_size))


def test_overlapping_arrays_rejected():
    a = {"type": "array", "dtype": "float64", "shape": [2], "offset": 0}
    b = {"type": "array", "dtype": "float64", "shape": [1], "offset": 8}
    bad(join(_node_header({"type": "list", "items": [a, b]}, 16), b"\x00" * 16), "overlap")
    bad(join(_node_header({"type": "list", "items": [a, a]}, 16), b"\x00" * 16), "overlap")


def test_arrays_in_any_order_and_unaligned_offsets_load():
    a = {"type": "array", "dtype": "float32", "shape": [1], "offset": 5}
    b = {"type": "array", "dtype": "bool", "shape": [2], "offset": 1}
    data = b"\xaa\x01\x00\xbb\xcc" + np.float32(1.5).tobytes()
    for reader in (loads, lambda raw: qb.load(Stream(raw))):
        out = reader(join(_node_header({"type": "tuple", "items": [a, b]}, len(data)), data))
        assert out[0].numpy().tolist() == [1.5] and out[1].numpy().tolist() == [True, False]


def test_bool_data_must_be_zero_or_one():
    node = {"type": "array", "dtype": "bool", "shape": [3], "offset": 0}
    out = loads(join(_node_header(node, 3), b"\x00\x01\x00"))
    assert out.numpy().tolist() == [False, True, False]
    bad(join(_node_header(node, 3), b"\x00\x02\x00"), "bool")


def test_data_size_mismatch():
    raw = dumps([f64([1.0, 2.0])])
    header, data = split(raw)
    header["data_size"] = len(data) + 8
    bad(join(header, data))                      # claims more than there is
    header["data_size"] = 2**70
    bad(join(header, data))
    header["data_size"] = len(data) - 1          # the array no longer fits
    bad(join(header, data))


def test_json_depth_prescan():
    limit = ckpt.MAX_JSON_DEPTH
    ckpt._check_depth(b"[" * limit + b"]" * limit)
    with pytest.raises(ckpt._Malformed):
        ckpt._check_depth(b"[" * (limit + 1) + b"]" * (limit + 1))
    with pytest.raises(ckpt._Malformed):
        ckpt._check_depth(b"[]" * 10000 + b'{"a":' * (limit + 1))
    # brackets inside strings, also after escaped quotes and backslashes, do not count
    inside = b'"' + b"[{" * 5000 + b'\\\\' + b'\\"' + b"[[[" * 3000 + b'\\\\"'
    for text in (
        b"[" + inside + b"," + inside + b"]",
        b'["\\\\", ' + b"[" * (limit - 1) + b"]" * limit,
        b'["' + b"[" * 20000 + b'", ' + b"[" * (limit - 1) + b"]" * limit,  # spans chunks
    ):
        json.loads(text)                           # valid JSON, nested exactly to the limit
        ckpt._check_depth(text)
    with pytest.raises(ckpt._Malformed):
        ckpt._check_depth(b'["\\\\", ' + b"[" * limit + b"]" * (limit + 1))
    with pytest.raises(ckpt._Malformed):
        ckpt._check_depth(b'["\\"]", ' + b"[" * limit + b"]" * (limit + 1))


def test_tree_depth_limit_on_load():
    node = {"type": "none"}
    for _ in range(ckpt.MAX_TREE_DEPTH + 1):
        node = {"type": "list", "items": [node]}
    bad(join(_node_header(node), b""), "deep")


# -- fuzzing -------------------------------------------------------------------------------------

def _base_trees():
    return [
        sample_tree(),
        {"step": 3, "m": {"w": f32([[1.0, -0.0]])}, "v": {"w": f32([[2.0, float("nan")]])}},
        [None, True, 2**80, -1.5, "x", (), {}, {1: "a", "b": (2,)}],
        bools([[True, False, True]]),
        (f64(1.0), f32([1.0, 2.0, 3.0]), bools([False])),
        {"w": f32(np.linspace(-1, 1, 512).reshape(64, 8)), "b": f64(np.ones(64))},
    ]


_HOSTILE_NODES = [
    {"type": "array", "dtype": "float64", "shape": [10**12], "offset": 0},
    {"type": "array", "dtype": "float32", "shape": [2**40, 2**40], "offset": 0},
    {"type": "array", "dtype": "bool", "shape": [1], "offset": 2**64},
    {"type": "array", "dtype": "int8", "shape": [1], "offset": 0},
    {"type": "array", "dtype": "float64", "shape": [0], "offset": 0},
    {"type": "array", "dtype": "float64", "shape": [-1, -1], "offset": 0},
    {"type": "array", "dtype": "float64", "shape": [1], "offset": -1},
    {"type": "object", "module": "os", "name": "system"},
    {"type": "int", "value": "0x" + "f" * 5000},
    {"type": "str", "value": "\u0000"},
    {"type": "float", "bits": "zzzzzzzzzzzzzzzz"},
    {"type": "dict", "items": [[{"type": "str", "value": "k"}]]},
]


def _mutate_json(rng, raw):
    try:
        header, data = split(raw)
        assert isinstance(header, dict)
    except Exception:                              # already broken by an earlier mutation
        return raw[::-1] if rng.random() < 0.1 else raw[:-1]
    choice = rng.integers(0, 9)
    nodes = []

    def walk(node):
        nodes.append(node)
        if isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(header)
    objs = [n for n in nodes if isinstance(n, dict)]
    target = objs[rng.integers(0, len(objs))]
    keys = list(target)
    if choice == 0 and keys:                      # replace a field with something odd
        key = keys[rng.integers(0, len(keys))]
        odd = [10**12, -1, 2**64, 0, [10**12], [0], [], "float16", None, 1.5, True,
               "0x" + "1" * 40, {"type": "none"}, [[[]]], "ffffffffffffffff"]
        target[key] = odd[rng.integers(0, len(odd))]
    elif choice == 1 and keys:                    # drop a field
        del target[keys[rng.integers(0, len(keys))]]
    elif choice == 2:                             # add an unknown field
        target["unknown"] = 1
    elif choice == 3:                             # splice in a hostile node
        target.clear()
        target.update(_HOSTILE_NODES[rng.integers(0, len(_HOSTILE_NODES))])
    elif choice == 4:                             # deep nesting
        node = {"type": "none"}
        for _ in range(int(rng.integers(100, 400))):
            node = {"type": "list", "items": [node]}
        header["tree"] = node
    elif choice == 5:                             # shapes and offsets
        arrays = [n for n in objs if n.get("type") == "array"]
        if arrays:
            a = arrays[rng.integers(0, len(arrays))]
            a["shape"] = [int(rng.integers(0, 2**31)) for _ in range(rng.integers(0, 4))]
            a["offset"] = int(rng.integers(-10, 2**40))
    elif choice == 6:
        header["data_size"] = int(rng.integers(0, 2**62))
    elif choice == 7:
        header["version"] = int(rng.integers(0, 3))
    else:                                          # raw bracket bomb
        depth = int(rng.integers(500, 5000))
        return MAGIC + struct.pack("<Q", 2 * depth) + b"[" * depth + b"]" * depth + data
    text = json.dumps(header).encode()
    n = len(text)
    if rng.random() < 0.2:
        n = int(rng.integers(0, n + 20))
    return MAGIC + struct.pack("<Q", n) + text + data


def _mutate(rng, raw):
    if len(raw) < 17:                              # a second mutation of a truncated file
        return raw + bytes(rng.integers(0, 256, rng.integers(0, 9), dtype=np.uint8))
    raw = bytearray(raw)
    kind = rng.integers(0, 7)
    if kind == 0:                                  # flip random bits
        for _ in range(rng.integers(1, 9)):
            i = rng.integers(0, len(raw))
            raw[i] ^= 1 << int(rng.integers(0, 8))
    elif kind == 1:                                # random bytes
        for _ in range(rng.integers(1, 5)):
            raw[rng.integers(0, len(raw))] = int(rng.integers(0, 256))
    elif kind == 2:                                # insert bytes
        i = rng.integers(0, len(raw) + 1)
        raw[i:i] = bytes(rng.integers(0, 256, rng.integers(1, 9), dtype=np.uint8))
    elif kind == 3:                                # delete bytes
        i = rng.integers(0, len(raw))
        del raw[i:i + int(rng.integers(1, 9))]
    elif kind == 4:                                # truncate
        del raw[rng.integers(0, len(raw)):]
    elif kind == 5:                                # header length field
        value = [0, 1, 2**63, 2**64 - 1, int(rng.integers(0, 2**63)),
                 struct.unpack("<Q", raw[8:16])[0] + int(rng.integers(-16, 17))][rng.integers(0, 6)]
        raw[8:16] = struct.pack("<Q", max(0, min(value, 2**64 - 1)))
    else:
        return _mutate_json(rng, bytes(raw))
    return bytes(raw)


def _check_loaded(out):
    """A successful load must give a well-formed tree that round-trips exactly."""
    again = loads(dumps(out))
    assert_same(out, again)


def test_fuzz_mutated_checkpoints():
    rng = np.random.default_rng(20240517)
    bases = [dumps(t) for t in _base_trees()]
    loaded = failed = 0
    for i in range(15000):
        raw = bases[i % len(bases)]
        mutated = _mutate(rng, raw)
        if rng.random() < 0.3:                     # and sometimes mutate again
            mutated = _mutate(rng, mutated)
        source = io.BytesIO(mutated) if i % 4 else Stream(mutated)
        try:
            out = qb.load(source)
        except ValueError:
            failed += 1
            continue
        loaded += 1
        _check_loaded(out)
    assert failed > 7500 and loaded > 750, (loaded, failed)


def test_fuzz_via_paths(tmp_path):
    rng = np.random.default_rng(7)
    bases = [dumps(t) for t in _base_trees()]
    p = tmp_path / "fuzz.qb"
    for i in range(300):
        p.write_bytes(_mutate(rng, bases[i % len(bases)]))
        try:
            out = qb.load(p)
        except ValueError:
            continue
        _check_loaded(out)


# -- memory bounds for hostile files -------------------------------------------------------------

def _peak_bytes(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        try:
            fn()
        except ValueError:
            pass
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _hostile_files():
    pad = {"type": "str", "value": "p" * 4000}   # make files a few KB so the bound is meaningful
    huge = {"type": "array", "dtype": "float64", "shape": [10**12], "offset": 0}
    many = {"type": "array", "dtype": "float64", "shape": [2**20], "offset": 0}
    yield join(_node_header({"type": "list", "items": [pad, huge]}, 8 * 10**12), b"\x00" * 64)
    yield join(_node_header({"type": "list", "items": [pad, many]}, 8 * 2**20), b"\x00" * 64)
    yield join(_node_header({"type": "list", "items": [pad] + [many] * 50}, 8 * 2**20),
               b"\x00" * 4096)
    yield join(_node_header({"type": "list", "items": [pad, huge]}, 8 * 10**12), b"",
               header_len=2**63)
    yield MAGIC + struct.pack("<Q", 2**40) + b"{" * 4000
    yield MAGIC + struct.pack("<Q", 8000) + b"[" * 8000
    big_bool = {"type": "array", "dtype": "bool", "shape": [2**31, 2**31], "offset": 0}
    yield join(_node_header({"type": "list", "items": [pad, big_bool]}, 2**62), b"\x01" * 1000)


def test_hostile_files_allocate_little(tmp_path):
    p = tmp_path / "hostile.qb"
    for raw in _hostile_files():
        with pytest.raises(ValueError):
            loads(raw)
        p.write_bytes(raw)
        limit = 8 * len(raw) + 64 * 1024
        for reader in (lambda: qb.load(p), lambda: loads(raw)):
            peak = _peak_bytes(reader)
            assert peak < limit, (peak, len(raw))
        peak = _peak_bytes(lambda: qb.load(Stream(raw)))  # unknown length: chunked reads
        assert peak < 8 * len(raw) + 512 * 1024, (peak, len(raw))


def test_valid_large_file_loads_without_extra_copies(tmp_path):
    arr = np.random.default_rng(3).standard_normal(1 << 20)      # 8 MiB
    p = tmp_path / "big.qb"
    qb.save(p, {"a": qb.array(arr)})
    size = os.path.getsize(p)
    peak = _peak_bytes(lambda: qb.load(p))
    assert peak < 1.25 * size, (peak, size)
