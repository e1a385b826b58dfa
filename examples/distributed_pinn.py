"""Data-parallel training of the MLP PINN on MPI ranks (docs/distributed.md): fit a
1 -> 32 -> 32 -> 1 tanh network u(x) so that u'' = -pi^2 sin(pi x) at 512 collocation points,
each rank holding its own block of the points.

    python examples/distributed_pinn.py            # 2 ranks, then 1 process; compares them
    python examples/distributed_pinn.py --ranks 1  # this process alone
    mpiexec -n 2 python -m mpi4py examples/distributed_pinn.py     # the training alone
    python examples/distributed_pinn.py --small    # 32 points, width 8, 10 steps (CI)

The first form launches the third (``mpiexec`` of the ``mpich`` wheel: ``pip install
'quabla[mpi]'``; without it, the first form trains this process only), trains the same network
in this process on all the points, and prints the largest difference between the two loss
histories (float rounding: ~1e-16 relative). The script itself is the same on a laptop and on
a cluster: ``qb.distributed.Trainer`` averages the gradients over the ranks every step
(weighted by their points, so uneven blocks are fine), and every rank keeps the same
parameters.
"""

import argparse
import importlib.util
import json
import math
import os
import shutil
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


def train(points=POINTS, steps=STEPS, width=WIDTH):
    """Train on this rank's block of the points; every rank returns the same history."""
    x = np.linspace(0.0, 1.0, points)
    trainer = dist.Trainer(loss, init(width), qb.optim.Adam(learning_rate=1e-3), dist.shard(x))
    trainer.fit(steps)                  # progress bar on rank 0 only
    return trainer.history


def launch(ranks, points, steps, width):
    """Run this script on ``ranks`` MPI ranks; their loss history, or None (with a note) when
    MPI is not installed here."""
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpiexec = mpiexec if os.path.exists(mpiexec) else shutil.which("mpiexec")
    if mpiexec is None or importlib.util.find_spec("mpi4py") is None:
        print("mpi4py or mpiexec is missing (pip install 'quabla[mpi]'): one process only")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "history.json")
        command = [mpiexec, "-n", str(ranks), sys.executable, "-m", "mpi4py",
                   os.path.abspath(__file__), "--out", out, "--points", str(points),
                   "--steps", str(steps), "--width", str(width)]
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        subprocess.run(command, check=True, env=env)
        with open(out) as f:
            return json.load(f)


def main(points=POINTS, steps=STEPS, width=WIDTH, ranks=2, out=None):
    """Under an MPI launcher: train on this rank's block (rank 0 prints, and writes the history
    as JSON to ``out``). Alone: launch ``ranks`` ranks of this script when ``ranks > 1`` and
    MPI is installed, train here on all the points, and print how far the histories differ.
    Returns this process's history (the one-process run's, when alone)."""
    if dist.world().kind != "local":
        history = train(points, steps, width)
        if dist.is_root():
            print(f"{dist.size()} ranks: loss {history[0]:.6e} -> {history[-1]:.6e} "
                  f"in {len(history)} steps")
            if out:
                with open(out, "w") as f:
                    json.dump(history, f)
        return history
    parallel = launch(ranks, points, steps, width) if ranks > 1 else None
    alone = train(points, steps, width)
    print(f"1 process: loss {alone[0]:.6e} -> {alone[-1]:.6e} in {len(alone)} steps")
    if parallel is not None:
        difference = float(np.max(np.abs(np.subtract(parallel, alone)) / np.abs(alone)))
        print(f"largest relative difference of the {ranks}-rank history: {difference:.1e}")
    return alone


SMALL = {"points": 32, "steps": 10, "width": 8}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="CI sizes: "
                        + ", ".join(f"{k} {v}" for k, v in SMALL.items()))
    parser.add_argument("--points", type=int, help=f"collocation points (default {POINTS})")
    parser.add_argument("--steps", type=int, help=f"Adam steps (default {STEPS})")
    parser.add_argument("--width", type=int, help=f"hidden width (default {WIDTH})")
    parser.add_argument("--ranks", type=int, default=2,
                        help="ranks to launch when run alone (default 2; 1: this process only)")
    parser.add_argument("--out", help="write the loss history here as JSON (rank 0)")
    args = parser.parse_args()
    sizes = dict(SMALL if args.small else {"points": POINTS, "steps": STEPS, "width": WIDTH})
    sizes.update({k: v for k, v in vars(args).items() if k in sizes and v is not None})
    main(**sizes, ranks=args.ranks, out=args.out)
