"""Threaded tile loops (lowering/numba_cpu/threads.py; codegen's phased entries) against the
reference interpreter.

Every program here is compiled with its tile loop split across threads, whatever its size
(``threads.WORTH_ELEMENTS`` is set to 0), for 2 and 3 threads: 3 threads over 2 or 4 tiles
leave a thread with no tile or with twice the others'. What is checked: the values (partial
sums combined after the loop, 0-d values and views taken over from before the loop, exports
written by every thread), the same bits on every call and from concurrent callers for a given
thread count, and the entry called from users' Numba code. No timing here.
"""

import ast
import concurrent.futures
import os
import re

import numpy as np
import pytest

import quabla as qb
import test_loop_nests as loops
from quabla.core.interpret import evaluate
from lowering.numba_cpu import compile_graph, direct, module_source, threads
from lowering.numba_cpu.linalg import blas_available
from lowering.loopnest.schedule import TileBegin, schedule

TOL = dict(rtol=1e-10, atol=1e-12)


@pytest.fixture
def split(monkeypatch):
    """``split(n)``: compile every tile loop from here on for ``n`` threads."""
    monkeypatch.setattr(threads, "WORTH_ELEMENTS", 0)

    def use(n):
        monkeypatch.setenv("QUABLA_NUM_THREADS", str(n))
    return use


def _threaded(fn, *args):
    """``fn`` staged and compiled threaded: ``(graph, executable, values, expected)``."""
    args = tuple(qb.tree.map(lambda a: qb.array(np.asarray(a)), a) for a in args)
    graph = qb.jit(fn).lower(*args).graph
    assert module_source(graph)[3] is not None, "the program has no threaded tile loop"
    values = [leaf.numpy() for leaf in qb.tree.leaves(args)]
    return graph, compile_graph(graph, {}), values, evaluate(graph, values)


def _check(executable, values, expected):
    first, again = executable(*values), executable(*values)
    for a, b, e in zip(first, again, expected):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_allclose(a, e, **TOL)
        np.testing.assert_array_equal(a, b)
    return first


def _mixed(x, w, v):
    """Everything that crosses a threaded loop: a 0-d value and a region computed before it
    and read in it and after it; sums, maxima, minima, any and all over the rows into arrays
    and into 0-d values; a product summing over the rows; tiles exported whole (``g``, read
    reversed after the loop) and a region after the loop."""
    c = qb.sum(w * w) / 100.0
    k = qb.fori_loop(0, 3, lambda i, a: a * 0.5 + c, c)
    h = qb.tanh(x @ w * k + v[None, :])
    g = (h * x[::-1] * c) @ w.T
    s = qb.sum(g * h, axis=1)
    spread = qb.max(g, axis=0) - qb.min(h, axis=0)
    big = qb.any(h > 0.5, axis=0)
    after = (g[::-1] @ w)[:5]
    later = qb.scan(lambda q, i: (q * 0.9 + qb.sum(s) * c, q), k, length=4)[1]
    return (s, qb.where(big, spread, -spread), qb.all(h > -0.5, axis=0), h.T @ g, after,
            later, qb.sum(s * s) * c, qb.max(g), qb.min(h * k))


@pytest.mark.parametrize("n_threads", [2, 3, 300])  # 300: as many as there are tiles
@pytest.mark.parametrize("rows", [256, 320])
def test_threaded_loops_match_the_interpreter(split, n_threads, rows):
    split(n_threads)
    rng = np.random.default_rng(20)
    x, w, v = rng.uniform(-1, 1, (rows, 32)), rng.uniform(-1, 1, (32, 32)) / 4, rng.uniform(-1, 1, 32)
    for fn in (_mixed, loops.tiled_rows):
        graph, executable, values, expected = _threaded(fn, x, w, v)
        _check(executable, values, expected)


def test_a_threaded_entry_whose_phases_before_and_after_are_alike(split):
    """A row-wise variance under vmap: the whole program is the tile loop, so the phases
    before and after it are the same (empty) part, one object that the entry calling the
    phases links and declares once; called twice, and again from the cache."""
    split(2)
    x = np.random.default_rng(6).normal(size=(512, 64))
    fn = lambda x: qb.vmap(lambda r: qb.var(qb.exp(r)))(x)  # noqa: E731
    graph, executable, values, expected = _threaded(fn, x)
    _check(executable, values, expected)
    _check(compile_graph(graph, {}), values, expected)


