"""The module-level operations of Quabla (spec 000 §3.2), for eager and traced arrays alike.

Each function applies the dtype rules once (strict promotion between arrays, weak Python
scalars that adopt the dtype of the arrays they meet, no math on bool_), makes broadcasting
explicit, and binds primitives. Composite operations (mean, norm, einsum, ...) are
written here in terms of primitives, so they need no derivative rules of their own.
"""

import builtins
import math
import numbers

import numpy as np

from . import dtypes as _dt
from . import tree
from .array import Array, Tensor, as_index, as_shape, asarray
from .core.tracing import TraceTensor, bind
from .errors import TracerError

__all__ = [
    "negative", "add", "subtract", "multiply", "divide", "power", "maximum", "minimum",
    "sin", "cos", "exp", "log", "log1p", "expm1", "tanh", "sqrt", "sign", "square",
    "relu", "sigmoid", "softplus", "stop_gradient",
    "greater", "greater_equal", "less", "less_equal", "equal", "not_equal",
    "logical_and", "logical_or", "logical_not", "isfinite", "isnan",
    "where", "astype", "reshape", "transpose", "broadcast_to", "squeeze", "expand_dims",
    "concat", "stack", "mean", "norm", "matmul", "einsum", "solve", "cholesky", "tril", "triu",
    # elementwise math (issue 24)
    "tan", "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "arcsinh", "arccosh",
    "arctanh", "log2", "log10", "exp2", "cbrt", "hypot", "floor", "ceil", "around",
    "remainder", "mod", "floor_divide", "isinf", "reciprocal", "clip", "logaddexp", "isclose",
    "allclose", "array_equal", "nan_to_num",
]

_PYTHON_SCALARS = (int, float, bool)

# Primitive names whose public function is spelled differently, for error messages.
_PUBLIC = {
    "neg": "negative", "sub": "subtract", "mul": "multiply", "div": "divide", "pow": "power",
    "max": "maximum", "min": "minimum", "logistic": "sigmoid",
    "gt": "greater", "ge": "greater_equal", "lt": "less", "le": "less_equal",
    "eq": "equal", "ne": "not_equal", "and": "logical_and", "or": "logical_or",
    "not": "logical_not", "asin": "arcsin", "acos": "arccos", "atan": "arctan", "atan2": "arctan2",
    "asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh", "lgamma": "gammaln",
    "erf_inv": "erfinv", "reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min",
    "reduce_or": "any", "reduce_and": "all",
}


# -- conversion and the dtype rules ---------------------------------------------------------

def as_array(x):
    """Arrays pass through; anything array-like (NumPy, lists, NumPy scalars) is imported."""
    if isinstance(x, Array):
        return x
    return asarray(x)


def weak_scalar(value, dtype):
    """A weak 0-d Tensor of ``dtype``: a Python number as transforms, rules and control flow
    make it."""
    return Tensor.wrap(np.array(value, dtype=dtype.numpy), weak=True)


def promote(name, operands, kind="float"):
    """Apply the dtype rules to ``operands``; returns arrays of one dtype.

    kind: "float" (math: floating operands), "compare" (floating, or bool for (in)equality),
    "logical" (bool operands), "any" (floating or bool, as in where/concat).
    """
    strong = None
    weak_dtype = None
    arrays = []
    for x in operands:
        if isinstance(x, _PYTHON_SCALARS) and not isinstance(x, np.generic):
            if isinstance(x, bool):
                if kind in ("float",):
                    raise TypeError(f"quabla.{name} does not accept bool operands")
                weak_dtype = weak_dtype or _dt.bool_
            elif weak_dtype is None or weak_dtype is _dt.bool_:
                weak_dtype = _dt.float64
            arrays.append(x)
            continue
        x = as_array(x)
        arrays.append(x)
        if x.weak:
            if weak_dtype is None or weak_dtype is _dt.bool_:
                weak_dtype = x.dtype
            continue
        if strong is None:
            strong = x.dtype
        elif strong is not x.dtype:
            raise TypeError(
                f"quabla.{name} got mixed dtypes {strong} and {x.dtype}; convert one operand "
                f"explicitly with .astype({strong}) or .astype({x.dtype})"
            )
    dtype = strong or weak_dtype
    if dtype is _dt.bool_ and kind == "float":
        raise TypeError(f"quabla.{name} does not accept bool_ operands; use .astype(float64)")
    if dtype is not _dt.bool_ and kind == "logical":
        raise TypeError(f"quabla.{name} needs bool_ operands, got {dtype}")
    out = []
    for x in arrays:
        if not isinstance(x, Array):
            if dtype is _dt.bool_ and not isinstance(x, bool):
                raise TypeError(f"quabla.{name} cannot mix a number with bool_ operands")
            x = weak_scalar(x, dtype)
        elif x.dtype is not dtype:
            if not x.weak:
                raise TypeError(f"quabla.{name} cannot mix {x.dtype} and {dtype} operands")
            x = bind("cast", x, dtype=dtype)
        out.append(x)
    return out


