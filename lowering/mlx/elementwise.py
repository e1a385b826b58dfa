"""The MLX rules of the elementwise primitives of ``elementwise.yaml``, built from each entry's
``mlx`` template (so a new elementwise op is one table entry on MLX too), and the helpers the
templates name: ops whose MLX form differs from the reference's (``sign`` keeping the sign of a
zero, ``relu`` keeping NaN, a float64-accurate ``exp``)."""

import functools
import math

import mlx.core as mx

from quabla.core import special_functions as _special
from quabla.core.primitives import PRIMITIVES
from quabla.core.rules.elementwise import power_by_squaring

__all__ = ["elementwise_rule"]

_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10  # ln 2 = hi + lo


def _sign(x):
    """sign that keeps the sign of a zero and NaN, as ``np.copysign(np.sign(x), x)``."""
    one = mx.ones_like(x)
    return mx.where(x > 0, one, mx.where(x < 0, -one, x))


def _relu(x):
    return mx.where((x > 0) | mx.isnan(x), x, mx.zeros_like(x))


def _exp(x):
    """exp; in float64 as 2^k (expm1(r) + 1), x = k ln 2 + r, since MLX's own float64 exp is
    only float32-accurate (its expm1 is not). 2^k is split in two halves so that it does not
    overflow before exp does; beyond |x| = 746 exp is 0, inf or NaN, as MLX gives it."""
    if x.dtype != mx.float64:
        return mx.exp(x)
    inside = mx.abs(x) < 746.0
    k = mx.round(mx.where(inside, x, 0.0) * (1.0 / _LN2_HI))
    r = (x - k * _LN2_HI) - k * _LN2_LO
    half = mx.floor(k * 0.5)
    two = mx.array(2.0, dtype=x.dtype)
    scaled = (mx.expm1(r) + 1.0) * mx.power(two, half) * mx.power(two, k - half)
    return mx.where(inside, scaled, mx.exp(x))


def _softplus(x):
    return mx.log1p(_exp(-mx.abs(x))) + mx.maximum(x, mx.zeros_like(x))


def _logistic(x):
    return 1.0 / (1.0 + _exp(-x))


# -- the elementwise math of issue 24: float32-accurate forms where MLX has no op ----------

def _floor_divide(x, y):
    """NumPy's floored quotient: (x - remainder(x, y)) / y is whole up to rounding; x / y
    where y is 0; 0 or -1 for a finite x over an infinite y."""
    q = mx.where(y == 0, x / y, mx.round((x - mx.remainder(x, y)) / y))
    by_infinity = mx.isinf(y) & ~mx.isinf(x) & (x == x)
    opposite = (x != 0) & ((x < 0) != (y < 0))
    return mx.where(by_infinity, mx.where(opposite, -1.0, 0.0), q)


def _exp2(x):
    return mx.power(mx.array(2.0, dtype=x.dtype), x)


def _cbrt(x):
    """|x| ** (1/3) and one Newton step, with the sign of x (0, infinities and NaN kept)."""
    a = mx.abs(x)
    keep = (x == 0) | ~(a < math.inf)
    a = mx.where(keep, mx.ones_like(a), a)
    y = mx.power(a, 1.0 / 3.0)
    y = y - (y * y * y - a) / (3.0 * y * y)
    return mx.where(keep, x, mx.where(x < 0, -y, y))


def _hypot(x, y):
    ax, ay = mx.abs(x), mx.abs(y)
    big, small = mx.maximum(ax, ay), mx.minimum(ax, ay)
    r = small / mx.where(big == 0, mx.ones_like(big), big)
    out = big * mx.sqrt(1.0 + r * r)
    return mx.where(mx.isinf(ax) | mx.isinf(ay), mx.full(out.shape, math.inf, out.dtype), out)


def _erfc(x):
    """erfc with relative error below 1.2e-7 (the Chebyshev fit of Numerical Recipes' erfcc)."""
    z = mx.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    p = 0.17087277
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418,
              0.37409196, 1.00002368, -1.26551223):
        p = c + t * p
    ans = t * mx.exp(-z * z + p)
    return mx.where(x >= 0, ans, 2.0 - ans)


def _erf_inv(x):
    return mx.erfinv(x)


