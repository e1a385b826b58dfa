"""Tests of quabla.random (spec 004 §6.2): explicit keys, SplitMix64 streams, samplers."""

import copy
import math
import pickle

import numpy as np
import pytest

import quabla as qb
from quabla import random as qr
from quabla.random.keys import bits

from random_reference import GOLDEN, MASK, ref_mix, ref_out, ref_unmix  # noqa: F401
SPLIT_TAG = 0x71623A73706C6974  # b"qb:split"
FOLD_TAG = 0x71623A666F6C6469  # b"qb:foldi"


# -- an independent pure-Python reference of docs/random.md ---------------------------------------


def ref_bits(state, n):
    return [ref_mix(state + (i + 1) * GOLDEN) for i in range(n)]


def ref_split(state, num):
    base = ref_mix(state ^ SPLIT_TAG)
    return [ref_mix(base + (j + 1) * GOLDEN) for j in range(num)]


def ref_fold_in(state, data):
    base = ref_mix(state ^ FOLD_TAG)
    return ref_mix(base + ((data & MASK) + 1) * GOLDEN)


def ref_uniform64(state, n):
    return [(b >> 11) * 2.0**-53 for b in ref_bits(state, n)]


def ref_normal(state, n):
    bits = ref_bits(state, 2 * ((n + 1) // 2))
    out = []
    for a, b in zip(bits[0::2], bits[1::2]):
        u1 = ((a >> 11) + 1) * 2.0**-53
        u2 = (b >> 11) * 2.0**-53
        r = math.sqrt(-2.0 * math.log(u1))
        t = 2.0 * math.pi * u2
        out += [r * math.cos(t), r * math.sin(t)]
    return out[:n]


def key_with_first_output(x):
    """A Key whose stream starts with the 64-bit value ``x``."""
    return qr.Key((ref_unmix(x) - GOLDEN) & MASK)


def np_of(t):
    assert isinstance(t, qb.Tensor)
    return np.asarray(t)


# -- the chapter snippet --------------------------------------------------------------------------


def test_spec_snippet_runs():
    key = qb.random.key(42)
    k1, k2, k3 = qb.random.split(key, 3)
    u = qb.random.uniform(k1, (3,))
    n = qb.random.normal(k2, (2,), dtype=qb.float32)
    b = qb.random.bernoulli(k3, 0.5, (4,))
    z = qb.random.normal(qb.random.fold_in(key, 7), ())
    assert u.shape == [3] and u.dtype is qb.float64
    assert n.shape == [2] and n.dtype is qb.float32
    assert b.shape == [4] and b.dtype is qb.bool_
    assert z.shape == [] and z.dtype is qb.float64
    assert np.all((np_of(u) >= 0) & (np_of(u) < 1))


def test_training_loop_snippet():
    base = qb.random.key(0)
    seen = []
    for step in range(3):
        k = qb.random.fold_in(base, step)
        x = qb.random.uniform(k, (5, 1), minval=0.0, maxval=1.0)
        assert x.shape == [5, 1]
        seen.append(np_of(x).copy())
    assert not np.array_equal(seen[0], seen[1]) and not np.array_equal(seen[1], seen[2])


# -- pinned values (any change to the algorithm must show up here) ---------------------------------


def test_stream_is_reference_splitmix64():
    # Published SplitMix64 outputs for seeds 0 and 1234567.
    assert [int(x) for x in bits(qr.key(0), 3)] == [
        0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F,
    ]
    assert [int(x) for x in bits(qr.key(1234567), 3)] == [
        6457827717110365317, 3203168211198807973, 9817491932198370423,
    ]


def test_pinned_key_states():
    key = qr.key(42)
    assert key.state == 42 and repr(key) == "Key(0x000000000000002a)"
    k1, k2, k3 = qr.split(key, 3)
    assert [k.state for k in (k1, k2, k3)] == [
        0x3E59666757DF3960, 0xA505E9170E42BF55, 0xC181886E50509EDD,
    ]
    assert qr.split(qr.key(0)) == (qr.Key(0x39F98DE87B2F0476), qr.Key(0xBCF49203562FFE27))
    assert qr.fold_in(key, 7) == qr.Key(0x9ABDD2009612F2D5)
    assert qr.fold_in(qr.key(0), 0) == qr.Key(0x83B5F4B0A97AAF86)
    assert repr(k1) == "Key(0x3e59666757df3960)"


def test_pinned_samples():
    k1, k2, k3 = qr.split(qr.key(42), 3)
    u = np_of(qr.uniform(k1, (3,)))
    assert [float(x).hex() for x in u] == [
        "0x1.85b2c8add97cap-2", "0x1.95219976d4550p-2", "0x1.f8573be75b2b0p-2",
    ]
    u32 = np_of(qr.uniform(k1, (3,), qb.float32))
    assert [float(x).hex() for x in u32] == [
        "0x1.85b2c80000000p-2", "0x1.9521980000000p-2", "0x1.f857380000000p-2",
    ]
    b = np_of(qr.bernoulli(k3, 0.5, (8,)))
    assert b.tolist() == [False, False, True, True, False, False, True, False]
    # Box-Muller goes through log/sqrt/cos/sin, so allow a few ulp across platforms.
    z = np_of(qr.normal(k2, (3,)))
    expected = [float.fromhex(h) for h in (
        "0x1.e0e12e281a109p+0", "0x1.b4c8870fd22b3p-2", "0x1.5af6c6c3f175cp-1",
    )]
    np.testing.assert_allclose(z, expected, rtol=4e-16, atol=0)
    z0 = float(qr.normal(qr.fold_in(qr.key(42), 7), ()))
    assert abs(z0 - float.fromhex("0x1.ef7d3043a2dd0p-5")) <= 4 * math.ulp(z0)


@pytest.mark.parametrize("seed", [0, 1, 42, 2**63 + 5, MASK])
def test_matches_reference_implementation(seed):
    key = qr.key(seed)
    assert [int(x) for x in bits(key, 7)] == ref_bits(seed, 7)
    assert [k.state for k in qr.split(key, 5)] == ref_split(seed, 5)
    for data in (0, 1, 7, -1, 2**64 + 3, 10**30):
        assert qr.fold_in(key, data).state == ref_fold_in(seed, data)
    assert np_of(qr.uniform(key, (7,))).tolist() == ref_uniform64(seed, 7)
    np.testing.assert_allclose(np_of(qr.normal(key, (7,))), ref_normal(seed, 7), rtol=1e-15, atol=1e-300)
    u = ref_uniform64(seed, 9)
    assert np_of(qr.bernoulli(key, 0.37, (9,))).tolist() == [x < 0.37 for x in u]


def test_c_order_and_prefix_property():
    key = qr.key(3)
    flat = np_of(qr.uniform(key, (12,)))
    assert np.array_equal(np_of(qr.uniform(key, (3, 4))).ravel(), flat)
    assert np.array_equal(np_of(qr.uniform(key, (2, 2))).ravel(), flat[:4])
    assert float(qr.uniform(key, ())) == flat[0]
    nflat = np_of(qr.normal(key, (7,)))
    assert np.array_equal(np_of(qr.normal(key, (8,)))[:7], nflat)
    assert np.array_equal(np_of(qr.normal(key, (3,))), nflat[:3])


def test_float32_normal_is_cast_of_float64():
    key = qr.key(11)
    z64 = np_of(qr.normal(key, (101,)))
    z32 = np_of(qr.normal(key, (101,), dtype=qb.float32))
    assert np.array_equal(z32, z64.astype(np.float32))


# -- keys ---------------------------------------------------------------------------------------


def test_key_seed_modulo():
    assert qr.key(-1) == qr.Key(MASK)
    assert qr.key(2**64 + 5) == qr.key(5)
    assert qr.key(np.int64(-2)) == qr.key(2**64 - 2)
    assert qr.key(np.uint64(7)).state == 7


def test_key_is_immutable_hashable_not_array():
    k = qr.key(1)
    with pytest.raises(AttributeError):
        k._state = 3
    with pytest.raises(AttributeError):
        k.x = 3
    assert {k: 1}[qr.key(1)] == 1
    assert len({qr.key(1), qr.key(1), qr.key(2)}) == 2
    assert k != qr.key(2) and k == qr.key(1)
    assert not isinstance(k, qb.Array) and not isinstance(k, np.ndarray)
    assert pickle.loads(pickle.dumps(k)) == k
    assert copy.deepcopy(k) is k
    with pytest.raises(TypeError):
        qb.array(k)


def test_key_constructor_validates():
    with pytest.raises(ValueError):
        qr.Key(-1)
    with pytest.raises(ValueError):
        qr.Key(2**64)
    with pytest.raises(TypeError):
        qr.Key(1.0)


@pytest.mark.parametrize("bad", [1.0, True, np.bool_(False), "3", None, np.float64(2.0)])
def test_key_rejects_non_integers(bad):
    with pytest.raises(TypeError):
        qr.key(bad)


def test_split_children_distinct():
    key = qr.key(0)
    kids = qr.split(key, 1000)
    assert isinstance(kids, tuple) and len(kids) == 1000
    assert all(isinstance(k, qr.Key) for k in kids)
    assert len(set(kids)) == 1000
    assert key not in kids
    # The children's first outputs are not the parent's own stream.
    parent_stream = set(int(x) for x in bits(key, 1000))
    assert not parent_stream & {k.state for k in kids}
    assert not parent_stream & {int(bits(k, 1)[0]) for k in kids}
    # Splitting is deterministic and prefix-stable.
    assert qr.split(key, 3) == kids[:3]
    assert qr.split(key) == kids[:2]
    assert qr.split(key, 0) == ()
    assert len(qr.split(key, 1)) == 1


def test_fold_in_distinct_and_deterministic():
    key = qr.key(5)
    folded = [qr.fold_in(key, i) for i in range(1000)]
    assert len(set(folded)) == 1000
    assert key not in folded
    assert not set(folded) & set(qr.split(key, 1000))
    assert qr.fold_in(key, 3) == qr.fold_in(qr.key(5), 3)
    assert qr.fold_in(key, -1) == qr.fold_in(key, 2**64 - 1)
    assert qr.fold_in(key, np.int32(4)) == qr.fold_in(key, 4)
    assert qr.fold_in(qr.key(6), 3) != qr.fold_in(key, 3)


def test_key_argument_errors():
    key = qr.key(0)
    with pytest.raises(TypeError):
        qr.split(key, 2.0)
    with pytest.raises(TypeError):
        qr.split(key, True)
    with pytest.raises(ValueError):
        qr.split(key, -1)
    with pytest.raises(TypeError):
        qr.fold_in(key, 1.5)
    with pytest.raises(TypeError):
        qr.fold_in(key, True)
    for fn in (qr.split, lambda k: qr.fold_in(k, 1), qr.uniform, qr.normal, qr.bernoulli):
        with pytest.raises(TypeError):
            fn(42)
        with pytest.raises(TypeError):
            fn(qb.array([1.0, 2.0]))
    with pytest.raises(TypeError):
        qr.glorot_normal(0, (2, 2))


# -- determinism and independence ----------------------------------------------------------------


@pytest.mark.parametrize("sampler", [
    lambda k: qr.uniform(k, (50,)),
    lambda k: qr.uniform(k, (50,), qb.float32, -2.0, 3.0),
    lambda k: qr.normal(k, (51,)),
    lambda k: qr.normal(k, (5, 5), qb.float32),
    lambda k: qr.bernoulli(k, 0.5, (64,)),
    lambda k: qr.glorot_normal(k, (6, 7)),
    lambda k: qr.glorot_uniform(k, (6, 7)),
    lambda k: qr.he_normal(k, (3, 6, 7)),
])
def test_same_key_same_numbers_different_keys_differ(sampler):
    a = np_of(sampler(qr.key(123)))
    b = np_of(sampler(qr.key(123)))
    assert np.array_equal(a, b)
    c = np_of(sampler(qr.key(124)))
    assert not np.array_equal(a, c)
    k1, k2 = qr.split(qr.key(123))
    assert not np.array_equal(np_of(sampler(k1)), np_of(sampler(k2)))


def test_results_are_fresh_readonly_tensors():
    key = qr.key(0)
    for t in (qr.uniform(key, (3, 2)), qr.normal(key, (3,), qb.float32), qr.bernoulli(key, 0.5, (5,))):
        v = t.numpy()
        assert v.flags.c_contiguous and not v.flags.writeable
    a, b = qr.uniform(key, (4,)), qr.uniform(key, (4,))
    assert not np.shares_memory(a.numpy(), b.numpy())


# -- statistics (loose bounds) --------------------------------------------------------------------

N = 100_000


def test_uniform_statistics():
    u = np_of(qr.uniform(qr.key(1), (N,)))
    assert abs(u.mean() - 0.5) < 0.01
    assert abs(u.std() - math.sqrt(1 / 12)) < 0.01
    hist = np.histogram(u, bins=10, range=(0, 1))[0]
    assert np.all(np.abs(hist - N / 10) < 0.05 * N / 10)
    v = np_of(qr.uniform(qr.key(2), (N,), qb.float32, minval=-3.0, maxval=5.0))
    assert abs(v.mean() - 1.0) < 0.05
    assert abs(v.std() - 8 / math.sqrt(12)) < 0.05


def test_normal_statistics():
    for dt in (qb.float64, qb.float32):
        z = np_of(qr.normal(qr.key(3), (N,), dt)).astype(np.float64)
        assert abs(z.mean()) < 0.02
        assert abs(z.std() - 1.0) < 0.02
        assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.01
        assert abs(np.mean(z ** 3)) < 0.05
        assert abs(np.mean(z ** 4) - 3.0) < 0.1
    # The two halves of each Box-Muller pair are uncorrelated.
    z = np_of(qr.normal(qr.key(4), (N,)))
    assert abs(np.corrcoef(z[0::2], z[1::2])[0, 1]) < 0.02


def test_bernoulli_frequency():
    for p in (0.5, 0.1, 0.9):
        b = np_of(qr.bernoulli(qr.key(5), p, (N,)))
        assert b.dtype == np.bool_
        assert abs(b.mean() - p) < 0.01
    assert not np_of(qr.bernoulli(qr.key(5), 0.0, (1000,))).any()
    assert np_of(qr.bernoulli(qr.key(5), 1.0, (1000,))).all()
    assert np_of(qr.bernoulli(qr.key(5), 1, (10,))).all()


def test_bernoulli_array_p():
    p = np.array([0.0, 1.0, 0.5])
    b = np_of(qr.bernoulli(qr.key(9), p, (4, 3)))
    assert b.shape == (4, 3)
    assert not b[:, 0].any() and b[:, 1].all()
    b2 = np_of(qr.bernoulli(qr.key(9), qb.array([0.2, 0.8]), (N // 2, 2)))
    assert abs(b2[:, 0].mean() - 0.2) < 0.01 and abs(b2[:, 1].mean() - 0.8) < 0.01
    with pytest.raises(ValueError):
        qr.bernoulli(qr.key(9), [0.1, 0.2], (3,))


@pytest.mark.parametrize("shape", [(200, 300), (3, 3, 60, 80), (1000, 100)])
def test_initializer_statistics(shape):
    r = math.prod(shape[:-2])
    fan_in, fan_out = shape[-2] * r, shape[-1] * r
    key = qr.key(6)
    g = np_of(qr.glorot_normal(key, shape))
    assert abs(g.std() / math.sqrt(2 / (fan_in + fan_out)) - 1) < 0.03
    assert abs(g.mean()) < 0.03 * g.std()
    h = np_of(qr.he_normal(key, shape))
    assert abs(h.std() / math.sqrt(2 / fan_in) - 1) < 0.03
    gu = np_of(qr.glorot_uniform(key, shape))
    limit = math.sqrt(6 / (fan_in + fan_out))
    assert gu.min() >= -limit and gu.max() < limit
    assert abs(gu.std() / (limit / math.sqrt(3)) - 1) < 0.03


def test_initializers_are_untruncated_and_scaled_normals():
    key = qr.key(8)
    z = np_of(qr.normal(key, (4, 5)))
    assert np.array_equal(np_of(qr.glorot_normal(key, (4, 5))), z * math.sqrt(2 / 9))
    assert np.array_equal(np_of(qr.he_normal(key, (4, 5))), z * math.sqrt(2 / 4))
    big = np_of(qr.he_normal(qr.key(0), (1, N)))  # fan_in 1, std sqrt(2)
    assert np.abs(big).max() > 2 * math.sqrt(2)  # beyond the 2-sigma truncation point
    gu = np_of(qr.glorot_uniform(key, (4, 5), qb.float32))
    assert np.array_equal(gu, np_of(qr.uniform(key, (4, 5), qb.float32, -math.sqrt(6 / 9), math.sqrt(6 / 9))))


def test_initializer_fans_like_jax():
    # Conv kernel (3, 3, 16, 32): receptive field 9, fan_in 144, fan_out 288.
    key = qr.key(1)
    z = np_of(qr.normal(key, (3, 3, 16, 32)))
    assert np.array_equal(np_of(qr.he_normal(key, (3, 3, 16, 32))), z * math.sqrt(2 / 144))
    assert np.array_equal(np_of(qr.glorot_normal(key, (3, 3, 16, 32))), z * math.sqrt(2 / 432))


@pytest.mark.parametrize("init", [qr.glorot_normal, qr.glorot_uniform, qr.he_normal])
def test_initializer_rank_errors(init):
    with pytest.raises(ValueError):
        init(qr.key(0), (5,))
    with pytest.raises(ValueError):
        init(qr.key(0), 5)
    with pytest.raises(ValueError):
        init(qr.key(0), ())
    with pytest.raises(ValueError):
        init(qr.key(0), (0, 3))
    with pytest.raises(TypeError):
        init(qr.key(0), (3, 3), qb.bool_)
    assert init(qr.key(0), (2, 3), qb.float32).dtype is qb.float32
    assert init(qr.key(0), (2, 3)).dtype is qb.float64


# -- bounds -------------------------------------------------------------------------------------


def test_uniform_bounds():
    u = np_of(qr.uniform(qr.key(7), (N,), minval=-1.5, maxval=2.5))
    assert u.min() >= -1.5 and u.max() < 2.5
    u = np_of(qr.uniform(qr.key(7), (N,), qb.float32, minval=-1.5, maxval=2.5))
    assert u.min() >= np.float32(-1.5) and u.max() < np.float32(2.5)
    u = np_of(qr.uniform(qr.key(7), (N,), minval=np.float32(10), maxval=11))
    assert u.min() >= 10 and u.max() < 11


@pytest.mark.parametrize("dtype", [qb.float32, qb.float64])
def test_uniform_never_reaches_maxval(dtype):
    np_t = dtype.numpy.type
    # The largest possible output: every bit set. On [1, 2) the affine map rounds it up to 2.
    key = key_with_first_output(MASK)
    x = np_of(qr.uniform(key, (), dtype, 1.0, 2.0))
    assert x.dtype == np_t
    assert x == np.nextafter(np_t(2), np_t(0))
    x = np_of(qr.uniform(key, (), dtype))
    assert x < 1 and x == (1 - 2.0**-24 if dtype is qb.float32 else 1 - 2.0**-53)
    # Also near the top of a narrow interval and with a maxval that is not representable.
    x = np_of(qr.uniform(key, (), dtype, 0.0, 0.1))
    assert x < np_t(0.1)
    x = np_of(qr.uniform(key, (), dtype, 1e6, 1e6 + 1))
    assert x < np_t(1e6 + 1)
    # The smallest possible output is minval exactly.
    key0 = key_with_first_output(0)
    assert np_of(qr.uniform(key0, (), dtype, -3.0, 4.0)) == np_t(-3.0)


def test_uniform_array_bounds():
    lo = np.array([0.0, 10.0, -5.0])
    hi = np.array([1.0, 20.0, -4.0])
    u = np_of(qr.uniform(qr.key(2), (1000, 3), minval=lo, maxval=hi))
    assert np.all(u >= lo) and np.all(u < hi)
    key = key_with_first_output(MASK)
    u = np_of(qr.uniform(key, (1, 2), qb.float32, minval=[1.0, 0.0], maxval=[2.0, 1.0]))
    assert u[0, 0] == np.nextafter(np.float32(2), np.float32(0)) and u[0, 1] < 1
    with pytest.raises(ValueError):
        qr.uniform(qr.key(2), (3,), minval=[0.0, 1.0])


def test_normal_extremes_finite():
    # u1 = 2**-53 (the smallest) gives the largest radius; u1 = 1 gives 0.
    key = key_with_first_output(0)
    z = np_of(qr.normal(key, (2,)))
    assert np.all(np.isfinite(z))
    assert math.isclose(math.hypot(*z), math.sqrt(-2 * math.log(2.0**-53)), rel_tol=1e-12)
    key = key_with_first_output(MASK)
    assert np.all(np_of(qr.normal(key, (2,))) == 0)


# -- dtypes, shapes and errors --------------------------------------------------------------------


@pytest.mark.parametrize("dtype,expected", [
    (qb.float32, qb.float32), (qb.float64, qb.float64), (np.float32, qb.float32),
    (np.dtype("float64"), qb.float64), ("float32", qb.float32), (None, qb.float64),
])
def test_dtypes(dtype, expected):
    key = qr.key(0)
    assert qr.uniform(key, (2,), dtype).dtype is expected
    assert qr.normal(key, (2,), dtype=dtype).dtype is expected
    assert qr.uniform(key, (2,), dtype).numpy().dtype == expected.numpy


@pytest.mark.parametrize("dtype", [qb.bool_, np.bool_, "bool", np.int32, "float16", np.float16])
def test_bad_dtypes(dtype):
    with pytest.raises(TypeError):
        qr.uniform(qr.key(0), (2,), dtype)
    with pytest.raises(TypeError):
        qr.normal(qr.key(0), (2,), dtype)


@pytest.mark.parametrize("shape,expected", [
    ((), []), (3, [3]), ((3,), [3]), ((2, 3), [2, 3]), ([2, 1, 4], [2, 1, 4]),
    (np.int64(5), [5]), ((np.int32(2), 3), [2, 3]), (qb.Shape((4, 2)), [4, 2]),
])
def test_shapes(shape, expected):
    key = qr.key(0)
    for t in (qr.uniform(key, shape), qr.normal(key, shape), qr.bernoulli(key, 0.5, shape)):
        assert t.shape == expected
        assert isinstance(t, qb.Tensor)


@pytest.mark.parametrize("shape,exc", [
    ((0,), ValueError), (0, ValueError), ((3, 0), ValueError), ((-1,), ValueError),
    ((2.0,), TypeError), (2.5, TypeError), ("3", TypeError), (None, TypeError), ((True,), TypeError),
])
def test_bad_shapes(shape, exc):
    key = qr.key(0)
    for fn in (qr.uniform, qr.normal, lambda k, s: qr.bernoulli(k, 0.5, s)):
        with pytest.raises(exc):
            fn(key, shape)


def test_parameter_errors():
    key = qr.key(0)
    with pytest.raises(ValueError):
        qr.uniform(key, (2,), minval=1.0, maxval=1.0)
    with pytest.raises(ValueError):
        qr.uniform(key, (2,), minval=2.0, maxval=1.0)
    with pytest.raises(ValueError):
        qr.uniform(key, (2,), minval=0.0, maxval=float("inf"))
    with pytest.raises(ValueError):
        qr.uniform(key, (2,), minval=float("nan"))
    with pytest.raises(ValueError):
        qr.uniform(key, (2,), qb.float32, minval=0.0, maxval=1e39)
    with pytest.raises(ValueError):
        qr.uniform(key, (2,), minval=-1e308, maxval=1e308)
    with pytest.raises(TypeError):
        qr.uniform(key, (2,), minval="a")
    for p in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            qr.bernoulli(key, p, (2,))


def test_sampling_inside_a_trace_is_a_constant_and_keys_are_not_traced():
    key = qr.key(0)
    c = qr.uniform(key, (3,))
    assert np.array_equal(np_of(c), np_of(qr.uniform(key, (3,))))
    # Keys are not arrays, so the array constructors refuse them.
    with pytest.raises(TypeError):
        qb.asarray(key)
