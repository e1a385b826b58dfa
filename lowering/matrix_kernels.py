"""The per-matrix solvers (and the column sort of ``sort``) that both loop-nest back ends compile:
the Numba CPU back end for its entries' target (numba_cpu/kernels.py) and numba.cuda as device functions, one matrix per
thread (numba_cuda/runtime.py). They are written in the Python both Numba targets take
(scalar indexing, loops, ``math``), work in float64 workspaces the caller provides (nothing is
allocated) and give NaN on failure, per matrix, as the reference interpreter does."""

import math

import numba

__all__ = ["solve", "cholesky", "triangular_solve", "sort", "slogdet", "eigh", "svd", "qr"]


def solve(a, b, out, lu, x):
    """``out`` = a^-1 b for ``b`` and ``out`` of shape (n, m), by Gaussian elimination with
    partial pivoting in the workspaces ``lu`` (n, n) and ``x`` (n, m); NaN if singular."""
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
            for i in range(n):
                for j in range(m):
                    out[i, j] = math.nan
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


def cholesky(a, out, low):
    """``out`` = the lower Cholesky factor of ``a`` (Cholesky-Banachiewicz in the workspace
    ``low``); NaN if ``a`` is not positive definite."""
    n = a.shape[0]
    for i in range(n):
        for j in range(n):
            low[i, j] = 0.0
    for i in range(n):
        for j in range(i + 1):
            s = numba.float64(a[i, j])
            for k in range(j):
                s -= low[i, k] * low[j, k]
            if i == j:
                if not s > 0.0:
                    for p in range(n):
                        for q in range(n):
                            out[p, q] = math.nan
                    return
                low[i, i] = math.sqrt(s)
            else:
                low[i, j] = s / low[j, j]
    for i in range(n):
        for j in range(n):
            out[i, j] = low[i, j]


def triangular_solve(a, b, out, x, lower, transpose):
    """``out`` = op(T)^-1 b for ``b`` and ``out`` of shape (n, m): T the lower (``lower``) or
    upper triangle of ``a`` (the other is never read), op(T) = T or T^T (``transpose``). Rows
    are substituted in order in the workspace ``x`` (n, m), each sum accumulated in the order
    of the rows it reads, as the reference does; a zero on the diagonal gives inf/NaN."""
    n = a.shape[0]
    m = b.shape[1]
    forward = lower != transpose
    for step in range(n):
        i = step if forward else n - 1 - step
        for j in range(m):
            x[i, j] = 0.0
        for q in range(step):
            k = q if forward else n - 1 - q
            t = numba.float64(a[k, i] if transpose else a[i, k])
            for j in range(m):
                x[i, j] += t * x[k, j]
        d = numba.float64(a[i, i])
        for j in range(m):
            x[i, j] = (b[i, j] - x[i, j]) / d
    for i in range(n):
        for j in range(m):
            out[i, j] = x[i, j]


def sort(x, out, perm, tmp):
    """``out`` = the columns of ``x`` (m, n) reordered so that row 0 ascends, as the reference
    of ``sort``: stable (equal keys keep their order, -0.0 equals 0.0), NaN last. A bottom-up
    merge sort of the column numbers in the float64 workspaces ``perm`` and ``tmp`` (n,)
    (exact column numbers below 2**53), then each row gathered through them."""
    m = x.shape[0]
    n = x.shape[1]
    for k in range(n):
        perm[k] = k
    width = 1
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i = lo
            j = mid
            for k in range(lo, hi):
                right = j < hi
                if right and i < mid:
                    a = x[0, int(perm[j])]
                    b = x[0, int(perm[i])]
                    right = a < b or (b != b and a == a)  # strictly before: stable, NaN last
                if right:
                    tmp[k] = perm[j]
                    j += 1
                else:
                    tmp[k] = perm[i]
                    i += 1
            lo += 2 * width
        for k in range(n):
            perm[k] = tmp[k]
        width *= 2
    for r in range(m):
        for k in range(n):
            out[r, k] = x[r, int(perm[k])]


