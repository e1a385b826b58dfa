"""Quabla: JAX-style composable function transforms on Numba, with no compiled core to build."""

from .core.version import __version__

from . import dtypes
from .dtypes import float32, float64, bool_
from .errors import (
    QuablaError, TracerError, UnsupportedOperationError, RetraceLimitError, RetraceWarning,
    PrecisionWarning,
)
from .array import Array, Tensor, Shape, array, asarray, zeros, ones, full, arange, linspace, eye
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
    concat, stack, mean, norm, matmul, einsum, solve, cholesky, tril, triu,
    abs, sum, max, min, any, all,  # attributes, but kept out of __all__ (builtins)
)
from .api import jit, grad, value_and_grad, jvp, vjp, vmap, jacobian, jacfwd, jacrev, hessian
from .devices import devices
from . import tree, random, optim, flatten_util
from . import linalg
from .control import cond, fori_loop, scan, while_loop
from .solvers import newton, odeint
from .checkpoint import save, load
from .staging.signature import ShapeDtype
from .staging.jit import Compiler
from .staging.aot import Program, Executable



def __getattr__(name):
    """Deprecated v0.1 names (``quabla.Adam``): warn once, then bound (``quabla.compat``)."""
    import importlib
    import sys

    return importlib.import_module("quabla.compat").deprecated(sys.modules[__name__], name)

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
    "jit", "grad", "value_and_grad", "jvp", "vjp", "vmap", "jacobian", "jacfwd", "jacrev",
    "hessian",
    "devices",
    "cond", "fori_loop", "scan", "while_loop", "newton", "odeint",
    "tree", "random", "optim", "linalg", "flatten_util", "save", "load",
    "ShapeDtype", "Compiler", "Program", "Executable",
]
