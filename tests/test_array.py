"""Tests for eager arrays: Tensor, the Array ABC, Shape, dtypes and the constructors (spec 000 §3.2)."""

import array as pyarray
import copy
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import quabla as qb
from quabla.core.tracing import TraceFrame, TraceTensor, trace_frame

DTYPES = [qb.float64, qb.float32, qb.bool_]


def sample(dtype, shape=(2, 3)):
    """A Tensor of ``dtype`` with non-trivial values."""
    values = np.arange(np.prod(shape)).reshape(shape)
    return qb.array(values % 2 == 0 if dtype is qb.bool_ else values * 0.5 - 1.0, dtype=dtype)


def assert_tensor(t, expected, dtype):
    """``t`` is a Tensor of ``dtype`` whose data equals ``expected`` exactly (NaNs included)."""
    assert isinstance(t, qb.Tensor)
    assert t.dtype is dtype
    np.testing.assert_array_equal(t.numpy(), np.asarray(expected, dtype=dtype.numpy), strict=True)


# -- dtypes --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, name", [(qb.float32, "float32"), (qb.float64, "float64"),
                                         (qb.bool_, "bool")])
def test_dtype_prints_its_name(dtype, name, capsys):
    print(dtype)
    assert capsys.readouterr().out == name + "\n"
    assert repr(dtype) == name
    assert qb.dtypes.dtype(name) is dtype


@pytest.mark.parametrize("spec, dtype", [
    (np.float32, qb.float32), (np.dtype("float64"), qb.float64), ("bool_", qb.bool_),
    (np.bool_, qb.bool_), (qb.float32, qb.float32), ("float64", qb.float64),
])
def test_dtype_resolution(spec, dtype):
    assert qb.dtypes.dtype(spec) is dtype


@pytest.mark.parametrize("spec", [np.float16, np.int64, "int32", "complex64", "half"])
def test_unsupported_dtype_arguments(spec):
    with pytest.raises(TypeError):
        qb.dtypes.dtype(spec)
    with pytest.raises(TypeError):
        qb.zeros(2, dtype=spec)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtypes_pickle_to_the_singleton(dtype):
    assert pickle.loads(pickle.dumps(dtype)) is dtype


# -- import: the dtype table ----------------------------------------------------------------------

INFERRED = {
    "python float": (1.5, qb.float64),
    "python int": (3, qb.float64),
    "python bool": (True, qb.bool_),
    "float list": ([1.0, 2.0], qb.float64),
    "int list": ([[1, 2], [3, 4]], qb.float64),
    "bool list": ([True, False], qb.bool_),
    "nested bool tuple": (((True,), (False,)), qb.bool_),
    "bool and float list": ([True, 1.5], qb.float64),
    "bool and int list": ([True, 2], qb.float64),
    "float64 ndarray": (np.ones(2), qb.float64),
    "float32 ndarray": (np.ones(2, np.float32), qb.float32),
    "bool ndarray": (np.ones(2, bool), qb.bool_),
    "uint8 ndarray": (np.ones(2, np.uint8), qb.float64),
    "int32 ndarray": (np.ones(2, np.int32), qb.float64),
    "int64 ndarray": (np.ones(2, np.int64), qb.float64),
    "numpy float32 scalar": (np.float32(1.5), qb.float32),
    "numpy float64 scalar": (np.float64(1.5), qb.float64),
    "numpy int64 scalar": (np.int64(7), qb.float64),
    "numpy bool scalar": (np.bool_(True), qb.bool_),
    "0-d ndarray": (np.array(2.0, np.float32), qb.float32),
    "array.array d": (pyarray.array("d", [1.0, 2.0]), qb.float64),
    "array.array f": (pyarray.array("f", [1.0, 2.0]), qb.float32),
    "array.array i": (pyarray.array("i", [1, 2]), qb.float64),
    "memoryview": (memoryview(pyarray.array("d", [1.0, 2.0])), qb.float64),
    "bytearray": (bytearray(b"\x01\x02"), qb.float64),
    "memoryview of bytes": (memoryview(b"\x01\x02"), qb.float64),
    "list of arrays": ([np.ones(2), np.zeros(2)], qb.float64),
    "list of tensors": ([qb.ones(2), qb.zeros(2)], qb.float64),
}


