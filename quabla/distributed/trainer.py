"""``qb.distributed.Trainer``: ``qb.optim.Trainer`` with its gradients averaged across the
ranks every step (the data-parallel form of ``Trainer(...)``; docs/distributed.md).

Each rank passes its own rows of the data. The parameters are rank 0's (broadcast once at
construction), the signature of parameters and data is compared across ranks once, and every
step is the gradient program, one ``Allreduce`` (the mean weighted by each rank's rows, so
uneven shards train as one process on all the rows would), then the update program. Every
rank applies the same update to the same bits, so parameters and optimizer state stay
identical on every rank; ``fit`` shows its progress bar on rank 0 only.
"""

from .. import tree
from ..optim import Trainer as LocalTrainer
from .collectives import broadcast
from .combine import REDUCTIONS, check_signatures, combine
from .communicator import world
from .signatures import leaf_signature, positions, row_count, sharded_flags, signature_text

__all__ = ["Trainer"]


class Trainer(LocalTrainer):
    """``Trainer(loss, params, optimizer, *data, shard_argnums=None, reduction="mean", ...)``:
    the data positions ``shard_argnums`` (default: every data argument) hold this rank's rows
    along axis 0; other arguments as ``qb.optim.Trainer``'s."""

    def __init__(self, loss, params, optimizer, *data, device="cpu", batch_argnums=(),
                 shard_argnums=None, reduction="mean"):
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        shards = tuple(range(len(data))) if shard_argnums is None else positions(
            "shard_argnums", shard_argnums)
        if not shards or max(shards) >= len(data):
            raise ValueError(f"shard_argnums {shard_argnums!r} must name data positions (there "
                             f"are {len(data)})")
        comm = world()
        params = broadcast(params)
        leaves, treedef = tree.flatten((params, *data))
        sharded = sharded_flags(treedef, tuple(1 + i for i in shards))
        self._rows = row_count(leaves, sharded)
        self._text = signature_text(treedef, [leaf_signature(x, s)
                                              for x, s in zip(leaves, sharded)])
        check_signatures(comm, self._text, "Trainer")
        self._reduction, self._comm = reduction, comm
        # alone, the step stays one fused program: there is nothing to combine
        super().__init__(loss, params, optimizer, *data, device=device,
                         batch_argnums=batch_argnums,
                         combine=self._all_ranks if comm.size > 1 else None)

    def _all_ranks(self, arrays):
        return combine(self._comm, self._rows, arrays, self._reduction, self._text, "Trainer")

    def fit(self, steps, *, progress=True, **options):
        """``qb.optim.Trainer.fit``, its progress bar on rank 0 only."""
        return super().fit(steps, progress=progress and self._comm.rank == 0, **options)
