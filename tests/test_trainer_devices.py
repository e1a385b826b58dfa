"""qb.optim.Trainer on "mlx" (mlx[cpu]) and "cuda" (the numba.cuda simulator unless a GPU is
there): the README PINN converges to pi; a few steps agree with the CPU Trainer within float32
tolerance; checkpoint and resume are bit-identical (both back ends are deterministic: MLX's
CPU stream, and numba.cuda's kernels for one launch configuration); batch replacements are
checked as on the CPU; parameters, optimizer moments, the step count and the data stay device
arrays between steps, and ``step()`` copies nothing to or from the host.

Each ``case_*`` takes the device name. The MLX tests call them here. numba.cuda reads
NUMBA_ENABLE_CUDASIM when Numba is first imported (other tests import it first), so the CUDA
cases run in ONE subprocess under the simulator, as in tests/test_device_cuda.py, or in this
process when that variable is set (``pytest -m cuda`` on a GPU machine).
"""

import contextlib
import importlib.util
import json
import math
import os
import sys
import tempfile
import warnings

import numpy as np
import pytest

import quabla as qb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


import cuda_runner  # noqa: E402
from helpers import PINN_X as X, mse, pinn_loss, linear_data, linear_params  # noqa: E402


def _trainer(loss, params, opt, *data, device, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", qb.PrecisionWarning)  # MLX runs float64 as float32
        return qb.optim.Trainer(loss, params, opt, *data, device=device, **kw)


def _on_device(device, value):
    """Is ``value`` a device array of ``device`` (an mx.array, a numba.cuda device array)?"""
    if device == "mlx":
        import mlx.core as mx

        return isinstance(value, mx.array)
    from numba import cuda

    return cuda.devicearray.is_cuda_ndarray(value) and not isinstance(value, np.ndarray)


# -- the cases, one per device -------------------------------------------------------------------

def case_readme_pinn_converges_and_agrees_with_the_cpu(device):
    """300 Adam steps reach pi to float32 accuracy; after 5 steps loss and w agree with the
    CPU Trainer within float32 tolerance."""
    device_trainer = _trainer(pinn_loss, qb.array(2.5), qb.optim.Adam(0.05), X, device=device)
    cpu = _trainer(pinn_loss, qb.array(2.5), qb.optim.Adam(0.05), X, device="cpu")
    for _ in range(5):
        device_trainer.step()
        cpu.step()
    np.testing.assert_allclose(device_trainer.params.item(), cpu.params.item(), rtol=1e-6)
    np.testing.assert_allclose(device_trainer.loss().item(), cpu.loss().item(), rtol=1e-4)
    assert device_trainer.params.dtype == qb.float64 and device_trainer.steps == 5
    for _ in range(295):
        device_trainer.step()
    assert abs(device_trainer.params.item() - math.pi) < 1e-6
    assert device_trainer.loss().item() < 1e-9
    assert device_trainer.steps == 300


def case_resume_is_bit_identical(device):
    """state_dict -> qb.save -> qb.load -> load_state_dict, then continue: the same bits as an
    uninterrupted run (Adam with weight decay and a schedule; SGD with Nesterov momentum)."""
    xs, ys = linear_data(8)
    for opt in (qb.optim.Adam(qb.optim.schedules.cosine_decay(0.1, 6), weight_decay=0.01),
                qb.optim.SGD(0.05, momentum=0.9, nesterov=True)):
        full = _trainer(mse, linear_params(), opt, xs, ys, device=device)
        for _ in range(6):
            full.step()
        first = _trainer(mse, linear_params(), opt, xs, ys, device=device)
        for _ in range(3):
            first.step()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trainer.qb")
            qb.save(path, first.state_dict())
            resumed = _trainer(mse, linear_params(), opt, xs, ys, device=device)
            resumed.load_state_dict(qb.load(path))
        assert resumed.steps == 3
        for _ in range(3):
            resumed.step()
        for key in ("w", "b", "frozen"):
            assert resumed.params[key].numpy().tobytes() == full.params[key].numpy().tobytes()
        assert resumed.loss().numpy().tobytes() == full.loss().numpy().tobytes()
        state = resumed.state_dict()["opt_state"]
        assert state["step"] == 6 and set(state) == {"step", *opt.slots}
        with pytest.raises(ValueError, match=r"expected float64\[3\]"):
            resumed.load_state_dict({"params": dict(linear_params(), w=qb.zeros(4)),
                                     "opt_state": state})


def case_batches_are_checked_and_uploaded(device):
    """step(*batch) replaces the batch data (matching the CPU Trainer); a wrong structure,
    shape or dtype is the CPU's ValueError naming the mismatch, and the step is not taken."""
    xs, ys = linear_data(8)
    opt = qb.optim.SGD(0.1, momentum=0.5)
    trainer = _trainer(mse, linear_params(), opt, xs[:4], ys[:4], device=device,
                       batch_argnums=(0, 1))
    cpu = _trainer(mse, linear_params(), opt, xs[:4], ys[:4], device="cpu", batch_argnums=(0, 1))
    for k in range(4):
        batch = (xs[4 * (k % 2):4 * (k % 2) + 4], ys[4 * (k % 2):4 * (k % 2) + 4])
        trainer.step(*batch)
        cpu.step(*batch)
    for key in ("w", "b"):
        np.testing.assert_allclose(trainer.params[key].numpy(), cpu.params[key].numpy(),
                                   rtol=1e-5, atol=1e-6)
    assert all(_on_device(device, v) for v in trainer._values)
    with pytest.raises(ValueError, match=r"leaf 0: float64\[2, 3\], declared float64\[4, 3\]"):
        trainer.step(xs[:2], ys[:4])
    with pytest.raises(ValueError, match=r"argument 1, leaf 0: float32\[4\], declared float64"):
        trainer.step(xs[:4], qb.array(ys[:4], dtype=qb.float32))
    with pytest.raises(ValueError, match="batch for data argument 0"):
        trainer.step([xs[:4]], ys[:4])
    with pytest.raises(TypeError, match="2 batch argument"):
        trainer.step(xs[:4])
    assert trainer.steps == 4


def case_operands_stay_resident(device):
    """Parameters, moments, the step count and retained data are device arrays after step(),
    and step() makes no host transfer: no readback and no upload (counted)."""
    xs, ys = linear_data(8)
    trainer = _trainer(mse, linear_params(), qb.optim.Adam(0.1), xs, ys, device=device)
    trainer.step()
    values = list(trainer._values)
    assert values and all(_on_device(device, v) for v in values)
    counts = {}
    with _counting_transfers(device, counts):
        for _ in range(3):
            trainer.step()
    assert counts == {"to_host": 0, "to_device": 0}, counts
    assert trainer._values[0] is not values[0]  # new parameters, handed over on the device
    assert all(_on_device(device, v) for v in trainer._values)
    with _counting_transfers(device, counts):
        w, loss = trainer.params["w"], trainer.loss()  # the explicit readbacks
    assert counts["to_host"] >= 2 and counts["to_device"] == 0
    assert isinstance(w, qb.Tensor) and w.shape == (3,) and loss.shape == ()


@contextlib.contextmanager
def _counting_transfers(device, counts):
    """Counts the back end's host transfers while the block runs: for MLX the executable's
    conversions (``to_host``, ``to_device``, and the host-array ``run``); for numba.cuda every
    ``copy_to_host`` of a device array and every ``cuda.to_device``."""
    counts.update(to_host=0, to_device=0)

    def counted(key, fn):
        def wrapper(*args, **kwargs):
            counts[key] += 1
            return fn(*args, **kwargs)
        return wrapper

    patches = []
    if device == "mlx":
        from lowering.mlx import MlxExecutable as cls

        patches = [(cls, "to_host", "to_host"), (cls, "run", "to_host"),
                   (cls, "to_device", "to_device")]
    else:
        from numba import cuda

        array_type = type(cuda.to_device(np.zeros(1)))
        patches = [(array_type, "copy_to_host", "to_host"), (cuda, "to_device", "to_device")]
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    try:
        for owner, name, key in patches:
            setattr(owner, name, counted(key, getattr(owner, name)))
        yield counts
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


CASES = {name[5:]: fn for name, fn in list(globals().items()) if name.startswith("case_")}


# -- MLX, in this process ------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_mlx(name):
    if importlib.util.find_spec("mlx") is None:
        pytest.skip("mlx is not installed (the 'mlx' extra installs it)")
    CASES[name]("mlx")


# -- CUDA: one simulator subprocess per session -------------------------------------------------

def run_all_cuda():
    """Every case on "cuda" in this process: "ok" or the error of each."""
    return cuda_runner.run_cases((name, lambda n=name: CASES[n]("cuda")) for name in sorted(CASES))


@pytest.fixture(scope="module")
def cuda_results():
    cuda_runner.require_numba_cuda()
    return cuda_runner.results(__file__, run_all_cuda, timeout=900)


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda(cuda_results, name):
    assert cuda_results[name] == "ok", cuda_results[name]


if __name__ == "__main__":
    print(json.dumps(run_all_cuda()))
