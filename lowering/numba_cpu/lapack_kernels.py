"""The CPU kernels that call LAPACK (``lapack.py`` says when, ``fortran.py`` which LAPACK):
each copies its matrix into float64 workspaces, calls LAPACK on it (a C matrix is its
transpose for Fortran), and writes the primitive's packed layout with the conventions of the
other kernels (all-NaN for a non-finite matrix or a failed call, signs fixed as
quabla/core/rules/decompositions.py says), so the results agree with them to rounding."""

import math

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import fortran
from .scalar_ir import as_fortran_integer, fortran_integer

__all__ = ["eigh_lapack", "svd_lapack", "slogdet_lapack", "solve_lapack"]


# -- calls of Fortran routines: every argument by address --------------------------------------

def _fortran(symbol, builder, args):
    """Calls ``symbol`` (void, every argument an i8* address) with ``args``."""
    void = ir.IntType(8).as_pointer()
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [void] * len(args)), symbol)
    builder.call(fn, [builder.bitcast(a, void) for a in args])


def _by_reference(builder, value, ty):
    slot = cgutils.alloca_once(builder, ty)
    builder.store(value, slot)
    return slot


def _int(context, builder, value, ty):
    value = context.cast(builder, value, ty, types.intp)
    return _by_reference(builder, as_fortran_integer(builder, value), fortran_integer())


def _char(builder, flag, when_true, when_false):
    """The address of one Fortran character, ``when_true`` if ``flag`` (an intp) is nonzero."""
    i8 = ir.IntType(8)
    test = builder.icmp_signed("!=", flag, ir.Constant(flag.type, 0))
    return _by_reference(builder, builder.select(test, ir.Constant(i8, ord(when_true)),
                                                 ir.Constant(i8, ord(when_false))), i8)


def _data(context, builder, ty, value, offset=None):
    """The address of element ``offset`` (an intp, or 0) of a float64 array's data."""
    pointer = context.make_array(ty)(context, builder, value=value).data
    return pointer if offset is None else builder.gep(pointer, [offset])


def _info(builder):
    return cgutils.alloca_once_value(builder, ir.Constant(fortran_integer(), 0))


def _as_intp(context, builder, value):
    """A LAPACK integer as an intp."""
    kind = types.int64 if value.type.width == 64 else types.int32
    return context.cast(builder, value, kind, types.intp)


def _result(context, builder, info):
    return _as_intp(context, builder, builder.load(info))


def _arrays(*arrays):
    return all(isinstance(a, types.Array) and a.dtype == types.float64 for a in arrays)


@intrinsic
def _syevd(typingctx, a, work, n, upper, lwork, liwork):
    """dsyevd('V', upper ? 'U' : 'L') of the n x n column-major ``a``: eigenvalues in
    work[0:n], the workspaces after them (the integer one as LAPACK's integers); returns
    info."""
    if not _arrays(a, work):
        return None
    symbol = fortran.linked("dsyevd")

    def codegen(context, builder, sig, args):
        pa, pw, n_, up, lw, liw = args
        up = context.cast(builder, up, sig.args[3], types.intp)
        nv = context.cast(builder, n_, sig.args[2], types.intp)
        lwv = context.cast(builder, lw, sig.args[4], types.intp)
        info = _info(builder)
        work0 = _data(context, builder, sig.args[1], pw)
        one = ir.Constant(nv.type, 1)
        jobz = _char(builder, one, "V", "V")
        _fortran(symbol, builder, [
            jobz, _char(builder, up, "U", "L"), _int(context, builder, n_, sig.args[2]),
            _data(context, builder, sig.args[0], pa), _int(context, builder, n_, sig.args[2]),
            work0, builder.gep(work0, [nv]), _int(context, builder, lw, sig.args[4]),
            builder.gep(work0, [builder.add(nv, lwv)]), _int(context, builder, liw, sig.args[5]),
            info])
        return _result(context, builder, info)

    return types.intp(a, work, n, upper, lwork, liwork), codegen


