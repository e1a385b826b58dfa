"""Activation functions and friends, as ``jax.nn`` names them (``qb.nn``).

Each is a composite of Quabla's ops written as JAX writes it, so values and derivatives are
JAX's, kinks included (``relu``' is 0 at 0, ``relu6``' is 0 at 0 and 6, ``leaky_relu``' and
``elu``' are 1 at 0), and the reductions subtract their maximum under ``stop_gradient``, so
``softmax``, ``log_softmax`` and ``logsumexp`` have finite values and gradients for large
inputs wherever JAX's have them.
"""

import math

import numpy as np

from . import dtypes as _dt
from . import ops
from .array import Tensor, as_index
from .special import logsumexp

__all__ = ["relu", "relu6", "leaky_relu", "elu", "selu", "gelu", "silu", "swish", "softplus",
           "sigmoid", "log_sigmoid", "tanh", "softmax", "log_softmax", "logsumexp", "one_hot",
           "standardize"]

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946

relu = ops.relu
softplus = ops.softplus
sigmoid = ops.sigmoid
tanh = ops.tanh


def relu6(x):
    """min(max(x, 0), 6); its derivative is 1 strictly inside (0, 6), else 0 (JAX's)."""
    return ops.where(ops.greater_equal(x, 6.0), 6.0, ops.relu(x))


def leaky_relu(x, negative_slope=0.01):
    """x where x >= 0, else ``negative_slope * x``."""
    return ops.where(ops.greater_equal(x, 0.0), x, ops.multiply(negative_slope, x))


def elu(x, alpha=1.0):
    """x where x > 0, else ``alpha * (exp(x) - 1)``."""
    (x,) = ops.promote("elu", (x,))
    positive = ops.greater(x, 0.0)
    safe = ops.where(positive, 0.0, x)
    return ops.where(positive, x, ops.multiply(alpha, ops.expm1(safe)))


def selu(x):
    """The scaled ELU of Klambauer et al. (JAX's constants)."""
    return ops.multiply(_SELU_SCALE, elu(x, _SELU_ALPHA))


def gelu(x, approximate=True):
    """The Gaussian error linear unit: with ``approximate`` (JAX's default) the tanh form
    x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2, else the exact x (1 + erf(x / sqrt 2)) / 2."""
    (x,) = ops.promote("gelu", (x,))
    if approximate:
        inner = ops.multiply(math.sqrt(2.0 / math.pi),
                             ops.add(x, ops.multiply(0.044715, ops.power(x, 3))))
        return ops.multiply(x, ops.multiply(0.5, ops.add(1.0, ops.tanh(inner))))
    from .special import erf

    return ops.divide(ops.multiply(x, ops.add(erf(ops.divide(x, math.sqrt(2.0))), 1.0)), 2.0)


def silu(x):
    """x sigmoid(x)."""
    return ops.multiply(x, ops.sigmoid(x))


swish = silu


def log_sigmoid(x):
    """log(sigmoid(x)) = -softplus(-x), finite for large |x|."""
    return ops.negative(ops.softplus(ops.negative(x)))


def _masked_max(x, axis, where):
    if where is None:
        return ops.max(x, axis, keepdims=True)
    return ops.max(ops.where(where, x, -math.inf), axis, keepdims=True)


def softmax(x, axis=-1, where=None):
    """exp(x) / sum(exp(x)) over ``axis`` (int or tuple), the maximum subtracted under
    ``stop_gradient``; with ``where``, the masked-out entries are 0."""
    (x,) = ops.promote("softmax", (x,))
    if where is not None:
        where = ops.broadcast_to(ops.as_bool(where, "softmax"), x.shape)
    shift = ops.stop_gradient(_masked_max(x, axis, where))
    unnormalized = ops.exp(ops.subtract(x, shift))
    if where is not None:
        unnormalized = ops.where(where, unnormalized, 0.0)
    return ops.divide(unnormalized, ops.sum(unnormalized, axis, keepdims=True))


def log_softmax(x, axis=-1, where=None):
    """x - logsumexp(x) over ``axis``, the maximum subtracted under ``stop_gradient``; with
    ``where``, the masked-out entries are -inf."""
    (x,) = ops.promote("log_softmax", (x,))
    if where is not None:
        where = ops.broadcast_to(ops.as_bool(where, "log_softmax"), x.shape)
    shifted = ops.subtract(x, ops.stop_gradient(_masked_max(x, axis, where)))
    exps = ops.exp(shifted)
    if where is not None:
        exps = ops.where(where, exps, 0.0)
    out = ops.subtract(shifted, ops.log(ops.sum(exps, axis, keepdims=True)))
    return out if where is None else ops.where(where, out, -math.inf)


def one_hot(x, num_classes, dtype=_dt.float64, axis=-1):
    """1 where the class index ``x`` (whole numbers in a float array) equals each of
    ``num_classes`` classes, else 0, along a new axis ``axis``; an index out of range (or not
    whole) gives a row of zeros, as JAX's. No derivative flows to ``x``."""
    x = ops.as_array(x)
    num_classes = as_index(num_classes)
    axis = ops.normalize_axis(axis, x.ndim + 1, "one_hot")
    if x.dtype is _dt.bool_:
        x = ops.astype(x, _dt.float64)
    x = ops.stop_gradient(x)
    shape = [1] * (x.ndim + 1)
    shape[axis] = num_classes
    classes = Tensor.wrap(np.arange(num_classes, dtype=x.dtype.numpy).reshape(shape))
    return ops.astype(ops.equal(ops.expand_dims(x, axis), classes), dtype)


def standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None):
    """(x - mean) / sqrt(variance + epsilon) over ``axis``, the mean and variance (E[x^2] -
    E[x]^2, as JAX's) computed unless given; ``where`` restricts them to masked elements."""
    (x,) = ops.promote("standardize", (x,))
    if mean is None:
        mean = ops.mean(x, axis, keepdims=True, where=where)
    if variance is None:
        variance = ops.subtract(ops.mean(ops.square(x), axis, keepdims=True, where=where),
                                ops.square(mean))
    return ops.multiply(ops.subtract(x, mean), ops.divide(1.0, ops.sqrt(ops.add(variance, epsilon))))
