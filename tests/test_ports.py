"""JAX programs ported by renaming (issue 24): the first sections of JAX's autodiff cookbook,
an MLP classifier written from scratch, and kernel least squares. Each runs as JAX users
write it with ``jnp`` -> ``qb``, ``jax.grad`` -> ``qb.grad``, ``jax.random`` -> ``qb.random``
(``PRNGKey`` -> ``key``); the edits beyond renaming are marked ``# EDIT:`` (Quabla has no
integer or boolean arithmetic, and its ``==`` on arrays is identity: ``qb.equal``). Where JAX
is installed the same programs run on JAX and the numbers agree (float64)."""

import numpy as np
import pytest

import quabla as qb

from helpers import assert_close

INPUTS = [[0.52, 1.12, 0.77], [0.88, -1.08, 0.15], [0.52, 0.06, -1.30], [0.74, -2.49, 1.39]]


# -- the autodiff cookbook, first sections -------------------------------------------------------

def cookbook(np_, grad, value_and_grad, jacfwd, jacrev, jvp, vjp, vmap, W, b, v):
    """The cookbook's computations, written once for either library (the arguments are its
    renamed names; the random draws are passed in, since the two generators differ)."""
    out = {}
    out["grad_tanh"] = grad(np_.tanh)(2.0)
    out["grad3_tanh"] = grad(grad(grad(np_.tanh)))(2.0)

    def sigmoid(x):
        return 0.5 * (np_.tanh(x / 2) + 1)

    def predict(W, b, inputs):
        return sigmoid(np_.dot(inputs, W) + b)

    inputs = np_.array(INPUTS)
    targets = np_.array([1.0, 1.0, 0.0, 1.0])  # EDIT: JAX's cookbook has a bool array here

    def loss(W, b):
        preds = predict(W, b, inputs)
        label_probs = preds * targets + (1 - preds) * (1 - targets)
        return -np_.sum(np_.log(label_probs))

    out["W_grad"] = grad(loss, argnums=0)(W, b)
    out["b_grad"] = grad(loss, 1)(W, b)
    W_grad, b_grad = grad(loss, (0, 1))(W, b)
    out["both"] = np_.concatenate([W_grad, np_.reshape(b_grad, (1,))])

    def loss2(params_dict):
        preds = predict(params_dict["W"], params_dict["b"], inputs)
        label_probs = preds * targets + (1 - preds) * (1 - targets)
        return np_.sum(-np_.log(label_probs))

    out["dict_grad_W"] = grad(loss2)({"W": W, "b": b})["W"]
    loss_value, (gw, gb) = value_and_grad(loss, (0, 1))(W, b)
    out["loss_value"] = loss_value
    eps = 1e-4
    half_eps = eps / 2.0
    out["b_grad_numerical"] = (loss(W, b + half_eps) - loss(W, b - half_eps)) / eps
    unitvec = v / np_.sqrt(np_.vdot(v, v))
    out["W_dirderiv_numerical"] = (loss(W + half_eps * unitvec, b)
                                   - loss(W - half_eps * unitvec, b)) / eps
    out["W_dirderiv"] = np_.vdot(grad(loss)(W, b), unitvec)

    def hvp(f, x, v):
        return grad(lambda x: np_.vdot(grad(f)(x), v))(x)

    f = lambda W: predict(W, b, inputs)  # noqa: E731
    out["jacfwd"] = jacfwd(f)(W)
    out["jacrev"] = jacrev(f)(W)
    out["hessian"] = jacfwd(jacrev(f))(W)
    out["hvp"] = hvp(lambda W: loss(W, b), W, v)
    y, u = jvp(f, (W,), (v,))
    out["jvp"] = u
    y, vjp_fun = vjp(f, W)
    out["vjp"] = vjp_fun(np_.ones_like(y))[0]

    def hvp_fwd(f, primals, tangents):
        return jvp(grad(f), primals, tangents)[1]

    out["hvp_fwd"] = hvp_fwd(lambda W: loss(W, b), (W,), (v,))
    out["batched_hvp"] = vmap(lambda t: hvp_fwd(lambda W: loss(W, b), (W,), (t,)))(
        np_.stack([v, 2.0 * v]))
    return out


def _quabla_cookbook():
    key = qb.random.key(0)
    key, W_key, b_key = qb.random.split(key, 3)
    W = qb.random.normal(W_key, (3,))
    b = qb.random.normal(b_key, ())
    key, subkey = qb.random.split(key)
    v = qb.random.normal(subkey, W.shape)
    return (W, b, v), cookbook(qb, qb.grad, qb.value_and_grad, qb.jacfwd, qb.jacrev, qb.jvp,
                               qb.vjp, qb.vmap, W, b, v)


