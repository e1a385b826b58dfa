"""The MLX lowering table: one rule per primitive, ``rule(ctx, *operands, **params) -> array``.

Each rule computes what the primitive's NumPy ``impl`` computes, with ``mlx.core`` arrays.
``ctx`` carries the ``dtype`` map of the program (float64 may run as float32), the ``linalg``
stream (MLX's factorizations and solves run on its CPU stream only) and ``function(graph)``, the
lowered function of a region's sub-graph. Loops (``scan``, ``while``) are Python loops calling
their compiled body; ``cond`` selects between both branches inside the compiled program, or,
where a branch holds a loop, runs the branch its predicate picks. The elementwise ops of
``elementwise.yaml`` get their rules from the table's ``mlx`` templates (``elementwise.py``). An
op without a rule (``lowering``) is rejected before anything runs (``lowering.mlx.check_supported``), and so is,
under ``precision="float64"``, an op of ``FLOAT32_ACCURATE``: MLX's CPU kernels compute it for
float64 arrays only to float32 accuracy.
"""

import mlx.core as mx

from quabla import dtypes as _dt
from quabla.core.rules.structural import pad_steps
from ..loopnest.products import product
from .elementwise import elementwise_rule

__all__ = ["RULES", "FLOAT32_ACCURATE", "lowering"]

FLOAT32_ACCURATE = frozenset({"sin", "cos"})

_SELECT = {"select": lambda ctx, p, x, y: mx.where(p, x, y)}


def _cast(ctx, x, *, dtype):
    if dtype.name == "bool":
        return x != 0  # NaN is true, as NumPy's astype(bool)
    return x.astype(ctx.dtype(dtype))


def _broadcast_in_dim(ctx, x, *, shape, broadcast_dimensions):
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = x.shape[i]
    return mx.broadcast_to(x.reshape(expanded), shape)


def _slices(starts, limits, strides):
    return tuple(slice(s, l, st) for s, l, st in zip(starts, limits, strides))


def _rev(ctx, x, *, dimensions):
    return x[tuple(slice(None, None, -1) if d in dimensions else slice(None)
                   for d in range(x.ndim))]


def _pad(ctx, x, *, low, high, interior):
    """As the reference: zeros, ``x`` written at its strided place, negative widths cropped."""
    grown, place, crop = pad_steps(x.shape, low, high, interior)
    out = mx.zeros(grown, x.dtype)
    out[place] = x
    return out[crop]


_STRUCTURAL = {
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": lambda ctx, x, *, new_shape: x.reshape(new_shape),
    "transpose": lambda ctx, x, *, permutation: mx.transpose(x, permutation),
    "rev": _rev,
    "slice": lambda ctx, x, *, start_indices, limit_indices, strides:
        x[_slices(start_indices, limit_indices, strides)],
    "pad": _pad,
    "concatenate": lambda ctx, *xs, axis: mx.concatenate(list(xs), axis=axis),
    "cast": _cast,
    "get": lambda ctx, results, *, index: results[index],
}


def _reduction(fn):
    return lambda ctx, x, *, axes: fn(x, axis=list(axes)) if axes else x


def _row(i, n):
    """The row an index value selects, as ``clamp_index``: round down, wrap negatives, clamp."""
    k = mx.floor(mx.nan_to_num(i, nan=0.0, posinf=n, neginf=-n))
    k = mx.where(k < 0, k + n, k)
    return mx.clip(k, 0, n - 1).astype(mx.int32)


def _one_row(x, i):
    """A bool mask of ``x``'s shape: the row of axis ``i.ndim`` that ``i`` selects, per batch."""
    b = i.ndim
    n = x.shape[b]
    hit = mx.arange(n).reshape((1,) * b + (n,)) == _row(i, n)[..., None]
    return mx.broadcast_to(hit.reshape(hit.shape + (1,) * (x.ndim - b - 1)), x.shape)


def _dynamic_index(ctx, x, i):
    b = i.ndim
    k = _row(i, x.shape[b]).reshape(i.shape + (1,) * (x.ndim - b))
    return mx.take_along_axis(x, k, axis=b).squeeze(b)


