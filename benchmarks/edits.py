"""Edit-and-rerun by kind of edit, beside JAX (x64) in one run (issue 23): a program's first
call with the compile cache its original filled, for the edits users make to a model between
runs, and its ratio to the original's cold first call.

    python benchmarks/edits.py                    # every program and kind
    python benchmarks/edits.py pinn1d --kinds penalty,boundary
    python benchmarks/edits.py --impls quabla --json out.json

The kinds: ``penalty`` (an L2 term on the parameters: the corpus's edit, at the program's
tail), ``boundary`` (a term that evaluates the network again: a PINN's boundary condition, a
regression's data on more points), ``width`` (every hidden layer wider) and ``layer`` (one
hidden layer more). Each edit runs in a process of its own on a copy of the cache its
original's cold call left (``run.spawn``), so no edit sees another's entries; JAX keeps no
compiled code between processes here, so its edits are cold calls. Written against
``corpus.py``'s library namespace ``L``; nothing asserts on time.
"""

import math
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import corpus  # noqa: E402
import run  # noqa: E402

KINDS = ("penalty", "boundary", "width", "layer")


def _sizes(base, kind):
    """The layer widths of a network ``base`` after an edit of ``kind``."""
    if kind == "width":
        return [base[0]] + [w + w // 4 for w in base[1:-1]] + [base[-1]]
    if kind == "layer":
        return base[:-1] + [base[-2]] + base[-1:]
    return base


def _penalty(L, params):
    return 1e-4 * sum(L.np.sum(leaf * leaf) for leaf in L.leaves(params))


def pinn1d(L, kind=None):
    """1D Poisson PINN, 1 -> 32 x 3 -> 1 tanh, ``u''`` by two grads under vmap; its boundary
    edit adds ``u(0)^2 + u(1)^2``."""
    import numpy as np

    params = corpus.mlp(L, _sizes([1, 32, 32, 32, 1], kind))
    xs = L.array(np.linspace(0.0, 1.0, 128))
    net = lambda p, x: corpus.forward(L, p, L.np.reshape(x, (1,)), L.np.tanh)[0]  # noqa: E731

    def loss(p):
        uxx = L.vmap(L.grad(L.grad(net, 1), 1), in_axes=(None, 0))(p, xs)
        value = L.np.mean((uxx + math.pi**2 * L.np.sin(math.pi * xs)) ** 2)
        if kind == "penalty":
            value = value + _penalty(L, p)
        elif kind == "boundary":
            value = value + net(p, L.array(0.0)) ** 2 + net(p, L.array(1.0)) ** 2
        return value

    return L.jit(L.value_and_grad(loss)), (params,)


def regression(L, kind=None):
    """An MLP fitted to 256 points, 4 -> 64 x 2 -> 1 softplus; its boundary edit adds the
    misfit on 64 more points."""
    rng = corpus.generator()
    params = corpus.mlp(L, _sizes([4, 64, 64, 1], kind))
    x, y = L.array(rng.normal(size=(256, 4))), L.array(rng.normal(size=(256, 1)))
    x2, y2 = L.array(rng.normal(size=(64, 4))), L.array(rng.normal(size=(64, 1)))
    act = lambda h: L.np.logaddexp(h, 0.0)  # noqa: E731

    def loss(p):
        value = L.np.mean((corpus.forward(L, p, x, act) - y) ** 2)
        if kind == "penalty":
            value = value + _penalty(L, p)
        elif kind == "boundary":
            value = value + 0.5 * L.np.mean((corpus.forward(L, p, x2, act) - y2) ** 2)
        return value

    return L.jit(L.value_and_grad(loss)), (params,)


PROGRAMS = {"pinn1d": pinn1d, "regression": regression}


def child(impl, program, kind):
    """The first call of ``program`` after an edit of ``kind`` (``original``: none)."""
    import time

    lib = corpus.LIBRARIES[impl]()
    fn, args = PROGRAMS[program](lib, None if kind == "original" else kind)
    t0 = time.perf_counter()
    out = lib.block(fn(*args))
    t1 = time.perf_counter()
    return {"first_call": t1 - t0, "summary": corpus.summary(lib, out)}


def measure(program, impls, kinds, timeout):
    """``{impl: {"original": result, kind: result, ...}}``: the original's cold call, then each
    edit on a copy of the cache it left."""
    results = {}
    for impl in impls:
        with tempfile.TemporaryDirectory(prefix=f"qb-edits-{program}-{impl}-") as cache:
            run.prime(__file__, (impl, program, "original"), timeout)
            found = {"original": run.spawn(__file__, (impl, program, "original"), cache, timeout)}
            for kind in kinds:
                with tempfile.TemporaryDirectory(prefix="qb-edit-") as copy:
                    shutil.rmtree(copy)
                    shutil.copytree(cache, copy)
                    found[kind] = run.spawn(__file__, (impl, program, kind), copy, timeout)
            results[impl] = found
    return results


def table(all_results, impls, kinds):
    head = ["program", "edit"] + [f"{impl} edit" for impl in impls]
    head += [f"{impl} edit/cold" for impl in impls]
    if len(impls) == 2:
        head.append("edit ratio")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    logs = {kind: [] for kind in kinds}
    for program, results in all_results.items():
        colds = {impl: results[impl]["original"].get("first_call") for impl in impls}
        lines.append(" | ".join([program, "(cold)"] + [run.fmt_time(colds[i]) for i in impls]
                                + [""] * (len(impls) + (len(impls) == 2))))
        for kind in kinds:
            edits = {impl: results[impl][kind].get("first_call") for impl in impls}
            row = [program, kind] + [run.fmt_time(edits[i]) for i in impls]
            row += [f"{edits[i] / colds[i]:.2f}" if edits[i] and colds[i] else "n/a"
                    for i in impls]
            if edits[impls[0]] and colds[impls[0]]:
                logs[kind].append(math.log(edits[impls[0]] / colds[impls[0]]))
            if len(impls) == 2:
                a, b = (edits[i] for i in impls)
                row.append(f"{a / b:.2f}" if a and b else "n/a")
            lines.append(" | ".join(row))
    lines.append("")
    lines += [f"{impls[0]} edit/cold, geometric mean, {kind}: "
              f"{math.exp(sum(v) / len(v)):.2f}" for kind, v in logs.items() if v]
    return "\n".join(lines + run.failures(all_results))


def main(argv=None):
    parser = run.program_parser(__doc__.splitlines()[0], PROGRAMS)
    parser.add_argument("--kinds", default=",".join(KINDS))
    args = parser.parse_args(argv)
    if args.child:
        return run.report(child, args.child)
    impls = [i for i in args.impls.split(",") if i != "jax" or run.importable("jax")]
    kinds = args.kinds.split(",")
    unknown = [p for p in args.programs if p not in PROGRAMS] + [k for k in kinds
                                                                  if k not in KINDS]
    if unknown:
        parser.error(f"unknown {unknown}; programs {list(PROGRAMS)}, kinds {list(KINDS)}")
    all_results = {}
    for program in args.programs:
        all_results[program] = measure(program, impls, kinds, args.timeout)
        print(f"{program}: done", file=sys.stderr, flush=True)
    print(f"load average before: {os.getloadavg()[0]:.2f}; cores: {os.cpu_count()}")
    print(table(all_results, impls, kinds))
    if args.json:
        run.save_json(args.json, all_results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
