"""The three dtypes Quabla knows, and how foreign dtypes map onto them (spec 000 §3.2)."""

import numpy as np

__all__ = ["DType", "float32", "float64", "bool_", "dtype", "result_dtype_of_numpy"]


class DType:
    """A Quabla dtype: a name and the NumPy dtype that stores it. Singletons, compared by identity."""

    __slots__ = ("name", "numpy", "is_floating", "itemsize")

    def __init__(self, name, numpy_type):
        self.name = name
        self.numpy = np.dtype(numpy_type)
        self.is_floating = self.numpy.kind == "f"
        self.itemsize = self.numpy.itemsize

    def __repr__(self):
        return self.name

    __str__ = __repr__

    def __reduce__(self):
        return (dtype, (self.name,))


float32 = DType("float32", np.float32)
float64 = DType("float64", np.float64)
bool_ = DType("bool", np.bool_)

# The DType of each NumPy dtype Quabla holds: how arrays, graphs, checkpoints and staging read one.
BY_NUMPY = {float32.numpy: float32, float64.numpy: float64, bool_.numpy: bool_}
_BY_NAME = {"float32": float32, "float64": float64, "bool": bool_, "bool_": bool_}


def dtype(spec):
    """Resolve a dtype argument: a DType, a NumPy dtype or scalar type, or a name."""
    if isinstance(spec, DType):
        return spec
    if isinstance(spec, str):
        found = _BY_NAME.get(spec)
        if found is None:
            raise TypeError(f"unsupported dtype {spec!r}; Quabla has float32, float64 and bool_")
        return found
    try:
        np_dtype = np.dtype(spec)
    except TypeError:
        raise TypeError(f"unsupported dtype {spec!r}; Quabla has float32, float64 and bool_") from None
    found = BY_NUMPY.get(np_dtype.newbyteorder("="))
    if found is None:
        raise TypeError(f"unsupported dtype {np_dtype}; Quabla has float32, float64 and bool_")
    return found


def result_dtype_of_numpy(np_dtype):
    """The Quabla dtype that imported data of ``np_dtype`` takes (the §3.2 table)."""
    kind = np_dtype.kind
    if kind == "b":
        return bool_
    if kind in "iu":
        return float64
    if kind == "f":
        if np_dtype.itemsize == 8:
            return float64
        if np_dtype.itemsize == 4:
            return float32
        raise TypeError(
            f"{np_dtype} arrays are not supported; convert to float32 or float64 first"
        )
    raise TypeError(f"cannot convert data of dtype {np_dtype} to a Quabla array")
