"""Benchmarks: Quabla beside JAX (jax_enable_x64) and hand-written Numba kernels, in one run.

    python benchmarks/run.py                      # every problem
    python benchmarks/run.py pinn mlp_pinn        # some of them
    python benchmarks/run.py --impls quabla,numba --json results.json
    python benchmarks/run.py compile [cases]      # a cold compile phase by phase (compile.py)
    python benchmarks/run.py lj mlp_pinn --device mlx   # Quabla's programs on another device

Problems:
  roundtrip  NumPy round trip of 1e6 float64 values: qb.array(ndarray), then np.asarray(t)
  pinn       README PINN, vectorized form without vmap, jit(value_and_grad(loss))
  pinn_vmap  README PINN as the README writes it: vmap(grad(grad(u)), in_axes=(0, None))
  mlp_pinn   MLP PINN 1->32->32->1 tanh, 1024 points, u_xx = vmap(grad(grad(net))), float64
  train_pinn, train_mlp
             one Adam training step of those: Quabla's README loop as written
             (jit(value_and_grad) + opt.update) against JAX's value_and_grad and Adam in one
             jax.jit; train_pinn_trainer, train_mlp_trainer: qb.optim.Trainer.step against the
             same JAX step
  lj, lj_8192
             Lennard-Jones energy and forces of 1024 (8192) particles, all pairs by
             broadcasting, jit(value_and_grad(energy)); the hand-written kernel loops over the
             pairs
  scan_oscillator
             value_and_grad of a 1000-step explicit integrator of 64 damped nonlinear
             oscillators written with qb.scan, beside jax.lax.scan (issue 8)

Every measurement runs in a subprocess of its own. For each (problem, implementation) a cold
process starts with empty compile caches (fresh QUABLA_CACHE_DIR, NUMBA_CACHE_DIR and JAX
persistent-cache directories; after one discarded run, so that the libraries' files are in the
OS page cache: ``prime``), then a warm process reuses the same directories; the warm
process also measures the steady-state step (timeit: the minimum over many repeats). First-call
times are reported without and with the library import. Ratios are Quabla / peer: below 1 means
Quabla is faster. Nothing here asserts on time. An implementation that fails prints "n/a"
(with the error below the table); set QUABLA_BACKEND=interpret to exercise the harness with the
reference interpreter while a back end is unavailable.

Matrix products in Quabla's and the hand-written kernels' generated code go through the BLAS
that SciPy ships (OpenBLAS, one thread per core by default). On a loaded machine its
threads contend badly with small products; --blas-threads 1 pins them, and the header prints
the setting in effect.
"""

import argparse
import json
import os
import runpy
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

RESULT = "@@RESULT "  # how a child's line of results starts (spawn, report)
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")
PROBLEMS = ["roundtrip", "pinn", "pinn_vmap", "mlp_pinn", "train_pinn", "train_pinn_trainer",
            "train_mlp", "train_mlp_trainer", "lj", "lj_8192", "scan_oscillator"]
IMPL_NAMES = ["quabla", "jax", "numba"]
DESCRIPTIONS = {
    "roundtrip": "NumPy round trip, 1e6 float64",
    "pinn": "README PINN, vectorized (no vmap)",
    "pinn_vmap": "README PINN, vmap(grad(grad(u)))",
    "mlp_pinn": "MLP PINN 1-32-32-1 tanh, 1024 pts",
    "train_pinn": "README PINN train step, (a) loop",
    "train_pinn_trainer": "README PINN train step, (b) Trainer",
    "train_mlp": "MLP PINN train step, (a) loop",
    "train_mlp_trainer": "MLP PINN train step, (b) Trainer",
    "lj": "Lennard-Jones energy+forces, 1024",
    "lj_8192": "Lennard-Jones energy+forces, 8192",
    "scan_oscillator": "scan integrator, 1000 steps x 64, v&g",
}


# -- the child side: one measurement per process ---------------------------------------------------