@intrinsic
def _gesdd(typingctx, a, s, u, vt, work, rows, cols, jobz, ldu, ldvt, lwork):
    """dgesdd(jobz 0 'N', 1 'S', 2 'A') of the column-major ``a`` (rows x cols): singular
    values in ``s``, U in ``u`` (leading dimension ldu), V^T in ``vt`` (ldvt); the integer
    workspace is the float64 ``work`` after its first lwork entries; returns info."""
    if not _arrays(a, s, u, vt, work):
        return None
    symbol = fortran.linked("dgesdd")

    def codegen(context, builder, sig, args):
        pa, ps, pu, pv, pw, m_, n_, job, ldu_, ldvt_, lw = args
        t = sig.args
        job = context.cast(builder, job, t[7], types.intp)
        none = builder.icmp_signed("==", job, ir.Constant(job.type, 0))
        letter = builder.select(none, ir.Constant(ir.IntType(8), ord("N")), builder.select(
            builder.icmp_signed("==", job, ir.Constant(job.type, 1)),
            ir.Constant(ir.IntType(8), ord("S")), ir.Constant(ir.IntType(8), ord("A"))))
        info = _info(builder)
        work0 = _data(context, builder, t[4], pw)
        lwv = context.cast(builder, lw, t[10], types.intp)
        _fortran(symbol, builder, [
            _by_reference(builder, letter, ir.IntType(8)), _int(context, builder, m_, t[5]),
            _int(context, builder, n_, t[6]), _data(context, builder, t[0], pa),
            _int(context, builder, m_, t[5]), _data(context, builder, t[1], ps),
            _data(context, builder, t[2], pu), _int(context, builder, ldu_, t[8]),
            _data(context, builder, t[3], pv), _int(context, builder, ldvt_, t[9]),
            work0, _int(context, builder, lw, t[10]), builder.gep(work0, [lwv]), info])
        return _result(context, builder, info)

    return types.intp(a, s, u, vt, work, rows, cols, jobz, ldu, ldvt, lwork), codegen


@intrinsic
def _getrf(typingctx, a, pivots, n):
    """dgetrf of the n x n column-major ``a``; the pivots as LAPACK's integers in ``pivots``;
    info."""
    if not _arrays(a, pivots):
        return None
    symbol = fortran.linked("dgetrf")

    def codegen(context, builder, sig, args):
        pa, pp, n_ = args
        info = _info(builder)
        size = _int(context, builder, n_, sig.args[2])
        _fortran(symbol, builder, [size, size, _data(context, builder, sig.args[0], pa),
                                           size, _data(context, builder, sig.args[1], pp), info])
        return _result(context, builder, info)

    return types.intp(a, pivots, n), codegen


@intrinsic
def _getrs(typingctx, lu, pivots, b, n, nrhs):
    """dgetrs('T') with dgetrf's factors of the n x n column-major ``lu``: b (n x nrhs,
    column-major) becomes the solution of lu^T x = b; returns info."""
    if not _arrays(lu, pivots, b):
        return None
    symbol = fortran.linked("dgetrs")

    def codegen(context, builder, sig, args):
        pa, pp, pb, n_, k_ = args
        t = sig.args
        info = _info(builder)
        size = _int(context, builder, n_, t[3])
        trans = _char(builder, ir.Constant(ir.IntType(64), 1), "T", "T")
        _fortran(symbol, builder, [trans, size, _int(context, builder, k_, t[4]),
                                           _data(context, builder, t[0], pa), size,
                                           _data(context, builder, t[1], pp),
                                           _data(context, builder, t[2], pb), size, info])
        return _result(context, builder, info)

    return types.intp(lu, pivots, b, n, nrhs), codegen


@intrinsic
def _integer_at(typingctx, array, index):
    """The integer at ``index`` of the array's data read as LAPACK's integers (its pivots)."""
    if not _arrays(array):
        return None

    def codegen(context, builder, sig, args):
        data = _data(context, builder, sig.args[0], args[0])
        integers = builder.bitcast(data, fortran_integer().as_pointer())
        k = context.cast(builder, args[1], sig.args[1], types.intp)
        return _as_intp(context, builder, builder.load(builder.gep(integers, [k])))

    return types.intp(array, index), codegen


# -- the kernels ---------------------------------------------------------------------------------

