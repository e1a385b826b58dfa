"""Rule tables of the reductions over static axes: sum, max, min, and the bool any/all."""

import numpy as np

from ... import dtypes as _dt
from ... import ops
from ..primitives import Primitive, Zero, is_zero, register
from ..tracing import bind


def _reduce_shape(accepts):
    def rule(x, *, axes):
        if accepts == "bool" and x.dtype is not _dt.bool_:
            raise TypeError("bool reductions need bool_ operands")
        if accepts == "float" and not x.dtype.is_floating:
            raise TypeError("reductions need floating operands")
        if any(not 0 <= a < x.ndim for a in axes) or list(axes) != sorted(set(axes)):
            raise ValueError(f"reduction axes {axes} are invalid for rank {x.ndim}")
        return tuple(n for d, n in enumerate(x.shape) if d not in axes), x.dtype, x.weak
    return rule


def _kept(x, axes):
    return tuple(d for d in range(x.ndim) if d not in axes)


def _expand(value, x, axes):
    """Broadcast a reduced value back over the reduced axes of ``x``."""
    return bind("broadcast_in_dim", value, shape=tuple(x.shape), broadcast_dimensions=_kept(x, axes))


def _batch(op):
    return lambda args, batched, size, *, axes: (
        bind(op, args[0], axes=tuple(a + 1 for a in axes)), True)


def _sum_jvp(primals, tangents, out, *, axes):
    (t,) = tangents
    return Zero(out.shape, out.dtype) if is_zero(t) else bind("reduce_sum", t, axes=axes)


register(Primitive(
    "reduce_sum", shape_rule=_reduce_shape("float"),
    impl=lambda x, *, axes: np.sum(x, axis=axes),
    jvp=_sum_jvp,
    vjp=lambda ct, primals, out, *, axes: [_expand(ct, primals[0], axes)],
    batch=_batch("reduce_sum"), kind="reduction", identity=0.0,
))


def _extremum_rules(op):
    """max/min: the derivative is shared equally among the elements that attain the extremum.
    A NaN extremum is attained by no element (0 / 0): every derivative is NaN, as in JAX."""

    def weights(x, out, axes):
        hit = ops.equal(x, _expand(out, x, axes))
        count = bind("reduce_sum", ops.where(hit, 1.0, 0.0), axes=axes)
        return hit, count

    def jvp(primals, tangents, out, *, axes):
        (x,), (t,) = primals, tangents
        if is_zero(t):
            return Zero(out.shape, out.dtype)
        hit, count = weights(x, out, axes)
        return ops.divide(bind("reduce_sum", ops.where(hit, t, 0.0), axes=axes), count)

    def vjp(ct, primals, out, *, axes):
        (x,) = primals
        hit, count = weights(x, out, axes)
        return [ops.multiply(ops.where(hit, 1.0, 0.0), _expand(ops.divide(ct, count), x, axes))]

    return jvp, vjp


for _op, _np, _identity in (("reduce_max", np.max, -np.inf), ("reduce_min", np.min, np.inf)):
    _jvp, _vjp = _extremum_rules(_op)
    register(Primitive(
        _op, shape_rule=_reduce_shape("float"),
        impl=(lambda f: lambda x, *, axes: f(x, axis=axes))(_np),
        jvp=_jvp, vjp=_vjp, batch=_batch(_op), kind="reduction", identity=_identity,
    ))

for _op, _np, _identity in (("reduce_or", np.any, False), ("reduce_and", np.all, True)):
    register(Primitive(
        _op, shape_rule=_reduce_shape("bool"),
        impl=(lambda f: lambda x, *, axes: f(x, axis=axes))(_np),
        batch=_batch(_op), differentiable=False, kind="reduction", identity=_identity,
    ))
