"""Scalar helpers that the generated Numba code calls, matching the NumPy reference (NaN
propagation of max/min, sign(0) == 0, repeated squaring for integer powers)."""

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from quabla.core.rules.elementwise import power_by_squaring

from ..native import ARRAY_DATA, TUPLE_ITEMS

_inline = numba.njit(inline="always", error_model="numpy")


@_inline
def _log(x):
    return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)


@_inline
def _log1p(x):
    return math.log1p(x) if x > -1 else (-math.inf if x == -1 else math.nan)


@_inline
def _sqrt(x):
    return math.sqrt(x) if x >= 0 else math.nan


@_inline
def _sign(x):
    return type(x)(1) if x > 0 else (type(x)(-1) if x < 0 else x)


@_inline
def _logistic(x):
    return 1.0 / (1.0 + math.exp(-x))


@_inline
def _relu(x):
    return x if (x > 0 or x != x) else type(x)(0)


@_inline
def _softplus(x):
    return math.log1p(math.exp(-abs(x))) + (x if x > 0 else type(x)(0))


_power_by_squaring = _inline(power_by_squaring)


# -- tanh: libm's is a call per element (~10 ns) that stops LLVM from vectorising the loop; this
#    one is branch-free straight-line code (Cephes' rational form below 0.625, fdlibm's exp
#    above), within ~1.3 ulp of the exact value (libm's: ~2.1 ulp), NaN, +-inf and -0.0 kept --