def steady(case, budget=1.0, max_repeat=50):
    """Minimum time per call over many repeats (timeit style), after a calibration (threads.py
    times its steps with it too)."""
    import timeit

    fn, args, block = case.fn, case.args, case.block
    timer = timeit.Timer(lambda: block(fn(*args)))
    number = 1
    while True:
        t = timer.timeit(number)
        if t >= 0.02 or number >= 1 << 20:
            break
        number *= 4
    repeat = max(5, min(max_repeat, int(budget / max(t, 1e-9))))
    return min(timer.repeat(repeat=repeat, number=number)) / number


def _child_roundtrip(impl):
    import timeit

    t0 = time.perf_counter()
    import numpy as np

    a = np.random.default_rng(0).standard_normal(1_000_000)
    out = {}
    if impl == "quabla":
        import quabla as qb

        out["import"] = time.perf_counter() - t0
        to_lib = lambda: qb.array(a)  # noqa: E731
        t = to_lib()
        back = lambda: np.asarray(t)  # noqa: E731
        e1, e2 = np.asarray(t), np.asarray(t)
        out["zero_copy"] = bool(np.shares_memory(e1, e2) and not e1.flags.writeable)
        out["copied_on_import"] = not np.shares_memory(np.asarray(t), a)
    elif impl == "jax":
        from problems import import_jax

        import_jax()
        import jax
        import jax.numpy as jnp

        out["import"] = time.perf_counter() - t0
        to_lib = lambda: jax.block_until_ready(jnp.asarray(a))  # noqa: E731
        t = to_lib()
        back = lambda: np.asarray(t)  # noqa: E731
        e1, e2 = np.asarray(t), np.asarray(t)
        out["zero_copy"] = bool(np.shares_memory(e1, e2))
    elif impl == "numba":  # the reference: one NumPy copy each way
        to_lib = lambda: a.copy()  # noqa: E731
        t = to_lib()
        back = lambda: t.copy()  # noqa: E731
    else:
        raise KeyError(impl)
    out["to_library"] = min(timeit.repeat(to_lib, number=5, repeat=20)) / 5
    out["to_numpy"] = min(timeit.repeat(back, number=1000, repeat=20)) / 1000
    out["round_trip"] = out["to_library"] + out["to_numpy"]
    ok = np.array_equal(np.asarray(back()), a)
    out["summary"] = [float(ok)]
    return out


def child_measurement(impl, problem, phase):
    """One (implementation, problem, phase) measured in this child process (compile.py's JAX
    column too)."""
    t0 = time.perf_counter()
    sys.path.insert(0, HERE)
    sys.path.insert(1, ROOT)
    if problem == "roundtrip":
        return _child_roundtrip(impl)
    from problems import IMPLS

    import_library, build = IMPLS[impl]
    import_library()
    t1 = time.perf_counter()
    case = build(problem)
    if case is None:
        return {"skipped": True}
    t2 = time.perf_counter()
    out = case.block(case.fn(*case.args))
    t3 = time.perf_counter()
    result = {
        "import": t1 - t0,
        "first_call": t3 - t2,
        "first_call_with_import": t3 - t0,
        "summary": case.summary(out),
    }
    if phase == "warm":
        result["step"] = steady(case)
    return result


# -- the parent side: processes, table ------------------------------------------------------------

def spawn(script, child_args, cache_dir, timeout, **env_vars):
    """``script --child *child_args`` in a process of its own, with its compile caches in
    ``cache_dir`` and ``env_vars`` set: the result the child ``report``ed, or ``{"error": ...}``
    (every benchmark script measures in its children this way)."""
    env = dict(os.environ)
    env["QUABLA_CACHE_DIR"] = os.path.join(cache_dir, "quabla")
    env["NUMBA_CACHE_DIR"] = os.path.join(cache_dir, "numba")
    env["BENCH_JAX_CACHE_DIR"] = os.path.join(cache_dir, "jax")
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    # start-up is measured as an installed library runs: with its bytecode cached
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(env_vars)
    cmd = [sys.executable, os.path.abspath(script), "--child", *child_args]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": " | ".join(tail) or f"exit status {proc.returncode}"}


