"""Python operators and methods shared by ``Tensor`` and ``TraceTensor``.

Every method forwards to the module functions of ``quabla.ops``, so eager and traced code obey
identical rules. The array types are defined below ``ops`` (which makes them), so they do not
inherit these: importing this module installs them on both classes (as JAX sets its arrays'
methods from ``jax.numpy``), and imports run one way, ``operators -> ops -> array``.
"""

from . import indexing, ops, reductions, shapes
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

    def __mod__(self, other):
        return ops.remainder(self, other)

    def __rmod__(self, other):
        return ops.remainder(other, self)

    def __floordiv__(self, other):
        return ops.floor_divide(self, other)

    def __rfloordiv__(self, other):
        return ops.floor_divide(other, self)

    def round(self, decimals=0):
        return ops.around(self, decimals)

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
        return indexing.subscript(self, index)

    @property
    def at(self):
        """JAX's index updates: ``x.at[idx].set(v)``, ``.add``, ``.multiply``, ``.min``,
        ``.max``, ``.get`` (quabla/indexing.py)."""
        return indexing.IndexUpdateHelper(self)

    def take(self, indices, axis=None, **kwargs):
        return indexing.take(self, indices, axis, **kwargs)

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

    def sum(self, axis=None, keepdims=False, **kwargs):
        return ops.sum(self, axis, keepdims, **kwargs)

    def mean(self, axis=None, keepdims=False, **kwargs):
        return ops.mean(self, axis, keepdims, **kwargs)

    def max(self, axis=None, keepdims=False, **kwargs):
        return ops.max(self, axis, keepdims, **kwargs)

    def min(self, axis=None, keepdims=False, **kwargs):
        return ops.min(self, axis, keepdims, **kwargs)

    def any(self, axis=None, keepdims=False, **kwargs):
        return ops.any(self, axis, keepdims, **kwargs)

    def all(self, axis=None, keepdims=False, **kwargs):
        return ops.all(self, axis, keepdims, **kwargs)

    def prod(self, axis=None, keepdims=False, **kwargs):
        return reductions.prod(self, axis, keepdims, **kwargs)

    def var(self, axis=None, dtype=None, ddof=0, keepdims=False, **kwargs):
        return reductions.var(self, axis, dtype, ddof, keepdims, **kwargs)

    def std(self, axis=None, dtype=None, ddof=0, keepdims=False, **kwargs):
        return reductions.std(self, axis, dtype, ddof, keepdims, **kwargs)

    def argmax(self, axis=None, keepdims=False):
        return reductions.argmax(self, axis, keepdims)

    def argmin(self, axis=None, keepdims=False):
        return reductions.argmin(self, axis, keepdims)

    def cumsum(self, axis=None, dtype=None):
        return reductions.cumsum(self, axis, dtype)

    def cumprod(self, axis=None, dtype=None):
        return reductions.cumprod(self, axis, dtype)

    def sort(self, axis=-1, **kwargs):
        """A sorted copy (arrays are immutable: JAX's ``.sort()``, not NumPy's in place)."""
        return reductions.sort(self, axis, **kwargs)

    def argsort(self, axis=-1, **kwargs):
        return reductions.argsort(self, axis, **kwargs)

    def ravel(self, order="C"):
        return shapes.ravel(self, order)

    def flatten(self, order="C"):
        return shapes.ravel(self, order)

    def squeeze(self, axis=None):
        return ops.squeeze(self, axis)

    def clip(self, min=None, max=None, **kwargs):  # noqa: A002 - NumPy's names
        return ops.clip(self, min, max, **kwargs)

    def dot(self, other):
        return shapes.dot(self, other)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return shapes.diagonal(self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1):
        return shapes.trace(self, offset, axis1, axis2)

    def repeat(self, repeats, axis=None):
        return shapes.repeat(self, repeats, axis)

    def swapaxes(self, axis1, axis2):
        return shapes.swapaxes(self, axis1, axis2)


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