# -- decompositions (issue 25). Every one copies its matrix into float64 workspaces, gives an
#    all-NaN result for a matrix holding a NaN or an infinity (the reference's convention,
#    documented in docs/linear-algebra.md), and writes the packed layout of its primitive
#    (quabla/core/rules/decompositions.py). ``x - x == 0.0`` is false exactly for NaN and inf.

def slogdet(a, out, lu):
    """``out`` = (sign, log|det a|) by Gaussian elimination with partial pivoting in ``lu``
    (n, n); (0, -inf) for a singular matrix, as NumPy's."""
    n = a.shape[0]
    finite = True
    for i in range(n):
        for j in range(n):
            v = numba.float64(a[i, j])
            lu[i, j] = v
            if not v - v == 0.0:
                finite = False
    if not finite:
        out[0] = math.nan
        out[1] = math.nan
        return
    sign = 1.0
    logdet = 0.0
    for k in range(n):
        pivot = k
        for i in range(k + 1, n):
            if abs(lu[i, k]) > abs(lu[pivot, k]):
                pivot = i
        d = lu[pivot, k]
        if d == 0.0:
            out[0] = 0.0
            out[1] = -math.inf
            return
        if pivot != k:
            sign = -sign
            for j in range(k, n):
                lu[k, j], lu[pivot, j] = lu[pivot, j], lu[k, j]
        if d < 0.0:
            sign = -sign
        logdet += math.log(abs(d))
        for i in range(k + 1, n):
            f = lu[i, k] / d
            for j in range(k + 1, n):
                lu[i, j] -= f * lu[k, j]
    out[0] = sign
    out[1] = logdet


def eigh(a, out, w, v, lower):
    """The eigenvalues (ascending, ``out[0]``) and, when ``out`` has n + 1 rows, the
    eigenvectors (``out[1:]``, columns; each one's entry of largest magnitude positive, the
    first on ties) of the symmetric matrix read from the ``lower`` (or upper) triangle of
    ``a``: cyclic Jacobi rotations in ``w`` (n, n), accumulated in ``v`` (n, n)."""
    n = a.shape[0]
    finite = True
    for i in range(n):
        for j in range(i + 1):
            x = numba.float64(a[i, j] if lower else a[j, i])
            if not x - x == 0.0:
                finite = False
            w[i, j] = x
            w[j, i] = x
            v[i, j] = 1.0 if i == j else 0.0
            v[j, i] = v[i, j]
    if not finite:
        for i in range(out.shape[0]):
            for j in range(n):
                out[i, j] = math.nan
        return
    for sweep in range(64):
        off = 0.0
        total = 0.0
        for i in range(n):
            for j in range(n):
                total += w[i, j] * w[i, j]
                if i != j:
                    off += w[i, j] * w[i, j]
        if not off > 1e-34 * total:
            break
        for p in range(n - 1):
            for q in range(p + 1, n):
                apq = w[p, q]
                if apq == 0.0:
                    continue
                theta = (w[q, q] - w[p, p]) / (2.0 * apq)
                t = 1.0 / (abs(theta) + math.sqrt(theta * theta + 1.0))
                if theta < 0.0:
                    t = -t
                c = 1.0 / math.sqrt(t * t + 1.0)
                s = t * c
                for k in range(n):
                    wkp = w[k, p]
                    wkq = w[k, q]
                    w[k, p] = c * wkp - s * wkq
                    w[k, q] = s * wkp + c * wkq
                for k in range(n):
                    wpk = w[p, k]
                    wqk = w[q, k]
                    w[p, k] = c * wpk - s * wqk
                    w[q, k] = s * wpk + c * wqk
                w[p, q] = 0.0
                w[q, p] = 0.0
                for k in range(n):
                    vkp = v[k, p]
                    vkq = v[k, q]
                    v[k, p] = c * vkp - s * vkq
                    v[k, q] = s * vkp + c * vkq
    for j in range(n):  # selection sort, ascending, stable
        best = j
        for k in range(j + 1, n):
            if w[k, k] < w[best, best]:
                best = k
        if best != j:
            w[j, j], w[best, best] = w[best, best], w[j, j]
            for k in range(n):
                v[k, j], v[k, best] = v[k, best], v[k, j]
        big = 0
        for k in range(1, n):
            if abs(v[k, j]) > abs(v[big, j]):
                big = k
        flip = -1.0 if v[big, j] < 0.0 else 1.0
        out[0, j] = w[j, j]
        if out.shape[0] > 1:
            for k in range(n):
                out[1 + k, j] = flip * v[k, j]


