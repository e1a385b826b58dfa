"""``quabla.legacy``: the v0.1 legacy names (spec 000 §5.1, Appendix A), without warnings.

Every ``legacy`` and ``core+legacy`` row of ``quabla.compat.TABLE`` is here: the 2-D API's
functions as wrappers over the transforms (``quabla.compat.wrappers``), its types, and
placeholders for what has no equivalent (``Matrix``, ``TraceMatrix``, ``TraceGraph``,
``CpuExecutionPlan``), which raise UnsupportedOperationError when constructed.
"""

from .compat import TABLE as _TABLE
from .compat import resolve as _resolve

__all__ = [name for name, row in sorted(_TABLE.items()) if "legacy" in row.status]


def __getattr__(name):
    row = _TABLE.get(name)
    if row is None or "legacy" not in row.status:
        raise AttributeError(f"module 'quabla.legacy' has no attribute {name!r}")
    value = globals()[name] = _resolve(row)
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
