"""Every check of qb.distributed in one MPI job (tests/test_distributed.py launches it with 1, 2
and 3 ranks: ``mpiexec -n N python -m mpi4py tests/mpi_checks.py OUT.json``).

Each rank computes on its own rows; rank 0 gathers every rank's results, adds the one-process
references (the same functions on all the rows) and writes them to ``OUT.json``, where the
tests compare them. Floats go through JSON exactly (``repr`` round-trips); parameters that
must be the same bits on every rank are also written as hex. Shapes are tiny: this is about
the numbers, not speed.
"""

import json
import os
import sys

import numpy as np
import tqdm.auto

import quabla as qb
import quabla.distributed as dist
from lowering.numba_cpu import threads

ROWS = 7      # 1 rank: 7; 2 ranks: 4 + 3; 3 ranks: 3 + 2 + 2
FEATURES = 3
STEPS = 20


def data(seed=0, rows=ROWS):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, FEATURES)), rng.normal(size=rows)


def params():
    rng = np.random.default_rng(1)
    return {"W": qb.array(rng.normal(size=(FEATURES, 2))), "b": qb.array(rng.normal(size=2)),
            "scale": [qb.array(0.7)]}


def residual(p, x, y):
    h = qb.tanh(x @ p["W"] + p["b"])
    return h[:, 0] * p["scale"][0] + h[:, 1] - y


def loss_mean(p, x, y):
    return qb.mean(residual(p, x, y) ** 2)


def loss_sum(p, x, y):
    return qb.sum(residual(p, x, y) ** 2)


def loss_aux(p, x, y, c):
    r = residual(p, x, y)
    return qb.mean(r ** 2) * c, {"mae": qb.mean(qb.abs(r)), "peak": qb.mean(r ** 4)}


def plain(tree):
    """A pytree of arrays as nested lists of floats (exact through JSON)."""
    return qb.tree.map(lambda a: np.asarray(a).tolist(), tree)


def bits(tree):
    return [np.asarray(a).tobytes().hex() for a in qb.tree.leaves(tree)]


def checks(x, y):
    """This rank's results of every check, on its rows ``x``, ``y``."""
    p = params()
    out = {"rank": dist.rank(), "size": dist.size(), "local_rank": dist.local_rank(),
           "is_root": dist.is_root(), "rows": int(x.shape[0])}

    value, grads = dist.value_and_grad(loss_mean, shard_argnums=(1, 2))(p, x, y)
    out["mean"] = plain([value, grads])
    value, grads = dist.value_and_grad(loss_sum, shard_argnums=(1, 2), reduction="sum")(p, x, y)
    out["sum"] = plain([value, grads])
    (value, aux), grads = dist.value_and_grad(loss_aux, shard_argnums=(1, 2), argnums=(0, 3),
                                              has_aux=True)(p, x, y, qb.array(1.5))
    out["aux"] = plain([value, aux, grads])
    value, grads = dist.value_and_grad(loss_mean, shard_argnums=(1, 2),
                                       devices=["cpu", "cpu"])(p, x, y)
    out["devices"] = plain([value, grads])
    again = dist.value_and_grad(loss_mean, shard_argnums=(1, 2))
    out["repeat"] = plain([again(p, x, y)[0], again(p, x, y)[0]])

    # the helpers
    drawn = {"w": qb.array(np.random.default_rng(100 + dist.rank()).normal(size=3))}
    out["broadcast"] = bits(dist.broadcast(drawn))
    out["allreduce"] = plain([dist.allreduce({"r": float(dist.rank()), "v": qb.array([1.0, 2.0])},
                                             op="sum"),
                              dist.allreduce(qb.array(float(dist.rank())))])
    out["shard"] = np.asarray(dist.shard(np.arange(10.0))).tolist()

    # mismatched signatures: the last rank's features or structure differ
    last = dist.rank() == dist.size() - 1 and dist.size() > 1
    for name, args in (("shape", (p, x[:, :2] if last else x, y)),
                       ("structure", ({**p, "extra": qb.array(1.0)} if last else p, x, y))):
        try:
            dist.value_and_grad(loss_mean, shard_argnums=(1, 2))(*args)
            out[f"mismatch_{name}"] = None
        except ValueError as error:
            out[f"mismatch_{name}"] = str(error)

    # training: different data per rank, identical parameters everywhere
    trainer = dist.Trainer(loss_mean, params() if dist.is_root() else _other_start(),
                           qb.optim.Adam(learning_rate=0.05), x, y)
    bars = []   # each progress bar's ``disable``: None (shown on a terminal) or True
    real = tqdm.auto.tqdm

    def recording(*args, **kwargs):
        bars.append(kwargs.get("disable"))
        return real(*args, **dict(kwargs, disable=True))

    tqdm.auto.tqdm = recording
    try:
        trainer.fit(STEPS)
    finally:
        tqdm.auto.tqdm = real
    state = trainer.state_dict()
    out["trainer"] = {"history": trainer.history, "params": plain(trainer.params), "bars": bars,
                      "params_bits": bits(trainer.params), "state_bits": bits(state),
                      "steps": state["opt_state"]["step"]}

    # thread defaults (no QUABLA_NUM_THREADS): the cores this rank may use, shared by the
    # node's ranks
    saved = os.environ.pop("QUABLA_NUM_THREADS", None)
    try:
        out["threads"] = {"count": threads.count(), "cores": len(os.sched_getaffinity(0)),
                          "cpus": os.cpu_count()}
    finally:
        if saved is not None:
            os.environ["QUABLA_NUM_THREADS"] = saved
    return out


def _other_start():
    """Another rank's own random start: the Trainer replaces it by rank 0's."""
    rng = np.random.default_rng(7 + dist.rank())
    return qb.tree.map(lambda a: qb.array(rng.normal(size=np.shape(a))), params())


def references(x_all, y_all):
    p = params()
    value, grads = qb.value_and_grad(loss_mean)(p, qb.array(x_all), qb.array(y_all))
    ref = {"mean": plain([value, grads])}
    value, grads = qb.value_and_grad(loss_sum)(p, qb.array(x_all), qb.array(y_all))
    ref["sum"] = plain([value, grads])
    (value, aux), grads = qb.value_and_grad(loss_aux, argnums=(0, 3), has_aux=True)(
        p, qb.array(x_all), qb.array(y_all), qb.array(1.5))
    ref["aux"] = plain([value, aux, grads])
    trainer = qb.optim.Trainer(loss_mean, p, qb.optim.Adam(learning_rate=0.05),
                               qb.array(x_all), qb.array(y_all))
    trainer.fit(STEPS, progress=False)
    ref["trainer"] = {"history": trainer.history, "params": plain(trainer.params)}
    return ref


def main(path):
    x_all, y_all = data()
    results = checks(dist.shard(x_all), dist.shard(y_all))
    gathered = dist.world().allgather(results)
    if dist.is_root():
        report = {"ranks": gathered, "reference": references(x_all, y_all),
                  "communicator": dist.world().kind}
        with open(path + ".part", "w") as f:
            json.dump(report, f)
        os.replace(path + ".part", path)
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1])
