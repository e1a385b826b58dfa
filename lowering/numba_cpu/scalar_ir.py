"""The runtime helpers of generated code as LLVM IR, without Numba: each builder emits, with
llvmlite's IR builder, what one helper computes. runtime.py makes them Numba intrinsics (for
the parts Numba compiles); direct.py calls them itself (for the parts it translates), so both
front ends give the same instructions.

They match the NumPy reference (NaN propagation of max/min, sign(0) == 0, repeated squaring
for integer powers). A call is a few instructions, where a Python helper that Numba inlined
cost a translation of its bytecode and its untyped passes at every call site (~4 ms each).
Each float helper computes what the Python form in its docstring computes (in float64 where
a float64 constant in that form widens a float32 argument); its caller rounds the result to
the argument's type, as NumPy's float32 arrays do: a float32 node's value is a float32
wherever it is used, so the copy stored to memory and the one used in place agree.
"""

import math

from llvmlite import ir

from .. import fortran
from ..abi import ARRAY_DATA, TUPLE_ITEMS

__all__ = ["double", "widened", "intrinsic_call", "libm_call", "declared", "pure_function",
           "negated", "FLOAT_HELPERS", "PAIR_HELPERS", "float_divmod", "pick_extremum", "tanh",
           "integer_pow", "clamp_index", "potrf", "arg_pointer", "byte_pointer", "memmove",
           "memset", "entry_slot", "gemm", "fortran_integer", "as_fortran_integer"]

I64 = ir.IntType(64)


def double(value):
    return ir.Constant(ir.DoubleType(), value)


def widened(builder, x):
    """``x`` as a double (a float32 extends exactly)."""
    return x if isinstance(x.type, ir.DoubleType) else builder.fpext(x, ir.DoubleType())


def intrinsic_call(builder, name, x):
    """LLVM's ``name`` (``llvm.exp``, ...) of ``x``, as Numba lowers math.exp, math.log, abs."""
    return builder.call(builder.module.declare_intrinsic(name, [x.type]), [x])


def declared(module, kind, name):
    """``module``'s declaration of the external function ``name`` of type ``kind`` (made on
    first use)."""
    return module.globals.get(name) or ir.Function(module, kind, name)


def pure_function(module, kind, name):
    """``declared``, marked read-only and non-throwing (as Numba declares libm's
    functions)."""
    fn = declared(module, kind, name)
    fn.attributes.add("readonly")
    fn.attributes.add("nounwind")
    return fn


def _internal(module, name):
    """A float64 function of one float64, internal to ``module`` and always inlined."""
    fn = ir.Function(module, ir.FunctionType(ir.DoubleType(), [ir.DoubleType()]), name)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    return fn


def libm_call(builder, name, x):
    """libm's ``name`` of ``x`` (``namef`` for a float32), as Numba lowers math.sqrt, log1p."""
    suffix = "f" if isinstance(x.type, ir.FloatType) else ""
    fn = pure_function(builder.module, ir.FunctionType(x.type, [x.type]), name + suffix)
    return builder.call(fn, [x])


def negated(builder, x):
    return builder.fsub(ir.Constant(x.type, -0.0), x)  # as Numba negates: -0.0 - x


def _logarithm(builder, x, pole, value):
    """``value if x > pole else (-math.inf if x == pole else math.nan)``: a logarithm's
    domain, as the NumPy reference has it."""
    pole = ir.Constant(x.type, pole)
    return builder.select(builder.fcmp_ordered(">", x, pole), widened(builder, value),
                          builder.select(builder.fcmp_ordered("==", x, pole),
                                         double(-math.inf), double(math.nan)))


def _libm_log(builder, x):
    """``math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)``: libm's call, the
    faster for one element on its own (``serial`` in elementwise.yaml)"""
    return _logarithm(builder, x, 0.0, intrinsic_call(builder, "llvm.log", x))


def _log(builder, x):
    """``math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)``, vectorisable
    (``_log_function``, in float64)"""
    return _logarithm(builder, x, 0.0, builder.call(_log_function(builder.module),
                                                    [widened(builder, x)]))


def _libm_log1p(builder, x):
    """``math.log1p(x) if x > -1 else (-math.inf if x == -1 else math.nan)``: libm's call (the
    faster for one element on its own: ``serial``)"""
    return _logarithm(builder, x, -1.0, libm_call(builder, "log1p", x))