def broadcast_all(name, arrays):
    shapes = [tuple(a.shape) for a in arrays]
    try:  # (most operands of a traced op have one shape: NumPy's rule costs ~5 us a call)
        shape = shapes[0] if shapes.count(shapes[0]) == len(shapes) else np.broadcast_shapes(
            *shapes)
    except ValueError:
        raise ValueError(
            f"quabla.{name}: shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast"
        ) from None
    if builtins.any(type(a) is TraceTensor for a in arrays):
        frame = builtins.max((a._frame for a in arrays if type(a) is TraceTensor), key=lambda f: f.level)
        arrays = [a if type(a) is TraceTensor or tuple(a.shape) == shape else frame.wrap(frame.operand(a))
                  for a in arrays]
    return [a if tuple(a.shape) == shape else _broadcast(a, shape) for a in arrays]


def _broadcast(x, shape):
    shape = tuple(shape)
    lead = len(shape) - len(x.shape)
    dims = tuple(range(lead, len(shape)))
    squeezed = [d for d, (n, m) in enumerate(zip(x.shape, shape[lead:])) if n != m]
    if squeezed:  # size-1 axes that stretch: drop them first, so the primitive stays simple
        keep = tuple(d for d in range(x.ndim) if d not in squeezed)
        x = bind("reshape", x, new_shape=tuple(x.shape[d] for d in keep))
        dims = tuple(dims[d] for d in keep)
    return bind("broadcast_in_dim", x, shape=shape, broadcast_dimensions=dims)


def apply_elementwise(op, *operands, kind="float"):
    name = _PUBLIC.get(op, op)
    arrays = broadcast_all(name, promote(name, operands, kind))
    return bind(op, *arrays)


def apply_unary(op, x, kind="float"):
    (x,) = promote(_PUBLIC.get(op, op), (x,), kind)
    return bind(op, x)


# -- elementwise ----------------------------------------------------------------------------

def negative(x):
    """``-x``, elementwise."""
    return apply_unary("neg", x)


def add(x, y):
    """``x + y``, elementwise with broadcasting."""
    return apply_elementwise("add", x, y)


def subtract(x, y):
    """``x - y``, elementwise with broadcasting."""
    return apply_elementwise("sub", x, y)


def multiply(x, y):
    """``x * y``, elementwise with broadcasting."""
    return apply_elementwise("mul", x, y)


def divide(x, y):
    """``x / y``, elementwise with broadcasting (true division)."""
    return apply_elementwise("div", x, y)


def maximum(x, y):
    """The elementwise larger of ``x`` and ``y`` (NaN if either is NaN); a tie splits the
    gradient equally, as JAX."""
    return apply_elementwise("max", x, y)


def minimum(x, y):
    """The elementwise smaller of ``x`` and ``y`` (NaN if either is NaN); a tie splits the
    gradient equally, as JAX."""
    return apply_elementwise("min", x, y)


def power(x, y):
    """``x ** y``: a non-negative Python int exponent uses exact repeated multiplication."""
    if isinstance(y, numbers.Integral) and not isinstance(y, (bool, np.bool_)) and y >= 0:
        if isinstance(x, _PYTHON_SCALARS):
            x = weak_scalar(x, _dt.float64) if not isinstance(x, bool) else x
        (x,) = promote("power", (x,))
        if y >= 2**63:
            # Compiled code takes int64 exponents: x ** (low + 2**63 m) as x ** low times
            # (x ** 2**63) ** m, the same products as repeated squaring (x ** 2**63 is 0, 1,
            # inf or NaN for every float, which further squares keep) and the same derivative.
            top = power(power(x, 2**62), 2)
            return multiply(power(x, int(y) % 2**63), power(top, int(y) >> 63))
        return bind("integer_pow", x, n=int(y))
    return apply_elementwise("pow", x, y)


def square(x):
    """``x * x``, elementwise."""
    return power(x, 2)


def _unary_function(op, public):
    def fn(x):
        return apply_unary(op, x)

    fn.__name__ = public
    fn.__qualname__ = public
    fn.__doc__ = f"Elementwise {public}."
    return fn


sin = _unary_function("sin", "sin")
cos = _unary_function("cos", "cos")
exp = _unary_function("exp", "exp")
log = _unary_function("log", "log")
log1p = _unary_function("log1p", "log1p")
expm1 = _unary_function("expm1", "expm1")
tanh = _unary_function("tanh", "tanh")
sqrt = _unary_function("sqrt", "sqrt")
sign = _unary_function("sign", "sign")
sigmoid = _unary_function("logistic", "sigmoid")


def abs(x):  # noqa: A001 - the spec names it abs; it is kept out of __all__
    """``|x|``, elementwise (its derivative at 0 is 0, as JAX's ``sign``)."""
    return apply_unary("abs", x)


def relu(x):
    """max(x, 0), with derivative 0 at 0 and at NaN (as JAX); NaN stays NaN."""
    return apply_unary("relu", x)


def softplus(x):
    """log(1 + exp(x)), computed without overflow; its derivative is sigmoid(x) everywhere."""
    return apply_unary("softplus", x)


def stop_gradient(x):
    """``x``, with no tangent and no cotangent under any transform (pytrees: leaf by leaf)."""
    def leaf(v):
        (v,) = promote("stop_gradient", (v,), kind="any")
        return bind("stop_gradient", v) if v.dtype.is_floating else v

    return tree.map(leaf, x)


def _comparison(op, public):
    def fn(x, y):
        return apply_elementwise(op, x, y, kind="compare")

    fn.__name__ = public
    fn.__qualname__ = public
    fn.__doc__ = f"Elementwise {public} (a bool_ result)."
    return fn


