"""Parts compiled without Numba: a generated entry translated straight to LLVM IR.

Generated source (codegen.py) is a small part of Python: assignments of scalars and typed
pointers, ``while`` loops over integers, ``if`` and ``break``, arithmetic, comparisons, loads
and stores through pointers, and calls of the runtime's helpers and of ``math``. This module
types that part as Numba does (NumPy's promotion of int64, float32 and float64; a variable
has the type that unifies its assignments) and emits what Numba's lowering emits for it,
the helpers' instructions coming from scalar_ir.py as runtime.py's do. A part then costs a
few milliseconds of Python before LLVM (machine.py), and a process whose parts all translate
never imports Numba: its import is ~0.15 s, and its front end ~40% of a part's compile
(docs/compile-time.md). A part that uses anything else (the array kernels' ``carray`` views,
the special functions, integer division by anything but a positive constant) raises
``Unsupported``, and Numba compiles it.
"""

import ast
import collections
import math
import re

from llvmlite import ir

from .. import fortran
from . import kernel_calls, machine
from . import scalar_ir as sir
from .codegen import KERNELS

__all__ = ["Unsupported", "DirectEntry", "translate", "translation", "compile_entry",
           "sums_marked"]


class Unsupported(Exception):
    """The source uses something this translation does not know: Numba compiles it."""


class _Retype(Exception):
    """A variable needs a wider type than its first assignment gave it: translate again."""


# types: "f64", "f32", "i64", "bool", a pointer "*<element>", the entry's "args", "none"
_VALUE = {"f64": ir.DoubleType(), "f32": ir.FloatType(), "i64": ir.IntType(64),
          "bool": ir.IntType(1)}
_DATA = dict(_VALUE, bool=ir.IntType(8))  # a bool is a byte in memory
_ITEMSIZE = {"f64": 8, "f32": 4, "i64": 8, "bool": 1}
_DTYPES = {"np.float64": "f64", "np.float32": "f32", "np.int64": "i64", "np.bool_": "bool"}
_FLOATS = ("f64", "f32")
_NUMBERS = ("f64", "f32", "i64")
_I64 = _VALUE["i64"]
_ARGS = ir.IntType(8).as_pointer()

# ``math`` functions as Numba lowers them: LLVM's intrinsics, or libm (``namef`` for float32)
_MATH_INTRINSICS = {"math.exp": "llvm.exp", "math.log": "llvm.log", "math.log10": "llvm.log10",
                    "math.sin": "llvm.sin", "math.cos": "llvm.cos", "math.fabs": "llvm.fabs",
                    "math.exp2": "llvm.exp2"}
_MATH_LIBM = {f"math.{name}": name for name in (
    "log1p", "expm1", "erf", "erfc", "tan", "asin", "acos", "atan", "asinh", "acosh", "atanh",
    "sinh", "cosh", "tanh", "lgamma", "sqrt")}
_MATH_LIBM2 = {"math.atan2": "atan2", "math.hypot": "hypot"}  # of two floats
_MATH_CONSTANTS = {"math.inf": math.inf, "math.nan": math.nan, "math.pi": math.pi,
                   "math.e": math.e}
_CASTS = {"_cast_float64": "f64", "np.float64": "f64", "float": "f64", "_cast_float32": "f32",
          "np.float32": "f32", "_cast_bool": "bool", "np.bool_": "bool", "bool": "bool"}
_PRODUCTS = {"_matmul_float64": ("quabla_k_matmul_float64", "f64"),
            "_matmul_float32": ("quabla_k_matmul_float32", "f32")}
_PRECISION = {"f64": "d", "f32": "s"}  # BLAS's letter of each element type
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
            ast.NotEq: "!="}


def _lltype(kind):
    if kind.startswith("*"):
        return _DATA[kind[1:]].as_pointer()
    return _ARGS if kind == "args" else _VALUE[kind]


def _floor_divmod(b, a, c):
    """Python's ``a // c`` and ``a % c`` of int64s, ``c`` a positive constant: the remainder
    takes the divisor's sign."""
    q, r = b.sdiv(a, c), b.srem(a, c)
    negative = b.icmp_signed("<", r, ir.Constant(_I64, 0))
    return (b.select(negative, b.sub(q, ir.Constant(_I64, 1)), q),
            b.select(negative, b.add(r, c), r))


def _promote(a, b):
    """The type of arithmetic on ``a`` and ``b`` (NumPy's promotion, as Numba types it)."""
    if a not in _NUMBERS or b not in _NUMBERS:
        raise Unsupported(f"arithmetic on {a} and {b}")
    if a == b:
        return a
    return "f64"


def _unify(a, b):
    """The type of a variable (or a choice) assigned both ``a`` and ``b``."""
    if a == b:
        return a
    if {a, b} == {"bool", "i64"}:
        return "i64"
    return _promote(a, b)


