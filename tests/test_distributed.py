"""qb.distributed: the value and gradient of the whole problem on every rank, equal to one
process's on all the rows (to 1e-12), with uneven shards, both reductions, ``has_aux``,
pytree parameters, devices, the helpers, the Trainer's identical parameters, mismatched
signatures and a failing rank.

The MPI checks run as three jobs (1, 2 and 3 ranks; 3 oversubscribe a 2-core machine),
each one ``mpiexec`` of ``tests/mpi_checks.py`` that writes every rank's results to JSON,
launched once per test session (pytest-xdist's workers share it through a lock). They
skip, with the reason, only where MPI cannot be launched (``tests/mpi_launch.py``). The
rest runs in this process, where the job is this process alone.
"""

import contextlib
import fcntl
import json
import os
import time

import numpy as np
import pytest

import quabla as qb
import quabla.distributed as dist
import mpi_launch
from quabla.distributed.combine import combine, signature_key
from quabla.distributed.communicator import Communicator, LocalCommunicator, launched_by_mpi

TOL = dict(rtol=1e-12, atol=1e-12)
RANKS = (1, 2, 3)


# -- the MPI jobs -----------------------------------------------------------------------------

@contextlib.contextmanager
def _locked(path):
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory):
    """A directory every xdist worker of this session sees."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def job(shared_dir):
    """``job(n)``: the report of ``tests/mpi_checks.py`` on ``n`` ranks (one launch per
    session)."""
    reason = mpi_launch.unavailable()
    if reason:
        pytest.skip(reason)

    def run(n):
        path = shared_dir / f"mpi_checks_{n}.json"
        with _locked(shared_dir / f"mpi_checks_{n}.lock"):
            if not path.exists():
                done = mpi_launch.launch(n, mpi_launch.TESTS / "mpi_checks.py", path)
                assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        return json.loads(path.read_text())
    return run


def _flat(tree):
    return np.hstack([np.ravel(np.asarray(a, float)) for a in qb.tree.leaves(tree)])


@pytest.mark.parametrize("n", RANKS)
def test_every_rank_runs_in_one_mpi_job(job, n):
    report = job(n)
    ranks = report["ranks"]
    assert report["communicator"] == "mpi"
    assert [r["rank"] for r in ranks] == list(range(n)) and {r["size"] for r in ranks} == {n}
    assert [r["local_rank"] for r in ranks] == list(range(n))   # one node
    assert [r["is_root"] for r in ranks] == [True] + [False] * (n - 1)
    assert [r["rows"] for r in ranks] == [len(a) for a in np.array_split(np.arange(7), n)]


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("check, reference", [("mean", "mean"), ("sum", "sum"),
                                              ("aux", "aux"), ("devices", "mean")])
def test_distributed_value_and_grad_equals_one_process(job, n, check, reference):
    """Uneven shards (4 + 3, 3 + 2 + 2 rows), both reductions, ``has_aux`` with two
    parameter arguments, pytree parameters, and devices listed."""
    report = job(n)
    expected = _flat(report["reference"][reference])
    for r in report["ranks"]:
        got = r[check]
        assert qb.tree.structure(got) == qb.tree.structure(report["reference"][reference])
        np.testing.assert_allclose(_flat(got), expected, **TOL)


@pytest.mark.parametrize("n", RANKS)
def test_repeated_calls_give_the_same_bits(job, n):
    for r in job(n)["ranks"]:
        assert r["repeat"][0] == r["repeat"][1]


@pytest.mark.parametrize("n", RANKS)
def test_helpers(job, n):
    ranks = job(n)["ranks"]
    assert len({tuple(r["broadcast"]) for r in ranks}) == 1   # rank 0's draw everywhere
    expected_sum = sum(range(n))
    for r in ranks:
        summed, mean = r["allreduce"]
        assert summed == {"r": float(expected_sum), "v": [float(n), 2.0 * n]}
        assert mean == expected_sum / n
    shards = [r["shard"] for r in ranks]
    assert shards == [a.tolist() for a in np.array_split(np.arange(10.0), n)]


@pytest.mark.parametrize("n", RANKS)
def test_trainer_keeps_identical_parameters_on_every_rank(job, n):
    """20 Adam steps on different rows per rank (and a different random start on every rank
    but 0): the same bits everywhere, equal to one process on all the rows; ``fit``'s
    progress bar on rank 0 only."""
    report = job(n)
    ranks, reference = report["ranks"], report["reference"]["trainer"]
    assert len({tuple(r["trainer"]["params_bits"]) for r in ranks}) == 1
    assert len({tuple(r["trainer"]["state_bits"]) for r in ranks}) == 1
    assert [r["trainer"]["bars"] for r in ranks] == [[None]] + [[True]] * (n - 1)  # rank 0's
    for r in ranks:
        assert r["trainer"]["steps"] == 20
        np.testing.assert_allclose(r["trainer"]["history"], reference["history"], **TOL)
        np.testing.assert_allclose(_flat(r["trainer"]["params"]), _flat(reference["params"]),
                                   **TOL)


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("kind", ["shape", "structure"])
def test_mismatched_signatures_raise_on_every_rank(job, n, kind):
    ranks = job(n)["ranks"]
    messages = [r[f"mismatch_{kind}"] for r in ranks]
    assert all(m is not None and "different shapes or structures" in m for m in messages)
    assert len(set(messages)) == 1                      # the same text on every rank
    assert f"rank {n - 1}: " in messages[0]             # the odd one out, named
    assert ("ranks 0, 1: " if n == 3 else "rank 0: ") in messages[0]


@pytest.mark.parametrize("n", RANKS)
def test_threads_default_to_a_share_of_the_cores(job, n):
    """Without QUABLA_NUM_THREADS, the ranks on a node split its cores (at least 1 each)."""
    for r in job(n)["ranks"]:
        t = r["threads"]
        assert t["count"] == max(1, t["cores"] // n)


_FAILING = """
import quabla.distributed as dist
if dist.rank() == 1:
    raise RuntimeError("rank 1 fails on purpose")
