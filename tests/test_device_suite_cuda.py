"""The device-parametrised tests (those that take ``on``, helpers.OnDevice) on "cuda:0" under
numba.cuda's simulator. numba.cuda chooses the simulator when Numba is first imported, so a
process without a CUDA device cannot run their cuda:0 cases itself: this test runs them all in
one subprocess (``pytest -m "cuda and on_device"`` with NUMBA_ENABLE_CUDASIM=1) and fails with
its report. Where this process has a CUDA device (the simulator set for the whole run, or a
GPU with ``pytest -m cuda``) they run in place and this test is skipped."""

import os
import subprocess
import sys

import pytest

import quabla as qb

import cuda_runner

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.cuda
cuda_runner.require_numba_cuda()


def test_device_parametrised_tests_on_the_cuda_simulator():
    if "cuda:0" in qb.devices():
        pytest.skip("this process has cuda:0: the device-parametrised tests run on it in place")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
         "cuda and on_device", HERE], env=env, cwd=cuda_runner.ROOT, capture_output=True,
        text=True, timeout=1800)
    report = done.stdout[-8000:] + done.stderr[-2000:]
    assert done.returncode == 0, report
    assert " passed" in report and " failed" not in report, report