class _Function:
    """The translation of one entry's body: values are ``(LLVM value, type)`` pairs."""

    def __init__(self, module, name, types, single=frozenset(), bases=None, mark_sums=True):
        self.function = ir.Function(module, ir.FunctionType(ir.VoidType(), [_ARGS]), name)
        self.function.attributes.add("nounwind")
        self.b = ir.IRBuilder(self.function.append_basic_block("entry"))
        self.types = types  # variable -> type (kept between attempts)
        self.slots = {}  # variable -> its stack slot
        self.single = single  # variables that are values, not slots (``_single_values``)
        self.values = {}  # such a variable -> its (value, type)
        self.exits = []  # the blocks that ``break`` leaves to, innermost last
        self.bases, arguments = bases or ({}, ())  # pointer variable -> its argument
        self.scopes = _Scopes(module, arguments)
        self.sums = []  # the element types summed in each loop being translated, innermost last
        self.free_sums = False  # whether a sum's adds LLVM may reorder are in an unmarked loop
        self.mark_sums = mark_sums  # whether loops that sum get ``_sum_loops``' metadata
        self.sum_widths = {}  # vector width -> the placeholder metadata of loops that sum

    # -- values --

    def cast(self, value, kind, to):
        """``value`` of type ``kind`` as a ``to`` (Numba's ``context.cast``)."""
        b = self.b
        if kind == to:
            return value
        if to == "bool":
            if kind == "i64":
                return b.icmp_signed("!=", value, ir.Constant(_I64, 0))
            if kind in _FLOATS:
                return b.fcmp_unordered("!=", value, ir.Constant(_VALUE[kind], 0.0))
        elif to in _FLOATS:
            if kind == "bool":
                return b.uitofp(value, _VALUE[to])
            if kind == "i64":
                return b.sitofp(value, _VALUE[to])
            if kind in _FLOATS:
                return b.fpext(value, _VALUE[to]) if to == "f64" else b.fptrunc(value, _VALUE[to])
        elif to == "i64":
            if kind == "bool":
                return b.zext(value, _I64)
            if kind in _FLOATS:
                return b.fptosi(value, _I64)
        raise Unsupported(f"cast of {kind} to {to}")

    def truth(self, value, kind):
        return self.cast(value, kind, "bool")

    def index(self, node):
        value, kind = self.expr(node)
        if kind not in ("i64", "bool"):
            raise Unsupported(f"index of type {kind}")
        return self.cast(value, kind, "i64")

    def pointer(self, node):
        value, kind = self.expr(node)
        if not kind.startswith("*"):
            raise Unsupported(f"{kind} used as a pointer")
        return value, kind[1:]

    def expr(self, node):
        method = getattr(self, "e_" + type(node).__name__, None)
        if method is None:
            raise Unsupported(type(node).__name__)
        return method(node)

    def e_Constant(self, node):
        value = node.value
        if isinstance(value, bool):
            return ir.Constant(_VALUE["bool"], int(value)), "bool"
        if isinstance(value, int) and -2**63 <= value < 2**63:
            return ir.Constant(_I64, value), "i64"
        if isinstance(value, float):
            return ir.Constant(_VALUE["f64"], value), "f64"
        raise Unsupported(f"constant {value!r}")

    def e_Name(self, node):
        if node.id == "args":
            return self.function.args[0], "args"
        if node.id in self.values:
            return self.values[node.id]
        if node.id not in self.slots:
            raise Unsupported(f"{node.id} read before it is assigned")
        return self.b.load(self.slots[node.id]), self.types[node.id]

    def e_Attribute(self, node):
        name = ast.unparse(node)
        if name not in _MATH_CONSTANTS:
            raise Unsupported(name)
        return ir.Constant(_VALUE["f64"], _MATH_CONSTANTS[name]), "f64"

    def e_Subscript(self, node):
        pointer, element = self.pointer(node.value)
        loaded = self.b.load(self.b.gep(pointer, [self.index(node.slice)]))
        self.scopes.tag(loaded, _base(node.value, self.bases))
        if element == "bool":
            return self.b.icmp_unsigned("!=", loaded, ir.Constant(loaded.type, 0)), "bool"
        return loaded, element

    def e_UnaryOp(self, node):
        value, kind = self.expr(node.operand)
        if isinstance(node.op, ast.Not):
            return self.b.not_(self.truth(value, kind)), "bool"
        if isinstance(node.op, ast.USub) and kind in _FLOATS:
            return sir.negated(self.b, value), kind
        if isinstance(node.op, ast.USub) and kind == "i64":
            return self.b.neg(value), kind
        if isinstance(node.op, ast.UAdd) and kind in _NUMBERS:
            return value, kind
        raise Unsupported(f"{type(node.op).__name__} of {kind}")

    def e_BinOp(self, node):
        a, ta = self.expr(node.left)
        c, tc = self.expr(node.right)
        b, op = self.b, type(node.op)
        kind = _promote(ta, tc)
        if op is ast.Div and kind == "i64":
            kind = "f64"  # true division of integers
        a, c = self.cast(a, ta, kind), self.cast(c, tc, kind)
        if op in (ast.FloorDiv, ast.Mod) and kind in _FLOATS:
            return sir.float_divmod(b, a, c)[op is ast.Mod], kind
        if op in (ast.FloorDiv, ast.Mod) and isinstance(c, ir.Constant) and c.constant > 0:
            return _floor_divmod(b, a, c)[op is ast.Mod], kind  # a pad's interior
        if kind == "i64":
            emit = {ast.Add: b.add, ast.Sub: b.sub, ast.Mult: b.mul}.get(op)
        else:
            emit = {ast.Add: b.fadd, ast.Sub: b.fsub, ast.Mult: b.fmul, ast.Div: b.fdiv}.get(op)
        if emit is None:
            raise Unsupported(f"{op.__name__} of {kind}")
        return emit(a, c), kind

    def e_Compare(self, node):
        if len(node.ops) != 1:
            raise Unsupported("chained comparison")
        a, ta = self.expr(node.left)
        c, tc = self.expr(node.comparators[0])
        order = _COMPARE.get(type(node.ops[0]))
        if order is None:
            raise Unsupported(type(node.ops[0]).__name__)
        if ta == tc == "bool":
            return self.b.icmp_unsigned(order, a, c), "bool"
        kind = _promote(ta, tc)
        a, c = self.cast(a, ta, kind), self.cast(c, tc, kind)
        if kind == "i64":
            return self.b.icmp_signed(order, a, c), "bool"
        if order == "!=":
            return self.b.fcmp_unordered(order, a, c), "bool"
        return self.b.fcmp_ordered(order, a, c), "bool"

    def e_BoolOp(self, node):
        """``and`` / ``or`` of bools, short-circuited (a later operand may read memory that
        an earlier one guards)."""
        b = self.b
        slot = sir.entry_slot(b, _VALUE["bool"])
        value, kind = self.expr(node.values[0])
        for operand in node.values[1:]:
            if kind != "bool":
                raise Unsupported(f"{type(node.op).__name__} of {kind}")
            b.store(value, slot)
            more, done = self.block("more"), self.block("done")
            if isinstance(node.op, ast.And):
                b.cbranch(value, more, done)
            else:
                b.cbranch(value, done, more)
            b.position_at_end(more)
            value, kind = self.expr(operand)
            if kind == "bool":
                b.store(value, slot)
            b.branch(done)
            b.position_at_end(done)
            value = b.load(slot)
        if kind != "bool":
            raise Unsupported(f"{type(node.op).__name__} of {kind}")
        return value, kind

    def e_IfExp(self, node):
        b = self.b
        test = self.truth(*self.expr(node.test))
        yes, no, done = self.block("yes"), self.block("no"), self.block("done")
        b.cbranch(test, yes, no)
        b.position_at_end(yes)
        a, ta = self.expr(node.body)
        yes_end = b.block
        b.position_at_end(no)
        c, tc = self.expr(node.orelse)
        no_end = b.block
        kind = _unify(ta, tc)
        ends = []
        for value, vkind, end in ((a, ta, yes_end), (c, tc, no_end)):
            b.position_at_end(end)
            ends.append((self.cast(value, vkind, kind), b.block))
            b.branch(done)
        b.position_at_end(done)
        phi = b.phi(_lltype(kind))
        for value, block in ends:
            phi.add_incoming(value, block)
        return phi, kind

    def e_Call(self, node):
        if node.keywords:
            raise Unsupported("keyword arguments")
        name = ast.unparse(node.func)
        args = node.args
        if name in _CASTS and len(args) == 1:
            value, kind = self.expr(args[0])
            return self.cast(value, kind, _CASTS[name]), _CASTS[name]
        if name in sir.FLOAT_HELPERS and len(args) == 1:
            value, kind = self.float_argument(args[0])
            return self.rounded(sir.FLOAT_HELPERS[name](self.b, value), kind), kind
        if name in sir.PAIR_HELPERS and len(args) == 2:
            (x, y), kind = self.unified(args, _FLOATS)
            return self.rounded(sir.PAIR_HELPERS[name](self.b, x, y), kind), kind
        if name in _MATH_INTRINSICS and len(args) == 1:
            value, kind = self.float_argument(args[0])
            return sir.intrinsic_call(self.b, _MATH_INTRINSICS[name], value), kind
        if name in _MATH_LIBM and len(args) == 1:
            value, kind = self.float_argument(args[0])
            return sir.libm_call(self.b, _MATH_LIBM[name], value), kind
        if name in _MATH_LIBM2 and len(args) == 2:
            return self.libm_call2(_MATH_LIBM2[name], args)
        if name in _PRODUCTS and len(args) == 10:
            return self.kernel_call(*_PRODUCTS[name], args)
        if name in KERNELS:
            return self.array_kernel_call(name, args)
        if name in kernel_calls.SCALAR_KERNELS:
            return self.special_function_call(name, args)
        method = getattr(self, "c" + name.replace("math.", "math_"), None) \
            if name.startswith(("_", "math.")) or name == "abs" else None
        if method is None or method.__code__.co_argcount != len(args) + 1:
            raise Unsupported(f"call of {name}")
        return method(*args)

    # -- helpers of calls --

    def float_argument(self, node):
        """A float argument as Numba's math and helper signatures take it (an integer as a
        float64)."""
        value, kind = self.expr(node)
        if kind == "i64":
            return self.cast(value, kind, "f64"), "f64"
        if kind not in _FLOATS:
            raise Unsupported(f"float function of {kind}")
        return value, kind

    def rounded(self, value, kind):
        return value if value.type == _VALUE[kind] else self.b.fptrunc(value, _VALUE[kind])

    def unified(self, nodes, allowed):
        values = [self.expr(node) for node in nodes]
        kind = values[0][1]
        for _, other in values[1:]:
            kind = _unify(kind, other)
        if kind not in allowed:
            raise Unsupported(f"helper of {kind}")
        return [self.cast(v, k, kind) for v, k in values], kind

    def libm_call2(self, name, args):
        """libm's ``name`` of two floats (integers as float64s), as Numba lowers
        ``math.atan2`` and ``math.hypot``."""
        (x, y), kind = self.unified(args, _NUMBERS)
        if kind == "i64":
            (x, y), kind = [self.cast(v, "i64", "f64") for v in (x, y)], "f64"
        suffix = "f" if kind == "f32" else ""
        fn = sir.pure_function(self.b.module, ir.FunctionType(_VALUE[kind], [_VALUE[kind]] * 2),
                               name + suffix)
        return self.b.call(fn, [x, y]), kind

    def c_arg(self, objects, k, start, dtype):
        if ast.unparse(dtype) not in _DTYPES or self.expr(objects)[1] != "args":
            raise Unsupported("_arg")
        kind = "*" + _DTYPES[ast.unparse(dtype)]
        return sir.arg_pointer(self.b, self.function.args[0], self.index(k), self.index(start),
                               _lltype(kind)), kind

    def c_offset(self, pointer, n):
        value, element = self.pointer(pointer)
        return self.b.gep(value, [self.index(n)]), "*" + element

    def c_copy(self, target, source, n):
        (dst, element), (src, other) = self.pointer(target), self.pointer(source)
        if element != other:
            raise Unsupported("_copy between dtypes")
        sir.memmove(self.b, dst, src, self.index(n), _ITEMSIZE[element])
        return None, "none"

    def c_zero(self, target, n):
        dst, element = self.pointer(target)
        sir.memset(self.b, dst, self.index(n), _ITEMSIZE[element])
        return None, "none"

    def c_clamp_index(self, i, n):
        value, kind = self.expr(i)
        if kind not in _NUMBERS:
            raise Unsupported(f"_clamp_index of {kind}")
        return sir.clamp_index(self.b, value, self.index(n)), "i64"

    def c_where(self, test, x, y):
        condition = self.truth(*self.expr(test))
        (a, c), kind = self.unified((x, y), _NUMBERS + ("bool",))
        return self.b.select(condition, a, c), kind

    def c_sum_add(self, x, y):
        (a, c), kind = self.unified((x, y), _FLOATS)
        if not self.sums:  # not in a loop: in order
            return self.b.fadd(a, c), kind
        self.sums[-1].add(kind)
        return self.b.fadd(a, c, flags=("reassoc",)), kind

    def c_max(self, x, y):
        (a, c), kind = self.unified((x, y), _FLOATS + ("bool",))
        return sir.pick_extremum(self.b, ">", a, c), kind

    def c_min(self, x, y):
        (a, c), kind = self.unified((x, y), _FLOATS + ("bool",))
        return sir.pick_extremum(self.b, "<", a, c), kind

    def c_tanh(self, x):
        value, kind = self.expr(x)
        if kind not in _FLOATS:
            raise Unsupported(f"_tanh of {kind}")
        return sir.tanh(self.b, value), kind

    def c_integer_pow(self, x, n):
        value, kind = self.expr(x)
        if kind not in _FLOATS or not isinstance(n, ast.Constant) or type(n.value) is not int \
                or n.value < 0:
            raise Unsupported("_integer_pow")
        return sir.integer_pow(self.b, value, n.value), kind

    def c_pow(self, x, y):
        """``x ** y`` of two floats: ``llvm.pow``, as Numba lowers it (with an integer
        operand Numba's rules differ: ``Unsupported``)."""
        (a, ta), (c, tc) = self.expr(x), self.expr(y)
        if ta not in _FLOATS or tc not in _FLOATS:
            raise Unsupported("_pow of an integer")
        kind = _promote(ta, tc)
        fn = self.b.module.declare_intrinsic("llvm.pow", [_VALUE[kind]])
        return self.b.call(fn, [self.cast(a, ta, kind), self.cast(c, tc, kind)]), kind

    def cabs(self, x):
        value, kind = self.expr(x)
        if kind in _FLOATS:
            return sir.intrinsic_call(self.b, "llvm.fabs", value), kind
        if kind == "i64":
            negative = self.b.icmp_signed("<", value, ir.Constant(_I64, 0))
            return self.b.select(negative, self.b.neg(value), value), kind
        raise Unsupported(f"abs of {kind}")

    def _test(self, x, test, of_integer=False):
        value, kind = self.expr(x)
        if kind == "i64":
            return ir.Constant(_VALUE["bool"], int(of_integer)), "bool"
        if kind not in _FLOATS:
            raise Unsupported(f"math test of {kind}")
        return test(value), "bool"

    def cmath_isnan(self, x):
        return self._test(x, lambda v: self.b.fcmp_unordered("uno", v, v))

    def cmath_isinf(self, x):
        return self._test(x, lambda v: self.b.fcmp_ordered(
            "==", sir.intrinsic_call(self.b, "llvm.fabs", v), ir.Constant(v.type, math.inf)))

    def cmath_isfinite(self, x):
        def finite(v):
            difference = self.b.fsub(v, v)
            return self.b.fcmp_ordered("ord", difference, difference)
        return self._test(x, finite, of_integer=True)

    def c_gemm(self, a, b, out, m, k, n, ta, tb):
        pointers = [self.pointer(p) for p in (a, b, out)]
        element = pointers[2][1]
        if element not in _PRECISION or any(e != element for _, e in pointers):
            raise Unsupported("_gemm")
        sizes = [self.index(v) for v in (m, k, n, ta, tb)]
        sir.gemm(self.b, fortran.symbol(_PRECISION[element] + "gemm"),
                 *(p for p, _ in pointers), *sizes)
        return None, "none"

    def c_trsm(self, a, b, n, m, lower, transpose):
        pointers = [self.pointer(p) for p in (a, b)]
        element = pointers[1][1]
        if element not in _PRECISION or any(e != element for _, e in pointers):
            raise Unsupported("_trsm")
        sir.trsm(self.b, fortran.symbol(_PRECISION[element] + "trsm"), *(p for p, _ in pointers),
                 *(self.index(v) for v in (n, m, lower, transpose)))
        return None, "none"

    def c_potrf(self, a, n):
        pointer, element = self.pointer(a)
        if element != "f64":
            raise Unsupported("_potrf")
        return sir.potrf(self.b, fortran.symbol("dpotrf"), pointer, self.index(n)), "i64"

    def kernel_call(self, symbol, element, args):
        pointers = [self.pointer(p) for p in args[:4]]
        if any(e != element for _, e in pointers):
            raise Unsupported(symbol)
        kind = ir.FunctionType(ir.VoidType(), [_DATA[element].as_pointer()] * 4 + [_I64] * 6)
        self.b.call(sir.declared(self.b.module, kind, symbol), [p for p, _ in pointers] + [self.index(v) for v in args[4:]])
        return None, "none"

    def array_kernel_call(self, name, args):
        """An array kernel on ``carray`` views (and literal flags): a call of its C function
        of pointers and sizes (kernel_calls.py)."""
        values, kinds = [], []
        for arg in args:
            if isinstance(arg, ast.Call) and ast.unparse(arg.func) == "carray" \
                    and len(arg.args) == 2 and isinstance(arg.args[1], ast.Tuple):
                pointer, element = self.pointer(arg.args[0])
                sizes = [self.index(size) for size in arg.args[1].elts]
                values += [pointer] + sizes
                kinds.append(kernel_calls.array_kind(element, len(sizes)))
            elif isinstance(arg, ast.Constant) and type(arg.value) in (bool, int):
                values.append(ir.Constant(_I64, int(arg.value)))
                kinds.append("b" if type(arg.value) is bool else "i")
            else:
                raise Unsupported(f"an argument of {name}")
        symbol = kernel_calls.symbol(name, kinds)
        kind = ir.FunctionType(ir.VoidType(), [v.type for v in values])
        self.b.call(sir.declared(self.b.module, kind, symbol), values)
        return None, "none"

    def special_function_call(self, name, args):
        """A special function of numbers: a call of its C function (kernel_calls.py), whose
        result has the type of its last argument, a float."""
        values = [self.expr(arg) for arg in args]
        kind = values[-1][1]
        if kind not in _FLOATS or any(k not in _NUMBERS for _, k in values):
            raise Unsupported(f"{name} of {[k for _, k in values]}")
        symbol = kernel_calls.symbol(name, [kernel_calls.scalar_kind(k) for _, k in values])
        kind_of = ir.FunctionType(_VALUE[kind], [_VALUE[k] for _, k in values])
        fn = sir.declared(self.b.module, kind_of, symbol)
        return self.b.call(fn, [v for v, _ in values]), kind

    # -- statements --

    def block(self, name):
        return self.function.append_basic_block(name)

    def body(self, statements):
        for statement in statements:
            if self.b.block.is_terminated:  # after a break: unreachable
                self.b.position_at_end(self.block("dead"))
            method = getattr(self, "s_" + type(statement).__name__, None)
            if method is None:
                raise Unsupported(type(statement).__name__)
            method(statement)

    def assign(self, target, value, kind):
        b = self.b
        if isinstance(target, ast.Name):
            if kind in ("none", "args"):
                raise Unsupported(f"{target.id} assigned a {kind}")
            if target.id in self.single:
                self.types[target.id] = kind
                self.values[target.id] = value, kind
                return
            known = self.types.get(target.id)
            if known is None:
                known = self.types[target.id] = kind
            elif known != kind:
                if known.startswith("*") or kind.startswith("*"):
                    raise Unsupported(f"{target.id} is a {known} and a {kind}")
                wider = _unify(known, kind)
                if wider != known:
                    self.types[target.id] = wider
                    raise _Retype(target.id)
            if target.id not in self.slots:
                self.slots[target.id] = sir.entry_slot(b, _lltype(known))
            b.store(self.cast(value, kind, known), self.slots[target.id])
        elif isinstance(target, ast.Subscript):
            pointer, element = self.pointer(target.value)
            if kind not in _VALUE:
                raise Unsupported(f"store of a {kind}")
            stored = self.cast(value, kind, element)
            if element == "bool":
                stored = b.zext(stored, _DATA["bool"])
            store = b.store(stored, b.gep(pointer, [self.index(target.slice)]))
            self.scopes.tag(store, _base(target.value, self.bases))
        else:
            raise Unsupported(f"assignment to {type(target).__name__}")

    def s_Assign(self, node):
        if len(node.targets) != 1:
            raise Unsupported("chained assignment")
        target = node.targets[0]
        if isinstance(target, ast.Tuple):  # a swap: every value first, then the stores
            if not isinstance(node.value, ast.Tuple) or len(node.value.elts) != len(target.elts):
                raise Unsupported("tuple assignment")
            values = [self.expr(v) for v in node.value.elts]
            for t, (value, kind) in zip(target.elts, values):
                self.assign(t, value, kind)
        else:
            self.assign(target, *self.expr(node.value))

    def s_AugAssign(self, node):
        target = node.target
        load = ast.Name(target.id, ast.Load()) if isinstance(target, ast.Name) else \
            ast.Subscript(target.value, target.slice, ast.Load())
        self.assign(node.target, *self.expr(ast.BinOp(load, node.op, node.value)))

    def s_Expr(self, node):
        if not isinstance(node.value, ast.Call):
            raise Unsupported("expression statement")
        self.expr(node.value)

    def s_Pass(self, node):
        pass

    def s_While(self, node):
        if node.orelse:
            raise Unsupported("while ... else")
        b = self.b
        head, body, done = self.block("head"), self.block("body"), self.block("done")
        b.branch(head)
        b.position_at_end(head)
        b.cbranch(self.truth(*self.expr(node.test)), body, done)
        b.position_at_end(body)
        self.exits.append(done)
        self.sums.append(set())
        first = len(self.function.blocks)  # the blocks the body adds come after ``done``
        self.body(node.body)
        self.exits.pop()
        summed = self.sums.pop()
        marked = self.mark_sums and summed and not _sums_in_memory(node.body) and _innermost(
            [body] + self.function.blocks[first:]) and not _reads_against_stores(node)
        self.free_sums |= bool(summed) and not marked
        if not b.block.is_terminated:
            latch = b.branch(head)
            if marked:
                width = min(_SUM_WIDTH[kind] for kind in summed)
                if width not in self.sum_widths:
                    self.sum_widths[width] = self.function.module.add_metadata(
                        [ir.Constant(ir.IntType(32), width)])
                latch.set_metadata(_SUM_LOOP, self.sum_widths[width])
        b.position_at_end(done)

    def s_If(self, node):
        b = self.b
        yes, no, done = self.block("then"), self.block("else"), self.block("endif")
        b.cbranch(self.truth(*self.expr(node.test)), yes, no)
        for block, statements in ((yes, node.body), (no, node.orelse)):
            b.position_at_end(block)
            self.body(statements)
            if not b.block.is_terminated:
                b.branch(done)
        b.position_at_end(done)

    def s_Break(self, node):
        if not self.exits:
            raise Unsupported("break outside a loop")
        self.b.branch(self.exits[-1])