@pytest.mark.parametrize("n_threads", [2, 3])
@pytest.mark.parametrize("dtype", [qb.float64, qb.float32])
def test_threaded_mlp_pinn_gradient(split, n_threads, dtype):
    split(n_threads)
    rng = np.random.default_rng(21)
    params = qb.tree.map(lambda a: qb.array(a, dtype=dtype), loops.mlp_params(16, rng))
    x = qb.array(np.linspace(0.0, 1.0, 384), dtype=dtype)
    graph, executable, values, expected = _threaded(
        qb.value_and_grad(loops.mlp, has_aux=True), params, x)
    tol = loops.TOL[dtype]
    first, again = executable(*values), executable(*values)
    for a, b, e in zip(first, again, expected):
        np.testing.assert_allclose(a, e, **tol)
        np.testing.assert_array_equal(a, b)


def test_results_are_the_same_bits_for_a_given_thread_count(split):
    """Concurrent callers each get their own scratch; the blocks of tiles and the order the
    partials are combined in are fixed by the thread count, so every call gives the same bits,
    close to (not the bits of) the one-thread program's."""
    rng = np.random.default_rng(22)
    x, w, v = rng.uniform(-1, 1, (320, 32)), rng.uniform(-1, 1, (32, 32)) / 4, rng.uniform(-1, 1, 32)
    split(3)
    _, executable, values, expected = _threaded(loops.tiled_rows, x, w, v)
    reference = executable(*values)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda _: executable(*values), range(12)))
    for run in runs:
        for a, b in zip(run, reference):
            np.testing.assert_array_equal(a, b)
    split(1)
    graph = qb.jit(loops.tiled_rows).lower(*(qb.array(a) for a in (x, w, v))).graph
    assert module_source(graph)[3] is None  # one thread: an entry called once
    for a, b in zip(compile_graph(graph, {})(*values), reference):
        np.testing.assert_allclose(a, b, **TOL)


@pytest.mark.parametrize("fn, make_args", loops.tiled_case_params())
def test_primitives_batched_through_a_threaded_loop(split, fn, make_args):
    split(3)
    program, args = loops.batched_program(fn, make_args)
    args = [qb.array(a) for a in args]
    graph = qb.jit(program).lower(*args).graph
    tiled = any(isinstance(st, TileBegin) for st in schedule(graph))
    assert (module_source(graph)[3] is not None) == tiled  # every tile loop is threaded
    values = [a.numpy() for a in args]
    expected = evaluate(graph, values)
    _check(compile_graph(graph, {}), values, expected)


def test_a_threaded_entry_called_from_numba(split):
    pytest.importorskip("numba")
    split(2)
    rng = np.random.default_rng(23)
    x, w, v = rng.uniform(-1, 1, (256, 32)), rng.uniform(-1, 1, (32, 32)) / 4, rng.uniform(-1, 1, 32)
    f = lambda x, w, v: (qb.sum(qb.tanh(x @ w + v[None, :]) @ w, axis=0), qb.sum(x @ w))
    compiled = qb.jit(f).lower(*(qb.ShapeDtype(a.shape) for a in (x, w, v))).compile()
    assert compiled.executable.phases  # a threaded entry
    rows, total = compiled.numba(x, w, v)
    h = np.tanh(x @ w + v[None, :])
    np.testing.assert_allclose(rows, (h @ w).sum(axis=0), **TOL)
    np.testing.assert_allclose(total, (x @ w).sum(), **TOL)


@pytest.mark.parametrize("extent, tile, n", [(256, 128, 3), (320, 80, 3), (1024, 128, 2),
                                             (96, 16, 4), (64, 32, 1)])
def test_blocks_cover_every_tile_once_in_order(extent, tile, n):
    blocks = threads.blocks(extent, tile, n)
    assert len(blocks) == n and blocks[0][0] == 0 and blocks[-1][1] == extent
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    assert all(lo <= hi and lo % tile == 0 for lo, hi in blocks)
    sizes = [hi - lo for lo, hi in blocks]
    assert max(sizes) - min(sizes) <= tile


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_a_bad_thread_count_is_refused(monkeypatch, value):
    monkeypatch.setenv("QUABLA_NUM_THREADS", value)
    with pytest.raises(ValueError, match="QUABLA_NUM_THREADS"):
        threads.count()


