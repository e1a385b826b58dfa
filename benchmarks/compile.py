"""Where a cold first call's time goes: Quabla's compile broken into its phases, beside JAX.

    python benchmarks/run.py compile                     # every case
    python benchmarks/run.py compile mlp_pinn_32 lj      # some of them
    python benchmarks/compile.py --json out.json         # the same, run directly

Each case runs in a fresh process with empty caches (QUABLA_CACHE_DIR, NUMBA_CACHE_DIR, JAX's
persistent cache), after ``import quabla``. The child times, exclusively (a phase's time does
not include the phases nested in it):

  import numba         importing Numba and the runtime helpers (runtime.py), when a part needs
                       Numba (direct.py translates the others without it)
  trace + transform    tracing the user function and the graph transforms (jvp, vjp, vmap...)
  rewrite              the rewriter (quabla/core/rewrite.py: CSE, folding, DCE)
  schedule             fusion and tiling (lowering/loopnest/schedule.py)
  codegen              generating the entry's source (lowering/numba_cpu/codegen.py)
  direct translation   the source to LLVM IR without Numba (lowering/numba_cpu/direct.py)
  numba front end      bytecode analysis, SSA, Numba's IR rewrites
  numba typing         Numba's type inference
  numba lowering       Numba's lowering of typed IR to LLVM IR
  llvm optimisation    LLVM's function and module passes
  llvm codegen         machine code for the optimised module (an object file)
  numba other          the rest of Numba's compile (exec of the module, its dispatcher)
  cache                the compile cache's key, lookups and writes (lowering/cache.py)
  link                 linking the object with llvmlite (lowering/native.py)
  other                the rest of the first call (argument handling, running the program)

by wrapping those functions (and listening to Numba's ``numba:run_pass`` events) in the
measuring process only, which runs LLVM's work on the compiling thread so that the phases
add up (the library runs it on a thread of its own: machine.LLVM_THREAD); the library carries
no timing code. The cases: the README PINN
(``pinn_vmap``), the MLP PINN at widths 32 and 64 (``mlp_pinn_32``, ``mlp_pinn_64``: the same
network with ``problems.MLP_WIDTH`` set in the child) and Lennard-Jones with 1024 particles
(``lj``), and value_and_grad of the 1000-step scan integrator (``scan_oscillator``). JAX's
column is its cold first call of the same problem, measured as run.py does.
Nothing asserts on time.
"""

import argparse
import collections
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# case -> (problem in problems.py, module constants of problems.py set in the child)
CASES = {
    "pinn_vmap": ("pinn_vmap", {}),
    "mlp_pinn_32": ("mlp_pinn", {"MLP_WIDTH": 32}),
    "mlp_pinn_64": ("mlp_pinn", {"MLP_WIDTH": 64}),
    "lj": ("lj", {}),
    "scan_oscillator": ("scan_oscillator", {}),
}
PHASES = ["import numba", "trace + transform", "rewrite", "schedule", "codegen",
          "direct translation", "numba front end", "numba typing", "numba lowering",
          "llvm optimisation", "llvm codegen", "numba other", "cache", "link", "other"]


class Phases:
    """Exclusive wall and CPU time per phase: entering a phase pauses the one it is nested in.
    (CPU time is the steadier measure on a loaded machine.)"""

    def __init__(self):
        self.total = collections.defaultdict(float)
        self.cpu = collections.defaultdict(float)
        self.stack = []

    @staticmethod
    def _now():
        return time.perf_counter(), time.process_time()

    def _add(self, phase, start, now):
        self.total[phase] += now[0] - start[0]
        self.cpu[phase] += now[1] - start[1]

    def enter(self, phase):
        now = self._now()
        if self.stack:
            self._add(self.stack[-1][0], self.stack[-1][1], now)
        self.stack.append([phase, now])

    def exit(self):
        now = self._now()
        phase, start = self.stack.pop()
        self._add(phase, start, now)
        if self.stack:
            self.stack[-1][1] = now

    def wrap(self, owner, name, phase):
        fn = getattr(owner, name)

        def timed(*args, **kwargs):
            self.enter(phase)
            try:
                return fn(*args, **kwargs)
            finally:
                self.exit()

        setattr(owner, name, timed)

    def instrument(self):
        """Wrap Quabla's compile stages, and Numba's once a part goes to it (Numba is imported
        then, timed as "import numba")."""
        import lowering
        import lowering.numba_cpu as backend
        from lowering import cache, native
        from lowering.numba_cpu import direct, emitter, machine
        from quabla.core import rewrite

        simplify = rewrite.simplify
        for module in list(sys.modules.values()):  # every binding of simplify
            if getattr(module, "simplify", None) is simplify:
                self.wrap(module, "simplify", "rewrite")
        self.wrap(emitter, "schedule", "schedule")
        self.wrap(backend, "generate", "codegen")
        for name in ("entry_key", "write_source", "read_object", "write_object"):
            self.wrap(cache, name, "cache")
        self.wrap(direct, "compile_entry", "direct translation")
        self.wrap(native, "load", "link")
        self.wrap(native, "sequence", "link")
        self.wrap(lowering, "compile", "other")
        # an entry's LLVM work (machine.ObjectCode), on this thread so that phases do not overlap
        machine.LLVM_THREAD = False
        self.wrap(machine, "optimise", "llvm optimisation")
        self.wrap(machine, "emit", "llvm codegen")
        numba_entry = backend.numba_entry

        def through_numba(*args):
            if not hasattr(through_numba, "ready"):
                self.enter("import numba")
                import lowering.numba_cpu.runtime  # noqa: F401 - imports Numba
                self.exit()
                self._instrument_numba()
                through_numba.ready = True
            self.enter("numba other")
            try:
                return numba_entry(*args)
            finally:
                self.exit()

        backend.numba_entry = through_numba

    def _instrument_numba(self):
        import numba.core.event as event
        from numba.core.codegen import CPUCodeLibrary, JITCodeLibrary

        from lowering.numba_cpu import target

        self.wrap(CPUCodeLibrary, "_optimize_functions", "llvm optimisation")
        self.wrap(CPUCodeLibrary, "_optimize_final_module", "llvm optimisation")
        self.wrap(target.EntryLibrary, "_optimize_final_module", "llvm optimisation")
        self.wrap(JITCodeLibrary, "_finalize_specific", "llvm codegen")
        passes = {"nopython_type_inference": "numba typing", "native_lowering": "numba lowering"}
        phases = self

        class Passes(event.Listener):
            def on_start(self, ev):
                phases.enter(passes.get(ev.data["name"].split(" [")[0], "numba front end"))

            def on_end(self, ev):
                phases.exit()

        event.register("numba:run_pass", Passes())


