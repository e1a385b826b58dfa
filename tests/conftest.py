"""Shared pytest configuration."""

import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cuda: runs on the numba.cuda back end (its simulator unless "
        "NUMBA_ENABLE_CUDASIM is set; `pytest -m cuda` alone on a GPU machine)")
    config.addinivalue_line(
        "markers", "on_device: a CUDA run of a device-parametrised test (one that takes `on`)")


def pytest_generate_tests(metafunc):
    """A test that takes ``on`` (helpers.OnDevice) runs once per device this process has; its
    "cuda:N" runs are marked ``cuda``. Where the process has no CUDA device (numba.cuda picks
    its simulator only when Numba is first imported), tests/test_device_suite_cuda.py runs
    them in a subprocess under the simulator."""
    if "on" not in metafunc.fixturenames:
        return
    import quabla as qb
    from helpers import OnDevice

    metafunc.parametrize("on", [
        pytest.param(OnDevice(device), id=device,
                     marks=[pytest.mark.cuda, pytest.mark.on_device]
                     if device.startswith("cuda") else [])
        for device in qb.devices()])


@pytest.fixture
def pipelines(monkeypatch):
    """The LLVM pipeline (numba_cpu/machine.py) of each module this process compiles while
    the test runs, in order (forked copies' compiles are not seen)."""
    from lowering.numba_cpu import machine

    seen = []
    compile_module = machine.ObjectCode._compile

    def recorded(self, module):
        seen.append(self._pipeline)
        return compile_module(self, module)

    monkeypatch.setattr(machine.ObjectCode, "_compile", recorded)
    return seen
