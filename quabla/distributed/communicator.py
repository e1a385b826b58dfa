"""The processes of a data-parallel job: MPI ranks through ``mpi4py``, or this one process.

``world()`` picks once per process. MPI is used when ``mpi4py`` imports and the process was
started by an MPI launcher (``mpiexec``, ``srun``: their environment says so) or has already
initialized MPI (``python -m mpi4py script.py`` does); otherwise the job is this process
alone, so a script written for a cluster runs unchanged on a laptop, without paying for
``MPI_Init`` and whether or not ``mpi4py`` is installed. ``QUABLA_DISTRIBUTED=local`` or
``=mpi`` forces the choice.

Both kinds answer the same few calls on NumPy buffers; the collectives the package needs are
a sum of one float64 buffer (``allreduce_sum``), a gather of small Python objects to every
rank (``allgather``: signatures) and a broadcast of one (``bcast``: parameters).
"""

import os
import sys

import numpy as np

__all__ = ["Communicator", "LocalCommunicator", "MPICommunicator", "world", "launched_by_mpi"]

# set by an MPI launcher in every process it starts: MPICH's Hydra, Open MPI, PMIx, Slurm
_LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                       "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS")


class Communicator:
    """What every kind of job answers: ``rank``, ``size``, ``local_rank`` and ``local_size``
    (the ranks on this node), and the collectives below."""

    rank = 0
    size = 1
    local_rank = 0
    local_size = 1
    kind = "local"

    def barrier(self):
        """Return once every rank has called it."""

    def allreduce_sum(self, buffer):
        """Sum ``buffer`` (a C-contiguous float64 ndarray) over the ranks, in place."""
        return buffer

    def allgather(self, value):
        """``[value of rank 0, value of rank 1, ...]`` on every rank (small, picklable)."""
        return [value]

    def bcast(self, value, root=0):
        """``root``'s ``value`` on every rank (picklable)."""
        return value

    def __repr__(self):
        return (f"<{type(self).__name__} rank {self.rank} of {self.size}, local rank "
                f"{self.local_rank} of {self.local_size}>")


class LocalCommunicator(Communicator):
    """This process alone: every collective is the identity."""


class MPICommunicator(Communicator):
    """``COMM_WORLD`` of ``mpi4py``; the node's ranks from its shared-memory split."""

    kind = "mpi"

    def __init__(self, comm=None):
        from mpi4py import MPI

        self._mpi = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        node.Free()

    def barrier(self):
        self.comm.Barrier()

    def allreduce_sum(self, buffer):
        if self.size > 1:
            self.comm.Allreduce(self._mpi.IN_PLACE, [buffer, self._mpi.DOUBLE], op=self._mpi.SUM)
        return buffer

    def allgather(self, value):
        return self.comm.allgather(value)

    def bcast(self, value, root=0):
        return self.comm.bcast(value, root=root)


def launched_by_mpi(environ=None):
    """Whether an MPI launcher started this process (its variables are in the environment) or
    MPI is already initialized here."""
    environ = os.environ if environ is None else environ
    if any(name in environ for name in _LAUNCHER_VARIABLES):
        return True
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and mpi.Is_initialized()


_world = None


def world():
    """This process's communicator (made on first use; the same object afterwards)."""
    global _world
    if _world is None:
        _world = _choose()
    return _world


def _choose():
    forced = os.environ.get("QUABLA_DISTRIBUTED", "").strip().lower()
    if forced not in ("", "local", "mpi"):
        raise ValueError(f"QUABLA_DISTRIBUTED must be 'local' or 'mpi', got {forced!r}")
    if forced == "local" or (forced == "" and not launched_by_mpi()):
        return LocalCommunicator()
    try:
        import mpi4py.MPI  # noqa: F401
    except ImportError as error:
        if forced == "mpi" or _launched_size() > 1:  # each rank alone would train on a part
            raise ImportError("this process is one of several MPI ranks (or "
                              "QUABLA_DISTRIBUTED=mpi), but mpi4py does not import: "
                              "pip install 'quabla[mpi]'") from error
        return LocalCommunicator()
    return MPICommunicator()


def _launched_size():
    """The job's size as the launcher's environment gives it (1 if it says nothing)."""
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS"):
        try:
            return int(os.environ[name])
        except (KeyError, ValueError):
            continue
    return 1


def as_buffer(arrays):
    """One float64 buffer holding ``arrays`` one after the other, and how to cut it back:
    ``split(buffer)`` gives arrays of the original shapes and dtypes."""
    arrays = [np.asarray(a) for a in arrays]
    sizes = [a.size for a in arrays]
    buffer = np.empty(sum(sizes), np.float64)
    start = 0
    for a, n in zip(arrays, sizes):
        buffer[start:start + n] = a.reshape(-1)
        start += n
    layout = [(a.shape, a.dtype) for a in arrays]

    def split(reduced):
        out, start = [], 0
        for (shape, dtype), n in zip(layout, sizes):
            out.append(reduced[start:start + n].reshape(shape).astype(dtype))
            start += n
        return out

    return buffer, split