greater = _comparison("gt", "greater")
greater_equal = _comparison("ge", "greater_equal")
less = _comparison("lt", "less")
less_equal = _comparison("le", "less_equal")
equal = _comparison("eq", "equal")
not_equal = _comparison("ne", "not_equal")


def logical_and(x, y):
    """Elementwise ``x and y`` of truth values (nonzero is true)."""
    return apply_elementwise("and", x, y, kind="logical")


def logical_or(x, y):
    """Elementwise ``x or y`` of truth values (nonzero is true)."""
    return apply_elementwise("or", x, y, kind="logical")


def logical_not(x):
    """Elementwise ``not x`` of truth values (nonzero is true)."""
    return apply_unary("not", x, kind="logical")


def isfinite(x):
    """True where ``x`` is neither infinite nor NaN."""
    return apply_unary("isfinite", x)


def isnan(x):
    """True where ``x`` is NaN."""
    return apply_unary("isnan", x)


def where(condition, x, y):
    """Elementwise selection: ``x`` where ``condition`` holds, else ``y``."""
    (condition,) = promote("where", (condition,), kind="logical")
    x, y = promote("where", (x, y), kind="any")
    condition, x, y = broadcast_all("where", [condition, x, y])
    return bind("select", condition, x, y)


def astype(x, dtype):
    """``x`` converted to ``dtype`` (bool: nonzero is true; to float: 0.0 or 1.0)."""
    x = as_array(x)
    dtype = _dt.dtype(dtype)
    if x.dtype is dtype:
        return x
    return bind("cast", x, dtype=dtype)


# -- more elementwise math (issue 24): NumPy's values, JAX's derivatives -----------------------

tan = _unary_function("tan", "tan")
arcsin = _unary_function("asin", "arcsin")
arccos = _unary_function("acos", "arccos")
arctan = _unary_function("atan", "arctan")
sinh = _unary_function("sinh", "sinh")
cosh = _unary_function("cosh", "cosh")
arcsinh = _unary_function("asinh", "arcsinh")
arccosh = _unary_function("acosh", "arccosh")
arctanh = _unary_function("atanh", "arctanh")
log2 = _unary_function("log2", "log2")
log10 = _unary_function("log10", "log10")
exp2 = _unary_function("exp2", "exp2")
cbrt = _unary_function("cbrt", "cbrt")
floor = _unary_function("floor", "floor")
ceil = _unary_function("ceil", "ceil")
floor.__doc__ = "Elementwise floor (its derivative is zero, as JAX's)."
ceil.__doc__ = "Elementwise ceil (its derivative is zero, as JAX's)."


def around(x, decimals=0):
    """Round to ``decimals`` places, halves to even (NumPy's ``round``; ``quabla.round`` is
    this function). Its derivative is zero, as JAX's. Other than 0 places, NumPy's steps:
    ``round(x * 10**d) / 10**d``, or ``round(x / 10**-d) * 10**-d`` for negative ``d``."""
    (x,) = promote("round", (x,))
    decimals = as_index(decimals)
    if decimals == 0:
        return bind("round", x)
    if decimals > 0:
        factor = 10.0 ** decimals
        return divide(bind("round", multiply(x, factor)), factor)
    factor = 10.0 ** -decimals
    return multiply(bind("round", divide(x, factor)), factor)


def remainder(x, y):
    """The floored remainder, with the sign of ``y`` (NumPy's and Python's ``%``); its
    derivatives are 1 and -floor(x / y), as JAX's."""
    return apply_elementwise("remainder", x, y)


mod = remainder


def floor_divide(x, y):
    """The floored quotient (NumPy's and Python's ``//``); its derivative is zero."""
    return apply_elementwise("floor_divide", x, y)


def arctan2(x1, x2):
    """The angle of the point (x2, x1), in [-pi, pi] (NumPy's ``arctan2``)."""
    return apply_elementwise("atan2", x1, x2)


def hypot(x1, x2):
    """sqrt(x1**2 + x2**2) without overflow; its gradient is zero at the origin (as ``norm``'s;
    JAX gives 0.5 there)."""
    return apply_elementwise("hypot", x1, x2)


def isinf(x):
    """True where ``x`` is positive or negative infinity."""
    return apply_unary("isinf", x)


def reciprocal(x):
    """1 / x."""
    return divide(1.0, x)


def clip(x, min=None, max=None, *, a_min=None, a_max=None):  # noqa: A002
    """``x`` limited to [min, max] (either may be None; ``a_min``/``a_max`` are NumPy's
    names): maximum with ``min``, then minimum with ``max``, as JAX's, so its derivatives are
    JAX's: 1 inside, 0 outside, and 1/2 to ``x`` and 1/2 to the bound it equals."""
    low = min if min is not None else a_min
    high = max if max is not None else a_max
    if low is not None:
        x = maximum(x, low)
    if high is not None:
        x = minimum(x, high)
    return as_array(x) if isinstance(x, _PYTHON_SCALARS) else x


