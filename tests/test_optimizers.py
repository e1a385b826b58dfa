"""Compiled optimizer updates against NumPy transcriptions of their formulas (and optax, where
installed): Adam, AdamW, SGD with (Nesterov) momentum, clipping by global norm, schedules;
resuming from a checkpoint; updates inside a jitted train step; the deprecated quabla.Adam."""

import math
import warnings

import numpy as np
import pytest

import quabla as qb
from quabla.optim import schedules

PARAMS = {"a": np.array([1.0, -2.0, 0.5]), "b": np.array([[3.0, 0.25]], dtype=np.float32)}
GRADS = [
    {"a": np.array([0.5, -1.0, 2.0]), "b": np.array([[2.0, -0.5]], dtype=np.float32)},
    {"a": np.array([-0.3, 0.7, 0.1]), "b": np.array([[0.1, 4.0]], dtype=np.float32)},
    {"a": np.array([1.5, 0.2, -0.9]), "b": np.array([[-1.0, 0.3]], dtype=np.float32)},
    {"a": np.array([0.05, -2.5, 0.4]), "b": np.array([[0.6, -0.2]], dtype=np.float32)},
]


def _tensors(tree):
    return {k: qb.array(v) for k, v in tree.items()}


def _run(opt, steps=len(GRADS)):
    params = _tensors(PARAMS)
    state = opt.init(params)
    for t in range(steps):
        params, state = opt.update(params, _tensors(GRADS[t]), state)
    return params, state


# -- NumPy transcriptions: float64 arithmetic, parameters cast back to their dtype ---------------

def _clip(grads, clip_norm):
    if clip_norm is None:
        return grads
    norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads.values()))
    return grads if norm < clip_norm else {k: g / norm * clip_norm for k, g in grads.items()}


def _rate(lr, count):
    return float(np.asarray(lr(count))) if callable(lr) else lr