def svd(a, out, w, short, long):
    """The singular values (descending) and, unless ``out`` has one row, the vectors of ``a``
    (m, n), packed as the ``svd`` primitive's layout: the rows of u^T, s, the rows of vh. A
    one-sided Jacobi iteration orthogonalises the columns of ``a`` (or of a^T when m < n) in
    ``w`` (r, k), accumulating the rotations in ``short`` (k, k); the long side's vectors go to
    ``long`` (r, r), completed to an orthonormal basis where a singular value is zero or
    ``full_matrices`` asks for more columns. Each column of u has its entry of largest
    magnitude positive (v's column follows; a column of v without partner is set alike)."""
    m = a.shape[0]
    n = a.shape[1]
    tall = m >= n
    r = max(m, n)
    k = min(m, n)
    finite = True
    for i in range(r):
        for j in range(k):
            x = numba.float64(a[i, j] if tall else a[j, i])
            if not x - x == 0.0:
                finite = False
            w[i, j] = x
    if not finite:
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[i, j] = math.nan
        return
    for i in range(k):
        for j in range(k):
            short[i, j] = 1.0 if i == j else 0.0
    for sweep in range(64):
        rotated = False
        for p in range(k - 1):
            for q in range(p + 1, k):
                alpha = 0.0
                beta = 0.0
                gamma = 0.0
                for i in range(r):
                    alpha += w[i, p] * w[i, p]
                    beta += w[i, q] * w[i, q]
                    gamma += w[i, p] * w[i, q]
                if not abs(gamma) > 1e-15 * math.sqrt(alpha * beta):
                    continue
                rotated = True
                zeta = (beta - alpha) / (2.0 * gamma)
                t = 1.0 / (abs(zeta) + math.sqrt(1.0 + zeta * zeta))
                if zeta < 0.0:
                    t = -t
                c = 1.0 / math.sqrt(1.0 + t * t)
                s = c * t
                for i in range(r):
                    wp = w[i, p]
                    wq = w[i, q]
                    w[i, p] = c * wp - s * wq
                    w[i, q] = s * wp + c * wq
                for i in range(k):
                    vp = short[i, p]
                    vq = short[i, q]
                    short[i, p] = c * vp - s * vq
                    short[i, q] = s * vp + c * vq
        if not rotated:
            break
    rows_u = 0  # the packed rows of u^T and of vh: k each, or m and n (full_matrices)
    rows_v = 0
    if out.shape[0] > 1:
        full = out.shape[0] != 2 * k + 1
        rows_u = m if full else k
        rows_v = n if full else k
    ku = rows_u
    for j in range(k):  # the norms, then a selection sort, descending, stable
        s2 = 0.0
        for i in range(r):
            s2 += w[i, j] * w[i, j]
        long[0, j] = math.sqrt(s2)  # row 0 of long is scratch until the vectors are formed
    for j in range(k):
        best = j
        for q in range(j + 1, k):
            if long[0, q] > long[0, best]:
                best = q
        if best != j:
            long[0, j], long[0, best] = long[0, best], long[0, j]
            for i in range(r):
                w[i, j], w[i, best] = w[i, best], w[i, j]
            for i in range(k):
                short[i, j], short[i, best] = short[i, best], short[i, j]
    for j in range(k):
        out[ku, j] = long[0, j]
    for j in range(k, out.shape[1]):
        out[ku, j] = 0.0
    if out.shape[0] == 1:
        return
    # the long side's orthonormal columns: w's normalised, then completed
    need = rows_u if tall else rows_v
    done = 0
    for j in range(k):
        if out[ku, j] > 0.0:
            for i in range(r):
                long[i, j] = w[i, j] / out[ku, j]
            done = j + 1
    for j in range(done, need):
        best = 0
        best_residual = -1.0
        for i in range(r):  # the unit vector farthest from the span so far
            residual = 1.0
            for q in range(j):
                residual -= long[i, q] * long[i, q]
            if residual > best_residual + 1e-12:
                best_residual = residual
                best = i
        for i in range(r):
            long[i, j] = 1.0 if i == best else 0.0
        for sweep in range(2):  # Gram-Schmidt, twice
            for q in range(j):
                dot = 0.0
                for i in range(r):
                    dot += long[i, q] * long[i, j]
                for i in range(r):
                    long[i, j] -= dot * long[i, q]
        norm = 0.0
        for i in range(r):
            norm += long[i, j] * long[i, j]
        norm = math.sqrt(norm)
        for i in range(r):
            long[i, j] /= norm
    # signs, then the packed rows: u^T, s, vh
    for j in range(max(rows_u, rows_v)):
        in_u = j < rows_u
        big = 0
        size = m if in_u else n
        for i in range(1, size):
            if tall == in_u:
                if abs(long[i, j]) > abs(long[big, j]):
                    big = i
            elif abs(short[i, j]) > abs(short[big, j]):
                big = i
        lead = long[big, j] if tall == in_u else short[big, j]
        flip = -1.0 if lead < 0.0 else 1.0
        if j < rows_u:
            for i in range(out.shape[1]):
                out[j, i] = 0.0
            for i in range(m):
                out[j, i] = flip * (long[i, j] if tall else short[i, j])
        if j < rows_v:
            for i in range(out.shape[1]):
                out[ku + 1 + j, i] = 0.0
            for i in range(n):
                out[ku + 1 + j, i] = flip * (short[i, j] if tall else long[i, j])


