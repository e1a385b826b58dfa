"""Tests for the error classes (spec 000 §3.12, spec 003 §3.10) and where eager code raises them."""

import pickle
import warnings

import numpy as np
import pytest

import quabla as qb
from quabla.core.tracing import TraceFrame, trace_frame

HIERARCHY = [
    ("QuablaError", (Exception,)),
    ("TracerError", (qb.QuablaError, TypeError)),
    ("UnsupportedOperationError", (qb.QuablaError, ValueError, NotImplementedError)),
    ("RetraceLimitError", (qb.QuablaError, ValueError)),
    ("RetraceWarning", (UserWarning,)),
]


@pytest.mark.parametrize("name, bases", HIERARCHY)
def test_hierarchy(name, bases):
    cls = getattr(qb, name)
    assert cls is getattr(qb.errors, name)
    assert cls.__bases__ == bases
    for base in bases:
        assert issubclass(cls, base)


@pytest.mark.parametrize("name", ["TracerError", "UnsupportedOperationError", "RetraceLimitError"])
def test_errors_are_caught_by_quabla_error(name):
    with pytest.raises(qb.QuablaError):
        raise getattr(qb, name)("boom")


def test_retrace_warning_is_not_an_error():
    assert not issubclass(qb.RetraceWarning, qb.QuablaError)
    with pytest.warns(qb.RetraceWarning, match="evicted"):
        warnings.warn("trace evicted", qb.RetraceWarning)


@pytest.mark.parametrize("name", [n for n, _ in HIERARCHY])
def test_error_names_are_exported(name):
    assert name in qb.errors.__all__
    if hasattr(qb, "__all__"):
        assert name in qb.__all__


def test_unsupported_operation_attributes():
    err = qb.UnsupportedOperationError(op="cholesky", device="mlx")
    assert (err.op, err.device) == ("cholesky", "mlx")
    assert "cholesky" in str(err) and "mlx" in str(err)
    err = qb.UnsupportedOperationError("custom text", op="scan")
    assert (str(err), err.op, err.device) == ("custom text", "scan", None)
    assert qb.UnsupportedOperationError().op is None


@pytest.mark.parametrize("handler", [ValueError, NotImplementedError, qb.QuablaError])
def test_unsupported_operation_caught_by_builtin_handlers(handler):
    with pytest.raises(handler) as info:
        raise qb.UnsupportedOperationError(op="solve", device="cuda")
    assert info.value.op == "solve"


def test_errors_pickle_with_their_attributes():
    err = pickle.loads(pickle.dumps(qb.UnsupportedOperationError("nope", op="pow", device="mlx")))
    assert type(err) is qb.UnsupportedOperationError
    assert (str(err), err.op, err.device) == ("nope", "pow", "mlx")
    err = pickle.loads(pickle.dumps(qb.TracerError("traced")))
    assert type(err) is qb.TracerError and str(err) == "traced"


# -- TracerError from tracers, without compiling anything ---------------------------------------

@pytest.fixture
def tracer():
    with trace_frame(TraceFrame()) as frame:
        yield frame.new_input((2,), qb.float64)


CONCRETE_USES = {
    "bool": bool,
    "if": lambda x: 1 if x > 0 else 0,
    "float": float,
    "int": int,
    "item": lambda x: x.item(),
    "tolist": lambda x: x.tolist(),
    "numpy": lambda x: x.numpy(),
    "np.asarray": np.asarray,
    "qb.Tensor": qb.Tensor,
    "Tensor of a list of tracers": lambda x: qb.Tensor([x, x]),
    "index": lambda x: [1.0, 2.0][x],  # a Python list needs an int (arrays take x[i])
}


@pytest.mark.parametrize("use", CONCRETE_USES.values(), ids=CONCRETE_USES.keys())
def test_concrete_use_of_a_tracer_raises_tracer_error(tracer, use):
    with pytest.raises(qb.TracerError):
        use(tracer)


def test_qb_array_of_tracers_is_traced(tracer):
    """qb.array (unlike a Tensor) stacks tracers (issue 24): a traced array, no error."""
    assert qb.array(tracer) is tracer
    stacked = qb.array([tracer, tracer])
    assert isinstance(stacked, qb.TraceTensor) and stacked.shape == (2, 2)


def test_control_flow_message(tracer):
    with pytest.raises(TypeError, match="cannot drive Python control flow; use quabla.where"):
        bool(tracer)


# -- plain errors of eager code: the builtin classes the spec promises -------------------------

EAGER_ERRORS = {
    "mixed dtypes": (lambda: qb.ones(2, qb.float32) + qb.ones(2), TypeError),
    "bool math": (lambda: qb.sin(qb.array([True])), TypeError),
    "float16": (lambda: qb.array(np.ones(2, np.float16)), TypeError),
    "empty": (lambda: qb.array([]), ValueError),
    "ragged": (lambda: qb.array([[1.0], [1.0, 2.0]]), ValueError),
    "broadcast": (lambda: qb.ones(2) + qb.ones(3), ValueError),
    "matmul": (lambda: qb.ones((2, 3)) @ qb.ones((2, 3)), ValueError),
    "index": (lambda: qb.ones(2)[2], IndexError),
    "copy=False": (lambda: qb.ones(2).__array__(dtype=np.float32, copy=False), ValueError),
}


@pytest.mark.parametrize("call, exc", EAGER_ERRORS.values(), ids=EAGER_ERRORS.keys())
def test_eager_errors_use_builtin_classes(call, exc):
    with pytest.raises(exc):
        call()
