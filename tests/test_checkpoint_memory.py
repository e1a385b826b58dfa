"""Checkpoint save/load use memory proportional to the file, and errors quote a bounded
amount of it (issue 12, item 9)."""

import io
import json
import struct
import tracemalloc

import pytest

import quabla as qb

MAGIC = b"QUABLA\x00\x01"
DEPTH = 127          # MAX_TREE_DEPTH is 128
KEY_LEN = 100_000    # the reproducer's shape: a 12.7 MB file
MAX_MESSAGE = 4096
OUTER = chr(ord("a") + (DEPTH - 1) % 26) * 4  # the start of the outermost key


def deep_tree(depth=DEPTH, key_len=KEY_LEN, leaf=None):
    tree = qb.ones(2) if leaf is None else leaf
    for i in range(depth):
        tree = {chr(ord("a") + i % 26) * key_len: tree}
    return tree


@pytest.fixture(scope="module")
def deep_file():
    buf = io.BytesIO()
    qb.save(buf, deep_tree())
    return buf.getvalue()


def peak_bytes(fn):
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak, result


def test_load_of_long_deep_keys_uses_memory_proportional_to_the_file(deep_file):
    size = len(deep_file)
    assert size > DEPTH * KEY_LEN
    peak, tree = peak_bytes(lambda: qb.load(io.BytesIO(deep_file)))
    assert peak < 6 * size, (peak, size)
    for i in range(DEPTH - 1, -1, -1):
        (key,) = tree
        assert key == chr(ord("a") + i % 26) * KEY_LEN
        tree = tree[key]
    assert tree.numpy().tolist() == [1.0, 1.0]


def test_save_of_long_deep_keys_uses_memory_proportional_to_the_file():
    tree = deep_tree()
    buf = io.BytesIO()
    peak, _ = peak_bytes(lambda: qb.save(buf, tree))
    assert peak < 6 * len(buf.getvalue())


def split(raw):
    (n,) = struct.unpack("<Q", raw[8:16])
    return json.loads(raw[16:16 + n]), raw[16 + n:]


def join(header, data):
    text = json.dumps(header).encode()
    return MAGIC + struct.pack("<Q", len(text)) + text + data


def innermost(header):
    node = header["tree"]
    while node["type"] == "dict":
        node = node["items"][0][1]
    return node


def load_error(raw):
    with pytest.raises(ValueError) as info:
        qb.load(io.BytesIO(raw))
    return str(info.value)


@pytest.mark.parametrize("corrupt", [
    lambda leaf: leaf.update(dtype="float65"),
    lambda leaf: leaf.update(dtype="x" * 500_000),
    lambda leaf: leaf.update(type="y" * 500_000),
    lambda leaf: leaf.update({"z" * 500_000: 1}),
    lambda leaf: leaf.update(offset=10**30),
], ids=["dtype", "long-dtype", "long-type", "long-field", "offset"])
def test_errors_deep_in_the_tree_quote_a_bounded_path(deep_file, corrupt):
    header, data = split(deep_file)
    corrupt(innermost(header))
    message = load_error(join(header, data))
    assert message.startswith(f"malformed Quabla checkpoint: tree['{OUTER}")
    assert "...]...['" in message and "['aaaa" in message  # cut keys, elided middle, last key
    assert len(message) < MAX_MESSAGE, len(message)


def test_errors_in_keys_and_duplicates_are_bounded(deep_file):
    header, data = split(deep_file)
    node = header["tree"]
    for _ in range(60):
        node = node["items"][0][1]
    pair = node["items"][0]
    node["items"].append([dict(pair[0]), pair[1]])  # a repeated 100,000-character key
    message = load_error(join(header, data))
    assert "repeats the key" in message and len(message) < MAX_MESSAGE

    header, data = split(deep_file)
    header["tree"]["items"][0][0]["type"] = "q" * 300_000
    message = load_error(join(header, data))
    assert "key 0" in message and len(message) < MAX_MESSAGE


def test_short_paths_are_quoted_in_full():
    header, data = split(_dumps({"opt": [{"m": qb.ones(1)}]}))
    header["tree"]["items"][0][1]["items"][0]["items"][0][1]["dtype"] = "int8"
    message = load_error(join(header, data))
    assert "tree['opt'][0]['m']: unknown dtype 'int8'" in message


def _dumps(tree):
    buf = io.BytesIO()
    qb.save(buf, tree)
    return buf.getvalue()


def test_save_errors_deep_in_the_tree_are_bounded():
    with pytest.raises(TypeError) as info:
        qb.save(io.BytesIO(), deep_tree(leaf=object()))
    message = str(info.value)
    assert message.startswith(f"cannot save tree['{OUTER}")
    assert "object" in message and len(message) < MAX_MESSAGE

    with pytest.raises(TypeError) as info:
        qb.save(io.BytesIO(), deep_tree(depth=40, leaf={("k" * 200_000,): 1.0}))
    message = str(info.value)
    assert "dict key" in message and len(message) < MAX_MESSAGE

    with pytest.raises(TypeError, match=r"cannot save tree\['a'\]\[1\]\['b'\]"):
        qb.save(io.BytesIO(), {"a": [1, {"b": {1, 2}}]})
