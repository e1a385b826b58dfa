"""qb.optim.Trainer on the CPU: one compiled gradient-and-update step, equal to the pure loop;
batch replacement with checked structure; fit with history, callbacks and a NaN stop;
checkpoint and resume bit for bit."""

import math

import numpy as np
import pytest

import quabla as qb


from helpers import PINN_X as X, mse, pinn_loss, linear_data, linear_params  # noqa: E402


@pytest.fixture(scope="module")
def readme_trainer():
    trainer = qb.optim.Trainer(pinn_loss, qb.array(2.5), qb.optim.Adam(0.05), X)
    for _ in range(300):
        trainer.step()
    return trainer


def test_readme_pinn_trains_to_pi(readme_trainer):
    assert f"{readme_trainer.params.item():.6f}" == "3.141593"
    assert readme_trainer.loss().item() < 1e-10
    assert readme_trainer.steps == 300


def test_trainer_equals_the_pure_loop_bit_for_bit(readme_trainer):
    opt = qb.optim.Adam(0.05)
    w, state = qb.array(2.5), None
    state = opt.init(w)
    step = qb.jit(qb.value_and_grad(pinn_loss))
    for _ in range(300):
        value, g = step(w, X)
        w, state = opt.update(w, g, state)
    assert w.numpy().tobytes() == readme_trainer.params.numpy().tobytes()
    assert value.numpy().tobytes() == readme_trainer.loss().numpy().tobytes()


def test_batches_replace_data_and_are_checked():
    xs, ys = linear_data(16)
    opt = qb.optim.SGD(0.1, momentum=0.9)
    trainer = qb.optim.Trainer(mse, linear_params(), opt, xs[:8], ys[:8], batch_argnums=(0, 1))
    pure_p, state = linear_params(), opt.init(linear_params())
    grad = qb.jit(qb.value_and_grad(mse))
    for k in range(6):
        batch = (xs[8 * (k % 2):8 * (k % 2) + 8], ys[8 * (k % 2):8 * (k % 2) + 8])
        trainer.step(*batch)
        value, g = grad(pure_p, *batch)
        pure_p, state = opt.update(pure_p, g, state)
    for key in ("w", "b"):
        np.testing.assert_array_equal(trainer.params[key].numpy(), pure_p[key].numpy())
    assert trainer.params["frozen"].tolist() == [True]
    assert trainer.loss().item() == value.item()
    with pytest.raises(ValueError, match=r"leaf 0: float64\[4, 3\], declared float64\[8, 3\]"):
        trainer.step(xs[:4], ys[:4])
    with pytest.raises(ValueError, match="float32"):
        trainer.step(qb.array(xs[:8], dtype=qb.float32), ys[:8])
    with pytest.raises(ValueError, match="batch for data argument 0"):
        trainer.step([xs[:8]], ys[:8])
    with pytest.raises(TypeError, match="2 batch argument"):
        trainer.step(xs[:8])


def test_retained_data_needs_no_arguments_and_rejects_them():
    xs, ys = linear_data(16)
    trainer = qb.optim.Trainer(mse, linear_params(), qb.optim.Adam(0.1), xs, ys)
    with pytest.raises(TypeError, match="0 batch argument"):
        trainer.step(xs)
    with pytest.raises(RuntimeError, match="no step"):
        trainer.loss()


def test_fit_records_history_calls_back_and_feeds_batches():
    xs, ys = linear_data(32)
    trainer = qb.optim.Trainer(mse, linear_params(), qb.optim.Adam(0.05), xs[:8], ys[:8],
                               batch_argnums=(0, 1))
    seen = []
    batches = [(xs[i:i + 8], ys[i:i + 8]) for i in range(0, 32, 8)] * 10
    history = trainer.fit(100, log_every=10, progress=False, batches=batches,
                          callback=lambda step, loss: seen.append((step, loss)))
    assert len(history) == 40 and trainer.steps == 40  # the batches ran out after 40 steps
    assert [s for s, _ in seen] == [10, 20, 30, 40]
    assert seen[-1][1] == history[-1] and history[-1] < history[0]


def test_fit_stops_on_a_nonfinite_loss_and_keeps_the_parameters():
    def blowup(w, x):
        return -qb.sum(qb.exp(w * x))

    trainer = qb.optim.Trainer(blowup, qb.array(1.0), qb.optim.SGD(1e3), qb.array([3.0]))
    with pytest.raises(FloatingPointError, match=r"loss became -inf at step (\d+)") as info:
        trainer.fit(50, progress=False)
    failed = int(info.value.args[0].split("at step ")[1].split()[0])
    assert trainer.steps == failed - 1 and math.isfinite(trainer.params.item())
    assert not math.isfinite(trainer.history[-1]) and len(trainer.history) == failed
    trainer.fit(1, progress=False, stop_on_nonfinite=False)  # opted out: no error


def test_resume_from_a_checkpoint_is_bit_identical(tmp_path):
    xs, ys = linear_data(16)
    opt = qb.optim.Adam(qb.optim.schedules.cosine_decay(0.1, 20), weight_decay=0.01)
    full = qb.optim.Trainer(mse, linear_params(), opt, xs, ys)
    full.fit(20, progress=False)
    first = qb.optim.Trainer(mse, linear_params(), opt, xs, ys)
    first.fit(8, progress=False)
    qb.save(tmp_path / "trainer.qb", first.state_dict())
    resumed = qb.optim.Trainer(mse, linear_params(), opt, xs, ys)
    resumed.load_state_dict(qb.load(tmp_path / "trainer.qb"))
    assert resumed.steps == 8
    resumed.fit(12, progress=False)
    for key in ("w", "b"):
        assert resumed.params[key].numpy().tobytes() == full.params[key].numpy().tobytes()
    state = resumed.state_dict()["opt_state"]
    assert state["step"] == 20 and set(state) == {"step", "m", "v"}
    with pytest.raises(ValueError, match="params"):
        resumed.load_state_dict({"params": {"w": qb.zeros(3)}, "opt_state": state})
    with pytest.raises(ValueError, match=r"expected float64\[3\]"):
        resumed.load_state_dict({"params": dict(linear_params(), w=qb.zeros(4)),
                                 "opt_state": state})


def test_a_pure_optimizer_state_feeds_the_trainer_and_back():
    xs, ys = linear_data(16)
    opt = qb.optim.SGD(0.05, momentum=0.5)
    trainer = qb.optim.Trainer(mse, linear_params(), opt, xs, ys)
    trainer.fit(3, progress=False)
    state = trainer.state_dict()
    params, opt_state = state["params"], state["opt_state"]
    grad = qb.jit(qb.value_and_grad(mse))
    for _ in range(2):
        params, opt_state = opt.update(params, grad(params, xs, ys)[1], opt_state)
    trainer.fit(2, progress=False)
    np.testing.assert_array_equal(trainer.params["w"].numpy(), params["w"].numpy())


def test_bad_arguments():
    with pytest.raises(TypeError, match="optimizer"):
        qb.optim.Trainer(mse, linear_params(), "adam")
    with pytest.raises(ValueError, match="batch_argnums"):
        qb.optim.Trainer(mse, linear_params(), qb.optim.SGD(), qb.zeros((2, 3)), batch_argnums=3)
    with pytest.raises(qb.UnsupportedOperationError) as info:
        qb.optim.Trainer(pinn_loss, qb.array(2.5), qb.optim.Adam(), X, device="cuda")
    assert info.value.device == "cuda"
