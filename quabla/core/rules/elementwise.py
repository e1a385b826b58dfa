"""Builds the rule tables of the elementwise primitives from ``elementwise.yaml``.

Shape, dtype and batching rules are shared by every elementwise op; the NumPy reference and
the scalar template come from the table, and the JVP and VJP rules both come from the declared
partial derivatives.
"""

import functools
import math
import pathlib

import numpy as np
import yaml

from ... import dtypes as _dt
from ... import ops
from .. import special_functions as _sf
from ..primitives import Primitive, Zero, is_zero, register

TABLE_PATH = pathlib.Path(__file__).resolve().parent.parent / "elementwise.yaml"


# -- NumPy helpers named by the templates (the back ends define their own scalar versions) ---

def _logistic(x):
    return 1.0 / (1.0 + np.exp(-x))


def _relu(x):
    """max(x, 0) with NaN kept and +0.0 for -0.0."""
    return np.where((x > 0) | np.isnan(x), x, np.zeros_like(x))


def _softplus(x):
    """log(1 + exp(x)) without overflow."""
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


def power_by_squaring(one, x, n):
    """x ** n (n >= 0) by repeated squaring, starting from ``one``: the one algorithm that both
    the NumPy reference (on arrays) and the loop-nest back ends (on scalars) run."""
    result = one
    base = x
    while n:
        if n & 1:
            result = result * base
        n >>= 1
        if n:
            base = base * base
    return result


def _integer_pow(x, n):
    return power_by_squaring(np.ones_like(x), x, n)


def _in_float64(fn):
    """``fn`` (of float64 arrays) run in float64 and rounded to the operands' dtype, as the
    back ends' scalar helpers compute; NumPy's warnings are silenced (NaN and inf are values)."""
    def apply(*xs):
        dtype = np.result_type(*xs)
        with np.errstate(all="ignore"):
            out = fn(*(np.asarray(x, dtype=np.float64) for x in xs))
        return np.asarray(out, dtype=np.float64).astype(dtype)
    apply.__name__ = fn.__name__
    return apply


def _vectorized(scalar):
    """A ``math`` function of one float applied to each element of a float64 array."""
    ufunc = np.frompyfunc(scalar, 1, 1)
    return lambda x: np.asarray(ufunc(x), dtype=np.float64)


def _lgamma_scalar(x):
    try:
        return math.lgamma(x)
    except ValueError:  # Python raises at the poles 0, -1, -2, ..., where libm gives +inf
        return math.inf


_erf_float64 = _vectorized(math.erf)
_erfc_float64 = _vectorized(math.erfc)


def _xlogy(x, y):
    with np.errstate(all="ignore"):
        return np.where(x == 0, np.zeros_like(x), x * np.log(y))


def _xlog1py(x, y):
    with np.errstate(all="ignore"):
        return np.where(x == 0, np.zeros_like(x), x * np.log1p(y))


NUMPY_NAMESPACE = {
    "np": np, "_logistic": _logistic, "_relu": _relu, "_softplus": _softplus,
    "_integer_pow": _integer_pow, "_xlogy": _xlogy, "_xlog1py": _xlog1py,
    "_erf": _in_float64(_erf_float64),
    "_erfc": _in_float64(_erfc_float64),
    "_lgamma": _in_float64(_vectorized(_lgamma_scalar)),
    "_digamma": _in_float64(lambda x: _sf.digamma_array(x, np)),
    "_polygamma": lambda x, n: _in_float64(lambda v: _sf.polygamma_array(n, v, np))(x),
    "_erf_inv": _in_float64(lambda x: _sf.erfinv_array(x, np, _erf_float64, _erfc_float64)),
    "_ndtri": _in_float64(lambda x: _sf.ndtri_array(x, np, _erf_float64, _erfc_float64)),
}


# -- derivative helpers named by the partials ------------------------------------------------

def integer_pow_partial(x, n):
    if n == 0:
        return 0
    if n == 1:
        return 1
    return ops.multiply(float(n), ops.power(x, n - 1))


def sqrt_partial(out):
    """0.5 / sqrt(x), with the zero subgradient at x == 0 masked out of the division."""
    zero = ops.equal(out, 0.0)
    return ops.where(zero, 0.0, ops.divide(0.5, ops.where(zero, 1.0, out)))


def pow_base_partial(x, y):
    singular = ops.logical_and(ops.equal(x, 0.0), ops.less(y, 1.0))
    safe_x = ops.where(singular, 1.0, x)
    return ops.where(singular, 0.0, y * ops.power(safe_x, y - 1.0))


def pow_exponent_partial(x, y, out):
    nonpositive = ops.less_equal(x, 0.0)
    safe_x = ops.where(nonpositive, 1.0, x)
    return ops.where(nonpositive, 0.0, out * ops.log(safe_x))


def hypot_partial(x, out):
    """x / hypot(x, y), with the zero subgradient at the origin (as norm's there)."""
    zero = ops.equal(out, 0.0)
    return ops.where(zero, 0.0, ops.divide(x, ops.where(zero, 1.0, out)))


def _bind(op, x, **params):
    from ..tracing import bind

    return bind(op, x, **params)