# the decorators of numba_cpu/__init__.py (an entry that calls the array kernels has Numba
# count references, which their C functions here do not need) -> whether LLVM is quick
_DECORATORS = {f"entry(lean_pipeline({arg}), nrt={nrt})": bool(arg)
               for arg in ("", "quick=True") for nrt in (False, True)}


def _entry(source):
    """``(body, quick)`` of generated ``source``'s one function (an entry: nothing but imports
    around it, and a decorator of numba_cpu/__init__.py)."""
    tree = ast.parse(source)
    functions = [s for s in tree.body if isinstance(s, ast.FunctionDef)]
    others = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.Import,
                                                           ast.ImportFrom))]
    if len(functions) != 1 or others or len(functions[0].decorator_list) != 1:
        raise Unsupported("not an entry")
    quick = _DECORATORS.get(ast.unparse(functions[0].decorator_list[0]))
    if quick is None:
        raise Unsupported("not an entry")
    return functions[0].body, quick


def translate(source, name):
    """The LLVM IR (text) of generated ``source``'s entry as ``void name(i8* args)``;
    ``Unsupported`` if it uses what this module does not translate."""
    return _translated(_entry(source)[0], name)[0]


def _walk(node):
    """``node`` and every node under it, as ``ast.walk`` gives them (in another order) less
    the contexts and operators, under which no name is: two to three times faster, each node
    class's fields read once (a part's walks were a quarter of its translation)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if not isinstance(node, ast.AST):  # (a list's strings or Nones)
            continue
        yield node
        fields = _FIELDS.get(node.__class__)
        if fields is None:
            fields = _FIELDS[node.__class__] = tuple(
                field for field in node._fields if field not in ("ctx", "op", "ops"))
        for field in fields:
            value = getattr(node, field, None)
            if value.__class__ is list:
                stack.extend(value)
            elif isinstance(value, ast.AST):
                stack.append(value)


_FIELDS = {}  # an ast node class -> the fields _walk reads


def _single_values(body):
    """The variables that need no stack slot: bound once (by an assignment), and read only
    after that statement, in its own statement list or nested in it, so that the one
    definition dominates every read. They are most of a part's names (its pointers, the
    temporaries in its loops); their slots were LLVM's to remove (mem2reg), and their loads
    and stores a third of the IR written, printed and parsed again."""
    position, bound, spans, reads = [0], collections.Counter(), {}, collections.defaultdict(list)

    def visit(statements):
        mine = []
        for statement in statements:
            position[0] += 1
            here = position[0]
            compound = isinstance(statement, (ast.While, ast.If))
            for node in _walk(statement.test if compound else statement):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    reads[node.id].append(here)
            if compound:
                visit(statement.body)
                visit(statement.orelse)
            elif isinstance(statement, ast.Assign):
                for target in statement.targets:
                    for node in _walk(target):
                        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                            bound[node.id] += 1
                            mine.append((node.id, here))
            elif isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
                bound[statement.target.id] += 2
        for variable, after in mine:
            spans[variable] = (after, position[0])

    visit(body)
    return frozenset(v for v, n in bound.items() if n == 1 and all(
        spans[v][0] < at <= spans[v][1] for at in reads[v]))


def _argument_index(node):
    """``k`` of ``_arg(args, k, ...)`` with a literal ``k``; ``("thread", k)`` of a threaded
    phase's own buffer ``_arg(args, k + P * thread, ...)`` (passes.phased: the running
    thread's buffer ``k`` of ``P``, an argument the phase names no other way, apart from
    every literal one and from its other buffers); else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "_arg" and len(node.args) >= 2):
        return None
    index = node.args[1]
    if isinstance(index, ast.Constant) and isinstance(index.value, int):
        return index.value
    if isinstance(index, ast.BinOp) and isinstance(index.op, ast.Add) \
            and isinstance(index.left, ast.Constant) and isinstance(index.left.value, int) \
            and isinstance(index.right, ast.BinOp) and isinstance(index.right.op, ast.Mult) \
            and isinstance(index.right.left, ast.Constant) \
            and isinstance(index.right.right, ast.Name) and index.right.right.id == "thread":
        return ("thread", index.left.value)
    return None


