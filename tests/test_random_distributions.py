"""Tests of the samplers of quabla.random beyond uniform/normal/bernoulli (issue 24, item 8).

Streams are checked against independent pure-Python readings of docs/random.md where the
algorithm is integer arithmetic (randint, permutation, choice), and every distribution against
its analytic moments and, where SciPy is installed, a Kolmogorov-Smirnov test. Keys are fixed,
so the tests are deterministic.
"""

import math

import numpy as np
import pytest

import quabla as qb
from quabla import random as qr
from quabla.errors import TracerError

from random_reference import GOLDEN, MASK, ref_mix, ref_out, ref_unmix  # noqa: F401
N = 20_000


def np_of(t):
    assert isinstance(t, qb.Tensor)
    return np.asarray(t)


# -- an independent pure-Python reference of docs/random.md ---------------------------------------


def key_with_first_output(x):
    """A Key whose stream starts with the 64-bit value ``x``."""
    return qr.Key((ref_unmix(x) - GOLDEN) & MASK)


def ref_bounded(state, ranges):
    """Lemire with rejection, in rounds (docs/random.md, "Rejection rounds" and "randint")."""
    ranges = [int(r) for r in ranges]
    out = [None] * len(ranges)
    pending = list(range(len(ranges)))
    c = 0
    while pending:
        rejected = []
        for j, k in enumerate(pending):
            prod = ref_out(state, c + j) * ranges[k]
            hi, lo = prod >> 64, prod & MASK
            if lo >= ((1 << 64) - ranges[k]) % ranges[k]:
                out[k] = hi
            else:
                rejected.append(k)
        c += len(pending)
        pending = rejected
    return out


def ref_fisher_yates(state, n, count):
    draws = ref_bounded(state, list(range(n, n - count, -1)))
    perm = list(range(n))
    for i, r in enumerate(draws):
        perm[i], perm[i + r] = perm[i + r], perm[i]
    return perm[:count]


# -- streams ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2**63 + 5])
def test_randint_matches_reference(seed):
    key = qr.key(seed)
    got = np_of(qr.randint(key, (3, 17), -5, 1000))
    ref = [-5 + v for v in ref_bounded(seed, [1005] * 51)]
    assert got.dtype == np.float64 and got.tolist() == np.reshape(ref, (3, 17)).tolist()
    lo = np.array([0, -10, 2**52])
    hi = np.array([1, 10, 2**53])
    got = np_of(qr.randint(key, (4, 3), lo, hi))
    draws = ref_bounded(seed, np.tile(hi - lo, 4).tolist())
    ref = [int(a) + v for a, v in zip(np.tile(lo, 4), draws)]
    assert got.reshape(-1).tolist() == ref


def test_randint_rejection_continues_the_stream():
    # With r = 3 * 2**52 an output u is rejected exactly when u = 0 mod 4096.
    r = 3 * 2**52
    key = key_with_first_output(4096 * 12345)
    got = np_of(qr.randint(key, (3,), -(2**52), 2**53))
    ref = ref_bounded(key.state, [r] * 3)
    assert got.tolist() == [-(2**52) + v for v in ref]
    # Element 0 was rejected in the first round and took output 3 in the second one.
    prod = ref_out(key.state, 3) * r
    assert got[0] == -(2**52) + (prod >> 64)


def test_randint_float32_and_whole_float_bounds():
    key = qr.key(3)
    a = np_of(qr.randint(key, (50,), 0.0, 2**24, dtype=qb.float32))
    b = np_of(qr.randint(key, (50,), 0, 2**24))
    assert a.dtype == np.float32 and np.array_equal(a.astype(np.float64), b)
    # Bounds may be index-valued Tensors.
    c = np_of(qr.randint(key, (50,), qb.asarray(0.0), qb.asarray(float(2**24))))
    assert np.array_equal(c, b)


@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_permutation_matches_fisher_yates_reference(n):
    key = qr.key(11)
    perm = np_of(qr.permutation(key, n))
    assert perm.tolist() == ref_fisher_yates(key.state, n, n)
    assert np.array_equal(np.sort(perm), np.arange(n))
    # choice without replacement is a prefix of the same shuffle.
    k = min(n, 5)
    prefix = np_of(qr.choice(key, n, (k,), replace=False))
    assert prefix.tolist() == ref_fisher_yates(key.state, n, k)
    assert np.array_equal(np_of(qr.choice(key, n, (n,), replace=False)), perm)


def test_choice_with_p_is_the_inverse_cdf():
    key = qr.key(21)
    p = [0.1, 0.0, 0.25, 0.65]
    got = np_of(qr.choice(key, 4, (200,), p=p))
    cdf = np.cumsum(p)
    u = [(ref_out(key.state, k) >> 11) * 2.0**-53 * cdf[-1] for k in range(200)]
    ref = [min(int(np.searchsorted(cdf, x, side="right")), 3) for x in u]
    assert got.tolist() == ref
    assert not np.any(got == 1)


