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


@pytest.fixture(autouse=True)
def optimisations_wait_to_be_hurried(monkeypatch):
    """An edit's optimisation starts only when ``optimised`` hurries it (``OPTIMISE_AFTER``), so
    a test sees the quick code first however long its lines before take (a collection, or a
    program generated again, beside a long suite's objects: the optimised code was swapped in
    before the test looked, in one full run)."""
    import lowering.numba_cpu as cpu

    monkeypatch.setattr(cpu, "OPTIMISE_AFTER", 3600.0)


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


def test_a_difference_of_elements_is_no_read_against_the_stores():
    """A residual's sum beside the store of its gradient (``v0[i] - v1[i]``: a difference of
    elements, not of indices) is marked, so an edit's part with it runs quick code first; a
    read at an index that falls as the counter rises (``999 - i``) beside a store is not."""
    arrays = {"v0": np.ones(1000), "v1": np.ones(1000), "r0": np.zeros(1000)}
    residual = """
        s = 0.0
        i0 = 0
        while i0 < 1000:
            d = v0[i0] - v1[i0]
            s = _sum_add(s, d * d)
            r0[i0] = 2.0 * d
            i0 += 1
        r0[0] = s
        """
    text, _, _, free = _translated(residual, arrays)
    assert not free and direct.sums_marked(text)
    text, _, _, free = _translated(residual.replace("v1[i0]", "v1[999 - i0]"), arrays)
    assert free and not direct.sums_marked(text)


def test_a_part_without_a_marked_sum_has_the_same_bits_from_the_bare_pipeline():
    """An edit's new part without a marked sum runs bare code first (numba_cpu/__init__.py:
    ``_tiered``): elementwise loops, row maxima and transcendental functions that the
    optimised pipeline vectorises give the bits the bare pipeline's scalar loops give."""
    rng = np.random.default_rng(8)
    arrays = {"v0": rng.normal(size=999) * 3.0, "r0": np.zeros(999), "r1": np.zeros(3)}
    text, entry, _, free = _translated("""
        i0 = 0
        while i0 < 999:
            x = v0[i0]
            r0[i0] = _where(x > 0.0, math.log1p(x * x), _exp(x) * math.sin(x)) / (1.5 + abs(x))
            i0 += 1
        i0 = 0
        while i0 < 3:
            m = -math.inf
            i1 = 0
            while i1 < 333:
                m = _max(m, r0[333 * i0 + i1])
                i1 += 1
            r1[i0] = m
            i0 += 1
        """, arrays)
    assert not free and not direct.sums_marked(text)
    bare, optimised_ = (_run(text, entry, pipeline, list(arrays.values()))[1:]
                        for pipeline in (machine.BARE, machine.OPTIMISED))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(bare, optimised_))
    x = arrays["v0"]
    expected = np.where(x > 0, np.log1p(x * x), np.exp(x) * np.sin(x)) / (1.5 + np.abs(x))
    np.testing.assert_allclose(bare[0], expected, rtol=1e-14, atol=1e-300)
    np.testing.assert_array_equal(bare[1], expected.reshape(3, 333).max(axis=1))


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


def _trained(rate):
    """Gradient steps in a ``fori_loop``, then the loss with a penalty: another rate shares
    no part with it."""
    def train(w, x):
        def step(i, w):
            return w - rate * qb.grad(lambda w: qb.sum(qb.tanh(x @ w) ** 2))(w)
        w = qb.fori_loop(0, 5, step, w)
        return qb.sum(qb.tanh(x @ w) ** 2) + rate * qb.sum(w * w), w
    return train


