"""Processes sharing a machine (issue 23, item 5): one program alone, then 2 copies at once,
and the step-time ratio, with Quabla's default thread counts.

    python benchmarks/processes.py                    # the MLP PINN, 4096 points, width 64
    python benchmarks/processes.py --points 1024 --width 32

The program is ``jit(value_and_grad)`` of the MLP PINN (benchmarks/problems.py), timed at
steady state in each process. Four runs, with warm compile caches and no thread variable set
by hand (no ``QUABLA_NUM_THREADS``, no ``OPENBLAS_NUM_THREADS``):

- alone: every core of the machine is this process's;
- 2 at once, unaware: two copies that know nothing of each other (a parameter sweep started
  by hand): each takes every core, for its tile loops and its BLAS;
- 2 at once, as MPI ranks: what ``mpiexec -n 2`` tells each process (``MPI_LOCALNRANKS=2``):
  each takes its share of the cores;
- 2 at once, pinned: each copy bound to its own cores (``os.sched_setaffinity``, as
  ``taskset`` or a batch system's binding does): each follows its affinity.

With the machine's cores split between 2 copies, the ideal ratio is 2x of alone's step for
2x the work done; above that is oversubscription. Nothing asserts on time.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run  # noqa: E402  (the benchmarks' timing and formatting helpers)


def _child(points, width):
    cpus = os.environ.get("BENCH_CPUS")
    if cpus:  # before NumPy and its BLAS load: they read the affinity when they start
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    sys.path.insert(1, run.ROOT)
    import problems
    from lowering.numba_cpu import threads

    problems.MLP_POINTS, problems.MLP_WIDTH = points, width
    problems.import_quabla()
    built = problems.build_quabla("mlp_pinn")
    built.block(built.fn(*built.args))
    step = run.steady(built, budget=3.0)
    controller = threads.blas_controller()
    blas = sorted({lib.num_threads for lib in controller.lib_controllers}) if controller else []
    return {"step": step, "threads": threads.count(), "blas": blas}


def _start(points, width, cache_dir, **env_vars):
    env = {k: v for k, v in os.environ.items()
           if k not in ("QUABLA_NUM_THREADS", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE",
                        *run.BLAS_THREAD_VARS)}
    env.update(QUABLA_CACHE_DIR=os.path.join(cache_dir, "quabla"),
               NUMBA_CACHE_DIR=os.path.join(cache_dir, "numba"),
               PYTHONPATH=os.pathsep.join([run.ROOT, HERE]), **env_vars)
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", str(points),
                             str(width)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _result(process, timeout):
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return {"error": f"timed out after {timeout} s"}
    for line in reversed(out.splitlines()):
        if line.startswith(run.RESULT):
            return json.loads(line[len(run.RESULT):])
    return {"error": " | ".join(err.strip().splitlines()[-3:]) or "no result"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=4096)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", help="also write the raw results to this file")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return run.report(_child, tuple(map(int, args.child)))
    cpus = sorted(os.sched_getaffinity(0))
    halves = [cpus[:max(1, len(cpus) // 2)], cpus[len(cpus) // 2:] or cpus]
    runs = {
        "alone": [{}],
        "2 at once, unaware": [{}, {}],
        "2 at once, as MPI ranks": [{"MPI_LOCALNRANKS": "2"}] * 2,
        "2 at once, pinned": [{"BENCH_CPUS": ",".join(map(str, h))} for h in halves],
    }
    print(f"MLP PINN {args.points} points, width {args.width}: jit(value_and_grad) step; "
          f"{len(cpus)} cores; default thread counts")
    results = {}
    with tempfile.TemporaryDirectory(prefix="qb-processes-") as cache_dir:
        _result(_start(args.points, args.width, cache_dir), args.timeout)   # compiles
        for name, settings in runs.items():
            started = [_start(args.points, args.width, cache_dir, **s) for s in settings]
            results[name] = [_result(p, args.timeout) for p in started]
    alone = results["alone"][0].get("step")
    print(f"{'':<26}{'step':>12}{'vs alone':>10}   threads, BLAS threads per process")
    for name, rs in results.items():
        errors = [r["error"] for r in rs if "error" in r]
        if errors:
            print(f"{name:<26}  n/a: {errors[0]}")
            continue
        step = sum(r["step"] for r in rs) / len(rs)
        ratio = f"{step / alone:.2f}x" if alone else "n/a"
        detail = ", ".join(f"{r['threads']} / {r['blas']}" for r in rs)
        print(f"{name:<26}{run.fmt_time(step):>12}{ratio:>10}   {detail}")
    run.save_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
