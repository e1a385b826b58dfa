"""How the ranks' results become the whole problem's: one ``Allreduce`` of one flat float64
buffer per call, and the check that every rank called with the same signature.

The buffer is ``[rows, key, key², *results]``: ``rows`` adds up to the job's row count,
``key`` is a small number made from the caller's signature, and ``results`` (the value, the
auxiliary values and the gradients) are weighted by the rank's rows for a mean. Every rank
computes the same test of the sums, ``size · Σkey² == (Σkey)²`` (Cauchy-Schwarz: equal iff
every key is equal), so a mismatch is seen by all ranks in the same call, and all of them
then gather the signatures to name them in the same ``ValueError``.
"""

import hashlib

import numpy as np

from .communicator import as_buffer

__all__ = ["REDUCTIONS", "signature_key", "check_signatures", "combine"]

REDUCTIONS = ("mean", "sum")
_HEADER = 3
_KEY_RANGE = 1 << 20  # keys below this: every sum in the header is exact in float64


def signature_key(text):
    """A whole number in ``[1, 2**20]`` made from a signature's text (the same on every rank
    and in every process)."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % _KEY_RANGE + 1


def check_signatures(comm, text, what="value_and_grad"):
    """Raise ``ValueError`` on every rank unless every rank's ``text`` is the same (a gather:
    run it once per new signature, not every step)."""
    texts = comm.allgather(text)
    if len(set(texts)) > 1:
        raise ValueError(_mismatch(what, texts))


def _mismatch(what, texts):
    groups = {}
    for r, t in enumerate(texts):
        groups.setdefault(t, []).append(r)
    lines = "\n".join(f"  rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}: {t}"
                      for t, rs in groups.items())
    return (f"qb.distributed.{what}: the ranks were called with different shapes or "
            f"structures (rows along axis 0 of the sharded arguments may differ, nothing "
            f"else):\n{lines}")


def combine(comm, rows, arrays, reduction, text, what="value_and_grad"):
    """The whole job's ``arrays`` (each rank's value, auxiliary values and gradients over its
    ``rows`` rows): their sum over the ranks, or for ``"mean"`` their mean weighted by the
    ranks' rows, with the shapes and dtypes of ``arrays``. A rank with no rows contributes
    nothing (its ``arrays`` only give the shapes)."""
    key = signature_key(text)
    buffer, split = as_buffer([np.array([float(rows), key, key * key]), *arrays])
    payload = buffer[_HEADER:]
    if rows == 0:
        payload[:] = 0.0
    elif reduction == "mean":
        payload *= rows
    comm.allreduce_sum(buffer)
    total, keys, squares = buffer[:_HEADER]
    if comm.size * int(squares) != int(keys) ** 2:  # not every rank's key is the same
        raise ValueError(_mismatch(what, comm.allgather(text)))
    if reduction == "mean":
        if total == 0:
            raise ValueError(f"qb.distributed.{what}: no rank holds any rows")
        payload /= total
    return split(buffer)[1:]
