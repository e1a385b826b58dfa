"""Kernels that entries call by symbol: built in LLVM IR, compiled once (per process, and
cached like entries), never into an entry.

A kernel that Numba links into an entry is typed, lowered and optimised again inside every
entry that calls it, and LLVM inlines it at every call site: a deep program's sixty products
were sixty copies of ``_matmul`` (carray views, reference counts and all), a third of its
compile time, paid again by every part of an entry cut in parts (parts.py). A kernel here is
a C function of typed pointers and sizes, written with llvmlite's IR builder (Numba's front end
took ~0.13 s of every cold process to type and lower it from Python source; LLVM's passes and
code generation, ~0.06 s, are all it costs now) and compiled for the entries' machine
(``machine.compile_module``, no Numba). Generated code calls it as an external function
(``_matmul_float64(a, b, out, w, ...)``, declared in runtime.py); the object loader finds its
address when an entry's object that names it is linked (``native.resolver``), and LLVM's
linker before Numba links an entry itself (``ensure``). It compiles while the entry that calls
it is translated (``prefetch``). A warm process links it from the cache.
"""

import contextlib
import re
import threading

from llvmlite import ir

from .. import cache, native
from . import machine

__all__ = ["SYMBOLS", "names_in", "address", "ensure", "prefetch"]

I64 = ir.IntType(64)
_SCALARS = {"float64": ir.DoubleType(), "float32": ir.FloatType()}
TILE = 4  # rows and columns of the product kernel's tiles


def _int(value):
    return ir.Constant(I64, value)


class _Builder:
    """llvmlite's IR builder with what the kernels are written in: variables (stack slots in
    the entry block, which LLVM's first passes make registers), while loops, elements."""

    def __init__(self, function):
        self.function = function
        self.ir = ir.IRBuilder(function.append_basic_block("entry"))

    def variable(self, value):
        """A slot holding ``value``."""
        with self.ir.goto_block(self.function.entry_basic_block):
            slot = self.ir.alloca(value.type)
        self.ir.store(value, slot)
        return slot

    @contextlib.contextmanager
    def steps(self, stop, step=1, start=None):
        """``k = start; while k + step <= stop: <body>; k += step``; the body gets ``k``."""
        x = self.ir
        slot = self.variable(start if start is not None else _int(0))
        head, body, end = (self.function.append_basic_block(n) for n in ("head", "body", "end"))
        x.branch(head)
        x.position_at_end(head)
        x.cbranch(x.icmp_signed("<=", x.add(x.load(slot), _int(step)), stop), body, end)
        x.position_at_end(body)
        k = x.load(slot)
        yield k
        x.store(x.add(k, _int(step)), slot)
        x.branch(head)
        x.position_at_end(end)

    def at(self, pointer, *terms):
        """The address of element ``sum(terms)`` of ``pointer``."""
        index = terms[0]
        for term in terms[1:]:
            index = self.ir.add(index, term)
        return self.ir.gep(pointer, [index])

    def load(self, pointer, *terms):
        return self.ir.load(self.at(pointer, *terms))

    def store(self, value, pointer, *terms):
        self.ir.store(value, self.at(pointer, *terms))

    def accumulate(self, slot, a, b):
        """``slot += a * b`` (a product, then a sum: the order every loop nest uses)."""
        self.ir.store(self.ir.fadd(self.ir.load(slot), self.ir.fmul(a, b)), slot)