def _log1p(builder, x):
    """``math.log1p(x) if x > -1 else (-math.inf if x == -1 else math.nan)``, vectorisable
    (``_log1p_function``, in float64)"""
    return _logarithm(builder, x, -1.0, builder.call(_log1p_function(builder.module),
                                                     [widened(builder, x)]))


def _log2(builder, x):
    """``math.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan)``"""
    return _logarithm(builder, x, 0.0, intrinsic_call(builder, "llvm.log2", x))


def _log10(builder, x):
    """``math.log10(x) if x > 0 else (-math.inf if x == 0 else math.nan)``"""
    return _logarithm(builder, x, 0.0, intrinsic_call(builder, "llvm.log10", x))


def _sqrt(builder, x):
    """``math.sqrt(x) if x >= 0 else math.nan``"""
    return builder.select(builder.fcmp_ordered(">=", x, ir.Constant(x.type, 0.0)),
                          widened(builder, libm_call(builder, "sqrt", x)), double(math.nan))


def _sign(builder, x):
    """``type(x)(1) if x > 0 else (type(x)(-1) if x < 0 else x)``"""
    zero = ir.Constant(x.type, 0.0)
    return builder.select(builder.fcmp_ordered(">", x, zero), ir.Constant(x.type, 1.0),
                          builder.select(builder.fcmp_ordered("<", x, zero),
                                         ir.Constant(x.type, -1.0), x))


def _fma(b, x, y, z):
    """x * y + z in one fused multiply-add (LLVM's ``fmuladd``: fused on every x86-64 core
    with FMA, by the fast instruction selector too, so every pipeline gives the same bits)."""
    fmuladd = b.module.declare_intrinsic("llvm.fmuladd", [ir.DoubleType()], ir.FunctionType(
        ir.DoubleType(), [ir.DoubleType()] * 3))
    return b.call(fmuladd, [x, y, z])


def _ln2_reduction(b, x):
    """``(k, hi, lo)``: x = k ln2 + (hi - lo), k the nearest integer to x / ln2 (an i64), ln2
    in two parts (fdlibm's: k times the first is exact for |k| < 2**11)."""
    floor = pure_function(b.module, ir.FunctionType(ir.DoubleType(), [ir.DoubleType()]), "floor")
    k = b.fptosi(b.call(floor, [b.fadd(b.fmul(x, double(1.4426950408889634)), double(0.5))]),
                 I64)
    kf = b.sitofp(k, ir.DoubleType())
    return (k, b.fsub(x, b.fmul(kf, double(6.93147180369123816490e-01))),
            b.fmul(kf, double(1.90821492927058770002e-10)))


def _exp_rational(b, x):
    """``(r, d, k)`` with exp(x) = (1 + 2r / d) * 2**k, |x| below ~750: fdlibm's rational
    approximation of exp on [-ln2/2, ln2/2] (d = 2 - c(r)), no call, no table, and the
    division left to the caller (``tanh`` shares it with its own)."""
    c = double
    k, hi, lo = _ln2_reduction(b, x)
    r = b.fsub(hi, lo)
    t = b.fmul(r, r)
    acc = c(4.13813679705723846039e-08)
    for coefficient in (-1.65339022054652515390e-06, 6.61375632143793436117e-05,
                        -2.77777777770155933842e-03, 1.66666666666666019037e-01):
        acc = _fma(b, t, acc, c(coefficient))
    return r, b.fsub(c(2.0), _fma(b, b.fneg(t), acc, r)), k


def _exp_polynomial(b, x):
    """``(y, k)`` with exp(x) = y * 2**k, |x| below ~750, without a division (as fast as
    the rational form vectorised, a third faster element by element): exp(r) = 1 + (r + r^2
    q(r)), q from exp's Taylor series to degree 13 (its remainder below 1e-17 for |r| <=
    ln2/2), by Horner's rule in fused multiply-adds; within 1 ulp."""
    c = double
    k, hi, lo = _ln2_reduction(b, x)
    r = b.fsub(hi, lo)
    q = c(1.0 / math.factorial(13))
    for n in range(12, 1, -1):
        q = _fma(b, q, r, c(1.0 / math.factorial(n)))
    return b.fadd(c(1.0), _fma(b, b.fmul(r, r), q, r)), k


def _power_of_two(b, k):
    """2**k for a normal exponent ``k``, from its bits."""
    exponent = b.shl(b.add(k, ir.Constant(I64, 1023)), ir.Constant(I64, 52))
    return b.bitcast(exponent, ir.DoubleType())