def _base(node, bases):
    """The argument that the pointer expression ``node`` points into, else None."""
    if isinstance(node, ast.Name):
        return bases.get(node.id)
    return _argument_index(node)


def _pointer_bases(body):
    """``({variable: k}, arguments)``: the pointer variables that point into argument ``k``
    wherever they are assigned (``_arg(args, k, ...)``, an ``_offset`` of such a pointer,
    another such variable; ``k`` as ``_argument_index`` gives it, a thread's own buffer
    included). Every argument of an entry is an array of its own (the inputs, the results
    allocated for the call, the scratch buffers, the constants), and generated code never
    writes an input: accesses through two different arguments never overlap (two inputs
    that are one array are only read). A variable assigned pointers into two arguments (a
    carry swapped between buffers) has none. ``arguments``: every ``k`` the body names."""
    sources = collections.defaultdict(set)  # variable -> {k, None, or a variable's name}
    arguments = set()
    for node in _walk(ast.Module(body=list(body), type_ignores=[])):
        k = _argument_index(node)
        if k is not None:
            arguments.add(k)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                    and value.func.id == "_offset" and value.args:
                value = value.args[0]
            if isinstance(value, ast.Name):
                sources[node.targets[0].id].add(value.id if value.id != "args" else None)
            else:
                sources[node.targets[0].id].add(_argument_index(value))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in _walk(node):
                if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store):
                    sources[target.id].add(None)  # (a tuple's swap: no base)
    # each variable's arguments: those it is assigned, and its sources' (a name never
    # assigned here has none we know)
    found = {name: {s for s in got if not isinstance(s, str)} for name, got in sources.items()}
    changed = True
    while changed:
        changed = False
        for name, got in sources.items():
            before = len(found[name])
            for source in got:
                if isinstance(source, str):
                    found[name] |= found.get(source, {None})
            changed |= len(found[name]) != before
    bases = {name: next(iter(ks)) for name, ks in found.items() if len(ks) == 1 and None not in ks}
    return bases, arguments


