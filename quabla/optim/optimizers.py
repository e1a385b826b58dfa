"""Optimizers as hyperparameter objects with pure, pytree-aware updates (spec 000 §3.8).

``state = opt.init(params)`` and ``params, state = opt.update(params, grads, state)``. The
state is a plain dict: ``"step"`` (the number of updates so far, a ``Count``: an int that a
transform takes as an array) and one pytree per slot shaped like the parameters (``"m"`` and
``"v"`` for Adam, ``"momentum"`` for SGD with momentum), so ``qb.save`` stores it and a loaded
state resumes bit for bit. A ``"step"`` that is a scalar array stays one (the count is then
computed in the program): the state a ``jit`` of a whole train step hands back, which keys the
program its first call compiled, since a ``Count`` was an array argument there too.

``update`` is one compiled program per parameter signature: every leaf's rule, the learning
rate schedule and clipping by global norm are traced once and run as native code, so a
training loop pays microseconds for its update, not a NumPy expression per leaf. The same
rules run inside a caller's trace (``jit`` of a whole train step, ``Trainer``). Arithmetic and
moments are float64 (the spec's host contract); parameters keep their dtypes. A ``None``
gradient (a bool leaf) leaves its parameter and its slots unchanged.
"""

import numbers

import numpy as np

from .. import ops, tree
from ..array import Array, Tensor, adopt
from ..staging.signature import Count
from ..dtypes import float64

__all__ = ["Optimizer", "Adam", "SGD"]


