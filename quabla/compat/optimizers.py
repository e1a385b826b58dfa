"""The v0.1 optimizers: the stateful ``Adam`` and the device Adam factories, over
``qb.optim`` (spec 000 §3.7-3.8, §5.2).

``mlx_adam_loss_optimizer(loss, names, inputs, learning_rate, retained)`` took a traced loss
(``trace_tensor``), the names of its parameter inputs, every input by name, and the names of
the inputs to keep on the device; ``step(inputs=None)`` replaces only the other inputs. Here it
is ``qb.optim.Trainer(loss, params, qb.optim.Adam(lr), retained, batch, device=...)`` with the
parameters, retained inputs and replaceable inputs as dicts by name.
"""

from .. import optim

__all__ = [
    "Adam",
    "TensorCudaAdamOptimizer",
    "TensorMlxAdamOptimizer",
    "cuda_adam_loss_optimizer",
    "cuda_adam_optimizer",
    "cuda_adam_step",
    "cuda_adam_vjp_optimizer",
    "mlx_adam_loss_optimizer",
]


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


class _DeviceAdam(optim.Trainer):
    """A device-resident Adam over a traced loss, its inputs by name (a ``Trainer``)."""

    device = None

    def __init__(self, loss, names, inputs, learning_rate=1e-3, retained=None):
        fun, order = getattr(loss, "fun", None), getattr(loss, "inputs", None)
        if fun is None:
            raise TypeError("the loss must be traced: quabla.trace_tensor(loss, specs) (or use "
                            "qb.optim.Trainer with a Python function)")
        names = [names] if isinstance(names, str) else list(names)
        unknown = sorted(set(names) - set(inputs))
        if unknown or set(inputs) != set(order):
            raise ValueError(f"inputs must be {order} and names among them, got inputs "
                             f"{sorted(inputs)} and names {names}")
        others = [n for n in order if n not in names]
        retained = others if retained is None else list(retained)
        self.replaceable = [n for n in others if n not in retained]
        self._batch = {n: inputs[n] for n in self.replaceable}

        def named_loss(params, kept, *batch):
            values = {**params, **kept, **(batch[0] if batch else {})}
            return fun(*(values[n] for n in order))

        data = [{n: inputs[n] for n in others if n in retained}]
        if self.replaceable:
            data.append(self._batch)
        super().__init__(named_loss, {n: inputs[n] for n in names},
                         optim.Adam(learning_rate), *data, device=self.device,
                         batch_argnums=(1,) if self.replaceable else ())

    def step(self, inputs=None):
        """One Adam step on the device; ``inputs`` replaces some of the non-retained inputs."""
        if inputs:
            unknown = sorted(set(inputs) - set(self.replaceable))
            if unknown:
                raise ValueError(f"step can replace only the non-retained inputs "
                                 f"{self.replaceable}, got {unknown}")
            self._batch = {**self._batch, **inputs}
        if self.replaceable:
            super().step(self._batch)
        else:
            super().step()


class TensorMlxAdamOptimizer(_DeviceAdam):
    """v0.1 ``mlx_adam_loss_optimizer``'s result: ``qb.optim.Trainer(..., device="mlx")``."""

    device = "mlx"


class TensorCudaAdamOptimizer(_DeviceAdam):
    """v0.1 ``cuda_adam_*_optimizer``'s result: ``qb.optim.Trainer(..., device="cuda")``."""

    device = "cuda"


for _cls in (Adam, TensorMlxAdamOptimizer, TensorCudaAdamOptimizer):
    _cls.__module__ = "quabla"
del _cls


def mlx_adam_loss_optimizer(loss, names, inputs, learning_rate=1e-3, retained=None):
    """``qb.optim.Trainer(loss, params, qb.optim.Adam(lr), *data, device="mlx")``."""
    return TensorMlxAdamOptimizer(loss, names, inputs, learning_rate, retained)


def cuda_adam_loss_optimizer(loss, names, inputs, learning_rate=1e-3, retained=None):
    """``qb.optim.Trainer(loss, params, qb.optim.Adam(lr), *data, device="cuda")``."""
    return TensorCudaAdamOptimizer(loss, names, inputs, learning_rate, retained)


# v0.1's other CUDA factories took the same traced loss: one Trainer serves them all
cuda_adam_optimizer = cuda_adam_vjp_optimizer = cuda_adam_loss_optimizer


def cuda_adam_step(optimizer, inputs=None):
    """One step of a CUDA Adam optimizer; returns its loss (read back)."""
    optimizer.step(inputs)
    return optimizer.loss()