def _dynamic_update_add(ctx, x, i, v):
    return mx.where(_one_row(x, i), x + mx.expand_dims(v, i.ndim), x)


def _sort(ctx, x):
    """``sort``: ``mx.argsort`` of the key rows, then equal keys (NaN equal to NaN) put back
    in their order of position by a second argsort of (run of equal keys, position), whose
    keys are distinct: stable, as the reference, whatever MLX's own sort guarantees."""
    n = x.shape[-1]
    if n <= 1:
        return x
    key = x[..., 0, :]
    p = mx.argsort(key, axis=-1)
    k = mx.take_along_axis(key, p, axis=-1)
    a, b = k[..., 1:], k[..., :-1]
    new = (a != b) & ~(mx.isnan(a) & mx.isnan(b))
    wide = mx.int64 if n * n >= 2 ** 31 else mx.int32
    run = mx.cumsum(new.astype(wide), axis=-1)
    run = mx.concatenate([mx.zeros(run.shape[:-1] + (1,), wide), run], axis=-1)
    p = mx.take_along_axis(p, mx.argsort(run * n + p.astype(wide), axis=-1), axis=-1)
    return mx.take_along_axis(x, mx.broadcast_to(mx.expand_dims(p, -2), x.shape), axis=-1)


_STRUCTURAL.update(dynamic_index=_dynamic_index, dynamic_update_add=_dynamic_update_add,
                   sort=_sort)


def _flat_rows(x, i, b):
    """The rows of ``x`` reshaped to (prod(B) * n, *rest) that ``i`` selects (int32, C order
    of (*B, *S)), clamped as the reference does."""
    n = x.shape[b]
    lead = 1
    for d in x.shape[:b]:
        lead *= d
    rows = _row(i, n).reshape(lead, -1)
    if b:
        rows = rows + (mx.arange(lead, dtype=mx.int32) * n)[:, None]
    return rows.reshape(-1)


def _gather(ctx, x, i, *, batch_dims):
    rest = tuple(x.shape[batch_dims + 1:])
    flat = x.reshape((-1,) + rest)
    return mx.take(flat, _flat_rows(x, i, batch_dims), axis=0).reshape(tuple(i.shape) + rest)


_SCATTER = {"add": "add", "mul": "multiply", "min": "minimum", "max": "maximum"}


def _scatter(ctx, x, i, v, *, batch_dims, mode):
    """``.at[rows]`` updates (repeated rows combine). ``set`` is made deterministic: each
    row takes the update with the largest position among those hitting it (the last, as the
    reference), found by a scatter-maximum of the positions."""
    rest = tuple(x.shape[batch_dims + 1:])
    flat = x.reshape((-1,) + rest)
    rows = _flat_rows(x, i, batch_dims)
    values = v.reshape((-1,) + rest)
    if mode == "set":
        ids = mx.arange(1, rows.size + 1, dtype=mx.int32)
        last = mx.zeros((flat.shape[0],), dtype=mx.int32).at[rows].maximum(ids)
        picked = mx.take(values, mx.maximum(last - 1, 0), axis=0)
        hit = (last > 0).reshape((-1,) + (1,) * len(rest))
        out = mx.where(hit, picked, flat)
    else:
        out = getattr(flat.at[rows], _SCATTER[mode])(values)
    return out.reshape(x.shape)


_STRUCTURAL.update(gather=_gather, scatter=_scatter)


_REDUCTIONS = {
    "reduce_sum": _reduction(mx.sum), "reduce_max": _reduction(mx.max),
    "reduce_min": _reduction(mx.min), "reduce_or": _reduction(mx.any),
    "reduce_and": _reduction(mx.all),
}


def _dot_general(ctx, lhs, rhs, *, dimension_numbers):
    """(batch, free, contract) x (batch, contract, free) through one batched matmul."""
    p = product(dimension_numbers, lhs.shape, rhs.shape)
    a = mx.transpose(lhs, list(p.lhs_order)).reshape(p.B, p.M, p.K)
    b = mx.transpose(rhs, list(p.rhs_order)).reshape(p.B, p.K, p.N)
    (contracted, _), _ = dimension_numbers
    batch_and_rows = p.lhs_order[:len(p.lhs_order) - len(contracted)]
    return mx.matmul(a, b).reshape([lhs.shape[d] for d in batch_and_rows]
                                   + [rhs.shape[d] for d in p.rhs_free])


