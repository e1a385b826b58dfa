"""Learning-rate schedules: functions of the update count, as optax defines them.

Each returns ``schedule(count)``, with ``count`` the number of updates made before this one
(0 for the first), a Python number or a float64 scalar array. They are written with ``qb`` ops,
so an optimizer traces them into its compiled update and the rate is computed with it, on the
device that runs it; called with a number, they return a scalar Tensor.
"""

import math
import numbers

from .. import ops

__all__ = ["exponential_decay", "cosine_decay", "warmup_cosine"]


def _number(name, value, positive=False):
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return float(value)


def _steps(name, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def exponential_decay(init_value, transition_steps, decay_rate, transition_begin=0,
                      end_value=None):
    """``init_value * decay_rate ** ((count - transition_begin) / transition_steps)``, held at
    ``init_value`` before ``transition_begin`` and bounded by ``end_value`` when given (a
    floor when decaying, a ceiling when growing)."""
    init_value = _number("init_value", init_value)
    transition_steps = _steps("transition_steps", transition_steps)
    decay_rate = _number("decay_rate", decay_rate, positive=True)
    if not isinstance(transition_begin, numbers.Integral) or transition_begin < 0:
        raise ValueError(f"transition_begin must be a non-negative int, got {transition_begin!r}")
    end = None if end_value is None else _number("end_value", end_value)

    def schedule(count):
        elapsed = ops.maximum(count - transition_begin, 0.0)
        value = init_value * decay_rate ** (elapsed / transition_steps)
        if end is None:
            return value
        return ops.maximum(value, end) if decay_rate < 1.0 else ops.minimum(value, end)

    return schedule


def cosine_decay(init_value, decay_steps, alpha=0.0, exponent=1.0):
    """Half a cosine from ``init_value`` down to ``alpha * init_value`` over ``decay_steps``
    updates, then constant (Loshchilov and Hutter's SGDR without restarts)."""
    init_value = _number("init_value", init_value)
    decay_steps = _steps("decay_steps", decay_steps)
    alpha = _number("alpha", alpha)
    exponent = _number("exponent", exponent, positive=True)

    def schedule(count):
        progress = ops.minimum(count, float(decay_steps)) / decay_steps
        cosine = 0.5 * (1.0 + ops.cos(math.pi * progress))
        return init_value * ((1.0 - alpha) * cosine ** exponent + alpha)

    return schedule


def warmup_cosine(init_value, peak_value, warmup_steps, decay_steps, end_value=0.0):
    """A linear warm-up from ``init_value`` to ``peak_value`` over ``warmup_steps`` updates,
    then a cosine decay to ``end_value``; ``decay_steps`` counts the warm-up too (optax's
    ``warmup_cosine_decay_schedule``)."""
    init_value = _number("init_value", init_value)
    peak_value = _number("peak_value", peak_value, positive=True)
    warmup_steps = _steps("warmup_steps", warmup_steps)
    decay_steps = _steps("decay_steps", decay_steps)
    if decay_steps <= warmup_steps:
        raise ValueError(f"decay_steps ({decay_steps}) must exceed warmup_steps ({warmup_steps})")
    decay = cosine_decay(peak_value, decay_steps - warmup_steps,
                         alpha=_number("end_value", end_value) / peak_value)

    def schedule(count):
        ramp = ops.minimum(count, float(warmup_steps)) / warmup_steps
        warm = init_value + (peak_value - init_value) * ramp
        return ops.where(count < warmup_steps, warm,
                         decay(ops.maximum(count - warmup_steps, 0.0)))

    return schedule
