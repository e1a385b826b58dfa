"""An edit's new parts run as LLVM's quick pipeline compiles them, and are swapped for the
optimised ones (numba_cpu/__init__.py: ``_tiered``): the two give the same bits because a sum
whose adds may be reordered is vectorised as its loop's metadata fixes (direct.py:
``_sum_loops``), by either pipeline. Checked on translated bodies (sums of every kind, run
compiled both ways) and on whole edited programs (called before and after the swap, against
the interpreter, and every part found in the cache afterwards)."""

import textwrap

import numpy as np
import pytest

import quabla as qb
from quabla.core.interpret import evaluate
from lowering import cache, native, terms
from lowering.numba_cpu import (TermsExecutable, direct, entry_module, machine, optimised,
                                parts_compiled, sources, threads)

_DTYPES = {"float64": "float64", "float32": "float32"}


def _translated(body, arrays):
    header = "".join(f"{name} = _arg(args, {k}, 0, np.{_DTYPES[a.dtype.name]})\n"
                     for k, (name, a) in enumerate(arrays.items()))
    body = textwrap.indent(header + textwrap.dedent(body), "    ")
    source = entry_module("def quabla_entry(args):\n" + body)
    return direct.translation(cache.entry_key(source), source)


def _run(text, name, pipeline, arrays):
    code, symbols = direct.DirectEntry(text, name, pipeline).result()
    handle, address = native.load(code, name, native.resolve(symbols))
    copies = tuple(np.array(a, copy=True) for a in arrays)
    native.entry_function(address)(copies)
    return copies


# sums kept in a register: lengths with and without a remainder, float32, a call in the
# loop, a product of two arrays, two sums in one loop, a sum per row (the inner loop's)
_FIXED = {
    "squares": ("""
        i0 = 0
        while i0 < {n}:
            r0[0] = 0.0
            i0 += 1
        s = 0.0
        i0 = 0
        while i0 < {n}:
            s = _sum_add(s, v0[i0] * v0[i0])
            i0 += 1
        r0[0] = s
        """, 1),
    "log": ("""
        s = 0.0
        i0 = 0
        while i0 < {n}:
            s = _sum_add(s, math.log(1.5 + v0[i0] * v0[i0]))
            i0 += 1
        r0[0] = s
        """, 1),
    "two sums": ("""
        s = 0.0
        t = 0.0
        i0 = 0
        while i0 < {n}:
            s = _sum_add(s, v0[i0] * v1[i0])
            t = _sum_add(t, abs(v0[i0]) - v1[i0])
            i0 += 1
        r0[0] = s
        r0[1] = t
        """, 2),
    "rows": ("""
        i0 = 0
        while i0 < 3:
            s = 0.0
            i1 = 0
            while i1 < {m}:
                s = _sum_add(s, v0[{m} * i0 + i1] * 1.25)
                i1 += 1
            r0[i0] = s
            i0 += 1
        """, 3),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1000, 1003, 37])
@pytest.mark.parametrize("name", list(_FIXED))
def test_a_marked_sum_has_the_same_bits_from_either_pipeline(name, n, dtype):
    body, outputs = _FIXED[name]
    rng = np.random.default_rng(n)
    m = n // 3
    arrays = {"v0": rng.normal(size=n).astype(dtype), "v1": rng.normal(size=n).astype(dtype),
              "r0": np.zeros(outputs, dtype)}
    text, entry, _, free = _translated(body.format(n=n, m=m), arrays)
    assert "llvm.loop.vectorize.width" in text and "llvm.loop.interleave.count" in text
    assert not free
    quick, optimised_ = (_run(text, entry, pipeline, list(arrays.values()))[2]
                         for pipeline in (machine.QUICK, machine.OPTIMISED))
    assert quick.tobytes() == optimised_.tobytes()
    v0, v1 = (arrays[k].astype(np.float64) for k in ("v0", "v1"))
    expected = {"squares": [np.sum(v0 * v0)], "log": [np.sum(np.log(1.5 + v0 * v0))],
                "two sums": [np.sum(v0 * v1), np.sum(np.abs(v0) - v1)],
                "rows": [np.sum(v0[m * k:m * (k + 1)]) * 1.25 for k in range(3)]}[name]
    tolerance = 1e-12 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(quick, expected, rtol=tolerance, atol=tolerance * n)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fused_multiply_adds_give_the_same_bits_from_every_pipeline(dtype):
    """``tanh`` and ``exp`` are built of fused multiply-adds (scalar_ir.py): the fast
    instruction selector of the quick pipelines fuses them as the optimised one does, whether
    the loop is vectorised or not."""
    x = np.concatenate([np.random.default_rng(3).normal(size=997) * s for s in (0.3, 3.0, 30.0)])
    arrays = {"v0": x.astype(dtype), "r0": np.zeros(x.size, dtype), "r1": np.zeros(x.size, dtype)}
    text, entry, _, _ = _translated(f"""
        i0 = 0
        while i0 < {x.size}:
            r0[i0] = _tanh(v0[i0])
            r1[i0] = _exp(v0[i0])
            i0 += 1
        """, arrays)
    runs = [_run(text, entry, pipeline, list(arrays.values()))[1:]
            for pipeline in (machine.BARE, machine.QUICK, machine.OPTIMISED)]
    for run in runs[:2]:
        assert all(a.tobytes() == b.tobytes() for a, b in zip(run, runs[2]))
    rtol = 4e-16 if dtype == np.float64 else 2e-7
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(runs[2][0], np.tanh(arrays["v0"]), rtol=rtol)
        np.testing.assert_allclose(runs[2][1], np.exp(arrays["v0"]), rtol=rtol)