class _Scopes:
    """LLVM's scoped alias metadata for an entry's loads and stores: one scope per argument
    (``_pointer_bases``), each access in its argument's scope and declared apart from every
    other's, so the loop vectoriser needs no run-time overlap checks between the arrays a
    loop reads and those it writes (each check a second version of the loop for LLVM to
    optimise and compile)."""

    def __init__(self, module, arguments):
        self.module, self.arguments = module, sorted(arguments, key=repr)
        self._scope, self._noalias = {}, {}

    def tag(self, instruction, k):
        if k is None or k not in self.arguments or len(self.arguments) < 2:
            return
        if not self._scope:
            domain = self.module.add_metadata([ir.MetaDataString(self.module, "quabla.args")])
            scopes = {a: self.module.add_metadata(
                [ir.MetaDataString(self.module, "quabla.arg" + (
                    str(a) if isinstance(a, int) else f"{a[1]}.thread")), domain])
                for a in self.arguments}
            for a in self.arguments:
                self._scope[a] = self.module.add_metadata([scopes[a]])
                self._noalias[a] = self.module.add_metadata(
                    [scopes[b] for b in self.arguments if b != a])
        instruction.set_metadata("alias.scope", self._scope[k])
        instruction.set_metadata("noalias", self._noalias[k])


