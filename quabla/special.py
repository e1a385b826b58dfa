"""Special functions, as ``jax.scipy.special`` names them (``qb.special``).

``erf``, ``erfc``, ``erfinv``, ``gammaln``, ``digamma``, ``polygamma``, ``ndtri``, ``xlogy``
and ``xlog1py`` are elementwise primitives (``quabla/core/elementwise.yaml``); ``digamma``,
``polygamma``, ``erfinv`` and ``ndtri`` run the scalar algorithms of
``quabla/core/special_functions.py`` on every back end. The others are composites. Values
follow SciPy; derivatives follow JAX: erf' = 2/sqrt(pi) exp(-x^2), erfinv' =
sqrt(pi)/2 exp(erfinv(x)^2), gammaln' = digamma, digamma' = polygamma(1, .), and each
polygamma's derivative is the next one. ``docs/math-functions.md`` lists where the values or
derivatives at poles and edges differ from JAX's.
"""

import numbers

from . import ops
from .array import as_index
from .core.special_functions import POLYGAMMA_MIN_X
from .core.tracing import bind

__all__ = ["erf", "erfc", "erfinv", "gammaln", "digamma", "polygamma", "xlogy", "xlog1py",
           "expit", "logit", "ndtr", "ndtri", "logsumexp", "POLYGAMMA_MIN_X"]

_SQRT_HALF = 0.7071067811865476


def erf(x):
    """The error function."""
    return ops.apply_unary("erf", x)


def erfc(x):
    """1 - erf(x), accurate where erf(x) is near 1."""
    return ops.apply_unary("erfc", x)


def erfinv(x):
    """The inverse of ``erf`` on [-1, 1] (+-inf at +-1, NaN outside)."""
    return ops.apply_unary("erf_inv", x)


def gammaln(x):
    """log |gamma(x)| (+inf at 0, -1, -2, ...); its derivative is ``digamma``."""
    return ops.apply_unary("lgamma", x)


def digamma(x):
    """The logarithmic derivative of gamma (NaN at 0, -1, -2, ..., as JAX's); its derivative
    is ``polygamma(1, x)``."""
    return ops.apply_unary("digamma", x)


def polygamma(n, x):
    """The ``n``-th derivative of ``digamma`` (``n`` a static int >= 0; 0 is digamma). At
    the poles +inf for odd ``n``, NaN for even ``n``; NaN for x below -1e5
    (``POLYGAMMA_MIN_X``: it steps up one unit at a time)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        n = as_index(n)
    if n < 0:
        raise ValueError(f"quabla.special.polygamma: n must be >= 0, got {n}")
    if n == 0:
        return digamma(x)
    (x,) = ops.promote("polygamma", (x,))
    return bind("polygamma", x, n=int(n))


def xlogy(x, y):
    """x log(y), 0 where x == 0 (whatever y is); derivatives log(y) and x / y (JAX's)."""
    return ops.apply_elementwise("xlogy", x, y)


def xlog1py(x, y):
    """x log(1 + y), 0 where x == 0; derivatives log1p(y) and x / (1 + y) (JAX's)."""
    return ops.apply_elementwise("xlog1py", x, y)


def expit(x):
    """The logistic sigmoid 1 / (1 + exp(-x))."""
    return ops.sigmoid(x)


def logit(x):
    """log(x / (1 - x)), the inverse of ``expit``."""
    return ops.log(ops.divide(x, ops.subtract(1.0, x)))


def ndtr(x):
    """The standard normal distribution function, as JAX computes it: from erf near 0, from
    erfc in the tails (so it keeps its relative accuracy there)."""
    (x,) = ops.promote("ndtr", (x,))
    w = ops.multiply(x, _SQRT_HALF)
    z = ops.abs(w)
    y = ops.where(ops.less(z, _SQRT_HALF), ops.add(1.0, erf(w)),
                  ops.where(ops.greater(w, 0.0), ops.subtract(2.0, erfc(z)), erfc(z)))
    return ops.multiply(0.5, y)


def ndtri(p):
    """The standard normal quantile: the inverse of ``ndtr`` on [0, 1] (-inf at 0, +inf at 1);
    its derivative is sqrt(2 pi) exp(ndtri(p)^2 / 2)."""
    return ops.apply_unary("ndtri", p)


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, where=None):
    """log(sum(b * exp(a))) over ``axis``, as ``jax.scipy.special.logsumexp``: the maximum
    (0 where it is not finite) is subtracted under ``stop_gradient``, so values and gradients
    stay finite for large ``a``; ``b`` weights the terms (negative weights need
    ``return_sign=True``, which also returns the sign of the sum); ``where`` masks terms out."""
    if b is None:
        (a,) = ops.promote("logsumexp", (a,))
    else:
        a, b = ops.broadcast_all("logsumexp", ops.promote("logsumexp", (a, b)))
        a = ops.where(ops.not_equal(b, 0.0), a, -float("inf"))
    if where is not None:
        a = ops.where(ops.broadcast_to(ops.as_bool(where, "logsumexp"), a.shape), a,
                      -float("inf"))
    amax = ops.max(a, axis, keepdims=True)
    amax = ops.stop_gradient(ops.where(ops.isfinite(amax), amax, 0.0))
    terms = ops.exp(ops.subtract(a, amax))
    if b is not None:
        terms = ops.multiply(terms, b)
    total = ops.sum(terms, axis, keepdims=True)
    sign = ops.sign(total)
    total = ops.abs(total)
    out = ops.add(ops.log(total), amax)
    if not keepdims:
        axes = ops.normalize_axes(axis, a.ndim, "logsumexp")
        shape = tuple(n for d, n in enumerate(a.shape) if d not in axes)
        out = ops.reshape(out, shape)
        sign = ops.reshape(sign, shape)
    if return_sign:
        return out, sign
    if b is not None:  # a negative sum has no real log: NaN, as JAX gives without return_sign
        out = ops.where(ops.less(sign, 0.0), float("nan"), out)
    return out