def test_blas_runs_on_one_thread_in_every_block():
    """Products inside a threaded loop must not start BLAS threads of their own; BLAS's own
    setting is back when the last threaded loop ends."""
    controller = threads.blas_controller()
    if controller is None or not controller.lib_controllers:
        pytest.skip("no BLAS that threadpoolctl controls")

    def blas_threads():
        return [lib.num_threads for lib in controller.lib_controllers]

    before = blas_threads()
    seen = []
    threads.run_blocks(lambda row: seen.append((row[-1], set(blas_threads()))), ("base",),
                       [(0,), (1,), (2,)])
    assert sorted(seen) == [(0, {1}), (1, {1}), (2, {1})]
    assert blas_threads() == before


def test_blas_is_left_alone_when_no_product_in_the_loop_is_large():
    controller = threads.blas_controller()
    if controller is None or not controller.lib_controllers:
        pytest.skip("no BLAS that threadpoolctl controls")
    before = [lib.num_threads for lib in controller.lib_controllers]
    seen = []
    threads.run_blocks(lambda row: seen.append([lib.num_threads for lib in
                                                controller.lib_controllers]),
                       (), [(0,), (1,)], blas=False)
    assert seen == [before, before]


class _Offers:
    """A pool that counts what it is offered and never runs it (the caller then runs all)."""
    offered = 0

    def submit(self, fn, *args):
        self.offered += 1


def test_blocks_no_thread_began_run_on_the_caller():
    """A pool whose threads are all busy (a loaded machine) does not hold up the call: the
    caller runs every block, once each, and each with its own control row."""
    ran, pool = [], _Offers()
    threads.run_blocks(lambda row: ran.append(row), ("base",), [(0,), (1,), (2,)], pool=pool)
    assert ran == [("base", 0), ("base", 1), ("base", 2)] and pool.offered == 2


def test_blocks_keep_to_the_faster_way_and_time_the_other_again():
    pool, ran = _Offers(), []
    blocks = threads.Blocks(blas=False, pool=pool)
    rows = [(0,), (1,)]
    blocks((lambda row: ran.append(row)), (), rows)  # the first call: one thread
    blocks((lambda row: ran.append(row)), (), rows)  # the second: threads
    assert pool.offered == 1 and ran == rows + rows and None not in blocks.seconds
    for fast, offers in (("threads", threads.Blocks.EXPLORE - 1), ("one", 1)):
        pool.offered, blocks.calls = 0, 0
        blocks.seconds = [2.0, 1.0] if fast == "threads" else [1.0, 2.0]
        for _ in range(threads.Blocks.EXPLORE):  # times far below a second keep the order
            blocks((lambda row: None), (), rows)
        assert pool.offered == offers, fast


def test_an_error_in_a_block_returns_only_when_no_other_block_runs():
    """The caller's scratch goes back to its pool when the call ends: no block may still be
    running then, nor begin later."""
    import time

    events = []

    def fn(row):
        if row == (0,):
            time.sleep(0.01)  # a worker may begin block 1 meanwhile, or not yet
            raise RuntimeError("block 0")
        events.append(("begin", row))
        time.sleep(0.02)
        events.append(("end", row))

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for _ in range(5):
            events.clear()
            with pytest.raises(RuntimeError, match="block 0"):
                threads.run_blocks(fn, (), [(0,), (1,), (2,)], blas=False, pool=pool)
            seen = list(events)
            assert all(("end", row) in seen for kind, row in seen if kind == "begin")
            time.sleep(0.05)
            assert events == seen, "a block began after the call returned"


def test_each_block_runs_once_whoever_runs_it():
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        for _ in range(50):
            ran = []
            threads.run_blocks(ran.append, (), [(k,) for k in range(4)], blas=False, pool=pool)
            assert sorted(ran) == [(0,), (1,), (2,), (3,)]


@pytest.mark.parametrize("width, dtype, blas", [(64, np.float64, False), (32, np.float32, False),
                                               (90, np.float32, True)])