def logaddexp(x1, x2):
    """log(exp(x1) + exp(x2)) without overflow: the larger plus softplus of minus the
    difference, each picked by one select of a branch smooth to every order (1/2 each where
    x1 == x2, as JAX's), so that one softplus is computed, not one per branch."""
    a, b = broadcast_all("logaddexp", promote("logaddexp", (x1, x2)))
    delta = subtract(a, b)
    first = greater_equal(a, b)
    stable = add(where(first, a, b), softplus(where(first, negative(delta), delta)))
    # NaN, or infinities of one sign (whose difference is NaN): their sum, as JAX gives
    return where(isnan(delta), add(a, b), stable)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol |b| where both are finite, a == b otherwise (NumPy's rule)."""
    a, b = broadcast_all("isclose", promote("isclose", (a, b), kind="compare"))
    if a.dtype is _dt.bool_:
        return equal(a, b)
    finite = logical_and(isfinite(a), isfinite(b))
    close = less_equal(abs(subtract(a, b)), add(atol, multiply(rtol, abs(b))))
    out = where(finite, close, equal(a, b))
    if equal_nan:
        out = logical_or(out, logical_and(isnan(a), isnan(b)))
    return out


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether ``isclose`` holds everywhere: a bool_ scalar array."""
    return all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a1, a2, equal_nan=False):
    """Whether ``a1`` and ``a2`` have one shape and equal elements: a bool_ scalar array
    (False at once for different shapes, which are static)."""
    a1, a2 = as_array(a1), as_array(a2)
    if tuple(a1.shape) != tuple(a2.shape):
        return Tensor.wrap(np.array(False))
    if a1.dtype is not a2.dtype:
        a1, a2 = astype(a1, _dt.float64), astype(a2, _dt.float64)
    eq = equal(a1, a2)
    if equal_nan and a1.dtype.is_floating:
        eq = logical_or(eq, logical_and(isnan(a1), isnan(a2)))
    return all(eq)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN replaced by ``nan``, infinities by ``posinf``/``neginf`` (default: the dtype's
    largest finite values); the gradient passes where ``x`` is finite, 0 elsewhere."""
    del copy  # arrays are immutable
    x = as_array(x)
    if x.dtype is _dt.bool_:
        return x
    big = float(np.finfo(x.dtype.numpy).max)
    out = where(isnan(x), nan, x)
    out = where(equal(x, math.inf), big if posinf is None else posinf, out)
    return where(equal(x, -math.inf), -big if neginf is None else neginf, out)


# -- shapes ---------------------------------------------------------------------------------

def normalize_axis(axis, ndim, name):
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        if isinstance(axis, Array):
            raise TracerError(f"quabla.{name}: axis must be a static Python int")
        raise TypeError(f"quabla.{name}: axis must be an int, got {type(axis).__name__}")
    if not -ndim <= axis < builtins.max(ndim, 1):
        raise ValueError(f"quabla.{name}: axis {axis} is out of range for rank {ndim}")
    return axis % builtins.max(ndim, 1)


def normalize_axes(axis, ndim, name):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(sorted(normalize_axis(a, ndim, name) for a in axis))
        if len(set(axes)) != len(axes):
            raise ValueError(f"quabla.{name}: repeated axis in {axis}")
        return axes
    return (normalize_axis(axis, ndim, name),)


def reshape(x, shape):
    """``x`` with a new shape of the same size; one dimension may be -1 (inferred)."""
    x = as_array(x)
    shape = list(as_shape(shape))
    size = x.size
    if shape.count(-1) > 1:
        raise ValueError("quabla.reshape: only one dimension can be -1")
    if -1 in shape:
        rest = int(math.prod([d for d in shape if d != -1]))
        if rest <= 0 or size % rest:
            raise ValueError(f"quabla.reshape: cannot reshape {x.shape} to {shape}")
        shape[shape.index(-1)] = size // rest
    shape = tuple(shape)
    if builtins.any(d <= 0 for d in shape) or int(math.prod(shape)) != size:
        raise ValueError(f"quabla.reshape: cannot reshape {x.shape} to {list(shape)}")
    if shape == tuple(x.shape):
        return x
    return bind("reshape", x, new_shape=shape)


def transpose(x, axes=None):
    """``x`` with its axes permuted (reversed when ``axes`` is None), as ``numpy.transpose``."""
    x = as_array(x)
    if axes is None:
        perm = tuple(reversed(range(x.ndim)))
    else:
        perm = tuple(normalize_axis(a, x.ndim, "transpose") for a in axes)
        if sorted(perm) != list(range(x.ndim)):
            raise ValueError(f"quabla.transpose: {tuple(axes)} is not a permutation of the axes")
    if perm == tuple(range(x.ndim)):
        return x
    return bind("transpose", x, permutation=perm)


def broadcast_to(x, shape):
    """``x`` broadcast to ``shape`` by NumPy's rules."""
    x = as_array(x)
    shape = as_shape(shape)
    try:
        if np.broadcast_shapes(tuple(x.shape), shape) != shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"quabla.broadcast_to: cannot broadcast {x.shape} to {list(shape)}") from None
    if shape == tuple(x.shape):
        return x
    return _broadcast(x, shape)


def squeeze(x, axis=None):
    """``x`` without its axes of size 1 (all of them, or those in ``axis``)."""
    x = as_array(x)
    axes = [d for d in range(x.ndim) if x.shape[d] == 1] if axis is None else normalize_axes(axis, x.ndim, "squeeze")
    if builtins.any(x.shape[d] != 1 for d in axes):
        raise ValueError("quabla.squeeze: can only remove axes of size 1")
    return reshape(x, tuple(n for d, n in enumerate(x.shape) if d not in axes)) if axes else x