def test_a_sum_in_memory_or_outside_a_loop_is_not_marked():
    """A sum in an array element is left to LLVM's cost model (the part is ``free``: no
    quick tier for it), as is one in a loop around others; a sum outside any loop is in
    order (no ``reassoc``)."""
    arrays = {"v0": np.ones(40), "r0": np.zeros(4)}
    in_memory = """
        i0 = 0
        while i0 < 4:
            r0[i0] = 0.0
            i1 = 0
            while i1 < 10:
                r0[i0] = _sum_add(r0[i0], v0[10 * i0 + i1])
                i1 += 1
            i0 += 1
        """
    text, _, _, free = _translated(in_memory, arrays)
    assert free and "llvm.loop.vectorize" not in text
    around = """
        s = 0.0
        i0 = 0
        while i0 < 4:
            i1 = 0
            while i1 < 10:
                r0[i0] = v0[10 * i0 + i1]
                i1 += 1
            s = _sum_add(s, r0[i0])
            i0 += 1
        r0[0] = s
        """
    text, _, _, free = _translated(around, arrays)
    assert free and "llvm.loop.vectorize" not in text
    text, _, _, free = _translated("r0[0] = _sum_add(v0[0], v0[1])\n", arrays)
    assert not free and "reassoc" not in text


def _per_example(rng):
    w = qb.array(rng.normal(size=(40, 30)) / 6)
    x = qb.array(rng.normal(size=(16, 40)))

    def loss(w, xi):
        return qb.sum(qb.tanh(xi @ w) ** 2) + qb.sum(qb.log(1.0 + (xi @ w) ** 2))

    return lambda f: qb.vmap(qb.grad(f), in_axes=(None, 0)), loss, (w, x)


def _adam_like(rng):
    p = qb.array(rng.normal(size=(120, 90)) / 10)
    m = qb.array(rng.normal(size=(120, 90)) / 10)
    x = qb.array(rng.normal(size=(64, 120)))

    def loss(p, m):
        h = qb.tanh(x @ p)
        return qb.sum(h * h) + qb.sum(qb.log(1.0 + (h @ m.T) ** 2)) + qb.sum(p ** 4) / 4

    def step(f):
        def update(p, m):
            value, g = qb.value_and_grad(f)(p, m)
            m2 = 0.9 * m + 0.1 * g
            return value, p - 1e-2 * m2 / (qb.sqrt(qb.abs(m2)) + 1e-8), m2
        return update

    return step, loss, (p, m)


