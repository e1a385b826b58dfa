"""Threaded tile loops: steady-state steps with 1 and more threads, beside JAX, in one run.

    python benchmarks/threads.py                    # every case, 1 and 2 threads
    python benchmarks/threads.py --threads 1,2,4 mlp_4096_64

Each (case, thread count) is a process of its own with ``QUABLA_NUM_THREADS`` set, BLAS pinned
to one thread (products inside a threaded loop must not start threads of their own), warm
compile caches (a first process compiles). The cases: the MLP PINN of benchmarks/problems.py
with 4096 points at width 64 (issue 11's target: 2 threads at most 0.65x of 1 thread) and
with 1024 points at width 32, the README PINN (no tile loop: must be no slower) and
Lennard-Jones with 1024 particles. JAX's column is its jitted step of the same problem (its own
threads: XLA's CPU client uses every core). Nothing asserts on time.
"""

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run  # noqa: E402  (the benchmarks' process and timing helpers)

# case -> (problem in problems.py, module constants of problems.py set in the child)
CASES = {
    "mlp_4096_64": ("mlp_pinn", {"MLP_POINTS": 4096, "MLP_WIDTH": 64}),
    "mlp_1024_32": ("mlp_pinn", {"MLP_POINTS": 1024, "MLP_WIDTH": 32}),
    "pinn_vmap": ("pinn_vmap", {}),
    "lj": ("lj", {}),
}


def _child(impl, case):
    sys.path.insert(1, run.ROOT)
    import problems

    problem, settings = CASES[case]
    for name, value in settings.items():
        setattr(problems, name, value)
    import_library, build = problems.IMPLS[impl]
    import_library()
    built = build(problem)
    built.block(built.fn(*built.args))
    return {"step": run.steady(built), "summary": built.summary(built.block(built.fn(*built.args)))}


def _spawn(impl, case, cache_dir, n_threads, timeout):
    """One measurement in a process of its own (the cache directories shared per case)."""
    env = {name: "1" for name in run.BLAS_THREAD_VARS}
    if n_threads:
        env["QUABLA_NUM_THREADS"] = str(n_threads)
    return run.spawn(__file__, (impl, case), cache_dir, timeout, **env)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cases", nargs="*", help=f"subset of {list(CASES)}")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--no-jax", action="store_true", help="leave JAX's column out")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", help="also write the raw results to this file")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return run.report(_child, args.child)
    cases = args.cases or list(CASES)
    counts = [int(n) for n in args.threads.split(",")]
    jax = not args.no_jax and run.importable("jax")
    results = {}
    print(f"{os.cpu_count()} CPUs; BLAS pinned to 1 thread; steady-state step per call")
    header = [f"{n} thread{'s' * (n > 1)}" for n in counts] + [f"{n}/1" for n in counts[1:]]
    print(f"{'case':<14}" + "".join(f"{h:>12}" for h in header) + ("        jax" if jax else ""))
    for case in cases:
        with tempfile.TemporaryDirectory(prefix=f"qb-threads-{case}-") as cache_dir:
            _spawn("quabla", case, cache_dir, counts[0], args.timeout)   # compiles
            for n in counts[1:]:
                _spawn("quabla", case, cache_dir, n, args.timeout)
            row = {n: _spawn("quabla", case, cache_dir, n, args.timeout) for n in counts}
            if jax:
                row["jax"] = _spawn("jax", case, cache_dir, None, args.timeout)
        results[case] = row
        steps = [row[n].get("step") for n in counts]
        cells = [run.fmt_time(s) if s else "n/a" for s in steps]
        cells += [f"{s / steps[0]:.2f}x" if s and steps[0] else "n/a" for s in steps[1:]]
        if jax:
            cells.append(run.fmt_time(row["jax"]["step"]) if row["jax"].get("step") else "n/a")
        print(f"{case:<14}" + "".join(f"{c:>12}" for c in cells), flush=True)
        for key, value in row.items():
            if "error" in value:
                print(f"    {key}: {value['error']}")
    run.save_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
