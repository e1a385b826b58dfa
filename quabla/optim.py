"""Optimizers as hyperparameter objects with pure, pytree-aware host updates (spec 000 §3.8).

``state = opt.init(params)`` and ``params, state = opt.update(params, grads, state)``. The
state is a plain dict of pytrees (``{"step", "m", "v"}`` for Adam), so ``qb.save`` stores it and
a loaded state resumes unchanged. Moments are kept in float64 on the host; parameters keep
their dtypes. A ``None`` gradient (a bool leaf) leaves its parameter unchanged.
"""

import numpy as np

from . import tree
from .array import Tensor

__all__ = ["Adam", "SGD"]


def _host(x):
    return np.asarray(x, dtype=np.float64)


def _new_param(p, value):
    dtype = np.asarray(p).dtype
    return Tensor._wrap(np.asarray(value, dtype=dtype))


def _check_rate(learning_rate):
    if not np.isfinite(learning_rate) or learning_rate <= 0:
        raise ValueError(f"learning_rate must be a positive finite number, got {learning_rate!r}")
    return float(learning_rate)


class SGD:
    """Plain gradient descent: ``p - learning_rate * g``."""

    def __init__(self, learning_rate=1e-2):
        self.learning_rate = _check_rate(learning_rate)

    def init(self, params):
        return {"step": 0}

    def update(self, params, grads, state):
        lr = self.learning_rate
        p_leaves, treedef = tree.flatten(params)
        new = [
            p if g is None else _new_param(p, _host(p) - lr * _host(g))
            for p, g in zip(p_leaves, _grad_leaves(params, grads))
        ]
        return treedef.unflatten(new), {"step": state["step"] + 1}


class Adam:
    """Adam (Kingma and Ba) with bias correction."""

    def __init__(self, learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        self.learning_rate = _check_rate(learning_rate)
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError("b1 and b2 must lie in [0, 1)")
        if not eps > 0:
            raise ValueError("eps must be positive")
        self.b1, self.b2, self.eps = float(b1), float(b2), float(eps)

    def init(self, params):
        zeros = tree.map(lambda p: Tensor._wrap(np.zeros(np.shape(p))), params)
        return {"step": 0, "m": zeros, "v": zeros}

    def update(self, params, grads, state):
        step = state["step"] + 1
        b1, b2 = self.b1, self.b2
        p_leaves, treedef = tree.flatten(params)
        g_leaves = _grad_leaves(params, grads)
        m_leaves, v_leaves = tree.leaves(state["m"]), tree.leaves(state["v"])
        new_p, new_m, new_v = [], [], []
        for p, g, m, v in zip(p_leaves, g_leaves, m_leaves, v_leaves):
            if g is None:
                new_p.append(p)
                new_m.append(m)
                new_v.append(v)
                continue
            g = _host(g)
            m = b1 * _host(m) + (1.0 - b1) * g
            v = b2 * _host(v) + (1.0 - b2) * g * g
            m_hat = m / (1.0 - b1 ** step)
            v_hat = v / (1.0 - b2 ** step)
            new_p.append(_new_param(p, _host(p) - self.learning_rate * m_hat / (np.sqrt(v_hat) + self.eps)))
            new_m.append(Tensor._wrap(np.asarray(m)))
            new_v.append(Tensor._wrap(np.asarray(v)))
        return treedef.unflatten(new_p), {
            "step": step, "m": treedef.unflatten(new_m), "v": treedef.unflatten(new_v),
        }


def _grad_leaves(params, grads):
    """The gradient leaves in parameter order; ``None`` marks a leaf without a gradient."""
    treedef = tree.structure(params)
    leaves, _ = tree.flatten(grads, is_leaf=lambda x: x is None)
    if len(leaves) != treedef.num_leaves:
        raise ValueError(f"gradients {tree.structure(grads)} do not match parameters {treedef}")
    return leaves