def test_autodiff_cookbook_runs_by_renaming():
    (W, b, v), out = _quabla_cookbook()
    assert_close(out["grad_tanh"], 1 - np.tanh(2.0) ** 2)
    t = np.tanh(2.0)
    assert_close(out["grad3_tanh"], -2 * (1 - t * t) ** 2 + 4 * t * t * (1 - t * t), rtol=1e-10)
    assert_close(out["both"][:3], out["W_grad"])
    assert_close(out["both"][3], out["b_grad"])
    assert_close(out["dict_grad_W"], out["W_grad"])
    assert_close(out["b_grad_numerical"], out["b_grad"], rtol=1e-6)
    assert_close(out["W_dirderiv_numerical"], out["W_dirderiv"], rtol=1e-6)
    assert_close(out["jacfwd"], out["jacrev"])
    assert np.asarray(out["hessian"]).shape == (4, 3, 3)
    assert_close(out["hvp"], out["hvp_fwd"], rtol=1e-10)
    assert_close(out["batched_hvp"][1], 2 * np.asarray(out["hvp_fwd"]), rtol=1e-10)


def test_autodiff_cookbook_matches_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    (W, b, v), ours = _quabla_cookbook()
    W, b, v = (np.asarray(x) for x in (W, b, v))
    theirs = cookbook(jax.numpy, jax.grad, jax.value_and_grad, jax.jacfwd, jax.jacrev,
                      jax.jvp, jax.vjp, jax.vmap, W, b, v)
    for name in ours:
        assert_close(ours[name], theirs[name], rtol=1e-9, atol=1e-12, err_msg=name)


# -- an MLP classifier from scratch ----------------------------------------------------------------

def classifier(np_, grad, jit, logsumexp, one_hot, params, images, labels, steps=20):
    """JAX's "neural network from scratch" example at a small size: relu layers, log-softmax by
    logsumexp, accuracy by argmax, SGD written out with ``tree.map``."""
    def relu(x):
        return np_.maximum(0, x)

    def predict(params, image):
        activations = image
        for w, b in params[:-1]:
            outputs = np_.dot(w, activations) + b
            activations = relu(outputs)
        final_w, final_b = params[-1]
        logits = np_.dot(final_w, activations) + final_b
        return logits - logsumexp(logits)

    batched_predict = _vmap_of(np_)(predict, in_axes=(None, 0))

    def accuracy(params, images, targets):
        target_class = np_.argmax(targets, axis=1)
        predicted_class = np_.argmax(batched_predict(params, images), axis=1)
        return np_.mean(np_.equal(predicted_class, target_class))  # EDIT: == is identity

    def loss(params, images, targets):
        preds = batched_predict(params, images)
        return -np_.mean(preds * targets)

    @jit
    def update(params, x, y):
        grads = grad(loss)(params, x, y)
        return [(w - 0.5 * dw, b - 0.5 * db) for (w, b), (dw, db) in zip(params, grads)]

    targets = one_hot(labels, 4)
    history = [float(loss(params, images, targets))]
    for _ in range(steps):
        params = update(params, images, targets)
        history.append(float(loss(params, images, targets)))
    return history, float(accuracy(params, images, targets))


def _vmap_of(np_):
    return qb.vmap if np_ is qb else __import__("jax").vmap


def _classifier_data():
    rng = np.random.default_rng(5)
    sizes = [6, 16, 4]
    params = [(rng.normal(0, 0.5, (n, m)), rng.normal(0, 0.1, n))
              for m, n in zip(sizes[:-1], sizes[1:])]
    centers = rng.normal(0, 2, (4, 6))
    labels = rng.integers(0, 4, 64)
    images = centers[labels] + rng.normal(0, 0.5, (64, 6))
    return params, images, labels.astype(float)


def test_mlp_classifier_from_scratch():
    params, images, labels = _classifier_data()
    ours = classifier(qb, qb.grad, qb.jit, qb.logsumexp, qb.nn.one_hot,
                      [(qb.array(w), qb.array(b)) for w, b in params], qb.array(images),
                      qb.array(labels))
    history, accuracy = ours
    assert history[-1] < 0.5 * history[0] and accuracy > 0.9
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    theirs = classifier(jax.numpy, jax.grad, jax.jit, jax.nn.logsumexp, jax.nn.one_hot,
                        params, images, labels.astype(int))
    assert_close(history, theirs[0], rtol=1e-9)
    assert accuracy == theirs[1]


# -- kernel least squares ------------------------------------------------------------------------

def kernel_least_squares(np_, grad, jit, x, y, steps=50):
    """Gaussian-kernel regression fitted by gradient descent with momentum."""
    def kernel(a, b):
        return np_.exp(-np_.sum((a[:, None, :] - b[None, :, :]) ** 2, axis=-1) / 0.3)

    K = kernel(x, x)

    def loss(alpha):
        return np_.mean((K @ alpha - y) ** 2) + 1e-4 * alpha @ K @ alpha

    @jit
    def step(alpha, velocity):
        velocity = 0.9 * velocity - 0.05 * grad(loss)(alpha)
        return alpha + velocity, velocity

    alpha = velocity = np_.zeros(x.shape[0])
    history = [float(loss(alpha))]
    for _ in range(steps):
        alpha, velocity = step(alpha, velocity)
        history.append(float(loss(alpha)))
    return history


def test_kernel_least_squares():
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (40, 2))
    y = np.sin(3 * x[:, 0]) * np.cos(2 * x[:, 1])
    ours = kernel_least_squares(qb, qb.grad, qb.jit, qb.array(x), qb.array(y))
    assert ours[-1] < 0.2 * ours[0]
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    assert_close(ours, kernel_least_squares(jax.numpy, jax.grad, jax.jit, x, y), rtol=1e-9)
