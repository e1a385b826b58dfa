"""Fit the damping of an oscillator to observations, through ``qb.odeint``.

A damped pendulum ``x'' = -w^2 sin(x) - c x'`` is integrated with the adaptive Dormand–Prince
solver; noisy observations of ``x`` come from the true damping ``c = 0.35``. Gradient descent
on the mean squared misfit, with gradients from the adjoint method (``qb.value_and_grad``
through ``odeint``), recovers it. Saves ``oscillator_odeint.png`` when matplotlib is installed.

    python examples/oscillator_odeint.py           # 60 observations, 60 steps of descent
    python examples/oscillator_odeint.py --small   # 12 observations, 12 steps (CI; or
                                                   # QUABLA_EXAMPLE_SMALL=1)
"""

import os
import sys

import numpy as np

import quabla as qb

SMALL = "--small" in sys.argv or os.environ.get("QUABLA_EXAMPLE_SMALL") == "1"
W, C_TRUE, C_START = 2.0, 0.35, 0.05


def field(y, t, c):
    return qb.stack([y[1], -W * W * qb.sin(y[0]) - c * y[1]])


def main():
    count, steps = (12, 12) if SMALL else (60, 60)
    t = np.linspace(0.0, 6.0, count)
    y0 = np.array([1.0, 0.0])
    rng = np.random.default_rng(0)
    observed = np.asarray(qb.odeint(field, y0, t, C_TRUE))[:, 0] + 0.01 * rng.normal(size=count)

    def misfit(c):
        return qb.mean((qb.odeint(field, y0, t, c, rtol=1e-8, atol=1e-8)[:, 0] - observed) ** 2)

    step = qb.jit(qb.value_and_grad(misfit))
    c, lr = qb.array(C_START), 1.0
    history = []
    for k in range(steps):
        loss, g = step(c)
        history.append(float(loss))
        c = c - lr * g
    c = float(c)
    print(f"damping: start {C_START}, fitted {c:.4f}, true {C_TRUE}; misfit "
          f"{history[0]:.3e} -> {history[-1]:.3e}")
    assert history[-1] < 0.1 * history[0] and abs(c - C_TRUE) < abs(C_START - C_TRUE) / 2
    plot(t, observed, y0, c, history)
    print("ok")


def plot(t, observed, y0, c, history):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'quabla[examples]'): no plot")
        return
    fine = np.linspace(t[0], t[-1], 400)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    ax.plot(t, observed, "o", label="observed")
    ax.plot(fine, np.asarray(qb.odeint(field, y0, fine, c))[:, 0], label=f"fit c={c:.3f}")
    ax.plot(fine, np.asarray(qb.odeint(field, y0, fine, C_START))[:, 0], "--",
            label=f"start c={C_START}")
    ax.set_xlabel("t")
    ax.legend()
    bx.semilogy(history)
    bx.set_xlabel("gradient step")
    bx.set_ylabel("misfit")
    fig.tight_layout()
    fig.savefig("oscillator_odeint.png", dpi=100)
    print("saved oscillator_odeint.png")


if __name__ == "__main__":
    main()