def report(child, args):
    """The child side of ``spawn``: ``child(*args)`` (or its error), printed as the line
    ``spawn`` reads; returns the exit status."""
    try:
        result = child(*args)
    except Exception as exc:  # reported as n/a by the parent
        result = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    print(RESULT + json.dumps(result), flush=True)
    return 0


def importable(module):
    """Whether ``module`` imports in a fresh interpreter (the scripts' JAX columns ask)."""
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([sys.executable, "-c", code]).returncode == 0


def prime(script, child_args, timeout):
    """One run of ``script``'s child in compile caches of its own, discarded, before a measured
    cold run: the libraries' files (Numba's and llvmlite's, jaxlib's) are then in the OS page
    cache, which this kind of machine empties when idle, so a cold run times an empty compile
    cache and not a cold disk."""
    with tempfile.TemporaryDirectory(prefix="qb-bench-prime-") as cache_dir:
        spawn(script, child_args, cache_dir, timeout)


def measure(problem, impls, timeout):
    results = {}
    for impl in impls:
        with tempfile.TemporaryDirectory(prefix=f"qb-bench-{problem}-{impl}-") as cache_dir:
            if problem == "roundtrip":
                results[impl] = {"warm": spawn(__file__, (impl, problem, "warm"), cache_dir,
                                               timeout)}
                continue
            prime(__file__, (impl, problem, "cold"), timeout)
            cold = spawn(__file__, (impl, problem, "cold"), cache_dir, timeout)
            warm = (spawn(__file__, (impl, problem, "warm"), cache_dir, timeout)
                    if "error" not in cold else cold)
            results[impl] = {"cold": cold, "warm": warm}
    return results


def fmt_time(t):
    """Seconds as µs, ms or s (threads.py's table too)."""
    if t is None:
        return "n/a"
    if t < 1e-3:
        return f"{t * 1e6:.2f} µs"
    if t < 1.0:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.2f} s"


def _fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


ROWS = {
    "roundtrip": [
        ("import qb.array(ndarray)", "warm", "to_library"),
        ("export np.asarray(t)", "warm", "to_numpy"),
        ("round trip", "warm", "round_trip"),
    ],
    "default": [
        ("step (timeit min)", "warm", "step"),
        ("first call, cold cache", "cold", "first_call"),
        ("  + import", "cold", "first_call_with_import"),
        ("first call, warm cache", "warm", "first_call"),
        ("  + import", "warm", "first_call_with_import"),
        ("import", "warm", "import"),
    ],
}


def _value(results, impl, phase, key):
    r = results.get(impl, {}).get(phase) or {}
    v = r.get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def table(all_results, impls):
    header = ["problem", "metric", "quabla", "jax", "numba", "qb/jax", "qb/numba"]
    lines, notes = [], []
    for problem, results in all_results.items():
        for k, (label, phase, key) in enumerate(ROWS.get(problem, ROWS["default"])):
            vals = {i: _value(results, i, phase, key) for i in IMPL_NAMES}
            lines.append([
                DESCRIPTIONS[problem] if k == 0 else "", label,
                fmt_time(vals["quabla"]), fmt_time(vals["jax"]), fmt_time(vals["numba"]),
                _fmt_ratio(vals["quabla"], vals["jax"]), _fmt_ratio(vals["quabla"], vals["numba"]),
            ])
        for impl in impls:
            for phase, r in results.get(impl, {}).items():
                if r.get("error"):
                    notes.append(f"{problem} / {impl} ({phase}): {r['error']}")
                    break
        notes += _agreement(problem, results)
        q = results.get("quabla", {}).get("warm", {})
        if problem == "roundtrip" and "zero_copy" in q:
            notes.append(f"roundtrip: quabla export zero-copy and read-only: {q['zero_copy']}; "
                         f"import copies: {q.get('copied_on_import')}; the numba column is one "
                         "NumPy copy each way (the reference)")
        lines.append(None)
    widths = [max(len(header[c]), *(len(r[c]) for r in lines if r)) for c in range(len(header))]

    def row(cells):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [row(header), row(["-" * w for w in widths])]
    for r in lines[:-1]:
        out.append(row(r) if r else "")
    if notes:
        out += ["", "notes:"] + [f"  {n}" for n in notes]
    return "\n".join(out)


