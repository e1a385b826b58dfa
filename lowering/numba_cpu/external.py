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

__all__ = ["SYMBOLS", "names_in", "address", "ensure", "prefetch", "sort_text"]

I64 = ir.IntType(64)
_SCALARS = {"float64": ir.DoubleType(), "float32": ir.FloatType()}
TILE = 4  # rows and columns of the product kernel's tiles
VECTOR = 4  # elements of its vectors (LLVM splits them where the host's are narrower)
STRIP = 16  # elements of a matrix-vector product's strips
_ALIGN = {"float64": 8, "float32": 4}
# the widths of the product kernel's tiles of TILE rows, the heights of the strips of a column
# past them (a's column contiguous, ``ta``; a's rows transposed in registers: a strip of 16
# of those took 50 ms to compile), the widths of the strips of a row past them
TILE_WIDTHS = (2 * TILE, TILE)
HEIGHTS, CROSSED_HEIGHTS = (STRIP, TILE), (TILE,)
ROW_WIDTHS = (STRIP, TILE)


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
    def repeated(self, condition):
        """``while condition(): <body>``, ``condition`` built anew at the loop's head."""
        x = self.ir
        head, body, end = (self.function.append_basic_block(n) for n in ("head", "body", "end"))
        x.branch(head)
        x.position_at_end(head)
        x.cbranch(condition(), body, end)
        x.position_at_end(body)
        yield
        x.branch(head)
        x.position_at_end(end)

    @contextlib.contextmanager
    def steps(self, stop, step=1, start=None):
        """``k = start; while k + step <= stop: <body>; k += step``; the body gets ``k``."""
        x = self.ir
        slot = self.variable(start if start is not None else _int(0))
        with self.repeated(lambda: x.icmp_signed("<=", x.add(x.load(slot), _int(step)), stop)):
            k = x.load(slot)
            yield k
            x.store(x.add(k, _int(step)), slot)

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
    of (batch, rows, inner) and (batch, inner, cols) row-major arrays without BLAS. Every
    element is the sum of a plain dot, in order (the bits of the small products written as
    loop nests); a sum's adds depend on each other, so the speed is in how many sums run at
    once, each in a vector register for all of k:

    - tiles of ``TILE`` rows and ``2 TILE`` or ``TILE`` columns: each row vectors of b's row
      times one element of a (eight vectors summed at once);
    - the columns past the tiles (a matrix-vector product's one column) in strips of rows:
      with ``ta`` a's column is vector loads; without, four rows' next four elements are
      loaded as four vectors and transposed in registers (``_transposed``);
    - the rows past the tiles (a row vector times a matrix) in strips of columns;
    - the corner, plain dots.

    Against four scalar sums at a time (SLP-vectorised tiles of 4 x 4), ``X.T @ g`` of 2000 x
    20 takes 0.57 of the time, ``X @ w`` 0.73, a PINN layer's 512 x 20 x 20 0.9
    (docs/compile-time.md, session 30). The vectors are written out here, not left to LLVM's
    SLP vectoriser (the kernel compiles without it, in ~0.1 s). With ``ta``, a is
    stored (batch, inner, rows) and read in place; with ``tb``, b is stored (batch, cols,
    inner) and arranged into the workspace ``w`` first: the transposed operands of a backward
    pass cost no loop nest in the entry."""
    scalar = _SCALARS[dtype]
    vector = ir.VectorType(scalar, VECTOR)
    lanes = ir.VectorType(ir.IntType(32), VECTOR)
    pointer = scalar.as_pointer()
    kind = ir.FunctionType(ir.VoidType(), [pointer] * 4 + [I64] * 6)
    function = ir.Function(module, kind, name=name)
    a, b, out, w, batch, rows, inner, cols, ta, tb = function.args
    f = _Builder(function)
    x = f.ir
    mul, add = x.mul, x.add
    with x.if_then(x.icmp_signed("!=", tb, _int(0))):
        with f.steps(batch) as g, f.steps(cols) as n, f.steps(inner) as k:
            base = mul(g, mul(inner, cols))
            f.store(f.load(b, base, mul(n, inner), k), w, base, mul(k, cols), n)
    b = x.select(x.icmp_signed("!=", tb, _int(0)), w, b)
    transposed = x.icmp_signed("!=", ta, _int(0))
    am = x.select(transposed, _int(1), inner)  # a's strides along rows and along k
    ak = x.select(transposed, rows, _int(1))

    def whole(stop, step):
        return x.sub(stop, x.srem(stop, _int(step)))

    def vector_at(p, *terms):
        return x.bitcast(f.at(p, *terms), vector.as_pointer())

    def load(p, *terms):
        return x.load(vector_at(p, *terms), align=_ALIGN[dtype])

    def splat(value):
        one = x.insert_element(ir.Constant(vector, ir.Undefined), value, _int(0))
        return x.shuffle_vector(one, ir.Constant(vector, ir.Undefined),
                                ir.Constant(lanes, [0] * VECTOR))

    zero = ir.Constant(vector, [ir.Constant(scalar, 0.0)] * VECTOR)
    with f.steps(batch) as g:
        pa, pb, po = (mul(g, mul(p, q)) for p, q in ((rows, inner), (inner, cols), (rows, cols)))

        def a_at(m, k):
            return add(pa, add(mul(m, am), mul(k, ak)))

        def along_b(m, n, height, width):
            """out[m:m + height, n:n + width], each row vectors of b's row."""
            sums = [[f.variable(zero) for _ in range(width // VECTOR)] for _ in range(height)]
            with f.steps(inner) as k:
                row_b = [load(b, pb, mul(k, cols), n, _int(VECTOR * j))
                         for j in range(width // VECTOR)]
                for i in range(height):
                    element = splat(f.load(a, a_at(add(m, _int(i)), k)))
                    for j, part in enumerate(row_b):
                        f.accumulate(sums[i][j], element, part)
            for i in range(height):
                for j, slot in enumerate(sums[i]):
                    x.store(x.load(slot), vector_at(out, po, mul(add(m, _int(i)), cols), n,
                                                    _int(VECTOR * j)), align=_ALIGN[dtype])

        def store_column(sums, m, n):
            for v, slot in enumerate(sums):
                value = x.load(slot)
                for i in range(VECTOR):
                    f.store(x.extract_element(value, _int(i)), out, po,
                            mul(add(m, _int(VECTOR * v + i)), cols), n)

        def along_a(m, n, height):
            """out[m:m + height, n] with ``ta``: a's column is contiguous."""
            sums = [f.variable(zero) for _ in range(height // VECTOR)]
            with f.steps(inner) as k:
                element = splat(f.load(b, pb, mul(k, cols), n))
                for v, slot in enumerate(sums):
                    f.accumulate(slot, load(a, pa, mul(k, rows), m, _int(VECTOR * v)), element)
            store_column(sums, m, n)

        def across_a(m, n, height):
            """out[m:m + height, n] without ``ta``: a's 4 x 4 blocks transposed."""
            sums = [f.variable(zero) for _ in range(height // VECTOR)]
            elements = [None] * VECTOR
            with f.steps(inner, VECTOR) as k:
                for j in range(VECTOR):
                    elements[j] = splat(f.load(b, pb, mul(add(k, _int(j)), cols), n))
                for v, slot in enumerate(sums):
                    block = [load(a, pa, mul(add(m, _int(VECTOR * v + i)), inner), k)
                             for i in range(VECTOR)]
                    for column, element in zip(_transposed(x, block), elements):
                        f.accumulate(slot, column, element)
            with f.steps(inner, start=whole(inner, VECTOR)) as k:
                element = splat(f.load(b, pb, mul(k, cols), n))
                for v, slot in enumerate(sums):
                    column = ir.Constant(vector, ir.Undefined)
                    for i in range(VECTOR):
                        column = x.insert_element(column, f.load(
                            a, pa, mul(add(m, _int(VECTOR * v + i)), inner), k), _int(i))
                    f.accumulate(slot, column, element)
            store_column(sums, m, n)

        def dot(m, n):
            """out[m, n], a plain dot."""
            total = f.variable(ir.Constant(scalar, 0.0))
            with f.steps(inner) as k:
                f.accumulate(total, f.load(a, a_at(m, k)), f.load(b, pb, mul(k, cols), n))
            f.store(x.load(total), out, po, mul(m, cols), n)

        def strips(length, widths, body, start=None):
            """``body(at, width)`` over [start, length) in strips of ``widths[0]``, the rest
            in strips of the next width, and so on."""
            for width in widths:
                with f.steps(length, width, start) as at:
                    body(at, width)
                start = whole(length, width)

        tile_rows, tile_cols = whole(rows, TILE), whole(cols, TILE)
        with f.steps(rows, TILE) as m:
            strips(tile_cols, TILE_WIDTHS, lambda n, width: along_b(m, n, TILE, width))
        with f.steps(cols, start=tile_cols) as n:  # the columns past the tiles, every row
            with x.if_else(transposed) as (contiguous, strided):
                with contiguous:
                    strips(tile_rows, HEIGHTS, lambda m, height: along_a(m, n, height))
                with strided:
                    strips(tile_rows, CROSSED_HEIGHTS, lambda m, height: across_a(m, n, height))
            with f.steps(rows, start=tile_rows) as m:
                dot(m, n)
        with f.steps(rows, start=tile_rows) as m:  # the rows past the tiles
            strips(tile_cols, ROW_WIDTHS, lambda n, width: along_b(m, n, 1, width))
    x.ret_void()


def _transposed(x, rows):
    """The columns of the 4 x 4 block whose rows are the vectors ``rows``."""
    def pick(p, q, lanes):
        return x.shuffle_vector(p, q, ir.Constant(ir.VectorType(ir.IntType(32), 4), lanes))

    low = [pick(rows[0], rows[1], [0, 4, 2, 6]), pick(rows[2], rows[3], [0, 4, 2, 6])]
    high = [pick(rows[0], rows[1], [1, 5, 3, 7]), pick(rows[2], rows[3], [1, 5, 3, 7])]
    return [pick(low[0], low[1], [0, 1, 4, 5]), pick(high[0], high[1], [0, 1, 4, 5]),
            pick(low[0], low[1], [2, 3, 6, 7]), pick(high[0], high[1], [2, 3, 6, 7])]


def _sort(module, dtype, name):
    """``name(x, m, n, out, m, n, perm, 2n, tmp, 2n)``, the kernel call (kernel_calls.py) of
    ``sort`` on an (m, n) matrix: ``out`` = the columns of ``x`` reordered so that row 0
    ascends, stable (equal keys keep their order, -0.0 equals 0.0), NaN last. The bottom-up
    merge sort of lowering/matrix_kernels.py's ``sort``, but merging each column's number
    (an int64) with its key (a float64) beside it, in the two halves of the float64
    workspaces ``perm`` and ``tmp``: a merge step reads its keys without going through the
    numbers, and is branch-free. A stable sort has one order, so the result is that kernel's,
    which Numba no longer compiles for a translated part (~1 s of a cold process)."""
    scalar, double = _SCALARS[dtype], ir.DoubleType()
    pointer, workspace = scalar.as_pointer(), double.as_pointer()
    kind = ir.FunctionType(ir.VoidType(), [pointer, I64, I64, pointer, I64, I64,
                                           workspace, I64, workspace, I64])
    function = ir.Function(module, kind, name=name)
    x, m, n, out, _, _, perm, _, tmp, _ = function.args
    f = _Builder(function)
    b = f.ir

    def halves(p):  # (numbers, keys)
        return b.bitcast(p, I64.as_pointer()), b.gep(p, [n])

    def lesser(p, q):
        return b.select(b.icmp_signed("<", p, q), p, q)

    numbers, keys = halves(perm)
    with f.steps(n) as k:
        f.store(k, numbers, k)
        key = f.load(x, k)
        f.store(key if dtype == "float64" else b.fpext(key, double), keys, k)
    source, target = f.variable(perm), f.variable(tmp)
    last = b.sub(n, _int(1))
    width = f.variable(_int(1))
    with f.repeated(lambda: b.icmp_signed("<", b.load(width), n)):
        w = b.load(width)
        (numbers, keys), (merged, merged_keys) = halves(b.load(source)), halves(b.load(target))
        lo = f.variable(_int(0))
        with f.repeated(lambda: b.icmp_signed("<", b.load(lo), n)):
            start = b.load(lo)
            mid, hi = lesser(b.add(start, w), n), lesser(b.add(start, b.add(w, w)), n)
            i, j = f.variable(start), f.variable(mid)
            with f.steps(hi, start=start) as k:
                at_i, at_j = b.load(i), b.load(j)
                safe_i, safe_j = lesser(at_i, last), lesser(at_j, last)  # run out: in bounds
                key_i, key_j = f.load(keys, safe_i), f.load(keys, safe_j)
                before = b.or_(b.fcmp_ordered("<", key_j, key_i),
                               b.and_(b.fcmp_unordered("uno", key_i, key_i),
                                      b.fcmp_ordered("ord", key_j, key_j)))
                left_j = b.icmp_signed("<", at_j, hi)
                take_j = b.select(b.and_(left_j, b.icmp_signed("<", at_i, mid)), before, left_j)
                f.store(b.select(take_j, f.load(numbers, safe_j), f.load(numbers, safe_i)),
                        merged, k)
                f.store(b.select(take_j, key_j, key_i), merged_keys, k)
                b.store(b.add(at_j, b.zext(take_j, I64)), j)
                b.store(b.add(at_i, b.zext(b.not_(take_j), I64)), i)
            b.store(b.add(start, b.add(w, w)), lo)
        done = b.load(source)
        b.store(b.load(target), source)
        b.store(done, target)
        b.store(b.add(w, w), width)
    numbers = halves(b.load(source))[0]
    with f.steps(m) as r:
        row = b.mul(r, n)
        with f.steps(n) as k:
            f.store(f.load(x, row, f.load(numbers, k)), out, row, k)
    b.ret_void()


def sort_text(name, dtype):
    """The LLVM IR of the sort kernel call for ``dtype`` elements, its function ``name``."""
    module = ir.Module(name=name)
    _sort(module, dtype, name)
    return str(module)


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
                code = machine.compile_module(_module_text(symbol, name))
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
