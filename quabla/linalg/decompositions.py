"""The decompositions of ``qb.linalg`` as ``jax.numpy.linalg`` names and returns them:
``slogdet``/``det``, ``eigh``/``eigvalsh``, ``svd``, ``qr``. Each binds one primitive
(quabla/core/rules/decompositions.py, where the packed layouts and the conventions are) and
unpacks its result; every one takes leading batch axes [..., m, n]."""

from typing import NamedTuple

from .. import ops
from ..core.rules.decompositions import eigh_parts, qr_parts, svd_parts
from ..core.tracing import bind

__all__ = ["SlogdetResult", "EighResult", "SVDResult", "QRResult",
           "slogdet", "det", "eigh", "eigvalsh", "svd", "qr"]


class SlogdetResult(NamedTuple):
    sign: object
    logabsdet: object


class EighResult(NamedTuple):
    eigenvalues: object
    eigenvectors: object


class SVDResult(NamedTuple):
    U: object
    S: object
    Vh: object


class QRResult(NamedTuple):
    Q: object
    R: object


def matrices(a, name, square=False):
    """``a`` as a floating stack of matrices [..., m, n] (square ones with ``square``)."""
    (a,) = ops.promote(f"linalg.{name}", (a,))
    if a.ndim < 2 or (square and a.shape[-1] != a.shape[-2]):
        kind = "square matrices [..., n, n]" if square else "matrices [..., m, n]"
        raise ValueError(f"quabla.linalg.{name} needs {kind}, got shape {list(a.shape)}")
    return a


def slogdet(a):
    """(sign, log|det a|) of square matrices [..., n, n], by LU with partial pivoting:
    (0, -inf) for a singular matrix, NaN for one holding a NaN or an inf. The derivative of
    log|det a| is a^-T (inf/NaN at a singular matrix); the sign's is zero."""
    packed = bind("slogdet", matrices(a, "slogdet", square=True))
    return SlogdetResult(packed[..., 0], packed[..., 1])


def det(a):
    """The determinants of square matrices [..., n, n]: sign * exp(log|det|). The gradient
    det(a) a^-T is NaN at a singular matrix (JAX gives the adjugate there)."""
    sign, logabsdet = slogdet(a)
    return ops.multiply(sign, ops.exp(logabsdet))


def _lower(UPLO, name):
    if UPLO not in (None, "L", "U"):
        raise ValueError(f"quabla.linalg.{name}: UPLO must be 'L' or 'U', got {UPLO!r}")
    return UPLO != "U"


def _symmetric(a, name, symmetrize_input):
    a = matrices(a, name, square=True)
    if symmetrize_input:
        a = ops.multiply(0.5, ops.add(a, ops.transpose(a, _swap_last(a.ndim))))
    return a


def _swap_last(ndim):
    return tuple(range(ndim - 2)) + (ndim - 1, ndim - 2)


def eigh(a, UPLO=None, symmetrize_input=True):
    """(eigenvalues ascending [..., n], eigenvectors as columns [..., n, n]) of symmetric
    matrices, as ``jnp.linalg.eigh``: the input is symmetrized first (``symmetrize_input``),
    else only its ``UPLO`` triangle ('L', the default, or 'U') is read. Each eigenvector's
    entry of largest magnitude is positive (JAX leaves LAPACK's signs; quabla fixes them so
    every back end agrees). Where eigenvalues repeat, the eigenvectors' derivative is inf/NaN
    (as JAX's); the eigenvalues' derivative stays finite."""
    lower = _lower(UPLO, "eigh")
    packed = bind("eigh", _symmetric(a, "eigh", symmetrize_input), lower=lower, vectors=True)
    return EighResult(*eigh_parts(packed))


def eigvalsh(a, UPLO="L", symmetrize_input=True):
    """The eigenvalues (ascending) of symmetric matrices, as ``jnp.linalg.eigvalsh``; their
    derivative is finite also where they repeat."""
    lower = _lower(UPLO, "eigvalsh")
    return bind("eigh", _symmetric(a, "eigvalsh", symmetrize_input), lower=lower,
                vectors=False)


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """(U [..., m, ku], S [..., k] descending, Vh [..., kv, n]) with a = U diag(S) Vh, as
    ``jnp.linalg.svd`` (k = min(m, n); ku, kv = m, n with ``full_matrices``, else k); S alone
    without ``compute_uv``. Each column of U has its entry of largest magnitude positive.
    Derivatives: S's is finite everywhere; U's and Vh's are inf/NaN where singular values
    repeat (as JAX's), and not implemented for ``full_matrices`` of a non-square matrix (as
    in JAX). ``hermitian`` is accepted and ignored."""
    a = matrices(a, "svd")
    m, n = a.shape[-2:]
    full = bool(full_matrices) and m != n
    if not compute_uv:
        return bind("svd", a, full_matrices=False, compute_uv=False)
    packed = bind("svd", a, full_matrices=full, compute_uv=True)
    return SVDResult(*svd_parts(packed, m, n, full))


def qr(a, mode="reduced"):
    """(Q, R) with a = Q R, as ``jnp.linalg.qr``: ``mode`` "reduced" (Q [..., m, k]),
    "complete" (Q [..., m, m]) or "r" (R alone). R's diagonal is nonnegative. Derivatives
    (as JAX's) need m >= n and are not implemented for "complete" with m > n."""
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"quabla.linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    a = matrices(a, "qr")
    m, n = a.shape[-2:]
    complete = mode == "complete" and m > n
    q, r = qr_parts(bind("qr", a, complete=complete), m, n, complete)
    return r if mode == "r" else QRResult(q, r)