# -- exp: as tanh, a vectorisable body instead of libm's call per element --

_EXP = "quabla.exp"
# where exp(x) overflows to inf, and where it rounds to 0 (the halfway point below the least
# subnormal)
_EXP_OVERFLOW = 7.09782712893383973096e+02
_EXP_UNDERFLOW = -7.45133219101941108420e+02


def _exp_function(module):
    """The float64 ``exp`` of ``module`` (defined on first use), within 1 ulp:
    ``_exp_polynomial`` on x clamped to [-746, 710], scaled by 2**k in two halves (each a
    normal power of two, so a subnormal result is rounded once, by the last multiply), inf
    above the overflow threshold, 0 below the underflow one, NaN kept; every choice a select."""
    if _EXP in module.globals:
        return module.globals[_EXP]
    fn = _internal(module, _EXP)
    b, c = ir.IRBuilder(fn.append_basic_block()), double
    (x,) = fn.args
    clamped = b.select(b.fcmp_ordered(">", x, c(710.0)), c(710.0),
                       b.select(b.fcmp_ordered(">=", x, c(-746.0)), x, c(-746.0)))  # NaN: -746
    y, k = _exp_polynomial(b, clamped)
    half = b.ashr(k, ir.Constant(I64, 1))
    res = b.fmul(b.fmul(y, _power_of_two(b, half)), _power_of_two(b, b.sub(k, half)))
    res = b.select(b.fcmp_ordered(">", x, c(_EXP_OVERFLOW)), c(math.inf), res)
    res = b.select(b.fcmp_ordered("<", x, c(_EXP_UNDERFLOW)), c(0.0), res)
    b.ret(b.select(b.fcmp_ordered("==", x, x), res, x))  # NaN: x itself
    return fn


# -- log: fdlibm's, as exp above (a select for every case, no call) --

_LOG, _LOG1P = "quabla.log", "quabla.log1p"
_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
       2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
       1.479819860511658591e-01)


def _log_reduction(b, x):
    """``(k, f)`` with x = 2**k (1 + f), 1 + f in [sqrt(2)/2, sqrt(2)), for a float64 x > 0
    (a subnormal scaled by 2**54 first; f exact), from x's bits."""
    c = double
    tiny = b.fcmp_ordered("<", x, c(2.2250738585072014e-308))
    scaled = b.select(tiny, b.fmul(x, c(2.0 ** 54)), x)
    bits = b.bitcast(scaled, I64)
    k = b.sub(b.lshr(bits, ir.Constant(I64, 52)),
              b.select(tiny, ir.Constant(I64, 1023 + 54), ir.Constant(I64, 1023)))
    m = b.bitcast(b.or_(b.and_(bits, ir.Constant(I64, (1 << 52) - 1)),
                        ir.Constant(I64, 1023 << 52)), ir.DoubleType())
    high = b.fcmp_ordered(">", m, c(math.sqrt(2.0)))
    return b.add(k, b.zext(high, I64)), b.fsub(b.select(high, b.fmul(m, c(0.5)), m), c(1.0))


def _log_core(b, k, f, correction):
    """k ln2 + log(1 + f) + ``correction`` (a rounding error of 1 + f, relative), by fdlibm's
    s = f / (2 + f) and polynomial in s**2, within 1 ulp."""
    c = double
    s = b.fdiv(f, b.fadd(c(2.0), f))
    z = b.fmul(s, s)
    w = b.fmul(z, z)
    t1 = b.fmul(w, b.fadd(c(_LG[1]), b.fmul(w, b.fadd(c(_LG[3]), b.fmul(w, c(_LG[5]))))))
    t2 = b.fmul(z, b.fadd(c(_LG[0]), b.fmul(w, b.fadd(c(_LG[2]), b.fmul(w, b.fadd(
        c(_LG[4]), b.fmul(w, c(_LG[6]))))))))
    r = b.fadd(t2, t1)
    hfsq = b.fmul(b.fmul(c(0.5), f), f)
    kf = b.sitofp(k, ir.DoubleType())
    low = b.fadd(b.fmul(kf, c(1.90821492927058770002e-10)), correction)
    return b.fsub(b.fmul(kf, c(6.93147180369123816490e-01)),
                  b.fsub(b.fsub(hfsq, b.fadd(b.fmul(s, b.fadd(hfsq, r)), low)), f))


