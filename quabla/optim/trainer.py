"""Device-resident training (spec 000 §3.7): the gradient and the optimizer update as one
compiled program, with parameters, optimizer slots and retained data held by the trainer.

``Trainer(loss, params, optimizer, *data, batch_argnums=())`` traces
``loss(params, *data)`` once, differentiates it, appends ``optimizer.apply`` and compiles the
whole step. The trainer keeps the program's array operands in one list: ``step()`` hands the
list to the executable and takes back the new parameters, slots and step count, with no
flattening and no readback; ``loss()``, ``params`` and ``state_dict()`` are the explicit
readbacks. On the CPU the operands are the ndarrays the native entry takes; on a device
("mlx", "cuda") they are its arrays (``mx.array``, numba.cuda device arrays), uploaded once
and passed to the executable's resident call, which returns device arrays. Positions in
``batch_argnums`` are replaced by ``step(*batch)``, checked against the structure, shapes and
dtypes declared at construction.

With ``combine`` (``qb.distributed.Trainer`` passes the ranks' mean) a step is two programs,
the gradient and the update, with ``combine`` called on the host between them.
"""

import math

import numpy as np

from .. import tree
from ..array import Array, Tensor, asarray
from .optimizers import Optimizer, grad_leaves

__all__ = ["Trainer"]


def _is_array(leaf):
    return isinstance(leaf, (Array, np.ndarray, np.generic))


class _Slots:
    """Where each kind of operand sits in the program's flat input list.

    Inputs: the parameters with gradients, the optimizer slots (one run of those per slot), the
    step count, the parameters without gradients, then the array leaves of the data. Outputs:
    the first ``carried`` inputs, updated, then the loss.
    """

    def __init__(self, n_live, n_slots, n_dead):
        self.n_live, self.n_slots = n_live, n_slots
        self.carried = n_live * (1 + n_slots) + 1
        self.data = self.carried + n_dead


