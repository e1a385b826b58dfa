"""What a cold compile sets up besides the entry (docs/compile-time.md, "first-compile set-up"):
the runtime's helpers are LLVM IR, not Python functions Numba translates, types and compiles
on their own; the garbage collector does not walk Numba's objects while it compiles; SciPy's
linalg is imported only for programs that call BLAS; the entry compiles for the lean target
(lowering/numba_cpu/target.py), which loads neither Numba's full CPU target nor its
reference-counting runtime, and leaves both to the user's own Numba code in the same process.
And the helpers give the same bits."""

import json
import os
import subprocess
import sys
import textwrap
from fractions import Fraction

import numpy as np
import pytest

import quabla as qb
from helpers import staged_graph
from quabla.core.interpret import evaluate
from lowering.numba_cpu import compile_graph
from quabla.core.rules.structural import clamp_index

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One cold process: a program with tanh in both float types, integer powers and scalar outputs
# of every dtype, compiled with Numba's passes (QUABLA_DIRECT=0: every part goes to Numba, as
# those that direct.py does not translate do) and the collector watched.
PROGRAM = textwrap.dedent("""
    import collections, gc, json, sys
    FULL_CPU_TARGET = ("numba.np.arraymath", "numba.np.arrayobj", "numba.cpython.unicode",
                       "numba.np.npdatetime", "numba.core.inline_closurecall",
                       "numba.typed.typeddict", "numba.typed.typedlist")
    import numpy as np
    import quabla as qb
    import lowering.numba_cpu.runtime  # noqa: F401 - imports Numba
    import numba.core.event as event

    passes = collections.Counter()
    compiling = []
    collections_during = []

    class Passes(event.Listener):
        def on_start(self, ev):
            passes[ev.data["name"].split(" [")[0]] += 1
        def on_end(self, ev):
            pass

    class Compiling(event.Listener):
        def on_start(self, ev):
            compiling.append(1)
        def on_end(self, ev):
            compiling.pop()

    event.register("numba:run_pass", Passes())
    event.register("numba:run_pass", Compiling())
    gc.callbacks.append(lambda phase, info: compiling and phase == "start"
                        and collections_during.append(info["generation"]))

    def f(x, y):
        t = qb.tanh(x) ** 3 + qb.sum(qb.tanh(y)).astype(qb.float64)
        return qb.sum(t * t), qb.sum(y ** 2), qb.any(x > 0.5), t
    x = qb.array(np.linspace(-2.0, 2.0, 7))
    y = qb.array(np.linspace(-1.0, 3.0, 5).astype(np.float32))
    out = qb.jit(f)(x, y)
    from numba.core.runtime import rtsys
    first = {"passes": dict(passes), "collections": list(collections_during),
             "scipy_linalg": "scipy.linalg" in sys.modules, "nrt": rtsys._init,
             "loaded": [m for m in FULL_CPU_TARGET if m in sys.modules]}

    # then a program that calls an array kernel (kernels.py), and the user's own Numba code
    a = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
    solved = qb.jit(qb.linalg.solve)(a, np.arange(3.0))
    import numba
    from numba.typed import List

    @numba.njit
    def own(v):
        items = List()
        for e in v:
            items.append(np.sin(e) + 1.0)
        return np.sum(np.asarray(v) * 2.0), len(items), items[1]

    print(json.dumps(dict(first, gc_enabled=gc.isenabled(),
                          out=[np.asarray(o).tolist() for o in out],
                          solved=np.asarray(solved).tolist(), own=list(own(np.arange(4.0))))))
""")


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    path = tmp_path_factory.mktemp("setup")
    env = dict(os.environ, QUABLA_CACHE_DIR=str(path / "quabla"),
               NUMBA_CACHE_DIR=str(path / "numba"), PYTHONPATH=ROOT, QUABLA_DIRECT="0")
    env.pop("QUABLA_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_only_the_entry_is_translated_and_typed(cold):
    # tanh was a Numba function compiled per float type; integer powers and casts were
    # Python helpers whose bytecode Numba translated again at every call site
    assert cold["passes"]["translate_bytecode"] == 1
    assert cold["passes"]["nopython_type_inference"] == 1


def test_entries_skip_the_passes_that_recompute_lifetimes(cold):
    # the rewrites before typing and phi stripping change nothing in generated code, and an
    # entry without reference counts needs no deletions: each pass recomputed the lifetime of
    # every variable over the whole entry, as IRProcessing does once
    assert not {"generic_rewrites", "strip_phis", "ir_legalization"} & set(cold["passes"])
    assert cold["passes"]["ir_processing"] == 1


def test_no_collection_while_numba_compiles(cold):
    assert cold["collections"] == []
    assert cold["gc_enabled"]


def test_no_scipy_linalg_without_products(cold):
    assert not cold["scipy_linalg"]


def test_the_full_cpu_target_is_not_loaded(cold):
    assert cold["loaded"] == []
    assert not cold["nrt"]  # an entry allocates nothing


def test_kernels_and_the_users_numba_after_an_entry(cold):
    a = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
    np.testing.assert_allclose(cold["solved"], np.linalg.solve(a, np.arange(3.0)), rtol=1e-12)
    assert cold["own"] == [12.0, 4, np.sin(1.0) + 1.0]


def test_cold_process_results(cold):
    x = np.linspace(-2.0, 2.0, 7)
    y = np.linspace(-1.0, 3.0, 5).astype(np.float32)
    t = np.tanh(x) ** 3 + np.float64(np.sum(np.tanh(y)))
    np.testing.assert_allclose(cold["out"][0], np.sum(t * t), rtol=1e-6)
    assert cold["out"][1] == float(np.sum(y.astype(np.float32) ** 2))
    assert cold["out"][2] is True
    np.testing.assert_allclose(cold["out"][3], t, rtol=1e-6)


def _fused(x, y, z):
    """x * y + z rounded once (a fused multiply-add), element by element, exactly."""
    def one(a, b, c):
        try:
            return float(Fraction(a) * Fraction(b) + Fraction(c))  # int / int: rounded once
        except (OverflowError, ValueError):  # infinities, NaN, overflow: as the hardware
            return a * b + c
    return np.frompyfunc(one, 3, 1)(*np.broadcast_arrays(x, y, z)).astype(np.float64)


def _tanh_reference(x):
    """The runtime's tanh (lowering/numba_cpu/scalar_ir.py) transcribed to NumPy float64, in
    the same order of operations, its fused multiply-adds by ``_fused``: the compiled one
    must give exactly these bits."""
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        ax = np.abs(x)
        z = x * x
        u = 2.0 * np.where(ax < 22.0, ax, 22.0)
        k = np.floor(u * 1.4426950408889634 + 0.5)
        hi = u - k * 6.93147180369123816490e-01
        lo = k * 1.90821492927058770002e-10
        r = hi - lo
        s = r * r
        acc = 4.13813679705723846039e-08
        for coefficient in (-1.65339022054652515390e-06, 6.61375632143793436117e-05,
                            -2.77777777770155933842e-03, 1.66666666666666019037e-01):
            acc = _fused(s, acc, coefficient)
        d = 2.0 - _fused(-s, acc, r)
        scale = ((k.astype(np.int64) + 1023) << 52).view(np.float64)
        small = ax < 0.625
        p = _fused(_fused(-9.64399179425052238628e-1, z, -9.92877231001918586564e1), z,
                   -1.61468768441708447952e3)
        q = _fused(_fused(z + 1.12811678491632931402e2, z, 2.23548839060100448583e3), z,
                   4.84406305325125486048e3)
        t = (np.where(small, x * z * p, -2.0 * d)
             / np.where(small, q, _fused(d, scale + 1.0, (2.0 * r) * scale)))
        big = 1.0 + t
        res = np.where(small, np.where(x != 0.0, x + t, x), np.where(x < 0.0, -big, big))
        return np.where(ax == ax, res, x)


def _sweep():
    rng = np.random.default_rng(5)
    return np.concatenate([rng.standard_normal(4000) * s for s in (1e-3, 0.3, 1.0, 4.0, 30.0)]
                          + [np.linspace(-23.0, 23.0, 4001),
                             [0.0, -0.0, np.inf, -np.inf, np.nan, 0.625, -0.625, 22.0, 5e-324,
                              np.nextafter(0.625, 0.0), -np.nextafter(22.0, 0.0), 1e308]])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tanh_gives_the_bits_of_its_algorithm(dtype):
    with np.errstate(over="ignore"):
        x = _sweep().astype(dtype)
    out = np.asarray(qb.jit(qb.tanh)(qb.array(x)))
    expected = _tanh_reference(x.astype(np.float64)).astype(dtype)
    np.testing.assert_array_equal(out.view(np.uint8), expected.view(np.uint8))


def _compiled_and_interpreted(fn, *args):
    graph = staged_graph(qb.jit(fn), *args)
    arrays = [np.asarray(a) for a in args]
    return compile_graph(graph, {})(*arrays), evaluate(graph, arrays)


@pytest.mark.parametrize("dtype", [qb.float64, qb.float32])
def test_integer_powers_and_casts_match_the_interpreter_bitwise(dtype):
    def fn(x):
        powers = [x ** n for n in (0, 1, 2, 3, 5, 8, 13, 64, 1000)]
        return (sum(powers[1:], powers[0]), qb.sum(x ** 7), qb.sum(x).astype(qb.float64),
                qb.sum(x).astype(qb.float32), qb.any(x > 1.0))
    x = qb.array(np.linspace(-1.1, 1.3, 7), dtype)  # sums of up to 8 go in order in NumPy
    native, reference = _compiled_and_interpreted(fn, x)
    for a, b in zip(native, reference):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.atleast_1d(a).view(np.uint8),
                                      np.atleast_1d(b).view(np.uint8))


