"""Scalar and pointer helpers that the generated Numba code calls, matching the NumPy
reference (NaN propagation of max/min, sign(0) == 0, repeated squaring for integer powers).
All are intrinsics (or lowerings): they compile for the entries' lean target (target.py). The
array kernels are in kernels.py."""

import math
import operator

from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.imputils import lower_builtin
from numba.extending import intrinsic

from quabla.core import special_functions as _special

from ..native import ARRAY_DATA, TUPLE_ITEMS, blas_symbols
from .target import kernel as _kernel

# -- scalar helpers as LLVM IR: a call is a few instructions, where a Python helper that Numba
#    inlined cost a translation of its bytecode and its untyped passes at every call site (~4 ms
#    each). Each computes what the Python form in its docstring computes (in float64 where a
#    float64 constant in that form widens a float32 argument) and returns the argument's type,
#    as NumPy's float32 arrays do: a float32 node's value is a float32 wherever it is used, so
#    the copy stored to memory and the one used in place (a max and its comparison) agree --

def _float_helper(build):
    """An intrinsic of one float (an integer is taken as a float64) that ``build(builder, x)``
    emits; its result is rounded to the argument's type."""
    def typer(typingctx, x):
        if not isinstance(x, (types.Float, types.Integer)):
            return None
        arg = x if isinstance(x, types.Float) else types.float64

        def codegen(context, builder, sig, args):
            value = build(builder, args[0])
            return value if value.type == args[0].type else builder.fptrunc(value, args[0].type)
        return arg(arg), codegen
    typer.__name__, typer.__doc__ = build.__name__, build.__doc__
    return intrinsic(typer)


def _double(value):
    return ir.Constant(ir.DoubleType(), value)


def _widened(builder, x):
    """``x`` as a double (a float32 extends exactly)."""
    return x if isinstance(x.type, ir.DoubleType) else builder.fpext(x, ir.DoubleType())


def _intrinsic_call(builder, name, x):
    """LLVM's ``name`` (``llvm.exp``, ...) of ``x``, as Numba lowers math.exp, math.log, abs."""
    return builder.call(builder.module.declare_intrinsic(name, [x.type]), [x])


def _libm_call(builder, name, x):
    """libm's ``name`` of ``x`` (``namef`` for a float32), as Numba lowers math.sqrt, log1p."""
    suffix = "f" if isinstance(x.type, ir.FloatType) else ""
    fn = cgutils.insert_pure_function(builder.module, ir.FunctionType(x.type, [x.type]),
                                      name + suffix)
    return builder.call(fn, [x])


def _negated(builder, x):
    return builder.fsub(ir.Constant(x.type, -0.0), x)  # as Numba negates: -0.0 - x


def _logarithm(builder, x, pole, value):
    """``value if x > pole else (-math.inf if x == pole else math.nan)``: a logarithm's
    domain, as the NumPy reference has it."""
    pole = ir.Constant(x.type, pole)
    return builder.select(builder.fcmp_ordered(">", x, pole), _widened(builder, value),
                          builder.select(builder.fcmp_ordered("==", x, pole),
                                         _double(-math.inf), _double(math.nan)))


@_float_helper
def _log(builder, x):
    """``math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)``"""
    return _logarithm(builder, x, 0.0, _intrinsic_call(builder, "llvm.log", x))


@_float_helper
def _log1p(builder, x):
    """``math.log1p(x) if x > -1 else (-math.inf if x == -1 else math.nan)``"""
    return _logarithm(builder, x, -1.0, _libm_call(builder, "log1p", x))


@_float_helper
def _sqrt(builder, x):
    """``math.sqrt(x) if x >= 0 else math.nan``"""
    return builder.select(builder.fcmp_ordered(">=", x, ir.Constant(x.type, 0.0)),
                          _widened(builder, _libm_call(builder, "sqrt", x)), _double(math.nan))


@_float_helper
def _sign(builder, x):
    """``type(x)(1) if x > 0 else (type(x)(-1) if x < 0 else x)``"""
    zero = ir.Constant(x.type, 0.0)
    return builder.select(builder.fcmp_ordered(">", x, zero), ir.Constant(x.type, 1.0),
                          builder.select(builder.fcmp_ordered("<", x, zero),
                                         ir.Constant(x.type, -1.0), x))


