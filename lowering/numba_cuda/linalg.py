"""Lowerings of linear algebra: ``dot_general`` as cuBLAS (``blas.py``) on operands arranged as
(batch, rows, contraction) x (batch, contraction, cols) when ``Launch.cublas`` and the product
is large, else a tiled kernel (shared-memory tiles, each sum over k in order) reading its
operands through their index maps; ``solve``, ``cholesky``, ``triangular_solve`` and the
decompositions (``slogdet``, ``eigh``, ``svd``, ``qr``) one thread per matrix of the stack (the
device functions of ``runtime.py``)."""

import math

from ..loopnest.schedule import kind
from ..loopnest.templates import literal, np_dtype
from .source import blocks, indent, unflatten
from .table import register

__all__ = ["CUBLAS_THRESHOLD"]

CUBLAS_THRESHOLD = 1 << 15  # multiply-adds from which a product goes to cuBLAS (when it can)


def dot_general(e, node, nid, dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers
    lhs, rhs = node.operands
    lshape, rshape = e.nodes[lhs].shape, e.nodes[rhs].shape
    lf = [d for d in range(len(lshape)) if d not in lc and d not in lb]
    rf = [d for d in range(len(rshape)) if d not in rc and d not in rb]
    size = lambda shape, dims: math.prod(shape[d] for d in dims)
    B, M, K, N = size(lshape, lb), size(lshape, lf), size(lshape, lc), size(rshape, rf)
    dtype = node.dtype.name
    e.alloc(f"v{nid}", node.shape, dtype)
    if B * M * N == 0:
        return
    out = e.as_shape(f"v{nid}", (B, M, N), f"v{nid}m", nid)
    T = e.launch.tile
    zero = literal(0, dtype)
    load_a = (unflatten("b", list(lb), lshape, "l") + unflatten("row", lf, lshape, "l")
              + unflatten("k", list(lc), lshape, "l"))
    load_b = (unflatten("b", list(rb), rshape, "r") + unflatten("k", list(rc), rshape, "r")
              + unflatten("col", rf, rshape, "r"))
    a = e.read(lhs, None, [f"l{d}" for d in range(len(lshape))])
    b = e.read(rhs, None, [f"r{d}" for d in range(len(rshape))])
    if e.launch.cublas and B * M * K * N >= CUBLAS_THRESHOLD:
        a3 = arranged(e, lhs, tuple(lb) + tuple(lf) + tuple(lc), (B, M, K),
                      ["b", "row", "k"], load_a, a, f"w{nid}a")
        b3 = arranged(e, rhs, tuple(rb) + tuple(rc) + tuple(rf), (B, K, N),
                      ["b", "k", "col"], load_b, b, f"w{nid}b")
        e.host.append(f"_gemm({a3}, {b3}, {out})")
        return
    body = [f"sa = cuda.shared.array(({T}, {T}), {np_dtype(dtype)})",
            f"sb = cuda.shared.array(({T}, {T}), {np_dtype(dtype)})",
            "tx = cuda.threadIdx.x", "ty = cuda.threadIdx.y",
            f"for b in range(cuda.blockIdx.z, {B}, cuda.gridDim.z):",
            f"    for rb in range(cuda.blockIdx.y * {T}, {M}, cuda.gridDim.y * {T}):",
            f"        for cb in range(cuda.blockIdx.x * {T}, {N}, cuda.gridDim.x * {T}):"]
    tile = ["row = rb + ty", "col = cb + tx", f"acc = {zero}",
            f"for k0 in range(0, {K}, {T}):",
            "    k = k0 + tx", f"    if row < {M} and k < {K}:"]
    tile += indent(load_a + [f"sa[ty, tx] = {a}"], 2)
    tile += ["    else:", f"        sa[ty, tx] = {zero}",
             "    k = k0 + ty", f"    if k < {K} and col < {N}:"]
    tile += indent(load_b + [f"sb[ty, tx] = {b}"], 2)
    tile += ["    else:", f"        sb[ty, tx] = {zero}", "    cuda.syncthreads()",
             f"    for q in range({T}):", "        acc += sa[ty, q] * sb[q, tx]",
             "    cuda.syncthreads()",
             f"if row < {M} and col < {N}:", f"    {out}[b, row, col] = acc"]
    body += indent(tile, 3)
    grid = (blocks(N, T, e.launch.blocks), blocks(M, T, e.launch.rows),
            min(B, e.launch.rows))
    e.kernel(body, grid, (T, T))


def arranged(e, nid, order, shape3, names, index_lines, value, var):
    """Operand ``nid`` as a C-contiguous 3-d array of ``shape3`` (axes ``order`` grouped
    as batch, rows, columns) for cuBLAS: a view when it is stored in that order, else a
    copy made by a kernel (``index_lines`` bind its indices from ``names``)."""
    node = e.nodes[nid]
    stored = nid not in e.literals and (kind(node) != "index_map" or nid in e.stored)
    if stored and order == tuple(range(len(node.shape))):
        return e.as_shape(f"v{nid}", shape3, f"{var}v", nid)
    e.alloc(var, shape3, node.dtype.name, expiry=e.now)
    e.grid_stride(shape3, lambda idx: [f"{n} = {i}" for n, i in zip(names, idx)]
                  + index_lines + [f"{var}[{', '.join(idx)}] = {value}"])
    return var


def solve(e, node, nid):
    rank = len(e.nodes[node.operands[0]].shape)
    n, m = node.shape[rank - 2], math.prod(node.shape[rank - 1:])
    stacked(e, "_solve", node, nid, [(n, n), (n, m), (n, m)], [(n, n), (n, m)])


def cholesky(e, node, nid):
    n = node.shape[-1]
    stacked(e, "_cholesky", node, nid, [(n, n), (n, n)], [(n, n)])


def triangular_solve(e, node, nid, lower, transpose_a):
    rank = len(e.nodes[node.operands[0]].shape)
    n, m = node.shape[rank - 2], math.prod(node.shape[rank - 1:])
    stacked(e, "_triangular_solve", node, nid, [(n, n), (n, m), (n, m)], [(n, m)],
            flags=(lower, transpose_a))


def stacked(e, kernel, node, nid, matrices, workspaces, flags=()):
    """``kernel`` on each matrix of the stack (the leading axes), one thread each, with
    float64 workspaces of its own."""
    e.alloc(f"v{nid}", node.shape, node.dtype.name)
    batch = math.prod(node.shape) // math.prod(matrices[-1])
    if batch == 0:
        return
    names = [e.as_shape(f"v{o}", (batch,) + shape, f"v{o}{chr(97 + k)}", o)
             for k, (o, shape) in enumerate(zip(node.operands, matrices))]
    names.append(e.as_shape(f"v{nid}", (batch,) + matrices[-1], f"v{nid}z", nid))
    for k, shape in enumerate(workspaces):
        e.alloc(f"w{nid}{chr(97 + k)}", (batch,) + shape, "float64", expiry=e.now)
        names.append(f"w{nid}{chr(97 + k)}")
    call = ", ".join([f"{v}[b]" for v in names] + [repr(f) for f in flags])
    T = e.launch.threads
    e.kernel([f"for b in range(cuda.grid(1), {batch}, cuda.gridsize(1)):",
              f"    {kernel}({call})"], blocks(batch, T, e.launch.blocks), T)


def slogdet(e, node, nid):
    n = e.nodes[node.operands[0]].shape[-1]
    stacked(e, "_slogdet", node, nid, [(n, n), (2,)], [(n, n)])


def eigh(e, node, nid, lower, vectors):
    """Eigenvalues alone are written as a one-row matrix: the kernel tells by out's rows."""
    n = e.nodes[node.operands[0]].shape[-1]
    stacked(e, "_eigh", node, nid, [(n, n), (n + 1, n) if vectors else (1, n)],
            [(n, n), (n, n)], flags=(lower,))


def svd(e, node, nid, full_matrices, compute_uv):
    m, n = e.nodes[node.operands[0]].shape[-2:]
    r, k = max(m, n), min(m, n)
    packed = tuple(node.shape[-2:]) if compute_uv else (1, k)
    stacked(e, "_svd", node, nid, [(m, n), packed], [(r, k), (k, k), (r, r)])


def qr(e, node, nid, complete):
    m, n = e.nodes[node.operands[0]].shape[-2:]
    stacked(e, "_qr", node, nid, [(m, n), tuple(node.shape[-2:])],
            [(m, n), (m, m), (min(m, n),)])


register({"dot_general": dot_general, "solve": solve, "cholesky": cholesky,
          "triangular_solve": triangular_solve, "slogdet": slogdet, "eigh": eigh, "svd": svd,
          "qr": qr})
