"""Lowerings of linear algebra: ``dot_general`` as a batch of matrix products (a loop nest, the
product kernel of ``external.py`` called by symbol, or BLAS through ``runtime._gemm`` for large
products: ``fortran.py``'s, NumPy's OpenBLAS or SciPy's); ``solve``, ``cholesky`` and
``triangular_solve`` over the matrices of a stack as loops in the part itself
(``matrix_kernels.py``'s algorithms, so no kernel has to be compiled by Numba: a Gaussian-
process or least-squares program compiles as fast as any other); the decompositions
(``slogdet``, ``eigh``, ``svd``, ``qr``) through the kernels of ``kernels.py``. Where a LAPACK
is found, larger ``solve``, ``slogdet``, ``eigh`` and ``svd`` call it (``lapack.py``) and larger
``triangular_solve`` BLAS's ``trsm`` (``runtime._trsm``)."""

import math

from .. import fortran
from ..loopnest.products import product
from ..loopnest.templates import literal
from .lapack import LAPACK_MIN, gesdd_work, lapack_available, syevd_sizes
from .source import FLOAT64, node_id
from .statements import Block
from .table import register

__all__ = ["local_product", "row_as_column", "product_result", "rhs_operand", "blas_available",
           "BLAS_THRESHOLD", "MATVEC_THRESHOLD"]

# Products with at least this many multiply-adds go to BLAS (fortran.py's dgemm) unless
# QUABLA_BLAS is 0; smaller ones are faster as loops, with no BLAS threads to wake.
BLAS_THRESHOLD = 1 << 18
# A matrix times a vector (or a row times a matrix) with at least this many multiply-adds goes
# to BLAS: its gemv reorders each sum, where the product kernel sums every element in order (a
# linear model's 5000 x 37 ``X @ w`` and ``X.T @ r``: its step 65-82 µs by BLAS, 107-143 by
# the kernel; a ridge regression's 3000 x 29, 45-50 against 60-64 in a slow phase of this
# machine; at 2000 x 20, no faster by BLAS, whose call and threads cost more)
MATVEC_THRESHOLD = 1 << 16
# OpenBLAS computes products up to this many multiply-adds with its small-matrix kernels.
SMALL_PRODUCT = 1_000_000
# Triangular solves with at least this many multiply-adds (n * n * right-hand sides) go to
# BLAS's trsm: a Gaussian process's gradient solves 80 x 80 systems
# with 80 right-hand sides, twice as fast there as in loops.
TRSM_THRESHOLD = 4096
_FLOATS = ("float64", "float32")
# Products without BLAS of at most this many multiply-adds are emitted as plain loops, which
# compile as fast as a call of the product kernel (external.py; lowering the bound to 64 made
# the small MLPs' cold calls no faster) and need no kernel of their own.
SMALL_LOOP = 4096


def blas_available():
    """Whether large products go to BLAS: QUABLA_BLAS is not 0 and a BLAS is found
    (``fortran.py``)."""
    return fortran.available()


def local_product(e, node):
    """The ``Product`` of a dot_general where it is emitted (a tile's rows in the loop)."""
    lshape, rshape = (e.local_shape(o) for o in node.operands)
    return product(node.kw["dimension_numbers"], lshape, rshape)


def product_result(e, node, out, t):
    if node.shape == ():
        e.assign(out, f"{t}[0]")
    else:
        e.reshaped(t, e.local_shape(node_id(out)), out)
        e.view(out, t, node_id(out))


