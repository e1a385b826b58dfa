"""The v0.1 names kept as deprecated aliases (spec 000 Appendix A, D14).

``quabla.<name>`` reaches them through the package's module ``__getattr__`` (PEP 562): the first
access warns with a ``DeprecationWarning`` naming the replacement, later ones cost nothing.
"""

import warnings

from . import optim

__all__ = ["deprecated"]


class Adam(optim.Adam):
    """The v0.1 stateful Adam: ``params = adam.step(params, grads)`` on dicts. ``grads`` may
    leave out parameters; those are not updated. Use ``qb.optim.Adam`` with ``init`` and
    ``update`` (pure) or ``qb.optim.Trainer`` instead."""

    def __init__(self, learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        super().__init__(learning_rate, b1, b2, eps)
        self.state = None

    def step(self, params, grads):
        if not isinstance(params, dict) or not isinstance(grads, dict):
            raise TypeError("Adam.step takes a dict of parameters and a dict of gradients")
        unknown = sorted(set(grads) - set(params), key=str)
        if unknown:
            raise ValueError(f"gradients for unknown parameters {unknown}")
        if self.state is None:
            self.state = self.init(params)
        new, self.state = self.update(params, {k: grads.get(k) for k in params}, self.state)
        return new


_ALIASES = {"Adam": (Adam, "qb.optim.Adam (init/update) or qb.optim.Trainer")}


def deprecated(module, name):
    """The deprecated alias ``name``, warning once: it is then bound in ``module``."""
    try:
        value, replacement = _ALIASES[name]
    except KeyError:
        raise AttributeError(f"module 'quabla' has no attribute {name!r}") from None
    warnings.warn(f"quabla.{name} is deprecated; use {replacement}", DeprecationWarning,
                  stacklevel=3)
    setattr(module, name, value)
    return value
