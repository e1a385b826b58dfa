"""A call's signature: what of its arguments a program is compiled for.

``classify_leaves`` reads the flattened arguments: arrays count by shape, dtype and weak flag,
Python scalars and jit's ``Static`` values by type and value, a ``Count`` as a float64 array.
The signature (the tree structure and these parts) is the key of a staged function's caches;
traced, the array parts become ``Aval``s, and users see it as ``signature_text``.
``ShapeDtype`` is an array part without data, for ``lower``.
"""

import numpy as np

from .. import dtypes
from ..array import Array, Tensor, array_shape, asarray
from ..core.tracing import TraceTensor
from ..dtypes import BY_NUMPY

__all__ = ["Aval", "ShapeDtype", "Static", "Count", "BadLeaf", "classify_leaves", "template_of",
           "Printed", "signature_leaves", "signature_text", "PYTHON_SCALARS"]

PYTHON_SCALARS = (bool, int, float)


class Aval:
    """A leaf of a signature: shape, dtype and weak flag of an array argument (a weak array,
    such as ``add(2.0, 3.0)``, adopts the dtype of the strong arrays it meets, as eagerly).
    The transforms tell array leaves of a template from static ones by it."""

    __slots__ = ("shape", "dtype", "weak")

    def __init__(self, shape, dtype, weak=False):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.weak = weak

    def __repr__(self):
        text = f"{self.dtype}[{', '.join(map(str, self.shape))}]"
        return f"weak {text}" if self.weak else text


class ShapeDtype:
    """An abstract array argument of ``lower``: a shape and a dtype, no data."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype=dtypes.float64):
        self.shape = array_shape(shape)
        self.dtype = dtypes.dtype(dtype)

    @property
    def part(self):
        """This leaf's part of a signature: that of a strong array of this shape and dtype."""
        return (self.shape, self.dtype.numpy, False)

    def __eq__(self, other):
        return isinstance(other, ShapeDtype) and (self.shape, self.dtype) == (other.shape,
                                                                               other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype.name))

    def __repr__(self):
        return f"ShapeDtype({self.shape}, {self.dtype})"


class Static:
    """A static argument value (jit's static_argnums/static_argnames): a pytree leaf that is
    part of the signature by type and value, and must be hashable."""

    __slots__ = ("value", "_key")

    def __init__(self, value):
        self.value = value
        try:
            self._key = (type(value), value.hex() if isinstance(value, float) else value)
            hash(self._key)
        except TypeError:
            raise ValueError(
                f"static arguments must be hashable, got {type(value).__name__}"
            ) from None

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, Static) and self._key == other._key

    def __repr__(self):
        return repr(self.value)


class Count(int):
    """A count of steps (an optimizer state's ``"step"``): an int to Python, an argument of
    a transform as a float64 scalar array rather than a static value. A jitted train step
    hands back the count it computed, an array; with the count an array on the first call
    too, the step's next call keys the same program (an int would compile a second one)."""

    __slots__ = ()

    def __repr__(self):
        return int.__repr__(self)


class BadLeaf(Exception):
    """Raised by ``classify_leaves`` for a leaf that is not an argument; ``Staged`` and
    ``CallSignature`` name it."""

    def __init__(self, index):
        super().__init__(index)
        self.index = index


def classify_leaves(leaves, diff, abstract=False):
    """Classify leaves: (signature parts, dynamic array leaves, any tracer among them); a
    compiled call (``CallSignature``) checks its arguments with it too.

    Arrays (and anything with ``__array__`` or the buffer protocol, converted) are dynamic,
    keyed by shape, dtype and weak flag; Python scalars are static weak constants outside
    the differentiated leaves ``diff`` (there, and a ``Count`` everywhere, float64 arrays);
    ``Static`` values are keyed by value; ``ShapeDtype``s are arrays without data where
    ``abstract`` (``lower``); any other leaf is an error (``BadLeaf``), never silently static.
    """
    parts = []
    dynamic = []
    traced = False
    for i, leaf in enumerate(leaves):
        t = type(leaf)
        if t is Tensor:
            v = leaf.value
            parts.append((v.shape, v.dtype, leaf.weak))
            dynamic.append(leaf)
            continue
        if t is TraceTensor:
            parts.append((tuple(leaf.shape), leaf.dtype.numpy, leaf.weak))
            dynamic.append(leaf)
            traced = True
            continue
        if t is Static:
            parts.append(("static", t, leaf))
            continue
        if t is float or t is int or t is bool or (
                isinstance(leaf, PYTHON_SCALARS) and not isinstance(leaf, np.generic)):
            if i not in diff and t is not Count:
                parts.append(("static", t, leaf.hex() if t is float else leaf))
                continue
            leaf = np.array(float(leaf))
        elif not isinstance(leaf, (np.ndarray, np.generic, Array)) and not _array_like(leaf):
            if abstract and t is ShapeDtype:  # lower's abstract leaves: an aval, no data
                parts.append(leaf.part)
                continue
            raise BadLeaf(i)
        leaf = asarray(leaf)
        parts.append((tuple(leaf.shape), leaf.dtype.numpy, leaf.weak))
        dynamic.append(leaf)
    return tuple(parts), dynamic, traced


def _array_like(leaf):
    """Whether a leaf converts to an array: ``__array__`` or the buffer protocol."""
    if hasattr(leaf, "__array__"):
        return True
    try:
        memoryview(leaf)
    except TypeError:
        return False
    return True


def template_of(parts, leaves):
    """What a transform traces with: an ``Aval`` per array part, the value of each static leaf."""
    return [
        leaf if part[0] == "static" else Aval(part[0], BY_NUMPY[part[1]], part[2])
        for part, leaf in zip(parts, leaves)
    ]


class Printed:
    """A placeholder leaf that prints as ``text``: how signatures (and jit's keyword
    arguments) are shown to users."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def signature_leaves(parts):
    """One printable placeholder per signature part: an aval or a static value."""
    leaves = []
    for part in parts:
        if part[0] == "static":
            value = part[2]
            leaves.append(Printed(repr(float.fromhex(value)) if part[1] is float else repr(value)))
        else:
            leaves.append(Printed(repr(Aval(part[0], BY_NUMPY[part[1]], part[2]))))
    return leaves


def signature_text(treedef, parts):
    """``(float64[3], {'w': float64[2, 1]}, 0.5)``: how signatures are shown to users."""
    return repr(treedef.unflatten(signature_leaves(parts)))
