"""A deep PINN for the 2-D Poisson equation: -Δu = f on the unit square, u = 0 on its edge.

The source ``f = 2 pi^2 sin(pi x) sin(pi y)`` has the exact solution ``sin(pi x) sin(pi y)``.
The network is 2 -> 20 x 4 -> 1 with tanh; multiplying it by ``x (1 - x) y (1 - y)`` makes
every candidate vanish on the edge, so the loss is the PDE residual alone. The Laplacian of one
point is the trace of ``qb.hessian`` with respect to the point, ``qb.vmap`` maps it over the
collocation points, and ``qb.optim.Trainer`` compiles the residual's gradient and the Adam
update into one program. Prints the relative L2 error on a grid and draws the prediction and
its error in ``docs/images/poisson2d_pinn.png`` (matplotlib, ``pip install 'quabla[examples]'``).

    python examples/poisson2d_pinn.py            # 512 points, 4 layers of 20, 3000 steps
    python examples/poisson2d_pinn.py --small    # 32 points, 1 layer of 8 (CI)
"""

import itertools
import math

import figures  # the examples' shared figure and command-line helpers
import numpy as np

import quabla as qb


def init(sizes, seed=0):
    """One ``{"W", "b"}`` per layer, W drawn with variance 1 / fan-in (tanh keeps its scale)."""
    rng = np.random.default_rng(seed)
    return [{"W": qb.array(rng.normal(0.0, 1.0 / math.sqrt(m), (m, n))), "b": qb.zeros(n)}
            for m, n in itertools.pairwise(sizes)]


def net(params, z):
    h = z
    for layer in params[:-1]:
        h = qb.tanh(h @ layer["W"] + layer["b"])
    return (h @ params[-1]["W"] + params[-1]["b"])[0]


def u(params, z):
    """The candidate solution at one point ``z = (x, y)``: zero on the edge by construction."""
    x, y = z[0], z[1]
    return x * (1.0 - x) * y * (1.0 - y) * net(params, z)


def exact(x, y):
    return np.sin(np.pi * x) * np.sin(np.pi * y)


def residual(params, z):
    """-Δu - f at one point: the Hessian's trace is the Laplacian."""
    laplacian = qb.trace(qb.hessian(u, argnums=1)(params, z))
    return -laplacian - 2.0 * math.pi**2 * qb.sin(math.pi * z[0]) * qb.sin(math.pi * z[1])


def loss(params, points):
    return qb.mean(qb.vmap(residual, in_axes=(None, 0))(params, points) ** 2)


def main(points=512, width=20, depth=4, steps=3000, learning_rate=3e-3, grid=65, out=figures.IMAGES):
    """Train; print and return the relative L2 error on a ``grid x grid`` mesh (and the loss
    history). ``out``: the figure's folder (None: no figure)."""
    rng = np.random.default_rng(1)
    xy = qb.array(rng.uniform(0.0, 1.0, (points, 2)))
    params = init([2] + [width] * depth + [1])
    trainer = qb.optim.Trainer(loss, params, qb.optim.Adam(learning_rate), xy)
    trainer.fit(steps)

    g = np.linspace(0.0, 1.0, grid)
    x, y = np.meshgrid(g, g, indexing="ij")
    mesh = qb.array(np.stack([x.ravel(), y.ravel()], axis=-1))
    predict = qb.jit(qb.vmap(u, in_axes=(None, 0)))
    pred = np.asarray(predict(trainer.params, mesh)).reshape(x.shape)
    error = np.linalg.norm(pred - exact(x, y)) / np.linalg.norm(exact(x, y))
    history = trainer.history
    print(f"{points} points, {depth} x {width} tanh, {steps} Adam steps: loss "
          f"{history[0]:.3e} -> {history[-1]:.3e}, relative L2 error {error:.2e}")
    if out is not None:
        plot(x, y, pred, error, out)
    return error, history


def plot(x, y, pred, error, out):
    """Two panels: the predicted u and its absolute error."""
    plt = figures.pyplot()
    if plt is None:
        return None
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 4))
    extent = (0, 1, 0, 1)
    image = ax.imshow(pred.T, origin="lower", extent=extent, cmap="viridis")
    fig.colorbar(image, ax=ax, label="u")
    ax.set(title="PINN solution u(x, y)", xlabel="x", ylabel="y")
    image = bx.imshow(np.abs(pred - exact(x, y)).T, origin="lower", extent=extent, cmap="magma")
    bar = fig.colorbar(image, ax=bx, label="|u - exact|")
    bar.formatter.set_powerlimits((0, 0))          # 1e-4 as an exponent above the bar
    bx.set(title=f"error (relative L2 {error:.1e})", xlabel="x", ylabel="y")
    fig.suptitle(r"$-\Delta u = 2\pi^2 \sin(\pi x) \sin(\pi y)$ on the unit square, "
                 r"exact $u = \sin(\pi x) \sin(\pi y)$")
    return figures.save(fig, out, "poisson2d_pinn.png")


SMALL = {"points": 32, "width": 8, "depth": 1, "steps": 200, "learning_rate": 1e-2, "grid": 17}

if __name__ == "__main__":
    figures.command_line(__doc__, main, SMALL)
