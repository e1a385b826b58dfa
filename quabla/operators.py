"""Python operators and methods shared by ``Tensor`` and ``TraceTensor``.

Every method forwards to the module functions of ``quabla.ops``, so eager and traced code obey
identical rules. The array types are defined below ``ops`` (which makes them), so they do not
inherit these: importing this module installs them on both classes (as JAX sets its arrays'
methods from ``jax.numpy``), and imports run one way, ``operators -> ops -> array``.
"""

from . import ops
from .array import Tensor
from .core.tracing import TraceTensor

__all__ = []


class Operators:
    """The methods installed on the array types (a namespace, never instantiated)."""

    __array_priority__ = 100

    def __add__(self, other):
        return ops.add(self, other)

    def __radd__(self, other):
        return ops.add(other, self)

    def __sub__(self, other):
        return ops.subtract(self, other)

    def __rsub__(self, other):
        return ops.subtract(other, self)

    def __mul__(self, other):
        return ops.multiply(self, other)

    def __rmul__(self, other):
        return ops.multiply(other, self)

    def __truediv__(self, other):
        return ops.divide(self, other)

    def __rtruediv__(self, other):
        return ops.divide(other, self)

    def __pow__(self, other):
        return ops.power(self, other)

    def __rpow__(self, other):
        return ops.power(other, self)

    def __matmul__(self, other):
        return ops.matmul(self, other)

    def __rmatmul__(self, other):
        return ops.matmul(other, self)

    def __neg__(self):
        return ops.negative(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return ops.abs(self)

    def __gt__(self, other):
        return ops.greater(self, other)

    def __ge__(self, other):
        return ops.greater_equal(self, other)

    def __lt__(self, other):
        return ops.less(self, other)

    def __le__(self, other):
        return ops.less_equal(self, other)

    def __and__(self, other):
        return ops.logical_and(self, other)

    def __rand__(self, other):
        return ops.logical_and(other, self)

    def __or__(self, other):
        return ops.logical_or(self, other)

    def __ror__(self, other):
        return ops.logical_or(other, self)

    def __invert__(self):
        return ops.logical_not(self)

    def __getitem__(self, index):
        return ops.getitem(self, index)

    @property
    def T(self):
        return ops.transpose(self)

    def astype(self, dtype):
        return ops.astype(self, dtype)

    def reshape(self, *shape):
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        return ops.reshape(self, shape)

    def transpose(self, *axes):
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = axes[0]
        return ops.transpose(self, axes or None)

    def broadcast_to(self, shape):
        return ops.broadcast_to(self, shape)

    def sum(self, axis=None, keepdims=False):
        return ops.sum(self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return ops.mean(self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return ops.max(self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return ops.min(self, axis, keepdims)

    def any(self, axis=None, keepdims=False):
        return ops.any(self, axis, keepdims)

    def all(self, axis=None, keepdims=False):
        return ops.all(self, axis, keepdims)


def _unary_method(name):
    def method(self):
        return getattr(ops, name)(self)

    method.__name__ = name
    method.__doc__ = f"Same as ``quabla.{name}(self)``."
    return method


for _name in ("sin", "cos", "exp", "log", "tanh", "sqrt", "relu", "sigmoid", "softplus"):
    setattr(Operators, _name, _unary_method(_name))
del _name

for _cls in (Tensor, TraceTensor):
    for _name, _member in vars(Operators).items():
        if _name not in ("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__"):
            setattr(_cls, _name, _member)
del _cls, _name, _member
