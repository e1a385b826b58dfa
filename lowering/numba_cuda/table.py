"""The lowering table of the numba.cuda back end: op name -> ``fn(emitter, node, nid,
**params)`` emitting the kernels and host lines that compute node ``nid``. The family modules
fill it (``structural.py``, ``linalg.py``, ``regions.py``); fused ops (elementwise, index maps,
reductions) are kernels of ``groups.py`` instead, by their ``Primitive.kind``.
``codegen.check_supported`` reads both."""

from ..loopnest.table import LoweringTable

__all__ = ["LOWERINGS", "register"]

LOWERINGS = LoweringTable("CUDA")
register = LOWERINGS.register