def _log_function(module):
    """The float64 ``log`` of ``module`` for x > 0 (defined on first use), within 1 ulp
    (``_log_reduction``, ``_log_core``); inf for inf. What it gives elsewhere (x <= 0, NaN)
    its caller replaces (``_logarithm``)."""
    if _LOG in module.globals:
        return module.globals[_LOG]
    fn = _internal(module, _LOG)
    b, c = ir.IRBuilder(fn.append_basic_block()), double
    (x,) = fn.args
    usable = b.and_(b.fcmp_ordered(">", x, c(0.0)), b.fcmp_ordered("<", x, c(math.inf)))
    k, f = _log_reduction(b, b.select(usable, x, c(1.0)))
    res = _log_core(b, k, f, c(0.0))
    b.ret(b.select(b.fcmp_ordered("==", x, c(math.inf)), c(math.inf), res))
    return fn


def _log1p_function(module):
    """The float64 ``log1p`` of ``module`` for x > -1 (defined on first use), fdlibm's
    (within 2.1 ulp measured, at arguments in (0.41, 0.5]): u = 1 + x reduced as log's, f
    taken as x itself where u is in [sqrt(2)/2, sqrt(2)) (k = 0), else the rounding of u
    corrected by (x - (u - 1)) / u; inf for inf."""
    if _LOG1P in module.globals:
        return module.globals[_LOG1P]
    fn = _internal(module, _LOG1P)
    b, c = ir.IRBuilder(fn.append_basic_block()), double
    (x,) = fn.args
    usable = b.and_(b.fcmp_ordered(">", x, c(-1.0)), b.fcmp_ordered("<", x, c(math.inf)))
    x1 = b.select(usable, x, c(0.0))
    u = b.fadd(c(1.0), x1)
    k, f = _log_reduction(b, u)
    zero = b.icmp_signed("==", k, ir.Constant(I64, 0))
    above = b.icmp_signed(">", k, ir.Constant(I64, 0))
    error = b.select(above, b.fsub(c(1.0), b.fsub(u, x1)), b.fsub(x1, b.fsub(u, c(1.0))))
    correction = b.select(zero, c(0.0), b.fdiv(error, u))
    res = _log_core(b, k, b.select(zero, x1, f), correction)
    res = b.select(b.fcmp_ordered("==", x, c(0.0)), x, res)  # -0.0 kept
    b.ret(b.select(b.fcmp_ordered("==", x, c(math.inf)), c(math.inf), res))
    return fn


def _exp(builder, x):
    """``math.exp(x)`` computed in float64 (a float32 one rounded by the caller: more accurate
    than libm's expf, and it vectorises)."""
    return builder.call(_exp_function(builder.module), [widened(builder, x)])


def _logistic(builder, x):
    """``1.0 / (1.0 + _exp(-x))``"""
    e = _exp(builder, negated(builder, x))
    return builder.fdiv(double(1.0), builder.fadd(double(1.0), e))


def _positive_part(builder, x):
    """``x if x > 0 else type(x)(0)``"""
    zero = ir.Constant(x.type, 0.0)
    return builder.select(builder.fcmp_ordered(">", x, zero), x, zero)


def _relu(builder, x):
    """``x if (x > 0 or x != x) else type(x)(0)``"""
    return builder.select(builder.fcmp_unordered("!=", x, x), x, _positive_part(builder, x))


def _libm_softplus(builder, x):
    """``math.log1p(math.exp(-abs(x))) + (x if x > 0 else type(x)(0))`` by libm's calls (the
    faster for one element on its own: ``serial``)"""
    magnitude = intrinsic_call(builder, "llvm.fabs", x)
    e = intrinsic_call(builder, "llvm.exp", negated(builder, magnitude))
    return builder.fadd(libm_call(builder, "log1p", e), _positive_part(builder, x))


def _softplus(builder, x):
    """``log1p(exp(-abs(x))) + (x if x > 0 else 0)`` in float64, vectorisable (``_exp``,
    ``_log1p_function``)."""
    wide = widened(builder, x)
    e = _exp(builder, negated(builder, intrinsic_call(builder, "llvm.fabs", wide)))
    out = builder.fadd(builder.call(_log1p_function(builder.module), [e]),
                       _positive_part(builder, wide))
    return builder.select(builder.fcmp_ordered("==", wide, wide), out, wide)  # NaN kept


def _floor(builder, x):
    """``math.floor(x)`` as a float (NaN, infinities and the sign of a zero kept)"""
    return intrinsic_call(builder, "llvm.floor", x)


