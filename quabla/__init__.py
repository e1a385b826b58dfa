"""Quabla: JAX-style composable function transforms on Numba, with no compiled core to build."""

from .core.version import __version__

from . import dtypes
from .dtypes import float32, float64, bool_
from .errors import (
    QuablaError, TracerError, UnsupportedOperationError, RetraceLimitError, RetraceWarning,
    PrecisionWarning,
)
from .array import Array, Tensor, Shape, asarray, zeros, ones, full, arange, linspace, eye
from .core import rules as _rules  # noqa: F401  (registers every primitive)
from . import operators as _operators  # noqa: F401  (installs the arrays' operators)
from .core.tracing import TraceTensor
from .ops import (
    negative, add, subtract, multiply, divide, power, maximum, minimum,
    sin, cos, exp, log, log1p, expm1, tanh, sqrt, sign, square, relu, sigmoid, softplus,
    stop_gradient,
    greater, greater_equal, less, less_equal, equal, not_equal,
    logical_and, logical_or, logical_not, isfinite, isnan,
    where, astype, reshape, transpose, broadcast_to, squeeze, expand_dims,
    concat, stack, mean, norm, matmul, solve, cholesky, tril, triu,
    abs, sum, max, min, any, all,  # noqa: F401 - attributes, kept out of __all__ (builtins)
)
from .ops import (  # elementwise math (issue 24)
    tan, arcsin, arccos, arctan, arctan2, sinh, cosh, arcsinh, arccosh, arctanh, log2, log10,
    exp2, cbrt, hypot, floor, ceil, around, remainder, mod, floor_divide, isinf, reciprocal,
    clip, logaddexp, isclose, allclose, array_equal, nan_to_num,
    around as round,  # noqa: A004, F401 - NumPy's round, kept out of __all__ (a builtin)
)
from .reductions import (
    prod, var, std, argmax, argmin, cumsum, cumprod, logsumexp, average, median, quantile,
    percentile, sort, argsort, searchsorted, diff, trapezoid, count_nonzero,
)
from .shapes import (
    tile, repeat, pad, roll, flip, split, array_split, vstack, hstack, dstack, column_stack,
    meshgrid, moveaxis, swapaxes, ravel, atleast_1d, atleast_2d, atleast_3d, diag, diagonal,
    trace, outer, inner, vdot, dot, tensordot, kron, cross, einsum, concatenate,
)
from .indexing import (
    array, take, take_along_axis, dynamic_slice, dynamic_update_slice, zeros_like, ones_like,
    full_like, empty, empty_like,
)
from .api import jit, grad, value_and_grad, jvp, vjp, vmap, jacobian, jacfwd, jacrev, hessian
from .devices import devices
from . import tree, random, optim, flatten_util
from . import linalg
from . import nn, special
from . import distributed
from . import legacy  # the v0.1 legacy names, without warnings (spec 000 §5.1)
from .control import cond, switch, fori_loop, scan, while_loop, checkpoint
from .control import checkpoint as remat  # JAX's other name
from .custom_derivatives import custom_jvp, custom_vjp
from .mapping import map  # noqa: A004, F401 - qb.map (JAX's lax.map), kept out of __all__
from .solvers import newton, odeint
from .checkpoint_files import save, load
from .staging.signature import ShapeDtype
from .staging.jit import Compiler
from .staging.aot import Program, Executable



def __getattr__(name):
    """v0.1 names (spec 000 §5, ``quabla.compat``): deprecated and legacy ones warn once, then
    are bound; a star import binds them silently."""
    if name.startswith("__"):
        raise AttributeError(f"module 'quabla' has no attribute {name!r}")
    import sys

    from . import compat

    return compat.attribute(sys.modules[__name__], name, sys._getframe(1))


def __dir__():
    from .compat import TABLE

    return sorted(set(globals()) | set(TABLE))


__all__ = [
    "__version__", "dtypes", "float32", "float64", "bool_",
    "QuablaError", "TracerError", "UnsupportedOperationError", "RetraceLimitError",
    "RetraceWarning", "PrecisionWarning",
    "Array", "Tensor", "TraceTensor", "Shape",
    "array", "asarray", "zeros", "ones", "full", "arange", "linspace", "eye",
    "negative", "add", "subtract", "multiply", "divide", "power", "maximum", "minimum",
    "sin", "cos", "exp", "log", "log1p", "expm1", "tanh", "sqrt", "sign", "square",
    "relu", "sigmoid", "softplus", "stop_gradient",
    "greater", "greater_equal", "less", "less_equal", "equal", "not_equal",
    "logical_and", "logical_or", "logical_not", "isfinite", "isnan",
    "where", "astype", "reshape", "transpose", "broadcast_to", "squeeze", "expand_dims",
    "concat", "stack", "mean", "norm", "matmul", "einsum", "solve", "cholesky", "tril", "triu",
    "tan", "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "arcsinh", "arccosh",
    "arctanh", "log2", "log10", "exp2", "cbrt", "hypot", "floor", "ceil", "around",
    "remainder", "mod", "floor_divide", "isinf", "reciprocal", "clip", "logaddexp", "isclose",
    "allclose", "array_equal", "nan_to_num", "nn", "special",
    "prod", "var", "std", "argmax", "argmin", "cumsum", "cumprod", "logsumexp", "average",
    "median", "quantile", "percentile", "sort", "argsort", "searchsorted", "diff", "trapezoid",
    "count_nonzero",
    "tile", "repeat", "pad", "roll", "flip", "split", "array_split", "vstack", "hstack",
    "dstack", "column_stack", "meshgrid", "moveaxis", "swapaxes", "ravel", "atleast_1d",
    "atleast_2d", "atleast_3d", "diag", "diagonal", "trace", "outer", "inner", "vdot", "dot",
    "tensordot", "kron", "cross", "concatenate",
    "take", "take_along_axis", "dynamic_slice", "dynamic_update_slice", "zeros_like",
    "ones_like", "full_like", "empty", "empty_like",
    "jit", "grad", "value_and_grad", "jvp", "vjp", "vmap", "jacobian", "jacfwd", "jacrev",
    "hessian",
    "devices",
    "cond", "switch", "fori_loop", "scan", "while_loop", "checkpoint", "remat", "newton",
    "odeint", "custom_jvp", "custom_vjp",
    "tree", "random", "optim", "distributed", "linalg", "flatten_util", "save", "load",
    "ShapeDtype", "Compiler", "Program", "Executable",
]
# the v0.1 names (spec 000 Appendix A): a star import binds them without a warning
from .compat import star_names as _star_names

__all__.extend(_star_names(__all__))
del _star_names