@_float_helper
def _logistic(builder, x):
    """``1.0 / (1.0 + math.exp(-x))``"""
    e = _widened(builder, _intrinsic_call(builder, "llvm.exp", _negated(builder, x)))
    return builder.fdiv(_double(1.0), builder.fadd(_double(1.0), e))


def _positive_part(builder, x):
    """``x if x > 0 else type(x)(0)``"""
    zero = ir.Constant(x.type, 0.0)
    return builder.select(builder.fcmp_ordered(">", x, zero), x, zero)


@_float_helper
def _relu(builder, x):
    """``x if (x > 0 or x != x) else type(x)(0)``"""
    return builder.select(builder.fcmp_unordered("!=", x, x), x, _positive_part(builder, x))


@_float_helper
def _softplus(builder, x):
    """``math.log1p(math.exp(-abs(x))) + (x if x > 0 else type(x)(0))``"""
    e = _intrinsic_call(builder, "llvm.exp",
                        _negated(builder, _intrinsic_call(builder, "llvm.fabs", x)))
    return builder.fadd(_libm_call(builder, "log1p", e), _positive_part(builder, x))


def _extremum(name, order):
    """``x if (x <order> y or x != x) else y`` (NaN-propagating max or min) in the type that
    unifies ``x``'s and ``y``'s."""
    def typer(typingctx, x, y):
        out = typingctx.unify_pairs(x, y)
        if not isinstance(out, (types.Float, types.Boolean)):
            return None

        def codegen(context, builder, sig, args):
            a, b = (context.cast(builder, v, t, out) for v, t in zip(args, sig.args))
            if isinstance(out, types.Boolean):
                pick = builder.icmp_unsigned(order, a, b)
            else:
                pick = builder.or_(builder.fcmp_ordered(order, a, b),
                                   builder.fcmp_unordered("!=", a, a))
            return builder.select(pick, a, b)
        return out(x, y), codegen
    typer.__name__ = name
    return intrinsic(typer)


_max = _extremum("_max", ">")
_min = _extremum("_min", "<")


# -- tanh: libm's is a call per element (~10 ns) that stops LLVM from vectorising the loop; this
#    one is branch-free straight-line code (Cephes' rational form below 0.625, fdlibm's exp
#    above), within ~1.3 ulp of the exact value (libm's: ~2.1 ulp), NaN, +-inf and -0.0 kept.
#    It is built as LLVM IR, once per module, and called (LLVM inlines it): written as a Numba
#    function it cost a compile of its own, ~0.1 s per float type in every process --

_TANH = "quabla.tanh"


def _tanh_function(module):
    """The float64 ``tanh`` of ``module`` (defined on first use):
    tanh(x) = x + x z P(z) / Q(z) with z = x * x for |x| < 0.625, else
    sign(x) (1 - 2 / (exp(2 |x|) + 1)) with |x| clamped to 22 (tanh rounds to 1 there). Both
    sides share one division, and every choice is a select, so a loop around it vectorises."""
    if _TANH in module.globals:
        return module.globals[_TANH]
    double = ir.DoubleType()
    fn = ir.Function(module, ir.FunctionType(double, [double]), _TANH)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    b, c = ir.IRBuilder(fn.append_basic_block()), _double
    (x,) = fn.args
    ax = _intrinsic_call(b, "llvm.fabs", x)
    z = b.fmul(x, x)
    e = _exp_0_45(b, b.fmul(c(2.0), b.select(b.fcmp_ordered("<", ax, c(22.0)), ax, c(22.0))))
    small = b.fcmp_ordered("<", ax, c(0.625))
    p = b.fsub(b.fmul(b.fsub(b.fmul(c(-9.64399179425052238628e-1), z),
                             c(9.92877231001918586564e1)), z), c(1.61468768441708447952e3))
    q = b.fadd(b.fmul(b.fadd(b.fmul(b.fadd(z, c(1.12811678491632931402e2)), z),
                             c(2.23548839060100448583e3)), z), c(4.84406305325125486048e3))
    t = b.fdiv(b.select(small, b.fmul(b.fmul(x, z), p), c(-2.0)),
               b.select(small, q, b.fadd(e, c(1.0))))
    big = b.fadd(c(1.0), t)
    res = b.select(small, b.select(b.fcmp_unordered("!=", x, c(0.0)), b.fadd(x, t), x),
                   b.select(b.fcmp_ordered("<", x, c(0.0)), _negated(b, big), big))
    b.ret(b.select(b.fcmp_ordered("==", ax, ax), res, x))  # NaN: x itself
    return fn