@pytest.mark.parametrize("obj, dtype", INFERRED.values(), ids=INFERRED.keys())
def test_dtype_inference(obj, dtype):
    t = qb.array(obj)
    assert t.dtype is dtype
    assert_tensor(t, np.asarray(obj), dtype)
    assert qb.asarray(obj).dtype is dtype


class HasArray:
    """A foreign object that only speaks ``__array__``."""

    def __init__(self, value):
        self.value = value

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.value, dtype=dtype)


@pytest.mark.parametrize("value", [np.arange(6.0).reshape(2, 3), np.ones(3, np.float32),
                                   np.array([True, False])])
def test_import_from_array_interface(value):
    expected_dtype = {"f": qb.float64 if value.itemsize == 8 else qb.float32, "b": qb.bool_}
    assert_tensor(qb.array(HasArray(value)), value, expected_dtype[value.dtype.kind])


def test_import_strided_and_fortran_buffers():
    base = np.arange(12.0).reshape(3, 4)
    for value in (base[:, ::2], base.T, np.asfortranarray(base), memoryview(base)[::2]):
        t = qb.array(value)
        assert_tensor(t, np.asarray(value), qb.float64)
        assert t.numpy().flags.c_contiguous


def test_import_big_endian_data_keeps_its_values():
    value = np.arange(3.0).astype(">f8")
    assert_tensor(qb.array(value), [0.0, 1.0, 2.0], qb.float64)


REJECTED = {
    "float16 ndarray": (np.ones(2, np.float16), TypeError),
    "float16 scalar": (np.float16(1.0), TypeError),
    "complex": (1j, TypeError),
    "complex ndarray": (np.ones(2, np.complex128), TypeError),
    "complex list": ([1.0, 2j], TypeError),
    "string": ("1.0", TypeError),
    "string list": (["a", "b"], TypeError),
    "bytes": (b"ab", TypeError),
    "None": (None, TypeError),
    "dict": ({"a": 1.0}, TypeError),
    "object": (object(), TypeError),
    "empty list": ([], ValueError),
    "empty nested": ([[]], ValueError),
    "empty ndarray": (np.zeros((2, 0)), ValueError),
    "ragged": ([[1.0, 2.0], [3.0]], ValueError),
    "ragged deep": ([[1.0], [[2.0]]], ValueError),
}


@pytest.mark.parametrize("obj, exc", REJECTED.values(), ids=REJECTED.keys())
def test_rejected_inputs(obj, exc):
    with pytest.raises(exc):
        qb.array(obj)
    with pytest.raises(exc):
        qb.asarray(obj)


def test_explicit_dtype_converts():
    assert_tensor(qb.array([1, 0, 2], dtype=qb.bool_), [True, False, True], qb.bool_)
    assert_tensor(qb.array([True, False], dtype="float32"), [1.0, 0.0], qb.float32)
    assert_tensor(qb.array(np.ones(2), dtype=np.float32), [1.0, 1.0], qb.float32)
    with pytest.raises(TypeError):
        qb.array([1.0], dtype=np.float16)


# -- import always copies ---------------------------------------------------------------------------

def _mutate_ndarray():
    src = np.arange(4.0)
    return src, lambda: src.__setitem__(0, 99.0)


def _mutate_array_array():
    src = pyarray.array("d", [0.0, 1.0, 2.0, 3.0])
    return src, lambda: src.__setitem__(0, 99.0)


def _mutate_memoryview():
    backing = np.arange(4.0)
    return memoryview(backing), lambda: backing.__setitem__(0, 99.0)


def _mutate_list():
    src = [0.0, 1.0, 2.0, 3.0]
    return src, lambda: src.__setitem__(0, 99.0)


