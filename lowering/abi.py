"""What compiled code assumes about CPython's and NumPy's object layouts: the byte offsets of
an ndarray's data pointer and of a tuple's items, probed at import. An entry reads its arrays
through them (native.py's calling convention), and the compile cache's keys name them."""

import ctypes

import numpy as np

__all__ = ["ARRAY_DATA", "TUPLE_ITEMS", "abi_tag"]


def _offset(obj, target):
    """The byte offset in ``obj``'s C struct of the pointer-sized field holding ``target``."""
    for offset in range(8, 128, ctypes.sizeof(ctypes.c_void_p)):
        if ctypes.c_void_p.from_address(id(obj) + offset).value == target:
            return offset
    raise RuntimeError("quabla: cannot locate the field in this Python/NumPy build")


_probe = np.empty(3)
ARRAY_DATA = _offset(_probe, _probe.ctypes.data)       # PyArrayObject.data
TUPLE_ITEMS = _offset((_probe, None), id(_probe))     # PyTupleObject.ob_item[0]
del _probe


def abi_tag():
    """What compiled code assumes about object layouts (part of the compile-cache key)."""
    return f"array_data={ARRAY_DATA};tuple_items={TUPLE_ITEMS}"
