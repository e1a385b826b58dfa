"""``qb.map``: JAX's ``lax.map``, a function applied to the rows of arrays one after another
(a ``scan`` with no carry), or ``batch_size`` rows at a time (``vmap`` inside the scan): less
memory than ``vmap`` over every row, more parallel work per step than one row."""

from . import ops, tree
from .api import vmap
from .array import Array, asarray
from .control import scan

__all__ = ["map"]


def map(f, xs, *, batch_size=None):  # noqa: A001 - JAX's name
    """``f`` of each row of ``xs`` (a pytree of arrays sharing their leading extent), the
    results stacked on a new leading axis."""
    leaves, treedef = tree.flatten(xs)
    leaves = [x if isinstance(x, Array) else asarray(x) for x in leaves]
    if not leaves:
        raise ValueError("map needs at least one array to map over")
    extents = {x.shape[0] if x.shape else None for x in leaves}
    if None in extents or len(extents) != 1:
        raise ValueError(f"map: every array must have the same leading extent, got shapes "
                         f"{[list(x.shape) for x in leaves]}")
    (n,) = extents
    if batch_size is None:
        return _rows(f, leaves, treedef, n)
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"map: batch_size must be a positive integer, got {batch_size!r}")
    batch_size = int(batch_size)
    blocks, rest = divmod(n, batch_size)
    batched = vmap(lambda *rows: f(treedef.unflatten(list(rows))))
    parts = []
    if blocks:
        grouped = [ops.reshape(x[:blocks * batch_size], (blocks, batch_size) + tuple(x.shape[1:]))
                   for x in leaves]
        ys = _rows(lambda group: batched(*tree.leaves(group)), grouped, treedef, blocks)
        parts.append(tree.map(lambda y: ops.reshape(y, (blocks * batch_size,) + tuple(y.shape[2:])),
                              ys))
    if rest:
        parts.append(batched(*[x[blocks * batch_size:] for x in leaves]))
    if len(parts) == 1:
        return parts[0]
    return tree.map(lambda a, b: ops.concat([a, b]), parts[0], parts[1])


def _rows(f, leaves, treedef, n):
    def step(carry, i, *arrays):
        return carry, f(treedef.unflatten([x[i] for x in arrays]))
    return scan(step, (), length=n, operands=leaves)[1]