def _translated(body, name, mark_sums=True):
    single = _single_values(body)
    bases = _pointer_bases(body)
    types = {}
    for _ in range(8):  # each retry widens a variable's type
        module = ir.Module(name=name)
        module.triple, module.data_layout = machine.module_target()
        function = _Function(module, name, types, single, bases, mark_sums)
        try:
            function.body(body)
        except _Retype:
            continue
        if not function.b.block.is_terminated:
            function.b.ret_void()
        return _sum_loops(str(module), function.sum_widths), function.free_sums
    raise Unsupported("variable types do not settle")


# A loop that sums (``_sum_add``: adds LLVM may reorder) is vectorised as its metadata says,
# not as LLVM's cost model finds best: with a width per element type and an interleave count
# fixed here, the sum's adds are grouped the same way by every pipeline that vectorises it
# (LLVM's quick one vectorises only such loops), so its bits do not depend on the pipeline.
# A sum in an array element or in a loop around others is left to the cost model (``free``:
# the part's bits are then its pipeline's), as is a sum Numba compiles.
_SUM_WIDTH = {"f64": 4, "f32": 8}
_WIDTH_HINT = "llvm.loop.vectorize.width"  # the metadata that marks a sum's loop
SUM_INTERLEAVE = 4
_SUM_LOOP = "quabla.sum_loop"  # the placeholder kind, replaced in the module's text
_FIRST_LOOP_ID = 1 << 20  # metadata numbers far above llvmlite's