def _exp_0_45(b, x):
    """exp(x) for 0 <= x <= 45 (fdlibm's reduction and rational approximation, < 1 ulp); the
    power of two is built from its bits, so there is no call and no table."""
    double, i64, c = ir.DoubleType(), ir.IntType(64), _double
    floor = cgutils.insert_pure_function(b.module, ir.FunctionType(double, [double]), "floor")
    k = b.fptosi(b.call(floor, [b.fadd(b.fmul(x, c(1.4426950408889634)), c(0.5))]), i64)
    kf = b.sitofp(k, double)
    hi = b.fsub(x, b.fmul(kf, c(6.93147180369123816490e-01)))
    lo = b.fmul(kf, c(1.90821492927058770002e-10))
    r = b.fsub(hi, lo)
    t = b.fmul(r, r)
    acc = c(4.13813679705723846039e-08)
    for coefficient in (-1.65339022054652515390e-06, 6.61375632143793436117e-05,
                        -2.77777777770155933842e-03, 1.66666666666666019037e-01):
        acc = b.fadd(c(coefficient), b.fmul(t, acc))
    cc = b.fsub(r, b.fmul(t, acc))
    y = b.fsub(c(1.0), b.fsub(b.fsub(lo, b.fdiv(b.fmul(r, cc), b.fsub(c(2.0), cc))), hi))
    scale = b.bitcast(b.shl(b.add(k, ir.Constant(i64, 1023)), ir.Constant(i64, 52)), double)
    return b.fmul(y, scale)


@intrinsic
def _tanh(typingctx, x):
    """tanh of a float64 or float32 (rounded from the float64 result: more accurate than
    libm's tanhf, and it still vectorises)."""
    if x not in (types.float64, types.float32):
        return None

    def codegen(context, builder, sig, args):
        (value,) = args
        out = builder.call(_tanh_function(builder.module), [_widened(builder, value)])
        return out if x == types.float64 else builder.fptrunc(out, value.type)

    return x(x), codegen


@intrinsic
def _pow(typingctx, x, y):
    """``x ** y``, typed and lowered by Numba's own rules for the operator."""
    sig = typingctx.resolve_function_type(operator.pow, (x, y), {})
    if sig is None:
        return None

    def codegen(context, builder, _, args):
        cast = [context.cast(builder, v, t, u) for v, t, u in zip(args, (x, y), sig.args)]
        return context.get_function(operator.pow, sig)(builder, cast)
    return sig.return_type(x, y), codegen


def _cast_to(dtype):
    """An intrinsic converting a number or bool to ``dtype`` as NumPy does (to bool: nonzero,
    NaN included)."""
    def cast(typingctx, x):
        if not isinstance(x, (types.Number, types.Boolean)):
            return None
        x = types.unliteral(x)

        def codegen(context, builder, sig, args):
            return context.cast(builder, args[0], x, dtype)
        return dtype(x), codegen
    return intrinsic(cast)


_cast_float64 = _cast_to(types.float64)
_cast_float32 = _cast_to(types.float32)
_cast_bool = _cast_to(types.boolean)


@intrinsic(prefer_literal=True)
def _integer_pow(typingctx, x, n):
    """``x ** n`` for a literal ``n >= 0`` by repeated squaring, unrolled: the multiplies of
    ``power_by_squaring`` (quabla/core/rules/elementwise.py) in its order, from ``type(x)(1)``."""
    if not isinstance(x, types.Float) or not isinstance(n, types.IntegerLiteral) \
            or n.literal_value < 0:
        return None

    def codegen(context, builder, sig, args):
        base, k = args[0], n.literal_value
        result = ir.Constant(base.type, 1.0)
        while k:
            if k & 1:
                result = builder.fmul(result, base)
            k >>= 1
            if k:
                base = builder.fmul(base, base)
        return result
    return x(x, n), codegen


