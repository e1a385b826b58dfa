"""Argument handling of transformed functions (issue 12, items 3, 10 and 11): which leaves are
arrays, which are static and which are errors; static_argnums/static_argnames and max_traces
validated when the function is transformed; the weak flag as part of the signature; one trace
and compile per signature however many threads miss it at once."""

import array
import collections
import enum
import threading
import time

import numpy as np
import pytest

import quabla as qb
from quabla.staging.jit import Jit
from quabla.staging.staged import Staged

from helpers import assert_close


class Config:
    """An ordinary object: hashable by identity, no array protocol."""

    def __init__(self, scale):
        self.scale = scale


class Box:
    """Array-like through ``__array__``; its contents change between calls."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.float64)

    def __array__(self, dtype=None, copy=None):
        return self.values if dtype is None else self.values.astype(dtype)


class Counted:
    """A function that counts its traces."""

    def __init__(self, fun):
        self.fun = fun
        self.traces = 0

    def __call__(self, *args):
        self.traces += 1
        return self.fun(*args)


# -- item 3: non-array leaves ---------------------------------------------------------------------

def test_an_ordinary_object_argument_is_a_type_error_not_a_stale_constant():
    f = qb.jit(lambda x, c: x * c.scale)
    with pytest.raises(TypeError, match=r"argument 1 .*Config.*static_argnums"):
        f(qb.ones(2), Config(2.0))


@pytest.mark.parametrize("transform", [
    lambda g: qb.jit(g),
    lambda g: qb.grad(g),
    lambda g: qb.vmap(g),
    lambda g: qb.jacobian(g),
])
def test_object_leaves_are_rejected_with_their_path_by_every_transform(transform):
    g = transform(lambda x, p: qb.sum(x * p["w"] * p["c"].scale))
    with pytest.raises(TypeError, match=r"argument 1\['c'\].*Config.*pytree"):
        g(qb.ones(2), {"w": qb.ones(2), "c": Config(3.0)})


def test_the_error_names_the_users_position_and_path():
    Pair = collections.namedtuple("Pair", "a b")
    f = qb.jit(lambda n, x, p: x * n * p.b, static_argnums=0)
    with pytest.raises(TypeError, match=r"argument 2\['b'\] of type Config"):
        f(3, qb.ones(2), Pair(qb.ones(2), Config(1.0)))
    with pytest.raises(TypeError, match=r"argument 1 of type Config"):
        qb.jit(lambda x, c: x * c.scale).lower(qb.ones(2), Config(1.0))
    with pytest.raises(TypeError, match=r"argument 0 of type Config"):
        qb.vjp(lambda c, x: x * c.scale, Config(1.0), qb.ones(2))


def test_strings_and_callables_are_not_silently_static():
    with pytest.raises(TypeError, match="str"):
        qb.jit(lambda x, mode: x * 2.0)(qb.ones(2), "double")
    with pytest.raises(TypeError, match="function"):
        qb.grad(lambda x, act: qb.sum(act(x)))(qb.ones(2), qb.sin)


def test_static_objects_are_keyed_by_value():
    class Scale:
        def __init__(self, v):
            self.v = v

        def __hash__(self):
            return hash(self.v)

        def __eq__(self, other):
            return isinstance(other, Scale) and other.v == self.v

    counted = Counted(lambda x, c: x * c.v)
    f = qb.jit(counted, static_argnums=1)
    assert_close(f(qb.ones(2), Scale(2.0)), [2.0, 2.0])
    assert_close(f(qb.ones(2), Scale(2.0)), [2.0, 2.0])
    assert counted.traces == 1
    assert_close(f(qb.ones(2), Scale(5.0)), [5.0, 5.0])
    g = qb.jit(lambda x, c: x * c.scale, static_argnames="c")
    assert_close(g(qb.ones(2), c=Config(3.0)), [3.0, 3.0])


def test_array_like_arguments_are_traced_inputs_not_baked_constants():
    counted = Counted(lambda x, b: x * b)
    f = qb.jit(counted)
    box = Box([1.0, 2.0])
    assert_close(f(qb.ones(2), box), [1.0, 2.0])
    box.values = np.array([10.0, 20.0])
    assert_close(f(qb.ones(2), box), [10.0, 20.0])
    assert_close(f(qb.ones(2), Box([3.0, 4.0])), [3.0, 4.0])
    assert counted.traces == 1
    # the buffer protocol too, a new buffer with new contents each call
    assert_close(f(qb.ones(2), array.array("d", [5.0, 6.0])), [5.0, 6.0])
    assert_close(f(qb.ones(2), memoryview(array.array("d", [7.0, 8.0]))), [7.0, 8.0])
    assert counted.traces == 1


def test_array_like_arguments_are_differentiated_and_mapped():
    box = Box([1.0, 2.0, 3.0])
    assert_close(qb.grad(lambda b: qb.sum(b * b))(box), [2.0, 4.0, 6.0])
    assert_close(qb.vmap(lambda b: b * 2.0)(box), [2.0, 4.0, 6.0])
    out, tangent = qb.jvp(lambda b: b * b, (box,), (qb.ones(3),))
    assert_close(tangent, [2.0, 4.0, 6.0])
    assert_close(qb.jacobian(lambda b: b * 3.0)(array.array("d", [1.0, 2.0])), 3.0 * np.eye(2))


def test_python_scalar_subclasses_are_static_too():
    class Mode(enum.IntEnum):
        SQUARE = 2
        CUBE = 3

    counted = Counted(lambda x, m: x ** int(m))
    f = qb.jit(counted)
    assert_close(f(qb.array([2.0]), Mode.CUBE), [8.0])
    assert_close(f(qb.array([2.0]), Mode.SQUARE), [4.0])
    assert_close(f(qb.array([2.0]), Mode.CUBE), [8.0])
    assert counted.traces == 2


def test_python_scalars_stay_static_weak_constants():
    counted = Counted(lambda x, s: x * s)
    f = qb.jit(counted)
    y = f(qb.ones(2, dtype=qb.float32), 0.5)
    assert y.dtype is qb.float32
    assert_close(f(qb.ones(2, dtype=qb.float32), 0.25), [0.25, 0.25])
    assert counted.traces == 2


# -- item 10: static_argnums, static_argnames, max_traces --------------------------------------

def test_static_argnums_naming_no_parameter_is_a_value_error():
    with pytest.raises(ValueError, match="static_argnums"):
        qb.jit(lambda x: x, static_argnums=3)
    with pytest.raises(ValueError, match="static_argnums"):
        qb.jit(lambda x, y: x, static_argnums=(0, -3))
    with pytest.raises(ValueError, match="static_argnames.*nope"):
        qb.jit(lambda x: x, static_argnames="nope")


@pytest.mark.parametrize("kwargs", [
    {"static_argnums": "1"}, {"static_argnums": (0, "1")}, {"static_argnums": 1.0},
    {"static_argnames": 3}, {"static_argnames": ("x", 3)},
])
def test_static_arguments_of_the_wrong_type_are_type_errors(kwargs):
    with pytest.raises(TypeError, match="static_argnames|static_argnums"):
        qb.jit(lambda x, y: x, **kwargs)


def test_valid_static_arguments_are_accepted():
    f = qb.jit(lambda x, n: x ** n, static_argnums=-1)
    assert_close(f(qb.array([2.0]), 3), [8.0])
    assert_close(f(qb.array([2.0]), n=2), [4.0])
    # *args and **kwargs accept any position and name; an uninspectable callable is not checked
    qb.jit(lambda *xs: xs[0], static_argnums=5)
    qb.jit(lambda x, **kw: x, static_argnames=["anything"])
    qb.jit(max, static_argnums=4, static_argnames="key")


@pytest.mark.parametrize("bad", [0, -1, 2.5, "3", True, None])
def test_max_traces_must_be_a_positive_int(bad):
    error = ValueError if isinstance(bad, int) and not isinstance(bad, bool) else TypeError
    with pytest.raises(error, match="max_traces"):
        qb.jit(lambda x: x, max_traces=bad)
    with pytest.raises(error, match="max_traces"):
        Staged(lambda x: x, Jit(), max_traces=bad)


# -- item 10: the weak flag is part of the signature -------------------------------------------

def test_weak_array_arguments_keep_their_weak_type_under_jit():
    weak = qb.add(2.0, 3.0)
    assert weak.weak and weak.dtype is qb.float64
    y32 = qb.ones(2, dtype=qb.float32)
    eager = weak + y32
    assert eager.dtype is qb.float32
    f = qb.jit(lambda a, b: a + b)
    out = f(weak, y32)
    assert out.dtype is qb.float32
    assert_close(out, [6.0, 6.0])
    # a strong float64 array is another signature, and mixing it with float32 is an error
    with pytest.raises(TypeError, match="mixed dtypes"):
        f(qb.array(5.0), y32)
    assert f(weak, y32).dtype is qb.float32


def test_weak_and_strong_signatures_are_told_apart_in_warnings():
    f = qb.jit(lambda a: a * 2.0, max_traces=1)
    f(qb.add(2.0, 3.0))
    evicted_weak_then_strong = r"(?s)weak float64\[\].*new signature:\n  \(float64\[\],\)"
    with pytest.warns(qb.RetraceWarning, match=evicted_weak_then_strong):
        f(qb.array(5.0))


def test_weak_array_arguments_under_grad_and_vmap():
    weak = qb.add(2.0, 3.0)
    y32 = qb.array([1.0, 2.0], dtype=qb.float32)
    g = qb.grad(lambda a, b: qb.sum(a * b), argnums=(0, 1))(weak, y32)
    assert_close(g[0], 3.0)
    assert g[1].dtype is qb.float32
    assert_close(g[1], [5.0, 5.0])
    weak3 = qb.broadcast_to(weak, (3,))
    assert weak3.weak
    out = qb.vmap(lambda a, b: a * b)(weak3, qb.ones(3, dtype=qb.float32))
    assert out.dtype is qb.float32
    assert_close(out, [5.0, 5.0, 5.0])


# -- item 11: one trace and compile per signature under threads ----------------------------------

class Crowd:
    """``n`` threads released at once behind a barrier; ``gathered()``, called in a trace,
    returns once every thread is about to call (so the others meet the first one's trace in
    flight) and a little longer."""

    def __init__(self, n=8):
        self.n = n
        self.arrived = 0
        self.lock = threading.Lock()

    def call_all(self, fun, args_of):
        """``fun(*args_of(i))`` in thread ``i``: the results and the exceptions."""
        barrier = threading.Barrier(self.n)
        results, errors = [None] * self.n, [None] * self.n

        def work(i):
            args = args_of(i)
            barrier.wait()
            with self.lock:
                self.arrived += 1
            try:
                results[i] = fun(*args)
            except Exception as exc:  # noqa: BLE001 - collected for the assertions
                errors[i] = exc.with_traceback(None)  # no cycle through this frame

        threads = [threading.Thread(target=work, args=(i,)) for i in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results, errors

    def gathered(self):
        deadline = time.monotonic() + 10.0
        while self.arrived < self.n and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)


def test_threads_missing_one_signature_trace_and_compile_it_once():
    crowd = Crowd()
    counted = Counted(lambda x: crowd.gathered() or x * x + 1.0)
    f = qb.jit(counted)
    results, errors = crowd.call_all(f, lambda i: (qb.array([float(i), 2.0]),))
    assert errors == [None] * 8
    for i, r in enumerate(results):
        assert_close(r, [i * i + 1.0, 5.0])
    assert counted.traces == 1


def test_threads_with_different_signatures_compile_independently():
    crowd = Crowd()
    counted = Counted(lambda x: crowd.gathered() or x * x + 1.0)
    f = qb.jit(counted)
    results, errors = crowd.call_all(f, lambda i: (qb.ones(1 + i % 4),))
    assert errors == [None] * 8
    for i, r in enumerate(results):
        assert_close(r, np.full(1 + i % 4, 2.0))
    assert counted.traces == 4


def test_a_failing_trace_reaches_every_waiter_and_is_retried_later():
    crowd = Crowd()
    state = {"fail": True}

    def fragile(x):
        crowd.gathered()
        if state["fail"]:
            raise ValueError("not today")
        return x * x + 1.0

    counted = Counted(fragile)
    f = qb.jit(counted)
    results, errors = crowd.call_all(f, lambda i: (qb.ones(2),))
    assert all(isinstance(e, ValueError) and "not today" in str(e) for e in errors)
    assert counted.traces == 1
    state["fail"] = False
    assert_close(f(qb.ones(2)), [2.0, 2.0])
    assert counted.traces == 2
