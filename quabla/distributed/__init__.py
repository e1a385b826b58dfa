"""Data-parallel training on MPI ranks (``mpi4py``), the same script on a laptop and on a
cluster (spec 000 §3.10, D12; docs/distributed.md).

Every rank holds its own rows of the data; ``value_and_grad`` gives every rank the value and
gradient over all of them, ``Trainer`` trains identical parameters on every rank, and the
helpers are those users of Horovod and mpi4py expect. Without MPI (``mpi4py`` missing, or a
process not started by ``mpiexec``) the job is this process alone, with the same results.
``mpi4py`` is imported only when MPI is used.
"""

from .collectives import (
    allreduce, barrier, broadcast, is_root, local_rank, local_size, rank, row_range, shard, size,
)
from .communicator import world
from .trainer import Trainer
from .value_and_grad import value_and_grad

__all__ = ["value_and_grad", "Trainer", "rank", "size", "local_rank", "local_size", "is_root",
           "barrier", "broadcast", "allreduce", "shard", "row_range", "world"]
