"""The helpers users of Horovod and mpi4py reach for: who am I, wait for everyone, start
from the same parameters, combine metrics, take my rows, save on one rank.

Each works on the job of ``communicator.world()``: MPI ranks, or this process alone (where
every one is the identity and ``rank() == 0``).
"""

import numbers

import numpy as np

from .. import tree
from ..array import Array, Tensor
from .communicator import as_buffer, world

__all__ = ["rank", "size", "local_rank", "local_size", "is_root", "barrier", "broadcast",
           "allreduce", "shard", "row_range"]


def rank():
    """This process's rank in the job (0 without MPI)."""
    return world().rank


def size():
    """How many ranks the job has (1 without MPI)."""
    return world().size


def local_rank():
    """This process's rank among the ranks on its node (MPI's shared-memory split)."""
    return world().local_rank


def local_size():
    """How many ranks run on this node."""
    return world().local_size


def is_root():
    """Whether this is rank 0: the one that prints, saves checkpoints and writes results."""
    return world().rank == 0


def barrier():
    """Return once every rank has called ``barrier()``."""
    world().barrier()


def broadcast(tree_, root=0):
    """``root``'s ``tree_`` on every rank, bit for bit (parameters drawn on rank 0 start
    identical everywhere). Other ranks' arguments are ignored: they may pass ``None``."""
    comm = world()
    _check_root(root, comm.size)
    return comm.bcast(tree_ if comm.rank == root else None, root=root)


def allreduce(tree_, op="mean"):
    """The sum (``op="sum"``) or mean (``"mean"``) over the ranks of every leaf of
    ``tree_``, in one collective: every rank passes a tree of the same structure, shapes and
    dtypes (floating arrays or numbers). Tensors come back as Tensors, others as ndarrays."""
    if op not in ("mean", "sum"):
        raise ValueError(f"op must be 'mean' or 'sum', got {op!r}")
    comm = world()
    leaves, treedef = tree.flatten(tree_)
    arrays = []
    for i, leaf in enumerate(leaves):
        value = np.asarray(leaf)
        if not (np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.integer)):
            raise TypeError(f"allreduce: leaf {i} is {value.dtype}; only numbers and floating "
                            "arrays are combined")
        arrays.append(value)
    buffer, split = as_buffer(arrays)
    comm.allreduce_sum(buffer)
    if op == "mean":
        buffer /= comm.size
    out = [Tensor.wrap(r) if isinstance(leaf, Array)
           else (r.item() if isinstance(leaf, numbers.Number) else r)
           for leaf, r in zip(leaves, split(buffer))]
    return treedef.unflatten(out)


def row_range(n, rank_=None, size_=None):
    """``(start, stop)`` of the rows of ``rank_`` (default: this rank) when ``n`` rows are
    split over ``size_`` ranks as ``np.array_split`` splits them: the first ``n % size_``
    ranks get one row more."""
    comm = world()
    rank_ = comm.rank if rank_ is None else rank_
    size_ = comm.size if size_ is None else size_
    base, extra = divmod(n, size_)
    start = rank_ * base + min(rank_, extra)
    return start, start + base + (rank_ < extra)


def shard(array):
    """This rank's rows of ``array`` (which every rank holds): the block ``np.array_split``
    gives it along axis 0."""
    shape = np.shape(array)
    if not shape:
        raise ValueError("shard needs an array with rows (axis 0); got a 0-d value")
    start, stop = row_range(shape[0])
    return array[start:stop]


def _check_root(root, n):
    if not isinstance(root, numbers.Integral) or isinstance(root, bool) or not 0 <= root < n:
        raise ValueError(f"root must be a rank in [0, {n}), got {root!r}")
