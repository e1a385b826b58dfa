"""The special functions that no math library offers on every back end (digamma, polygamma,
erfinv, ndtri), each written once as a scalar algorithm in plain Python on floats with
``math`` only, and once on arrays.

The scalar forms are what the loop-nest back ends run: numba.cuda compiles them as device
functions (its simulator runs them as Python), the Numba CPU back end as functions of its
entries' target (lowering/numba_cpu/runtime.py). The array forms (``*_array(x, xp)``, for
``xp`` NumPy or ``mlx.core``) take the same steps in the same order, with ``where`` in place
of each branch, so the NumPy reference (the interpreter, eager mode) gives the scalar forms'
numbers (within an ulp or two of the libraries' ``log``, ``tan``, ``erf``). Each computes in
float64; the callers round to the operand's dtype.

Algorithms (the coefficients are mathematical facts or published fits, cited where used):

- digamma: psi(x) = psi(1 - x) - pi cot(pi x) for x <= 0, then psi(x) = psi(x + 1) - 1/x up
  to x >= 10, then the asymptotic series ln x - 1/(2x) - sum B_2k / (2k x^2k) to k = 7.
- polygamma(n, x), n >= 1: the recurrence psi_n(x) = psi_n(x + 1) + (-1)^(n+1) n! / x^(n+1)
  up to x >= 10 + 2n, then the asymptotic series with the Bernoulli numbers to B_20. A
  negative x takes one step per unit below that (none below -1e5: NaN, documented).
- ndtri: P. J. Acklam's rational approximation of the normal quantile (relative error below
  1.2e-9) on the lower half, then one Halley step on ndtr = erfc(-x / sqrt 2) / 2; the upper
  half by symmetry (1 - p is exact there).
- erfinv: for |y| <= 1/2, M. Giles' single-precision approximation ("Approximating the erfinv
  function", GPU Computing Gems, 2011) then two Halley steps on erf; above, ndtri's steps for
  -ndtri((1 - |y|) / 2) / sqrt 2 (``quantile`` computes both).
"""

import math
from fractions import Fraction

__all__ = ["digamma", "polygamma", "quantile", "erfinv", "ndtri", "digamma_array",
           "polygamma_array", "erfinv_array", "ndtri_array", "POLYGAMMA_MIN_X"]

_WHOLE = 4503599627370496.0  # 2**52: every float at least this large is a whole number
POLYGAMMA_MIN_X = -1e5        # polygamma steps up one unit at a time: NaN below this

# digamma's asymptotic series: B_2k / 2k for k = 1..7, as the nested form uses them
_PSI_SERIES = (1.0 / 12.0, 1.0 / 120.0, 1.0 / 252.0, 1.0 / 240.0, 1.0 / 132.0,
               691.0 / 32760.0, 1.0 / 12.0)


def _bernoulli(count):
    """B_2, B_4, ..., B_2count as fractions (the Akiyama-Tanigawa algorithm)."""
    out = []
    a = []
    for m in range(2 * count + 1):
        a.append(Fraction(1, m + 1))
        for j in range(m, 0, -1):
            a[j - 1] = j * (a[j - 1] - a[j])
        if m >= 2 and m % 2 == 0:
            out.append(a[0])
    return out


# polygamma's asymptotic series: B_2k / (2k)! for k = 1..10
_POLYGAMMA_SERIES = tuple(float(b / math.factorial(2 * k))
                          for k, b in enumerate(_bernoulli(10), start=1))

# M. Giles' single-precision erfinv: a polynomial in w - 2.5 for w = -log(1 - x^2) < 5, and
# in sqrt(w) - 3 above (coefficients from the highest degree down)
_GILES_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                  0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_GILES_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
               0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)

# P. J. Acklam's normal quantile: the central region's numerator (a) and denominator (b) in
# r = (p - 1/2)^2, the tail's (c, d) in q = sqrt(-2 log p)
_ACKLAM_A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00)
_ACKLAM_B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
             6.680131188771972e+01, -1.328068155288572e+01)