def _sums_in_memory(statements):
    """Whether a sum among ``statements`` accumulates in an array element (LLVM vectorises it
    only where it can keep the element in a register, and warns where a marked loop's is not)."""
    return any(isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)
               and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
               and node.value.func.id == "_sum_add"
               for statement in statements for node in _walk(statement))


def _reads_against_stores(loop):
    """Whether ``loop`` (a ``while i < n`` statement) stores to an array and reads one at an
    index that falls as its counter rises (``999 - i``, a reversed read) or strides with it
    (``200 * i + j``, a transposed read): LLVM cannot tell such a read apart from the stores
    when both are in the one scratch array, so it leaves a marked loop unvectorised, and
    warns. A difference of elements (``a[i] - b[i]``) reads no index against the counter."""
    test = loop.test
    if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)):
        return False
    counter = test.left.id

    def names_counter(node):  # an index's arithmetic on the counter, not an element's value
        nodes = list(_walk(node))
        return any(isinstance(n, ast.Name) and n.id == counter for n in nodes) and not any(
            isinstance(n, (ast.Subscript, ast.Call)) for n in nodes)

    def strided(node):  # ``k * counter`` with k other than 1
        return isinstance(node.op, ast.Mult) and any(
            isinstance(a, ast.Name) and a.id == counter and isinstance(b, ast.Constant)
            and b.value != 1 for a, b in ((node.left, node.right), (node.right, node.left)))

    stores = against = False
    for statement in loop.body:
        for node in _walk(statement):
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
                stores = True
            elif isinstance(node, ast.BinOp) and (
                    (isinstance(node.op, ast.Sub) and names_counter(node.right))
                    or strided(node)):
                against = True
    return stores and against


