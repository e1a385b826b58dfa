"""A 2-D Poisson problem solved matrix-free with ``qb.linalg.cg``, differentiated with respect
to a parameter of its source.

``-Δu = f`` on the unit square with ``u = 0`` on the boundary, on an ``n x n`` interior grid
(5-point Laplacian, applied as shifts of the grid: no matrix is formed). The source is a
Gaussian bump of width ``s``; the functional ``J(s) = h^2 sum(u^2)`` is differentiated with
``qb.grad``, which solves one more system with the (symmetric) Laplacian instead of going
through the iterations, and checked against central finite differences.
Saves ``poisson_cg.png`` when matplotlib is installed.

    python examples/poisson_cg.py            # 48 x 48 grid
    python examples/poisson_cg.py --small    # 8 x 8 (CI; or QUABLA_EXAMPLE_SMALL=1)
"""

import os
import sys

import numpy as np

import quabla as qb

SMALL = "--small" in sys.argv or os.environ.get("QUABLA_EXAMPLE_SMALL") == "1"
N = 8 if SMALL else 48
H = 1.0 / (N + 1)
GRID = np.linspace(H, 1.0 - H, N)
X, Y = np.meshgrid(GRID, GRID, indexing="ij")
R2 = (X - 0.4) ** 2 + (Y - 0.6) ** 2


def laplacian(u):
    """``-Δu`` with zero boundary values: each neighbour is the grid shifted by one."""
    zero_row, zero_col = qb.zeros((1, N)), qb.zeros((N, 1))
    up = qb.concat([u[1:], zero_row], axis=0)
    down = qb.concat([zero_row, u[:-1]], axis=0)
    left = qb.concat([u[:, 1:], zero_col], axis=1)
    right = qb.concat([zero_col, u[:, :-1]], axis=1)
    return (4.0 * u - up - down - left - right) / (H * H)


def solve(s):
    source = qb.exp(-R2 / (2.0 * s * s)) / (s * s)
    u, info = qb.linalg.cg(laplacian, source, tol=1e-11, maxiter=20 * N * N)
    return u, info


def functional(s):
    u, _ = solve(s)
    return H * H * qb.sum(u * u)


def main():
    s = 0.1
    u, info = qb.jit(solve)(qb.array(s))
    assert float(info) == 0, f"cg did not converge: info={float(info)}"
    value, grad = qb.jit(qb.value_and_grad(functional))(qb.array(s))
    eps = 1e-5
    J = qb.jit(functional)
    fd = (float(J(qb.array(s + eps))) - float(J(qb.array(s - eps)))) / (2 * eps)
    error = abs(float(grad) - fd) / abs(fd)
    print(f"n={N}: J(s={s}) = {float(value):.6e}, dJ/ds = {float(grad):.6e} "
          f"(finite differences {fd:.6e}, relative error {error:.1e})")
    assert error < 1e-5
    residual = np.abs(np.asarray(laplacian(u)) - np.exp(-R2 / (2 * s * s)) / (s * s)).max()
    print(f"max residual of -Δu = f: {residual:.2e}")
    plot(np.asarray(u))
    print("ok")


def plot(u):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'quabla[examples]'): no plot")
        return
    fig, ax = plt.subplots(figsize=(5, 4))
    image = ax.imshow(u.T, origin="lower", extent=(0, 1, 0, 1))
    fig.colorbar(image, ax=ax, label="u")
    ax.set_title(f"-Δu = f on a {N}x{N} grid (cg)")
    fig.savefig("poisson_cg.png", dpi=100)
    print("saved poisson_cg.png")


if __name__ == "__main__":
    main()
