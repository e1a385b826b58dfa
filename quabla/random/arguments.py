"""Checking the samplers' arguments and shaping their parameters and results.

Parameters become float64 NumPy values broadcast against the sample shape; results come back
as fresh C-contiguous Tensors in the requested dtype.
"""

import math
import numbers

import numpy as np

from .. import dtypes
from ..array import Array, Tensor, array, array_shape, as_index
from ..errors import TracerError
from .keys import check_key


def float_dtype(dtype):
    """The floating dtype a sampler returns (float64 for None)."""
    dt = dtypes.float64 if dtype is None else dtypes.dtype(dtype)
    if not dt.is_floating:
        raise TypeError(f"this sampler needs a floating dtype (float32 or float64), got {dt}")
    return dt


def as_param(value, name):
    """A float64 parameter: a NumPy float64 scalar, or a float64 array of rank 1 or more."""
    if isinstance(value, Array) and not isinstance(value, Tensor):
        raise TracerError(f"{name} cannot be a traced value; random sampling is eager")
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return np.float64(value)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number or array, got {type(value).__name__}") from None
    if arr.ndim == 0:
        return arr[()]
    return arr


def param(value, name, shape):
    """A float64 parameter array broadcastable to ``shape``, or a NumPy float64 scalar."""
    arr = as_param(value, name)
    if isinstance(arr, np.ndarray):
        try:
            ok = np.broadcast_shapes(arr.shape, shape) == shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"{name} of shape {list(arr.shape)} does not broadcast to {list(shape)}"
            )
    return arr


def shape_and_params(shape, **named):
    """``shape`` (or, when None, the broadcast shape of the parameters) and the parameters.

    As in JAX, the parameters must broadcast to an explicit ``shape``.
    """
    if shape is not None:
        shape = array_shape(shape)
        return shape, [param(v, name, shape) for name, v in named.items()]
    params = [as_param(v, name) for name, v in named.items()]
    try:
        shape = np.broadcast_shapes(*(np.shape(p) for p in params))
    except ValueError:
        shapes = ", ".join(f"{name} {list(np.shape(p))}" for name, p in zip(named, params))
        raise ValueError(f"parameter shapes do not broadcast together: {shapes}") from None
    return array_shape(shape), params


def flat(value, shape):
    """A parameter broadcast to ``shape`` and flattened in C order (a fresh float64 array)."""
    return np.array(np.broadcast_to(value, shape), dtype=np.float64).reshape(-1)


def real_array(value, name):
    """``value`` as a float64 NumPy array (a Tensor, NumPy array, list or number)."""
    if isinstance(value, Array) and not isinstance(value, Tensor):
        raise TracerError(f"{name} cannot be a traced value; random sampling is eager")
    try:
        v = array(value).value
    except TypeError:
        raise TypeError(f"{name} must be a real array, got {type(value).__name__}") from None
    if v.dtype == np.bool_:
        raise TypeError(f"{name} must be real, got a bool array")
    return v.astype(np.float64)


def positive_size(value, name):
    """A positive size (``n``, ``m``, ``d``): an integer, as for a shape entry."""
    try:
        value = as_index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if value < 1:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def check_batch(shape, batch, what):
    """An explicit ``shape`` must be ``batch`` broadcast (JAX's rule)."""
    try:
        ok = np.broadcast_shapes(shape, batch) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"shape {list(shape)} is not a broadcast of the {what} {list(batch)}")


def own(x):
    """A fresh result ``x`` wrapped as a C-contiguous Tensor (0-d arrays stay 0-d)."""
    x = np.asarray(x)  # NumPy scalars (np.take with a 0-d index) become 0-d arrays
    if not x.flags.c_contiguous:
        x = x.copy(order="C")
    return Tensor.wrap(x)


def finish(x, dt):
    """A fresh float64 result ``x`` rounded to ``dt`` and wrapped as a C-contiguous Tensor."""
    if dt is dtypes.float32:
        x = x.astype(np.float32)
    return own(x)


def elementwise_sample(draw, key, shape, dtype):
    """``draw(state, n)``, n samples from ``key``'s stream, shaped ``shape`` and rounded to
    ``dtype``: the whole of each sampler that has no parameters."""
    k = check_key(key)
    shape = array_shape(shape)
    dt = float_dtype(dtype)
    return finish(draw(k.state, math.prod(shape)).reshape(shape), dt)
