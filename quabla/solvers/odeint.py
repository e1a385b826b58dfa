"""``odeint``: adaptive Dormand–Prince 5(4) integration of ``dy/dt = func(y, t, *args)``.

One primitive, operands ``(y0, t, *consts)`` with ``t`` shaped ``[T, *batch]``, params
``func: (y, t, *consts) -> dy/dt`` as a sub-graph; results ``ys [T, *y0.shape]``, ``info`` (0, or
the steps taken, at least 1, when a lane could not go on) and the time each lane reached. The
integration is written once (NumPy reference, and the ``expand`` rule: a ``while_loop`` of
steps inside a ``fori_loop`` over the output times). Steps are cut to land on each output time;
the step-size control is JAX's (RMS error ratio against ``atol + rtol max(|y|, |y_new|)``,
safety 0.9, growth at most 10x, shrink at most 5x; the first step from Hairer's heuristic).

Derivatives are never taken through the steps. Forward mode integrates the tangent along
(forward sensitivities: ``z' = J_y z + f_θ θ'``); reverse mode is the adjoint method as in JAX:
``(y, a, θ̄)`` integrated backwards interval by interval, ``y`` restarting from the stored
``ys``, the output cotangents added to the adjoint ``a`` at each output time.
"""

import numpy as np

from .. import ops
from ..array import Tensor
from ..core.primitives import Primitive, Zero, is_zero, register
from ..core.tracing import bind
from ..dtypes import float64
from ..errors import UnsupportedOperationError
from .common import (NUMPY, TRACED, ConvergenceError, Flat, apply_jvp, apply_vjp,
                     as_float_array, batch_sub, failure_info, graph_of, lead, nan_unless,
                     operator_graph)

__all__ = ["odeint"]