class Trainer:
    """``trainer.step(*batch)`` runs one compiled gradient-and-update step; ``fit`` runs many."""

    def __init__(self, loss, params, optimizer, *data, device="cpu", batch_argnums=(),
                 combine=None):
        """``combine``: None, or a function of the list ``[loss, *gradients]`` (ndarrays: the
        gradient of each parameter leaf that has one, in leaf order) returning that list
        combined across processes, called between the gradient and the update of every step."""
        if not callable(loss):
            raise TypeError(f"loss must be a function, got {type(loss).__name__}")
        if not isinstance(optimizer, Optimizer):
            raise TypeError("optimizer must be a qb.optim optimizer (Adam, SGD), got "
                            f"{type(optimizer).__name__}")
        if combine is not None and not callable(combine):
            raise TypeError(f"combine must be None or a function, got {type(combine).__name__}")
        self.optimizer = optimizer
        self.device = device
        self._combine = combine
        self.batch_argnums = _argnums(batch_argnums, len(data))
        self.history = []

        p_leaves, self._p_tree = tree.flatten(params)
        p_leaves = [asarray(p) for p in p_leaves]
        self._live = [i for i, p in enumerate(p_leaves) if p.dtype.is_floating]
        dead = [i for i in range(len(p_leaves)) if i not in set(self._live)]
        self._layout = _Slots(len(self._live), len(optimizer.slots), len(dead))
        slot_state = optimizer.init(self._p_tree.unflatten(p_leaves))
        self._data = [_Data(d) for d in data]

        operands = [p_leaves[i] for i in self._live]
        for name in optimizer.slots:
            leaves = tree.leaves(slot_state[name])
            operands += [leaves[i] for i in self._live]
        operands.append(Tensor.wrap(np.zeros(())))
        operands += [p_leaves[i] for i in dead]
        for d in self._data:
            operands += d.arrays
        self._order = self._live + dead  # parameter leaf of each parameter operand
        self._avals = [(tuple(t.shape), t.dtype.numpy) for t in operands]
        self._run = self._compile(loss, operands)
        self._values = [self._put(t.value) for t in operands]
        self._loss = None

    # -- the compiled step -------------------------------------------------------------------
    def _compile(self, loss, operands):
        from ..api import value_and_grad

        layout, optimizer = self._layout, self.optimizer
        n, k = layout.n_live, layout.n_slots

        def gradient(flat):
            params = self._params_tree(flat[:n] + flat[layout.carried:layout.data])
            data, start = [], layout.data
            for d in self._data:
                data.append(d.rebuild(flat[start:start + len(d.arrays)]))
                start += len(d.arrays)
            value, grads = value_and_grad(loss)(params, *data)
            g_leaves = grad_leaves(self._p_tree, grads)
            return value, [g_leaves[i] for i in self._live]

        def update(carried, grads):
            slots = [carried[(1 + j) * n:(2 + j) * n] for j in range(k)]
            new_p, new_slots, count = optimizer.apply(carried[:n], grads, slots, carried[-1])
            return (*new_p, *[x for s in new_slots for x in s], count)

        if self._combine is None:
            def train_step(*flat):
                value, grads = gradient(flat)
                return (*update(flat[:layout.carried], grads), value)

            return self._lowered(train_step, operands, resident=True)
        return self._two_programs(gradient, update, operands)

    def _lowered(self, fn, operands, resident):
        """``fn`` compiled for ``operands``: its run (the device-resident one if ``resident``
        and the back end has one), noting the loss's aval (the last output)."""
        from ..api import jit

        fn.__name__ = "train_step"
        lowered = jit(fn, device=self.device).lower(*operands)
        out = lowered.graph.nodes[lowered.graph.outputs[-1]]
        self._loss_aval = (tuple(out.shape), out.dtype.numpy)
        compiled = lowered.compile()
        executable = compiled.executable
        # a device back end's resident call keeps the operands in device memory
        self._memory = executable if resident and hasattr(executable, "resident") else None
        return compiled.run if self._memory is None else executable.resident

    def _two_programs(self, gradient, update, operands):
        """The step as the gradient program, ``combine`` on the host, then the update
        program (host arrays throughout: ``combine`` reads and writes them)."""
        carried = self._layout.carried

        def gradient_step(*flat):
            value, grads = gradient(flat)
            return (*grads, value)

        def update_step(*flat):
            return update(flat[:carried], list(flat[carried:]))

        grads = [Tensor.wrap(np.zeros(shape, dtype)) for shape, dtype in
                 (self._avals[i] for i in range(self._layout.n_live))]
        run_update = self._lowered(update_step, operands[:carried] + grads, resident=False)
        run_gradient = self._lowered(gradient_step, operands, resident=False)
        combine = self._combine

        def run(*values):
            *grads, value = run_gradient(*values)
            value, *grads = combine([value, *grads])
            return [*run_update(*values[:carried], *grads), value]

        return run

    def _put(self, array):
        """A host ndarray as an operand: uploaded once to the device, as is on the CPU."""
        return array if self._memory is None else self._memory.to_device(array)

    def _get(self, value, aval):
        """An operand or result back on the host (an ndarray of ``aval``'s shape and dtype)."""
        return value if self._memory is None else self._memory.to_host(value, *aval)

    def _params_tree(self, leaves):
        ordered = [None] * len(leaves)
        for i, leaf in zip(self._order, leaves):
            ordered[i] = leaf
        return self._p_tree.unflatten(ordered)

    def step(self, *batch):
        """One gradient-and-update step; ``batch`` replaces the ``batch_argnums`` data."""
        if batch or self.batch_argnums:
            self._replace(batch)
        values = self._values
        outs = self._run(*values)
        carried = self._layout.carried
        values[:carried] = outs[:carried]
        self._loss = outs[carried]

    def _replace(self, batch):
        if len(batch) != len(self.batch_argnums):
            raise TypeError(f"step takes {len(self.batch_argnums)} batch argument(s) (data "
                            f"positions {list(self.batch_argnums)}), got {len(batch)}")
        starts, start = [], self._layout.data
        for d in self._data:
            starts.append(start)
            start += len(d.arrays)
        for position, value in zip(self.batch_argnums, batch):
            arrays = self._data[position].check(value, position)
            self._values[starts[position]:starts[position] + len(arrays)] = [
                self._put(a) for a in arrays]

    # -- readbacks ------------------------------------------------------------------------------
    def loss(self):
        """The loss of the latest step (at the parameters before its update)."""
        if self._loss is None:
            raise RuntimeError("no step has run yet: call step() or fit() first")
        return Tensor.wrap(self._get(self._loss, self._loss_aval))

    @property
    def params(self):
        layout = self._layout
        where = [*range(layout.n_live), *range(layout.carried, layout.data)]
        return self._params_tree([self._operand(k) for k in where])

    def _operand(self, k):
        return Tensor.wrap(self._get(self._values[k], self._avals[k]))

    @property
    def steps(self):
        """How many steps have run (restored by ``load_state_dict``)."""
        k = self._layout.carried - 1
        return int(self._get(self._values[k], self._avals[k]))

    # -- fit ------------------------------------------------------------------------------------
    def fit(self, steps, *, log_every=10, callback=None, progress=True, batches=None,
            stop_on_nonfinite=True):
        """Run ``steps`` steps (fewer if ``batches`` runs out), appending each loss to
        ``history``. Every ``log_every`` steps the progress bar shows the loss and ``callback``
        is called as ``callback(step, loss)``. The bar is tqdm's, on standard error, shown
        only when ``progress`` is true and standard error is a terminal. A loss that is NaN or
        infinite raises ``FloatingPointError`` naming the step, with the parameters of before
        that step restored (unless ``stop_on_nonfinite=False``)."""
        steps = _count("steps", steps)
        log_every = _count("log_every", log_every)
        if batches is None and self.batch_argnums:
            raise TypeError(f"fit needs batches= for the batch data {list(self.batch_argnums)}")
        from tqdm.auto import tqdm

        feed = iter(batches) if batches is not None else None
        carried = self._layout.carried
        history = self.history
        bar = tqdm(total=steps, desc="train", unit="step", disable=None if progress else True,
                   leave=False)
        try:
            for i in range(steps):
                batch = ()
                if feed is not None:
                    try:
                        batch = next(feed)
                    except StopIteration:
                        break
                    if len(self.batch_argnums) == 1 and not isinstance(batch, tuple):
                        batch = (batch,)
                before = self._values[:carried]
                self.step(*batch)
                value = float(self._get(self._loss, self._loss_aval))
                history.append(value)
                if stop_on_nonfinite and not math.isfinite(value):
                    self._values[:carried] = before
                    raise FloatingPointError(
                        f"the loss became {value} at step {self.steps + 1} (fit step {i + 1}); "
                        "the parameters are those before that step. Lower the learning rate, "
                        "clip gradients (clip_norm=), or pass stop_on_nonfinite=False")
                if (i + 1) % log_every == 0 or i + 1 == steps:
                    bar.set_postfix(loss=f"{value:.3e}", refresh=False)
                    bar.update((i + 1) - bar.n)
                    if callback is not None:
                        callback(self.steps, value)
        finally:
            bar.close()
        return history

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self):
        """Parameters, optimizer state (in ``opt.init``'s layout) and the step count, as a
        pytree that ``qb.save`` stores."""
        layout = self._layout
        n = layout.n_live
        state = {"step": self.steps}
        for j, name in enumerate(self.optimizer.slots):
            leaves = [Tensor.wrap(np.zeros(np.shape(p))) for p in tree.leaves(self.params)]
            for k, i in enumerate(self._live):
                leaves[i] = self._operand((1 + j) * n + k)
            state[name] = self._p_tree.unflatten(leaves)
        return {"params": self.params, "opt_state": state}

    def load_state_dict(self, state):
        """Resume from ``state_dict()`` (as saved and loaded): the next step is bit for bit the
        step an uninterrupted run would have taken."""
        try:
            params, opt_state = state["params"], state["opt_state"]
            step = opt_state["step"]
        except (KeyError, TypeError):
            raise ValueError("a trainer state is a dict with 'params' and 'opt_state' (from "
                             "state_dict())") from None
        new = list(self._values)
        layout = self._layout
        n = layout.n_live
        p_leaves = _matching(params, self._p_tree, self._avals, self._param_slots(), "params")
        for operand, leaf in zip(self._param_slots(), p_leaves):
            new[operand] = self._put(leaf)
        for j, name in enumerate(self.optimizer.slots):
            if name not in opt_state:
                raise ValueError(f"opt_state has no {name!r} slot")
            leaves, slot_tree = tree.flatten(opt_state[name])
            if slot_tree != self._p_tree:
                raise ValueError(f"opt_state[{name!r}] is {slot_tree}, parameters are "
                                 f"{self._p_tree}")
            for k, i in enumerate(self._live):
                new[(1 + j) * n + k] = self._put(_array_like(
                    leaves[i], self._avals[(1 + j) * n + k], f"opt_state[{name!r}] leaf {i}"))
        new[layout.carried - 1] = self._put(
            np.array(float(_count("step", step, allow_zero=True))))
        self._values[:] = new
        self._loss = None

    def _param_slots(self):
        """Operand index of each parameter leaf, in leaf order."""
        layout = self._layout
        where = [0] * len(self._order)
        for pos, i in enumerate(self._order):
            where[i] = pos if pos < layout.n_live else layout.carried + pos - layout.n_live
        return where