_ACKLAM_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00)
_ACKLAM_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
             3.754408661907416e+00)
_ACKLAM_LOW = 0.02425

_TWO_OVER_SQRT_PI = 1.1283791670955126
_SQRT_HALF = 0.7071067811865476
_SQRT_2PI = 2.5066282746310002


# -- scalar forms ------------------------------------------------------------------------------

def digamma(x):
    """psi(x): NaN at the poles (0, -1, -2, ...) as JAX gives, and at -inf and NaN."""
    if x != x or x == -math.inf:
        return math.nan
    if x == math.inf:
        return math.inf
    result = 0.0
    if x <= 0.0:
        if x < -_WHOLE:
            return math.nan
        s = x - math.floor(x + 0.5)  # x less the nearest whole number: cot(pi x) = cot(pi s)
        if s == 0.0:
            return math.nan
        result = -math.pi / math.tan(math.pi * s)
        x = 1.0 - x
    while x < 10.0:
        result -= 1.0 / x
        x += 1.0
    z = 1.0 / (x * x)
    c = _PSI_SERIES
    series = z * (c[0] - z * (c[1] - z * (c[2] - z * (c[3] - z * (c[4] - z * (c[5] - z * c[6]))))))
    return result + math.log(x) - 0.5 / x - series


def polygamma(n, x):
    """The n-th derivative of digamma (n >= 1): at a pole +inf for odd n and NaN for even n
    (the two sides' limits differ), as JAX gives; NaN below ``POLYGAMMA_MIN_X``."""
    if x != x or x == -math.inf or x < POLYGAMMA_MIN_X:
        return math.nan
    if x == math.inf:
        return 0.0
    if x <= 0.0 and x == math.floor(x):
        return math.inf if n % 2 == 1 else math.nan
    factorial = 1.0
    for k in range(2, n + 1):
        factorial *= k
    limit = 10.0 + 2.0 * n
    acc = 0.0
    while x < limit:
        power = x
        for _ in range(n):
            power *= x
        acc += 1.0 / power
        x += 1.0
    t = 1.0 / x
    t2 = t * t
    series = 0.0
    rising = 1.0
    tk = 1.0
    j = 0
    for c in _POLYGAMMA_SERIES:
        rising *= (n + j) * (n + j + 1.0)
        tk *= t2
        series += c * rising * tk
        j += 2
    tn = t
    for _ in range(n - 1):
        tn *= t
    total = factorial * acc + (factorial / n) * tn * (1.0 + 0.5 * n * t + series)
    return total if n % 2 == 1 else -total


def quantile(v, kind):
    """ndtri(v) for ``kind`` 0, erfinv(v) for ``kind`` 1: one function, since the back ends
    compile each scalar function on its own (one cannot call another). Above 1/2 in
    magnitude erfinv(y) is -ndtri((1 - |y|) / 2) / sqrt 2, where 1 - |y| is exact."""
    if v != v:
        return math.nan
    if kind == 0:
        if v < 0.0 or v > 1.0:
            return math.nan
        if v == 0.0:
            return -math.inf
        if v == 1.0:
            return math.inf
        q = v if v <= 0.5 else 1.0 - v
        sign = -1.0 if v > 0.5 else 1.0
        scale = 1.0
    else:
        if v < -1.0 or v > 1.0:
            return math.nan
        a = abs(v)
        if a <= 0.5:
            w = -math.log((1.0 - a) * (1.0 + a)) - 2.5
            p = 0.0
            for c in _GILES_CENTRAL:
                p = c + p * w
            x = p * a
            for _ in range(2):  # Halley's method on erf(x) - a, whose f''/f' is -2x
                d = (math.erf(x) - a) / (_TWO_OVER_SQRT_PI * math.exp(-x * x))
                x = x - d / (1.0 + x * d)
            return math.copysign(x, v)
        q = 0.5 * (1.0 - a)
        if q == 0.0:
            return math.copysign(math.inf, v)
        sign = -1.0 if v > 0.0 else 1.0
        scale = _SQRT_HALF
    # Acklam's start for the quantile of q <= 1/2 (a non-positive x)
    if q < _ACKLAM_LOW:
        r = math.sqrt(-2.0 * math.log(q))
        num = 0.0
        for c in _ACKLAM_C:
            num = num * r + c
        den = 0.0
        for c in _ACKLAM_D:
            den = den * r + c
        x = num / (den * r + 1.0)
    else:
        s = q - 0.5
        r = s * s
        num = 0.0
        for c in _ACKLAM_A:
            num = num * r + c
        den = 0.0
        for c in _ACKLAM_B:
            den = den * r + c
        x = num * s / (den * r + 1.0)
    # one Halley step on ndtr(x) - q, that difference as erf(x / sqrt 2) / 2 - (q - 1/2)
    # near the middle (q - 1/2 is exact there), else with erfc (accurate in the tail);
    # exp(x^2 / 2) in two factors: it overflows for q below 1e-308, where the product does not
    if q > 0.25:
        e = 0.5 * math.erf(x * _SQRT_HALF) - (q - 0.5)
    else:
        e = 0.5 * math.erfc(-x * _SQRT_HALF) - q
    h = math.exp(0.25 * x * x)
    u = e * _SQRT_2PI * h * h
    x = x - u / (1.0 + 0.5 * x * u)
    return sign * (x * scale)


