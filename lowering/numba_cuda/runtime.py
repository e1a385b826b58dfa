"""Device functions that the generated CUDA kernels call: the scalar helpers of the elementwise
templates (the same conventions as lowering/numba_cpu/runtime.py: NaN propagation of max/min,
sign(0) == 0, repeated squaring for integer powers) and the per-matrix solvers of
lowering/matrix_kernels.py, run by one thread each. Numba's CPU functions cannot be called from
CUDA kernels, so these are CUDA device functions of their own; under ``NUMBA_ENABLE_CUDASIM=1``
they run as plain Python."""

import math

import numba
from numba import cuda

from quabla.core.rules.elementwise import power_by_squaring

from .. import matrix_kernels

__all__ = ["_exp", "_log", "_log1p", "_sqrt", "_sign", "_logistic", "_relu", "_softplus", "_tanh",
           "_integer_pow", "_pow", "_max", "_min", "_where", "_cast_float64", "_cast_float32",
           "_cast_bool", "_f32", "_row", "_solve", "_cholesky", "_triangular_solve", "_sort",
           "_slogdet", "_eigh", "_svd", "_qr"]

_device = cuda.jit(device=True, inline=True)


@_device
def _f32(x):
    """A helper's result rounded back to float32 (helpers compute with float64 literals)."""
    return numba.float32(x)


@_device
def _exp(x):
    return math.exp(x)


@_device
def _log(x):
    return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)


@_device
def _log1p(x):
    return math.log1p(x) if x > -1 else (-math.inf if x == -1 else math.nan)


@_device
def _sqrt(x):
    return math.sqrt(x) if x >= 0 else math.nan


@_device
def _sign(x):
    return 1.0 if x > 0 else (-1.0 if x < 0 else x)


@_device
def _logistic(x):
    return 1.0 / (1.0 + math.exp(-x))


@_device
def _relu(x):
    return x if (x > 0 or x != x) else 0.0


@_device
def _softplus(x):
    return math.log1p(math.exp(-abs(x))) + (x if x > 0 else 0.0)


@_device
def _tanh(x):
    return math.tanh(x)


_power_by_squaring = _device(power_by_squaring)


@_device
def _where(test, x, y):
    """``x if test else y``, both computed (a guarded read whose index is clamped)."""
    return x if test else y


@_device
def _integer_pow(x, n):
    return _power_by_squaring(1.0, x, n)


@_device
def _pow(x, y):
    return x ** y


@_device
def _max(x, y):
    return x if (x > y or x != x) else y


@_device
def _min(x, y):
    return x if (x < y or x != x) else y


@_device
def _cast_float64(x):
    return numba.float64(x)


@_device
def _cast_float32(x):
    return numba.float32(x)


@_device
def _cast_bool(x):
    return x != 0


@_device
def _row(i, n):
    """The row of an axis of ``n`` that the index value ``i`` selects: rounded down, negative
    from the end, clamped into [0, n - 1] (NaN: 0), as quabla's clamp_index."""
    if i != i:
        return 0
    k = int(math.floor(max(min(i, n), -n)))
    if k < 0:
        k += n
    return max(min(k, n - 1), 0)


# -- one matrix per thread: ``out`` and the float64 workspaces are this matrix's 2-d views ----

_solve = _device(matrix_kernels.solve)
_cholesky = _device(matrix_kernels.cholesky)
_triangular_solve = _device(matrix_kernels.triangular_solve)
_sort = _device(matrix_kernels.sort)  # one (m, n) matrix of a sort per thread
_slogdet = _device(matrix_kernels.slogdet)
_eigh = _device(matrix_kernels.eigh)
_svd = _device(matrix_kernels.svd)
_qr = _device(matrix_kernels.qr)


# -- the elementwise math of issue 24 (the same conventions as the CPU's helpers; as Python
#    under the simulator, so no branch calls math on a value outside its domain) -----------

from quabla.core import special_functions as _special  # noqa: E402

__all__ += ["_floor", "_ceil", "_round", "_log2", "_log10", "_cbrt", "_xlogy", "_xlog1py",
            "_digamma", "_polygamma", "_erf_inv", "_ndtri"]

_WHOLE = 4503599627370496.0  # 2**52: every float at least this large is a whole number


@_device
def _floor(x):
    if not abs(x) < _WHOLE:  # NaN, infinities and whole numbers are their own floor
        return x
    return math.copysign(float(math.floor(x)), x)  # floor(-0.5) is -1, floor(-0.0) -0.0


@_device
def _ceil(x):
    if not abs(x) < _WHOLE:
        return x
    return math.copysign(float(math.ceil(x)), x)  # ceil(-0.5) is -0.0, as NumPy's


@_device
def _round(x):
    """Halves to even, as np.round."""
    if not abs(x) < _WHOLE:
        return x
    f = float(math.floor(x))
    d = x - f  # exact
    if d > 0.5 or (d == 0.5 and f - 2.0 * float(math.floor(0.5 * f)) != 0.0):
        f += 1.0
    return math.copysign(f, x)


@_device
def _log2(x):
    return math.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan)


@_device
def _log10(x):
    return math.log10(x) if x > 0 else (-math.inf if x == 0 else math.nan)


@_device
def _cbrt(x):
    """|x| ** (1/3) and one Newton step, with the sign of x (0, infinities and NaN kept)."""
    if x == 0 or not abs(x) < math.inf:
        return x
    a = abs(x)
    y = a ** (1.0 / 3.0)
    y = y - (y * y * y - a) / (3.0 * y * y)
    return math.copysign(y, x)


@_device
def _xlogy(x, y):
    return 0.0 if x == 0 else x * _log(y)


@_device
def _xlog1py(x, y):
    return 0.0 if x == 0 else x * _log1p(y)


_digamma = _device(_special.digamma)
_polygamma = _device(_special.polygamma)
_quantile = _device(_special.quantile)


@_device
def _erf_inv(x):
    return _quantile(x, 1)


@_device
def _ndtri(x):
    return _quantile(x, 0)