def _as_matrices(solver):
    """A solver of stacks of matrices ``b`` that also takes stacks of vectors."""
    def rule(ctx, a, b, **params):
        if b.ndim < a.ndim:
            return rule(ctx, a, b[..., None], **params)[..., 0]
        return solver(ctx, a, b, **params)
    return rule


def _triangular_solve(ctx, a, b, *, lower, transpose_a):
    """op(T) x = b, T the ``lower`` (or upper) triangle of ``a``; the other is never read."""
    t = mx.tril(a) if lower else mx.triu(a)
    if transpose_a:
        t = mx.swapaxes(t, -1, -2)
    return mx.linalg.solve_triangular(t, b, upper=lower == transpose_a, stream=ctx.linalg)


def _finite(a):
    """(``a`` with each matrix holding a NaN or inf replaced by the identity, its mask): the
    decompositions' convention (quabla/core/rules/decompositions.py) is an all-NaN result."""
    bad = ~mx.all(mx.isfinite(a), axis=(-2, -1))
    eye = mx.eye(a.shape[-2], a.shape[-1], dtype=a.dtype)
    return mx.where(bad[..., None, None], eye, a), bad


def _masked(out, bad):
    return mx.where(bad.reshape(bad.shape + (1,) * (out.ndim - bad.ndim)), mx.nan, out)


def _leading_positive(v):
    """+1 or -1 per column: the sign of its entry of largest magnitude (the first on ties)."""
    big = mx.argmax(mx.abs(v), axis=-2, keepdims=True)
    lead = mx.take_along_axis(v, big, axis=-2)
    return mx.where(lead < 0, -1.0, 1.0).astype(v.dtype)


def _pad_to(x, width):
    extra = width - x.shape[-1]
    if extra == 0:
        return x
    return mx.concatenate([x, mx.zeros(x.shape[:-1] + (extra,), dtype=x.dtype)], axis=-1)


def _slogdet(ctx, a):
    clean, bad = _finite(a)
    sign, logdet = mx.linalg.slogdet(clean, stream=ctx.linalg)
    return _masked(mx.stack([sign.astype(a.dtype), logdet.astype(a.dtype)], axis=-1), bad)


def _eigh(ctx, a, *, lower, vectors):
    clean, bad = _finite(a)
    uplo = "L" if lower else "U"
    if not vectors:
        return _masked(mx.linalg.eigvalsh(clean, UPLO=uplo, stream=ctx.linalg), bad)
    w, v = mx.linalg.eigh(clean, UPLO=uplo, stream=ctx.linalg)
    v = v * _leading_positive(v)
    return _masked(mx.concatenate([mx.expand_dims(w, -2), v], axis=-2), bad)


def _svd(ctx, a, *, full_matrices, compute_uv):
    """MLX gives the full factors; the reduced ones are their leading columns and rows."""
    clean, bad = _finite(a)
    if not compute_uv:
        return _masked(mx.linalg.svd(clean, compute_uv=False, stream=ctx.linalg), bad)
    m, n = a.shape[-2:]
    k = min(m, n)
    ku, kv = (m, n) if full_matrices else (k, k)
    u, s, vt = mx.linalg.svd(clean, compute_uv=True, stream=ctx.linalg)
    u, vt = u[..., :, :ku], vt[..., :kv, :]
    flip = _leading_positive(u)
    v_flip = _leading_positive(mx.swapaxes(vt, -1, -2))
    if kv > k:
        flip_v = mx.concatenate([flip[..., :k], v_flip[..., k:]], axis=-1)
    else:
        flip_v = flip[..., :kv]
    u = u * flip
    vt = vt * mx.swapaxes(flip_v, -1, -2)
    width = max(m, n)
    packed = mx.concatenate([_pad_to(mx.swapaxes(u, -1, -2), width),
                             _pad_to(mx.expand_dims(s.astype(a.dtype), -2), width),
                             _pad_to(vt, width)], axis=-2)
    return _masked(packed, bad)


