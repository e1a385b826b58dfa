"""``ravel_pytree``, as ``jax.flatten_util``: a pytree of arrays as one vector and back.

It sits above ``tree`` and ``ops`` (``tree`` knows no arrays), so pytrees stay import-free.
"""

from . import ops
from .array import Array, asarray
from .dtypes import bool_, float32, float64
from .tree import flatten

__all__ = ["ravel_pytree"]


def ravel_pytree(tree):
    """``(flat, unravel)``, as ``jax.flatten_util.ravel_pytree``: ``flat`` is the leaves of
    ``tree`` (arrays, tracers or numbers) raveled and concatenated into one 1-d array of their
    widest dtype (float64 over float32 over bool), and ``unravel(flat)`` rebuilds a tree of
    this structure, each leaf cast back to its dtype and shape. ``unravel`` also takes leading
    axes (``[..., n]``: each leaf gets them in front), for stacked vectors such as the rows of a
    solution at several times.

    This is how code written for one vector (the solvers) takes pytrees: ravel, work on the
    vector, unravel; it is made of differentiable ops, so derivatives and ``vmap`` go through.
    """
    leaves, treedef = flatten(tree)
    if not leaves:  # Quabla has no zero-size arrays to return
        raise ValueError(f"ravel_pytree: {treedef} has no leaves")
    leaves = [x if isinstance(x, Array) else asarray(x) for x in leaves]
    shapes = [tuple(x.shape) for x in leaves]
    dtypes = [x.dtype for x in leaves]
    dtype = next(d for d in (float64, float32, bool_) if d in dtypes)
    sizes = [x.size for x in leaves]
    total = sum(sizes)
    flat = ops.concat([ops.reshape(ops.astype(x, dtype), (n,)) for x, n in zip(leaves, sizes)])

    def unravel(flat):
        flat = flat if isinstance(flat, Array) else asarray(flat)
        if flat.ndim < 1 or flat.shape[-1] != total:
            raise ValueError(f"unravel of {treedef} needs a last axis of {total}, got shape "
                             f"{list(flat.shape)}")
        lead = tuple(flat.shape[:-1])
        out, at = [], 0
        for shape, leaf_dtype, n in zip(shapes, dtypes, sizes):
            part = flat[(slice(None),) * len(lead) + (slice(at, at + n),)]
            out.append(ops.astype(ops.reshape(part, lead + shape), leaf_dtype))
            at += n
        return treedef.unflatten(out)

    return flat, unravel