def dot_general(e, node, out, args, dimension_numbers):
    """Operands arranged as (batch, rows, contraction) and (batch, contraction, cols);
    BLAS (runtime._gemm) for large products where a BLAS is found, a vectorisable loop nest
    else.
    In a tile loop, a product that sums over the rows adds each tile's part to its
    accumulator (set up before the loop)."""
    (lc, _), _ = dimension_numbers
    lhs = e.nodes[node.operands[0]]
    nid = node_id(out)
    lshape = e.local_shape(node.operands[0])
    p = local_product(e, node)
    B, M, K, N = p.dims
    blas, _ = blas_2d(e, node)
    t = f"t{out}"
    accumulate = e.tile is not None and nid in e.tile.accumulated
    target = f"p{out}" if accumulate else t
    expiry = e.now if accumulate else e.last_use.get(nid, e.now)
    if e.in_tile(nid):
        expiry = min(expiry, e.loop_end)
    result = nid if e.tile is None else None
    if blas and e.tile is not None:
        e.tile_blas = max(e.tile_blas, M * K * N)
    if blas and B == 1:
        # one 2-d product: a transposed operand is passed with its flag (BLAS reads
        # it in place), not copied into a permuted scratch array first
        a, ta = operand_2d(e, f"{t}a", args[0], lshape, p.lhs_free, lc, M, K, lhs.dtype)
        b, tb = e.hoisted.get(nid) or rhs_operand(e, node, f"{t}b")
        e.alloc(target, (B, M, N), node.dtype, result=result, expiry=expiry)
        a, b, M, N, ta, tb = row_as_column(a, b, M, N, ta, tb)  # (gemv)
        e.emit(f"_gemm({a}, {b}, {target}, {M}, {K}, {N}, {int(ta)}, {int(tb)})")
    elif blas:
        a = arrange(e, f"{t}a", args[0], lshape, lhs.dtype, p.lhs_order, (B, M, K))
        b, _ = e.hoisted.get(nid) or rhs_operand(e, node, f"{t}b")
        e.alloc(target, (B, M, N), node.dtype, result=result, expiry=expiry)
        e.loop("b", B)
        e.emit(f"_gemm(_offset({a}, b * {M * K}), _offset({b}, b * {K * N}), "
               f"_offset({target}, b * {M * N}), {M}, {K}, {N}, 0, 0)", 2)
    else:
        (_, _), (lb, _) = dimension_numbers
        a, ta = kernel_operand(e, f"{t}a", args[0], lshape, lhs.dtype,
                               (lb, p.lhs_free, lc), (B, M, K))
        b, tb = e.hoisted.get(nid) or rhs_operand(e, node, f"{t}b")
        e.alloc(target, (B, M, N), node.dtype, result=result, expiry=expiry)
        if _in_a_loop_nest(B, M, K, N, ta):
            small_product(e, a, b, target, (B, M, K, N), node.dtype, ta, tb)
        else:
            a, b, M, N, ta, tb = row_as_column(a, b, M, N, ta, tb)
            work = b
            if tb:  # the kernel arranges it here first
                work = f"{t}w"
                e.alloc(work, (B, K, N), node.dtype)
            e.emit(f"_matmul_{node.dtype.name}({a}, {b}, {target}, {work}, {B}, {M}, {K}, "
                   f"{N}, {int(ta)}, {int(tb)})")
    if accumulate:
        e.loops((B * M * N,), f"{t}[i0] += {target}[i0]")
    else:
        product_result(e, node, out, t)


def _in_a_loop_nest(B, M, K, N, ta):
    """Whether a product the kernel would compute is a plain loop nest (``small_product``)
    instead: up to ``SMALL_LOOP`` multiply-adds, but for a matrix of 16 rows or more stored
    by rows times a vector, which the nest would read down its columns one element at a
    time (a layer's ``h @ w`` of 64 x 32 in a training loop's body: the kernel's transposed
    4 x 4 blocks took 0.6-0.75 of the time)."""
    return B * M * K * N <= SMALL_LOOP and not (N == 1 and not ta and M >= 16)


def row_as_column(a, b, M, N, ta, tb):
    """The operands, sizes and flags of a product of one row (``M == 1``: ``w @ X.T``) as the
    matrix times the row as a column: the same dots, so the same bits, with no transposed
    matrix copied (the kernel's ``tb``) and a matrix-vector product's fast paths; any other
    product as it is."""
    if M != 1:
        return a, b, M, N, ta, tb
    return b, a, N, 1, not tb, False


