"""The rule tables of every primitive, one module per family; importing this registers them."""

from . import elementwise, structural, reductions, linalg, decompositions, sort, gather  # noqa: F401
