"""The helpers that generated code calls, as Numba intrinsics (or lowerings) for the entries'
lean target (target.py): each emits the LLVM IR of scalar_ir.py, which direct.py emits for the
parts it translates itself. The array kernels are in kernels.py."""

import operator

from numba import types
from numba.core.imputils import lower_builtin
from numba.extending import intrinsic

from quabla.core import special_functions as _special

from .. import fortran
from . import scalar_ir as _ir
from .target import kernel as _kernel


def _float_helper(name, build):
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
    typer.__name__, typer.__doc__ = name, build.__doc__
    return intrinsic(typer)


def _pair_helper(name, build):
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
    typer.__name__, typer.__doc__ = name, build.__doc__
    return intrinsic(typer)


for _name, _build in _ir.FLOAT_HELPERS.items():
    globals()[_name] = _float_helper(_name, _build)
for _name, _build in _ir.PAIR_HELPERS.items():
    globals()[_name] = _pair_helper(_name, _build)


def _extremum(name, order):
    """``x if (x <order> y or x != x) else y`` (NaN-propagating max or min) in the type that
    unifies ``x``'s and ``y``'s."""
    def typer(typingctx, x, y):
        out = typingctx.unify_pairs(x, y)
        if not isinstance(out, (types.Float, types.Boolean)):
            return None

        def codegen(context, builder, sig, args):
            a, b = (context.cast(builder, v, t, out) for v, t in zip(args, sig.args))
            return _ir.pick_extremum(builder, order, a, b)
        return out(x, y), codegen
    typer.__name__ = name
    return intrinsic(typer)


_max = _extremum("_max", ">")
_min = _extremum("_min", "<")


@intrinsic
def _where(typingctx, test, x, y):
    """``x if test else y`` with both already computed: a select, no branch (a guarded read
    whose index is clamped into its array, so a loop over it vectorises)."""
    out = typingctx.unify_pairs(x, y)
    if not isinstance(out, (types.Number, types.Boolean)):
        return None

    def codegen(context, builder, sig, args):
        condition = context.cast(builder, args[0], sig.args[0], types.boolean)
        a, b = (context.cast(builder, v, t, out) for v, t in zip(args[1:], sig.args[1:]))
        return builder.select(condition, a, b)
    return out(test, x, y), codegen


@intrinsic
def _sum_add(typingctx, x, y):
    """``x + y``, one add of a sum that LLVM may reorder (``reassoc``): the loop vectoriser
    then keeps the sum's partial sums in vector lanes (``groups.reduction_step``)."""
    out = typingctx.unify_pairs(x, y)
    if not isinstance(out, types.Float):
        return None

    def codegen(context, builder, sig, args):
        a, b = (context.cast(builder, v, t, out) for v, t in zip(args, sig.args))
        return builder.fadd(a, b, flags=("reassoc",))
    return out(x, y), codegen


@intrinsic
def _tanh(typingctx, x):
    """tanh of a float64 or float32 (scalar_ir.tanh)."""
    if x not in (types.float64, types.float32):
        return None

    def codegen(context, builder, sig, args):
        return _ir.tanh(builder, args[0])

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
    """``x ** n`` for a literal ``n >= 0`` (scalar_ir.integer_pow)."""
    if not isinstance(x, types.Float) or not isinstance(n, types.IntegerLiteral) \
            or n.literal_value < 0:
        return None

    def codegen(context, builder, sig, args):
        return _ir.integer_pow(builder, args[0], n.literal_value)
    return x(x, n), codegen


