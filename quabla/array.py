"""Eager arrays: ``Tensor``, the ``Array`` ABC, ``Shape`` and the array constructors (spec 000 §3.2).

A Tensor wraps a read-only, C-contiguous NumPy array. Import always copies, so a Tensor never
aliases foreign memory; export of a matching dtype is a zero-copy, read-only view, so a Tensor
never changes under its user.
"""

import abc
import numbers
import operator

import numpy as np

from . import dtypes as _dt
from .memory import aligned_copy

__all__ = [
    "Array", "Tensor", "Shape",
    "array", "asarray", "zeros", "ones", "full", "arange", "linspace", "eye",
]


class Array(abc.ABC):
    """Anything Quabla treats as an array: ``Tensor`` and ``TraceTensor`` are registered."""


class Shape(tuple):
    """A static shape: a tuple that prints as ``[3, 2]`` and compares equal to lists too."""

    __slots__ = ()

    def __repr__(self):
        return "[" + ", ".join(str(d) for d in self) + "]"

    __str__ = __repr__

    def __eq__(self, other):
        if isinstance(other, list):
            other = tuple(other)
        return tuple.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = tuple.__hash__


def _freeze(value):
    value.flags.writeable = False
    return value


class Tensor:
    """An immutable host array of float32, float64 or bool_: ``value``, a read-only ndarray
    (``np.asarray`` of the Tensor is a view of it). ``weak`` is true for values born
    of Python scalars only: they adopt the dtype of what they meet (JAX's weak type)."""

    __slots__ = ("value", "weak", "__weakref__")

    def __init__(self, obj, dtype=None):
        if isinstance(obj, (Array, list, tuple)) and not isinstance(obj, Tensor):
            _reject_tracers_in([obj])  # a Tensor is concrete: qb.array stacks tracers
        source = array(obj, dtype)
        self.value = source.value
        self.weak = False

    @classmethod
    def wrap(cls, value, weak=False):
        """Adopt ``value`` (a NumPy array of a Quabla dtype that nobody else writes)."""
        t = object.__new__(cls)
        value.setflags(False)
        t.value = value
        t.weak = weak
        return t

    # -- metadata ---------------------------------------------------------------------------
    @property
    def shape(self):
        return Shape(self.value.shape)

    @property
    def dtype(self):
        return _dt.BY_NUMPY[self.value.dtype]

    @property
    def ndim(self):
        return self.value.ndim

    @property
    def size(self):
        return self.value.size

    def __len__(self):
        if self.value.ndim == 0:
            raise TypeError("len() of a 0-d Tensor")
        return self.value.shape[0]

    def __iter__(self):
        if self.value.ndim == 0:
            raise TypeError("iteration over a 0-d Tensor")
        return (self[i] for i in range(self.value.shape[0]))

    # -- export -----------------------------------------------------------------------------
    def numpy(self):
        """A read-only NumPy view of the data (zero-copy)."""
        return self.value.view()

    def tolist(self):
        return self.value.tolist()

    def item(self):
        if self.value.size != 1:
            raise ValueError(f"item() needs a Tensor with one element, got shape {self.shape}")
        return self.value.item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self.value.size != 1:
            raise ValueError(
                "the truth value of a Tensor with more than one element is ambiguous; "
                "use quabla.any or quabla.all"
            )
        return bool(self.value.item())

    def __array__(self, dtype=None, copy=None):
        value = self.value
        if dtype is not None and np.dtype(dtype) != value.dtype:
            if copy is False:
                raise ValueError(
                    f"cannot export a {self.dtype} Tensor as {np.dtype(dtype)} without a copy"
                )
            return value.astype(dtype)
        if copy:
            return value.copy()
        return value.view()

    def __repr__(self):
        body = np.array2string(self.value, separator=", ", prefix="Tensor(")
        return f"Tensor({body}, dtype={self.dtype})"

    # Tensors are immutable, so a copy is the Tensor itself (weak flag included).
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (_unpickle, (self.value.copy(), self.weak))


Array.register(Tensor)


def adopt(value):
    """A Tensor of ``value``, a freshly computed result array that nobody else holds: the
    output half of every hot path (``Tensor._wrap`` without its options)."""
    t = _new_tensor(Tensor)
    value.setflags(False)  # positional: a third of the cost of the keyword (or of flags.writeable)
    t.value = value
    t.weak = False
    return t


_new_tensor = object.__new__


def _unpickle(value, weak):
    """Rebuild a pickled Tensor, checked like any import, with its weak flag."""
    t = array(value)
    t.weak = weak
    return t


# -- construction -----------------------------------------------------------------------------

def _import(obj):
    """``obj`` as a NumPy array, which may still alias ``obj`` (``_finish`` copies)."""
    if isinstance(obj, Array):  # a tracer; array() handles Tensors itself
        from .errors import TracerError

        raise TracerError("a TraceTensor has no concrete value; pass it through quabla ops")
    if isinstance(obj, bool):
        return np.array(obj, dtype=np.bool_)
    if isinstance(obj, numbers.Integral) and not isinstance(obj, np.generic):
        return np.array(float(obj))
    if isinstance(obj, (list, tuple)):
        _reject_tracers_in(obj)
    try:
        value = np.asarray(obj)
    except ValueError as exc:
        raise ValueError(f"cannot build an array from ragged or irregular data: {exc}") from None
    if value.dtype.kind == "O":
        raise TypeError(f"cannot convert an object of type {type(obj).__name__} to a Quabla array")
    return value


