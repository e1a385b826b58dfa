"""Random programs with control-flow regions (cond, fori_loop with static and traced bounds,
scan, nested scans indexing twice, while_loop) against JAX with x64: values, grad (first to
third order here, fourth too in a full run), jvp (with a tangent on a traced bound too), jvp
of grad, under vmap (over x, and over x and the bound) and jit, on the Numba CPU back end
and on the NumPy reference interpreter. Where JAX refuses (reverse mode through a while_loop
whose carry a cotangent crosses), Quabla must raise UnsupportedOperationError. The generator
and the checks are in ``region_programs.py``.

Each seed checks a few transforms and wrappers of its program, chosen from the seed, to keep
the module short; ``QUABLA_FUZZ_PROGRAMS=500`` checks 500 programs, and
``QUABLA_FUZZ_FULL=1`` every transform and wrapper of each on both back ends (slow: minutes
per hundred programs, most of it compiling, Numba's and XLA's).
"""

import os
import random

import pytest

import region_programs as rp

jax = pytest.importorskip("jax")

PROGRAMS = int(os.environ.get("QUABLA_FUZZ_PROGRAMS", "24"))
FULL = os.environ.get("QUABLA_FUZZ_FULL", "") not in ("", "0")
# Third and higher orders cost the most to compile (in JAX too): every fourth seed checks
# grad3; grad4 runs with QUABLA_FUZZ_FULL.
CHEAP = ("grad1", "grad2", "jvp", "jvp_k", "jvp_grad")
DEEP = "grad3"


@pytest.fixture(scope="module", autouse=True)
def x64():
    jax.config.update("jax_enable_x64", True)


def plan(seed):
    """(transforms, wrappers, back ends) of a seed: "value" and two more transforms, the second
    grad3 every fourth seed; even seeds on Numba ("eager" and one more wrapper), odd ones on
    the interpreter (three wrappers, vmap over k among them)."""
    if FULL:
        return rp.TRANSFORMS, rp.WRAPPERS, rp.BACKENDS
    rng = random.Random(10_000 + seed)
    transforms = ["value"] + rng.sample(CHEAP, 2)
    if seed % 4 == 3:
        transforms[-1] = DEEP
    if seed % 2:
        return tuple(transforms), ("eager", "jit_vmap", "vmap_k"), ("interpret",)
    return tuple(transforms), ("eager", rng.choice(rp.WRAPPERS[1:])), ("numba",)


@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_region_program_matches_jax(seed):
    program = rp.generate(seed)
    transforms, wrappers, backends = plan(seed)
    outcomes = rp.check_program(program, jax, transforms, wrappers, backends)
    failed = [o for o in outcomes if o.failed]
    assert not failed, ("\n".join(map(str, failed)) + "\n\n" + rp.describe(program))


def test_generator_is_deterministic_and_covers_the_grammar():
    """A seed gives the same program every time, and a hundred seeds use every construct."""
    assert rp.render(rp.generate(7), "qb") == rp.render(rp.generate(7), "qb")
    found = set()
    for seed in range(100):
        found |= rp.features(rp.generate(seed).expr)
    expected = {"fori_static", "fori_traced_lo", "fori_traced_hi", "scan", "while",
                "while_traced", "while_stop", "cond", "let", "pair_carry", "operands", "unroll",
                "nested"}
    if rp.scan_has_reverse():
        expected.add("scan_reverse")
    assert expected <= found, expected - found