dist.barrier()    # rank 0 waits here for a rank that will never come
"""


def test_a_failing_rank_ends_the_job(shared_dir):
    """``python -m mpi4py`` aborts the whole job on an uncaught exception: no hang, and the
    failing rank's error is printed."""
    reason = mpi_launch.unavailable()
    if reason:
        pytest.skip(reason)
    script = shared_dir / f"mpi_failing_{os.getpid()}.py"
    script.write_text(_FAILING)
    start = time.monotonic()
    done = mpi_launch.launch(2, script, timeout=120)
    assert time.monotonic() - start < 120
    assert done.returncode != 0
    assert "rank 1 fails on purpose" in done.stdout + done.stderr


# -- this process alone -----------------------------------------------------------------------

def _loss(p, x, y):
    return qb.mean((qb.tanh(x @ p["W"])[:, 0] - y) ** 2)


def _problem(rows=5):
    rng = np.random.default_rng(3)
    return ({"W": qb.array(rng.normal(size=(2, 1)))}, rng.normal(size=(rows, 2)),
            rng.normal(size=rows))


def test_without_a_launcher_the_job_is_this_process():
    import sys

    assert "mpi4py.MPI" not in sys.modules     # quabla never initializes MPI by itself
    assert not launched_by_mpi({})
    assert launched_by_mpi({"PMI_RANK": "0"})
    if not launched_by_mpi():
        assert isinstance(dist.world(), LocalCommunicator)
        assert (dist.rank(), dist.size(), dist.local_rank(), dist.is_root()) == (0, 1, 0, True)


def test_one_process_splits_its_rows_across_devices():
    p, x, y = _problem()
    value, grads = qb.value_and_grad(_loss)(p, qb.array(x), qb.array(y))
    for devices in (None, ["cpu"], ["cpu", "cpu", "cpu"]):
        v, g = dist.value_and_grad(_loss, shard_argnums=(1, 2), devices=devices)(p, x, y)
        np.testing.assert_allclose(float(v), float(value), **TOL)
        np.testing.assert_allclose(_flat(g), _flat(grads), **TOL)


