"""Samplers of correlated vectors and of matrices: multivariate_normal and orthogonal, both
standard normals transformed by a LAPACK factorization (through NumPy)."""

import math

import numpy as np

from .. import dtypes
from ..array import array_shape
from .arguments import check_batch, finish, float_dtype, positive_size, real_array
from .keys import check_key
from .outputs import standard_normals


def multivariate_normal(key, mean, cov, shape=None, dtype=dtypes.float64, method="cholesky"):
    """Normal samples with mean ``mean`` (``(..., n)``) and covariance ``cov`` (``(..., n, n)``).

    The result has shape ``shape + (n,)``; ``shape`` defaults to the broadcast of
    ``mean.shape[:-1]`` and ``cov.shape[:-2]``. Algorithm: ``z = normal(key, shape + (n,))``
    (float64) and ``x = mean + A @ z`` with the factor ``A A^T = cov``: ``method="cholesky"``
    the lower Cholesky factor (``cov`` must be positive definite, only its lower triangle is
    read); ``"eigh"``: ``V * sqrt(max(w, 0))`` from ``w, V = eigh(cov)``; ``"svd"``:
    ``U * sqrt(s)`` from ``U, s, _ = svd(cov)``. Factors come from LAPACK through NumPy, so
    the ``eigh`` and ``svd`` samples can differ between LAPACK builds (eigenvector signs).
    """
    k = check_key(key)
    dt = float_dtype(dtype)
    mean = real_array(mean, "mean")
    cov = real_array(cov, "cov")
    if method not in ("cholesky", "eigh", "svd"):
        raise ValueError(f"method must be 'cholesky', 'eigh' or 'svd', got {method!r}")
    if mean.ndim < 1 or cov.ndim < 2:
        raise ValueError("mean must have rank 1 or more and cov rank 2 or more")
    n = mean.shape[-1]
    if cov.shape[-2:] != (n, n):
        raise ValueError(
            f"cov must have shape (..., {n}, {n}) to match mean, got {list(cov.shape)}"
        )
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))):
        raise ValueError("mean and cov must be finite")
    try:
        batch = np.broadcast_shapes(mean.shape[:-1], cov.shape[:-2])
    except ValueError:
        raise ValueError(f"the batch shapes of mean {list(mean.shape)} and cov "
                         f"{list(cov.shape)} do not broadcast together") from None
    if shape is None:
        shape = batch
    else:
        shape = array_shape(shape)
        check_batch(shape, batch, "batch shape of mean and cov")
    if method == "cholesky":
        try:
            factor = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            raise ValueError("cov is not positive definite; use method='eigh' or 'svd' for a "
                             "semi-definite covariance") from None
    elif method == "eigh":
        w, vecs = np.linalg.eigh(cov)
        factor = vecs * np.sqrt(np.maximum(w, 0.0))[..., None, :]
    else:
        u, s, _ = np.linalg.svd(cov)
        factor = u * np.sqrt(s)[..., None, :]
    z = standard_normals(k.state, math.prod(shape) * n).reshape(shape + (n,))
    return finish(mean + np.einsum("...ij,...j->...i", factor, z), dt)


def orthogonal(key, n, shape=(), dtype=dtypes.float64, m=None):
    """Haar-distributed orthogonal ``n x n`` matrices (``n x m``: orthonormal columns or rows).

    Algorithm (JAX's): ``z = normal(key, shape + (max(n, m), min(n, m)))`` (float64), the
    reduced QR ``z = Q R`` (LAPACK through NumPy), and ``Q`` times the sign of ``diag(R)``
    column by column (+1 where that is 0), which makes the factorization unique and ``Q``
    Haar-distributed; transposed when ``n < m``. Rounded to ``dtype`` at the end.
    """
    k = check_key(key)
    dt = float_dtype(dtype)
    shape = array_shape(shape)
    n = positive_size(n, "n")
    m = n if m is None else positive_size(m, "m")
    rows, cols = max(n, m), min(n, m)
    z = standard_normals(k.state, math.prod(shape) * rows * cols).reshape(shape + (rows, cols))
    q, r = np.linalg.qr(z)
    d = np.diagonal(r, axis1=-2, axis2=-1)
    q = q * np.where(d < 0.0, -1.0, 1.0)[..., None, :]
    if n < m:
        q = np.swapaxes(q, -1, -2)
    return finish(q, dt)