def expand_dims(x, axis):
    """``x`` with a new axis of size 1 at position ``axis``."""
    x = as_array(x)
    axis = normalize_axis(axis, x.ndim + 1, "expand_dims")
    shape = list(x.shape)
    shape.insert(axis, 1)
    return bind("reshape", x, new_shape=tuple(shape))


def concat(arrays, axis=0):
    """The arrays joined along an existing axis (``numpy.concatenate``)."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("quabla.concat needs at least one array")
    arrays = promote("concat", arrays, kind="any")
    ndim = arrays[0].ndim
    if ndim == 0:
        raise ValueError("quabla.concat cannot join 0-d arrays; use quabla.stack")
    axis = normalize_axis(axis, ndim, "concat")
    for a in arrays:
        if a.ndim != ndim or builtins.any(
            a.shape[d] != arrays[0].shape[d] for d in range(ndim) if d != axis
        ):
            raise ValueError(
                f"quabla.concat: shapes {[list(a.shape) for a in arrays]} differ off axis {axis}"
            )
    if len(arrays) == 1:
        return arrays[0]
    return bind("concatenate", *arrays, axis=axis)


def stack(arrays, axis=0):
    """The arrays, all of one shape, joined along a new axis."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("quabla.stack needs at least one array")
    arrays = promote("stack", arrays, kind="any")
    shape = tuple(arrays[0].shape)
    if builtins.any(tuple(a.shape) != shape for a in arrays):
        raise ValueError(f"quabla.stack: shapes {[list(a.shape) for a in arrays]} differ")
    axis = normalize_axis(axis, len(shape) + 1, "stack")
    expanded = [expand_dims(a, axis) for a in arrays]
    if len(expanded) == 1:
        return expanded[0]
    return bind("concatenate", *expanded, axis=axis)