@intrinsic
def _f64_from_bits(typingctx, bits):
    """The float64 whose bit pattern is the int64 ``bits`` (vectorises: a register move)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@intrinsic
def _select(typingctx, cond, a, b):
    """``a if cond else b`` as one LLVM select: both sides are computed, no branch."""
    def codegen(context, builder, signature, args):
        return builder.select(args[0], args[1], args[2])
    return a(types.boolean, a, a), codegen


@_inline
def _exp_0_45(x):
    """exp(x) for 0 <= x <= 45 (fdlibm's reduction and rational approximation, < 1 ulp); the
    power of two is built from its bits, so there is no call and no table."""
    k = math.floor(x * 1.4426950408889634 + 0.5)
    hi = x - k * 6.93147180369123816490e-01
    lo = k * 1.90821492927058770002e-10
    r = hi - lo
    t = r * r
    c = r - t * (1.66666666666666019037e-01 + t * (-2.77777777770155933842e-03 + t * (
        6.61375632143793436117e-05 + t * (-1.65339022054652515390e-06
                                          + t * 4.13813679705723846039e-08))))
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    return y * _f64_from_bits((np.int64(k) + 1023) << 52)


@_inline
def _tanh64(x):
    """tanh(x) = x + x z P(z) / Q(z) with z = x * x for |x| < 0.625, else
    sign(x) (1 - 2 / (exp(2 |x|) + 1)) with |x| clamped to 22 (tanh rounds to 1 there). Both
    sides share one division, and every choice is a select, so a loop around it vectorises."""
    ax = abs(x)
    z = x * x
    e = _exp_0_45(2.0 * _select(ax < 22.0, ax, 22.0))  # NaN -> 22: the exp stays finite
    small = ax < 0.625
    p = ((-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z
         - 1.61468768441708447952e3)
    q = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z \
        + 4.84406305325125486048e3
    t = _select(small, x * z * p, -2.0) / _select(small, q, e + 1.0)
    big = 1.0 + t
    res = _select(small, _select(x != 0.0, x + t, x), _select(x < 0.0, -big, big))
    return _select(ax == ax, res, x)  # NaN: x itself


@numba.njit(error_model="numpy")
def _tanh(x):
    """tanh in generated code: the vectorisable float64 version above (float32 rounds it, which
    is more accurate than libm's tanhf and still vectorises). A call that LLVM inlines: inlined
    by Numba, each call site cost ~0.3 s of compile time (deep programs have hundreds)."""
    return type(x)(_tanh64(np.float64(x)))


@_inline
def _integer_pow(x, n):
    return _power_by_squaring(type(x)(1), x, n)


@_inline
def _pow(x, y):
    return x ** y


@_inline
def _max(x, y):
    return x if (x > y or x != x) else y


@_inline
def _min(x, y):
    return x if (x < y or x != x) else y


@_inline
def _cast_float64(x):
    return np.float64(x)


@_inline
def _cast_float32(x):
    return np.float32(x)


@_inline
def _cast_bool(x):
    return x != 0


@_inline
def _clamp_index(i, n):
    """The row of ``n`` that the float index ``i`` selects, as ``clamp_index`` in
    quabla/core/rules/structural.py: NaN is 0, truncated toward zero, a negative one counts
    from the end, then clamped into [0, n - 1]."""
    if i != i:
        return 0
    k = int(i) if abs(i) < 1e18 else (n if i > 0 else -n)
    if k < 0:
        k += n
    return min(max(k, 0), n - 1)


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
def _data(typingctx, array):
    """The typed pointer to the data of a (C-contiguous) array: with ``carray`` it reshapes
    without Numba's reshape, whose error path needs its runtime."""
    result = types.CPointer(array.dtype)

    def codegen(context, builder, sig, llargs):
        ary = context.make_array(sig.args[0])(context, builder, llargs[0])
        return builder.bitcast(ary.data, context.get_value_type(result))

    return result(array), codegen


@intrinsic
def _gemm(typingctx, a, b, out):
    """``out`` = ``a`` @ ``b`` for 2-d arrays, C-contiguous or transposed views of such (layout
    F), by one call of Numba's BLAS helper ``numba_xxgemm`` (the one np.dot calls), without
    np.dot's shape checks and error paths: a first np.dot costs a compile of its own, and each
    call site types and lowers them (the code generator has checked the shapes)."""
    if any(t.ndim != 2 or t.layout not in "CF" for t in (a, b, out)) or out.layout != "C":
        return None
    kind = {types.float64: "d", types.float32: "s"}[out.dtype]

    def codegen(context, builder, sig, args):
        a_, b_, c_ = (context.make_array(t)(context, builder, v) for t, v in zip(sig.args, args))
        m, k = builder.extract_value(a_.shape, 0), builder.extract_value(a_.shape, 1)
        n = builder.extract_value(b_.shape, 1)
        char, size, void = ir.IntType(8), context.get_value_type(types.intp), _byte_pointer()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
            ir.IntType(32), [char, char, char, size, size, size, void, void, size, void, size,
                             void, void, size]), "numba_xxgemm")

        def operand(ty, array, rows, cols):
            # column-major BLAS sees a C array transposed: out^T = b^T a^T
            trans = ty.layout == "F"
            return (ir.Constant(char, ord("t" if trans else "n")), rows if trans else cols,
                    builder.bitcast(array.data, void))

        ta, lda, pa = operand(sig.args[1], b_, k, n)
        tb, ldb, pb = operand(sig.args[0], a_, m, k)
        scalar = context.get_value_type(sig.args[2].dtype)
        one = cgutils.alloca_once_value(builder, ir.Constant(scalar, 1.0))
        zero = cgutils.alloca_once_value(builder, ir.Constant(scalar, 0.0))
        builder.call(fn, [ir.Constant(char, ord(kind)), ta, tb, n, m, k,
                          builder.bitcast(one, void), pa, lda, pb, ldb,
                          builder.bitcast(zero, void), builder.bitcast(c_.data, void), n])
        return context.get_dummy_value()

    return types.none(a, b, out), codegen


__all__ = [name for name in dir() if name.startswith("_") and not name.startswith("__")
           and name not in ("_inline", "_power_by_squaring", "_byte_pointer", "_field",
                            "_select", "_f64_from_bits", "_exp_0_45",
                            "_tanh64")]


# -- linear algebra without LAPACK (SciPy stays optional) and without allocation (results and
#    workspaces come from the caller); NaN results on failure, as the reference interpreter gives

