"""What ranks must agree on before their results are summed: the signature of a call with
the row counts of the sharded arguments left out (ranks may hold different numbers of rows),
and the row count itself, which every leaf of the sharded arguments shares."""

import numbers

import numpy as np

from ..array import Array

__all__ = ["positions", "row_count", "leaf_signature", "signature_text", "sharded_flags"]


def sharded_flags(treedef, sharded_positions):
    """Per leaf of the flattened argument tuple ``treedef``: whether it belongs to one of the
    arguments at ``sharded_positions``."""
    flags = []
    for i, child in enumerate(treedef.children()):
        flags += [i in sharded_positions] * child.num_leaves
    return flags


def positions(name, value):
    """``value`` (an int or ints: argument positions) as a tuple, or a TypeError/ValueError."""
    values = (value,) if isinstance(value, numbers.Integral) else value
    try:
        values = tuple(values)
    except TypeError:
        raise TypeError(f"{name} must be an int or a tuple of ints, got {value!r}") from None
    for v in values:
        if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{name} must hold non-negative argument positions, got {value!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} {value!r} repeats a position")
    return tuple(int(v) for v in values)


def row_count(leaves, sharded):
    """The row count shared by every leaf of the sharded arguments (a ValueError otherwise)."""
    counts = set()
    for leaf, s in zip(leaves, sharded):
        if s:
            shape = np.shape(leaf)
            if not shape:
                raise ValueError("every leaf of a sharded argument needs rows (axis 0); got a "
                                 f"0-d leaf {leaf!r}")
            counts.add(shape[0])
    if not counts:
        raise ValueError("the sharded arguments hold no arrays")
    if len(counts) > 1:
        raise ValueError(f"the leaves of the sharded arguments have different row counts "
                         f"{sorted(counts)}: each rank's rows must line up")
    return counts.pop()


def leaf_signature(leaf, sharded):
    """What a leaf contributes to the signature: dtype and shape (``*`` for the rows of a
    sharded leaf), a Python number's type and value, another object's type."""
    if isinstance(leaf, (Array, np.ndarray, np.generic)):
        shape = tuple(np.shape(leaf))
        return (str(np.asarray(leaf).dtype) if not isinstance(leaf, Array) else str(leaf.dtype),
                ("*",) + shape[1:] if sharded else shape)
    if isinstance(leaf, (bool, numbers.Number)):
        return (type(leaf).__name__, leaf)
    return (type(leaf).__name__,)


def signature_text(treedef, leaf_signatures):
    """The signature as users read it in a mismatch error."""
    parts = []
    for entry in leaf_signatures:
        if len(entry) == 2 and isinstance(entry[1], tuple):
            parts.append(f"{entry[0]}[{', '.join(map(str, entry[1]))}]")
        else:
            parts.append(" ".join(map(repr, entry[1:])) if len(entry) > 1 else entry[0])
    return f"{treedef} with leaves ({'; '.join(parts)})"
