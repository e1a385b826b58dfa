"""Pieces of the generated source shared by the emitter and the lowerings: the variables named
after nodes, flat offsets into arrays of static shape, the entry's typed pointer arguments."""

import re

from ..loopnest.templates import np_dtype

__all__ = ["Named", "FLOAT64", "ZERO_BITS", "node_id", "flat_index", "argument"]


class Named:
    """A dtype known by name only (constants and scratch buffers)."""

    def __init__(self, name):
        self.name = name


FLOAT64 = Named("float64")

# Fill values whose bits are all zero: a memset (runtime._zero) instead of a loop.
ZERO_BITS = frozenset(["0", "0.0", "False", "np.float32(0.0)"])

_INTEGER = re.compile(r"^-?\d+$")
_ATOM = re.compile(r"^(\w+|\([^()]*\))$")


def node_id(var):
    """The node id of a value variable ``v12``."""
    return int(var[1:])


def flat_index(shape, idx):
    """The row-major offset of index ``idx`` (expressions, one per axis) in an array of the
    static ``shape``: literal indices folded into one constant, axes of extent 1 (index 0)
    left out."""
    constant, terms, stride = 0, [], 1
    for n, i in reversed(list(zip(shape, idx))):
        i = str(i)
        if _INTEGER.match(i):
            constant += int(i) * stride
        elif n != 1:
            terms.append(i if stride == 1 else
                         f"{stride} * {i if _ATOM.match(i) else f'({i})'}")
        stride *= n
    terms.reverse()
    if constant or not terms:
        terms.append(str(constant))
    return " + ".join(terms)


def argument(k, dtype, start=0):
    """The typed pointer to element ``start`` of argument ``k``."""
    return f"_arg(args, {k}, {start}, {np_dtype(dtype.name)})"