def getitem(x, index):
    """NumPy basic indexing: ints (negative too), slices, None and Ellipsis, and scalar arrays
    (traced or not) that select one row of their axis like an int (``xs[i]`` in a loop body).
    Index arrays, lists and concrete boolean masks are NumPy's advanced indexing, a gather:
    ``x[idx]`` reaches it (``quabla.indexing.subscript``)."""
    if not isinstance(index, tuple):
        index = (index,)
    if builtins.any(isinstance(item, (Array, list, tuple, np.ndarray)) for item in index):
        return _dynamic_getitem(x, index)
    for item in index:
        if isinstance(item, (bool, np.bool_)):
            raise TypeError("a bool index (x[True], x[False]) is not supported")
    if builtins.sum(1 for i in index if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis")
    used = builtins.sum(1 for i in index if i is not None and i is not Ellipsis)
    if used > x.ndim:
        raise IndexError(f"too many indices for an array of rank {x.ndim}")
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (x.ndim - used) + index[at + 1:]
    else:
        index = index + (slice(None),) * (x.ndim - used)
    starts, limits, strides, out_shape, reversed_axes = [], [], [], [], []
    dim = 0
    for item in index:
        if item is None:
            out_shape.append(1)
            continue
        n = x.shape[dim]
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            count = len(range(start, stop, step))
            if count == 0:
                raise IndexError("the slice selects no elements (zero-extent arrays are unsupported)")
            if step < 0:  # a positive slice of the reversed axis
                reversed_axes.append(dim)
                start, step = n - 1 - start, -step
            starts.append(start)
            limits.append(start + (count - 1) * step + 1)
            strides.append(step if count > 1 else 1)  # a step past the end picks one element
            out_shape.append(count)
        else:
            i = as_index(item)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
            i %= n
            starts.append(i)
            limits.append(i + 1)
            strides.append(1)
        dim += 1
    y = bind("rev", x, dimensions=tuple(reversed_axes)) if reversed_axes else x
    if starts != [0] * x.ndim or limits != list(x.shape) or builtins.any(s != 1 for s in strides):
        y = bind("slice", y, start_indices=tuple(starts), limit_indices=tuple(limits),
                 strides=tuple(strides))
    return reshape(y, tuple(out_shape))


def _dynamic_getitem(x, index):
    """Static indexing with a full slice at each scalar-array entry, then one ``dynamic_index``
    per such axis (the last first, so the positions of the others stay). Like JAX, an index out
    of range is clamped and a negative one counts from the end. An eager index must be a whole
    number, as NumPy's; a traced one that is not is rounded down (``clamp_index``)."""
    used = builtins.sum(1 for i in index if i is not None and i is not Ellipsis)
    static, dynamic, axis = [], [], 0
    for item in index:
        if isinstance(item, Array):
            if item.ndim != 0 or not item.dtype.is_floating:
                kind = "a TraceTensor" if isinstance(item, TraceTensor) else "an array"
                raise TypeError(
                    f"{kind} index must be a floating scalar (one row of its axis); got "
                    f"{item.dtype}{list(item.shape)}: index arrays and masks are x[idx] "
                    "(quabla.indexing.subscript)")
            if not isinstance(item, TraceTensor) and not float(item.numpy()).is_integer():
                raise TypeError(f"an array index must hold a whole number, got "
                                f"{float(item.numpy())!r} (a traced one is rounded down)")
            dynamic.append((axis, item))
            item = slice(None)
        if item is Ellipsis:
            axis += builtins.max(x.ndim - used, 0)
        elif item is None or isinstance(item, slice):
            axis += 1
        static.append(item)
    y = getitem(x, tuple(static))
    for axis, i in reversed(dynamic):
        if axis:
            y = transpose(y, (axis,) + tuple(d for d in range(y.ndim) if d != axis))
        y = bind("dynamic_index", y, i)
    return y


# -- reductions -----------------------------------------------------------------------------

def _reduce(op, x, axis, keepdims, kind="float", mask=None, initial=None):
    """``op`` over ``axis`` (int, tuple or None; negative from the end). ``mask`` (``where=``
    of the public functions): a bool mask broadcast to ``x`` of the elements taken, the others
    counting as the op's identity; ``initial``: a value the result is combined with (max and
    min need it with a mask, having no finite identity, as in NumPy and JAX)."""
    from .core.primitives import PRIMITIVES

    name = _PUBLIC.get(op, op)
    (x,) = promote(name, (x,), kind)
    axes = normalize_axes(axis, x.ndim, name)
    if mask is not None:
        if initial is None and op in ("reduce_max", "reduce_min"):
            raise ValueError(f"quabla.{name}: a reduction with where= needs initial= (it has "
                             "no identity)")
        x = where(broadcast_to(as_bool(mask, name), x.shape), x, PRIMITIVES[op].identity)
    out = bind(op, x, axes=axes) if axes else x
    if initial is not None:
        combine = {"reduce_sum": add, "reduce_max": maximum, "reduce_min": minimum,
                   "reduce_or": logical_or, "reduce_and": logical_and}[op]
        out = combine(out, initial)
    if keepdims:
        out = reshape(out, tuple(1 if d in axes else n for d, n in enumerate(x.shape)))
    return out


def summand(x, dtype=None):
    """``x`` as a sum takes it: a bool_ array counts (float64, as NumPy's sums of bools are
    counts), ``dtype`` converts first."""
    if isinstance(x, bool) or not isinstance(x, _PYTHON_SCALARS):
        x = as_array(x)
        if dtype is not None:
            x = astype(x, dtype)
        elif x.dtype is _dt.bool_:
            x = astype(x, _dt.float64)
    return x


def sum(x, axis=None, keepdims=False, *, dtype=None, where=None, initial=None):  # noqa: A001
    """The sum over ``axis``; a bool_ array is counted (float64)."""
    return _reduce("reduce_sum", summand(x, dtype), axis, keepdims, mask=where,
                   initial=initial)


def _is_bool(x):
    dtype = getattr(x, "dtype", None)
    return (isinstance(x, (bool, np.bool_)) or dtype is _dt.bool_
            or (isinstance(dtype, np.dtype) and dtype == np.bool_))


def max(x, axis=None, keepdims=False, *, where=None, initial=None):  # noqa: A001
    """The maximum over ``axis``; of a bool_ array, bool_ as in NumPy (``any``)."""
    if _is_bool(x) and initial is None:
        return any(x, axis, keepdims, where=where)
    return _reduce("reduce_max", x, axis, keepdims, mask=where, initial=initial)


def min(x, axis=None, keepdims=False, *, where=None, initial=None):  # noqa: A001
    """The minimum over ``axis``; of a bool_ array, bool_ as in NumPy (``all``)."""
    if _is_bool(x) and initial is None:
        return all(x, axis, keepdims, where=where)
    return _reduce("reduce_min", x, axis, keepdims, mask=where, initial=initial)


def as_bool(x, name):
    x = as_array(x) if not isinstance(x, bool) else x
    if isinstance(x, bool):
        return weak_scalar(x, _dt.bool_)
    return x if x.dtype is _dt.bool_ else not_equal(x, 0.0)


def any(x, axis=None, keepdims=False, *, where=None):  # noqa: A001
    """True if any element (along ``axis``) is true; ``where`` masks elements out."""
    return _reduce("reduce_or", as_bool(x, "any"), axis, keepdims, kind="logical", mask=where)


def all(x, axis=None, keepdims=False, *, where=None):  # noqa: A001
    """True if every element (along ``axis``) is true; ``where`` masks elements out."""
    return _reduce("reduce_and", as_bool(x, "all"), axis, keepdims, kind="logical", mask=where)


def mean(x, axis=None, keepdims=False, *, dtype=None, where=None):
    """The mean over ``axis`` (of a bool_ array: the fraction true); with ``where``, of the
    elements it selects (NaN where it selects none)."""
    (x,) = promote("mean", (summand(x, dtype),))
    total = sum(x, axis, keepdims, where=where)
    if where is None:
        axes = normalize_axes(axis, x.ndim, "mean")
        count = int(math.prod([x.shape[d] for d in axes]))
        return divide(total, float(count))
    mask = broadcast_to(as_bool(where, "mean"), x.shape)
    return divide(total, astype(sum(mask, axis, keepdims), x.dtype))


def norm(x, axis=None, keepdims=False):
    """The Euclidean (Frobenius) norm over ``axis``."""
    (x,) = promote("norm", (x,))
    return sqrt(sum(multiply(x, x), axis, keepdims))


# -- linear algebra -------------------------------------------------------------------------

def dot_general(lhs, rhs, contracting, batch=((), ())):
    """The general contraction: output axes are batch, then lhs free, then rhs free. A
    product with a scalar is a multiply (it fuses, and back ends need no scalar case)."""
    lhs, rhs = promote("dot_general", (lhs, rhs))
    if lhs.ndim == 0 or rhs.ndim == 0:
        return multiply(lhs, rhs)
    return bind(
        "dot_general", lhs, rhs,
        dimension_numbers=(tuple(map(tuple, contracting)), tuple(map(tuple, batch))),
    )


def matmul(a, b):
    """NumPy ``matmul``: 1-d operands are promoted and the added axis removed again."""
    a, b = promote("matmul", (a, b))
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("quabla.matmul: operands must have rank >= 1; use * for scalars")
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    if a_vec:
        a = reshape(a, (1, a.shape[0]))
    if b_vec:
        b = reshape(b, (b.shape[0], 1))
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(
            f"quabla.matmul: inner dimensions differ ({list(a.shape)} @ {list(b.shape)})"
        )
    batch = np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    nb = len(batch)
    if nb:
        a = broadcast_to(a, batch + tuple(a.shape[-2:]))
        b = broadcast_to(b, batch + tuple(b.shape[-2:]))
    out = bind(
        "dot_general", a, b,
        dimension_numbers=(((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb)))),
    )
    if a_vec or b_vec:
        shape = tuple(out.shape)
        if b_vec:
            shape = shape[:-1]
        if a_vec:
            shape = shape[:-2] + shape[-1:] if not b_vec else shape[:-1]
        out = reshape(out, shape)
    return out


