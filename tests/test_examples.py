"""Every script of ``examples/`` runs at a tiny size and gets its numbers right: each module is
imported from its file and its ``main`` called with small sizes and the figure's folder under
``tmp_path``. The figure must be written exactly when matplotlib is importable (the numbers
are checked either way). The MPI example also runs as ``mpiexec -n 2`` (where MPI can be
launched, ``tests/mpi_launch.py``) and must give the one-process loss history."""

import importlib.util
import json
import math
import sys

import mpi_launch
import numpy as np
import pytest

EXAMPLES = mpi_launch.ROOT / "examples"
sys.path.append(str(EXAMPLES))  # their shared helpers (figures.py), as a script run finds them
PNG = b"\x89PNG\r\n\x1a\n"


def example(name):
    """The module ``examples/<name>.py``, imported from its file."""
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_figure(folder, name):
    """The PNG is there when matplotlib is, and absent (a note printed instead) when not."""
    path = folder / name
    if importlib.util.find_spec("matplotlib") is None:
        assert not path.exists()
        return
    assert path.read_bytes()[:8] == PNG


def test_every_example_has_a_docstring_and_a_main():
    for path in sorted(set(EXAMPLES.glob("*.py")) - {EXAMPLES / "figures.py"}):
        source = path.read_text()
        assert source.startswith('"""') and "python examples/" in source, path.name
        assert "\ndef main(" in source and 'if __name__ == "__main__":' in source, path.name


def test_readme_pinn(tmp_path, capsys):
    w, loss = example("readme_pinn").main(steps=300, out=tmp_path)
    assert capsys.readouterr().out == "w = 3.141593, loss = 1.5e-13\n"   # the README's line
    assert abs(w.item() - math.pi) < 1e-6 and loss.item() < 1e-10
    assert_figure(tmp_path, "readme_pinn.png")


def test_poisson2d_pinn(tmp_path):
    error, history = example("poisson2d_pinn").main(
        points=32, width=8, depth=1, steps=150, learning_rate=1e-2, grid=9, out=tmp_path)
    assert len(history) == 150 and history[-1] < 0.2 * history[0]
    assert error < 0.5                  # 0.2 at this size; 9e-5 at full size
    assert_figure(tmp_path, "poisson2d_pinn.png")


def test_lennard_jones_md(tmp_path):
    drift, energies = example("lennard_jones_md").main(side=2, steps=200, out=tmp_path)
    kinetic = np.asarray(energies)[:, 0]
    assert energies.shape == (200, 2)
    assert np.ptp(kinetic) > 0.5        # energy moves between kinetic and potential ...
    assert drift < 1e-3                 # ... while the total stays (6e-5 here)
    assert_figure(tmp_path, "lennard_jones_md.png")


def test_training_loss_curve(tmp_path):
    history, test_mse = example("training_loss_curve").main(
        samples=64, batch=16, width=8, steps=60, out=tmp_path)
    assert len(history) == 60 and all(map(math.isfinite, history))
    assert np.mean(history[-10:]) < 0.8 * np.mean(history[:10])
    assert test_mse < 1.0
    assert_figure(tmp_path, "training_loss_curve.png")


def test_oscillator_odeint(tmp_path):
    c, history = example("oscillator_odeint").main(count=10, steps=10, out=tmp_path)
    assert abs(c - 0.35) < 0.05 and history[-1] < 0.01 * history[0]
    assert_figure(tmp_path, "oscillator_odeint.png")


def test_poisson_cg(tmp_path):
    u, error = example("poisson_cg").main(n=6, out=tmp_path)
    assert u.shape == (6, 6) and u.min() > 0      # a positive source, zero boundary values
    assert error < 1e-6                           # dJ/ds against finite differences
    assert_figure(tmp_path, "poisson_cg.png")


SMALL_PINN = {"points": 16, "steps": 5, "width": 4}


def test_distributed_pinn_one_process(capsys):
    history = example("distributed_pinn").main(**SMALL_PINN, ranks=1)
    assert len(history) == 5 and history[-1] < history[0]
    assert "1 process: loss" in capsys.readouterr().out


def test_distributed_pinn_on_two_ranks_matches_one_process(tmp_path):
    reason = mpi_launch.unavailable()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "history.json"
    args = [f"--{k}={v}" for k, v in SMALL_PINN.items()]
    done = mpi_launch.launch(2, EXAMPLES / "distributed_pinn.py", *args, f"--out={out}",
                             timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "2 ranks: loss" in done.stdout
    parallel = json.loads(out.read_text())
    alone = example("distributed_pinn").train(**SMALL_PINN)
    np.testing.assert_allclose(parallel, alone, rtol=1e-12)
