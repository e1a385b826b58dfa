"""The MLX lowering table: one rule per primitive, ``rule(ctx, *operands, **params) -> array``.

Each rule computes what the primitive's NumPy ``impl`` computes, with ``mlx.core`` arrays.
``ctx`` carries the ``dtype`` map of the program (float64 may run as float32), the ``linalg``
stream (MLX's factorizations and solves run on its CPU stream only) and ``function(graph)``, the
lowered function of a region's sub-graph. Loops (``scan``, ``while``) are Python loops calling
their compiled body; ``cond`` selects between both branches inside the compiled program, or,
where a branch holds a loop, runs the branch its predicate picks. An op missing
from ``RULES`` is rejected before anything runs (``lowering.mlx.check_supported``), and so is,
under ``precision="float64"``, an op of ``FLOAT32_ACCURATE``: MLX's CPU kernels compute it for
float64 arrays only to float32 accuracy.
"""

import math

import mlx.core as mx

from quabla import dtypes as _dt
from quabla.core.rules.elementwise import power_by_squaring

__all__ = ["RULES", "FLOAT32_ACCURATE"]

FLOAT32_ACCURATE = frozenset({"sin", "cos"})
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10  # ln 2 = hi + lo


def _sign(x):
    """sign that keeps the sign of a zero and NaN, as ``np.copysign(np.sign(x), x)``."""
    one = mx.ones_like(x)
    return mx.where(x > 0, one, mx.where(x < 0, -one, x))


def _relu(x):
    return mx.where((x > 0) | mx.isnan(x), x, mx.zeros_like(x))


def _exp(x):
    """exp; in float64 as 2^k (expm1(r) + 1), x = k ln 2 + r, since MLX's own float64 exp is
    only float32-accurate (its expm1 is not). 2^k is split in two halves so that it does not
    overflow before exp does; beyond |x| = 746 exp is 0, inf or NaN, as MLX gives it."""
    if x.dtype != mx.float64:
        return mx.exp(x)
    inside = mx.abs(x) < 746.0
    k = mx.round(mx.where(inside, x, 0.0) * (1.0 / _LN2_HI))
    r = (x - k * _LN2_HI) - k * _LN2_LO
    half = mx.floor(k * 0.5)
    two = mx.array(2.0, dtype=x.dtype)
    scaled = (mx.expm1(r) + 1.0) * mx.power(two, half) * mx.power(two, k - half)
    return mx.where(inside, scaled, mx.exp(x))


def _softplus(x):
    return mx.log1p(_exp(-mx.abs(x))) + mx.maximum(x, mx.zeros_like(x))


def _logistic(x):
    return 1.0 / (1.0 + _exp(-x))


def _unary(fn):
    return lambda ctx, x: fn(x)


def _binary(fn):
    return lambda ctx, x, y: fn(x, y)


_ELEMENTWISE = {
    "neg": _unary(mx.negative), "sin": _unary(mx.sin), "cos": _unary(mx.cos),
    "exp": _unary(_exp), "log": _unary(mx.log), "log1p": _unary(mx.log1p),
    "expm1": _unary(mx.expm1), "tanh": _unary(mx.tanh), "sqrt": _unary(mx.sqrt),
    "abs": _unary(mx.abs), "sign": _unary(_sign), "logistic": _unary(_logistic),
    "relu": _unary(_relu), "softplus": _unary(_softplus), "stop_gradient": _unary(mx.array),
    "integer_pow": lambda ctx, x, *, n: power_by_squaring(mx.ones_like(x), x, n),
    "add": _binary(mx.add), "sub": _binary(mx.subtract), "mul": _binary(mx.multiply),
    "div": _binary(mx.divide), "pow": _binary(mx.power),
    "max": _binary(mx.maximum), "min": _binary(mx.minimum),  # both propagate NaN, as NumPy's
    "gt": _binary(mx.greater), "ge": _binary(mx.greater_equal), "lt": _binary(mx.less),
    "le": _binary(mx.less_equal), "eq": _binary(mx.equal), "ne": _binary(mx.not_equal),
    "isfinite": _unary(mx.isfinite), "isnan": _unary(mx.isnan),
    "and": _binary(mx.logical_and), "or": _binary(mx.logical_or), "not": _unary(mx.logical_not),
    "select": lambda ctx, p, x, y: mx.where(p, x, y),
}


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
    """Zeros of the padded shape with ``x`` written at its strided place (as the reference)."""
    shape = tuple(lo + n + (n - 1) * it + hi for n, lo, hi, it in zip(x.shape, low, high, interior))
    out = mx.zeros(shape, x.dtype)
    out[tuple(slice(lo, lo + (n - 1) * (it + 1) + 1, it + 1)
              for lo, n, it in zip(low, x.shape, interior))] = x
    return out


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


_STRUCTURAL.update(dynamic_index=_dynamic_index, dynamic_update_add=_dynamic_update_add)


_REDUCTIONS = {
    "reduce_sum": _reduction(mx.sum), "reduce_max": _reduction(mx.max),
    "reduce_min": _reduction(mx.min), "reduce_or": _reduction(mx.any),
    "reduce_and": _reduction(mx.all),
}


def _dot_general(ctx, lhs, rhs, *, dimension_numbers):
    """(batch, free, contract) x (batch, contract, free) through one batched matmul."""
    (lc, rc), (lb, rb) = dimension_numbers
    lf = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    size = lambda x, dims: math.prod(x.shape[d] for d in dims)
    a = mx.transpose(lhs, list(lb) + lf + list(lc)).reshape(
        size(lhs, lb), size(lhs, lf), size(lhs, lc))
    b = mx.transpose(rhs, list(rb) + list(rc) + rf).reshape(
        size(rhs, rb), size(rhs, rc), size(rhs, rf))
    shape = ([lhs.shape[d] for d in lb] + [lhs.shape[d] for d in lf]
             + [rhs.shape[d] for d in rf])
    return mx.matmul(a, b).reshape(shape)


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


_LINALG = {
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


_REGIONS = {"scan": _scan, "while": _while, "cond": _cond}

RULES = {**_ELEMENTWISE, **_STRUCTURAL, **_REDUCTIONS, **_LINALG, **_REGIONS}
