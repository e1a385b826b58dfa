"""Long-running processes: linked machine code is shared by digest and freed with its last user."""

import gc
import os
import subprocess
import sys
import textwrap

import pytest

import quabla as qb
from lowering import native
from test_compile_cache import ROOT

MEASURE = textwrap.dedent("""
    import gc, os, sys, warnings
    import quabla as qb
    warnings.simplefilter("ignore")  # every call evicts a trace, on purpose
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    xs = [qb.ones(n) for n in range(1, 10)]
    f = qb.jit(lambda x: x * 2.0 + 1.0, max_traces=8)
    def retrace(i):
        f(xs[i % 9])  # 9 shapes through 8 traces: every call misses
    def new_function(i):
        qb.jit(lambda x: x * 2.0 - 1.0)(xs[2])
    step, calls = {"retrace": (retrace, 10000), "new_function": (new_function, 2000)}[sys.argv[1]]
    for i in range(100):  # compiles everything once, so the loop below loads from the cache
        step(i)
    gc.collect()
    before = rss()
    for i in range(calls):
        step(i)
    gc.collect()
    print(rss() - before, sum(name.startswith("quabla_cache") for name in sys.modules))
""")


def _growth(tmp_path, case):
    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=ROOT)
    env.pop("QUABLA_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", MEASURE, case], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    return int(out[0]) / 2**20, int(out[1])


def test_retracing_calls_do_not_grow_memory(tmp_path):
    """10,000 calls that each evict a trace and load another from the compile cache."""
    growth, modules = _growth(tmp_path, "retrace")
    assert growth < 20, f"RSS grew by {growth:.1f} MB over 10,000 retracing calls"
    assert modules == 0, "generated modules stay in sys.modules"


def test_functions_created_in_a_loop_do_not_grow_memory(tmp_path):
    growth, _ = _growth(tmp_path, "new_function")
    assert growth < 10, f"RSS grew by {growth:.1f} MB over 2,000 new jitted functions"


def test_one_link_per_object_freed_with_its_last_user():
    x = qb.ones(4)
    gc.collect()  # garbage of earlier tests must not be freed mid-count
    before = native.linked_objects()
    first = qb.jit(lambda x: x * 3.0 - 0.5)
    second = qb.jit(lambda x: x * 3.0 - 0.5)  # another function, the same program
    assert first(x).tolist() == second(x).tolist() == [2.5] * 4
    assert native.linked_objects() == before + 1
    del first
    gc.collect()
    assert native.linked_objects() == before + 1, "freed while another function uses it"
    del second
    gc.collect()
    assert native.linked_objects() == before


def test_evicted_trace_frees_its_object():
    f = qb.jit(lambda x: x * 5.0 + 0.25, max_traces=1)
    f(qb.ones(2))
    gc.collect()
    linked = native.linked_objects()
    with pytest.warns(qb.RetraceWarning):
        assert f(qb.ones(3)).tolist() == [5.25] * 3
    assert native.linked_objects() == linked, "the evicted trace's machine code stayed linked"