def qr(a, out, r, q, tau):
    """Q and R of ``a`` (m, n) by Householder reflections as LAPACK's geqr2 and org2r form
    them (so the columns that complete Q are LAPACK's), with R's diagonal made nonnegative
    (Q's columns follow): out's first m rows are Q's columns (kq of them), the rest R's rows.
    Workspaces: ``r`` (m, n), ``q`` (m, m), ``tau`` (k,)."""
    m = a.shape[0]
    n = a.shape[1]
    k = min(m, n)
    kq = out.shape[0] - m
    finite = True
    for i in range(m):
        for j in range(n):
            x = numba.float64(a[i, j])
            if not x - x == 0.0:
                finite = False
            r[i, j] = x
    if not finite:
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[i, j] = math.nan
        return
    for j in range(k):
        alpha = r[j, j]
        xnorm = 0.0
        for i in range(j + 1, m):
            xnorm += r[i, j] * r[i, j]
        xnorm = math.sqrt(xnorm)
        if xnorm == 0.0:
            tau[j] = 0.0
            continue
        beta = -math.copysign(math.sqrt(alpha * alpha + xnorm * xnorm), alpha)
        tau[j] = (beta - alpha) / beta
        scale = 1.0 / (alpha - beta)
        for i in range(j + 1, m):
            r[i, j] *= scale
        r[j, j] = beta
        for c in range(j + 1, n):  # H = I - tau v v^T on the columns right of j
            dot = r[j, c]
            for i in range(j + 1, m):
                dot += r[i, j] * r[i, c]
            dot *= tau[j]
            r[j, c] -= dot
            for i in range(j + 1, m):
                r[i, c] -= dot * r[i, j]
    for i in range(m):
        for c in range(kq):
            q[i, c] = 1.0 if i == c else 0.0
    for j in range(k - 1, -1, -1):
        for c in range(kq):
            dot = q[j, c]
            for i in range(j + 1, m):
                dot += r[i, j] * q[i, c]
            dot *= tau[j]
            q[j, c] -= dot
            for i in range(j + 1, m):
                q[i, c] -= dot * r[i, j]
    for i in range(out.shape[0]):
        for c in range(out.shape[1]):
            out[i, c] = 0.0
    for j in range(kq):
        flip = -1.0 if j < k and r[j, j] < 0.0 else 1.0
        for i in range(m):
            out[i, j] = flip * q[i, j]
        for c in range(j, n):
            if j < k:
                out[m + j, c] = flip * r[j, c]