def _mutate_array_interface():
    backing = np.arange(4.0)
    return HasArray(backing), lambda: backing.__setitem__(0, 99.0)


@pytest.mark.parametrize("make", [_mutate_ndarray, _mutate_array_array, _mutate_memoryview,
                                  _mutate_list, _mutate_array_interface])
@pytest.mark.parametrize("construct", [qb.array, qb.asarray, qb.Tensor])
def test_import_always_copies(make, construct):
    src, mutate = make()
    t = construct(src)
    mutate()
    assert_tensor(t, [0.0, 1.0, 2.0, 3.0], qb.float64)


# -- export and immutability ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_is_a_read_only_view(dtype):
    t = sample(dtype)
    view = t.numpy()
    assert isinstance(view, np.ndarray) and view.dtype == dtype.numpy
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view[0, 0] = 1
    with pytest.raises(ValueError):
        view.flags.writeable = True
    assert np.shares_memory(view, t.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_asarray_export_is_zero_copy_and_read_only(dtype):
    t = sample(dtype)
    for exported in (np.asarray(t), np.asarray(t, dtype=dtype.numpy), t.__array__(copy=False),
                     np.array(t, copy=False)):
        assert exported.dtype == dtype.numpy
        assert not exported.flags.writeable
        assert np.shares_memory(exported, t.numpy())
        np.testing.assert_array_equal(exported, t.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_export_copies_on_request(dtype):
    t = sample(dtype)
    for exported in (t.__array__(copy=True), np.array(t), np.array(t, copy=True)):
        assert exported.flags.writeable
        assert not np.shares_memory(exported, t.numpy())
        exported[0, 0] = not exported[0, 0]
    np.testing.assert_array_equal(t.numpy(), sample(dtype).numpy())


@pytest.mark.parametrize("dtype, other", [(qb.float64, np.float32), (qb.float32, np.float64),
                                          (qb.bool_, np.float64), (qb.float64, np.int64)])
def test_export_with_another_dtype_copies(dtype, other):
    t = sample(dtype)
    converted = np.asarray(t, dtype=other)
    assert converted.dtype == other
    assert not np.shares_memory(converted, t.numpy())
    np.testing.assert_array_equal(converted, t.numpy().astype(other))
    with pytest.raises(ValueError):
        t.__array__(dtype=other, copy=False)
    with pytest.raises(ValueError):
        np.array(t, dtype=other, copy=False)


def test_tensor_has_no_mutation_api():
    t = qb.arange(3.0)
    with pytest.raises(TypeError):
        t[0] = 1.0
    with pytest.raises(AttributeError):
        t.shape = (3,)
    with pytest.raises(AttributeError):
        t.anything = 1


# -- asarray / array identity ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_asarray_returns_the_same_tensor(dtype):
    t = sample(dtype)
    assert qb.asarray(t) is t
    assert qb.asarray(t, dtype=dtype) is t
    assert qb.asarray(t, dtype=dtype.name) is t


def test_asarray_with_another_dtype_converts():
    t = sample(qb.float64)
    converted = qb.asarray(t, dtype=qb.float32)
    assert converted is not t
    assert_tensor(converted, t.numpy(), qb.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_array_of_a_tensor_is_a_new_object(dtype):
    t = sample(dtype)
    again = qb.array(t)
    assert again is not t and again.dtype is dtype
    np.testing.assert_array_equal(again.numpy(), t.numpy())


def test_tensor_constructor_matches_array():
    assert_tensor(qb.Tensor([[1, 2]]), [[1.0, 2.0]], qb.float64)
    assert_tensor(qb.Tensor(np.ones(2, np.float32)), [1.0, 1.0], qb.float32)
    assert_tensor(qb.Tensor([1.0], dtype=qb.float32), [1.0], qb.float32)


# -- the Array ABC ----------------------------------------------------------------------------------

def test_array_abc():
    assert isinstance(qb.ones(2), qb.Array)
    assert issubclass(qb.Tensor, qb.Array)
    for other in (np.ones(2), 1.0, [1.0], np.float64(1.0)):
        assert not isinstance(other, qb.Array)
    with trace_frame(TraceFrame()) as frame:
        x = frame.new_input((3, 2), qb.float32)
        assert isinstance(x, qb.Array) and isinstance(x, TraceTensor)
        assert not isinstance(x, qb.Tensor)
        assert (x.shape, x.dtype, x.ndim, x.size) == ((3, 2), qb.float32, 2, 6)
        assert qb.asarray(x) is x
        y = qb.sin(x) * 2.0
        assert isinstance(y, qb.Array) and y.dtype is qb.float32 and y.shape == [3, 2]


# -- metadata, conversion to Python ------------------------------------------------------------------

def test_metadata():
    t = qb.zeros((3, 2))
    assert (t.shape, t.ndim, t.size, len(t)) == ((3, 2), 2, 6, 3)
    assert [row.shape for row in t] == [(2,), (2,), (2,)]
    s = qb.array(1.0)
    assert (s.shape, s.ndim, s.size) == ((), 0, 1)
    with pytest.raises(TypeError):
        len(s)
    with pytest.raises(TypeError):
        iter(s)


def test_shape_type(capsys):
    shape = qb.zeros((3, 2)).shape
    print(shape)
    assert capsys.readouterr().out == "[3, 2]\n"
    assert repr(shape) == str(shape) == "[3, 2]"
    assert shape == (3, 2) and shape == [3, 2]
    assert shape != (2, 3) and shape != [3] and not shape != [3, 2]
    assert hash(shape) == hash((3, 2))
    assert {shape: 1}[(3, 2)] == 1
    assert shape[0] == 3 and tuple(shape) == (3, 2)
    assert repr(qb.array(1.0).shape) == "[]"


@pytest.mark.parametrize("value, expected", [
    ([2.5], 2.5), ([[-1.0]], -1.0), (3.0, 3.0), (np.float32(0.5), 0.5), (True, True),
])
def test_item_and_float(value, expected):
    t = qb.array(value)
    item = t.item()
    assert item == expected and type(item) is type(expected)
    assert float(t) == float(expected)
    assert bool(t) is bool(expected)
    assert int(t) == int(expected)


def test_item_and_float_need_one_element():
    t = qb.ones(2)
    for convert in (lambda x: x.item(), float, bool):
        with pytest.raises(ValueError):
            convert(t)


def test_tolist():
    assert qb.array([[1, 2], [3, 4]]).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert qb.array([True, False]).tolist() == [True, False]
    assert qb.array(2.0).tolist() == 2.0
    assert qb.array([0.5], dtype=qb.float32).tolist() == [0.5]


def test_equality_is_identity():
    t = qb.ones(2)
    same = qb.array(t)
    assert (t == t) is True and (t != t) is False
    assert (t == same) is False and (t != same) is True
    assert len({t, same, t}) == 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("clone", [lambda t: pickle.loads(pickle.dumps(t)), copy.copy, copy.deepcopy])
def test_pickle_and_copy(dtype, clone):
    t = sample(dtype)
    back = clone(t)
    assert_tensor(back, t.numpy(), dtype)
    assert not back.numpy().flags.writeable


# -- repr -------------------------------------------------------------------------------------------

REPRS = [
    (qb.sin(qb.array([0.0, 1.0])), "Tensor([0.        , 0.84147098], dtype=float64)"),
    (qb.array(2.12666667), "Tensor(2.12666667, dtype=float64)"),
    (qb.array([[2.0, 1.0], [math.cos(1.0), 0.0]]),
     "Tensor([[2.        , 1.        ],\n        [0.54030231, 0.        ]], dtype=float64)"),
    (qb.array([[6.0, 0.0], [0.0, 12.0]]),
     "Tensor([[ 6.,  0.],\n        [ 0., 12.]], dtype=float64)"),
    (qb.array([1.42614474, 1.90447755, 1.98660201]),
     "Tensor([1.42614474, 1.90447755, 1.98660201], dtype=float64)"),
    (qb.array(9.0), "Tensor(9., dtype=float64)"),
    (qb.array([1.5, 2.0], dtype=qb.float32), "Tensor([1.5, 2. ], dtype=float32)"),
    (qb.array([True, False]), "Tensor([ True, False], dtype=bool)"),
]


@pytest.mark.parametrize("t, text", REPRS, ids=[text for _, text in REPRS])
def test_repr(t, text):
    assert repr(t) == text
    assert str(t) == text


# -- constructors ---------------------------------------------------------------------------------

CONSTRUCTED = {
    "zeros int": (lambda: qb.zeros(3), np.zeros(3)),
    "zeros tuple": (lambda: qb.zeros((2, 3)), np.zeros((2, 3))),
    "zeros list f32": (lambda: qb.zeros([2, 1], dtype=qb.float32), np.zeros((2, 1), np.float32)),
    "zeros scalar": (lambda: qb.zeros(()), np.zeros(())),
    "zeros bool": (lambda: qb.zeros(2, dtype=qb.bool_), np.zeros(2, bool)),
    "ones": (lambda: qb.ones((2, 2)), np.ones((2, 2))),
    "ones f32": (lambda: qb.ones(3, dtype="float32"), np.ones(3, np.float32)),
    "ones shape object": (lambda: qb.ones(qb.zeros((2, 3)).shape), np.ones((2, 3))),
    "full": (lambda: qb.full((2, 2), 3.5), np.full((2, 2), 3.5)),
    "full int value": (lambda: qb.full(3, 2), np.full(3, 2.0)),
    "full bool": (lambda: qb.full(2, True), np.full(2, True)),
    "full f32": (lambda: qb.full(2, 0.1, dtype=qb.float32), np.full(2, 0.1, np.float32)),
    "arange stop": (lambda: qb.arange(5), np.arange(5.0)),
    "arange start stop": (lambda: qb.arange(2, 5), np.arange(2.0, 5.0)),
    "arange step": (lambda: qb.arange(1, 2, 0.25), np.arange(1.0, 2.0, 0.25)),
    "arange negative step": (lambda: qb.arange(3, 0, -1), np.arange(3.0, 0.0, -1.0)),
    "arange f32": (lambda: qb.arange(0, 1, 0.1, dtype=qb.float32),
                   np.arange(0, 1, 0.1).astype(np.float32)),
    "linspace": (lambda: qb.linspace(0, 1, 5), np.linspace(0.0, 1.0, 5)),
    "linspace one": (lambda: qb.linspace(2, 3, 1), np.linspace(2.0, 3.0, 1)),
    "linspace f32": (lambda: qb.linspace(-1, 1, 4, dtype=np.float32),
                     np.linspace(-1, 1, 4).astype(np.float32)),
    "linspace no endpoint": (lambda: qb.linspace(0, 1, 8, endpoint=False),
                             np.linspace(0.0, 1.0, 8, endpoint=False)),
    "linspace default num": (lambda: qb.linspace(-2, 3), np.linspace(-2.0, 3.0)),
    "linspace step": (lambda: qb.linspace(0, 1, 5, False, True)[0] + qb.linspace(
        0, 1, 5, False, True)[1], np.linspace(0.0, 1.0, 5, endpoint=False) + 0.2),
    "eye": (lambda: qb.eye(3), np.eye(3)),
    "eye rect": (lambda: qb.eye(2, 4), np.eye(2, 4)),
    "eye f32": (lambda: qb.eye(2, dtype=qb.float32), np.eye(2, dtype=np.float32)),
}


@pytest.mark.parametrize("make, expected", CONSTRUCTED.values(), ids=CONSTRUCTED.keys())
def test_constructors(make, expected):
    t = make()
    assert_tensor(t, expected, qb.dtypes.dtype(expected.dtype))
    assert not t.numpy().flags.writeable


@pytest.mark.parametrize("make", [
    lambda: qb.zeros(0), lambda: qb.ones((2, 0)), lambda: qb.full(-1, 1.0),
    lambda: qb.arange(0), lambda: qb.arange(3, 1), lambda: qb.linspace(0, 1, 0), lambda: qb.eye(0),
])
def test_constructors_reject_empty_shapes(make):
    with pytest.raises(ValueError):
        make()


# -- property tests ---------------------------------------------------------------------------------

ARRAYS = st.one_of(
    hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)),
    hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)),
    hnp.arrays(np.bool_, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)),
)