def _qr(ctx, a, *, complete):
    """A complete Q (m > n) is the Q of [a | I]: its first n columns are a's."""
    clean, bad = _finite(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    if complete:
        eye = mx.broadcast_to(mx.eye(m, dtype=a.dtype), clean.shape[:-2] + (m, m))
        q, r = mx.linalg.qr(mx.concatenate([clean, eye], axis=-1), stream=ctx.linalg)
        r = r[..., :, :n]
    else:
        q, r = mx.linalg.qr(clean, stream=ctx.linalg)
    diag = mx.diagonal(r[..., :k, :k], axis1=-2, axis2=-1)
    flip = mx.where(diag < 0, -1.0, 1.0).astype(a.dtype)
    if q.shape[-1] > k:
        flip_q = mx.concatenate([flip, mx.ones(flip.shape[:-1] + (q.shape[-1] - k,), dtype=a.dtype)], axis=-1)
    else:
        flip_q = flip
    q = q * mx.expand_dims(flip_q, -2)
    r = mx.concatenate([r[..., :k, :] * mx.expand_dims(flip, -1), r[..., k:, :]], axis=-2)
    width = max(q.shape[-1], n)
    return _masked(mx.concatenate([_pad_to(q, width), _pad_to(r, width)], axis=-2), bad)


_LINALG = {
    "slogdet": _slogdet, "eigh": _eigh, "svd": _svd, "qr": _qr,
    "dot_general": _dot_general,
    "solve": _as_matrices(lambda ctx, a, b: mx.linalg.solve(a, b, stream=ctx.linalg)),
    "triangular_solve": _as_matrices(_triangular_solve),
    "cholesky": lambda ctx, a: mx.linalg.cholesky(a, stream=ctx.linalg),
}

def _index(ctx, value):
    """A loop index: a (weak float64) scalar of the program's float64 dtype."""
    return mx.array(float(value), dtype=ctx.types[_dt.float64])


def _scan(ctx, *operands, body, length, lower, reverse, n_carry):
    run = ctx.function(body)
    carry, consts = list(operands[:n_carry]), list(operands[n_carry:])
    rows = [None] * length
    for k in range(length - 1, -1, -1) if reverse else range(length):
        outs = run(_index(ctx, lower + k), *carry, *consts)
        carry, rows[k] = outs[:n_carry], outs[n_carry:]
        mx.eval(carry)  # one iteration's graph at a time
    return carry + [mx.stack(list(column)) for column in zip(*rows)]


def _while(ctx, *operands, cond_fun, body, n_carry):
    test, step = ctx.function(cond_fun), ctx.function(body)
    carry, consts = list(operands[:n_carry]), list(operands[n_carry:])
    while test(*carry, *consts)[0].item():
        carry = step(*carry, *consts)
    return carry


def _cond(ctx, pred, *operands, true_fun, false_fun):
    if ctx.loops(true_fun) or ctx.loops(false_fun):
        return ctx.function(true_fun if pred.item() else false_fun)(*operands)
    taken = ctx.inline(true_fun)(*operands)
    other = ctx.inline(false_fun)(*operands)
    return [mx.where(pred, t, f) for t, f in zip(taken, other)]


def _remat(ctx, *operands, fun):
    """Traced into the program (MLX's compiler may merge the recomputation back)."""
    return (ctx.function if ctx.loops(fun) else ctx.inline)(fun)(*operands)


_REGIONS = {"scan": _scan, "while": _while, "cond": _cond, "remat": _remat}

RULES = {**_SELECT, **_STRUCTURAL, **_REDUCTIONS, **_LINALG, **_REGIONS}


def lowering(op):
    """The rule of ``op``: its entry of ``RULES``, or, for an op of ``elementwise.yaml``, the
    rule built from its ``mlx`` template (``elementwise.py``); None if MLX has none."""
    return RULES.get(op) or elementwise_rule(op)