def test_the_entry_says_whether_blas_needs_holding_to_one_thread(split, width, dtype, blas):
    """Only a product over ``threads.SERIAL_BLAS`` multiplies in a tile makes BLAS start
    threads of its own (a float32 one: a tile's float64 right operand is too small): smaller
    ones leave its setting alone (changing it costs ~20 us). Without SciPy's BLAS, none."""
    split(2)
    x, w = np.ones((4096, width), dtype), np.ones((width, width), dtype)
    graph = qb.jit(lambda x, w: qb.sum(qb.tanh(x @ w) @ w, axis=0)).lower(x, w).graph
    phases = module_source(graph)[3]
    assert phases is not None and phases.blas == (blas and blas_available())


@pytest.mark.parametrize("cores, cpus, environ, expected", [
    (2, 2, {}, 2),                                     # alone: every core
    (2, 2, {"MPI_LOCALNRANKS": "2"}, 1),               # MPICH: 2 ranks share 2 cores
    (2, 2, {"MPI_LOCALNRANKS": "3"}, 1),               # oversubscribed: still 1
    (16, 16, {"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 4),  # Open MPI, unbound ranks
    (4, 16, {"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 4),   # bound to 4 cores each: all 4
    (8, 16, {"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 4),   # bound per socket, 2 ranks each
    (4, 4, {"MPI_LOCALNRANKS": "2"}, 2),               # a container's 4 cpus of 64, 2 ranks
    (1, 16, {"MPI_LOCALNRANKS": "16"}, 1),
    (6, 8, {"MPI_LOCALNRANKS": "bad"}, 6),             # unreadable: as if alone
])
def test_the_default_thread_count_is_this_process_share(cores, cpus, environ, expected):
    assert threads.share(cores, cpus, environ) == expected


def test_thread_counts_follow_the_affinity(monkeypatch):
    """Without QUABLA_NUM_THREADS, the cores this process may run on (numbers, no timing)."""
    monkeypatch.delenv("QUABLA_NUM_THREADS", raising=False)
    for name in threads.LOCAL_SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert threads.count() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("MPI_LOCALNRANKS", str(2 * len(os.sched_getaffinity(0))))
    assert threads.count() == 1
    monkeypatch.setenv("QUABLA_NUM_THREADS", "3")  # the user's choice wins
    assert threads.count() == 3


_BLAS_SCRIPT = """
import os, sys
import numpy as np
import quabla as qb
from lowering.numba_cpu import threads
x = qb.array(np.ones((64, 64)))
qb.jit(lambda a: a @ a)(x)              # a program: BLAS is set to this process's share
controller = threads.blas_controller()
print(threads.count(), sorted({lib.num_threads for lib in controller.lib_controllers}))
"""


def test_blas_follows_the_ranks_of_the_node(tmp_path):
    """Two ranks on this node (as MPICH's launcher says): one BLAS thread per core each, unless
    a BLAS variable is set. (In a process of its own: the setting is process-wide.)"""
    import subprocess
    import sys

    pytest.importorskip("threadpoolctl")
    here = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in os.environ.items()
           if k not in threads.BLAS_VARIABLES + ("QUABLA_NUM_THREADS",)}
    env.update(MPI_LOCALNRANKS=str(2 * len(os.sched_getaffinity(0))),
               QUABLA_CACHE_DIR=str(tmp_path / "qb"), NUMBA_CACHE_DIR=str(tmp_path / "nb"),
               PYTHONPATH=os.path.dirname(here))
    done = subprocess.run([sys.executable, "-c", _BLAS_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "[1]"]
    done = subprocess.run([sys.executable, "-c", _BLAS_SCRIPT],
                          env=dict(env, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", f"[{min(2, os.cpu_count())}]"]


_FORK_SCRIPT = """
import multiprocessing, sys
import numpy as np
import test_threads as t
from lowering.numba_cpu import threads
threads.WORTH_ELEMENTS = 0
rng = np.random.default_rng(24)
args = rng.uniform(-1, 1, (256, 32)), rng.uniform(-1, 1, (32, 32)) / 4, rng.uniform(-1, 1, 32)
_, executable, values, expected = t._threaded(t.loops.tiled_rows, *args)
executable(*values)  # the parent's pool exists now

def child():
    out = executable(*values)
    sys.exit(0 if all(np.allclose(a, e, **t.TOL) for a, e in zip(out, expected)) else 1)

process = multiprocessing.get_context("fork").Process(target=child)
process.start()
process.join(60)
if process.is_alive():
    process.kill()
    sys.exit("the forked child hung in a threaded call")
sys.exit(process.exitcode)
"""


def test_a_forked_child_runs_threaded_programs(tmp_path):
    """The pool's threads do not survive fork: a child that inherited the pool makes its own.
    (In a process of its own: this one may hold other libraries' threads.)"""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, QUABLA_NUM_THREADS="2", QUABLA_CACHE_DIR=str(tmp_path / "qb"),
               NUMBA_CACHE_DIR=str(tmp_path / "nb"),
               PYTHONPATH=os.pathsep.join([here, os.path.dirname(here)]))
    done = subprocess.run([sys.executable, "-c", _FORK_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_penalty_recompiles_only_the_last_part_of_a_threaded_entry(split):
    """A threaded PINN gradient (a vmapped second derivative of an MLP) whose work after the
    tile loop is long enough ends in a part of its own: the schedule's last tail phase
    (codegen's ``phased``; ``native.sequence`` runs both parts for the last phase). An L2
    penalty on the parameters changes that part alone; both programs give the interpreter's
    results, twice."""
    split(2)
    rng = np.random.default_rng(5)
    params = [(rng.normal(size=(m, n)) / np.sqrt(m), 0.01 * rng.normal(size=n))
              for m, n in ((1, 32), (32, 32), (32, 1))]
    xs = rng.uniform(0.0, 1.0, 512)

    def net(p, t):
        h = qb.reshape(t, (1,))
        for w, b in p[:-1]:
            h = qb.tanh(h @ w + b)
        return (h @ p[-1][0] + p[-1][1])[0]

    def loss(p, xs, penalty):
        u_xx = qb.vmap(qb.grad(qb.grad(net, 1), 1), in_axes=(None, 0))(p, xs)
        out = qb.mean((u_xx + qb.sin(xs)) ** 2)
        return out + 1e-4 * sum(qb.sum(a * a) for a in qb.tree.leaves(p)) if penalty else out

    sources = []
    for penalty in (False, True):
        fn = qb.grad(lambda p, xs, penalty=penalty: loss(p, xs, penalty))
        graph, executable, values, expected = _threaded(fn, params, xs)
        _check(executable, values, expected)
        sources.append(module_source(graph)[0])
    original, edited = sources
    assert len(original) == len(edited) == 4
    assert original[:3] == edited[:3] and original[3] != edited[3]


def test_a_thread_s_own_scratch_is_apart_from_every_other_argument(split):
    """The tile loop's part reads and writes its thread's own scratch through an argument
    chosen at run time (``_arg(args, k + P * thread, ...)``). Its accesses get an alias scope
    of their own, apart from the inputs', the shared scratch's and the constants', so LLVM
    vectorises the loop's bodies without overlap checks (without it, a mixture model's
    gradient under 2 threads took 3x its time on one); the values stay the interpreter's."""
    split(2)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(512, 2))

    def nll(mu, log_s):
        z = (x[:, None, :] - mu[None]) / qb.exp(log_s)[None]
        return -qb.mean(qb.logsumexp(-0.5 * qb.sum(z * z, axis=-1) - qb.sum(log_s, -1), axis=1))

    fn = qb.grad(nll, (0, 1))
    graph, executable, values, expected = _threaded(fn, rng.normal(size=(8, 2)),
                                                    0.1 * rng.normal(size=(8, 2)))
    _check(executable, values, expected)
    loop = [s for s in module_source(graph)[0] if "thread = ctl[1]" in s]
    assert len(loop) == 1
    body = ast.parse(loop[0]).body[-1].body
    bases, arguments = direct._pointer_bases(body)
    own = {name for name, k in bases.items() if isinstance(k, tuple)}
    assert own and all(bases[name][0] == "thread" for name in own)
    assert any(isinstance(k, int) for k in arguments)
    text = direct.translate(loop[0], "loop")
    scope = re.search(r'^(![0-9]+) = !{ !"quabla\.arg[0-9]+\.thread"', text, re.M).group(1)
    own_list = re.search(rf"^(![0-9]+) = !{{ {scope} }}$", text, re.M).group(1)
    stores = [line for line in text.splitlines() if "store double" in line]
    assert sum(f"!alias.scope {own_list}," in line for line in stores) >= 4
