"""A 2-D Poisson problem solved matrix-free with ``qb.linalg.cg``, differentiated with respect
to a parameter of its source.

``-Δu = f`` on the unit square with ``u = 0`` on the boundary, on an ``n x n`` interior grid
(5-point Laplacian, applied as shifts of the grid: no matrix is formed). The source is a
Gaussian bump of width ``s``; the functional ``J(s) = h^2 sum(u^2)`` is differentiated with
``qb.grad``, which solves one more system with the (symmetric) Laplacian instead of going
through the iterations, and checked against central finite differences. Draws the solution
field in ``docs/images/poisson_cg.png`` (matplotlib, ``pip install 'quabla[examples]'``).

    python examples/poisson_cg.py            # 48 x 48 grid
    python examples/poisson_cg.py --small    # 8 x 8 (CI; or QUABLA_EXAMPLE_SMALL=1), figure
                                             # in the current folder
"""

import figures  # the examples' shared figure and command-line helpers
import numpy as np

import quabla as qb

CENTER = (0.4, 0.6)                             # of the source bump


def grid(n):
    """The interior points' coordinates ``(x, y)``, each (n, n), and the spacing."""
    h = 1.0 / (n + 1)
    g = np.linspace(h, 1.0 - h, n)
    x, y = np.meshgrid(g, g, indexing="ij")
    return x, y, h


def laplacian(u):
    """``-Δu`` with zero boundary values: each neighbour is the grid shifted by one."""
    n = u.shape[0]
    h = 1.0 / (n + 1)
    zero_row, zero_col = qb.zeros((1, n)), qb.zeros((n, 1))
    up = qb.concat([u[1:], zero_row], axis=0)
    down = qb.concat([zero_row, u[:-1]], axis=0)
    left = qb.concat([u[:, 1:], zero_col], axis=1)
    right = qb.concat([zero_col, u[:, :-1]], axis=1)
    return (4.0 * u - up - down - left - right) / (h * h)


def source(s, r2):
    """A Gaussian bump of width ``s``; ``r2`` the squared distances to its centre."""
    return qb.exp(-r2 / (2.0 * s * s)) / (s * s)


def solve(s, r2):
    return qb.linalg.cg(laplacian, source(s, r2), tol=1e-11, maxiter=20 * r2.size)


def functional(s, r2):
    u, _ = solve(s, r2)
    h = 1.0 / (r2.shape[0] + 1)
    return h * h * qb.sum(u * u)


def main(n=48, s=0.1, out=figures.IMAGES):
    """Solve, check dJ/ds against finite differences; returns (u, relative error of dJ/ds)."""
    x, y, _ = grid(n)
    r2 = (x - CENTER[0]) ** 2 + (y - CENTER[1]) ** 2
    u, info = qb.jit(solve)(qb.array(s), r2)
    assert float(info) == 0, f"cg did not converge: info={float(info)}"
    value, grad = qb.jit(qb.value_and_grad(functional))(qb.array(s), r2)
    eps = 1e-5
    J = qb.jit(functional)
    fd = (float(J(qb.array(s + eps), r2)) - float(J(qb.array(s - eps), r2))) / (2 * eps)
    error = abs(float(grad) - fd) / abs(fd)
    print(f"n={n}: J(s={s}) = {float(value):.6e}, dJ/ds = {float(grad):.6e} "
          f"(finite differences {fd:.6e}, relative error {error:.1e})")
    assert error < 1e-5
    residual = np.abs(np.asarray(laplacian(u)) - np.asarray(source(s, r2))).max()
    print(f"max residual of -Δu = f: {residual:.2e}")
    u = np.asarray(u)
    if out is not None:
        plot(x, y, u, s, out)
    print("ok")
    return u, error


def plot(x, y, u, s, out):
    """The solution on the grid, with the source bump's contours over it."""
    plt = figures.pyplot()
    if plt is None:
        return None
    n = u.shape[0]
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    image = ax.imshow(u.T, origin="lower", extent=(0, 1, 0, 1), cmap="viridis")
    fig.colorbar(image, ax=ax, label="u")
    f = np.exp(-((x - CENTER[0]) ** 2 + (y - CENTER[1]) ** 2) / (2 * s * s))
    ax.contour(x, y, f, levels=[0.1, 0.5, 0.9], colors="white", linewidths=0.8)
    ax.set(title=f"-Δu = f, u = 0 on the edge: cg on a {n}x{n} grid\n"
                 f"white: the source f (width s = {s}) at 10, 50, 90% of its peak",
           xlabel="x", ylabel="y")
    return figures.save(fig, out, "poisson_cg.png")


SMALL = {"n": 8}

if __name__ == "__main__":
    figures.command_line(__doc__, main, SMALL)