def _ceil(builder, x):
    """``math.ceil(x)`` as a float (NaN, infinities and the sign of a zero kept)"""
    return intrinsic_call(builder, "llvm.ceil", x)


def _round(builder, x):
    """``x`` rounded to a whole number, halves to even (``np.round``)"""
    return intrinsic_call(builder, "llvm.rint", x)


def _cbrt(builder, x):
    """libm's ``cbrt(x)``, as ``np.cbrt``"""
    return libm_call(builder, "cbrt", x)


def _times_unless_zero(builder, x, value):
    """``0.0 if x == 0 else x * value`` (``value`` a double)"""
    product = builder.fmul(widened(builder, x), value)
    return builder.select(builder.fcmp_ordered("==", x, ir.Constant(x.type, 0.0)),
                          double(0.0), product)


def _xlogy(builder, x, y):
    """``0.0 if x == 0 else x * _log(y)``"""
    return _times_unless_zero(
        builder, x, _logarithm(builder, y, 0.0, intrinsic_call(builder, "llvm.log", y)))


def _xlog1py(builder, x, y):
    """``0.0 if x == 0 else x * _log1p(y)``"""
    return _times_unless_zero(
        builder, x, _logarithm(builder, y, -1.0, libm_call(builder, "log1p", y)))


# generated code's name of each helper of one float -> its builder (its caller converts an
# integer argument to a float64, and rounds the result to the argument's type)
FLOAT_HELPERS = {"_exp": _exp, "_log": _log, "_log1p": _log1p, "_softplus": _softplus,
                 "_libm_log": _libm_log, "_libm_log1p": _libm_log1p,
                 "_libm_softplus": _libm_softplus, "_log2": _log2, "_log10": _log10,
                 "_sqrt": _sqrt, "_sign": _sign, "_logistic": _logistic, "_relu": _relu,
                 "_floor": _floor, "_ceil": _ceil, "_round": _round, "_cbrt": _cbrt}
# ... and of two floats (unified to one type first)
PAIR_HELPERS = {"_xlogy": _xlogy, "_xlog1py": _xlog1py}


def float_divmod(builder, x, y):
    """``(x // y, x % y)`` of two floats of one type as Python (and Numba) computes them:
    the remainder takes the divisor's sign, the quotient is snapped to a whole number, a zero
    keeps the sign of the true quotient; by zero, ``x / y`` and ``fmod(x, y)``. (Numba's
    branches, as selects: the same results.)"""
    zero, one = ir.Constant(x.type, 0.0), ir.Constant(x.type, 1.0)
    mod = builder.frem(x, y)
    div = builder.fdiv(builder.fsub(x, mod), y)
    y_negative = builder.fcmp_ordered("<", y, zero)
    mod_nonzero = builder.fcmp_unordered("!=", mod, zero)
    flip = builder.and_(mod_nonzero, builder.icmp_unsigned(
        "!=", y_negative, builder.fcmp_ordered("<", mod, zero)))
    div = builder.select(flip, builder.fsub(div, one), div)
    mod = builder.select(mod_nonzero, builder.select(flip, builder.fadd(mod, y), mod),
                         builder.select(y_negative, ir.Constant(x.type, -0.0), zero))
    floor = libm_call(builder, "floor", div)
    floor = builder.select(builder.fcmp_ordered(">", builder.fsub(div, floor),
                                                ir.Constant(x.type, 0.5)),
                           builder.fadd(floor, one), floor)
    signed_zero = builder.fdiv(builder.fmul(builder.fmul(div, div), x), y)
    quotient = builder.select(builder.fcmp_ordered("!=", div, zero), floor, signed_zero)
    by_zero = builder.fcmp_ordered("==", y, zero)
    return (builder.select(by_zero, builder.fdiv(x, y), quotient),
            builder.select(by_zero, builder.frem(x, y), mod))


def pick_extremum(builder, order, a, b):
    """The NaN-propagating max (``order`` ``>``) or min (``<``) of two floats, LLVM's
    ``maximum``/``minimum`` (NaN if either is; +0.0 above -0.0), or the greater (lesser) of
    two bools of one type. Neither float result depends on which operand comes first, so a
    loop that reduces with it is one LLVM vectorises (it did not vectorise ``a if (a > b or
    a != a) else b``: a softmax's row maxima ran one element at a time), with the bits of
    the loop run element by element."""
    if isinstance(a.type, ir.IntType):
        return builder.select(builder.icmp_unsigned(order, a, b), a, b)
    name = "llvm.maximum" if order == ">" else "llvm.minimum"
    kind = ir.FunctionType(a.type, [a.type, a.type])
    return builder.call(builder.module.declare_intrinsic(name, [a.type], kind), [a, b])


