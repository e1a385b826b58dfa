"""``quabla.linalg``: the linear-algebra functions, as ``jax.numpy.linalg`` and
``jax.scipy.linalg`` name them (docs/linear-algebra.md)."""

from ..ops import cholesky, solve
from .decompositions import (EighResult, QRResult, SlogdetResult, SVDResult, det, eigh,
                             eigvalsh, qr, slogdet, svd)
from .inverses import (LstsqResult, cho_solve, inv, lstsq, matrix_power, pinv,
                       solve_triangular, triangular_solve)
from .exponential import expm
from .iterative import cg, gmres
from .norms import cond, norm

__all__ = ["solve", "cholesky", "triangular_solve", "solve_triangular", "cho_solve", "cg",
           "gmres", "det", "slogdet", "inv", "eigh", "eigvalsh", "svd", "qr", "pinv", "lstsq",
           "matrix_power", "norm", "cond", "expm", "SlogdetResult", "EighResult", "SVDResult",
           "QRResult", "LstsqResult"]