def _agreement(problem, results):
    """Do the implementations compute the same thing? (max relative difference vs Quabla)"""
    base = (results.get("quabla", {}).get("warm") or {}).get("summary")
    notes = []
    if not base or problem == "roundtrip":
        return notes
    for impl in ("jax", "numba"):
        other = (results.get(impl, {}).get("warm") or {}).get("summary")
        if other and len(other) == len(base):
            diff = max(abs(a - b) / max(abs(a), abs(b), 1e-300) for a, b in zip(base, other))
            notes.append(f"{problem}: quabla vs {impl}, max relative difference of value and "
                         f"gradient {diff:.1e}")
    return notes


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compile"]:  # the compile-time breakdown: run as its own script
        script = os.path.join(HERE, "compile.py")
        sys.argv = [script, *argv[1:]]
        runpy.run_path(script, run_name="__main__")  # (which imports this module)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("problems", nargs="*", help=f"subset of {PROBLEMS}")
    parser.add_argument("--impls", default=",".join(IMPL_NAMES),
                        help="comma-separated subset of quabla,jax,numba")
    parser.add_argument("--json", help="also write the raw results to this file")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    parser.add_argument("--blas-threads", type=int,
                        help="set OPENBLAS/MKL/OMP_NUM_THREADS in every measured process")
    parser.add_argument("--device", help="Quabla's jit device for the problems (cpu, cuda, mlx; "
                        "the training problems stay on the CPU): sets BENCH_DEVICE")
    parser.add_argument("--child", nargs=3, metavar=("IMPL", "PROBLEM", "PHASE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        return report(child_measurement, args.child)

    problems = args.problems or PROBLEMS
    unknown = [p for p in problems if p not in PROBLEMS]
    if unknown:
        parser.error(f"unknown problem(s) {unknown}; choose from {PROBLEMS}")
    impls = [i for i in args.impls.split(",") if i]
    if args.blas_threads:
        for name in BLAS_THREAD_VARS:
            os.environ[name] = str(args.blas_threads)
    if args.device:
        os.environ["BENCH_DEVICE"] = args.device
    if "jax" in impls and not importable("jax"):
        print("jax is not installed: its column is n/a (pip install jax jaxlib to compare)")
        impls.remove("jax")
    settings = [f"{k}={os.environ[k]}" for k in ("QUABLA_BACKEND", "BENCH_DEVICE") + BLAS_THREAD_VARS
                if os.environ.get(k)]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
          + (", " + ", ".join(settings) if settings else ""), flush=True)
    all_results = {}
    for problem in problems:
        start = time.perf_counter()
        all_results[problem] = measure(problem, impls, args.timeout)
        print(f"  measured {problem} in {time.perf_counter() - start:.1f} s", flush=True)
    print()
    print(table(all_results, impls))
    save_json(args.json, all_results)
    return 0


def program_parser(description, programs):
    """The options of a script that runs named programs beside JAX (corpus.py, edits.py):
    the programs, ``--impls``, ``--timeout``, ``--json`` and the child's ``--child``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("programs", nargs="*", default=list(programs))
    parser.add_argument("--impls", default="quabla,jax")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    return parser


def failures(all_results):
    """A line per failed measurement of ``{program: {impl: {phase: result}}}``."""
    return [f"{program} {impl} {phase}: {r[impl][phase]['error']}"
            for program, r in all_results.items() for impl in r for phase in r[impl]
            if "error" in r[impl][phase]]


def save_json(path, results):
    """The raw results of a benchmark script to ``path`` (its --json option), if given."""
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
