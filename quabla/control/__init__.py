"""Control flow: ``cond`` (and ``switch``), ``fori_loop``, ``scan`` and ``while_loop`` as IR regions.

``constructs.py`` holds the user functions, ``regions.py`` the tracing of their bodies and the
graph surgery on sub-graphs, and each region primitive has one module with all its rules:
``cond.py``, ``scan.py``, ``while_.py``, and ``remat.py`` (``checkpoint``: a function whose
forward values reverse mode recomputes); what their rules share is in ``region_rules.py``.
The package's names ``cond`` and ``scan`` are the user functions; the modules of the same
names are reached as ``importlib.import_module("quabla.control.scan")``.
"""

from . import cond as _cond, scan as _scan, while_ as _while  # noqa: F401  (register the regions)
from .constructs import cond, fori_loop, scan, switch, while_loop
from .remat import checkpoint

__all__ = ["cond", "switch", "fori_loop", "scan", "while_loop", "checkpoint"]