# Float row indices at every edge of the rule: NaN, infinities, beyond the int64 range, around
# and beyond either end, negative zero, fractions truncated toward zero.
INDICES = [np.nan, np.inf, -np.inf, 1e18, -1e18, 3e20, -3e20, 0.0, -0.0, 0.7, -0.7, 1.9, 4.0,
           4.999, 5.0, 6.5, -1.0, -1.5, -4.2, -5.0, -5.5, -6.0, 2.0 ** 62, -(2.0 ** 63)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_clamped_row_indices_match_the_rule(dtype):
    x = qb.array(np.arange(5.0) * 10.0)
    indices = np.array(INDICES, dtype)
    rows = np.arange(5.0)[clamp_index(indices, 5)] * 10.0
    one = qb.jit(lambda x, i: x[i])  # one scalar index: a row of x
    assert [float(one(x, qb.array(i, dtype))) for i in indices] == rows.tolist()
    batched = qb.jit(qb.vmap(lambda i, x: x[i], in_axes=(0, None)))  # an index per row
    assert np.asarray(batched(qb.array(indices), x)).tolist() == rows.tolist()


# A product large enough for BLAS, compiled (cold) and then loaded from the cache (warm) in
# processes of their own: NumPy's OpenBLAS is found in the process without loading anything
# (SciPy is not imported at all); where SciPy's BLAS serves instead, its dgemm comes from its
# cython_blas extension alone, so neither process imports scipy.linalg (~0.15 s); the warm one
# does not import Numba; SciPy's own import of the extension afterwards is unaffected.
BLAS_PROGRAM = textwrap.dedent("""
    import importlib.util, json, sys
    import numpy as np
    import quabla as qb
    a = np.linspace(-1.0, 1.0, 96 * 96).reshape(96, 96)
    b = np.cos(a)
    out = np.asarray(qb.jit(lambda a, b: a @ b)(qb.array(a), qb.array(b)))
    from lowering import fortran
    report = {"scipy_linalg": "scipy.linalg" in sys.modules, "numba": "numba" in sys.modules,
              "scipy": "scipy" in sys.modules, "origin": fortran.origin(),
              "error": float(np.max(np.abs(out - a @ b)))}
    if importlib.util.find_spec("scipy"):
        import scipy.linalg.cython_blas as blas
        import scipy.linalg
        report["scipy_attribute"] = scipy.linalg.cython_blas is blas
    print(json.dumps(report))
""")


def test_blas_programs_import_neither_scipy_linalg_nor_numba_warm(tmp_path):
    from lowering.numba_cpu.linalg import blas_available

    if not blas_available():
        pytest.skip("no BLAS here")
    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path / "quabla"),
               NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=ROOT)
    env.pop("QUABLA_BACKEND", None)
    reports = []
    for _ in ("cold", "warm"):
        out = subprocess.run([sys.executable, "-c", BLAS_PROGRAM], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        reports.append(json.loads(out.stdout.splitlines()[-1]))
    cold, warm = reports
    assert not cold["scipy_linalg"] and not warm["scipy_linalg"] and not warm["numba"]
    assert cold["error"] < 1e-12 and warm["error"] < 1e-12
    assert cold["origin"] == warm["origin"] != ""
    if cold["origin"].startswith("numpy"):  # NumPy's own: nothing of SciPy's is loaded
        assert not cold["scipy"] and not warm["scipy"]
    assert cold.get("scipy_attribute", True) and warm.get("scipy_attribute", True)


# A loop of 8 iterations that sums into one slot: LLVM's unroller (O2) flattens it.
_LOOP_IR = textwrap.dedent("""
    define void @sum8(ptr noalias %x, ptr noalias %out) {
    entry:
      br label %loop
    loop:
      %i = phi i64 [ 0, %entry ], [ %next, %loop ]
      %acc = phi double [ 0.0, %entry ], [ %sum, %loop ]
      %p = getelementptr double, ptr %x, i64 %i
      %v = load double, ptr %p
      %sum = fadd double %acc, %v
      %next = add i64 %i, 1
      %done = icmp eq i64 %next, 8
      br i1 %done, label %exit, label %loop
    exit:
      store double %sum, ptr %out
      ret void
    }
""")


def _optimised(unroll):
    import llvmlite.binding as llvm

    from lowering.numba_cpu import machine

    module = llvm.parse_assembly(_LOOP_IR)
    machine.optimise(module, unroll=unroll)
    return str(module.get_function("sum8"))


def test_entries_keep_their_loops_and_kernels_unroll():
    """Entries are optimised without LLVM's loop unroller (a tenth to a third of their LLVM
    time, steps within noise: docs/compile-time.md); the kernels written in IR keep it."""
    entry, kernel = _optimised(unroll=False), _optimised(unroll=True)
    assert "phi" in entry and entry.count("fadd") == 1  # still a loop
    assert "phi" not in kernel and kernel.count("fadd") == 8  # unrolled: eight adds in a row


def test_modules_take_the_layout_of_whichever_target_machine_was_made():
    """A translated module names the host's data layout, taken from a target machine made
    already (an edit's quick one), which both machines share."""
    script = textwrap.dedent("""
        import json
        from lowering.numba_cpu import machine
        quick = str(machine.target_machine(quick=True).target_data)
        made = machine.module_target()
        print(json.dumps([made[1], quick, str(machine.target_machine().target_data)]))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT)
    made, quick, optimised = json.loads(subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True,
        check=True).stdout)
    assert made == quick == optimised and made.startswith(("e-", "E-"))


# A fresh process: LLVM's library loaded by ``lowering.prepare`` on a thread of its own, before
# anything imports llvmlite's binding; once a process; a fork waits for the load.
PRELOAD_PROGRAM = textwrap.dedent("""
    import json, os, sys, threading, time
    import numpy as np
    import quabla as qb
    import lowering

    def loaded():
        with open("/proc/self/maps") as maps:
            return any("libllvmlite" in line for line in maps)

    def loaders():
        return [t for t in threading.enumerate() if t.name == "quabla-load-llvm"]

    report = {"before": loaded()}
    for device in ("gpu", 3, "cuda:7"):  # compile names these; prepare starts nothing
        lowering.prepare(device)
    report["refused"] = len(loaders())
    lowering.prepare("cpu")
    started = loaders()
    lowering.prepare(None)
    report["started"], report["again"] = len(started), len(loaders())
    if os.fork() == 0:
        os._exit(0)
    report["alive_after_fork"] = any(t.is_alive() for t in started)
    os.wait()
    report["loaded"] = loaded()
    report["binding"] = "llvmlite.binding" in sys.modules
    x = np.linspace(0.0, 1.0, 5)
    report["error"] = float(np.max(np.abs(np.asarray(qb.jit(qb.sin)(x)) - np.sin(x))))
    print(json.dumps(report))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_llvm_is_loaded_on_a_thread_once_and_forks_wait_for_it(tmp_path):
    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path), PYTHONPATH=ROOT)
    env.pop("QUABLA_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", PRELOAD_PROGRAM], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.splitlines()[-1])
    assert not report["before"] and report["refused"] == 0
    assert report["again"] <= report["started"] <= 1
    assert not report["alive_after_fork"]
    assert report["loaded"] and not report["binding"]  # loaded, and not by llvmlite's import
    assert report["error"] == 0.0


def test_a_jit_call_prepares_its_device_before_it_traces(monkeypatch):
    """A missed signature has its device's back end start loading its compiler (``prepare``)
    before the function is traced, so the load overlaps the tracing."""
    import quabla.staging.staged as staged

    events = []
    monkeypatch.setattr(staged, "prepare", lambda device: events.append(("prepare", device)))

    def f(x):
        events.append(("trace",))
        return qb.exp(x) + 1.0

    x = np.linspace(0.0, 1.0, 3)
    np.testing.assert_allclose(np.asarray(qb.jit(f, device="cpu")(x)), np.exp(x) + 1.0)
    assert events == [("prepare", "cpu"), ("trace",)]
