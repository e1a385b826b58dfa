"""The lowering table of the numba.cuda back end: op name -> ``fn(emitter, node, nid,
**params)`` emitting the kernels and host lines that compute node ``nid``. The family modules
fill it (``structural.py``, ``linalg.py``, ``regions.py``); fused ops (elementwise, index maps,
reductions) are kernels of ``groups.py`` instead, by their ``Primitive.kind``.
``codegen.check_supported`` reads both."""

__all__ = ["LOWERINGS", "register"]

LOWERINGS = {}


def register(entries):
    """Add ``{op name: lowering}`` entries; an op is lowered one way only."""
    for op, fn in entries.items():
        if op in LOWERINGS:
            raise ValueError(f"the CUDA lowering of {op!r} is registered twice")
        LOWERINGS[op] = fn