def _positive(name, value):
    if (not isinstance(value, numbers.Real) or isinstance(value, bool)
            or not np.isfinite(value) or value <= 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def _fraction(name, value):
    if not isinstance(value, numbers.Real) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must lie in [0, 1), got {value!r}")
    return float(value)


def _learning_rate(value):
    """A positive number, or a schedule: a function of the update count (a float64 scalar
    array, 0 for the first update) written with ``qb`` ops, as ``qb.optim.schedules`` are."""
    return value if callable(value) else _positive("learning_rate", value)


class Optimizer:
    """What every optimizer shares: the state layout, the compiled update, clipping.

    A subclass names its per-parameter ``slots`` and writes ``rule(p, g, slots, count, lr)``:
    the float64 parameter, its (clipped) gradient, its slot values, the number of earlier
    updates and this update's learning rate in, the new parameter and slot values out.
    """

    slots = ()

    def __init__(self, learning_rate, clip_norm=None):
        object.__setattr__(self, "_programs", {})
        self._last = _LastCount()
        self._fast = None
        self.learning_rate = _learning_rate(learning_rate)
        self.clip_norm = None if clip_norm is None else _positive("clip_norm", clip_norm)

    def __setattr__(self, name, value):
        """Compiled updates bake the hyperparameters in: setting one drops them."""
        object.__setattr__(self, name, value)
        if not name.startswith("_"):
            self._programs.clear()
            self._fast = None

    def init(self, params):
        state = {"step": Count(0)}
        for name in self.slots:
            state[name] = tree.map(lambda p: Tensor.wrap(np.zeros(np.shape(p))), params)
        return state

    def update(self, params, grads, state):
        fast = self._fast
        if fast is not None:
            out = fast.update(params, grads, state)
            if out is not None:
                return out
        return self._update(params, grads, state)

    def _update(self, params, grads, state):
        p_leaves, treedef = tree.flatten(params)
        g_leaves = grad_leaves(treedef, grads)
        slot_leaves = [_slot_leaves(state, name, treedef) for name in self.slots]
        step = state["step"]
        host = not isinstance(step, Array)
        count = self._count(step) if host else step
        n = len(p_leaves)
        if _has_none(g_leaves):  # leaves without a gradient stay out of the program
            live = [i for i, g in enumerate(g_leaves) if g is not None]
            outs = self.program(len(live))(
                *[p_leaves[i] for i in live], *[g_leaves[i] for i in live],
                *[s[i] for s in slot_leaves for i in live], count)
            outs = _scatter(outs, live, p_leaves, slot_leaves)
        else:
            outs = self.program(n)(*p_leaves, *g_leaves, *[x for s in slot_leaves for x in s],
                                    count)
        if host:
            new_state = {"step": Count(step + 1)}
            self._last.step, self._last.count = new_state["step"], outs[-1].value
            if len(outs) == (len(self.slots) + 1) * n + 1:  # every leaf had a gradient
                leaves = p_leaves + g_leaves + [x for s in slot_leaves for x in s] + [count]
                if self._fast is None or not self._fast.serves(treedef, leaves):
                    self._fast = _FastUpdate.of(self, treedef, leaves)
        else:
            new_state = {"step": outs[-1]}
        for j, name in enumerate(self.slots):
            new_state[name] = treedef.unflatten(outs[(j + 1) * n:(j + 2) * n])
        return treedef.unflatten(outs[:n]), new_state

    def _count(self, step):
        """``step`` as a float64 scalar Tensor: the one the previous update computed when the
        loop hands its state back, which is what a training loop does."""
        last = self._last
        return adopt(last.count if last.step == step else np.array(float(step)))

    def apply(self, p_leaves, g_leaves, slot_leaves, count):
        """The update of flat leaves, traced: what ``update`` compiles and ``Trainer`` fuses
        with the gradient. ``slot_leaves`` holds one list per slot; returns the same layout
        and the new count."""
        grads = self._clipped([ops.astype(g, float64) for g in g_leaves])
        lr = self.learning_rate(count) if callable(self.learning_rate) else self.learning_rate
        new_p, new_slots = [], [[] for _ in self.slots]
        for i, (p, g) in enumerate(zip(p_leaves, grads)):
            value, slots = self.rule(ops.astype(p, float64), g,
                                     tuple(ops.astype(s[i], float64) for s in slot_leaves),
                                     count, lr)
            new_p.append(ops.astype(value, p.dtype))
            for out, s in zip(new_slots, slots):
                out.append(s)
        return new_p, new_slots, count + 1.0

    def _clipped(self, grads):
        """Clipping by global norm: every gradient scaled by ``clip_norm / norm`` when the norm
        of all of them together exceeds ``clip_norm`` (optax's ``clip_by_global_norm``)."""
        if self.clip_norm is None or not grads:
            return grads
        norm = ops.sqrt(sum(ops.sum(g * g) for g in grads))
        keep = norm < self.clip_norm
        return [ops.where(keep, g, g / norm * self.clip_norm) for g in grads]

    def program(self, n):
        """The compiled update of ``n`` leaves with gradients."""
        program = self._programs.get(n)
        if program is None:
            from ..api import jit

            k = len(self.slots)

            def update(*leaves):
                slots = [leaves[(2 + j) * n:(3 + j) * n] for j in range(k)]
                new_p, new_slots, count = self.apply(leaves[:n], leaves[n:2 * n], slots,
                                                     leaves[-1])
                return (*new_p, *[x for s in new_slots for x in s], count)

            update.__name__ = f"{type(self).__name__.lower()}_update"
            program = self._programs[n] = jit(update, max_traces=64)
        return program


class SGD(Optimizer):
    """Gradient descent, optionally with (Nesterov) momentum: ``b = g + momentum * b`` and
    ``p - learning_rate * b`` (or ``* (g + momentum * b)`` with ``nesterov``), as optax and
    PyTorch define it."""

    def __init__(self, learning_rate=1e-2, momentum=0.0, nesterov=False, clip_norm=None):
        super().__init__(learning_rate, clip_norm)
        self.momentum = _fraction("momentum", momentum)
        if nesterov and not self.momentum:
            raise ValueError("nesterov=True needs a positive momentum")
        self.nesterov = bool(nesterov)
        self.slots = ("momentum",) if self.momentum else ()

    def rule(self, p, g, slots, count, lr):
        if not self.momentum:
            return p - lr * g, ()
        (buf,) = slots
        buf = g + self.momentum * buf
        direction = g + self.momentum * buf if self.nesterov else buf
        return p - lr * direction, (buf,)


class Adam(Optimizer):
    """Adam (Kingma and Ba) with bias correction; ``weight_decay`` adds the decoupled decay of
    AdamW (Loshchilov and Hutter): ``p - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p)``."""

    slots = ("m", "v")

    def __init__(self, learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0,
                 clip_norm=None):
        super().__init__(learning_rate, clip_norm)
        self.b1, self.b2 = _fraction("b1", b1), _fraction("b2", b2)
        self.eps = _positive("eps", eps)
        if not isinstance(weight_decay, numbers.Real) or not weight_decay >= 0:
            raise ValueError(f"weight_decay must be a non-negative number, got {weight_decay!r}")
        self.weight_decay = float(weight_decay)

    def rule(self, p, g, slots, count, lr):
        m, v = slots
        t = count + 1.0
        m = self.b1 * m + (1.0 - self.b1) * g
        v = self.b2 * v + (1.0 - self.b2) * g * g
        m_hat = m / (1.0 - self.b1 ** t)
        v_hat = v / (1.0 - self.b2 ** t)
        step = lr * m_hat / (ops.sqrt(v_hat) + self.eps)
        if self.weight_decay:
            step = step + lr * self.weight_decay * p
        return p - step, (m, v)


class _LastCount:
    """The count (a float64 0-d array) that the latest host update computed, and the step it
    is the count of: the next update's, when the loop hands its state back as training loops
    do. The general path and the generated fast path both keep it."""

    __slots__ = ("step", "count")

    def __init__(self):
        self.step = self.count = None


class _FastUpdate:
    """The update of one parameter signature for a host training loop, without the general
    path's flattening, TreeDef comparisons and staged dispatch: straight-line code generated
    for the signature matches the trees (``TreeDef.matcher``), checks each leaf's type, shape
    and dtype, calls the compiled program's ``run`` on their arrays and builds ``(params,
    state)`` in one expression. Anything else (a new structure or signature, a traced step,
    weak or non-Tensor leaves) makes ``update`` return None: the general path, which makes a
    new one."""

    __slots__ = ("treedef", "signature", "update")

    @classmethod
    def of(cls, optimizer, treedef, leaves):
        """The fast path of the call just made with ``leaves`` (parameters, gradients, slots,
        count), or None when the program did not compile to native code."""
        signature = _signature(leaves)
        if signature is None:
            return None
        run = optimizer.program(treedef.num_leaves).native_run(leaves)
        if run is None:
            return None
        self = cls()
        self.treedef, self.signature = treedef, signature
        self.update = _generated_update(optimizer, treedef, signature, run)
        return self

    def serves(self, treedef, leaves):
        return treedef == self.treedef and _signature(leaves) == self.signature


def _generated_update(optimizer, treedef, signature, run):
    """``update(params, grads, state)`` for ``_FastUpdate``: ``signature`` holds the shape and
    dtype of each leaf (parameters, gradients, each slot) and of the count."""
    n, slots = treedef.num_leaves, optimizer.slots
    params = treedef.unflatten([None] * n)
    result = tree.structure((params, {"step": 0, **{name: params for name in slots}}),
                            is_leaf=_is_none)  # the new step sits among the slots' leaves
    namespace = {"Tensor": Tensor, "adopt": adopt, "match": treedef.matcher(), "run": run,
                 "build": result.builder(), "last": optimizer._last, "Count": Count}
    lines = ["def update(params, grads, state):",
             "    if type(state) is not dict: return None",
             "    step = state.get('step')",
             "    if type(step) is not Count and type(step) is not int or step != last.step:",
             "        return None"]
    trees = ["params", "grads"] + [f"state.get({name!r})" for name in slots]
    for t, source in enumerate(trees):
        lines += [f"    leaves = match({source})", "    if leaves is None: return None",
                  f"    {''.join(f'x{t * n + i}, ' for i in range(n))}= leaves"]
    for k, (shape, dtype) in enumerate(signature[:-1]):
        namespace[f"s{k}"], namespace[f"d{k}"] = shape, dtype
        lines += [f"    if type(x{k}) is not Tensor or x{k}.weak: return None",
                  f"    a{k} = x{k}.value",
                  f"    if a{k}.shape != s{k} or a{k}.dtype != d{k}: return None"]
    outs = [f"o{k}" for k in range(len(signature) - 1 - n)]  # parameters and slots
    arrays = "".join(f"a{k}, " for k in range(len(signature) - 1))
    results = [f"adopt({o})" for o in outs]
    results.insert(n * (1 + sum(name < "step" for name in slots)), "Count(step + 1)")
    lines += [f"    {''.join(o + ', ' for o in outs)}count = run({arrays}last.count)",
              "    last.step, last.count = step + 1, count",
              f"    return build([{', '.join(results)}])"]
    exec("\n".join(lines) + "\n", namespace)
    return namespace["update"]


def _signature(leaves):
    """Shapes and dtypes of Tensor leaves (None when one is not a strong Tensor)."""
    if not all(type(x) is Tensor and not x.weak for x in leaves):
        return None
    return tuple([(x.value.shape, x.value.dtype) for x in leaves])


def _is_none(x):
    return x is None


def _has_none(leaves):
    for leaf in leaves:
        if leaf is None:
            return True
    return False


def _scatter(outs, live, p_leaves, slot_leaves):
    """The program's outputs for the ``live`` leaves, laid out as for every leaf: the others
    keep their parameter and slot values."""
    n, k = len(p_leaves), len(live)
    full = list(p_leaves) + [x for s in slot_leaves for x in s]
    for j in range(len(slot_leaves) + 1):
        for pos, i in enumerate(live):
            full[j * n + i] = outs[j * k + pos]
    return full + [outs[-1]]


def grad_leaves(treedef, grads):
    """The gradient leaves in parameter order; ``None`` marks a leaf without a gradient (the
    Trainer reads its gradients so too). Gradients are matched to parameters by structure
    (dict keys, container types), never by leaf count alone."""
    try:
        leaves = treedef.flatten_up_to(grads)
    except ValueError:
        raise ValueError(f"gradients {tree.structure(grads, is_leaf=_is_none)} do not match "
                         f"parameters {treedef}") from None
    for leaf in leaves:
        if leaf is not None and tree.structure(leaf).node_type is not None:  # a container
            raise ValueError(f"gradients {tree.structure(grads, is_leaf=_is_none)} do not "
                             f"match parameters {treedef}")
    return leaves


def _slot_leaves(state, name, treedef):
    try:
        leaves, slot_tree = tree.flatten(state[name])
    except (KeyError, TypeError):
        raise ValueError(f"optimizer state has no {name!r} slot; make it with init()") from None
    if slot_tree != treedef:
        raise ValueError(f"optimizer state {name!r} is {slot_tree}, parameters are {treedef}")
    return leaves