@intrinsic
def _clamp_index(typingctx, i, n):
    """The row of ``n`` that the index ``i`` selects, as ``clamp_index`` in
    quabla/core/rules/structural.py: NaN is 0, rounded down, a negative one counts from the
    end, then clamped into [0, n - 1]. As Python::

        if i != i:
            return 0
        k = math.floor(i) if abs(i) < 1e18 else (n if i > 0 else -n)
        if k < 0:
            k += n
        return min(max(k, 0), n - 1)
    """
    if not isinstance(i, (types.Float, types.Integer)) or not isinstance(n, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        x, count = args
        int64 = ir.IntType(64)
        count = context.cast(builder, count, n, types.int64)
        zero = ir.Constant(int64, 0)
        if isinstance(i, types.Integer):
            k = context.cast(builder, x, i, types.int64)
        else:  # fptosi of a value out of range is poison, but then the select takes n or -n
            in_range = builder.fcmp_ordered("<", _intrinsic_call(builder, "llvm.fabs", x),
                                            ir.Constant(x.type, 1e18))
            beyond = builder.select(builder.fcmp_ordered(">", x, ir.Constant(x.type, 0.0)),
                                    count, builder.neg(count))
            down = _intrinsic_call(builder, "llvm.floor", x)
            k = builder.select(in_range, builder.fptosi(down, int64), beyond)
        k = builder.select(builder.icmp_signed("<", k, zero), builder.add(k, count), k)
        k = builder.select(builder.icmp_signed("<", k, zero), zero, k)
        last = builder.sub(count, ir.Constant(int64, 1))
        k = builder.select(builder.icmp_signed(">", k, last), last, k)
        if isinstance(i, types.Float):
            k = builder.select(builder.fcmp_unordered("uno", x, x), zero, k)
        return k

    return types.int64(i, n), codegen


# -- arrays over raw memory (see lowering/native.py for the calling convention) ----------------

def _byte_pointer():
    return ir.IntType(8).as_pointer()


def _field(builder, base, offset):
    """The pointer stored ``offset`` bytes into the C struct at ``base``."""
    slot = builder.gep(builder.bitcast(base, _byte_pointer()), [ir.Constant(ir.IntType(64), offset)])
    return builder.load(builder.bitcast(slot, _byte_pointer().as_pointer()))


@intrinsic
def _arg(typingctx, args, k, start, dtype):
    """A typed pointer to element ``start`` of the data of the array ``args[k]``, where ``args``
    is the entry's tuple object."""
    result = types.CPointer(dtype.instance_type)

    def codegen(context, builder, sig, llargs):
        objects, index, offset, _ = llargs
        items = builder.gep(builder.bitcast(objects, _byte_pointer()),
                            [ir.Constant(ir.IntType(64), TUPLE_ITEMS)])
        item = builder.load(builder.gep(builder.bitcast(items, _byte_pointer().as_pointer()), [index]))
        data = builder.bitcast(_field(builder, item, ARRAY_DATA), context.get_value_type(result))
        return builder.gep(data, [offset])

    return result(args, k, start, dtype), codegen


@intrinsic
def _offset(typingctx, pointer, n):
    """``pointer`` moved ``n`` elements on: a row of an array, a matrix of a stack."""
    def codegen(context, builder, sig, llargs):
        return builder.gep(llargs[0], [llargs[1]])

    return pointer(pointer, types.intp), codegen


def _itemsize(context, pointer_type):
    return context.get_abi_sizeof(context.get_data_type(pointer_type.dtype))


@intrinsic
def _copy(typingctx, target, source, n):
    """``n`` elements of ``source`` to ``target`` (pointers of one dtype): one ``llvm.memmove``,
    not a loop for Numba to type and LLVM to vectorise with its own overlap checks."""
    if not (isinstance(target, types.CPointer) and target == source):
        return None

    def codegen(context, builder, sig, args):
        dst, src, count = args
        cgutils.raw_memmove(builder, dst, src, context.cast(builder, count, n, types.intp),
                            _itemsize(context, target))
        return context.get_dummy_value()

    return types.none(target, source, n), codegen


@intrinsic
def _zero(typingctx, target, n):
    """``n`` elements of ``target`` set to zero bits (0, 0.0, False): one ``llvm.memset``."""
    if not isinstance(target, types.CPointer):
        return None

    def codegen(context, builder, sig, args):
        dst, count = args
        length = builder.mul(context.cast(builder, count, n, types.intp),
                             ir.Constant(context.get_value_type(types.intp),
                                         _itemsize(context, target)))
        cgutils.memset(builder, dst, length, 0)
        return context.get_dummy_value()

    return types.none(target, n), codegen


# Numba loads and stores through a typed pointer with the element's value type, which for a
# bool (i1 in registers, a byte in memory) is the wrong width: these convert, as arrays do.
_BOOL_POINTER = types.CPointer(types.boolean)


@lower_builtin(operator.getitem, _BOOL_POINTER, types.Integer)
def _load_bool(context, builder, sig, args):
    pointer, index = args
    return context.data_model_manager[types.boolean].from_data(
        builder, builder.load(builder.gep(pointer, [index])))


@lower_builtin(operator.setitem, _BOOL_POINTER, types.Integer, types.Any)
def _store_bool(context, builder, sig, args):
    pointer, index, value = args
    value = context.cast(builder, value, sig.args[2], types.boolean)
    builder.store(context.data_model_manager[types.boolean].as_data(builder, value),
                  builder.gep(pointer, [index]))


@intrinsic
def _gemm(typingctx, a, b, out, m, k, n, ta, tb):
    """``out`` (m x n) = op(``a``) @ op(``b``) for typed pointers to C-contiguous matrices,
    op transposing the operand whose flag ``ta``/``tb`` is nonzero (then stored as k x m or
    n x k), by one call of SciPy's Fortran ``dgemm``/``sgemm`` (``native.blas_symbols``),
    without np.dot's typing, shape checks and error paths (the code generator has checked the
    shapes, and uses BLAS only where ``blas_symbols`` has it)."""
    if not all(isinstance(t, types.CPointer) for t in (a, b, out)) or a.dtype != out.dtype \
            or b.dtype != out.dtype or out.dtype not in (types.float64, types.float32):
        return None
    symbol = {types.float64: "quabla_dgemm", types.float32: "quabla_sgemm"}[out.dtype]
    llvm_binding.add_symbol(symbol, blas_symbols()[symbol])  # for this compile's own linking

    def codegen(context, builder, sig, args):
        pa, pb, pc = args[:3]
        m_, k_, n_, ta_, tb_ = (context.cast(builder, v, t, types.intp)
                                for v, t in zip(args[3:], sig.args[3:]))
        char, size, int32, void = (ir.IntType(8), context.get_value_type(types.intp),
                                   ir.IntType(32), _byte_pointer())
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
            ir.VoidType(), [void, void] + [int32.as_pointer()] * 3 + [void, void,
            int32.as_pointer(), void, int32.as_pointer(), void, void, int32.as_pointer()]),
            symbol)

        def by_reference(value, ty):  # Fortran takes every argument by address
            slot = cgutils.alloca_once(builder, ty)
            builder.store(value, slot)
            return slot

        def integer(value):
            return by_reference(builder.trunc(value, int32), int32)

        def operand(trans, pointer, rows, cols):
            # column-major BLAS sees a C matrix transposed: out^T = op(b)^T op(a)^T
            flag = builder.icmp_signed("!=", trans, ir.Constant(size, 0))
            letter = builder.select(flag, ir.Constant(char, ord("t")), ir.Constant(char, ord("n")))
            return (by_reference(letter, char), integer(builder.select(flag, rows, cols)),
                    builder.bitcast(pointer, void))

        op_a, lda, pa_ = operand(tb_, pb, k_, n_)
        op_b, ldb, pb_ = operand(ta_, pa, m_, k_)
        scalar = context.get_value_type(out.dtype)
        one = cgutils.alloca_once_value(builder, ir.Constant(scalar, 1.0))
        zero = cgutils.alloca_once_value(builder, ir.Constant(scalar, 0.0))
        builder.call(fn, [op_a, op_b, integer(n_), integer(m_), integer(k_),
                          builder.bitcast(one, void), pa_, lda, pb_, ldb,
                          builder.bitcast(zero, void), builder.bitcast(pc, void), integer(n_)])
        return context.get_dummy_value()

    return types.none(a, b, out, m, k, n, ta, tb), codegen


