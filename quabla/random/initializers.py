"""Weight initializers scaled by a layer's fans: glorot_normal, glorot_uniform, he_normal."""

import math

from .. import dtypes
from ..array import array_shape
from .arguments import finish, float_dtype
from .continuous import uniform
from .keys import check_key
from .outputs import standard_normals


def _fans(shape):
    """``(fan_in, fan_out)``: the last two dimensions, each times the receptive field size."""
    if len(shape) < 2:
        raise ValueError(
            f"initializers need a shape of rank 2 or more (fan_in, fan_out), got {list(shape)}"
        )
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


def _scaled_normal(k, shape, dt, std):
    return finish((standard_normals(k.state, math.prod(shape)) * std).reshape(shape), dt)


def glorot_normal(key, shape, dtype=dtypes.float64):
    """Untruncated normal samples with std ``sqrt(2 / (fan_in + fan_out))``."""
    k = check_key(key)
    shape = array_shape(shape)
    dt = float_dtype(dtype)
    fan_in, fan_out = _fans(shape)
    return _scaled_normal(k, shape, dt, math.sqrt(2.0 / (fan_in + fan_out)))


def glorot_uniform(key, shape, dtype=dtypes.float64):
    """Uniform samples on ``[-l, l)``, ``l = sqrt(6 / (fan_in + fan_out))``."""
    k = check_key(key)
    shape = array_shape(shape)
    dt = float_dtype(dtype)
    fan_in, fan_out = _fans(shape)
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return uniform(k, shape, dt, -limit, limit)


def he_normal(key, shape, dtype=dtypes.float64):
    """Untruncated normal samples with std ``sqrt(2 / fan_in)``."""
    k = check_key(key)
    shape = array_shape(shape)
    dt = float_dtype(dtype)
    fan_in, _ = _fans(shape)
    return _scaled_normal(k, shape, dt, math.sqrt(2.0 / fan_in))
