"""Smoke tests of benchmarks/: the problems compute what they claim, and the runner's table
prints. No timing is asserted anywhere (speed lives in ``python benchmarks/run.py``)."""

import importlib.util
import math
import os
import sys

import numpy as np
import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
if BENCH not in sys.path:
    sys.path.append(BENCH)  # for ``kernels``, which problems.build_numba imports


def _load(name):
    spec = importlib.util.spec_from_file_location(f"quabla_benchmarks_{name}", os.path.join(BENCH, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


problems = _load("problems")
run = _load("run")


def _analytic(w, x):
    """README PINN loss and d/dw, in NumPy (the formulas of benchmarks/kernels.py)."""
    s, c = np.sin(w * x), np.cos(w * x)
    r = -w * w * s + math.pi**2 * np.sin(math.pi * x)
    dr = -2 * w * s - w * w * x * c
    return np.mean(r * r), np.mean(2 * r * dr)


@pytest.mark.parametrize("problem", ["pinn", "pinn_vmap"])
def test_readme_pinn_forms_match_analytic(problem):
    case = problems.build_quabla(problem)
    value, grad = case.summary(case.block(case.fn(*case.args)))
    expected = _analytic(2.5, np.linspace(0.05, 0.95, problems.N_POINTS))
    np.testing.assert_allclose([value, grad], expected, rtol=1e-12)


def test_numba_kernel_matches_analytic():
    case = problems.build_numba("pinn")
    value, grad = case.summary(case.fn(*case.args))
    np.testing.assert_allclose([value, grad], _analytic(*case.args), rtol=1e-12)


def test_mlp_pinn_gradient_matches_central_difference(monkeypatch):
    monkeypatch.setenv("QUABLA_BACKEND", "interpret")  # keep the smoke test free of compiles
    import quabla as qb

    case = problems.build_quabla("mlp_pinn")
    params, x = case.args
    value, grads = case.fn(params, x)
    assert np.isfinite(value.item())
    # d loss / d W2[3, 5] against a central difference of the loss itself
    h = 1e-5
    base = np.asarray(params["W2"])

    def loss_at(delta):
        w2 = base.copy()
        w2[3, 5] += delta
        return case.fn({**params, "W2": qb.array(w2)}, x)[0].item()

    fd = (loss_at(h) - loss_at(-h)) / (2 * h)
    np.testing.assert_allclose(np.asarray(grads["W2"])[3, 5], fd, rtol=1e-5, atol=1e-8)


def test_table_prints_ratios_and_na():
    results = {
        "pinn": {
            "quabla": {"cold": {"first_call": 0.5}, "warm": {"step": 4e-6, "first_call": 0.1}},
            "jax": {"cold": {"error": "boom"}, "warm": {"error": "boom"}},
            "numba": {"cold": {"first_call": 0.25}, "warm": {"step": 2e-6, "first_call": 0.05}},
        }
    }
    text = run.table(results, ["quabla", "jax", "numba"])
    assert "4.00 µs" in text and "2.00x" in text and "n/a" in text and "boom" in text


def test_training_problems_agree_on_their_first_loss():
    """(a) the README loop and (b) the Trainer start from the loss at w = 2.5 and then
    decrease it, step by step alike."""
    expected, _ = _analytic(2.5, np.linspace(0.05, 0.95, problems.N_POINTS))
    losses = {}
    for problem in ("train_pinn", "train_pinn_trainer"):
        case = problems.build_quabla(problem)
        losses[problem] = [case.summary(case.fn(*case.args))[0] for _ in range(4)]
        np.testing.assert_allclose(losses[problem][0], expected, rtol=1e-12)
    assert losses["train_pinn"] == losses["train_pinn_trainer"]
    assert losses["train_pinn"][-1] < losses["train_pinn"][0]


def test_compile_breakdown_of_one_small_compile(tmp_path):
    """benchmarks/compile.py's child compiles the README PINN in a fresh process with empty
    caches and accounts for its first call phase by phase."""
    import json
    import subprocess

    breakdown = _load("compile")
    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path / "q"), NUMBA_CACHE_DIR=str(tmp_path / "n"))
    env.pop("QUABLA_BACKEND", None)
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "compile.py"), "--child", "quabla",
                           "pinn_vmap", "cold"], env=env, capture_output=True, text=True, timeout=300)
    line = [x for x in proc.stdout.splitlines() if x.startswith("@@RESULT ")][-1]
    result = json.loads(line[len("@@RESULT "):])
    assert set(result) == set(breakdown.PHASES) | {"total", "cpu", "cpu_phases"}, result
    assert set(result["cpu_phases"]) == set(breakdown.PHASES)
    assert all(result[p] >= 0 for p in breakdown.PHASES)
    for phase in ("direct translation", "llvm optimisation", "llvm codegen", "codegen", "cache"):
        assert result[phase] > 0, phase  # a real compile went through every stage
    assert result["import numba"] == 0  # every part translated without Numba
    assert sum(result[p] for p in breakdown.PHASES) <= result["total"] * 1.01
    assert any(name.startswith("qb_") for name in os.listdir(tmp_path / "q"))
    text = breakdown.table({"pinn_vmap": {"quabla": result, "jax": {"first_call": 0.05}}})
    assert "direct translation" in text and "50 ms" in text and "jax cold first call" in text


