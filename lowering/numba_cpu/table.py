"""The lowering table of the Numba CPU back end: op name -> ``fn(emitter, node, out, args,
**params)`` emitting the statements that compute ``out`` (the node's variable) from ``args``
(its operands' variables). The family modules fill it (``structural.py``, ``linalg.py``,
``regions.py``); fused ops (elementwise, index maps, reductions) are loop nests of
``groups.py`` instead, by their ``Primitive.kind``. ``codegen.check_supported`` reads both."""

from ..loopnest.table import LoweringTable

__all__ = ["LOWERINGS", "register"]

LOWERINGS = LoweringTable("CPU")
register = LOWERINGS.register