def small_product(e, a, b, out, dims, dtype, ta=False, tb=False):
    """``out`` = (B, M, K) x (B, K, N) as a plain loop nest summing over k in order (as
    the product kernel does, so the same bits): cheaper than that kernel's first compile,
    and as fast for products this small. ``ta``, ``tb``: ``a`` is stored (B, K, M), ``b``
    (B, N, K). A running sum is a chain of dependent adds, and one element after another the
    loop waits on each add, so the sums run side by side where they can, each in ``out``
    from zero, k outside: a matrix times a vector (N = 1) sums its rows so (the mat-vecs of
    a forward-over-reverse MLP; a taller one stored by rows is the kernel's:
    ``_in_a_loop_nest``), and a product whose ``b`` has rows (not ``tb``) sums each
    row of ``out`` along b's row, a loop that vectorises (a first layer's weight gradient,
    a row of 128 times 128 x 32, took 5 us as 32 running sums)."""
    B, M, K, N = dims
    left = e.at(a, ["i0", "k", "i1"] if ta else ["i0", "i1", "k"])
    right = e.at(b, ["i0", "i2", "k"] if tb else ["i0", "k", "i2"])
    target = e.at(out, ["i0", "i1", "i2"])
    side_by_side = ((("i0", B), ("k", K), ("i1", M)) if N == 1 and M > 1 else
                    (("i0", B), ("i1", M), ("k", K), ("i2", N)) if N > 1 and not tb else None)
    if side_by_side:
        e.emit(f"_zero({out}, {B * M * N})")
        for depth, (i, n) in enumerate(side_by_side, 1):
            e.loop(i, n, depth)
        e.emit(f"{target} = {target} + {left} * {right}", len(side_by_side) + 1)
        return
    acc = f"{out}s"
    e.loop("i0", B)
    e.loop("i1", M, 2)
    e.loop("i2", N, 3)
    e.assign(acc, literal(0.0, dtype.name), 4)
    e.loop("k", K, 4)
    e.assign(acc, f"{acc} + {left} * {right}", 5)
    e.emit(f"{target} = {acc}", 4)