class _Data:
    """One positional data argument: its tree, its array leaves (operands) and static leaves."""

    def __init__(self, value):
        leaves, self.treedef = tree.flatten(value)
        self.is_array = [_is_array(x) for x in leaves]
        self.static = [None if a else x for a, x in zip(self.is_array, leaves)]
        self.arrays = [asarray(x) for a, x in zip(self.is_array, leaves) if a]
        self.avals = [(tuple(t.shape), t.dtype) for t in self.arrays]

    def rebuild(self, arrays):
        it = iter(arrays)
        return self.treedef.unflatten([next(it) if a else s
                                       for a, s in zip(self.is_array, self.static)])

    def check(self, value, position):
        """The ndarrays of a replacement for this argument, or a ValueError naming the
        mismatch."""
        leaves, treedef = tree.flatten(value)
        if treedef != self.treedef:
            raise ValueError(f"batch for data argument {position} is {treedef}, declared "
                             f"{self.treedef}")
        arrays = []
        it = iter(self.avals)
        for i, (leaf, is_array) in enumerate(zip(leaves, self.is_array)):
            if not is_array:
                continue
            shape, dtype = next(it)
            t = asarray(leaf)
            if tuple(t.shape) != shape or t.dtype is not dtype:
                raise ValueError(
                    f"batch for data argument {position}, leaf {i}: {t.dtype}{list(t.shape)}, "
                    f"declared {dtype}{list(shape)}")
            arrays.append(t.value)
        return arrays


