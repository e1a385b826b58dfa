"""The MLX rules of the elementwise primitives of ``elementwise.yaml``, built from each entry's
``mlx`` template (so a new elementwise op is one table entry on MLX too), and the helpers the
templates name: ops whose MLX form differs from the reference's (``sign`` keeping the sign of a
zero, ``relu`` keeping NaN, a float64-accurate ``exp``)."""

import functools

import mlx.core as mx

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


_NAMESPACE = {"mx": mx, "power_by_squaring": power_by_squaring, "_sign": _sign, "_relu": _relu,
              "_exp": _exp, "_softplus": _softplus, "_logistic": _logistic}


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
