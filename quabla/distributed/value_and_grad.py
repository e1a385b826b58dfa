"""``qb.distributed.value_and_grad``: every rank passes its own rows, every rank gets the value
and gradient of the whole problem (spec 000 §3.10, D12; here on MPI ranks with uneven shards).

Per call: this rank's rows go through the compiled ``value_and_grad`` of ``fun`` (split across
the listed devices when one process has several), then ``combine`` sums the results over the
ranks in one ``Allreduce`` (weighted by rows for ``reduction="mean"``). This is the whole
problem's value and gradient when ``fun`` is a mean (or for ``"sum"``, a sum) of per-row terms,
as a data-parallel loss is. A new signature (structure, dtypes, shapes but the row counts) is
compared across ranks once, before its first ``Allreduce``.
"""

import numpy as np

from .. import api, tree
from ..array import Tensor
from .combine import REDUCTIONS, check_signatures, combine
from .communicator import world
from .signatures import leaf_signature, positions, row_count, sharded_flags, signature_text

__all__ = ["value_and_grad", "ShardedValueAndGrad"]


def value_and_grad(fun=None, *, devices=None, shard_argnums, argnums=0, reduction="mean",
                   has_aux=False):
    """``(value, gradient)`` of ``fun`` over the rows of every rank (``((value, aux), gradient)``
    with ``has_aux``). Each rank calls it with its own rows of the arguments ``shard_argnums``
    (axis 0; ranks may hold different row counts) and the same other arguments; ``argnums``
    (the parameters) must not be sharded. ``reduction="mean"`` weights each rank by its rows,
    ``"sum"`` adds. ``devices`` lists a node's devices (``["cpu"]``, ``["cuda:0", "cuda:1"]``):
    rank r computes on ``devices[local_rank % len(devices)]``; a single process splits its
    rows across all of them. Without MPI the job is this process alone: same results."""
    if fun is None:
        return lambda f: value_and_grad(f, devices=devices, shard_argnums=shard_argnums,
                                        argnums=argnums, reduction=reduction, has_aux=has_aux)
    return ShardedValueAndGrad(fun, devices, shard_argnums, argnums, reduction, has_aux)


