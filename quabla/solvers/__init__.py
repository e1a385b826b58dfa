"""Differentiable solvers: ``newton`` (roots of systems) and ``odeint`` (adaptive ODE
integration), each a primitive differentiated implicitly (the implicit function theorem, the
adjoint method), never through its iterations. ``common.py`` holds what they share with
``quabla.linalg.cg``/``gmres``."""

from .common import ConvergenceError
from .newton import newton
from .odeint import odeint

__all__ = ["ConvergenceError", "newton", "odeint"]