# -- the elementwise math of issue 24 --

@_float_helper
def _floor(builder, x):
    """``math.floor(x)`` as a float (NaN, infinities and the sign of a zero kept)"""
    return _intrinsic_call(builder, "llvm.floor", x)


@_float_helper
def _ceil(builder, x):
    """``math.ceil(x)`` as a float (NaN, infinities and the sign of a zero kept)"""
    return _intrinsic_call(builder, "llvm.ceil", x)


@_float_helper
def _round(builder, x):
    """``x`` rounded to a whole number, halves to even (``np.round``)"""
    return _intrinsic_call(builder, "llvm.rint", x)


@_float_helper
def _log2(builder, x):
    """``math.log2(x) if x > 0 else (-math.inf if x == 0 else math.nan)``"""
    return _logarithm(builder, x, 0.0, _intrinsic_call(builder, "llvm.log2", x))


@_float_helper
def _log10(builder, x):
    """``math.log10(x) if x > 0 else (-math.inf if x == 0 else math.nan)``"""
    return _logarithm(builder, x, 0.0, _intrinsic_call(builder, "llvm.log10", x))


@_float_helper
def _cbrt(builder, x):
    """libm's ``cbrt(x)``, as ``np.cbrt``"""
    return _libm_call(builder, "cbrt", x)