# -- tanh: libm's is a call per element (~10 ns) that stops LLVM from vectorising the loop; this
#    one is branch-free straight-line code (Cephes' rational form below 0.625, fdlibm's exp
#    above), within ~1.3 ulp of the exact value (libm's: ~2.1 ulp), NaN, +-inf and -0.0 kept.
#    It is built once per module, and called (LLVM inlines it) --

_TANH = "quabla.tanh"


def _tanh_function(module):
    """The float64 ``tanh`` of ``module`` (defined on first use):
    tanh(x) = x + x z P(z) / Q(z) with z = x * x for |x| < 0.625, else
    sign(x) (1 - 2 d / (d (2**k + 1) + 2r 2**k)) with exp(2 |x|) = (1 + 2r / d) 2**k
    (``_exp_rational``: that is 2 / (exp(2 |x|) + 1) with one division) and |x| clamped to
    22 (tanh rounds to 1 there). Both sides share that division, the polynomials are fused
    multiply-adds (within 1.2 ulp measured), and every choice is a select, so a loop around it
    vectorises."""
    if _TANH in module.globals:
        return module.globals[_TANH]
    fn = _internal(module, _TANH)
    b, c = ir.IRBuilder(fn.append_basic_block()), double
    (x,) = fn.args
    ax = intrinsic_call(b, "llvm.fabs", x)
    z = b.fmul(x, x)
    r, d, k = _exp_rational(b, b.fmul(c(2.0), b.select(b.fcmp_ordered("<", ax, c(22.0)), ax,
                                                       c(22.0))))
    scale = _power_of_two(b, k)
    small = b.fcmp_ordered("<", ax, c(0.625))
    p = _fma(b, _fma(b, c(-9.64399179425052238628e-1), z, c(-9.92877231001918586564e1)), z,
             c(-1.61468768441708447952e3))
    q = _fma(b, _fma(b, b.fadd(z, c(1.12811678491632931402e2)), z,
                     c(2.23548839060100448583e3)), z, c(4.84406305325125486048e3))
    t = b.fdiv(b.select(small, b.fmul(b.fmul(x, z), p), b.fmul(c(-2.0), d)),
               b.select(small, q, _fma(b, d, b.fadd(scale, c(1.0)),
                                         b.fmul(b.fmul(c(2.0), r), scale))))
    big = b.fadd(c(1.0), t)
    res = b.select(small, b.select(b.fcmp_unordered("!=", x, c(0.0)), b.fadd(x, t), x),
                   b.select(b.fcmp_ordered("<", x, c(0.0)), negated(b, big), big))
    b.ret(b.select(b.fcmp_ordered("==", ax, ax), res, x))  # NaN: x itself
    return fn


def tanh(builder, x):
    """tanh of a double or float (rounded from the double result: more accurate than libm's
    tanhf, and it still vectorises)."""
    out = builder.call(_tanh_function(builder.module), [widened(builder, x)])
    return out if out.type == x.type else builder.fptrunc(out, x.type)


def integer_pow(builder, base, k):
    """``base ** k`` for a whole ``k >= 0`` by repeated squaring, unrolled: the multiplies of
    ``power_by_squaring`` (quabla/core/rules/elementwise.py) in its order, from 1."""
    result = ir.Constant(base.type, 1.0)
    while k:
        if k & 1:
            result = builder.fmul(result, base)
        k >>= 1
        if k:
            base = builder.fmul(base, base)
    return result


