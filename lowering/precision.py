"""What a back end does with a float64 program (spec Q6): keep it, or run it as float32.

``options["precision"]`` is jit's ``precision=``: None lets a float32 back end narrow a float64
program (with one ``PrecisionWarning`` per function), ``"float64"`` demands float64, and a
back end that cannot keep it raises ``UnsupportedOperationError``. Results always come back
in the program's declared dtypes.
"""

import os
import sys
import warnings
import weakref

from quabla.errors import PrecisionWarning


__all__ = ["PRECISIONS", "requested", "has_float64", "warn_narrowed"]

PRECISIONS = (None, "float64")
_WARNED = weakref.WeakKeyDictionary()  # function -> set of devices it was narrowed on
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OURS = tuple(os.path.join(_ROOT, package) + os.sep for package in ("lowering", "quabla"))


def requested(options):
    """The precision ``options`` ask for; another value is a ValueError."""
    precision = (options or {}).get("precision")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be None or 'float64', got {precision!r}")
    return precision


def has_float64(graph):
    """Does ``graph`` compute in float64 for its user: a float64 input or output, or a cast of
    an array to float64 (``astype``, in any region)? Loop indices, solvers' step counts and
    the weak (Python-number) float64 scalars of derivative rules are float64 in every program,
    so they alone do not make a float32 program a float64 one."""
    boundary = [graph.nodes[i] for i in graph.inputs + graph.outputs]
    return (any(node.dtype.name == "float64" for node in boundary)
            or any(node.op == "cast" and node.dtype.name == "float64" and not node.weak
                   for node in graph.walk()))


def warn_narrowed(graph, device, options):
    """Warn, once per function and device, that a float64 program runs as float32."""
    if not has_float64(graph):
        return
    options = options or {}
    function = options.get("function")
    try:
        seen = _WARNED.setdefault(function, set())
    except TypeError:  # None or not weakly referenceable: warn every time
        seen = set()
    if device in seen:
        return
    seen.add(device)
    name = options.get("name") or "a function"
    warnings.warn(
        f"{name} is a float64 program; device {device!r} runs it in float32 (results come back "
        "in the program's dtypes). Pass float32 arrays, or jit(..., precision='float64') to "
        "keep float64 where the device can.",
        PrecisionWarning, stacklevel=_user_stacklevel(),
    )


def _user_stacklevel():
    """The ``stacklevel`` of the first caller outside Quabla's packages (the user's call)."""
    level, frame = 2, sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_OURS):
        frame = frame.f_back
        level += 1
    return level
