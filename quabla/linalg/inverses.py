"""Inverses and solves of ``qb.linalg`` composed of the primitives: ``inv`` (a solve with the
identity), ``solve_triangular`` (JAX's name of ``triangular_solve``), ``cho_solve`` (two
triangular solves), ``pinv`` and ``lstsq`` (from ``svd``), ``matrix_power`` (repeated
squaring). Their derivatives are those of the primitives they are made of."""

import numbers
from typing import NamedTuple

import numpy as np

from .. import ops
from ..array import Tensor
from ..core.tracing import bind
from .decompositions import matrices, svd

__all__ = ["inv", "solve_triangular", "cho_solve", "pinv", "lstsq", "LstsqResult",
           "matrix_power", "triangular_solve"]


def inv(a):
    """The inverses of square matrices [..., n, n]: ``solve(a, I)``. A singular matrix gives
    NaN (the solve kernels' convention), its gradient too."""
    a = matrices(a, "inv", square=True)
    eye = Tensor.wrap(np.eye(a.shape[-1], dtype=a.dtype.numpy))
    return bind("solve", a, ops.broadcast_to(eye, tuple(a.shape)))


def triangular_solve(a, b, *, lower=False, transpose_a=False):
    """The solution ``x`` of ``a @ x = b`` (``a.T @ x = b`` with ``transpose_a``) for triangular
    ``a`` [..., n, n], as ``jax.scipy.linalg.solve_triangular``: only the lower (``lower=True``)
    or upper triangle of ``a`` is read. ``b`` broadcasts as in ``quabla.solve``: [n] is one vector
    for every matrix, anything else a stack of matrices [..., n, k]. O(n^2) per right-hand side;
    a zero on the diagonal gives the infinities and NaNs that substitution produces."""
    for name, flag in (("lower", lower), ("transpose_a", transpose_a)):
        if not isinstance(flag, bool):
            raise TypeError(f"quabla.linalg.triangular_solve: {name} must be a bool, got {flag!r}")
    a, b = ops.solve_operands("linalg.triangular_solve", a, b)
    return bind("triangular_solve", a, b, lower=lower, transpose_a=transpose_a)


_TRANS = {0: False, "N": False, 1: True, "T": True, 2: True, "C": True}


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False):
    """``jax.scipy.linalg.solve_triangular``: ``trans`` 0/'N' solves a x = b, 1/'T' (and
    2/'C', the same for real matrices) a^T x = b; ``unit_diagonal`` takes the diagonal as
    ones."""
    if trans not in _TRANS:
        raise ValueError(f"quabla.linalg.solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    if unit_diagonal:
        a = matrices(a, "solve_triangular", square=True)
        eye = Tensor.wrap(np.eye(a.shape[-1], dtype=bool))
        a = ops.where(eye, 1.0, a)
    return triangular_solve(a, b, lower=bool(lower), transpose_a=_TRANS[trans])


def cho_solve(c_and_lower, b):
    """``jax.scipy.linalg.cho_solve``: the solution of A x = b from ``(c, lower)``, c the
    Cholesky factor of A (lower or upper triangle): two triangular solves."""
    c, lower = c_and_lower
    lower = bool(lower)
    y = triangular_solve(c, b, lower=lower, transpose_a=not lower)
    return triangular_solve(c, y, lower=lower, transpose_a=lower)


def _cutoff(s, rtol, m, n):
    """Singular values above ``rtol`` times the largest (default 10 max(m, n) eps, JAX's)."""
    if rtol is None:
        rtol = 10.0 * max(m, n) * float(np.finfo(s.dtype.numpy).eps)
    return ops.multiply(rtol, ops.max(s, -1, keepdims=True))


def _inverse_values(s, keep):
    """1/s where kept, else 0, without a 1/0 in the branch not taken (its gradient)."""
    return ops.where(keep, ops.reciprocal(ops.where(keep, s, 1.0)), 0.0)


def _swap(x):
    return ops.transpose(x, tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2))


def pinv(a, rtol=None, hermitian=False):
    """The Moore-Penrose pseudo-inverses of matrices [..., m, n], as ``jnp.linalg.pinv``:
    v diag(1/s) u^T over the singular values above ``rtol`` times the largest. Its gradient
    is that of ``svd`` (inf/NaN where kept singular values repeat). ``hermitian`` is
    accepted and ignored."""
    a = matrices(a, "pinv")
    m, n = a.shape[-2:]
    u, s, vh = svd(a, full_matrices=False)
    keep = ops.subtract(s, _cutoff(s, rtol, m, n)) > 0
    scaled = ops.multiply(_swap(vh), ops.expand_dims(_inverse_values(s, keep), -2))
    return ops.matmul(scaled, _swap(u))


class LstsqResult(NamedTuple):
    x: object
    residuals: object
    rank: object
    s: object


def lstsq(a, b, rcond=None):
    """(x, residuals, rank, s), as ``jnp.linalg.lstsq``: x minimises |a x - b| (the minimum
    norm solution where ``a`` [..., m, n] is rank deficient), from the SVD with singular
    values below ``rcond`` (default eps max(m, n)) times the largest dropped; residuals the
    squared residual norms per column of b (always computed, as JAX's default), rank a
    float64 count. ``b`` is [m] or [..., m, k]."""
    a = matrices(a, "lstsq")
    (b,) = ops.promote("linalg.lstsq", (b,))
    m, n = a.shape[-2:]
    if b.ndim == 0 or b.shape[0 if b.ndim == 1 else -2] != m:
        raise ValueError(f"quabla.linalg.lstsq: b {list(b.shape)} does not match a {list(a.shape)}")
    u, s, vh = svd(a, full_matrices=False)
    if rcond is None:
        rcond = float(np.finfo(a.dtype.numpy).eps) * max(m, n)
    keep = ops.subtract(s, ops.multiply(rcond, ops.max(s, -1, keepdims=True))) > 0
    vector = b.ndim == 1
    bm = ops.reshape(b, (m, 1)) if vector else b
    coeffs = ops.multiply(ops.matmul(_swap(u), bm), ops.expand_dims(_inverse_values(s, keep), -1))
    x = ops.matmul(_swap(vh), coeffs)
    r = ops.subtract(bm, ops.matmul(a, x))
    residuals = ops.sum(ops.multiply(r, r), -2)
    rank = ops.sum(ops.astype(keep, x.dtype), -1)
    if vector:
        x, residuals = x[..., 0], residuals[..., 0]
    return LstsqResult(x, residuals, rank, s)


def matrix_power(a, n):
    """``a`` to the integer power ``n`` [..., m, m] by repeated squaring (log2 |n| products);
    n = 0 gives the identity, a negative n the power of ``inv(a)``."""
    if not isinstance(n, numbers.Integral) or isinstance(n, bool):
        raise TypeError(f"quabla.linalg.matrix_power: n must be an int, got {n!r}")
    a = matrices(a, "matrix_power", square=True)
    if n < 0:
        a, n = inv(a), -n
    result = None
    while n:
        if n & 1:
            result = a if result is None else ops.matmul(result, a)
        n >>= 1
        if n:
            a = ops.matmul(a, a)
    if result is None:
        eye = Tensor.wrap(np.eye(a.shape[-1], dtype=a.dtype.numpy))
        return ops.broadcast_to(eye, tuple(a.shape))
    return result