def clamp_index(builder, x, count):
    """The row of ``count`` (an i64) that the index ``x`` (an i64 or a float) selects, as
    ``clamp_index`` in quabla/core/rules/structural.py: NaN is 0, rounded down, a negative
    one counts from the end, then clamped into [0, count - 1]. As Python::

        if i != i:
            return 0
        k = math.floor(i) if abs(i) < 1e18 else (n if i > 0 else -n)
        if k < 0:
            k += n
        return min(max(k, 0), n - 1)
    """
    zero = ir.Constant(I64, 0)
    if isinstance(x.type, ir.IntType):
        k = x
    else:  # fptosi of a value out of range is poison, but then the select takes n or -n
        in_range = builder.fcmp_ordered("<", intrinsic_call(builder, "llvm.fabs", x),
                                        ir.Constant(x.type, 1e18))
        beyond = builder.select(builder.fcmp_ordered(">", x, ir.Constant(x.type, 0.0)),
                                count, builder.neg(count))
        down = intrinsic_call(builder, "llvm.floor", x)
        k = builder.select(in_range, builder.fptosi(down, I64), beyond)
    k = builder.select(builder.icmp_signed("<", k, zero), builder.add(k, count), k)
    k = builder.select(builder.icmp_signed("<", k, zero), zero, k)
    last = builder.sub(count, ir.Constant(I64, 1))
    k = builder.select(builder.icmp_signed(">", k, last), last, k)
    if not isinstance(x.type, ir.IntType):
        k = builder.select(builder.fcmp_unordered("uno", x, x), zero, k)
    return k


# -- arrays over raw memory (see lowering/native.py for the calling convention) --

def byte_pointer():
    return ir.IntType(8).as_pointer()


def _field(builder, base, offset):
    """The pointer stored ``offset`` bytes into the C struct at ``base``."""
    slot = builder.gep(builder.bitcast(base, byte_pointer()), [ir.Constant(I64, offset)])
    return builder.load(builder.bitcast(slot, byte_pointer().as_pointer()))


def arg_pointer(builder, objects, index, start, pointer_type):
    """A pointer of ``pointer_type`` to element ``start`` (an i64) of the data of the array
    ``args[index]`` (``index`` an i64), where ``objects`` is the entry's tuple object."""
    items = builder.gep(builder.bitcast(objects, byte_pointer()), [ir.Constant(I64, TUPLE_ITEMS)])
    item = builder.load(builder.gep(builder.bitcast(items, byte_pointer().as_pointer()), [index]))
    data = builder.bitcast(_field(builder, item, ARRAY_DATA), pointer_type)
    return builder.gep(data, [start])


def _memory_call(builder, name, dst, operand, size):
    kind = [byte_pointer(), size.type] if name == "llvm.memset" else \
        [byte_pointer(), operand.type, size.type]
    fn = builder.module.declare_intrinsic(name, kind)
    return builder.call(fn, [builder.bitcast(dst, byte_pointer()), operand, size,
                             ir.Constant(ir.IntType(1), 0)])


def memmove(builder, dst, src, count, itemsize):
    """``count`` (an i64) elements of ``itemsize`` bytes from ``src`` to ``dst``: one
    ``llvm.memmove``, not a loop for LLVM to vectorise with its own overlap checks."""
    return _memory_call(builder, "llvm.memmove", dst, builder.bitcast(src, byte_pointer()),
                        builder.mul(count, ir.Constant(count.type, itemsize)))


def memset(builder, dst, count, itemsize):
    """``count`` (an i64) elements of ``itemsize`` bytes at ``dst`` set to zero bits (0, 0.0,
    False): one ``llvm.memset``."""
    return _memory_call(builder, "llvm.memset", dst, ir.Constant(ir.IntType(8), 0),
                        builder.mul(count, ir.Constant(count.type, itemsize)))


def entry_slot(builder, kind):
    """A stack slot of ``kind`` in the function's entry block (which LLVM's first passes make
    a register)."""
    with builder.goto_entry_block():
        return builder.alloca(kind)


def gemm(builder, symbol, pa, pb, pc, m, k, n, ta, tb):
    """``out`` (m x n) = op(``a``) @ op(``b``) for pointers to C-contiguous matrices (the
    sizes and flags i64 values), op transposing the operand whose flag ``ta``/``tb`` is
    nonzero (then stored as k x m or n x k), by one call of the Fortran ``dgemm``/``sgemm``
    named ``symbol`` (``fortran.symbol``)."""
    char, integer_, void = ir.IntType(8), fortran_integer(), byte_pointer()
    fn = declared(builder.module, ir.FunctionType(
        ir.VoidType(), [void, void] + [integer_.as_pointer()] * 3 + [void, void,
        integer_.as_pointer(), void, integer_.as_pointer(), void, void,
        integer_.as_pointer()]), symbol)
    by_reference, integer = _fortran_arguments(builder)

    def operand(trans, pointer, rows, cols):
        # column-major BLAS sees a C matrix transposed: out^T = op(b)^T op(a)^T
        flag = builder.icmp_signed("!=", trans, ir.Constant(I64, 0))
        letter = builder.select(flag, ir.Constant(char, ord("t")), ir.Constant(char, ord("n")))
        return (by_reference(letter), integer(builder.select(flag, rows, cols)),
                builder.bitcast(pointer, void))

    op_a, lda, pa_ = operand(tb, pb, k, n)
    op_b, ldb, pb_ = operand(ta, pa, m, k)
    scalar = pc.type.pointee
    one = by_reference(ir.Constant(scalar, 1.0))
    zero = by_reference(ir.Constant(scalar, 0.0))
    builder.call(fn, [op_a, op_b, integer(n), integer(m), integer(k), builder.bitcast(one, void),
                      pa_, lda, pb_, ldb, builder.bitcast(zero, void),
                      builder.bitcast(pc, void), integer(n)])


