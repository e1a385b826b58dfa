"""Control flow: ``cond``, ``fori_loop``, ``scan`` and ``while_loop`` as IR regions.

``constructs.py`` holds the user functions, ``regions.py`` the tracing of their bodies,
``primitives.py`` the region primitives with their shapes and references, ``autodiff.py`` and
``batching.py`` their derivative and batching rules.
"""

from . import primitives as _primitives  # noqa: F401  (registers the region primitives)
from .constructs import cond, fori_loop, scan, while_loop

__all__ = ["cond", "fori_loop", "scan", "while_loop"]