def einsum(subscripts, *operands):
    """Einstein summation as NumPy spells it: a label repeated within an operand takes the
    diagonal, ``...`` stands for the leading axes (broadcast across operands, as are axes of
    size 1), and without ``->`` the output is the ellipsis, then the labels used once, sorted.
    Lowered to transposes, strided slices, reshapes, sums and dot_general, so its derivatives
    and batching are theirs."""
    if not isinstance(subscripts, str):
        raise TypeError(
            f"quabla.einsum: subscripts must be a string, got {type(subscripts).__name__}")
    if not operands:
        raise ValueError("quabla.einsum needs at least one operand")
    arrays = promote("einsum", operands)
    terms, output = _einsum_subscripts(subscripts, [a.ndim for a in arrays])
    arrays, terms = map(list, zip(*(_einsum_diagonal(a, t) for a, t in zip(arrays, terms))))
    _einsum_broadcast(arrays, terms)
    acc, acc_term = arrays[0], terms[0]
    rest = terms[1:]
    for i, (term, b) in enumerate(zip(terms[1:], arrays[1:])):
        later = set(output) | set("".join(rest[i + 1:]))
        acc, acc_term = _sum_unused(acc, acc_term, later | set(term))
        b, term = _sum_unused(b, term, later | set(acc_term))
        batch = [c for c in acc_term if c in term and c in later]
        contract = [c for c in acc_term if c in term and c not in later]
        if not acc_term or not term:  # a product with a scalar: elementwise, so it fuses
            acc = multiply(acc, b)
        else:
            axes = lambda t, labels: tuple(t.index(c) for c in labels)
            acc = bind("dot_general", acc, b, dimension_numbers=(
                (axes(acc_term, contract), axes(term, contract)),
                (axes(acc_term, batch), axes(term, batch))))
        acc_term = "".join(batch) + "".join(
            c for c in acc_term if c not in batch and c not in contract
        ) + "".join(c for c in term if c not in batch and c not in contract)
    acc, acc_term = _sum_unused(acc, acc_term, set(output))
    return transpose(acc, tuple(acc_term.index(c) for c in output)) if acc_term != output else acc


def _einsum_subscripts(subscripts, ranks):
    """One label string per operand and the output's, each ellipsis spelled out as labels
    ``chr(256 + k)`` aligned from the right, so that ellipses of different ranks broadcast."""
    inputs, arrow, output = subscripts.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"quabla.einsum: {len(terms)} terms for {len(ranks)} operands")
    for k, part in enumerate(terms + [output]):
        where = f"operand {k}" if k < len(terms) else "the output"
        letters = part.replace("...", "", 1)
        if "." in letters:
            raise ValueError(f"quabla.einsum: a '.' in {where} is not part of an ellipsis ('...')")
        for c in letters:
            if not (c.isascii() and c.isalpha()):
                raise ValueError(f"quabla.einsum: invalid subscript {c!r} in {where}; "
                                 "subscripts are letters")
    widths = []  # axes covered by each operand's ellipsis
    for k, (term, rank) in enumerate(zip(terms, ranks)):
        named = len(term) - (3 if "..." in term else 0)
        if rank < named or ("..." not in term and rank != named):
            raise ValueError(
                f"quabla.einsum: term {term!r} does not match operand {k} of rank {rank}")
        widths.append(rank - named)
    width = builtins.max(widths)

    def ellipsis(n):
        return "".join(chr(256 + k) for k in range(width - n, width))

    terms = [t.replace("...", ellipsis(n)) for t, n in zip(terms, widths)]
    used = "".join(terms)
    if not arrow:
        once = sorted(c for c in set(used) if c < chr(256) and used.count(c) == 1)
        return terms, ellipsis(width) + "".join(once)
    if "..." not in output and width:
        raise ValueError("quabla.einsum: the operands have ellipsis axes but the output has no "
                         "'...' to receive them")
    output = output.replace("...", ellipsis(width))
    for c in output:
        if output.count(c) > 1:
            raise ValueError(f"quabla.einsum: output subscript {c!r} is repeated")
        if c not in used:
            raise ValueError(f"quabla.einsum: output subscript {c!r} appears in no input")
    return terms, output


