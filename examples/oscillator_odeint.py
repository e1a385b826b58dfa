"""Fit the damping of an oscillator to observations, through ``qb.odeint``.

A damped pendulum ``x'' = -w^2 sin(x) - c x'`` is integrated with the adaptive Dormand–Prince
solver; noisy observations of ``x`` come from the true damping ``c = 0.35``. Gradient descent
on the mean squared misfit, with gradients from the adjoint method (``qb.value_and_grad``
through ``odeint``), recovers it. Draws the observed, fitted and starting trajectories and the
misfit per step in ``docs/images/oscillator_odeint.png`` (matplotlib,
``pip install 'quabla[examples]'``).

    python examples/oscillator_odeint.py           # 60 observations, 60 steps of descent
    python examples/oscillator_odeint.py --small   # 12 observations, 12 steps (CI; or
                                                   # QUABLA_EXAMPLE_SMALL=1), figure in
                                                   # the current folder
"""

import figures  # the examples' shared figure and command-line helpers
import numpy as np

import quabla as qb

W, C_TRUE, C_START = 2.0, 0.35, 0.05


def field(y, t, c):
    return qb.stack([y[1], -W * W * qb.sin(y[0]) - c * y[1]])


def main(count=60, steps=60, out=figures.IMAGES):
    """Fit ``c`` to ``count`` observations by ``steps`` gradient steps; returns the fitted
    damping and the misfit history."""
    t = np.linspace(0.0, 6.0, count)
    y0 = np.array([1.0, 0.0])
    rng = np.random.default_rng(0)
    observed = np.asarray(qb.odeint(field, y0, t, C_TRUE))[:, 0] + 0.01 * rng.normal(size=count)

    def misfit(c):
        return qb.mean((qb.odeint(field, y0, t, c, rtol=1e-8, atol=1e-8)[:, 0] - observed) ** 2)

    step = qb.jit(qb.value_and_grad(misfit))
    c, lr = qb.array(C_START), 1.0
    history = []
    for _ in range(steps):
        loss, g = step(c)
        history.append(float(loss))
        c = c - lr * g
    c = float(c)
    print(f"damping: start {C_START}, fitted {c:.4f}, true {C_TRUE}; misfit "
          f"{history[0]:.3e} -> {history[-1]:.3e}")
    assert history[-1] < 0.1 * history[0] and abs(c - C_TRUE) < abs(C_START - C_TRUE) / 2
    if out is not None:
        plot(t, observed, y0, c, history, out)
    print("ok")
    return c, history


def plot(t, observed, y0, c, history, out):
    """Left: the trajectories x(t); right: the misfit per gradient step."""
    plt = figures.pyplot()
    if plt is None:
        return None
    fine = np.linspace(t[0], t[-1], 400)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 4), gridspec_kw={"width_ratios": [3, 2]})
    ax.plot(fine, np.asarray(qb.odeint(field, y0, fine, C_START))[:, 0], "--", color="gray",
            label=f"start, c = {C_START}")
    ax.plot(fine, np.asarray(qb.odeint(field, y0, fine, c))[:, 0], color="C0",
            label=f"fitted, c = {c:.3f}")
    ax.plot(t, observed, "o", color="C1", ms=4, label=f"observed (true c = {C_TRUE})")
    ax.set(title="damped pendulum x'' = -w² sin x - c x'", xlabel="t", ylabel="angle x(t)")
    ax.set_ylim(-1.1, 1.5)                         # room for the legend
    ax.legend(loc="upper right", fontsize="small")
    bx.semilogy(np.arange(1, len(history) + 1), history, color="C0")
    bx.set(title="descent, adjoint gradients", xlabel="gradient step",
           ylabel="mean squared misfit")
    return figures.save(fig, out, "oscillator_odeint.png")


SMALL = {"count": 12, "steps": 12}

if __name__ == "__main__":
    figures.command_line(__doc__, main, SMALL)