_C = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_A = ((), (1 / 5,), (3 / 40, 9 / 40), (44 / 45, -56 / 15, 32 / 9),
      (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
      (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
      (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84))
_B5 = _A[6] + (0.0,)
_B4 = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)
_E = tuple(p - q for p, q in zip(_B5, _B4))


def _combine(coefs, ks):
    terms = [c * k for c, k in zip(coefs, ks) if c != 0.0]
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def _integrate(xp, y0, t, consts, *, func, rtol, atol, mxstep, hmax, nbatch):
    batch = tuple(y0.shape[:nbatch])
    lanes = batch + (1,) * (len(y0.shape) - nbatch)
    size = max(int(np.prod(y0.shape[nbatch:], dtype=np.int64)), 1)
    count = t.shape[0]

    def fun(y, s):
        return xp.apply(func, y, xp.reshape(s, batch), *consts)[0]

    def rms(v):
        return xp.sqrt(xp.lane_sum(v * v, nbatch) / size)

    def capped(h):  # JAX's hmax: every step, the first too, at most hmax
        return h if hmax == float("inf") else xp.minimum(h, hmax)

    def time(k):
        return xp.reshape(xp.row(t, k), lanes)

    def dopri(y, f0, s, h):
        ks = [f0]
        for i in range(1, 7):
            ks.append(fun(y + h * _combine(_A[i], ks), s + _C[i] * h))
        return ks[6], y + h * _combine(_B5, ks[:6]), h * _combine(_E, ks)

    def first_step(y, f, s):  # Hairer, Nørsett & Wanner's starting step, order 4
        scale = atol + xp.abs(y) * rtol
        d0, d1 = rms(y / scale), rms(f / scale)
        tiny = xp.logical_and(d0 >= 1e-5, d1 >= 1e-5)
        h0 = xp.where(tiny, 0.01 * d0 / xp.where(tiny, d1, 1.0), 1e-6)
        d2 = rms((fun(y + h0 * f, s + h0) - f) / scale) / h0
        flat = xp.logical_and(d1 <= 1e-15, d2 <= 1e-15)
        h1 = xp.where(flat, xp.maximum(h0 * 1e-3, 1e-6),
                      (0.01 / xp.where(flat, 1.0, xp.maximum(d1, d2))) ** 0.2)
        return capped(xp.minimum(100.0 * h0, h1))

    def next_step(h, ratio):
        shrink = xp.where(ratio < 1.0, 1.0, 0.2)
        zero = xp.equal(ratio, 0.0)
        safe = xp.where(zero, 1.0, ratio)  # a NaN ratio gives a NaN step: the lane stops
        factor = xp.minimum(10.0, xp.maximum(0.9 * safe ** -0.2, shrink))
        return capped(xp.where(zero, h * 10.0, h * factor))

    def interval(k, state):
        y, f, s, h, ys, total, failed = state
        target = time(k)

        def active(st):
            _, _, s, h, n, _ = st
            going = xp.logical_and(s < target, xp.logical_and(n < mxstep, h > 0))
            return xp.logical_and(going, failed < 0.5)

        def step(st):
            y, f, s, h, n, total = st
            on = active(st)
            last = h >= target - s
            hs = xp.where(last, target - s, h)
            f1, y1, err = dopri(y, f, s, hs)
            ratio = rms(err / (atol + rtol * xp.maximum(xp.abs(y), xp.abs(y1))))
            ok = ratio <= 1.0
            new = (xp.where(ok, y1, y), xp.where(ok, f1, f),
                   xp.where(ok, xp.where(last, target, s + hs), s),
                   next_step(hs, ratio), n + 1.0, total + 1.0)
            return tuple(xp.where(on, a, b) for a, b in zip(new, st))

        y, f, s, h, _, total = xp.while_loop(active, step, (y, f, s, h, 0.0 * total, total))
        # a lane that did not land on the target failed: a step limit or a collapsed step
        # (short of it), or a target behind it or NaN (times not increasing, seen only here
        # when they are traced)
        failed = xp.where(xp.equal(s, target), failed, 1.0)
        return y, f, s, h, xp.set_row(ys, k, y), total, failed

    s0 = time(0)
    f0 = fun(y0, s0)
    zero = xp.const(np.zeros(lanes))
    ys = xp.set_row(xp.zeros((count,) + tuple(y0.shape), y0), 0, y0)
    state = (y0, f0, s0, first_step(y0, f0, s0), ys, zero, zero)
    _, _, s, _, ys, total, failed = xp.fori_loop(1, count, interval, state)
    info = failure_info(xp, failed < 0.5, total)
    return [ys, xp.reshape(info, batch), xp.reshape(s, batch)]


# -- derivatives --------------------------------------------------------------------------------

def _lane_flat(x, nbatch):
    return ops.reshape(x, tuple(x.shape[:nbatch]) + (-1,))


def _pack(parts, nbatch):
    return ops.concat([_lane_flat(p, nbatch) for p in parts], axis=nbatch)


def _unpack(z, shapes, nbatch):
    """Split the lane-flat ``z`` into arrays of the lane ``shapes`` (each after the batch axes)."""
    out, at = [], 0
    batch = tuple(z.shape[:nbatch])
    for shape in shapes:
        n = max(int(np.prod(shape, dtype=np.int64)), 1) if shape else 1
        part = z[(slice(None),) * nbatch + (slice(at, at + n),)]
        out.append(ops.reshape(part, batch + tuple(shape)))
        at += n
    return out


def _all_times(func, ys, t, consts, nbatch):
    """``func(ys[k], t[k])`` for every output time: ``func`` batched over the time axis."""
    flags = [True, True] + [False] * len(consts)
    return TRACED.apply(batch_sub(func, flags, t.shape[0]), ys, t, *consts)[0]


def _jvp(primals, tangents, outs, *, func, nbatch, **params):
    y0, t, *consts = primals
    ys = outs[0]
    zeros = [Zero(o.shape, o.dtype) for o in outs[1:]]
    ty0, tt, tcs = tangents[0], tangents[1], tangents[2:]
    if all(is_zero(v) for v in tangents):
        return [Zero(ys.shape, ys.dtype)] + zeros
    lane = tuple(y0.shape[nbatch:])
    z0 = ops.multiply(y0, 0.0) if is_zero(ty0) else ty0
    if not is_zero(tt):  # a later start: the solution shifts back along the field
        f0 = TRACED.apply(func, y0, t[0], *consts)[0]
        z0 = z0 - f0 * ops.reshape(tt[0], tuple(y0.shape[:nbatch]) + (1,) * len(lane))
    live = [k for k, v in enumerate(tcs) if not is_zero(v)]

    def augmented(w, s, *rest):
        cs, dcs = rest[:len(consts)], rest[len(consts):]
        y, z = _unpack(w, [lane, lane], nbatch)
        tan = [None] * len(consts)
        for k, d in zip(live, dcs):
            tan[k] = d
        f = TRACED.apply(func, y, s, *cs)[0]
        dz = apply_jvp(func, [y, s, *cs], [z, None, *tan])[0]
        return [_pack([f, dz], nbatch)]

    w0 = _pack([y0, z0], nbatch)
    avals = [(tuple(w0.shape), w0.dtype, False), _time_aval(func)] + _avals(consts)
    aug = graph_of(augmented, None, avals + _avals([tcs[k] for k in live]))
    ws = bind("odeint", w0, t, *consts, *[tcs[k] for k in live], func=aug, nbatch=nbatch,
              **params)[0]
    tys = _time_part(ws, lane, nbatch)
    if not is_zero(tt):
        lanes = tuple(tt.shape) + (1,) * len(lane)
        tys = tys + _all_times(func, ys, t, consts, nbatch) * ops.reshape(tt, lanes)
    return [tys] + zeros


def _time_aval(func):
    shape, dtype = func.in_avals[1]
    return (tuple(shape), dtype, False)


def _avals(values):
    return [(tuple(v.shape), v.dtype, v.weak) for v in values]


def _time_part(ws, lane, nbatch):
    """The tangent half of the augmented solution ``ws [T, *batch, 2 n]``."""
    n = max(int(np.prod(lane, dtype=np.int64)), 1) if lane else 1
    part = ws[(slice(None),) * (nbatch + 1) + (slice(n, 2 * n),)]
    return ops.reshape(part, tuple(ws.shape[:nbatch + 1]) + lane)


def _vjp(cts, primals, outs, *, func, nbatch, **params):
    if nbatch:
        raise UnsupportedOperationError(
            "reverse mode through a vmapped odeint is not supported: take the gradient inside "
            "vmap (vmap(grad(f))) instead", op="odeint", device="cpu")
    y0, t, *consts = primals
    ys, ct = outs[0], cts[0]
    if is_zero(ct):
        return [None] * len(primals)
    lane = tuple(y0.shape)
    count = t.shape[0]
    wrt = [k for k, c in enumerate(consts) if c.dtype.is_floating]
    shapes = [lane, lane] + [tuple(consts[k].shape) for k in wrt]

    def backward(w, s, *cs):  # d(y, a, θ̄)/ds in reversed time s = -t
        y, a = _unpack(w, shapes[:2], 0)
        args = [y, ops.negative(s), *cs]
        f = TRACED.apply(func, *args)[0]
        pulled = apply_vjp(func, args, [a], [0] + [2 + k for k in wrt])
        return [_pack([ops.negative(f)] + pulled, 0)]

    w_aval = (sum(max(int(np.prod(s, dtype=np.int64)), 1) for s in shapes),)
    aug = graph_of(backward, None, [(w_aval, y0.dtype, False), _time_aval(func)] + _avals(consts))
    ft = _all_times(func, ys, t, consts, 0)
    t_bar = ops.sum(ct * ft, axis=tuple(range(1, ft.ndim))) if ft.ndim > 1 else ct * ft
    from ..control import fori_loop

    def interval(j, carry):
        a, bars, failed = carry
        k = (count - 1.0) - j
        a = a + ct[k]
        w = _pack([ys[k], a] + list(bars), 0)
        times = ops.negative(ops.stack([t[k], t[k - 1.0]]))
        ws, info, _ = bind("odeint", w, times, *consts, func=aug, nbatch=0, **params)
        _, a, *bars = _unpack(ws[1], shapes, 0)
        return a, tuple(bars), ops.maximum(failed, info)

    bars0 = tuple(ops.multiply(consts[k], 0.0) for k in wrt)
    a, bars, failed = fori_loop(0, count - 1, interval, (ops.multiply(y0, 0.0), bars0, 0.0))
    ok = ops.equal(failed, 0.0)  # a backward pass that failed gives NaN, never silence

    def checked(v):
        return nan_unless(ok, v)

    f0 = TRACED.apply(func, y0, t[0], *consts)[0]
    t0_bar = ops.negative(ops.sum(a * f0))
    t0_bar = ops.reshape(t0_bar, (1,))  # ys[0] is y0 whatever t[0] is
    t_bar = ops.concat([t0_bar, t_bar[1:]]) if count > 1 else t0_bar
    grads = dict(zip(wrt, bars))
    return [checked(a + ct[0]), checked(t_bar)] + [
        checked(grads[k]) if k in grads else None for k in range(len(consts))]


def _batch(args, batched, size, *, func, nbatch, **params):
    y0 = args[0] if batched[0] else lead(args[0], size)
    t = args[1]
    if batched[1]:
        t = ops.transpose(t, (1, 0) + tuple(range(2, t.ndim)))
    else:
        t = ops.broadcast_to(ops.expand_dims(t, 1), (t.shape[0], size) + tuple(t.shape[1:]))
    flags = [True, True] + list(batched[2:])
    ys, info, reached = bind("odeint", y0, t, *args[2:], func=batch_sub(func, flags, size),
                             nbatch=nbatch + 1, **params)
    ys = ops.transpose(ys, (1, 0) + tuple(range(2, ys.ndim)))
    return [ys, info, reached], [True, True, True]


def _shape(y0, t, *consts, nbatch, **params):
    batch = tuple(y0.shape[:nbatch])
    return [((t.shape[0],) + tuple(y0.shape), y0.dtype, False), (batch, float64, False),
            (batch, t.dtype, False)]


register(Primitive(
    "odeint", shape_rule=_shape,
    impl=lambda y0, t, *consts, **params: _integrate(NUMPY, y0, t, consts, **params),
    expand=lambda y0, t, *consts, **params: _integrate(TRACED, y0, t, consts, **params),
    jvp=_jvp, vjp=_vjp, batch=_batch, multiple_results=True, foldable=False))


def odeint(func, y0, t, *args, rtol=1.4e-8, atol=1.4e-8, mxstep=float("inf"),
           hmax=float("inf"), return_info=False):
    """Integrate ``dy/dt = func(y, t, *args)`` from ``y0`` at ``t[0]``; returns ``y`` at each
    time of the increasing 1-d ``t``, as ``jax.experimental.ode.odeint``: ``y0`` is an array or
    a pytree of arrays (``func`` returns one of its structure, shapes and dtypes), and the
    result has ``y0``'s structure with a leading time axis on each leaf (row 0 is ``y0``).
    Adaptive Dormand–Prince 5(4) with tolerances ``rtol`` and ``atol`` (over all leaves), at
    most ``mxstep`` steps per output interval, each step at most ``hmax`` long.

    When a step limit is hit (or the step size collapses to NaN) before the last time, or
    traced times decrease: called eagerly it raises ``ConvergenceError`` naming the time
    reached (``ValueError`` for decreasing times); inside a transform the result is NaN, and
    so are its derivatives; ``return_info=True`` returns ``(ys, info)`` (``info`` 0 when the
    end was reached, else the steps taken, at least 1). Gradients with respect to ``y0``,
    ``t``, ``args`` and what ``func`` closes over come from the adjoint method (one backward
    integration)."""
    start = Flat(y0, "odeint's y0")
    y0 = start.array
    t = ops.astype(as_float_array(t, "odeint's t"), y0.dtype)
    if t.ndim != 1 or t.shape[0] < 1:
        raise ValueError(f"odeint: t must be a non-empty 1-d array, got shape {list(t.shape)}")
    if isinstance(t, Tensor) and np.any(np.diff(np.asarray(t)) < 0):
        raise ValueError("odeint: the times t must be increasing")
    mxstep, hmax = float(mxstep), float(hmax)
    if not mxstep >= 1 or not hmax > 0 or float(rtol) < 0 or float(atol) < 0:
        raise ValueError(f"odeint: mxstep must be >= 1, hmax > 0 and rtol, atol >= 0, got "
                         f"{mxstep}, {hmax}, {rtol}, {atol}")
    s = Tensor.wrap(np.zeros((), y0.dtype.numpy), False)  # stands for the time: input 1
    graph, consts, _ = operator_graph(start.function(func, "odeint's func"), y0,
                                      (s,) + tuple(args), "odeint's func")
    ys, info, reached = bind("odeint", y0, t, *consts[1:], func=graph, rtol=float(rtol),
                             atol=float(atol), mxstep=mxstep, hmax=hmax, nbatch=0)
    if return_info:
        return start.unflat(ys), info
    if isinstance(info, Tensor):
        if float(np.asarray(info)) != 0:
            raise ConvergenceError(
                f"odeint did not reach t={float(np.asarray(t)[-1])}: it stopped at t="
                f"{float(np.asarray(reached))} after {int(np.asarray(info))} steps (mxstep="
                f"{mxstep:g} per output interval, or the step size became NaN)")
        return start.unflat(ys)
    return start.unflat(nan_unless(ops.equal(info, 0.0), ys))