@pytest.mark.parametrize("case", ["short", "long", "another function"])
def test_a_short_revision_of_a_function_runs_quick_code_first(case, monkeypatch):
    """A program whose parts are all new (another rate in a training loop) but which revises
    the program compiled before for the same function (``programs.revises``: its name, as an
    edit of its source keeps it) runs its first call on the quick tier's code when it is
    short (``workload.TIER_WORK``), then the optimised code with the same bits. A long one,
    or one compiled for another function, is compiled optimised at once."""
    from lowering.numba_cpu import workload

    if case == "long":
        monkeypatch.setattr(workload, "TIER_WORK", 0)
    rng = np.random.default_rng(6)
    args = (qb.array(rng.normal(size=(8, 3))), qb.array(rng.normal(size=(16, 8))))
    qb.jit(_trained(0.01 + 0.01 * np.random.default_rng().uniform()))(*args)  # the original
    optimised()
    before = parts_compiled()
    train = _trained(0.03 + 0.01 * np.random.default_rng().uniform())
    if case == "another function":  # named as no function before it, in any cache
        train = (lambda train: lambda w, x: train(w, x))(train)  # noqa: E731
        train.__qualname__ = f"another_{np.random.default_rng().integers(2**62)}"
    lowered = qb.jit(train).lower(*args)
    compiled = lowered.compile()
    first = [np.asarray(x) for x in compiled(*args)]
    assert parts_compiled() - before == len(sources(lowered.graph, threads.count()))
    address = compiled.executable.address
    optimised()
    assert (compiled.executable.address != address) == (case == "short")
    second = [np.asarray(x) for x in compiled(*args)]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, second))
    expected = evaluate(lowered.graph, [np.asarray(a) for a in args])
    for ours, theirs in zip(second, expected):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)


def _scaled(rate):
    """An elementwise program (no sum): another rate is a revision that shares no part."""
    def scaled(x):
        return qb.exp(qb.sin(x) * rate) / (1.0 + x * x)
    return scaled


@pytest.mark.parametrize("light", [True, False])
def test_a_revision_without_a_marked_sum_runs_bare_code_first(light, monkeypatch):
    """A new part without a marked sum, in a program of few statements
    (``workload.BARE_WORK``), runs the bare pipeline's code first, then the optimised code
    with the same bits; in a longer program, the quick pipeline's."""
    from lowering.numba_cpu import workload

    if not light:
        monkeypatch.setattr(workload, "BARE_WORK", 0)
    x = qb.array(np.random.default_rng(9).normal(size=2000) * 3.0)
    qb.jit(_scaled(0.5 + 0.1 * np.random.default_rng().uniform()))(x)  # the original
    optimised()
    pipelines = []
    entry = direct.DirectEntry

    class Recorded(entry):
        def __init__(self, text, name, pipeline=machine.OPTIMISED):
            pipelines.append(pipeline)
            super().__init__(text, name, pipeline)

    monkeypatch.setattr(direct, "DirectEntry", Recorded)
    compiled = qb.jit(_scaled(0.7 + 0.1 * np.random.default_rng().uniform())).lower(x).compile()
    first = np.asarray(compiled(x))
    address = compiled.executable.address
    optimised()
    assert pipelines == [machine.BARE if light else machine.QUICK, machine.OPTIMISED]
    assert compiled.executable.address != address, "the optimised part was not swapped in"
    assert np.asarray(compiled(x)).tobytes() == first.tobytes()


def test_another_thread_waits_for_an_optimisation_as_it_starts(monkeypatch):
    """A thread that waits for the optimisations (``optimised``: every compile does first)
    while an edit's optimising thread is being started finds it started: jit's threads
    compiling revisions of one function at once raised "cannot join thread before it is
    started". Here another thread waits at the moment of the start (for at most half a
    second: the start holds the list of optimising threads meanwhile)."""
    import threading

    import lowering.numba_cpu as cpu

    errors = []

    def wait():
        try:
            optimised(timeout=300)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    thread = threading.Thread

    class Started(thread):
        def start(self):
            if self.name == cpu.OPTIMISING:
                waiter = thread(target=wait)
                waiter.start()
                waiter.join(0.5)
            super().start()

    monkeypatch.setattr(cpu.threading, "Thread", Started)
    x = qb.array(np.random.default_rng(10).normal(size=500))
    qb.jit(_scaled(0.5 + 0.1 * np.random.default_rng().uniform()))(x)
    optimised()
    compiled = qb.jit(_scaled(0.7 + 0.1 * np.random.default_rng().uniform())).lower(x).compile()
    first = np.asarray(compiled(x))
    optimised(timeout=300)
    assert not errors, errors
    assert np.asarray(compiled(x)).tobytes() == first.tobytes()


def _addresses(executable):
    """Where the machine code of ``executable`` (or of each of its terms) is."""
    if isinstance(executable, TermsExecutable):
        return tuple(e.address for e in executable.executables)
    return (executable.address,)