def _innermost(blocks):
    """Whether a loop of these body ``blocks`` has no loop inside (LLVM vectorises only
    innermost loops)."""
    return not any(block.name.startswith("head") for block in blocks)


def _sum_loops(text, widths):
    """The module ``text`` with each latch marked by a placeholder (``widths``: vector width
    -> its placeholder node) given a loop id of its own that forces that width and
    ``SUM_INTERLEAVE`` (a loop id refers to itself, which llvmlite's metadata cannot)."""
    if not widths:
        return text
    lines, definitions = [], []
    by_reference = {md.get_reference(): width for width, md in widths.items()}
    pattern = re.compile(rf", !{re.escape(_SUM_LOOP)} (![0-9]+)$")
    for line in text.splitlines():
        found = pattern.search(line)
        if found:
            n = _FIRST_LOOP_ID + 4 * len(definitions)
            width = by_reference[found.group(1)]
            definitions.append(
                f"!{n} = distinct !{{!{n}, !{n + 1}, !{n + 2}, !{n + 3}}}\n"
                f"!{n + 1} = !{{!\"llvm.loop.vectorize.enable\", i1 true}}\n"
                f"!{n + 2} = !{{!\"{_WIDTH_HINT}\", i32 {width}}}\n"
                f"!{n + 3} = !{{!\"llvm.loop.interleave.count\", i32 {SUM_INTERLEAVE}}}")
            line = line[:found.start()] + f", !llvm.loop !{n}"
        lines.append(line)
    return "\n".join(lines + definitions) + "\n"


def sums_marked(text):
    """Whether the translated module ``text`` has a sum loop marked to be vectorised
    (``_sum_loops``): only such a loop's bits need a pipeline that vectorises it, as the quick
    and the optimised ones do; a part without one has the same bits from the bare pipeline."""
    return _WIDTH_HINT in text


class DirectEntry:
    """A part translated here: its module parsed, run through LLVM's ``pipeline`` and compiled
    on a thread (``machine.ObjectCode``); the same interface as ``target.Entry``."""

    def __init__(self, text, native_name, pipeline=machine.OPTIMISED):
        self.native_name = native_name
        self._object = machine.ObjectCode(text, pipeline)

    def result(self):
        """``(object code, external symbols)``."""
        return self._object.result()


def translation(key, source):
    """``(LLVM IR text, entry name, quick, free)`` of part ``key``'s generated ``source``
    (``quick``: the pipeline its workload asks for; ``free``: whether a sum in it is
    vectorised as the pipeline finds best, so that its bits depend on the pipeline), or
    ``Unsupported``. A quick part's sums are not marked: it never changes pipeline, and the
    bare one (``machine.BARE``) vectorises no loop."""
    name = f"quabla_direct_{key}"
    body, quick = _entry(source)
    text, free = _translated(body, name, mark_sums=not quick)
    return text, name, quick, free


def compile_entry(key, source):
    """``DirectEntry`` of part ``key``'s generated ``source`` (a quick part's by the ``BARE``
    pipeline), or ``Unsupported``."""
    text, name, quick, _ = translation(key, source)
    return DirectEntry(text, name, machine.BARE if quick else machine.OPTIMISED)