def _lgamma(x):
    """log|gamma(x)|: Stirling's series at y >= 10 (y = x, or 1 - x below 1/2, reflected),
    reached by 10 recurrence steps; +inf at the poles and infinities."""
    reflect = x < 0.5
    y = mx.where(reflect, 1.0 - x, x)
    y = mx.where(y != y, mx.ones_like(y), mx.minimum(y, mx.full(y.shape, 1e30, y.dtype)))
    product = mx.ones_like(y)
    for _ in range(10):
        step = y < 10.0
        product = mx.where(step, product * y, product)
        y = mx.where(step, y + 1.0, y)
    z = 1.0 / (y * y)
    series = (1.0 / 12.0 - z * (1.0 / 360.0 - z * (1.0 / 1260.0 - z / 1680.0))) / y
    lg = (y - 0.5) * mx.log(y) - y + 0.9189385332046728 + series - mx.log(product)
    s = x - mx.floor(x + 0.5)
    out = mx.where(reflect, mx.log(math.pi / mx.abs(mx.sin(math.pi * s))) - lg, lg)
    pole = (x <= 0) & (x == mx.floor(x))
    inf = mx.full(out.shape, math.inf, out.dtype)
    return mx.where(pole | mx.isinf(x), inf, mx.where(x != x, x, out))


def _digamma(x):
    return _special.digamma_array(x, mx)


def _cot_derivative(n):
    """The coefficients (lowest degree first) of P_n with d^n/dt^n cot t = P_n(cot t)."""
    p = [0, 1]
    for _ in range(n):
        d = [(i + 1) * p[i + 1] for i in range(len(p) - 1)] + [0, 0]
        p = [-(d[i] + (d[i - 2] if i >= 2 else 0)) for i in range(len(d))]
    return p


def _polygamma(x, n):
    """polygamma(n, x): the series at x > 0 after a fixed number of steps, and below 0 the
    reflection psi_n(x) = (-1)^n psi_n(1 - x) - pi^(n+1) P_n(cot pi x) (MLX cannot loop on
    data as the other back ends do)."""
    negative = x < 0
    positive = _special.polygamma_array(n, mx.where(negative, 1.0 - x, x), mx,
                                        steps=int(10 + 2 * n) + 1)
    # cot(pi x) = cot(pi s), s = x less its nearest whole number; for |s| > 1/4 as
    # tan(pi (1/2 - |s|)) (exact argument), since P_n's pi^(n+1) magnifies its rounding
    s = x - mx.floor(x + 0.5)
    a = mx.abs(s)
    c = mx.where(a > 0.25, mx.where(s < 0, -1.0, 1.0) * mx.tan(math.pi * (0.5 - a)),
                 1.0 / mx.tan(math.pi * mx.where(s == 0, mx.full(s.shape, 0.5, s.dtype), s)))
    p = mx.zeros_like(c)
    for coefficient in reversed(_cot_derivative(n)):
        p = p * c + float(coefficient)
    reflected = (-1.0) ** n * positive - math.pi ** (n + 1) * p
    out = mx.where(negative, reflected, positive)
    pole = negative & (x == mx.floor(x))
    out = mx.where(pole, mx.full(out.shape, math.inf if n % 2 else math.nan, out.dtype), out)
    return mx.where(x < _special.POLYGAMMA_MIN_X, mx.full(out.shape, math.nan, out.dtype), out)


def _ndtri(x):
    """The other back ends' steps in MLX's precision (the Halley step makes good the rational
    start's rounding in float32)."""
    return _special.ndtri_array(x, mx, mx.erf, _erfc)


def _xlogy(x, y):
    return mx.where(x == 0, mx.zeros_like(x), x * mx.log(y))


def _xlog1py(x, y):
    return mx.where(x == 0, mx.zeros_like(x), x * mx.log1p(y))


_NAMESPACE = {"mx": mx, "power_by_squaring": power_by_squaring, "_sign": _sign, "_relu": _relu,
              "_exp": _exp, "_softplus": _softplus, "_logistic": _logistic,
              "_floor_divide": _floor_divide, "_exp2": _exp2, "_cbrt": _cbrt, "_hypot": _hypot,
              "_erfc": _erfc, "_erf_inv": _erf_inv, "_lgamma": _lgamma, "_digamma": _digamma,
              "_polygamma": _polygamma, "_ndtri": _ndtri, "_xlogy": _xlogy,
              "_xlog1py": _xlog1py}


@functools.lru_cache(maxsize=None)
def elementwise_rule(op):
    """``rule(ctx, *operands, **params)`` from the ``mlx`` template of ``op``'s table entry,
    or None (not an op of the table, or no template)."""
    prim = PRIMITIVES.get(op)
    spec = prim.spec if prim is not None else None
    if not spec or "mlx" not in spec:
        return None
    names, params = spec["operands"], spec.get("params", [])
    body = spec["mlx"].format(**{n: n for n in names + params})
    signature = ", ".join(["ctx"] + names) + (", *, " + ", ".join(params) if params else "")
    return eval(f"lambda {signature}: {body}", dict(_NAMESPACE))  # our own table
