"""A ``while_loop`` Newton iteration under ``vmap``: Quabla beside JAX.

    python benchmarks/newton_vmap.py [--lanes 1024] [--budget 1.0]

Each lane solves ``x**3 + a*x - b = 0`` (``a > 0``: one real root) by Newton's method until
the step is below ``1e-12 * (1 + |x|)``; the lanes need different trip counts, so the batched
loop runs while any lane is active and freezes the finished ones. Both sides are
``jit(vmap(solve))``. Each implementation runs in a fresh process with an empty compile cache:
"first call" is trace + compile + one run (after the import, shown apart), "steady" the
median time of one call after it.
``QUABLA_BACKEND=interpret`` runs Quabla's side through the interpreter (use few lanes).
Nothing here asserts on time.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TOL, MAXITER = 1e-12, 100


def problem(lanes):
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.uniform(0.5, 2.0, lanes), rng.uniform(-100.0, 100.0, lanes)


def newton(xp, while_loop, zero):
    """The per-lane ``solve(a, b)`` written once against a library: ``xp`` its array namespace
    (``abs``, ``logical_and``), ``while_loop`` its loop and ``zero`` the trip count's start."""

    def solve(a, b):
        def body(state):
            x, _, k = state
            dx = (x * x * x + a * x - b) / (3.0 * x * x + a)
            return x - dx, dx, k + 1.0

        def active(state):
            x, dx, k = state
            return xp.logical_and(xp.abs(dx) > TOL * (1.0 + xp.abs(x)), k < MAXITER)

        x, _, k = while_loop(active, body, (b / (1.0 + a), b, zero))
        return x, k

    return solve


def quabla_solver():
    import quabla as qb

    run = qb.jit(qb.vmap(newton(qb, qb.while_loop, 0.0)))
    return lambda a, b: [o.numpy() for o in run(qb.asarray(a), qb.asarray(b))]


def jax_solver():
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    run = jax.jit(jax.vmap(newton(jnp, jax.lax.while_loop, jnp.float64(0.0))))
    return lambda a, b: [jax.device_get(o) for o in jax.block_until_ready(run(a, b))]


def _child(impl, lanes, budget):
    import numpy as np

    a, b = problem(lanes)
    start = time.perf_counter()
    __import__(impl)
    imported = time.perf_counter()
    solve = {"quabla": quabla_solver, "jax": jax_solver}[impl]()
    x, k = solve(a, b)
    first = time.perf_counter() - imported
    times = []
    while sum(times) < budget and len(times) < 1000:
        t0 = time.perf_counter()
        solve(a, b)
        times.append(time.perf_counter() - t0)
    residual = float(np.max(np.abs(x ** 3 + a * x - b) / (1.0 + np.abs(b))))
    return {"import": imported - start, "first": first, "steady": statistics.median(times),
            "residual": residual, "trips": [float(np.min(k)), float(np.max(k))],
            "x": np.asarray(x).tolist()}


def _spawn(impl, lanes, budget):
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, QUABLA_CACHE_DIR=os.path.join(cache, "quabla"),
                   NUMBA_CACHE_DIR=os.path.join(cache, "numba"))
        command = [sys.executable, __file__, "--child", impl, "--lanes", str(lanes),
                   "--budget", str(budget)]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{impl} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _has(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=1024)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of steady calls")
    parser.add_argument("--child", choices=["quabla", "jax"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.lanes, args.budget)))
        return
    impls = ["quabla"] + (["jax"] if _has("jax") else [])
    results = {impl: _spawn(impl, args.lanes, args.budget) for impl in impls}
    backend = os.environ.get("QUABLA_BACKEND", "numba")
    print(f"while_loop Newton under vmap, {args.lanes} lanes (quabla backend: {backend})")
    for impl, r in results.items():
        print(f"  {impl:7s} import {r['import']:6.3f} s   first call {r['first']:7.3f} s   "
              f"steady {r['steady'] * 1e6:10.1f} us   "
              f"trips {r['trips'][0]:.0f}..{r['trips'][1]:.0f}   residual {r['residual']:.1e}")
    if "jax" in results:
        q, j = results["quabla"], results["jax"]
        diff = max(abs(u - v) for u, v in zip(q["x"], j["x"]))
        print(f"  quabla / jax: steady {q['steady'] / j['steady']:.2f}x, first call "
              f"{q['first'] / j['first']:.2f}x; max |x_quabla - x_jax| = {diff:.1e}")


if __name__ == "__main__":
    main()