class ShardedValueAndGrad:
    """The function ``value_and_grad`` returns."""

    def __init__(self, fun, devices, shard_argnums, argnums, reduction, has_aux):
        if not callable(fun):
            raise TypeError(f"fun must be a function, got {type(fun).__name__}")
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        self.shard_argnums = positions("shard_argnums", shard_argnums)
        self.argnums = positions("argnums", argnums)
        if not self.shard_argnums:
            raise ValueError("shard_argnums names no argument: which arguments hold the rows?")
        both = sorted(set(self.shard_argnums) & set(self.argnums))
        if both:
            raise ValueError(f"argument(s) {both} are both differentiated (argnums) and sharded "
                             "(shard_argnums): gradients are taken with respect to replicated "
                             "parameters only")
        self.devices = _devices(devices)
        self.reduction, self.has_aux = reduction, bool(has_aux)
        self.__name__ = getattr(fun, "__name__", "fun")
        self._grad = api.value_and_grad(fun, argnums=argnums, has_aux=has_aux)
        self._jitted = {}    # device -> jit of the value_and_grad
        self._checked = {}   # local signature -> its text, compared across ranks

    def __call__(self, *args):
        if max(self.shard_argnums + self.argnums) >= len(args):
            raise TypeError(f"{self.__name__} got {len(args)} argument(s); shard_argnums "
                            f"{list(self.shard_argnums)} and argnums {list(self.argnums)} "
                            "name positions beyond them")
        comm = world()
        leaves, treedef = tree.flatten(args)
        sharded = sharded_flags(treedef, self.shard_argnums)
        rows = row_count(leaves, sharded)
        signature = (treedef, tuple(leaf_signature(x, s) for x, s in zip(leaves, sharded)))
        text = self._checked.get(signature)
        if text is None:
            text = signature_text(treedef, signature[1])
            check_signatures(comm, text)
            self._checked[signature] = text
        arrays, layout = self._local(comm, treedef, leaves, sharded, rows)
        return _assemble(combine(comm, rows, arrays, self.reduction, text), layout,
                         self.has_aux)

    def _local(self, comm, treedef, leaves, sharded, rows):
        """This rank's results over its rows, as flat arrays, and how to rebuild them."""
        if rows == 0:  # no rows here: one row of zeros gives the shapes (combine sends zeros)
            leaves = [np.zeros((1, *np.shape(x)[1:]), np.asarray(x).dtype) if s else x
                      for x, s in zip(leaves, sharded)]
        if comm.size > 1 or len(self.devices) == 1:
            device = self.devices[comm.local_rank % len(self.devices)]
            return _results(self._compiled(device)(*treedef.unflatten(leaves)), self.has_aux)
        # one process, several devices: its rows split across them, combined as ranks are
        total, layout = None, None
        for device, (n, piece) in zip(self.devices, _split(leaves, sharded, max(rows, 1),
                                                           len(self.devices))):
            if n == 0:
                continue
            arrays, layout = _results(self._compiled(device)(*treedef.unflatten(piece)),
                                      self.has_aux)
            weight = n if self.reduction == "mean" else 1
            weighted = [np.asarray(a, np.float64) * weight for a in arrays]
            total = weighted if total is None else [a + b for a, b in zip(total, weighted)]
        if self.reduction == "mean":
            total = [a / max(rows, 1) for a in total]
        return [a.astype(d) for a, d in zip(total, layout[0])], layout

    def _compiled(self, device):
        jitted = self._jitted.get(device)
        if jitted is None:
            jitted = self._jitted[device] = api.jit(self._grad, device=device)
        return jitted


def _devices(devices):
    if devices is None:
        return [None]
    if isinstance(devices, str):
        devices = [devices]
    devices = list(devices)
    if not devices or not all(isinstance(d, str) for d in devices):
        raise ValueError(f"devices must be a non-empty list of device names (qb.devices()), "
                         f"got {devices!r}")
    return devices


def _split(leaves, sharded, rows, n):
    """``[(rows, leaves)]`` of ``n`` row blocks (as ``np.array_split``) of the sharded leaves."""
    out, start = [], 0
    for k in range(n):
        count = rows // n + (k < rows % n)
        out.append((count, [x[start:start + count] if s else x for x, s in zip(leaves, sharded)]))
        start += count
    return out


def _results(out, has_aux):
    """The flat arrays of ``(value[, aux]), grads`` and how to rebuild them."""
    value, grads = out
    aux = None
    if has_aux:
        value, aux = value
    aux_leaves, aux_tree = tree.flatten(aux)
    grad_leaves, grad_tree = tree.flatten(grads)
    present = [g is not None for g in grad_leaves]
    arrays = [value, *aux_leaves, *[g for g in grad_leaves if g is not None]]
    for i, a in enumerate(aux_leaves):
        if not np.issubdtype(np.asarray(a).dtype, np.floating):
            raise TypeError(f"auxiliary value leaf {i} is {np.asarray(a).dtype}: the auxiliary "
                            "values are reduced like the value, so they must be floating")
    dtypes = [np.asarray(a).dtype for a in arrays]
    return arrays, (dtypes, len(aux_leaves), aux_tree, grad_tree, present)


def _assemble(arrays, layout, has_aux):
    _, n_aux, aux_tree, grad_tree, present = layout
    arrays = [Tensor.wrap(a) for a in arrays]  # fresh C-contiguous copies from combine
    value, aux, rest = arrays[0], arrays[1:1 + n_aux], iter(arrays[1 + n_aux:])
    grads = grad_tree.unflatten([next(rest) if p else None for p in present])
    if has_aux:
        return (value, aux_tree.unflatten(aux)), grads
    return value, grads