@settings(max_examples=60, deadline=None)
@given(ARRAYS)
def test_round_trip_is_bit_exact(value):
    t = qb.array(value)
    assert t.shape == value.shape and t.dtype is qb.dtypes.dtype(value.dtype)
    exported = np.asarray(t)
    assert exported.dtype == value.dtype
    assert exported.tobytes() == np.ascontiguousarray(value).tobytes()  # NaN payloads, -0.0
    assert not np.shares_memory(exported, value)


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=3),
                  elements=st.floats(-1e6, 1e6)))
def test_nested_lists_round_trip(value):
    t = qb.array(value.tolist())
    assert t.tolist() == value.tolist()
    assert_tensor(t, value, qb.float64)


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.int64, hnp.array_shapes(min_dims=0, max_dims=2, max_side=3),
                  elements=st.integers(-2**40, 2**40)))
def test_integers_become_float64(value):
    assert_tensor(qb.array(value), value.astype(np.float64), qb.float64)
    assert_tensor(qb.array(value.tolist()), value.astype(np.float64), qb.float64)


@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (1000, 3), (512,), (64, 32)])
def test_array_data_starts_on_a_cache_line(shape):
    """A Tensor's data of ``ALIGNED_BYTES`` or more starts on a cache line (``quabla.memory``):
    a vectorised loop's loads do not straddle lines in one process and not in the next. Casts
    and copies as before, read-only."""
    from quabla.memory import ALIGNED_BYTES, ALIGNMENT, aligned_empty

    rng = np.random.default_rng(len(shape))
    for source in (rng.normal(size=shape), rng.integers(0, 5, size=shape), rng.normal(size=shape) > 0):
        for dtype in (None, qb.float32):
            t = qb.array(source, dtype) if source.dtype != bool or dtype is None else None
            if t is None:
                continue
            data = t.numpy()
            assert data.ctypes.data % ALIGNMENT == 0 or data.nbytes < ALIGNED_BYTES
            assert data.flags.c_contiguous
            np.testing.assert_array_equal(data, source.astype(data.dtype))
            assert not np.shares_memory(data, source)
            with pytest.raises(ValueError):
                data.flags.writeable = True
    scratch = aligned_empty((3, 4), np.float32)
    assert scratch.ctypes.data % ALIGNMENT == 0 and scratch.flags.writeable
    assert scratch.shape == (3, 4) and scratch.dtype == np.float32


def test_the_collector_is_paused_while_a_program_is_staged_and_compiled():
    """Tracing and compiling a program run with Python's cyclic garbage collector paused
    (``quabla.memory.collection_paused``), which resumes after, also after an error; paused
    in two threads at once, it resumes when the last one leaves; a collector the user turned
    off stays off."""
    import gc
    import threading

    from quabla.memory import collection_paused

    was = gc.isenabled()
    gc.enable()
    try:
        seen = []

        def f(x):
            seen.append(gc.isenabled())
            return x * 2.0

        qb.jit(f)(qb.array([1.0, 2.0]))
        assert seen == [False] and gc.isenabled()

        def bad(x):
            raise ValueError("not this one")

        with pytest.raises(ValueError):
            qb.jit(bad)(qb.array([1.0]))
        assert gc.isenabled()
        inside, release = threading.Event(), threading.Event()

        def hold():
            with collection_paused():
                inside.set()
                release.wait()

        thread = threading.Thread(target=hold)
        thread.start()
        inside.wait()
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the other thread is still inside
        release.set()
        thread.join()
        assert gc.isenabled()
        gc.disable()
        with collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
