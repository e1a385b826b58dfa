"""The BLAS and LAPACK generated code calls (lowering/fortran.py): NumPy's OpenBLAS where it is
found, SciPy's otherwise (or with QUABLA_BLAS=scipy), each with its own integer width; every
routine's results against NumPy, in processes of their own (the library is found once per
process), and the symbols of one width never resolved to the other's library."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from lowering import fortran, native

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# a product (dgemm, float64 and float32), a triangular solve (trsm), a Cholesky factor
# (dpotrf from the part), and solve / slogdet / eigh / svd of LAPACK_MIN rows or more (the
# LAPACK kernels compiled by Numba), each against NumPy
PROGRAM = textwrap.dedent("""
    import json
    import numpy as np
    import quabla as qb
    from lowering import fortran

    rng = np.random.default_rng(5)
    n = 24
    a = rng.standard_normal((96, 96))
    spd = a[:n, :n] @ a[:n, :n].T + n * np.eye(n)
    low = np.tril(a[:80, :80]) + 20 * np.eye(80)
    b = rng.standard_normal((80, 80))

    def program(a, spd, low, b, a32):
        return [a @ a, a32 @ a32, qb.linalg.triangular_solve(low, b, lower=True),
                qb.cholesky(spd), qb.linalg.solve(spd, b[:n, :3]), qb.linalg.slogdet(spd)[1],
                qb.linalg.eigh(spd)[0], qb.linalg.svd(a[:n, :n], compute_uv=False)]

    got = [np.asarray(x, np.float64) for x in qb.jit(program)(
        *(qb.array(x) for x in (a, spd, low, b)), qb.array(a.astype(np.float32)))]
    a32 = a.astype(np.float32)
    expected = [a @ a, (a32 @ a32).astype(np.float64), np.linalg.solve(low, b),
                np.linalg.cholesky(spd), np.linalg.solve(spd, b[:n, :3]),
                np.linalg.slogdet(spd)[1], np.linalg.eigvalsh(spd),
                np.linalg.svd(a[:n, :n], compute_uv=False)]
    scale = [max(1.0, float(np.abs(e).max())) for e in expected]
    print(json.dumps({"origin": fortran.origin(), "bits": fortran.integer_bits(),
                      "errors": [float(np.abs(g - e).max()) / s
                                 for g, e, s in zip(got, expected, scale)]}))
""")


def _run(tmp_path, choice):
    env = dict(os.environ, QUABLA_CACHE_DIR=str(tmp_path / f"quabla-{choice}"),
               NUMBA_CACHE_DIR=str(tmp_path / f"numba-{choice}"), PYTHONPATH=ROOT,
               QUABLA_BLAS=choice)
    env.pop("QUABLA_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


_ORIGINS = {"1": ("numpy64", 64), "scipy": ("scipy32", 32), "0": ("", 0)}


@pytest.mark.parametrize("choice", list(_ORIGINS))
def test_every_routine_of_each_library_matches_numpy(tmp_path, choice):
    """QUABLA_BLAS=0: the same sizes through generated loops and the kernels of
    matrix_kernels.py, which every install would otherwise skip at these sizes."""
    if choice == "scipy":
        pytest.importorskip("scipy")
    elif choice == "1" and not fortran.origin().startswith("numpy"):
        pytest.skip("this NumPy carries no OpenBLAS of its own")
    report = _run(tmp_path, choice)
    assert (report["origin"], report["bits"]) == _ORIGINS[choice]
    tolerances = [1e-13, 1e-5, 1e-12, 1e-13, 1e-12, 1e-12, 1e-12, 1e-12]
    for k, (error, tolerance) in enumerate(zip(report["errors"], tolerances)):
        assert error < tolerance, (k, error)


def test_a_symbol_names_its_integer_width_and_resolves_only_to_it():
    bits = fortran.integer_bits()
    if not bits:
        pytest.skip("no BLAS here")
    name = fortran.symbol("dgemm")
    assert name.endswith(f"_i{bits}")
    assert native.resolve([name])[name] == fortran.load()[2]["dgemm"]
    other = name[: -len(str(bits))] + ("32" if bits == 64 else "64")
    with pytest.raises(native.LoadError):
        native.resolve([other])


def test_the_library_is_part_of_a_program_s_key(monkeypatch):
    """QUABLA_BLAS=0 is another origin (no BLAS: generated loops), so another key."""
    found = fortran.origin()
    monkeypatch.setenv("QUABLA_BLAS", "0")
    assert fortran.origin() == "" and not fortran.available()
    assert fortran.integer_bits() == 0
    monkeypatch.delenv("QUABLA_BLAS")
    assert fortran.origin() == found