@intrinsic
def _clamp_index(typingctx, i, n):
    """The row of ``n`` that the index ``i`` selects (scalar_ir.clamp_index)."""
    if not isinstance(i, (types.Float, types.Integer)) or not isinstance(n, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        x, count = args
        if isinstance(i, types.Integer):
            x = context.cast(builder, x, i, types.int64)
        return _ir.clamp_index(builder, x, context.cast(builder, count, n, types.int64))

    return types.int64(i, n), codegen


# -- arrays over raw memory (see lowering/native.py for the calling convention) ----------------

@intrinsic
def _arg(typingctx, args, k, start, dtype):
    """A typed pointer to element ``start`` of the data of the array ``args[k]``, where ``args``
    is the entry's tuple object."""
    result = types.CPointer(dtype.instance_type)

    def codegen(context, builder, sig, llargs):
        objects, index, offset, _ = llargs
        return _ir.arg_pointer(builder, objects, index, offset, context.get_value_type(result))

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
    """``n`` elements of ``source`` to ``target`` (pointers of one dtype): scalar_ir.memmove."""
    if not (isinstance(target, types.CPointer) and target == source):
        return None

    def codegen(context, builder, sig, args):
        dst, src, count = args
        _ir.memmove(builder, dst, src, context.cast(builder, count, n, types.intp),
                    _itemsize(context, target))
        return context.get_dummy_value()

    return types.none(target, source, n), codegen


@intrinsic
def _zero(typingctx, target, n):
    """``n`` elements of ``target`` set to zero bits (0, 0.0, False): scalar_ir.memset."""
    if not isinstance(target, types.CPointer):
        return None

    def codegen(context, builder, sig, args):
        dst, count = args
        _ir.memset(builder, dst, context.cast(builder, count, n, types.intp),
                   _itemsize(context, target))
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


def _blas_symbol(routine, pointers):
    """The symbol of BLAS ``routine`` (``gemm``, ``trsm``) for ``pointers``, typed pointers
    all to float64 or all to float32, made known to this compile's linking; None for other
    arguments. Generated code calls BLAS only where ``fortran.available()``."""
    dtype = pointers[-1].dtype if isinstance(pointers[-1], types.CPointer) else None
    if dtype not in (types.float64, types.float32) or not all(
            isinstance(t, types.CPointer) and t.dtype == dtype for t in pointers):
        return None
    return fortran.linked(f"{'d' if dtype == types.float64 else 's'}{routine}")


def _sizes(context, builder, sig, args, first):
    """The arguments from ``first`` on, as intp values."""
    return (context.cast(builder, v, t, types.intp) for v, t in zip(args[first:], sig.args[first:]))


@intrinsic
def _gemm(typingctx, a, b, out, m, k, n, ta, tb):
    """``out`` (m x n) = op(``a``) @ op(``b``) for typed pointers to C-contiguous matrices
    (scalar_ir.gemm), without np.dot's typing, shape checks and error paths (the code
    generator has checked the shapes)."""
    symbol = _blas_symbol("gemm", (a, b, out))
    if symbol is None:
        return None

    def codegen(context, builder, sig, args):
        _ir.gemm(builder, symbol, *args[:3], *_sizes(context, builder, sig, args, 3))
        return context.get_dummy_value()

    return types.none(a, b, out, m, k, n, ta, tb), codegen


@intrinsic
def _potrf(typingctx, a, n):
    """LAPACK's ``dpotrf`` on the n x n float64 matrix at the typed pointer ``a``, in place:
    its lower triangle becomes the Cholesky factor; LAPACK's ``info`` (scalar_ir.potrf)."""
    if not (isinstance(a, types.CPointer) and a.dtype == types.float64
            and isinstance(n, types.Integer)):
        return None
    symbol = fortran.linked("dpotrf")

    def codegen(context, builder, sig, args):
        return _ir.potrf(builder, symbol, args[0], *_sizes(context, builder, sig, args, 1))

    return types.int64(a, n), codegen


@intrinsic
def _trsm(typingctx, a, b, n, m, lower, transpose):
    """``b`` (n x m) = op(T)^-1 ``b`` for typed pointers to C-contiguous matrices, T the lower
    or upper triangle of ``a`` (scalar_ir.trsm)."""
    symbol = _blas_symbol("trsm", (a, b))
    if symbol is None:
        return None

    def codegen(context, builder, sig, args):
        _ir.trsm(builder, symbol, *args[:2], *_sizes(context, builder, sig, args, 2))
        return context.get_dummy_value()

    return types.none(a, b, n, m, lower, transpose), codegen


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
           and name not in ("_float_helper", "_extremum", "_itemsize", "_ir", "_name",
                            "_build", "_cast_to", "_BOOL_POINTER", "_load_bool",
                            "_store_bool", "_pair_helper", "_kernel", "_special")]
