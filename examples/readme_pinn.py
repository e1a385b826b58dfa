"""The README "At a Glance" problem (spec 000 §2.4, v0.2): fit w in u(x) = sin(w x) so that
u'' = -pi^2 sin(pi x) on eight collocation points. Exact second derivatives come from
grad(grad(u)), vectorized over the points with vmap. ``qb.optim.Trainer`` compiles the
gradient and the Adam update into one program and keeps w, the moments and x between steps:
the fastest way to train. ``loop`` is the same training written with the pure, composable
pieces (``jit(value_and_grad)`` and ``opt.update``); both give the same bits.

Run: python examples/readme_pinn.py      (prints w = 3.141593, loss = 1.5e-13)

It also draws the trained u(x) against the exact sin(pi x) in ``docs/images/readme_pinn.png``
(``--out DIR`` to write elsewhere; needs matplotlib, ``pip install 'quabla[examples]'``). The
note about the figure goes to standard error, so standard output is the README's one line.
"""

import argparse
import math

import figures  # the examples' shared figure and command-line helpers
import numpy as np

import quabla as qb


def u(x, w):                                   # one collocation point, scalar x
    return qb.sin(x * w)


u_xx = qb.vmap(qb.grad(qb.grad(u)), in_axes=(0, None))   # exact d2u/dx2 per point


def loss(w, x):
    return qb.mean((u_xx(x, w) + math.pi**2 * qb.sin(math.pi * x)) ** 2)


def main(steps=300, out=figures.IMAGES):
    """Train, print w and the loss, save the figure in ``out`` (None: no figure)."""
    x, w = qb.linspace(0.05, 0.95, 8), qb.array(2.5)
    trainer = qb.optim.Trainer(loss, w, qb.optim.Adam(learning_rate=0.05), x)
    trainer.fit(steps)                         # progress bar on a terminal
    w, value = trainer.params, trainer.loss()
    print(f"w = {w.item():.6f}, loss = {value.item():.1e}")
    if out is not None:
        plot(np.asarray(x), w.item(), out)
    return w, value


def loop(steps=300):
    x, w = qb.linspace(0.05, 0.95, 8), qb.array(2.5)
    opt = qb.optim.Adam(learning_rate=0.05)
    state = opt.init(w)
    step = qb.jit(qb.value_and_grad(loss))     # traced and compiled on first call
    for _ in range(steps):
        value, g = step(w, x)
        w, state = opt.update(w, g, state)
    return w, value


def plot(points, w, out):
    """The trained sin(w x), the exact sin(pi x) and the start sin(2.5 x) on [0, 1]."""
    plt = figures.pyplot()
    if plt is None:
        return None
    x = np.linspace(0.0, 1.0, 200)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(x, np.sin(math.pi * x), color="black", lw=3, alpha=0.3, label=r"exact $\sin(\pi x)$")
    ax.plot(x, np.sin(w * x), color="C0", label=f"trained $\\sin(w x)$, w = {w:.6f}")
    ax.plot(x, np.sin(2.5 * x), "--", color="C1", label=r"start, $w = 2.5$")
    ax.plot(points, np.sin(w * points), "o", color="C0", label="collocation points")
    ax.set(title="README PINN: $u'' = -\\pi^2 \\sin(\\pi x)$", xlabel="x", ylabel="u(x)")
    ax.legend(loc="lower center")
    return figures.save(fig, out, "readme_pinn.png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="Adam steps (default 300)")
    parser.add_argument("--out", default=figures.IMAGES,
                        help="folder for the figure (docs/images)")
    args = parser.parse_args()
    main(args.steps, args.out)
