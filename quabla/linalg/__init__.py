"""``quabla.linalg``: the linear-algebra functions, as ``jax.scipy.linalg`` groups them."""

from ..core.tracing import bind
from ..ops import cholesky, solve, solve_operands
from .iterative import cg, gmres

__all__ = ["solve", "cholesky", "triangular_solve", "cg", "gmres"]


def triangular_solve(a, b, *, lower=False, transpose_a=False):
    """The solution ``x`` of ``a @ x = b`` (``a.T @ x = b`` with ``transpose_a``) for triangular
    ``a`` [..., n, n], as ``jax.scipy.linalg.solve_triangular``: only the lower (``lower=True``)
    or upper triangle of ``a`` is read. ``b`` broadcasts as in ``quabla.solve``: [n] is one vector
    for every matrix, anything else a stack of matrices [..., n, k]. O(n^2) per right-hand side;
    a zero on the diagonal gives the infinities and NaNs that substitution produces."""
    for name, flag in (("lower", lower), ("transpose_a", transpose_a)):
        if not isinstance(flag, bool):
            raise TypeError(f"quabla.linalg.triangular_solve: {name} must be a bool, got {flag!r}")
    a, b = solve_operands("linalg.triangular_solve", a, b)
    return bind("triangular_solve", a, b, lower=lower, transpose_a=transpose_a)