def test_every_primitive_s_program_runs_first_and_optimised_with_the_same_bits(monkeypatch,
                                                                               tmp_path):
    """The first rule-test case of each primitive with its gradient (device_cases), in an
    empty cache, each compiled as a revision of the one before (one origin for all): its
    first call runs the quick or the bare pipeline's code, its next the optimised code
    swapped in. Both calls give the same bits and the interpreter's results."""
    import device_cases
    from lowering.numba_cpu import compile_graph

    from quabla.core.expand import expand

    monkeypatch.setenv("QUABLA_CACHE_DIR", str(tmp_path / "cache"))  # nothing compiled yet
    monkeypatch.setattr(cache, "_DIRS", None)
    swapped = 0
    for case in device_cases.first_primitive_cases(np.random.default_rng(12)):
        graph = expand(qb.jit(case.fn).lower(*case.args).graph)
        values = [np.asarray(leaf) for leaf in qb.tree.flatten(case.args)[0]]
        executable = compile_graph(graph, {"origin": "every primitive's program"})
        addresses = _addresses(executable)
        first = executable(*values)
        optimised(timeout=300)
        swapped += _addresses(executable) != addresses
        second = executable(*values)
        expected = evaluate(graph, values)
        for a, b, e in zip(first, second, expected):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), case.name
            np.testing.assert_allclose(np.asarray(b), e, err_msg=case.name, **device_cases.TOL)
    assert swapped >= 40, f"only {swapped} programs ran quick code first"


def test_a_function_is_named_by_its_source_and_its_transforms():
    """``function_origin``, which jit passes to the compile path: a function keeps its name
    through the transforms' wrappers and through ``functools.wraps``, as an edit of its source
    keeps it; another transform around it, another function of the same name elsewhere, or a
    lambda on another line is another name, and a callable without code has none."""
    import functools

    from quabla.staging.staged import function_origin

    def loss(w):
        return qb.sum(w * w)

    @functools.wraps(loss)
    def edited(w):
        return loss(w) + qb.sum(w)

    assert function_origin(qb.value_and_grad(loss)) == function_origin(
        qb.value_and_grad(edited)) is not None
    assert function_origin(qb.value_and_grad(loss)) != function_origin(qb.grad(loss))
    assert function_origin(loss) != function_origin(qb.vmap(loss))
    first = lambda w: w  # noqa: E731
    second = lambda w: w  # noqa: E731
    assert function_origin(first) != function_origin(second)
    assert function_origin(loss) != function_origin(_trained(0.1))
    assert function_origin(functools.partial(loss)) is None
    assert qb.jit(qb.grad(loss)).lower_options["origin"] == function_origin(qb.grad(loss))


def _cox(rate):
    """A Cox partial likelihood with a penalty of weight ``rate``: its gradient's sum reads a
    reversed cumulative sum beside a store, which LLVM's cost model vectorises (``free``)."""
    event = qb.array((np.random.default_rng(31).uniform(size=40) < 0.7).astype(float))

    def nll(eta):
        risk = qb.cumsum(qb.exp(eta)[::-1])[::-1]
        return -qb.sum(event * (eta - qb.log(risk))) + rate * qb.sum(eta * eta)
    return qb.value_and_grad(nll)


def test_an_edit_s_part_whose_sums_are_free_is_compiled_optimised_at_once(monkeypatch):
    """A new part with a sum LLVM's cost model vectorises (``free``: its bits are its
    pipeline's) is compiled by its own pipeline in the edit's tiered path, translated once,
    stored at once and never swapped (a Cox likelihood with another penalty weight: one
    part, all new, revising the program compiled before for the same function)."""
    monkeypatch.setattr(terms, "SPLIT_NODES", 10**9)
    args = (qb.array(np.random.default_rng(7).normal(size=40)),)
    qb.jit(_cox(0.1 + 0.1 * np.random.default_rng().uniform()))(*args)  # the original
    optimised()
    translations = []
    translation = direct.translation
    monkeypatch.setattr(direct, "translation", lambda *a: translations.append(
        translation(*a)) or translations[-1])
    monkeypatch.setattr(direct, "compile_entry", None)  # (the cold path's: not taken)
    lowered = qb.jit(_cox(0.3 + 0.1 * np.random.default_rng().uniform())).lower(*args)
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