def _child(case):
    """Quabla's cold first call of ``case``, phase by phase (seconds)."""
    sys.path.insert(0, HERE)
    sys.path.insert(1, ROOT)
    import problems

    problem, constants = CASES[case]
    for name, value in constants.items():
        setattr(problems, name, value)
    problems.import_quabla()
    phases = Phases()
    phases.instrument()
    start, cpu = time.perf_counter(), time.process_time()
    case_ = problems.build_quabla(problem)
    phases.enter("trace + transform")
    case_.block(case_.fn(*case_.args))
    phases.exit()
    result = {p: phases.total.get(p, 0.0) for p in PHASES}
    result["total"] = time.perf_counter() - start
    result["cpu"] = time.process_time() - cpu
    result["cpu_phases"] = {p: phases.cpu.get(p, 0.0) for p in PHASES}
    return result


def _jax_child(case):
    import run

    problem, constants = CASES[case]
    import problems

    for name, value in constants.items():
        setattr(problems, name, value)
    return run.child_measurement("jax", problem, "cold")


def measure(case, with_jax, timeout):
    import run

    out = {}
    for impl in ("quabla", "jax") if with_jax else ("quabla",):
        run.prime(__file__, (impl, case, "cold"), timeout)
        with tempfile.TemporaryDirectory(prefix=f"qb-compile-{case}-{impl}-") as cache_dir:
            out[impl] = run.spawn(__file__, (impl, case, "cold"), cache_dir, timeout)
    return out


def table(results):
    cases = list(results)
    fmt = lambda v: "n/a" if not isinstance(v, (int, float)) else f"{v * 1e3:.0f} ms"  # noqa: E731
    rows = [[p] + [fmt(results[c]["quabla"].get(p)) for c in cases] for p in PHASES]
    rows.append(["quabla cold first call"] + [fmt(results[c]["quabla"].get("total")) for c in cases])
    rows.append(["  of which CPU time"] + [fmt(results[c]["quabla"].get("cpu")) for c in cases])
    rows.append(["jax cold first call"]
                + [fmt((results[c].get("jax") or {}).get("first_call")) for c in cases])
    header = ["phase (after import quabla)"] + cases
    widths = [max(len(r[k]) for r in rows + [header]) for k in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) if k == 0 else c.rjust(w)  # noqa: E731
                               for k, (c, w) in enumerate(zip(r, widths)))
    text = [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]
    for c in cases:
        for impl, r in results[c].items():
            if r.get("error"):
                text.append(f"  {c} / {impl}: {r['error']}")
    return "\n".join(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cases", nargs="*", help=f"subset of {list(CASES)}")
    parser.add_argument("--no-jax", action="store_true", help="skip JAX's column")
    parser.add_argument("--json", help="also write the raw results to this file")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        impl, case, _ = args.child
        sys.path.insert(0, HERE)
        import run

        return run.report(_child if impl == "quabla" else _jax_child, (case,))
    sys.path.insert(0, HERE)
    import run

    cases = args.cases or list(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    with_jax = not args.no_jax and run.importable("jax")
    results = {}
    for case in cases:
        results[case] = measure(case, with_jax, args.timeout)
        print(f"  measured {case}", flush=True)
    print()
    print(table(results))
    run.save_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