def _matching(value, treedef, avals, operands, what):
    leaves, got = tree.flatten(value)
    if got != treedef:
        raise ValueError(f"{what} is {got}, the trainer's are {treedef}")
    return [_array_like(leaf, avals[op], f"{what} leaf {i}")
            for i, (leaf, op) in enumerate(zip(leaves, operands))]


def _array_like(leaf, aval, what):
    """``leaf`` as a C-contiguous ndarray, or a ValueError unless it has ``aval``'s shape and
    dtype."""
    value = np.asarray(leaf)
    shape, dtype = aval
    if value.shape != shape or value.dtype != dtype:
        raise ValueError(f"{what}: {value.dtype}{list(value.shape)}, expected "
                         f"{dtype}{list(shape)}")
    return np.ascontiguousarray(value)


def _argnums(batch_argnums, n_data):
    argnums = (batch_argnums,) if isinstance(batch_argnums, int) else tuple(batch_argnums)
    normal = []
    for a in argnums:
        if not isinstance(a, int) or isinstance(a, bool) or not -n_data <= a < n_data:
            raise ValueError(f"batch_argnums {a!r} names no data argument (there are {n_data})")
        normal.append(a % n_data)
    if len(set(normal)) != len(normal):
        raise ValueError(f"batch_argnums {batch_argnums!r} repeats a position")
    return tuple(normal)


def _count(name, value, allow_zero=False):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < (
            0 if allow_zero else 1):
        raise ValueError(f"{name} must be a {'non-negative' if allow_zero else 'positive'} "
                         f"int, got {value!r}")
    return int(value)
