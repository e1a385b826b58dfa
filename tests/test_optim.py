"""Pure host optimizers (spec 000 §3.8) and the README PINN (000 §2.4) that trains with them."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import quabla as qb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_adam_matches_the_textbook_update():
    params = {"a": qb.array([1.0, 2.0]), "b": qb.array(3.0, dtype=qb.float32)}
    grads = {"a": qb.array([0.5, -1.0]), "b": qb.array(2.0, dtype=qb.float32)}
    opt = qb.optim.Adam(learning_rate=0.1)
    state = opt.init(params)
    m = {k: np.zeros(np.shape(p)) for k, p in params.items()}
    v = {k: np.zeros(np.shape(p)) for k, p in params.items()}
    expected = {k: np.asarray(p, dtype=np.float64) for k, p in params.items()}
    for t in range(1, 4):
        params, state = opt.update(params, grads, state)
        for k in expected:
            g = np.asarray(grads[k], dtype=np.float64)
            m[k] = 0.9 * m[k] + 0.1 * g
            v[k] = 0.999 * v[k] + 0.001 * g * g
            expected[k] = expected[k] - 0.1 * (m[k] / (1 - 0.9 ** t)) / (
                np.sqrt(v[k] / (1 - 0.999 ** t)) + 1e-8)
    assert state["step"] == 3
    np.testing.assert_allclose(params["a"].numpy(), expected["a"], rtol=1e-12)
    assert params["b"].dtype is qb.float32
    np.testing.assert_allclose(params["b"].numpy(), expected["b"], rtol=1e-6)


def test_sgd_and_none_gradients():
    params = [qb.array([1.0, 2.0]), qb.array([True, False])]
    new, state = qb.optim.SGD(0.5).update(params, [qb.array([2.0, -2.0]), None], {"step": 0})
    assert new[0].tolist() == [0.0, 3.0] and new[1] is params[1] and state == {"step": 1}


def test_optimizer_state_round_trips_through_a_checkpoint(tmp_path):
    opt = qb.optim.Adam(0.01)
    params = {"w": qb.array([1.0, -1.0])}
    _, state = opt.update(params, {"w": qb.array([0.1, 0.2])}, opt.init(params))
    qb.save(tmp_path / "state.qb", state)
    loaded = qb.load(tmp_path / "state.qb")
    assert loaded["step"] == 1 and loaded["m"]["w"].tolist() == state["m"]["w"].tolist()


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan])
def test_bad_learning_rate(bad):
    with pytest.raises(ValueError):
        qb.optim.Adam(bad)


def test_readme_pinn_example_prints_the_spec_result(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "readme_pinn.py"),
                          "--out", str(tmp_path)],  # not over the figure the docs show
                         env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "w = 3.141593, loss = 1.5e-13"