def _einsum_diagonal(x, term):
    """``x`` with one axis per label: the axes that repeat a label are moved last, flattened
    and sliced with the stride that steps from one diagonal element to the next."""
    for c in dict.fromkeys(term):
        axes = [d for d, label in enumerate(term) if label == c]
        if len(axes) == 1:
            continue
        n = x.shape[axes[0]]
        if builtins.any(x.shape[d] != n for d in axes):
            raise ValueError(f"quabla.einsum: the axes of the repeated index {c!r} differ in size "
                             f"({[x.shape[d] for d in axes]})")
        others = [d for d in range(len(term)) if d not in axes]
        x = transpose(x, others + axes)
        x = reshape(x, tuple(x.shape[:len(others)]) + (n ** len(axes),))
        if n > 1:
            x = getitem(x, (Ellipsis, slice(None, None, (n ** len(axes) - 1) // (n - 1))))
        term = "".join(term[d] for d in others) + c
    return x, term


def _einsum_broadcast(arrays, terms):
    """Check that each label has one size, and drop the axes of size 1 that broadcast against a
    larger one (in place): a label an operand lacks is constant along it, which is broadcasting."""
    sizes = {}
    for term, a in zip(terms, arrays):
        for c, n in zip(term, a.shape):
            if n != 1 and sizes.setdefault(c, n) != n:
                name = repr(c) if c < chr(256) else "of the ellipsis"
                raise ValueError(f"quabla.einsum: index {name} has sizes {sizes[c]} and {n}")
    for k, (term, a) in enumerate(zip(terms, arrays)):
        keep = [d for d, (c, n) in enumerate(zip(term, a.shape)) if n != 1 or sizes.get(c, 1) == 1]
        if len(keep) < len(term):
            arrays[k] = reshape(a, tuple(a.shape[d] for d in keep))
            terms[k] = "".join(term[d] for d in keep)


def _sum_unused(x, term, keep):
    axes = tuple(d for d, c in enumerate(term) if c not in keep)
    if not axes:
        return x, term
    return sum(x, axes), "".join(c for c in term if c in keep)


def _square_matrices(a, name):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(
            f"quabla.{name} needs square matrices [..., n, n], got shape {list(a.shape)}"
        )


def solve(a, b):
    """The solution ``x`` of ``a @ x = b``, as NumPy 2's ``linalg.solve``: ``a`` is [..., n, n];
    a 1-d ``b`` [n] is one vector for every matrix (``x`` is [..., n]); any other ``b`` is a
    stack of matrices [..., n, k] whose leading axes broadcast with those of ``a``. For a stack
    of vectors, use ``solve(a, b[..., None])[..., 0]`` (or vmap a vector solve)."""
    return bind("solve", *solve_operands("solve", a, b))


def solve_operands(name, a, b):
    """``solve``'s operands (and those of the other solves) promoted and broadcast to the
    primitive's form: ``a`` [*batch, n, n] and ``b`` [*batch, n] or [*batch, n, k]
    (``quabla.linalg.triangular_solve`` takes its operands so too)."""
    a, b = promote(name, (a, b))
    _square_matrices(a, name)
    n = a.shape[-1]
    vector = b.ndim == 1
    try:
        if b.ndim == 0 or b.shape[-1 if vector else -2] != n:
            raise ValueError
        batch = np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    except ValueError:
        raise ValueError(
            f"quabla.{name}: b of shape {list(b.shape)} does not match a {list(a.shape)}; b "
            "is [n] or [..., n, k] (for a stack of vectors use b[..., None])"
        ) from None
    a = broadcast_to(a, batch + (n, n))
    b = broadcast_to(b, batch + tuple(b.shape[-1 if vector else -2:]))
    return a, b


def cholesky(a):
    """The lower Cholesky factors of symmetric positive definite matrices [..., n, n] (NaN
    where a matrix is not positive definite)."""
    (a,) = promote("cholesky", (a,))
    _square_matrices(a, "cholesky")
    return bind("cholesky", a)


def _triangle(x, k, lower, name):
    (x,) = promote(name, (x,), kind="any")
    if x.ndim < 2:
        raise ValueError(f"quabla.{name} needs rank >= 2")
    n, m = x.shape[-2:]
    k = as_index(k)
    mask = np.tri(n, m, k, dtype=bool) if lower else ~np.tri(n, m, k - 1, dtype=bool)
    zero = False if x.dtype is _dt.bool_ else 0.0
    return where(Tensor.wrap(np.broadcast_to(mask, x.shape).copy()), x, zero)


def tril(x, k=0):
    """The lower triangle of the last two axes (below and on diagonal ``k``); the rest zero."""
    return _triangle(x, k, True, "tril")


def triu(x, k=0):
    """The upper triangle of the last two axes (above and on diagonal ``k``); the rest zero."""
    return _triangle(x, k, False, "triu")


# math is used by the derivative formulas of elementwise.yaml
_ = math