def test_choice_replace_without_p_is_randint():
    key = qr.key(4)
    assert np.array_equal(np_of(qr.choice(key, 9, (5, 6))), np_of(qr.randint(key, (5, 6), 0, 9)))


def test_gumbel_exponential_laplace_rademacher_formulas():
    key = qr.key(8)
    bits = [ref_out(key.state, k) for k in range(64)]
    v = np.array([(2 * (u >> 12) + 1) * 2.0**-53 for u in bits])
    np.testing.assert_allclose(np_of(qr.gumbel(key, (64,))), -np.log(-np.log(v)), rtol=1e-15)
    np.testing.assert_allclose(
        np_of(qr.laplace(key, (64,))),
        np.where(v < 0.5, np.log(2 * v), -np.log(2 - 2 * v)), rtol=1e-15,
    )
    u1 = np.array([((u >> 11) + 1) * 2.0**-53 for u in bits])
    np.testing.assert_allclose(np_of(qr.exponential(key, (64,))), -np.log(u1), rtol=1e-15)
    signs = [1.0 if (u >> 63) == 0 else -1.0 for u in bits]
    assert np_of(qr.rademacher(key, (64,))).tolist() == signs
    heads = np_of(qr.bernoulli(key, 0.5, (64,)))
    assert np.array_equal(np_of(qr.rademacher(key, (64,))) > 0, heads)


def test_stream_prefix_property():
    key = qr.key(13)
    for fn in (qr.exponential, qr.gumbel, qr.laplace, qr.rademacher):
        assert np.array_equal(np_of(fn(key, (10,))), np_of(fn(key, (30,)))[:10])
    assert np.array_equal(
        np_of(qr.truncated_normal(key, -1.0, 2.0, (10,))),
        np_of(qr.truncated_normal(key, -1.0, 2.0, (30,)))[:10],
    )


def test_multivariate_normal_and_orthogonal_use_the_normal_stream():
    key = qr.key(17)
    z = np_of(qr.normal(key, (5, 3)))
    mean = np.array([1.0, -2.0, 0.5])
    cov = np.diag([4.0, 1.0, 0.25])
    x = np_of(qr.multivariate_normal(key, mean, cov, (5,)))
    np.testing.assert_allclose(x, mean + z * np.array([2.0, 1.0, 0.5]), rtol=1e-14)
    q = np_of(qr.orthogonal(key, 3))
    z = np_of(qr.normal(key, (3, 3)))
    qq, rr = np.linalg.qr(z)
    np.testing.assert_allclose(q, qq * np.sign(np.diag(rr)), atol=1e-14)


def test_beta_and_dirichlet_follow_gamma():
    key = qr.key(19)
    ka, kb = qr.split(key)
    a, b = 2.5, 0.7
    ga, gb = np_of(qr.gamma(ka, a, (50,))), np_of(qr.gamma(kb, b, (50,)))
    np.testing.assert_allclose(np_of(qr.beta(key, a, b, (50,))), ga / (ga + gb), rtol=1e-12)
    alpha = np.array([0.5, 2.0, 3.0])
    g = np_of(qr.gamma(key, np.broadcast_to(alpha, (40, 3)), (40, 3)))
    np.testing.assert_allclose(
        np_of(qr.dirichlet(key, alpha, (40,))), g / g.sum(-1, keepdims=True), rtol=1e-12,
    )


# -- determinism, shapes, dtypes -------------------------------------------------------------------

