"""Data-parallel training on MPI ranks: the MLP PINN's Trainer step on 1 and 2 ranks, beside
one process with 2 Quabla threads, and the time of the step's Allreduce.

    python benchmarks/distributed.py                     # 4096 points, width 64
    python benchmarks/distributed.py --points 1024 --width 32

Every configuration is a job of its own with warm compile caches (a first job compiles):
``mpiexec -n 1`` and ``-n 2 python -m mpi4py`` with one Quabla thread per rank, and a plain
process with ``QUABLA_NUM_THREADS=2``; BLAS on one thread throughout. A rank times a fixed
schedule of ``qb.distributed.Trainer`` steps (every rank must take the same steps: they meet
in the Allreduce), the minimum over repeats of the mean step, the slowest rank's. "allreduce"
is ``combine`` alone on a buffer of the gradient's size, as the step calls it. The target of
issue 26: 2 ranks at most 0.6x of 1 rank's step. Nothing asserts on time.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run  # noqa: E402  (the benchmarks' timing and formatting helpers)

WARMUP, STEPS, REPEATS = 3, 5, 30


def _child(points, width):
    import numpy as np

    sys.path.insert(1, run.ROOT)
    import problems
    import quabla as qb
    import quabla.distributed as dist
    from quabla.distributed.combine import combine

    problems.MLP_POINTS, problems.MLP_WIDTH = points, width
    loss, params, (x,) = problems.quabla_loss("mlp_pinn")
    trainer = dist.Trainer(loss, params, qb.optim.Adam(learning_rate=1e-3),
                           dist.shard(np.asarray(x)))
    for _ in range(WARMUP):
        trainer.step()
    best = float("inf")
    for _ in range(REPEATS):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(STEPS):
            trainer.step()
        best = min(best, (time.perf_counter() - start) / STEPS)
    grads = [np.zeros(np.shape(p)) for p in qb.tree.leaves(params)]
    arrays, comm, reduce_best = [np.zeros(()), *grads], dist.world(), float("inf")
    for _ in range(REPEATS):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(100):
            combine(comm, 1, arrays, "mean", "benchmark")
        reduce_best = min(reduce_best, (time.perf_counter() - start) / 100)
    steps = comm.allgather(best)
    reduces = comm.allgather(reduce_best)
    return {"step": max(steps), "allreduce": max(reduces), "ranks": dist.size(),
            "loss": trainer.loss().item(), "threads": _threads()}


def _threads():
    from lowering.numba_cpu import threads

    return threads.count()


def _job(ranks, points, width, cache_dir, timeout, threads):
    """One configuration: ``ranks`` MPI ranks (None: a plain process) with ``threads``
    Quabla threads each; the slowest rank's result."""
    env = dict(os.environ, QUABLA_CACHE_DIR=os.path.join(cache_dir, "quabla"),
               NUMBA_CACHE_DIR=os.path.join(cache_dir, "numba"),
               PYTHONPATH=os.pathsep.join([run.ROOT, HERE]), QUABLA_NUM_THREADS=str(threads),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               **{name: "1" for name in run.BLAS_THREAD_VARS})
    command = [sys.executable, os.path.abspath(__file__), "--child", str(points), str(width)]
    if ranks:
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        command = [mpiexec if os.path.exists(mpiexec) else "mpiexec", "-n", str(ranks),
                   sys.executable, "-m", "mpi4py", *command[1:]]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(run.RESULT):
            return json.loads(line[len(run.RESULT):])
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return {"error": " | ".join(tail) or f"exit status {done.returncode}"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=4096)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", help="also write the raw results to this file")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        import quabla.distributed as dist

        result = _child(*map(int, args.child))
        if dist.is_root():
            print(run.RESULT + json.dumps(result), flush=True)
        return 0
    configurations = {"1 rank": (1, 1), "2 ranks": (2, 1), "1 process, 2 threads": (None, 2)}
    print(f"MLP PINN {args.points} points, width {args.width}: Trainer step (Adam); "
          f"{os.cpu_count()} CPUs, BLAS on 1 thread")
    results = {}
    with tempfile.TemporaryDirectory(prefix="qb-distributed-") as cache_dir:
        _job(None, args.points, args.width, cache_dir, args.timeout, 1)   # compiles
        for name, (ranks, threads) in configurations.items():
            results[name] = _job(ranks, args.points, args.width, cache_dir, args.timeout,
                                 threads)
    base = results["1 rank"].get("step")
    print(f"{'':<22}{'step':>12}{'vs 1 rank':>12}{'allreduce':>12}{'loss':>14}")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:<22}  n/a: {r['error']}")
            continue
        ratio = f"{r['step'] / base:.2f}x" if base else "n/a"
        reduce = run.fmt_time(r["allreduce"]) if r["ranks"] > 1 else "-"
        print(f"{name:<22}{run.fmt_time(r['step']):>12}{ratio:>12}{reduce:>12}"
              f"{r['loss']:>14.6e}")
    run.save_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