@pytest.mark.parametrize("cut", [True, False], ids=["terms", "whole"])
@pytest.mark.parametrize("program", [_per_example, _adam_like])
def test_an_edit_runs_quick_parts_then_the_optimised_ones_with_the_same_bits(program, cut,
                                                                             monkeypatch):
    """The edit (another loss term) compiles its new part quickly; the optimised part is then
    compiled, stored and swapped in: the entry's address changes, the results keep their bits
    and are the interpreter's, and every part of the program is in the cache. With ``cut``,
    the term added is a program of its own where the outputs are sums (lowering/terms.py):
    its parts are the edit's new ones; without, its parts are those of the schedule's tail."""
    if not cut:
        monkeypatch.setattr(terms, "SPLIT_NODES", 10**9)
    transform, loss, args = program(np.random.default_rng(3))
    weight = 1e-3 * (1.0 + np.random.default_rng().uniform())  # a program no run compiled

    def edited(first, *rest):
        return loss(first, *rest) + weight * qb.sum(first * first)

    qb.jit(transform(loss))(*args)  # the original, compiled
    optimised()
    before = parts_compiled()
    lowered = qb.jit(transform(edited)).lower(*args)
    compiled = lowered.compile()
    first = [np.asarray(x) for x in qb.tree.leaves(compiled(*args))]
    assert parts_compiled() - before == 1, "the edit compiled more than its last part"
    executable = compiled.executable
    if isinstance(executable, TermsExecutable):
        executable = executable.executables[-1]  # the term added
    address = executable.address
    optimised()
    assert executable.address != address, "the optimised part was not swapped in"
    second = [np.asarray(x) for x in qb.tree.leaves(compiled(*args))]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, second))
    compiled_sources = sources(lowered.graph, threads.count())
    assert all(cache.read_object(cache.entry_key(source)) is not None
               for source in compiled_sources)
    expected = evaluate(lowered.graph, [np.asarray(leaf) for leaf in qb.tree.leaves(args)])
    for ours, theirs in zip(second, expected):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_an_edit_s_part_whose_sums_are_free_is_compiled_optimised_at_once(monkeypatch):
    """A new part with a sum in an array element (``free``: its bits are its pipeline's) is
    compiled by its own pipeline in the edit's tiered path, translated once, stored at once
    and never swapped (a ridge gradient's ``x.T @ r``: one part, all new)."""
    def ridge(rate):
        return qb.value_and_grad(lambda w, x, y: qb.sum((x @ w - y) ** 2) + rate * qb.sum(w * w))

    rng = np.random.default_rng(7)
    args = tuple(qb.array(rng.normal(size=s)) for s in ((8,), (40, 8), (40,)))
    qb.jit(ridge(0.1 + 0.1 * np.random.default_rng().uniform()))(*args)  # the original
    optimised()
    translations = []
    translation = direct.translation
    monkeypatch.setattr(direct, "translation", lambda *a: translations.append(
        translation(*a)) or translations[-1])
    lowered = qb.jit(ridge(0.3 + 0.1 * np.random.default_rng().uniform())).lower(*args)
    compiled = lowered.compile()
    (source,) = sources(lowered.graph, threads.count())
    assert [free for *_, free in translations] == [True]
    assert cache.read_object(cache.entry_key(source)) is not None
    address = compiled.executable.address
    first = [np.asarray(x) for x in compiled(*args)]
    optimised()
    assert compiled.executable.address == address
    expected = evaluate(lowered.graph, [np.asarray(a) for a in args])
    for ours, theirs in zip(first, expected):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)


def test_the_optimisation_waits_unless_hurried(monkeypatch):
    """The thread that optimises an edit's parts waits before it starts (``OPTIMISE_AFTER``:
    its Python would take the GIL from the edit's first call), unless ``optimised`` hurries it,
    as the next compile, a fork and the exit do: here it would wait an hour."""
    import lowering.numba_cpu as cpu

    monkeypatch.setattr(cpu, "OPTIMISE_AFTER", 3600.0)
    transform, loss, args = _per_example(np.random.default_rng(4))
    weight = 1e-3 * (1.0 + np.random.default_rng().uniform())
    qb.jit(transform(loss))(*args)
    optimised()
    compiled = qb.jit(transform(lambda w, x: loss(w, x) + weight * qb.sum(w * w))).lower(
        *args).compile()
    executable = compiled.executable
    if isinstance(executable, TermsExecutable):
        executable = executable.executables[-1]
    address = executable.address
    first = [np.asarray(x) for x in qb.tree.leaves(compiled(*args))]
    optimised(timeout=300)
    assert executable.address != address, "the optimised part was not swapped in"
    second = [np.asarray(x) for x in qb.tree.leaves(compiled(*args))]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, second))


def test_a_jitted_edit_runs_its_optimised_code_though_only_its_run_is_kept(monkeypatch):
    """A jitted function keeps its executable's ``run`` alone (``run`` refers back to nothing,
    so the executable itself is collected). The optimised parts are swapped into ``run``'s
    globals, so the edit's later calls run them (they ran the quick pipeline's code for the
    rest of the process: an SGD loop re-jitted with another learning rate stayed 4.7x slower);
    the results keep their bits."""
    import gc

    monkeypatch.setattr(terms, "SPLIT_NODES", 10**9)  # one program: its executable's run
    transform, loss, args = _per_example(np.random.default_rng(5))
    weight = 1e-3 * (1.0 + np.random.default_rng().uniform())  # a program no run compiled
    qb.jit(transform(loss))(*args)
    optimised()
    edited = qb.jit(transform(lambda w, x: loss(w, x) + weight * qb.sum(w * w)))
    first = [np.asarray(x) for x in qb.tree.leaves(edited(*args))]
    gc.collect()
    (entry,) = edited._cache.values()
    quick = entry.run.__globals__["fn"]
    optimised(timeout=300)
    assert entry.run.__globals__["fn"] is not quick, "the optimised part was not swapped in"
    second = [np.asarray(x) for x in qb.tree.leaves(edited(*args))]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, second))