def _reject_tracers_in(seq):
    for item in seq:
        if isinstance(item, Array) and not isinstance(item, Tensor):
            from .errors import TracerError

            raise TracerError(
                "a TraceTensor cannot be turned into a concrete array; use quabla.stack"
            )
        if isinstance(item, (list, tuple)):
            _reject_tracers_in(item)


def _finish(value, dtype):
    """A C-contiguous copy of ``value`` in its Quabla dtype (the §3.2 table).

    Copied unconditionally: a foreign ``__array__`` may ignore ``copy=True`` and hand back its
    own buffer, which must be neither aliased nor frozen.
    """
    target = _dt.result_dtype_of_numpy(value.dtype) if dtype is None else _dt.dtype(dtype)
    if value.size == 0:
        raise ValueError(f"zero-extent arrays are not supported (shape {list(value.shape)})")
    return aligned_copy(value, target.numpy)  # a cache line: vectorised loads stay in one


def array(obj, dtype=None):
    """A new Tensor from concrete data ``obj``; NumPy data is always copied. (``qb.array``,
    ``quabla.indexing.array``, also stacks traced arrays under a transform.)"""
    if isinstance(obj, Tensor):
        value = obj.value
        if dtype is not None and _dt.dtype(dtype) is not obj.dtype:
            value = value.astype(_dt.dtype(dtype).numpy)
        return Tensor.wrap(value)
    return Tensor.wrap(_finish(_import(obj), dtype))


def asarray(obj, dtype=None):
    """``obj`` itself if it is already a Tensor of ``dtype`` (or any dtype when None), else a copy."""
    if isinstance(obj, Tensor) and (dtype is None or _dt.dtype(dtype) is obj.dtype):
        return obj
    if isinstance(obj, Array) and not isinstance(obj, Tensor):
        if dtype is not None and _dt.dtype(dtype) is not obj.dtype:
            return obj.astype(dtype)
        return obj
    return array(obj, dtype)


# -- shapes and indices: the one place where sizes, shape entries and indices are read -------

def as_index(value):
    """``value`` as a Python int, for a size, a shape entry or an index.

    Anything with ``__index__`` (ints, NumPy integers) is accepted, as in NumPy; floats,
    strings and bools raise TypeError rather than being truncated or read as numbers (a
    tracer's ``__index__`` raises TracerError).
    """
    if isinstance(value, (bool, np.bool_)) or not hasattr(type(value), "__index__"):
        raise TypeError(f"'{type(value).__name__}' object cannot be interpreted as an integer")
    return operator.index(value)


def as_shape(shape):
    """A shape argument, an integer or an iterable of integers, as a tuple of Python ints."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__") or (
        getattr(shape, "ndim", None) == 0
    ):
        return (as_index(shape),)
    return tuple(as_index(d) for d in shape)


def array_shape(shape):
    """``as_shape(shape)`` for a new array, whose dimensions must be positive."""
    shape = as_shape(shape)
    if any(d <= 0 for d in shape):
        raise ValueError(f"array dimensions must be positive, got {list(shape)}")
    return shape


def _float_dtype(dtype):
    return _dt.float64 if dtype is None else _dt.dtype(dtype)


def zeros(shape, dtype=None):
    """An array of zeros (float64 unless ``dtype`` says otherwise), as ``numpy.zeros``."""
    return Tensor.wrap(np.zeros(array_shape(shape), _float_dtype(dtype).numpy))


def ones(shape, dtype=None):
    """An array of ones (float64 unless ``dtype`` says otherwise), as ``numpy.ones``."""
    return Tensor.wrap(np.ones(array_shape(shape), _float_dtype(dtype).numpy))


def full(shape, value, dtype=None):
    """An array filled with ``value`` (bool for a bool value, else float64 unless ``dtype``)."""
    if dtype is None:
        dtype = _dt.bool_ if isinstance(value, (bool, np.bool_)) else _dt.float64
    return Tensor.wrap(np.full(array_shape(shape), value, _dt.dtype(dtype).numpy))


def arange(start, stop=None, step=1.0, dtype=None):
    """Evenly spaced values in ``[start, stop)``, as ``numpy.arange`` (floating point)."""
    if stop is None:
        start, stop = 0.0, start
    return _finish_range(np.arange(start, stop, step, dtype=np.float64), dtype)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None):
    """``num`` evenly spaced values from ``start`` to ``stop`` (inclusive unless not
    ``endpoint``), as ``numpy.linspace``; with ``retstep``, ``(values, step)``."""
    values, step = np.linspace(start, stop, as_index(num), endpoint=bool(endpoint),
                               retstep=True, dtype=np.float64)
    values = _finish_range(values, dtype)
    return (values, float(step)) if retstep else values


def _finish_range(values, dtype):
    if values.size == 0:
        raise ValueError("the requested range is empty; zero-extent arrays are not supported")
    return Tensor.wrap(values.astype(_float_dtype(dtype).numpy, copy=False))


def eye(n, m=None, dtype=None):
    """The ``n`` by ``m`` identity matrix (``m`` defaults to ``n``)."""
    n, m = array_shape((n, n if m is None else m))
    return Tensor.wrap(np.eye(n, m, dtype=_float_dtype(dtype).numpy))