def _pair_helper(build):
    """An intrinsic of two floats (unified to one type) that ``build(builder, x, y)`` emits;
    its result is rounded to that type."""
    def typer(typingctx, x, y):
        out = typingctx.unify_pairs(x, y)
        if not isinstance(out, types.Float):
            return None

        def codegen(context, builder, sig, args):
            a, b = (context.cast(builder, v, t, out) for v, t in zip(args, sig.args))
            value = build(builder, a, b)
            return value if value.type == a.type else builder.fptrunc(value, a.type)
        return out(x, y), codegen
    typer.__name__, typer.__doc__ = build.__name__, build.__doc__
    return intrinsic(typer)


def _times_unless_zero(builder, x, value):
    """``0.0 if x == 0 else x * value`` (``value`` a double)"""
    product = builder.fmul(_widened(builder, x), value)
    return builder.select(builder.fcmp_ordered("==", x, ir.Constant(x.type, 0.0)),
                          _double(0.0), product)


@_pair_helper
def _xlogy(builder, x, y):
    """``0.0 if x == 0 else x * _log(y)``"""
    return _times_unless_zero(
        builder, x, _logarithm(builder, y, 0.0, _intrinsic_call(builder, "llvm.log", y)))


@_pair_helper
def _xlog1py(builder, x, y):
    """``0.0 if x == 0 else x * _log1p(y)``"""
    return _times_unless_zero(
        builder, x, _logarithm(builder, y, -1.0, _libm_call(builder, "log1p", y)))


# The special functions without a libm or LLVM form: the scalar algorithms of
# quabla/core/special_functions.py, compiled as functions of the entries' target (cached on
# disk) the first time an entry calls one, in float64, rounded to the argument's type.

@intrinsic
def _rounded_like(typingctx, x, value):
    """``value`` converted to the type of ``x``."""
    if not isinstance(x, types.Float) or not isinstance(value, types.Float):
        return None

    def codegen(context, builder, sig, args):
        return context.cast(builder, args[1], value, x)
    return x(x, value), codegen


_digamma64 = _kernel(_special.digamma)
_polygamma64 = _kernel(_special.polygamma)
_quantile64 = _kernel(_special.quantile)


@_kernel
def _digamma(x):
    return _rounded_like(x, _digamma64(_cast_float64(x)))


@_kernel
def _polygamma(n, x):
    return _rounded_like(x, _polygamma64(n, _cast_float64(x)))


@_kernel
def _erf_inv(x):
    return _rounded_like(x, _quantile64(_cast_float64(x), 1))


@_kernel
def _ndtri(x):
    return _rounded_like(x, _quantile64(_cast_float64(x), 0))


# Products without BLAS: kernels compiled once and called by symbol (external.py)
_matmul_float64, _matmul_float32 = (
    types.ExternalFunction(f"quabla_k_matmul_{name}",
                           types.void(*(types.CPointer(dtype),) * 4, *(types.int64,) * 6))
    for name, dtype in (("float64", types.float64), ("float32", types.float32)))


__all__ = [name for name in dir() if name.startswith("_") and not name.startswith("__")
           and name not in ("_float_helper", "_double", "_widened", "_intrinsic_call",
                            "_libm_call", "_negated", "_positive_part", "_extremum",
                            "_byte_pointer", "_itemsize", "_logarithm", "_field", "_TANH",
                            "_tanh_function", "_exp_0_45",
                            "_cast_to", "_BOOL_POINTER", "_load_bool", "_store_bool",
                            "_pair_helper", "_times_unless_zero", "_kernel", "_special")]