def test_lj_problem_energy_and_forces_agree_with_the_pair_loop(monkeypatch):
    monkeypatch.setenv("QUABLA_BACKEND", "interpret")
    monkeypatch.setitem(problems.LJ_PARTICLES, "lj", 54)
    x = problems.lj_positions(54)
    assert x.shape == (54, 3)
    case = problems.build_quabla("lj")
    value, grad = case.fn(*case.args)
    energy, expected = 0.0, np.zeros_like(x)
    for i in range(len(x)):
        for j in range(len(x)):
            if i != j:
                d = x[i] - x[j]
                r2 = d @ d
                energy += 2 * (r2**-6 - r2**-3)
                expected[i] += -24 * (2 * r2**-6 - r2**-3) / r2 * d
    np.testing.assert_allclose(value.item(), energy, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-9, atol=1e-12)


corpus = _load("corpus")


@pytest.mark.parametrize("edit", [False, True], ids=["original", "edited"])
@pytest.mark.parametrize("program", sorted(corpus.PROGRAMS))
def test_corpus_programs_agree_with_jax(program, edit, monkeypatch):
    """Every program of the user-style corpus, and its edited form (another loss term, for
    edit-and-rerun), runs (on the interpreter: no compiles here) and, where JAX is installed,
    computes what JAX computes."""
    monkeypatch.setenv("QUABLA_BACKEND", "interpret")
    lib = corpus.Quabla()
    lib.edit = edit
    fn, args = corpus.PROGRAMS[program](lib)
    ours = corpus.summary(lib, fn(*args))
    assert all(math.isfinite(v) for v in ours)
    if importlib.util.find_spec("jax") is None or importlib.util.find_spec("optax") is None:
        return
    jax_lib = corpus.Jax()
    jax_lib.edit = edit
    fn, args = corpus.PROGRAMS[program](jax_lib)
    np.testing.assert_allclose(ours, corpus.summary(jax_lib, fn(*args)), rtol=1e-6, atol=1e-9)


edits = _load("edits")


@pytest.mark.parametrize("program", sorted(edits.PROGRAMS))
def test_edits_add_the_terms_they_name(monkeypatch, program):
    """benchmarks/edits.py: a penalty edit adds 1e-4 times the parameters' squares, a width or
    layer edit is another network (its own parameters), and a boundary edit adds a term."""
    monkeypatch.setenv("QUABLA_BACKEND", "interpret")  # keep the smoke test free of compiles
    import quabla as qb

    lib = edits.corpus.LIBRARIES["quabla"]()
    fn, (params,) = edits.PROGRAMS[program](lib)
    value = fn(params)[0].item()
    penalty = 1e-4 * sum(float(np.sum(np.asarray(leaf) ** 2)) for leaf in qb.tree.leaves(params))
    edited, (same,) = edits.PROGRAMS[program](lib, "penalty")
    np.testing.assert_allclose(edited(same)[0].item(), value + penalty, rtol=1e-12)
    boundary, (same,) = edits.PROGRAMS[program](lib, "boundary")
    assert boundary(same)[0].item() > value
    for kind in ("width", "layer"):
        _, (other,) = edits.PROGRAMS[program](lib, kind)
        shapes = [np.shape(leaf) for leaf in qb.tree.leaves(other)]
        assert shapes != [np.shape(leaf) for leaf in qb.tree.leaves(params)], kind


def test_edits_table_prints_ratios():
    results = {"p": {impl: {"original": {"first_call": 1.0}, "penalty": {"first_call": 0.25}}
                     for impl in ("quabla", "jax")}}
    text = edits.table(results, ["quabla", "jax"], ["penalty"])
    assert "0.25" in text and "1.00" in text and "geometric mean, penalty: 0.25" in text
