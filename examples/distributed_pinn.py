"""Data-parallel training of the MLP PINN on MPI ranks (docs/distributed.md): fit a
1 -> 32 -> 32 -> 1 tanh network u(x) so that u'' = -pi^2 sin(pi x) at 512 collocation points,
each rank holding its own block of the points.

    python examples/distributed_pinn.py            # 2 ranks, then 1 process; compares them
    mpiexec -n 2 python -m mpi4py examples/distributed_pinn.py     # the training alone

The first form launches the second (``mpiexec`` of the ``mpich`` wheel: ``pip install
'quabla[mpi]'``), trains the same network in this process on all the points, and prints the
largest difference between the two loss histories (float rounding: ~1e-16 relative). The
script itself is the same on a laptop and on a cluster: ``qb.distributed.Trainer`` averages
the gradients over the ranks every step (weighted by their points, so uneven blocks are
fine), and every rank keeps the same parameters.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

import quabla as qb
import quabla.distributed as dist

POINTS, WIDTH, STEPS = 512, 32, 200


def init(width=WIDTH, seed=0):
    """Glorot-normal parameters (rank 0's are broadcast: other ranks may draw anything)."""
    rng = np.random.default_rng(seed)

    def glorot(fan_in, fan_out):
        return qb.array(rng.normal(0.0, math.sqrt(2.0 / (fan_in + fan_out)), (fan_in, fan_out)))

    return {"W1": glorot(1, width), "b1": qb.zeros(width), "W2": glorot(width, width),
            "b2": qb.zeros(width), "W3": glorot(width, 1), "b3": qb.zeros(1)}


def net(p, t):
    h = qb.tanh(t * p["W1"][0] + p["b1"])
    h = qb.tanh(h @ p["W2"] + p["b2"])
    return (h @ p["W3"] + p["b3"])[0]


def loss(p, x):
    """Mean squared residual of u'' + pi^2 sin(pi x) over this rank's points."""
    u_xx = qb.vmap(qb.grad(qb.grad(lambda t: net(p, t))))
    return qb.mean((u_xx(x) + math.pi**2 * qb.sin(math.pi * x)) ** 2)


def train(points=POINTS, steps=STEPS):
    """Train on this rank's block of the points; every rank returns the same history."""
    x = np.linspace(0.0, 1.0, points)
    trainer = dist.Trainer(loss, init(), qb.optim.Adam(learning_rate=1e-3), dist.shard(x))
    trainer.fit(steps)                  # progress bar on rank 0 only
    return trainer.history


def compare(ranks=2):
    """Launch ``ranks`` ranks of this script, train one process here, print the difference."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "history.json")
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        command = [mpiexec if os.path.exists(mpiexec) else "mpiexec", "-n", str(ranks),
                   sys.executable, "-m", "mpi4py", os.path.abspath(__file__), "--out", out]
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        subprocess.run(command, check=True, env=env)
        with open(out) as f:
            parallel = json.load(f)
    alone = train()
    difference = float(np.max(np.abs(np.subtract(parallel, alone)) / np.abs(alone)))
    print(f"{ranks} ranks: loss {parallel[0]:.6e} -> {parallel[-1]:.6e} in {len(parallel)} steps")
    print(f"1 process: loss {alone[0]:.6e} -> {alone[-1]:.6e}")
    print(f"largest relative difference of the histories: {difference:.1e}")
    return parallel, alone


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="write the loss history here (rank 0)")
    parser.add_argument("--ranks", type=int, default=2, help="ranks to launch (default 2)")
    args = parser.parse_args(argv)
    if args.out is None and dist.world().kind == "local":   # not under mpiexec: launch it
        return compare(args.ranks)
    history = train()
    if dist.is_root():
        print(f"{dist.size()} ranks: loss {history[0]:.6e} -> {history[-1]:.6e}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump(history, f)
    return history


if __name__ == "__main__":
    main()