def eigh_lapack(a, out, w, work, lower, lwork, liwork):
    """``eigh`` of one matrix (``matrix_kernels.eigh``'s layout) by dsyevd in ``w`` (n, n) and
    ``work``: C's lower triangle is Fortran's upper one."""
    n = a.shape[0]
    finite = True
    for i in range(n):
        for j in range(i + 1):
            x = a[i, j] if lower else a[j, i]
            if not x - x == 0.0:
                finite = False
            w[i, j] = x
            w[j, i] = x
    if finite:
        finite = _syevd(w, work, n, lower, lwork, liwork) == 0
    if not finite:
        for i in range(out.shape[0]):
            for j in range(n):
                out[i, j] = math.nan
        return
    for j in range(n):  # eigenvector j is row j of w (column j in Fortran's order)
        big = 0
        for k in range(1, n):
            if abs(w[j, k]) > abs(w[j, big]):
                big = k
        flip = -1.0 if w[j, big] < 0.0 else 1.0
        out[0, j] = work[j]
        if out.shape[0] > 1:
            for k in range(n):
                out[1 + k, j] = flip * w[j, k]


def svd_lapack(a, out, t, s, u, vt, work, jobz, lwork):
    """``svd`` of one matrix (``matrix_kernels.svd``'s layout) by dgesdd of a^T (C's a is
    Fortran's a^T = V S U^T): Fortran's U (in ``u``, C rows: the rows of vh) and V^T (in
    ``vt``, C: u itself, m x ku) are read back in C order."""
    m = a.shape[0]
    n = a.shape[1]
    k = min(m, n)
    finite = True
    for i in range(m):
        for j in range(n):
            x = a[i, j]
            if not x - x == 0.0:
                finite = False
            t[i, j] = x
    ku = vt.shape[1] if jobz else 0
    kv = u.shape[0] if jobz else 0
    if finite:
        finite = _gesdd(t, s, u, vt, work, n, m, jobz, n, max(ku, 1), lwork) == 0
    if not finite:
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[i, j] = math.nan
        return
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = 0.0
    for j in range(k):
        out[ku, j] = s[j]
    for j in range(max(ku, kv)):
        big = 0
        if j < ku:
            for i in range(1, m):
                if abs(vt[i, j]) > abs(vt[big, j]):
                    big = i
            lead = vt[big, j]
        else:
            for i in range(1, n):
                if abs(u[j, i]) > abs(u[j, big]):
                    big = i
            lead = u[j, big]
        flip = -1.0 if lead < 0.0 else 1.0
        if j < ku:
            for i in range(m):
                out[j, i] = flip * vt[i, j]
        if j < kv:
            for i in range(n):
                out[ku + 1 + j, i] = flip * u[j, i]


def solve_lapack(a, b, out, t, x, pivots):
    """``out`` = a^-1 b (b and out (n, m)) by dgetrf and dgetrs: C's a is Fortran's a^T, so
    dgetrs solves with the transpose; b goes in transposed (Fortran's column-major n x m).
    NaN where the factorisation meets an exact zero pivot, as ``matrix_kernels.solve``."""
    n = a.shape[0]
    m = b.shape[1]
    for i in range(n):
        for j in range(n):
            t[i, j] = a[i, j]
        for j in range(m):
            x[j, i] = b[i, j]
    if _getrf(t, pivots, n) != 0 or _getrs(t, pivots, x, n, m) != 0:
        for i in range(n):
            for j in range(m):
                out[i, j] = math.nan
        return
    for i in range(n):
        for j in range(m):
            out[i, j] = x[j, i]


def slogdet_lapack(a, out, t, pivots):
    """(sign, log|det|) of one matrix by dgetrf (of a^T: the same determinant)."""
    n = a.shape[0]
    finite = True
    for i in range(n):
        for j in range(n):
            x = a[i, j]
            if not x - x == 0.0:
                finite = False
            t[i, j] = x
    if not finite:
        out[0] = math.nan
        out[1] = math.nan
        return
    info = _getrf(t, pivots, n)
    if info > 0:
        out[0] = 0.0
        out[1] = -math.inf
        return
    sign = 1.0
    logdet = 0.0
    for i in range(n):
        d = t[i, i]
        if d < 0.0:
            sign = -sign
        if _integer_at(pivots, i) != i + 1:
            sign = -sign
        logdet += math.log(abs(d))
    out[0] = sign
    out[1] = logdet