SAMPLERS = {
    "randint": lambda k: qr.randint(k, (40,), 0, 100),
    "choice": lambda k: qr.choice(k, 50, (10,)),
    "choice_noreplace": lambda k: qr.choice(k, 50, (10,), replace=False),
    "choice_p": lambda k: qr.choice(k, 5, (40,), p=[0.1, 0.2, 0.3, 0.2, 0.2]),
    "choice_p_noreplace": lambda k: qr.choice(k, 50, (10,), replace=False, p=np.ones(50)),
    "permutation": lambda k: qr.permutation(k, 30),
    "permutation_array": lambda k: qr.permutation(k, np.arange(12.0).reshape(3, 4), axis=1),
    "categorical": lambda k: qr.categorical(k, np.zeros((4, 6))),
    "truncated_normal": lambda k: qr.truncated_normal(k, -1.0, 1.0, (20,)),
    "exponential": lambda k: qr.exponential(k, (20,)),
    "gumbel": lambda k: qr.gumbel(k, (20,)),
    "laplace": lambda k: qr.laplace(k, (20,)),
    "gamma": lambda k: qr.gamma(k, 0.5, (20,)),
    "beta": lambda k: qr.beta(k, 2.0, 3.0, (20,)),
    "dirichlet": lambda k: qr.dirichlet(k, [1.0, 2.0, 3.0], (5,)),
    "multivariate_normal": lambda k: qr.multivariate_normal(k, np.zeros(2), np.eye(2), (5,)),
    "orthogonal": lambda k: qr.orthogonal(k, 4),
    "ball": lambda k: qr.ball(k, 3, shape=(5,)),
    "rademacher": lambda k: qr.rademacher(k, (40,)),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_same_key_same_numbers_different_keys_differ(name):
    sampler = SAMPLERS[name]
    a = np_of(sampler(qr.key(123)))
    assert np.array_equal(a, np_of(sampler(qr.key(123))))
    assert not np.array_equal(a, np_of(sampler(qr.key(124))))
    k1, k2 = qr.split(qr.key(123))
    assert not np.array_equal(np_of(sampler(k1)), np_of(sampler(k2)))
    v = sampler(qr.key(5)).numpy()
    assert v.flags.c_contiguous and not v.flags.writeable


@pytest.mark.parametrize("dtype,expected", [(None, qb.float64), (qb.float64, qb.float64),
                                            (qb.float32, qb.float32), ("float32", qb.float32)])
def test_dtypes(dtype, expected):
    key = qr.key(0)
    for t in (
        qr.randint(key, (3,), 0, 5, dtype),
        qr.truncated_normal(key, -1.0, 1.0, (3,), dtype),
        qr.exponential(key, (3,), dtype),
        qr.gumbel(key, (3,), dtype),
        qr.laplace(key, (3,), dtype),
        qr.gamma(key, 2.0, (3,), dtype),
        qr.beta(key, 2.0, 2.0, (3,), dtype),
        qr.dirichlet(key, [1.0, 1.0], (3,), dtype),
        qr.multivariate_normal(key, np.zeros(2), np.eye(2), (3,), dtype),
        qr.orthogonal(key, 3, (), dtype),
        qr.ball(key, 2, 2, (3,), dtype),
        qr.rademacher(key, (3,), dtype),
    ):
        assert t.dtype is expected
    # float32 results are the float64 ones rounded.
    if expected is qb.float32:
        for fn in (qr.exponential, qr.gumbel, qr.laplace):
            wide = np_of(fn(key, (9,))).astype(np.float32)
            assert np.array_equal(np_of(fn(key, (9,), dtype)), wide)


def test_index_results_are_float64():
    key = qr.key(0)
    for t in (qr.choice(key, 5, (3,)), qr.permutation(key, 5), qr.categorical(key, np.zeros(3))):
        assert t.dtype is qb.float64
        assert np.array_equal(np_of(t), np.round(np_of(t)))


def test_shapes():
    key = qr.key(0)
    assert qr.randint(key, (), 0, 3).shape == []
    for fn in (qr.exponential, qr.gumbel, qr.laplace, qr.rademacher):
        assert fn(key).shape == []
    assert qr.truncated_normal(key, 0.0, 1.0, ()).shape == []
    t = qr.choice(key, np.arange(4.0))
    assert t.shape == [] and type(t.value) is np.ndarray and t.value.ndim == 0
    assert qr.categorical(key, np.zeros(3)).shape == []
    assert qr.randint(key, 4, 0, 3).shape == [4]
    assert qr.exponential(key).shape == []
    assert qr.gamma(key, np.ones((2, 3))).shape == [2, 3]
    assert qr.gamma(key, np.ones(3), (4, 3)).shape == [4, 3]
    assert qr.beta(key, np.ones((2, 1)), np.ones(3)).shape == [2, 3]
    assert qr.truncated_normal(key, np.zeros(3), 1.0).shape == [3]
    assert qr.truncated_normal(key, -1.0, 1.0).shape == []
    assert qr.dirichlet(key, np.ones((2, 4))).shape == [2, 4]
    assert qr.dirichlet(key, np.ones(4), (5, 2)).shape == [5, 2, 4]
    assert qr.multivariate_normal(key, np.zeros(3), np.eye(3)).shape == [3]
    assert qr.multivariate_normal(key, np.zeros((2, 3)), np.eye(3)).shape == [2, 3]
    assert qr.multivariate_normal(key, np.zeros(3), np.eye(3), (4, 2)).shape == [4, 2, 3]
    assert qr.orthogonal(key, 3, (2,)).shape == [2, 3, 3]
    assert qr.orthogonal(key, 3, m=5).shape == [3, 5]
    assert qr.orthogonal(key, 5, m=3).shape == [5, 3]
    assert qr.ball(key, 4).shape == [4]
    assert qr.ball(key, 4, shape=(2, 3)).shape == [2, 3, 4]
    # choice: a.shape[:axis] + shape + a.shape[axis+1:]
    a = np.arange(24.0).reshape(2, 3, 4)
    assert qr.choice(key, a, (5,), axis=1).shape == [2, 5, 4]
    assert qr.choice(key, a, (), axis=-1).shape == [2, 3]
    assert qr.choice(key, 7).shape == []
    # categorical: like JAX.
    logits = np.zeros((2, 5))
    assert qr.categorical(key, logits).shape == [2]
    assert qr.categorical(key, logits, axis=0).shape == [5]
    assert qr.categorical(key, logits, shape=(3, 2)).shape == [3, 2]
    assert qr.categorical(key, np.zeros((1, 5)), shape=(3, 4)).shape == [3, 4]
    assert qr.categorical(key, logits, shape=(4, 2), replace=False).shape == [4, 2]


def test_choice_and_permutation_of_arrays_keep_dtype_and_entries():
    key = qr.key(2)
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    p = np_of(qr.permutation(key, a, axis=1))
    assert p.dtype == np.float32
    perm = np_of(qr.permutation(key, 4)).astype(int)
    assert np.array_equal(p, a[:, perm])
    q = np_of(qr.permutation(key, qb.asarray(a)))  # axis 0, a Tensor
    assert np.array_equal(q, a[np_of(qr.permutation(key, 3)).astype(int)])
    ind = np_of(qr.permutation(key, a, axis=1, independent=True))
    assert all(sorted(row) == sorted(arow) for row, arow in zip(ind.tolist(), a.tolist()))
    # independent shuffles: row m uses draws m*n .. m*n + n - 1 of one randint-style draw
    draws = ref_bounded(key.state, [4, 3, 2, 1] * 3)
    for m in range(3):
        perm = list(range(4))
        for i, r in enumerate(draws[4 * m:4 * m + 4]):
            perm[i], perm[i + r] = perm[i + r], perm[i]
        assert ind[m].tolist() == a[m, perm].tolist()
    b = np.array([True, False, False])
    assert np_of(qr.choice(key, b, (4,))).dtype == np.bool_
    c = np_of(qr.choice(key, a, (2,), replace=False, axis=1))
    idx = np_of(qr.choice(key, 4, (2,), replace=False)).astype(int)
    assert np.array_equal(c, a[:, idx])
    # a 0-d whole-valued index (such as an argmax result) is a population size
    six = np_of(qr.permutation(key, qb.asarray(6.0)))
    assert np.array_equal(six, np_of(qr.permutation(key, 6)))


# -- argument errors -------------------------------------------------------------------------------


def test_key_and_dtype_errors():
    for fn in (
        lambda k: qr.randint(k, (2,), 0, 3),
        lambda k: qr.choice(k, 3),
        lambda k: qr.permutation(k, 3),
        lambda k: qr.categorical(k, np.zeros(3)),
        lambda k: qr.truncated_normal(k, 0.0, 1.0),
        lambda k: qr.exponential(k),
        lambda k: qr.gamma(k, 1.0),
        lambda k: qr.beta(k, 1.0, 1.0),
        lambda k: qr.dirichlet(k, [1.0, 1.0]),
        lambda k: qr.multivariate_normal(k, np.zeros(2), np.eye(2)),
        lambda k: qr.orthogonal(k, 2),
        lambda k: qr.ball(k, 2),
        lambda k: qr.rademacher(k),
    ):
        with pytest.raises(TypeError):
            fn(0)
        with pytest.raises(TypeError):
            fn(np.uint64(3))
    key = qr.key(0)
    for fn in (qr.exponential, qr.gumbel, qr.laplace, qr.rademacher):
        with pytest.raises(TypeError):
            fn(key, (2,), qb.bool_)
        with pytest.raises(ValueError):
            fn(key, (0,))
        with pytest.raises(TypeError):
            fn(key, (2.0,))
    with pytest.raises(TypeError):
        qr.randint(key, (2,), 0, 3, qb.bool_)
    with pytest.raises(TypeError):
        qr.gamma(key, 1.0, (2,), "int32")


def test_randint_errors():
    key = qr.key(0)
    for lo, hi in [(3, 3), (4, 3), (0.5, 3), (0, 2.5), (0, float("inf")), (float("nan"), 3),
                   (0, 2**53 + 2), (-(2**60), 0), ([0, 5], [1, 5])]:
        with pytest.raises(ValueError):
            qr.randint(key, (2,), lo, hi)
    with pytest.raises(ValueError):
        qr.randint(key, (2,), 0, 2**24 + 1, qb.float32)
    with pytest.raises(ValueError):
        qr.randint(key, (2,), [0, 1, 2], 5)  # does not broadcast to (2,)
    with pytest.raises(TypeError):
        qr.randint(key, (2,), "a", 5)
    assert np.all(np_of(qr.randint(key, (100,), -(2**53), 2**53)) >= -(2**53))


def test_choice_and_permutation_errors():
    key = qr.key(0)
    with pytest.raises(ValueError):
        qr.choice(key, 3, (4,), replace=False)
    with pytest.raises(ValueError):
        qr.choice(key, 0)
    with pytest.raises(ValueError):
        qr.choice(key, -2)
    with pytest.raises(TypeError):
        qr.choice(key, 2.5)
    with pytest.raises(TypeError):
        qr.choice(key, True)
    with pytest.raises(ValueError):
        qr.choice(key, 3, p=[0.5, 0.5])  # wrong length
    with pytest.raises(ValueError):
        qr.choice(key, 3, p=[0.5, -0.1, 0.6])
    with pytest.raises(ValueError):
        qr.choice(key, 3, p=[0.0, 0.0, 0.0])
    with pytest.raises(ValueError):
        qr.choice(key, 3, p=[0.5, float("nan"), 0.5])
    with pytest.raises(ValueError):
        qr.choice(key, 3, (3,), replace=False, p=[0.5, 0.0, 0.5])
    with pytest.raises(ValueError):
        qr.choice(key, np.zeros((2, 3)), axis=2)
    with pytest.raises(TypeError):
        qr.choice(key, np.zeros((2, 3)), axis=1.0)
    with pytest.raises(ValueError):
        qr.permutation(key, 0)
    with pytest.raises(TypeError):
        qr.permutation(key, "abc")
    with pytest.raises(ValueError):
        qr.permutation(key, np.zeros(3), axis=1)
    with pytest.raises(ValueError):
        qr.choice(key, 2**53 + 1)


def test_distribution_parameter_errors():
    key = qr.key(0)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            qr.gamma(key, bad, (2,))
        with pytest.raises(ValueError):
            qr.beta(key, 1.0, bad, (2,))
        with pytest.raises(ValueError):
            qr.dirichlet(key, [1.0, bad])
    with pytest.raises(ValueError):
        qr.gamma(key, np.ones(3), (2,))
    with pytest.raises(ValueError):
        qr.beta(key, np.ones(3), np.ones(2))
    with pytest.raises(TypeError):
        qr.gamma(key, "a")
    with pytest.raises(ValueError):
        qr.dirichlet(key, 1.0)
    with pytest.raises(ValueError):
        qr.dirichlet(key, np.ones((2, 3)), (3,))
    for lo, hi in [(1.0, 1.0), (2.0, 1.0), (float("nan"), 1.0), (0.0, 5e-324)]:
        with pytest.raises(ValueError):
            qr.truncated_normal(key, lo, hi, (2,))
    with pytest.raises(ValueError):
        qr.truncated_normal(key, 1.0, 1.0 + 1e-12, (2,), qb.float32)
    with pytest.raises(ValueError):
        qr.truncated_normal(key, np.zeros(3), 1.0, (2,))
    with pytest.raises(ValueError):
        qr.multivariate_normal(key, np.zeros(2), np.eye(3))
    with pytest.raises(ValueError):
        qr.multivariate_normal(key, np.zeros(2), np.ones(2))
    with pytest.raises(ValueError):
        qr.multivariate_normal(key, np.zeros(2), np.eye(2), method="qr")
    with pytest.raises(ValueError):
        qr.multivariate_normal(key, np.zeros(2), np.array([[1.0, 0.0], [0.0, -1.0]]))
    with pytest.raises(ValueError):
        qr.multivariate_normal(key, np.zeros((3, 2)), np.eye(2), (2,))
    with pytest.raises(ValueError):
        qr.multivariate_normal(key, np.array([0.0, np.nan]), np.eye(2))
    with pytest.raises(ValueError):
        qr.categorical(key, 1.0)
    with pytest.raises(ValueError):
        qr.categorical(key, [0.0, float("nan")])
    with pytest.raises(ValueError):
        qr.categorical(key, np.zeros((2, 3)), shape=(3,))
    with pytest.raises(ValueError):
        qr.categorical(key, np.zeros(3), shape=(4,), replace=False)
    with pytest.raises(ValueError):
        qr.categorical(key, np.zeros((2, 3)), axis=2)
    for n in (0, -1):
        with pytest.raises(ValueError):
            qr.orthogonal(key, n)
        with pytest.raises(ValueError):
            qr.ball(key, n)
    for n in (2.0, "2", True):
        with pytest.raises(TypeError):
            qr.orthogonal(key, n)
        with pytest.raises(TypeError):
            qr.ball(key, n)
    for p in (0.0, -1.0, float("inf"), [1.0, 2.0]):
        with pytest.raises(ValueError):
            qr.ball(key, 2, p)


def test_traced_parameters_are_refused():
    key = qr.key(0)
    seen = []

    def f(x):
        for fn in (lambda: qr.gamma(key, x), lambda: qr.choice(key, x, (2,)),
                   lambda: qr.categorical(key, x), lambda: qr.randint(key, (3,), 0, x)):
            with pytest.raises(TracerError):
                fn()
            seen.append(1)
        return x

    qb.jit(f)(qb.asarray([1.0, 2.0, 3.0]))
    assert len(seen) == 4


# -- distributions ---------------------------------------------------------------------------------


def check_moments(x, mean, var, sigmas=5.0):
    """Sample mean and variance within ``sigmas`` standard errors of the analytic values."""
    n = x.size
    assert abs(x.mean() - mean) < sigmas * math.sqrt(var / n), (x.mean(), mean)
    m4 = np.mean((x - mean) ** 4)
    assert abs(x.var() - var) < sigmas * math.sqrt(max(m4 - var**2, 1e-300) / n), (x.var(), var)


def kstest(x, cdf):
    stats = pytest.importorskip("scipy.stats")
    p = stats.kstest(x, cdf).pvalue
    assert p > 1e-3, p


def test_randint_distribution():
    x = np_of(qr.randint(qr.key(31), (N,), -3, 7))
    counts = np.bincount((x + 3).astype(int), minlength=10)
    assert counts.size == 10
    expected = N / 10
    assert np.all(np.abs(counts - expected) < 5 * math.sqrt(expected * 0.9))
    check_moments(x, 1.5, (10**2 - 1) / 12)
    # a huge range: the top bits are uniform too
    y = np_of(qr.randint(qr.key(32), (N,), 0, 2**53))
    check_moments(y / 2.0**53, 0.5, 1 / 12)


def test_exponential_distribution():
    x = np_of(qr.exponential(qr.key(33), (N,)))
    assert np.all(x >= 0)
    check_moments(x, 1.0, 1.0)
    kstest(x, lambda t: -np.expm1(-t))


def test_gumbel_distribution():
    x = np_of(qr.gumbel(qr.key(34), (N,)))
    check_moments(x, np.euler_gamma, math.pi**2 / 6)
    kstest(x, lambda t: np.exp(-np.exp(-t)))


def test_laplace_distribution():
    x = np_of(qr.laplace(qr.key(35), (N,)))
    check_moments(x, 0.0, 2.0)
    kstest(x, lambda t: np.where(t < 0, 0.5 * np.exp(t), 1 - 0.5 * np.exp(-t)))


def test_rademacher_distribution():
    x = np_of(qr.rademacher(qr.key(36), (N,)))
    assert set(np.unique(x).tolist()) == {-1.0, 1.0}
    assert abs(x.mean()) < 5 * math.sqrt(1 / N)


def normal_pdf(t):
    return math.exp(-t * t / 2) / math.sqrt(2 * math.pi) if math.isfinite(t) else 0.0


def normal_cdf(t):
    return 0.5 * math.erfc(-t / math.sqrt(2))


@pytest.mark.parametrize("lo,hi", [(-1.0, 2.0), (0.5, math.inf), (-math.inf, -3.0), (3.0, 4.0),
                                   (-math.inf, math.inf), (-8.0, -7.5)])
def test_truncated_normal_distribution(lo, hi):
    x = np_of(qr.truncated_normal(qr.key(37), lo, hi, (N,)))
    assert np.all((x > lo) & (x < hi))
    z = normal_cdf(hi) - normal_cdf(lo) if lo < 0 else normal_cdf(-lo) - normal_cdf(-hi)
    pa, pb = normal_pdf(lo), normal_pdf(hi)
    mean = (pa - pb) / z
    ta = lo * pa if math.isfinite(lo) else 0.0
    tb = hi * pb if math.isfinite(hi) else 0.0
    var = 1 + (ta - tb) / z - mean**2
    check_moments(x, mean, var)
    stats = pytest.importorskip("scipy.stats")
    kstest(x, stats.truncnorm(lo, hi).cdf)


def test_truncated_normal_array_bounds_and_far_tail():
    lo = np.array([-1.0, 0.0, 5.0])
    x = np_of(qr.truncated_normal(qr.key(38), lo, lo + 1.0, (N // 4, 3)))
    assert np.all((x > lo) & (x < lo + 1.0))
    # Far in the tail the samples hug the bound: [20, inf) has mean about 20 + 1/20.
    y = np_of(qr.truncated_normal(qr.key(39), 20.0, math.inf, (N,)))
    assert np.all(y > 20.0) and abs(y.mean() - 20.0499) < 0.002
    f = np_of(qr.truncated_normal(qr.key(40), -2.0, 2.0, (N,), qb.float32))
    assert f.dtype == np.float32 and np.all((f > -2.0) & (f < 2.0))


@pytest.mark.parametrize("a", [0.05, 0.3, 1.0, 2.5, 60.0])
def test_gamma_distribution(a):
    x = np_of(qr.gamma(qr.key(41), a, (N,)))
    assert np.all(x >= 0)
    check_moments(x, a, a)
    stats = pytest.importorskip("scipy.stats")
    kstest(x, stats.gamma(a).cdf)


def test_gamma_array_parameter():
    a = np.array([0.5, 4.0])
    x = np_of(qr.gamma(qr.key(42), a, (N // 2, 2)))
    for j in range(2):
        check_moments(x[:, j], a[j], a[j])


@pytest.mark.parametrize("a,b", [(0.5, 0.5), (2.0, 5.0), (0.1, 3.0)])
def test_beta_distribution(a, b):
    x = np_of(qr.beta(qr.key(43), a, b, (N,)))
    assert np.all((x >= 0) & (x <= 1))
    check_moments(x, a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1)))
    stats = pytest.importorskip("scipy.stats")
    kstest(x, stats.beta(a, b).cdf)


def test_dirichlet_distribution():
    alpha = np.array([0.5, 1.0, 3.0])
    s = alpha.sum()
    x = np_of(qr.dirichlet(qr.key(44), alpha, (N,)))
    np.testing.assert_allclose(x.sum(-1), 1.0, rtol=1e-12)
    assert np.all(x >= 0)
    for i, ai in enumerate(alpha):
        check_moments(x[:, i], ai / s, ai * (s - ai) / (s**2 * (s + 1)))
    cov01 = np.mean((x[:, 0] - alpha[0] / s) * (x[:, 1] - alpha[1] / s))
    assert abs(cov01 + alpha[0] * alpha[1] / (s**2 * (s + 1))) < 0.003
    stats = pytest.importorskip("scipy.stats")
    for i, ai in enumerate(alpha):
        kstest(x[:, i], stats.beta(ai, s - ai).cdf)
    # tiny concentrations stay finite (log-space normalization)
    y = np_of(qr.dirichlet(qr.key(45), [0.01, 0.01], (1000,)))
    assert np.all(np.isfinite(y)) and np.allclose(y.sum(-1), 1.0)


@pytest.mark.parametrize("method", ["cholesky", "eigh", "svd"])
def test_multivariate_normal_distribution(method):
    mean = np.array([1.0, -2.0, 0.5])
    a = np.array([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [-0.3, 0.5, 0.4]])
    cov = a @ a.T
    x = np_of(qr.multivariate_normal(qr.key(46), mean, cov, (N,), method=method))
    assert x.shape == (N, 3)
    assert np.all(np.abs(x.mean(0) - mean) < 5 * np.sqrt(np.diag(cov) / N))
    np.testing.assert_allclose(np.cov(x.T), cov, atol=0.04)
    # a semi-definite covariance works with eigh and svd
    if method != "cholesky":
        v = np.array([1.0, 2.0])
        y = np_of(qr.multivariate_normal(qr.key(47), np.zeros(2), np.outer(v, v), (1000,),
                                         method=method))
        np.testing.assert_allclose(y[:, 1], 2 * y[:, 0], atol=1e-6)


def test_multivariate_normal_batch():
    cov = np.stack([np.eye(2), 4 * np.eye(2)])
    x = np_of(qr.multivariate_normal(qr.key(48), np.zeros(2), cov, (N // 2, 2)))
    assert x.shape == (N // 2, 2, 2)
    assert abs(x[:, 0].var() - 1) < 0.1 and abs(x[:, 1].var() - 4) < 0.4


def test_orthogonal_distribution():
    q = np_of(qr.orthogonal(qr.key(49), 3, (4000,)))
    np.testing.assert_allclose(np.einsum("bji,bjk->bik", q, q), np.broadcast_to(np.eye(3), q.shape),
                               atol=1e-12)
    det = np.linalg.det(q)
    np.testing.assert_allclose(np.abs(det), 1.0, atol=1e-12)
    plus = np.mean(det > 0)
    assert abs(plus - 0.5) < 5 * math.sqrt(0.25 / 4000)
    # Haar on O(3): each entry is uniform on [-1, 1].
    check_moments(q[:, 0, 0], 0.0, 1 / 3)
    kstest(q[:, 1, 2], lambda t: (t + 1) / 2)
    r = np_of(qr.orthogonal(qr.key(50), 5, m=3))
    np.testing.assert_allclose(r.T @ r, np.eye(3), atol=1e-12)
    r = np_of(qr.orthogonal(qr.key(50), 3, m=5))
    np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-12)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.5])
def test_ball_distribution(p):
    d = 3
    x = np_of(qr.ball(qr.key(51), d, p, (N,)))
    norm = np.sum(np.abs(x) ** p, -1) ** (1 / p)
    assert np.all(norm <= 1.0)
    # Uniform in a d-dimensional ball: the norm has CDF r**d.
    kstest(norm, lambda t: np.clip(t, 0, 1) ** d)
    check_moments(norm**d, 0.5, 1 / 12)
    check_moments(x[:, 0], 0.0, np.var(x[:, 1]), sigmas=6)


def test_choice_frequencies():
    p = np.array([0.1, 0.0, 0.2, 0.3, 0.4])
    x = np_of(qr.choice(qr.key(52), 5, (N,), p=p))
    counts = np.bincount(x.astype(int), minlength=5)
    assert counts[1] == 0
    assert np.all(np.abs(counts - N * p) < 5 * np.sqrt(N * p * (1 - p)) + 1e-9)
    y = np_of(qr.choice(qr.key(53), 6, (N,)))
    counts = np.bincount(y.astype(int), minlength=6)
    assert np.all(np.abs(counts - N / 6) < 5 * math.sqrt(N * 5 / 36))
    # Unnormalized weights are relative weights.
    assert np.array_equal(np_of(qr.choice(qr.key(52), 5, (100,), p=10 * p)),
                          np_of(qr.choice(qr.key(52), 5, (100,), p=p)))


def test_choice_without_replacement():
    for i in range(50):
        x = np_of(qr.choice(qr.fold_in(qr.key(54), i), 20, (4, 5), replace=False))
        assert len(np.unique(x)) == 20
    p = np.array([0.5, 0.25, 0.125, 0.125, 0.0])
    trials = 4000
    first = np.empty(trials)
    second = np.empty(trials)
    for i in range(trials):
        s = np_of(qr.choice(qr.fold_in(qr.key(55), i), 5, (3,), replace=False, p=p))
        assert len(set(s.tolist())) == 3 and 4 not in s
        first[i], second[i] = s[0], s[1]
    # The first draw has probabilities p; the second, given the first was 0, p[1:]/0.5.
    for j in range(4):
        f = np.mean(first == j)
        assert abs(f - p[j]) < 5 * math.sqrt(p[j] * (1 - p[j]) / trials)
    after0 = second[first == 0]
    f = np.mean(after0 == 1)
    assert abs(f - 0.5) < 5 * math.sqrt(0.25 / after0.size)


def test_permutation_is_uniform():
    counts = {}
    trials = 6000
    for i in range(trials):
        perm = tuple(np_of(qr.permutation(qr.fold_in(qr.key(56), i), 3)).astype(int).tolist())
        counts[perm] = counts.get(perm, 0) + 1
    assert len(counts) == 6
    for c in counts.values():
        assert abs(c - trials / 6) < 5 * math.sqrt(trials * 5 / 36)
    big = np_of(qr.permutation(qr.key(57), 5000))
    assert np.array_equal(np.sort(big), np.arange(5000))
    # each position's value is uniform: the mean position-value is (n-1)/2
    x = np.stack([np_of(qr.permutation(qr.fold_in(qr.key(58), i), 10)) for i in range(2000)])
    assert np.all(np.abs(x.mean(0) - 4.5) < 5 * math.sqrt(99 / 12 / 2000))


def test_categorical_frequencies():
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]])
    with np.errstate(divide="ignore"):
        logits = np.log(probs) + 3.0  # unnormalized
    x = np_of(qr.categorical(qr.key(59), logits, shape=(N, 2)))
    assert x.shape == (N, 2)
    for b in range(2):
        counts = np.bincount(x[:, b].astype(int), minlength=3)
        pr = probs[b]
        assert np.all(np.abs(counts - N * pr) < 5 * np.sqrt(N * pr * (1 - pr)) + 1e-9)
    assert not np.any(x[:, 1] == 2)
    # axis=0 reads categories down the columns
    y = np_of(qr.categorical(qr.key(60), np.log(probs[0])[:, None], axis=0, shape=(N, 1)))
    counts = np.bincount(y[:, 0].astype(int), minlength=3)
    assert np.all(np.abs(counts - N * probs[0]) < 5 * np.sqrt(N * probs[0] * (1 - probs[0])))
    # without replacement: distinct categories per batch entry
    z = np_of(qr.categorical(qr.key(61), np.zeros((4, 6)), shape=(6, 4), replace=False))
    for b in range(4):
        assert sorted(z[:, b].tolist()) == list(range(6))
