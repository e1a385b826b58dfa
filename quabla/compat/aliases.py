"""v0.1 core names this implementation had no object for (spec 000 Appendix A)."""

from ..dtypes import DType
from ..dtypes import dtype as _resolve

__all__ = ["dtype"]


class _DTypeMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, DType)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, DType)


class dtype(metaclass=_DTypeMeta):
    """v0.1's ``quabla.dtype``, the type of ``float32``/``float64``/``bool_``:
    ``isinstance(qb.float32, qb.dtype)`` holds, and ``qb.dtype(spec)`` resolves a name, a NumPy
    dtype or a DType to the Quabla dtype (as ``np.dtype`` does), returning a ``DType``."""

    def __new__(cls, spec):
        return _resolve(spec)
