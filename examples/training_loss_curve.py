"""Minibatch training of an MLP with a learning-rate schedule, and its loss curve.

A 1 -> 32 -> 32 -> 1 tanh network learns ``y = sin(3 x) + x / 2`` from noisy samples. Each
step of ``qb.optim.Trainer`` takes a new minibatch (``batch_argnums``, fed by ``fit(...,
batches=...)``) and runs the gradient and the Adam update as one compiled program; the learning
rate is ``qb.optim.schedules.warmup_cosine``, traced into that program, so a step stays one
native call. ``Trainer.history`` holds the loss of every step (the minibatch loss at the
parameters before the step's update); it is drawn with its running mean and the schedule in
``docs/images/training_loss_curve.png`` (matplotlib, ``pip install 'quabla[examples]'``).

    python examples/training_loss_curve.py            # 2048 samples, batches of 64, 3000 steps
    python examples/training_loss_curve.py --small    # 128 samples, batches of 16, 60 steps (CI)
"""

import itertools
import math

import figures  # the examples' shared figure and command-line helpers
import numpy as np

import quabla as qb

NOISE = 0.05                                   # standard deviation of the label noise


def target(x):
    return np.sin(3.0 * x) + 0.5 * x


def init(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [(qb.array(rng.normal(0.0, 1.0 / math.sqrt(m), (m, n))), qb.zeros(n))
            for m, n in itertools.pairwise(sizes)]


def mlp(params, x):
    """``x`` (batch, 1) -> (batch, 1)."""
    for w, b in params[:-1]:
        x = qb.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss(params, x, y):
    return qb.mean((mlp(params, x) - y) ** 2)


def batches(x, y, size, seed=1):
    """Shuffled minibatches of ``size`` rows, epoch after epoch, forever."""
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(x))
        for start in range(0, len(x) - size + 1, size):
            rows = order[start:start + size]
            yield x[rows], y[rows]


def main(samples=2048, batch=64, width=32, steps=3000, peak=1e-2, out=figures.IMAGES):
    """Train; print and return the loss history and the mean squared error on a clean grid."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-2.0, 2.0, (samples, 1))
    y = target(x) + NOISE * rng.normal(size=x.shape)
    schedule = qb.optim.schedules.warmup_cosine(0.0, peak, warmup_steps=max(1, steps // 20),
                                                decay_steps=steps, end_value=peak / 100)
    feed = batches(x, y, batch)
    trainer = qb.optim.Trainer(loss, init([1, width, width, 1]), qb.optim.Adam(schedule),
                               *next(feed), batch_argnums=(0, 1))
    history = trainer.fit(steps, batches=feed)

    grid = np.linspace(-2.0, 2.0, 201)[:, None]
    test_mse = float(np.mean((np.asarray(mlp(trainer.params, grid)) - target(grid)) ** 2))
    first, last = np.mean(history[:10]), np.mean(history[-10:])
    print(f"{steps} steps of {batch} samples: loss {first:.3e} -> {last:.3e} (means of the first "
          f"and last 10 steps); test mean squared error {test_mse:.2e}")
    if out is not None:
        lr = [float(schedule(k)) for k in range(steps)]
        plot(history, lr, out)
    return history, test_mse


def plot(history, lr, out):
    """Loss per step (faint), its running mean, and the learning rate on a second axis."""
    plt = figures.pyplot()
    if plt is None:
        return None
    steps = np.arange(1, len(history) + 1)
    window = max(1, len(history) // 50)
    smooth = np.convolve(history, np.ones(window) / window, mode="valid")
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.semilogy(steps, history, color="C0", alpha=0.3, lw=0.8, label="minibatch loss")
    ax.semilogy(steps[window - 1:], smooth, color="C0", label=f"running mean of {window}")
    ax.axhline(NOISE**2, color="gray", ls=":", label="noise variance (the floor)")
    ax.set(title="Trainer.history with a warm-up cosine schedule", xlabel="step",
           ylabel="mean squared error")
    lx = ax.twinx()
    lx.plot(steps, lr, color="C1", ls="--", label="learning rate")
    lx.set_ylabel("learning rate")
    lines = ax.get_lines() + lx.get_lines()
    ax.legend(lines, [line.get_label() for line in lines], loc="upper right")
    return figures.save(fig, out, "training_loss_curve.png")


SMALL = {"samples": 128, "batch": 16, "width": 8, "steps": 60}

if __name__ == "__main__":
    figures.command_line(__doc__, main, SMALL)