def erfinv(y):
    """The inverse of erf on [-1, 1] (+-inf at +-1, NaN outside); keeps the sign of a zero."""
    return quantile(y, 1)


def ndtri(p):
    """The standard normal quantile on [0, 1] (-inf at 0, +inf at 1, NaN outside)."""
    return quantile(p, 0)


# -- array forms: the same steps on float64 arrays, each branch a ``where`` -----------------

def _ones_like(x, xp):
    return xp.ones_like(x)


def digamma_array(x, xp):
    """``digamma`` elementwise; ``xp`` is NumPy or mlx.core (10 masked recurrence steps
    cover every x, as the scalar loop takes at most 10)."""
    where = xp.where
    nan = x != x
    pole = (x <= 0.0) & (x == xp.floor(x))
    reflect = x <= 0.0
    safe = where(reflect & ~pole & (x >= -_WHOLE), x, 0.5)
    s = safe - xp.floor(safe + 0.5)
    result = where(reflect, -math.pi / xp.tan(math.pi * s), 0.0 * x)
    y = where(reflect, 1.0 - safe, where(nan | (x == math.inf), 10.0, x))
    for _ in range(10):
        step = y < 10.0
        result = where(step, result - 1.0 / where(step, y, 1.0), result)
        y = where(step, y + 1.0, y)
    z = 1.0 / (y * y)
    c = _PSI_SERIES
    series = z * (c[0] - z * (c[1] - z * (c[2] - z * (c[3] - z * (c[4] - z * (c[5] - z * c[6]))))))
    out = result + xp.log(y) - 0.5 / y - series
    out = where(x == math.inf, math.inf, out)
    return where(nan | pole | (x == -math.inf) | (reflect & (x < -_WHOLE)), math.nan, out)


def _polygamma_series(n, x, xp, acc, factorial):
    """polygamma's asymptotic part at ``x`` (all >= 10 + 2n) plus ``acc``'s recurrence
    terms, with the sign of order ``n``."""
    t = 1.0 / x
    t2 = t * t
    series = 0.0 * x
    rising = 1.0
    tk = _ones_like(x, xp)
    j = 0
    for c in _POLYGAMMA_SERIES:
        rising *= (n + j) * (n + j + 1.0)
        tk = tk * t2
        series = series + c * rising * tk
        j += 2
    tn = t
    for _ in range(n - 1):
        tn = tn * t
    total = factorial * acc + (factorial / n) * tn * (1.0 + 0.5 * n * t + series)
    return total if n % 2 == 1 else -total