@numba.njit(error_model="numpy", cache=True)
def _matmul(a, b, out):
    """``out`` = batched (B, M, K) x (B, K, N) products without BLAS. Four output rows at a
    time share each load of a row of ``b``; the inner loop runs along contiguous rows, so LLVM
    vectorises it. Every element is summed over k in order, exactly like a plain dot."""
    batch, rows, inner = a.shape
    cols = b.shape[2]
    out.fill(0)
    for i in range(batch):
        ai = a[i]
        bi = b[i]
        oi = out[i]
        m = 0
        while m + 4 <= rows:
            r0, r1, r2, r3 = oi[m], oi[m + 1], oi[m + 2], oi[m + 3]
            for k in range(inner):
                s0, s1, s2, s3 = ai[m, k], ai[m + 1, k], ai[m + 2, k], ai[m + 3, k]
                bk = bi[k]
                for n in range(cols):
                    v = bk[n]
                    r0[n] += s0 * v
                    r1[n] += s1 * v
                    r2[n] += s2 * v
                    r3[n] += s3 * v
            m += 4
        for r in range(m, rows):
            row = oi[r]
            for k in range(inner):
                s = ai[r, k]
                bk = bi[k]
                for n in range(cols):
                    row[n] += s * bk[n]


@numba.njit(error_model="numpy", cache=True)
def _solve(a, b, out, lu, x):
    """``out`` = a^-1 b for ``b`` and ``out`` of shape (n, m), by Gaussian elimination with
    partial pivoting in the float64 workspaces ``lu`` (n, n) and ``x`` (n, m)."""
    n = a.shape[0]
    m = b.shape[1]
    for i in range(n):
        for j in range(n):
            lu[i, j] = a[i, j]
        for j in range(m):
            x[i, j] = b[i, j]
    for k in range(n):
        pivot = k
        for i in range(k + 1, n):
            if abs(lu[i, k]) > abs(lu[pivot, k]):
                pivot = i
        if lu[pivot, k] == 0.0:
            out.fill(np.nan)
            return
        if pivot != k:
            for j in range(n):
                lu[k, j], lu[pivot, j] = lu[pivot, j], lu[k, j]
            for j in range(m):
                x[k, j], x[pivot, j] = x[pivot, j], x[k, j]
        for i in range(k + 1, n):
            f = lu[i, k] / lu[k, k]
            for j in range(k, n):
                lu[i, j] -= f * lu[k, j]
            for j in range(m):
                x[i, j] -= f * x[k, j]
    for k in range(n - 1, -1, -1):
        for j in range(m):
            s = x[k, j]
            for i in range(k + 1, n):
                s -= lu[k, i] * x[i, j]
            x[k, j] = s / lu[k, k]
    for i in range(n):
        for j in range(m):
            out[i, j] = x[i, j]


@numba.njit(error_model="numpy", cache=True)
def _cholesky(a, out, low):
    """``out`` = the lower Cholesky factor of ``a`` (Cholesky-Banachiewicz in the float64
    workspace ``low``); NaN if ``a`` is not positive definite."""
    n = a.shape[0]
    low.fill(0.0)
    for i in range(n):
        for j in range(i + 1):
            s = np.float64(a[i, j])
            for k in range(j):
                s -= low[i, k] * low[j, k]
            if i == j:
                if not s > 0.0:
                    out.fill(np.nan)
                    return
                low[i, i] = np.sqrt(s)
            else:
                low[i, j] = s / low[j, j]
    for i in range(n):
        for j in range(n):
            out[i, j] = low[i, j]


@numba.njit(error_model="numpy", cache=True)
def _triangular_solve(a, b, out, x, lower, transpose):
    """``out`` = op(T)^-1 b for ``b`` and ``out`` of shape (n, m): T the lower (``lower``) or
    upper triangle of ``a`` (the other is never read), op(T) = T or T^T (``transpose``). Rows are
    substituted in order in the float64 workspace ``x`` (n, m), each sum accumulated in order of
    the rows it reads, as the reference does; a zero on the diagonal gives inf/NaN."""
    n = a.shape[0]
    m = b.shape[1]
    forward = lower != transpose
    for step in range(n):
        i = step if forward else n - 1 - step
        xi = x[i]
        xi.fill(0.0)
        for q in range(step):
            k = q if forward else n - 1 - q
            t = np.float64(a[k, i] if transpose else a[i, k])
            xk = x[k]
            for j in range(m):
                xi[j] += t * xk[j]
        d = np.float64(a[i, i])
        for j in range(m):
            xi[j] = (b[i, j] - xi[j]) / d
    for i in range(n):
        for j in range(m):
            out[i, j] = x[i, j]


__all__ += ["_matmul", "_solve", "_cholesky", "_triangular_solve"]