def _matmul(module, dtype, name):
    """``name(a, b, out, w, batch, rows, inner, cols, ta, tb)``: the batched product out = a @ b
    of (batch, rows, inner) and (batch, inner, cols) row-major arrays without BLAS. Tiles of
    ``TILE`` x ``TILE`` elements, each summed over k in order in sixteen registers (LLVM's SLP
    vectoriser makes each row of four one vector operation: 1.2-2.4x the speed of updating
    rows of ``out`` in memory for every k). The columns past the last whole tile are summed
    ``TILE`` rows at a time, the rows past it ``TILE`` columns at a time, and only the corner is
    plain dots: a matrix-vector product's sums run four at once (as twenty plain dots of 2000,
    one dependent add after another, ``X.T @ g`` took 33-37 µs; 15 now, and strips of eight or
    a transposed a's strip as one vector load, 10-15 µs, doubled the kernel's compile time).
    Every element is the sum of a plain dot, in order (the bits of the small
    products written as loop nests). With ``ta``, a is stored (batch, inner, rows) and read in
    place; with ``tb``, b is stored (batch, cols, inner) and arranged into the workspace ``w``
    first: the transposed operands of a backward pass cost no loop nest in the entry."""
    scalar = _SCALARS[dtype]
    pointer = scalar.as_pointer()
    kind = ir.FunctionType(ir.VoidType(), [pointer] * 4 + [I64] * 6)
    function = ir.Function(module, kind, name=name)
    a, b, out, w, batch, rows, inner, cols, ta, tb = function.args
    f = _Builder(function)
    x = f.ir
    mul = x.mul
    with x.if_then(x.icmp_signed("!=", tb, _int(0))):
        with f.steps(batch) as g, f.steps(cols) as n, f.steps(inner) as k:
            base = mul(g, mul(inner, cols))
            f.store(f.load(b, base, mul(n, inner), k), w, base, mul(k, cols), n)
    b = x.select(x.icmp_signed("!=", tb, _int(0)), w, b)
    transposed = x.icmp_signed("!=", ta, _int(0))
    am = x.select(transposed, _int(1), inner)  # a's strides along rows and along k
    ak = x.select(transposed, rows, _int(1))
    whole_rows = x.sub(rows, x.srem(rows, _int(TILE)))
    whole_cols = x.sub(cols, x.srem(cols, _int(TILE)))
    zero = ir.Constant(scalar, 0.0)
    with f.steps(batch) as g:
        pa, pb, po = (mul(g, mul(p, q)) for p, q in ((rows, inner), (inner, cols), (rows, cols)))

        def block(m, n, height, width):
            """out[m:m + height, n:n + width], its sums in registers for all of k."""
            c = [[f.variable(zero) for _ in range(width)] for _ in range(height)]
            with f.steps(inner) as k:
                row_b = [f.load(b, pb, mul(k, cols), n, _int(j)) for j in range(width)]
                ra = x.add(pa, x.add(mul(m, am), mul(k, ak)))
                for i in range(height):
                    s = f.load(a, ra, mul(_int(i), am))
                    for j in range(width):
                        f.accumulate(c[i][j], s, row_b[j])
            r = x.add(po, x.add(mul(m, cols), n))
            for i in range(height):
                for j in range(width):
                    f.store(x.load(c[i][j]), out, r, mul(_int(i), cols), _int(j))

        with f.steps(rows, TILE) as m, f.steps(cols, TILE) as n:
            block(m, n, TILE, TILE)
        with f.steps(cols, start=whole_cols) as n:  # the columns past the tiles, every row
            with f.steps(rows, TILE) as m:
                block(m, n, TILE, 1)
            with f.steps(rows, start=whole_rows) as m:
                block(m, n, 1, 1)
        with f.steps(rows, start=whole_rows) as m, f.steps(whole_cols, TILE) as n:
            block(m, n, 1, TILE)  # the rows past the tiles
    x.ret_void()


# symbol -> (builder of its function, dtype); generated code calls symbol ``quabla_k<name>``
# as ``<name>`` (runtime.py declares it)
SYMBOLS = {f"quabla_k_matmul_{dtype}": (_matmul, dtype) for dtype in _SCALARS}
_CALLS = {symbol: re.compile(rf"\b{symbol[len('quabla_k'):]}\(") for symbol in SYMBOLS}

_lock = threading.RLock()
_linked = {}  # symbol -> (handle, address) of its code in this process
_pending = {}  # symbol -> the thread linking it (prefetch)


def names_in(source):
    """The kernel symbols generated ``source`` calls."""
    return [symbol for symbol, call in _CALLS.items() if call.search(source)]


def _key(symbol):
    """The cache key of kernel ``symbol``: this file is its source."""
    return cache.entry_key(f"{symbol} {cache.sources_digest(('numba_cpu/external.py',))}")


def _module_text(symbol, name):
    """The LLVM IR of kernel ``symbol``'s module, its function called ``name``."""
    build, dtype = SYMBOLS[symbol]
    module = ir.Module(name=symbol)
    build(module, dtype, name)
    return str(module)


def address(symbol):
    """The address of kernel ``symbol`` in this process: its object linked from the cache, or
    built, compiled and cached first."""
    with _lock:
        if symbol not in _linked:
            key = _key(symbol)
            stored = cache.read_object(key)
            linked = None
            if stored is not None:
                with contextlib.suppress(native.LoadError):
                    linked = native.load(stored[0], stored[1]["entry"],
                                         native.resolve(stored[1]["symbols"]))
            if linked is None:
                name = f"{symbol}_{key}"
                code = machine.compile_module(_module_text(symbol, name), slp=True)
                cache.write_object(key, code, name, [])
                linked = native.load(code, name, {})
            _linked[symbol] = linked
        return _linked[symbol][1]


def prefetch(source):
    """Kernels ``source`` calls that are not linked yet, linked (or compiled) on a thread of
    their own meanwhile: LLVM releases the GIL, so a kernel compiles while the entry that calls
    it is translated; ``address`` waits for it when the entry is linked."""
    for symbol in names_in(source):
        with _lock:
            if symbol in _linked or symbol in _pending:
                continue
            machine.target_machine()  # made here, not on the thread
            _pending[symbol] = thread = threading.Thread(target=_link, args=(symbol,),
                                                         daemon=True)
        thread.start()


def _link(symbol):
    try:
        address(symbol)
    except Exception:  # noqa: BLE001 - the caller's own address() raises it again
        pass
    finally:
        with _lock:
            _pending.pop(symbol, None)


def ensure(source):
    """Every kernel ``source`` calls linked here and known to LLVM's linker by its symbol
    (Numba links a compiled entry in its own engine before handing it over)."""
    for symbol in names_in(source):
        import llvmlite.binding as llvm

        llvm.add_symbol(symbol, address(symbol))