def digamma(x):
    return _bind("digamma", x)


def polygamma_of(x, n):
    """polygamma(n, x): the derivative of digamma and of each polygamma."""
    return _bind("polygamma", x, n=n)


PARTIALS_NAMESPACE = {
    name: getattr(ops, name) for name in ops.__all__
}
PARTIALS_NAMESPACE.update(
    integer_pow_partial=integer_pow_partial,
    sqrt_partial=sqrt_partial,
    pow_base_partial=pow_base_partial,
    pow_exponent_partial=pow_exponent_partial,
    hypot_partial=hypot_partial,
    digamma=digamma,
    polygamma_of=polygamma_of,
)


# -- the shared rules ------------------------------------------------------------------------

def _shape_rule(name, accepts, *args, **params):
    shape, dtype = tuple(args[0].shape), args[0].dtype
    for a in args[1:]:
        if tuple(a.shape) != shape or a.dtype is not dtype:
            raise TypeError(f"{name}: operands must share shape and dtype")
    if accepts == "bool":
        if dtype is not _dt.bool_:
            raise TypeError(f"{name} needs bool_ operands")
    elif accepts == "float" and not dtype.is_floating:
        raise TypeError(f"{name} needs floating operands, got {dtype}")
    out_dtype = _dt.bool_ if accepts in ("bool", "compare") else dtype
    weak = all(a.weak for a in args)
    return shape, out_dtype, weak


def _apply_partial(partial, value):
    """partial * value, with the literal partials 1, -1 and 0 kept symbolic."""
    if isinstance(partial, (int, float)):
        if partial == 0:
            return None
        if partial == 1:
            return value
        if partial == -1:
            return ops.negative(value)
        return ops.multiply(partial, value)
    return ops.multiply(partial, value)


def _make_partials(entry):
    names = entry["operands"]
    param_names = entry.get("params", [])
    formulas = entry.get("partials")
    if formulas is None:
        return None
    compiled = []
    for f in formulas:
        if isinstance(f, (int, float)):
            compiled.append(f)
        else:
            compiled.append(compile(str(f), f"<partial of {entry}>", "eval"))
    def partials(primals, out, params):
        env = dict(zip(names, primals), out=out, **{p: params[p] for p in param_names})
        return [
            c if isinstance(c, (int, float)) else _eval(c, env)
            for c in compiled
        ]
    return partials


def _eval(code, env):
    result = eval(code, PARTIALS_NAMESPACE, env)  # our own table, not user input
    return result


def _jvp(partials, primals, tangents, out, **params):
    total = None
    active = [i for i, t in enumerate(tangents) if not is_zero(t)]
    if not active:
        return Zero(out.shape, out.dtype)
    ps = partials(primals, out, params)
    for i in active:
        term = _apply_partial(ps[i], tangents[i])
        if term is None:
            continue
        total = term if total is None else ops.add(total, term)
    return Zero(out.shape, out.dtype) if total is None else total


def _vjp(partials, ct, primals, out, **params):
    ps = partials(primals, out, params)
    return [_apply_partial(p, ct) for p in ps]


def _batch(op, args, batched, size, **params):
    from ..tracing import bind

    shape = None
    for a, b in zip(args, batched):
        if b:
            shape = tuple(a.shape)
            break
    args = [a if b else ops.broadcast_to(a, shape) for a, b in zip(args, batched)]
    return bind(op, *args, **params), True


def _make_impl(name, entry):
    names = entry["operands"]
    params = entry.get("params", [])
    body = entry["numpy"].format(**{n: n for n in names + params})
    signature = ", ".join(names) + (", *, " + ", ".join(params) if params else "")
    return eval(f"lambda {signature}: {body}", NUMPY_NAMESPACE)


def _make_cheap(entry):
    """``cheap`` of the table: true, or a condition on the params (``abs(n) <= 4``)."""
    rule = entry.get("cheap", False)
    if isinstance(rule, bool):
        return lambda params: rule
    code = compile(rule, f"<cheap of {entry}>", "eval")
    return lambda params: bool(eval(code, {"abs": abs}, dict(params)))


# libyaml's parser where PyYAML was built with it (its wheels are): every import reads the
# table, and the pure-Python parser took 30 ms of it
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_table(path=TABLE_PATH):
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=_LOADER)


def register_table(path):
    """Register every primitive of an elementwise table (``elementwise.yaml``'s format): its
    rules come from the entry, and every back end lowers it from the entry's templates, so a
    new elementwise op is one entry and nothing else."""
    for name, entry in load_table(path).items():
        partials = _make_partials(entry)
        register(Primitive(
            name,
            shape_rule=functools.partial(_shape_rule, name, entry["accepts"]),
            impl=_make_impl(name, entry),
            jvp=functools.partial(_jvp, partials) if partials else None,
            vjp=functools.partial(_vjp, partials) if partials else None,
            batch=functools.partial(_batch, name),
            differentiable=partials is not None,
            kind="elementwise",
            cheap=_make_cheap(entry),
            scalar=entry["scalar"],
            spec=entry,
        ))


register_table(TABLE_PATH)