def polygamma_array(n, x, xp, steps=None):
    """``polygamma(n, x)`` elementwise. NumPy (``steps`` None) steps until every element is
    past the series' limit, as the scalar loop does; ``steps`` fixes the number of steps (a
    compiled MLX function cannot loop on data), enough for x > 0 only."""
    where = xp.where
    factorial = float(math.factorial(n))
    limit = 10.0 + 2.0 * n
    nan = (x != x) | (x == -math.inf) | (x < POLYGAMMA_MIN_X)
    pole = (x <= 0.0) & (x == xp.floor(x))
    y = where(nan | pole | (x == math.inf), limit, x)
    acc = 0.0 * x
    count = 0
    while (steps is None and bool(xp.any(y < limit))) or (steps is not None and count < steps):
        step = y < limit
        power = where(step, y, 1.0)
        base = power
        for _ in range(n):
            power = power * base
        acc = where(step, acc + 1.0 / power, acc)
        y = where(step, y + 1.0, y)
        count += 1
    out = _polygamma_series(n, y, xp, acc, factorial)
    out = where(x == math.inf, 0.0, out)
    out = where(pole, math.inf if n % 2 == 1 else math.nan, out)
    return where(nan, math.nan, out)


def _horner(coefficients, w, xp):
    p = 0.0 * w
    for c in coefficients:
        p = c + p * w
    return p


def erfinv_array(y, xp, erf, erfc):
    """``erfinv`` elementwise, with the elementwise ``erf`` and ``erfc`` given."""
    where = xp.where
    a = xp.abs(y)
    small = a <= 0.5
    a_in = where(small, a, 0.0)
    w = -xp.log((1.0 - a_in) * (1.0 + a_in)) - 2.5
    x = _horner(_GILES_CENTRAL, w, xp) * a_in
    for _ in range(2):
        d = (erf(x) - a_in) / (_TWO_OVER_SQRT_PI * xp.exp(-x * x))
        x = x - d / (1.0 + x * d)
    q = 0.5 * (1.0 - where(small | (a > 1.0), 0.75, a))
    tail = -(_ndtri_lower(q, xp, erf, erfc) * _SQRT_HALF)
    x = where(small, x, where(q == 0.0, math.inf, tail))
    x = where(y < 0.0, -x, where(y == 0.0, y, x))
    return where((y != y) | (a > 1.0), math.nan, x)


def _ndtri_lower(q, xp, erf, erfc, refine=True):
    """The quantile of 0 <= q <= 1/2 (Acklam's start, then a Halley step)."""
    where = xp.where
    tail = q < _ACKLAM_LOW
    r = xp.sqrt(-2.0 * xp.log(where(tail, q, _ACKLAM_LOW)))
    num = 0.0 * r
    for c in _ACKLAM_C:
        num = num * r + c
    den = 0.0 * r
    for c in _ACKLAM_D:
        den = den * r + c
    x_tail = num / (den * r + 1.0)
    s = q - 0.5
    r = s * s
    num = 0.0 * r
    for c in _ACKLAM_A:
        num = num * r + c
    den = 0.0 * r
    for c in _ACKLAM_B:
        den = den * r + c
    x = where(tail, x_tail, num * s / (den * r + 1.0))
    if refine:
        e = where(q > 0.25, 0.5 * erf(x * _SQRT_HALF) - (q - 0.5),
                  0.5 * erfc(-x * _SQRT_HALF) - q)
        h = xp.exp(0.25 * x * x)
        u = e * _SQRT_2PI * h * h
        x = x - u / (1.0 + 0.5 * x * u)
    return x


def ndtri_array(p, xp, erf, erfc, refine=True):
    """``ndtri`` elementwise, with the elementwise ``erf`` and ``erfc`` given (``refine=False``: the
    rational start alone, within 1.2e-9, which float32 needs no more than)."""
    where = xp.where
    inside = (p > 0.0) & (p < 1.0)
    safe = where(inside, p, 0.5)
    upper = safe > 0.5
    x = _ndtri_lower(where(upper, 1.0 - safe, safe), xp, erf, erfc, refine)
    x = where(upper, -1.0 * x, x)
    x = where(p == 0.0, -math.inf, where(p == 1.0, math.inf, x))
    return where((p != p) | (p < 0.0) | (p > 1.0), math.nan, x)