def test_bad_arguments_are_refused():
    p, x, y = _problem()
    with pytest.raises(TypeError):
        dist.value_and_grad(_loss, argnums=0)   # shard_argnums is required
    with pytest.raises(ValueError, match="reduction"):
        dist.value_and_grad(_loss, shard_argnums=1, reduction="max")
    with pytest.raises(ValueError, match="replicated parameters"):
        dist.value_and_grad(_loss, shard_argnums=(0, 1))
    with pytest.raises(ValueError, match="devices"):
        dist.value_and_grad(_loss, shard_argnums=1, devices=[])
    with pytest.raises(ValueError, match="row counts"):
        dist.value_and_grad(_loss, shard_argnums=(1, 2))(p, x, y[:3])
    with pytest.raises(ValueError, match="op"):
        dist.allreduce(1.0, op="max")
    with pytest.raises(ValueError, match="root"):
        dist.broadcast(1.0, root=3)
    with pytest.raises(ValueError, match="shard_argnums"):
        dist.Trainer(_loss, p, qb.optim.SGD(0.1), x, y, shard_argnums=5)


@pytest.mark.parametrize("n", [7, 10, 3])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_row_ranges_split_as_numpy_does(n, size):
    blocks = np.array_split(np.arange(n), size)
    ranges = [dist.row_range(n, r, size) for r in range(size)]
    assert [list(range(*r)) for r in ranges] == [b.tolist() for b in blocks]


def test_the_trainer_alone_matches_the_plain_trainer():
    p, x, y = _problem()
    plain = qb.optim.Trainer(_loss, p, qb.optim.Adam(0.05), qb.array(x), qb.array(y))
    alone = dist.Trainer(_loss, p, qb.optim.Adam(0.05), x, y)
    assert plain.fit(5, progress=False) == alone.fit(5, progress=False)
    np.testing.assert_array_equal(_flat(plain.state_dict()), _flat(alone.state_dict()))


class _TwoRanks(Communicator):
    """Rank 0 of a job of two whose other rank's buffer and signature are given."""

    size = 2

    def __init__(self, other_buffer, other_text):
        self.other_buffer, self.other_text = other_buffer, other_text

    def allreduce_sum(self, buffer):
        buffer += self.other_buffer
        return buffer

    def allgather(self, value):
        return [value, self.other_text]


def _buffer(rows, arrays, text):
    key = signature_key(text)
    return np.hstack([[rows, key, key * key]] + [np.ravel(a) * rows for a in arrays])


def test_combine_weights_ranks_by_rows_and_skips_empty_ones():
    mine, other = [np.array(1.0), np.array([2.0, 4.0])], [np.array(3.0), np.array([0.0, 1.0])]
    value, grad = combine(_TwoRanks(_buffer(3, other, "s"), "s"), 1, mine, "mean", "s")
    assert value == (1.0 + 3 * 3.0) / 4 and grad.tolist() == [0.5, 1.75]
    empty = [np.array(np.nan), np.array([np.nan, np.nan])]   # no rows: only the shapes count
    value, grad = combine(_TwoRanks(_buffer(3, other, "s"), "s"), 0, empty, "mean", "s")
    assert value == 3.0 and grad.tolist() == [0.0, 1.0]


def test_combine_sees_a_signature_mismatch_on_a_repeated_call():
    """Buffers of the same length but another signature: every rank's sums of the keys say
    so, and every rank names both signatures."""
    arrays = [np.array(1.0), np.array([2.0, 4.0])]
    with pytest.raises(ValueError, match="rank 1: float32") as raised:
        combine(_TwoRanks(_buffer(2, arrays, "float32[*]"), "float32[*]"), 2, arrays, "mean",
                "float64[*]")
    assert "rank 0: float64[*]" in str(raised.value)


def test_the_trainers_combine_hook_runs_between_two_programs():
    p, x, y = _problem()
    seen = []

    def combine_(arrays):
        seen.append([a.shape for a in arrays])
        return arrays

    fused = qb.optim.Trainer(_loss, p, qb.optim.Adam(0.05), qb.array(x), qb.array(y))
    split = qb.optim.Trainer(_loss, p, qb.optim.Adam(0.05), qb.array(x), qb.array(y),
                             combine=combine_)
    np.testing.assert_allclose(split.fit(5, progress=False), fused.fit(5, progress=False), **TOL)
    np.testing.assert_allclose(_flat(split.state_dict()), _flat(fused.state_dict()), **TOL)
    assert seen == [[(), (2, 1)]] * 5
    with pytest.raises(TypeError, match="combine"):
        qb.optim.Trainer(_loss, p, qb.optim.Adam(0.05), qb.array(x), qb.array(y), combine=1)