def fortran_integer():
    """The LLVM type of the BLAS/LAPACK library's integers (``fortran.integer_bits``)."""
    return ir.IntType(fortran.integer_bits())


def as_fortran_integer(builder, value):
    """The i64 ``value`` as the library's integer."""
    kind = fortran_integer()
    return value if kind.width == 64 else builder.trunc(value, kind)


def _fortran_arguments(builder):
    """``(by_reference, integer)``: a value, and an i64 as a Fortran integer, passed by address
    (Fortran takes every argument by address)."""
    def by_reference(value):
        slot = entry_slot(builder, value.type)
        builder.store(value, slot)
        return slot

    def integer(value):
        return by_reference(as_fortran_integer(builder, value))
    return by_reference, integer


def potrf(builder, symbol, pa, n):
    """The Cholesky factor of the n x n C-contiguous float64 ``a`` (``n`` an i64 value), in
    place, by one call of the Fortran ``dpotrf`` named ``symbol`` (``fortran.symbol``):
    its lower triangle becomes L (a = L L^T; column major sees a^T = a and writes U = L^T in
    its upper triangle), the strict upper one is left as it was. Returns LAPACK's ``info``
    as an i64: 0, or the order of the first minor that is not positive definite."""
    void, integer_ = byte_pointer(), fortran_integer()
    pointer = integer_.as_pointer()
    fn = declared(builder.module, ir.FunctionType(ir.VoidType(), [void, pointer, void, pointer,
                                                                  pointer]), symbol)
    by_reference, integer = _fortran_arguments(builder)
    info = by_reference(ir.Constant(integer_, 0))
    upper = by_reference(ir.Constant(ir.IntType(8), ord("u")))
    size = integer(n)
    builder.call(fn, [builder.bitcast(upper, void), size, builder.bitcast(pa, void), size, info])
    found = builder.load(info)
    return found if integer_.width == 64 else builder.sext(found, I64)


def trsm(builder, symbol, pa, pb, n, m, lower, transpose):
    """``b`` (n x m, C-contiguous, overwritten) = op(T)^-1 ``b`` for the n x n C-contiguous
    ``a`` (sizes and flags i64 values): T its lower (``lower`` nonzero) or upper triangle,
    op(T) = T or T^T (``transpose``); by one call of the Fortran ``dtrsm``/``strsm`` named
    ``symbol`` (``fortran.symbol``). Column major sees every matrix transposed: it solves
    X^T op(T)^T = B^T, with T's triangle the other one of a^T."""
    char, void = ir.IntType(8), byte_pointer()
    pointer = fortran_integer().as_pointer()
    fn = declared(builder.module, ir.FunctionType(
        ir.VoidType(), [void] * 4 + [pointer, pointer, void, void, pointer, void, pointer]),
        symbol)
    by_reference, integer = _fortran_arguments(builder)

    def letter(flag, yes, no):
        chosen = builder.select(builder.icmp_signed("!=", flag, ir.Constant(I64, 0)),
                                ir.Constant(char, ord(yes)), ir.Constant(char, ord(no)))
        return builder.bitcast(by_reference(chosen), void)

    always = ir.Constant(I64, 1)
    one = by_reference(ir.Constant(pb.type.pointee, 1.0))
    builder.call(fn, [letter(always, "r", "r"), letter(lower, "u", "l"),
                      letter(transpose, "t", "n"), letter(always, "n", "n"), integer(m),
                      integer(n), builder.bitcast(one, void), builder.bitcast(pa, void),
                      integer(n), builder.bitcast(pb, void), integer(m)])
