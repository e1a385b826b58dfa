"""Molecular dynamics in Numba with forces from Quabla (docs/numba-interop.md).

A Lennard-Jones cluster (all pairs by broadcasting) integrated with velocity Verlet. The loop is
a user's own ``@numba.njit`` function; the forces come from ``qb.grad`` of the energy, compiled
ahead of time and called through ``.numba``, so no step goes back to Python. The same loop
driven from Python, with the gradient from the jitted function, must give the same trajectory.

    python examples/md_numba_interop.py            # 64 particles, 400 steps
    python examples/md_numba_interop.py --small    # 8 particles, 20 steps (CI)
"""

import sys

import numba
import numpy as np

import quabla as qb


def lennard_jones(x):
    """Total energy of particles at ``x`` (n, 3), epsilon = sigma = 1."""
    n = x.shape[0]
    d = qb.expand_dims(x, 1) - qb.expand_dims(x, 0)
    off = 1.0 - qb.eye(n)                    # no self-interaction
    r2 = qb.sum(d * d, axis=-1) + qb.eye(n)  # 1 on the diagonal keeps it finite
    s6 = (1.0 / r2) ** 3
    return 2.0 * qb.sum(off * (s6 * s6 - s6))  # 4 (s12 - s6), each pair counted twice


@numba.njit
def verlet_numba(gradient, x, v, dt, steps):
    """Velocity Verlet in Numba; ``gradient`` is the Quabla-compiled energy gradient."""
    x, v = x.copy(), v.copy()
    a = -gradient(x)
    for _ in range(steps):
        x += dt * v + 0.5 * dt * dt * a
        a_new = -gradient(x)
        v += 0.5 * dt * (a + a_new)
        a = a_new
    return x, v


def verlet_python(gradient, x, v, dt, steps):
    """The same loop from Python, each gradient a call of the jitted function."""
    x, v = x.copy(), v.copy()
    a = -np.asarray(gradient(x))
    for _ in range(steps):
        x += dt * v + 0.5 * dt * dt * a
        a_new = -np.asarray(gradient(x))
        v += 0.5 * dt * (a + a_new)
        a = a_new
    return x, v


def initial_state(side, seed=0):
    """A cubic lattice near the pair-potential minimum, with small random velocities."""
    grid = np.arange(side) * 2.0 ** (1 / 6)
    x = np.stack(np.meshgrid(grid, grid, grid, indexing="ij"), -1).reshape(-1, 3)
    v = 0.1 * np.random.default_rng(seed).standard_normal(x.shape)
    return x, v - v.mean(axis=0)


def main(small=False, side=None, steps=None, dt=0.002):
    """Runs both loops on ``side^3`` particles for ``steps`` steps (default 64 and 400, or 8
    and 20 when ``small``); returns the largest position and velocity difference."""
    side = side or (2 if small else 4)
    steps = steps or (20 if small else 400)
    x, v = initial_state(side)
    gradient = qb.jit(qb.grad(lennard_jones))
    compiled = gradient.lower(qb.ShapeDtype(x.shape, qb.float64)).compile()
    xn, vn = verlet_numba(compiled.numba, x, v, dt, steps)
    xp, vp = verlet_python(gradient, x, v, dt, steps)
    diff = max(np.abs(xn - xp).max(), np.abs(vn - vp).max())
    e0 = float(lennard_jones(x)) + 0.5 * np.sum(v * v)
    e1 = float(lennard_jones(xn)) + 0.5 * np.sum(vn * vn)
    print(f"{len(x)} particles, {steps} steps: total energy {e0:.6f} -> {e1:.6f}; "
          f"max |numba - python| = {diff:.3e}")
    return diff


if __name__ == "__main__":
    main(small="--small" in sys.argv[1:])