def numpy_adam(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0, clip_norm=None, steps=4):
    p = {k: v.astype(np.float64) for k, v in PARAMS.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    for t in range(1, steps + 1):
        g = _clip({k: x.astype(np.float64) for k, x in GRADS[t - 1].items()}, clip_norm)
        rate = _rate(lr, t - 1)
        for k in p:
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v[k] = b2 * v[k] + (1 - b2) * g[k] * g[k]
            m_hat, v_hat = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
            p[k] = p[k] - rate * (m_hat / (np.sqrt(v_hat) + eps) + weight_decay * p[k])
            p[k] = p[k].astype(PARAMS[k].dtype).astype(np.float64)
    return p


def numpy_sgd(lr, momentum=0.0, nesterov=False, clip_norm=None, steps=4):
    p = {k: v.astype(np.float64) for k, v in PARAMS.items()}
    buf = {k: np.zeros_like(v) for k, v in p.items()}
    for t in range(steps):
        g = _clip({k: x.astype(np.float64) for k, x in GRADS[t].items()}, clip_norm)
        rate = _rate(lr, t)
        for k in p:
            buf[k] = g[k] + momentum * buf[k]
            direction = g[k] + momentum * buf[k] if nesterov else buf[k]
            p[k] = (p[k] - rate * direction).astype(PARAMS[k].dtype).astype(np.float64)
    return p


def _close(params, expected):
    for k, want in expected.items():
        got = np.asarray(params[k])
        assert got.dtype == PARAMS[k].dtype
        tol = 1e-12 if got.dtype == np.float64 else 1e-6
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


DECAY = schedules.exponential_decay(0.1, transition_steps=2, decay_rate=0.5)
COSINE = schedules.cosine_decay(0.2, decay_steps=3, alpha=0.1)
WARMUP = schedules.warmup_cosine(0.0, 0.3, warmup_steps=2, decay_steps=5, end_value=0.01)

CASES = {
    "adam": (lambda: qb.optim.Adam(0.1), lambda: numpy_adam(0.1)),
    "adamw": (lambda: qb.optim.Adam(0.05, b1=0.8, weight_decay=0.1),
              lambda: numpy_adam(0.05, b1=0.8, weight_decay=0.1)),
    "adam_clipped_scheduled": (lambda: qb.optim.Adam(WARMUP, clip_norm=1.0),
                               lambda: numpy_adam(WARMUP, clip_norm=1.0)),
    "sgd": (lambda: qb.optim.SGD(0.1), lambda: numpy_sgd(0.1)),
    "momentum": (lambda: qb.optim.SGD(DECAY, momentum=0.9),
                 lambda: numpy_sgd(DECAY, momentum=0.9)),
    "nesterov_clipped": (lambda: qb.optim.SGD(COSINE, momentum=0.5, nesterov=True, clip_norm=2.0),
                         lambda: numpy_sgd(COSINE, momentum=0.5, nesterov=True, clip_norm=2.0)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_update_matches_its_numpy_transcription(case):
    make, reference = CASES[case]
    params, state = _run(make())
    _close(params, reference())
    assert state["step"] == len(GRADS)


def test_clipping_is_active_in_the_clipped_cases():
    """The clip norms above are below the gradients' global norms, so clipping changes the
    result (the transcription without clipping differs)."""
    unclipped = numpy_adam(WARMUP)
    clipped, _ = _run(qb.optim.Adam(WARMUP, clip_norm=1.0))
    assert not np.allclose(np.asarray(clipped["a"]), unclipped["a"], rtol=1e-6)


def test_schedules_match_their_formulas():
    for count in [0, 1, 2, 3, 7]:
        assert float(np.asarray(DECAY(count))) == pytest.approx(0.1 * 0.5 ** (count / 2), 1e-15)
        c = min(count, 3) / 3
        assert float(np.asarray(COSINE(count))) == pytest.approx(
            0.2 * (0.9 * 0.5 * (1 + math.cos(math.pi * c)) + 0.1), 1e-15)
        if count < 2:
            warm = 0.3 * count / 2
        else:
            d = min(count - 2, 3) / 3
            warm = 0.3 * (0.5 * (1 + math.cos(math.pi * d)) * (1 - 0.01 / 0.3) + 0.01 / 0.3)
        assert float(np.asarray(WARMUP(count))) == pytest.approx(warm, 1e-15)
    floor = schedules.exponential_decay(1.0, 1, 0.5, transition_begin=2, end_value=0.2)
    assert [float(np.asarray(floor(c))) for c in (0, 2, 3, 10)] == [1.0, 1.0, 0.5, 0.2]


def test_none_gradients_leave_parameters_and_slots_alone():
    params = {"w": qb.array([1.0, 2.0]), "mask": qb.array([True, False])}
    opt = qb.optim.SGD(0.5, momentum=0.5)
    state = opt.init(params)
    new, state = opt.update(params, {"w": qb.array([2.0, -2.0]), "mask": None}, state)
    assert new["w"].tolist() == [0.0, 3.0] and new["mask"] is params["mask"]
    assert state["momentum"]["mask"].tolist() == [0.0, 0.0]


def test_changed_hyperparameters_compile_a_new_update():
    opt = qb.optim.SGD(0.5)
    w = qb.array([1.0])
    assert opt.update(w, qb.array([1.0]), opt.init(w))[0].tolist() == [0.5]
    opt.learning_rate = 0.25
    assert opt.update(w, qb.array([1.0]), opt.init(w))[0].tolist() == [0.75]


@pytest.mark.parametrize("make", [
    lambda: qb.optim.Adam(schedules.cosine_decay(0.05, 6), weight_decay=0.01, clip_norm=0.5),
    lambda: qb.optim.SGD(0.1, momentum=0.9, nesterov=True),
])
def test_resuming_from_a_checkpoint_is_bit_identical(tmp_path, make):
    opt = make()
    full, state = _tensors(PARAMS), None
    state = opt.init(full)
    history = []
    for t in range(4):
        full, state = opt.update(full, _tensors(GRADS[t]), state)
        history.append((full, state))
    qb.save(tmp_path / "ckpt.qb", {"params": history[1][0], "opt": history[1][1]})
    loaded = qb.load(tmp_path / "ckpt.qb")
    resumed, rstate = loaded["params"], loaded["opt"]
    opt = make()  # a new process would build a new optimizer
    for t in range(2, 4):
        resumed, rstate = opt.update(resumed, _tensors(GRADS[t]), rstate)
    for k in PARAMS:
        assert np.asarray(resumed[k]).tobytes() == np.asarray(full[k]).tobytes()
    assert rstate["step"] == state["step"] == 4


@pytest.mark.parametrize("array_step", [False, True])
def test_update_inside_a_jitted_train_step_traces_once(array_step):
    """The state init makes (its step a Count) or one with an array step: the step goes in
    as an array and comes back as one, so the whole train step traces and compiles once."""
    opt = qb.optim.Adam(0.1)
    traces = []

    @qb.jit
    def train(params, state, grads):
        traces.append(1)
        return opt.update(params, grads, state)

    params = _tensors(PARAMS)
    state = opt.init(params)
    if array_step:
        state["step"] = qb.array(0.0)
    for t in range(4):
        params, state = train(params, state, _tensors(GRADS[t]))
    assert len(traces) == 1 and float(np.asarray(state["step"])) == 4.0
    _close(params, numpy_adam(0.1))


def test_a_host_step_count_is_an_int_that_transforms_take_as_an_array(tmp_path):
    opt = qb.optim.SGD(0.1, momentum=0.5)
    params, state = _run(opt, steps=3)
    step = state["step"]
    assert isinstance(step, int) and step == 3 and repr(step) == "3" and f"{step}" == "3"
    seen = []

    def scaled(count, x):
        seen.append(type(count).__name__)
        return x * count

    f = qb.jit(scaled)
    np.testing.assert_array_equal(np.asarray(f(step, qb.array([1.0, 2.0]))), [3.0, 6.0])
    np.testing.assert_array_equal(np.asarray(f(type(step)(7), qb.array([1.0, 2.0]))), [7., 14.])
    assert seen == ["TraceTensor"]  # one trace: the count is an argument, not a constant
    np.testing.assert_array_equal(np.asarray(f(3, qb.array([1.0, 2.0]))), [3.0, 6.0])
    assert seen == ["TraceTensor", "int"]  # a plain int is a static value, baked in
    qb.save(tmp_path / "state.qb", state)
    assert type(qb.load(tmp_path / "state.qb")["step"]) is int


def test_bad_hyperparameters_and_states_are_value_errors():
    for bad in [lambda: qb.optim.SGD(0.1, momentum=1.0), lambda: qb.optim.SGD(nesterov=True),
                lambda: qb.optim.Adam(clip_norm=0.0), lambda: qb.optim.Adam(weight_decay=-1.0),
                lambda: qb.optim.Adam(b2=1.0), lambda: qb.optim.SGD("0.1"),
                lambda: schedules.cosine_decay(0.1, 0), lambda: schedules.warmup_cosine(0, 1, 5, 5)]:
        with pytest.raises(ValueError):
            bad()
    opt = qb.optim.Adam()
    w = {"w": qb.array([1.0])}
    with pytest.raises(ValueError, match="'m'"):
        opt.update(w, w, {"step": 0})
    with pytest.raises(ValueError, match="do not match"):
        opt.update(w, {"w": qb.array([1.0]), "x": qb.array(1.0)}, opt.init(w))


def test_deprecated_quabla_adam_is_the_stateful_v01_alias():
    import quabla

    quabla.__dict__.pop("Adam", None)
    with pytest.warns(DeprecationWarning, match="qb.optim.Adam"):
        Adam = quabla.Adam
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert quabla.Adam is Adam  # warns once per name
    adam = Adam(learning_rate=0.1)
    params = _tensors(PARAMS)
    for g in GRADS:
        params = adam.step(params, _tensors(g))
    _close(params, numpy_adam(0.1))
    before = params["b"]
    params = adam.step(params, {"a": qb.array([1.0, 1.0, 1.0])})  # "b" has no gradient
    assert params["b"] is before
    with pytest.raises(ValueError, match="unknown"):
        adam.step(params, {"c": qb.array(1.0)})
    with pytest.raises(AttributeError):
        quabla.NoSuchName  # noqa: B018


def test_against_optax():
    optax = pytest.importorskip("optax")
    jnp = pytest.importorskip("jax.numpy")
    import jax

    jax.config.update("jax_enable_x64", True)
    pairs = [
        (qb.optim.Adam(0.1), optax.adam(0.1)),
        (qb.optim.Adam(0.05, weight_decay=0.1), optax.adamw(0.05, weight_decay=0.1)),
        (qb.optim.SGD(0.1, momentum=0.9, nesterov=True), optax.sgd(0.1, 0.9, nesterov=True)),
        (qb.optim.SGD(DECAY, momentum=0.9),
         optax.sgd(optax.exponential_decay(0.1, 2, 0.5), momentum=0.9)),
        (qb.optim.Adam(WARMUP), optax.adam(optax.warmup_cosine_decay_schedule(
            0.0, 0.3, 2, 5, end_value=0.01))),
        (qb.optim.Adam(COSINE, clip_norm=1.0),
         optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adam(optax.cosine_decay_schedule(0.2, 3, alpha=0.1)))),
    ]
    a = {"a": PARAMS["a"]}
    for i, (ours, theirs) in enumerate(pairs):
        params, state = {"a": qb.array(a["a"])}, None
        state = ours.init(params)
        jp = {"a": jnp.asarray(a["a"])}
        jstate = theirs.init(jp)
        for g in GRADS:
            params, state = ours.update(params, {"a": qb.array(g["a"])}, state)
            updates, jstate = theirs.update({"a": jnp.asarray(g["a"])}, jstate, jp)
            jp = optax.apply_updates(jp, updates)
        # optax evaluates its schedules in float32 (its step count is an int32)
        rtol = 1e-6 if i >= 3 else 1e-12
        np.testing.assert_allclose(np.asarray(params["a"]), np.asarray(jp["a"]), rtol=rtol)