def blas_2d(e, node):
    """Does this product go to BLAS as a single 2-d product?"""
    B, M, K, N = local_product(e, node).dims
    work = B * M * N * K
    if e.tile is not None:  # the whole product decides, not one tile of it
        work = work * (e.tile.extent // e.tile.tile)
    vector = B == 1 and min(M, N) == 1
    return work >= (MATVEC_THRESHOLD if vector else BLAS_THRESHOLD) and blas_available(), B == 1


def rhs_operand(e, node, target, expiry=None):
    """``(pointer, transposed)``: the right operand of a product as the kernel takes it:
    (contraction, cols) for a 2-d BLAS product (see ``operand_2d``), (batch, contraction,
    cols) for a batch of BLAS products, else as ``kernel_operand`` gives it. For a small
    BLAS product (OpenBLAS's small-matrix kernels, up to 1e6 multiply-adds) with 16 rows or
    more it is copied when it would be read transposed: those kernels multiply by a
    transposed right operand ~1.5x slower (8 x 128x32 @ 32x32: 57 us instead of 38 us);
    the copy is smaller than the left operand."""
    (_, rc), _ = node.kw["dimension_numbers"]
    rhs = e.nodes[node.operands[1]]
    rshape = e.local_shape(node.operands[1])
    p = local_product(e, node)
    B, M, K, N = p.dims
    name = f"v{node.operands[1]}"
    blas, two_d = blas_2d(e, node)
    if blas and two_d:
        small = M * K * N <= SMALL_PRODUCT and M >= 16 and K * N <= M * K
        return operand_2d(e, target, name, rshape, rc, p.rhs_free, K, N, rhs.dtype,
                          copy_transposed=small, expiry=expiry)
    if blas:
        return arrange(e, target, name, rshape, rhs.dtype, p.rhs_order, (B, K, N),
                       expiry=expiry), False
    (_, _), (_, rb) = node.kw["dimension_numbers"]
    return kernel_operand(e, target, name, rshape, rhs.dtype, (rb, rc, p.rhs_free), (B, K, N),
                          expiry=expiry)


def kernel_operand(e, target, name, shape, dtype, groups, shape3, expiry=None):
    """``(pointer, transposed)``: the operand (of ``shape``) whose axes ``groups`` (batch,
    first, second) make the (B, first, second) array ``shape3`` that the product kernel and
    the small products take: its own memory when in that order, the same with its last two
    groups swapped (transposed: stored (B, second, first), read in place) when in that
    order, else a copy (``arrange``). Reading in place saves the copy's loop nest in
    generated code (the compile time of a transpose per backward product) and its time."""
    batch, first, second = groups
    order = lambda dims: [d for d in dims if shape[d] != 1]  # noqa: E731
    increasing = lambda dims: all(a < b for a, b in zip(dims, dims[1:]))  # noqa: E731
    B, rows, cols = shape3
    if increasing(order(batch) + order(first) + order(second)):
        return e.reshaped(name, shape3, f"{target}3"), False
    if increasing(order(batch) + order(second) + order(first)):
        return e.reshaped(name, (B, cols, rows), f"{target}3"), True
    return arrange(e, target, name, shape, dtype, tuple(batch) + tuple(first) + tuple(second),
                   shape3, expiry=expiry), False


def operand_2d(e, target, name, shape, first, second, rows, cols, dtype=None,
               copy_transposed=False, expiry=None):
    """``(pointer, transposed)``: the operand (of ``shape``) with axes ``first`` as rows and
    ``second`` as columns as _gemm takes it without a copy: its own memory when those axes
    are already in memory order, the same read as transposed when they are in the opposite
    order, else a copy into a C-contiguous scratch array."""
    order = lambda dims: [d for d in dims if shape[d] != 1]
    increasing = lambda dims: all(a < b for a, b in zip(dims, dims[1:]))
    if increasing(order(first) + order(second)):
        return name, False
    if increasing(order(second) + order(first)) and not copy_transposed:
        return name, True
    return arrange(e, target, name, shape, dtype, tuple(first) + tuple(second),
                   (1, rows, cols), expiry=expiry), False


def arrange(e, target, name, shape, dtype, perm, shape3, expiry=None):
    """The operand (of ``shape``) with axes in ``perm`` order, as a C-contiguous 3-d array
    (returns its variable); a permutation is copied with loops into ``target`` (cheaper to
    compile than np.ascontiguousarray)."""
    if perm != tuple(range(len(shape))):
        permuted = tuple(shape[p] for p in perm)
        e.alloc(target, permuted, dtype, expiry=expiry)
        source = [None] * len(perm)
        for k, p in enumerate(perm):
            source[p] = f"i{k}"
        idx = [f"i{k}" for k in range(len(perm))]
        e.loops(permuted, f"{e.at(target, idx)} = {e.at(name, source)}")
        name = target
    return e.reshaped(name, shape3, f"{target}3")


def solve(e, node, out, args):
    rank = len(e.nodes[node.operands[0]].shape)  # a is [*batch, n, n]
    n = node.shape[rank - 2]
    m = math.prod(node.shape[rank - 1:])  # 1 for a stack of vectors
    if n >= LAPACK_MIN and lapack_available():
        stacked(e, "_solve_lapack", node, out, args, [(n, n), (n, m), (n, m)],
                [(f"t{out}lu", (n, n)), (f"t{out}x", (m, n)), (f"t{out}p", (n,))])
        return
    _solve_loops(e, node, out, args, n, m)


def _solve_loops(e, node, out, args, n, m):
    """a^-1 b for each matrix of a stack, written out as loops (so the part needs no kernel
    compiled by Numba): ``matrix_kernels.solve``'s Gaussian elimination with partial pivoting
    and back substitution in float64 workspaces, in its order of operations; all NaN where a
    pivot is zero."""
    e.alloc(out, node.shape, node.dtype, result=node_id(out))
    lu, x = f"t{out}lu", f"t{out}x"
    e.alloc(lu, (n, n), FLOAT64)
    e.alloc(x, (n, m), FLOAT64)
    a, rhs = args
    k, i, j, p, f, t, bad = (f"{out}{v}" for v in ("k", "i", "j", "p", "f", "t", "bad"))
    e.loop("b", math.prod(node.shape) // (n * m))
    e.loop(f"{out}c", n * n, 2)
    e.emit(f"{lu}[{out}c] = {a}[b * {n * n} + {out}c]", 3)
    e.loop(f"{out}c", n * m, 2)
    e.emit(f"{x}[{out}c] = {rhs}[b * {n * m} + {out}c]", 3)
    e.assign(bad, "False", 2)
    _counted(e, k, f"{k} < {n}", 2)
    e.assign(p, k, 3)
    _counted(e, i, f"{i} < {n}", 3, start=f"{k} + 1")
    e.emit(Block(f"if abs({lu}[{i} * {n} + {k}]) > abs({lu}[{p} * {n} + {k}]):"), 4)
    e.assign(p, i, 5)
    _next(e, i, 4)
    e.emit(Block(f"if {lu}[{p} * {n} + {k}] == 0.0:"), 3)
    e.assign(bad, "True", 4)
    e.emit(Block(f"if {p} != {k}:"), 3)
    for name, width in ((lu, n), (x, m)):
        e.loop(f"{out}c", width, 4)
        e.assign(t, f"{name}[{k} * {width} + {out}c]", 5)
        e.emit(f"{name}[{k} * {width} + {out}c] = {name}[{p} * {width} + {out}c]", 5)
        e.emit(f"{name}[{p} * {width} + {out}c] = {t}", 5)
    _counted(e, i, f"{i} < {n}", 3, start=f"{k} + 1")
    e.assign(f, f"{lu}[{i} * {n} + {k}] / {lu}[{k} * {n + 1}]", 4)
    _counted(e, j, f"{j} < {n}", 4, start=k)
    e.emit(f"{lu}[{i} * {n} + {j}] -= {f} * {lu}[{k} * {n} + {j}]", 5)
    _next(e, j, 5)
    e.loop(f"{out}c", m, 4)
    e.emit(f"{x}[{i} * {m} + {out}c] -= {f} * {x}[{k} * {m} + {out}c]", 5)
    _next(e, i, 4)
    _next(e, k, 3)
    e.assign(k, str(n - 1), 2)
    e.emit(Block(f"while {k} >= 0:", loops=True), 2)
    e.loop(f"{out}c", m, 3)
    e.assign(t, f"{x}[{k} * {m} + {out}c]", 4)
    _counted(e, i, f"{i} < {n}", 4, start=f"{k} + 1")
    e.emit(f"{t} -= {lu}[{k} * {n} + {i}] * {x}[{i} * {m} + {out}c]", 5)
    _next(e, i, 5)
    e.emit(f"{x}[{k} * {m} + {out}c] = {t} / {lu}[{k} * {n + 1}]", 4)
    e.emit(f"{k} -= 1", 3)
    _result_or_nan(e, out, x, bad, n * m)


def _result_or_nan(e, out, work, bad, size):
    """Matrix ``b`` of ``out`` (``size`` elements): the workspace ``work``, or all NaN if
    ``bad`` (a failed pivot)."""
    e.emit(Block(f"if {bad}:"), 2)
    e.loop(f"{out}c", size, 3)
    e.emit(f"{out}[b * {size} + {out}c] = math.nan", 4)
    e.emit(Block("else:"), 2)
    e.loop(f"{out}c", size, 3)
    e.emit(f"{out}[b * {size} + {out}c] = {work}[{out}c]", 4)


def _counted(e, var, test, depth, start="0"):
    """``var = start`` and ``while test:`` at ``depth``, its body at ``depth + 1``, which ends
    with ``var += 1`` (``_next``): a loop whose bounds another loop's counter gives."""
    e.assign(var, start, depth)
    e.emit(Block(f"while {test}:", loops=True), depth)


def _next(e, var, depth):
    e.emit(f"{var} += 1", depth)


def cholesky(e, node, out, args):
    """The lower Cholesky factor of each matrix, all NaN where a pivot is not positive: from
    ``LAPACK_MIN`` rows on where a LAPACK is found, its blocked ``dpotrf`` on a float64
    copy (called from the part, as BLAS is: ~5x faster at 80 rows than the loops); else
    written out as loops (so the part needs no kernel compiled by Numba),
    ``matrix_kernels.cholesky``'s algorithm and order of operations (Cholesky-Banachiewicz in
    float64)."""
    n = node.shape[-1]
    e.alloc(out, node.shape, node.dtype, result=node_id(out))
    low = f"t{out}low"
    e.alloc(low, (n, n), FLOAT64)
    a, i, j, k, s, bad = args[0], *(f"{out}{x}" for x in ("i", "j", "k", "s", "bad"))
    e.loop("b", math.prod(node.shape) // (n * n))
    if n >= LAPACK_MIN and lapack_available():
        if e.nodes[node.operands[0]].dtype.name == "float64":
            e.emit(f"_copy({low}, _offset({a}, b * {n * n}), {n * n})", 2)
        else:
            e.loop(f"{out}c", n * n, 2)
            e.emit(f"{low}[{out}c] = np.float64({a}[b * {n * n} + {out}c])", 3)
        e.assign(bad, f"_potrf({low}, {n}) != 0", 2)
        e.loop(i, n, 2)  # a NaN read reaches the diagonal, which LAPACK may not test
        e.emit(Block(f"if not {low}[{i} * {n + 1}] > 0.0:"), 3)
        e.assign(bad, "True", 4)
        # the strict upper triangle still holds the matrix's
        _counted(e, j, f"{j} < {n}", 3, start=f"{i} + 1")
        e.emit(f"{low}[{i} * {n} + {j}] = 0.0", 4)
        _next(e, j, 4)
        _result_or_nan(e, out, low, bad, n * n)
        return
    e.emit(f"_zero({low}, {n * n})", 2)
    e.assign(bad, "False", 2)
    _counted(e, i, f"{i} < {n}", 2)
    _counted(e, j, f"{j} <= {i}", 3)
    e.assign(s, f"np.float64({a}[b * {n * n} + {i} * {n} + {j}])", 4)
    _counted(e, k, f"{k} < {j}", 4)
    e.emit(f"{s} -= {low}[{i} * {n} + {k}] * {low}[{j} * {n} + {k}]", 5)
    _next(e, k, 5)
    e.emit(Block(f"if {i} == {j}:"), 4)
    e.emit(Block(f"if {s} > 0.0:"), 5)
    e.emit(f"{low}[{i} * {n + 1}] = math.sqrt({s})", 6)
    e.emit(Block("else:"), 5)
    e.assign(bad, "True", 6)
    e.emit(Block("else:"), 4)
    e.emit(f"{low}[{i} * {n} + {j}] = {s} / {low}[{j} * {n + 1}]", 5)
    _next(e, j, 4)
    _next(e, i, 3)
    _result_or_nan(e, out, low, bad, n * n)


def triangular_solve(e, node, out, args, lower, transpose_a):
    """op(T)^-1 b for each matrix of a stack: BLAS's ``trsm`` on the result (a copy of b) for
    ``TRSM_THRESHOLD`` or more multiply-adds where a BLAS is found and every dtype is the
    result's, else written out as loops (so the part needs no kernel compiled by Numba):
    ``matrix_kernels.triangular_solve``'s substitution, each sum in the order of the rows it
    reads, in a float64 workspace."""
    rank = len(e.nodes[node.operands[0]].shape)  # a is [*batch, n, n]
    n = node.shape[rank - 2]
    m = math.prod(node.shape[rank - 1:])  # 1 for a stack of vectors
    e.alloc(out, node.shape, node.dtype, result=node_id(out))
    a, rhs = args
    batch = math.prod(node.shape) // (n * m)
    if n * n * m >= TRSM_THRESHOLD and blas_available() and node.dtype.name in _FLOATS and all(
            e.nodes[o].dtype == node.dtype for o in node.operands):
        e.loop("b", batch)
        e.emit(f"_copy(_offset({out}, b * {n * m}), _offset({rhs}, b * {n * m}), {n * m})", 2)
        e.emit(f"_trsm(_offset({a}, b * {n * n}), _offset({out}, b * {n * m}), {n}, {m}, "
               f"{int(lower)}, {int(transpose_a)})", 2)
        return
    x = f"t{out}x"
    e.alloc(x, (n, m), FLOAT64)
    forward = lower != transpose_a
    step, q, i, k, t, d, c = (f"{out}{v}" for v in ("st", "q", "i", "k", "t", "d", "c"))
    e.loop("b", batch)
    _counted(e, step, f"{step} < {n}", 2)
    e.assign(i, step if forward else f"{n - 1} - {step}", 3)
    e.loop(c, m, 3)
    e.emit(f"{x}[{i} * {m} + {c}] = 0.0", 4)
    _counted(e, q, f"{q} < {step}", 3)
    e.assign(k, q if forward else f"{n - 1} - {q}", 4)
    row, col = (k, i) if transpose_a else (i, k)
    e.assign(t, f"np.float64({a}[b * {n * n} + {row} * {n} + {col}])", 4)
    e.loop(c, m, 4)
    e.emit(f"{x}[{i} * {m} + {c}] += {t} * {x}[{k} * {m} + {c}]", 5)
    _next(e, q, 4)
    e.assign(d, f"np.float64({a}[b * {n * n} + {i} * {n + 1}])", 3)
    e.loop(c, m, 3)
    e.emit(f"{x}[{i} * {m} + {c}] = (np.float64({rhs}[b * {n * m} + {i} * {m} + {c}]) "
           f"- {x}[{i} * {m} + {c}]) / {d}", 4)
    _next(e, step, 3)
    e.loop(c, n * m, 2)
    e.emit(f"{out}[b * {n * m} + {c}] = {x}[{c}]", 3)


def stacked(e, kernel, node, out, args, matrices, workspaces, flags=()):
    """``kernel`` on each matrix of a stack (the leading axes), through 2-d views of the
    operands and of ``out`` (of shapes ``matrices``, out's last); the float64 ``workspaces``
    are shared by all matrices, the static ``flags`` follow them."""
    e.alloc(out, node.shape, node.dtype, result=node_id(out))
    for name, shape in workspaces:
        e.alloc(name, shape, FLOAT64)
    workspaces = [(f"carray({name}, {shape})", shape) for name, shape in workspaces]
    batch = math.prod(node.shape) // math.prod(matrices[-1])
    views = [f"carray(_offset({v}, b * {math.prod(shape)}), {shape})"
             for v, shape in zip(args + [out], matrices)]
    e.loop("b", batch)
    names = [name for name, _ in workspaces] + [repr(flag) for flag in flags]
    e.emit(f"{kernel}({', '.join(views + names)})", 2)


def slogdet(e, node, out, args):
    n = e.nodes[node.operands[0]].shape[-1]
    if n >= LAPACK_MIN and lapack_available():
        stacked(e, "_slogdet_lapack", node, out, args, [(n, n), (2,)],
                [(f"t{out}lu", (n, n)), (f"t{out}p", (n,))])
        return
    stacked(e, "_slogdet", node, out, args, [(n, n), (2,)], [(f"t{out}lu", (n, n))])


def eigh(e, node, out, args, lower, vectors):
    """Eigenvalues alone are written as a one-row matrix: the kernel tells by out's rows."""
    n = e.nodes[node.operands[0]].shape[-1]
    packed = (n + 1, n) if vectors else (1, n)
    if n >= LAPACK_MIN and lapack_available():
        lwork, liwork = syevd_sizes(n)
        stacked(e, "_eigh_lapack", node, out, args, [(n, n), packed],
                [(f"t{out}w", (n, n)), (f"t{out}k", (n + lwork + liwork,))],
                flags=(lower, lwork, liwork))
        return
    stacked(e, "_eigh", node, out, args, [(n, n), packed],
            [(f"t{out}w", (n, n)), (f"t{out}v", (n, n))], flags=(lower,))


def svd(e, node, out, args, full_matrices, compute_uv):
    m, n = e.nodes[node.operands[0]].shape[-2:]
    r, k = max(m, n), min(m, n)
    packed = tuple(node.shape[-2:]) if compute_uv else (1, k)
    if k >= LAPACK_MIN and lapack_available():
        jobz = 0 if not compute_uv else 2 if full_matrices else 1
        ku, kv = (m, n) if jobz == 2 else (k, k) if jobz else (1, 1)
        lwork = gesdd_work(m, n)
        stacked(e, "_svd_lapack", node, out, args, [(m, n), packed],
                [(f"t{out}t", (m, n)), (f"t{out}s", (k,)), (f"t{out}u", (kv, n)),
                 (f"t{out}v", (m, ku)), (f"t{out}k", (lwork + 8 * k,))], flags=(jobz, lwork))
        return
    stacked(e, "_svd", node, out, args, [(m, n), packed],
            [(f"t{out}w", (r, k)), (f"t{out}s", (k, k)), (f"t{out}l", (r, r))])


def qr(e, node, out, args, complete):
    m, n = e.nodes[node.operands[0]].shape[-2:]
    stacked(e, "_qr", node, out, args, [(m, n), tuple(node.shape[-2:])],
            [(f"t{out}r", (m, n)), (f"t{out}q", (m, m)), (f"t{out}t", (min(m, n),))])


register({"dot_general": dot_general, "solve": solve, "cholesky": cholesky,
          "triangular_solve": triangular_solve, "slogdet": slogdet, "eigh": eigh, "svd": svd,
          "qr": qr})
