"""Molecular dynamics of a Lennard-Jones cluster, the whole trajectory one compiled program.

``N = side^3`` particles start on a cubic lattice near the pair potential's minimum with
random thermal velocities (reduced units: epsilon = sigma = mass = 1). The forces are
``-qb.grad`` of the total energy; velocity Verlet advances them, written as the body of a
``qb.scan`` that also returns the kinetic and potential energy of every step, and ``qb.jit``
compiles the scan, so the time loop runs in native code without a trip to Python per step.
Velocity Verlet is symplectic: the total energy must stay put while kinetic and potential
energy trade places as the lattice melts. Prints the energy drift, and draws the three energies
against time in ``docs/images/lennard_jones_md.png`` (matplotlib,
``pip install 'quabla[examples]'``).

    python examples/lennard_jones_md.py            # 125 particles, 10000 steps
    python examples/lennard_jones_md.py --small    # 8 particles, 200 steps (CI)

``examples/md_numba_interop.py`` runs the same physics from a hand-written Numba loop instead.
"""

import math

import figures  # the examples' shared figure and command-line helpers
import numpy as np

import quabla as qb


def potential(x):
    """Sum over pairs of 4 (r^-12 - r^-6) for positions ``x`` (n, 3)."""
    n = x.shape[0]
    d = qb.expand_dims(x, 1) - qb.expand_dims(x, 0)
    r2 = qb.sum(d * d, axis=-1) + qb.eye(n)      # 1 on the diagonal keeps 1 / r2 finite
    inv6 = 1.0 / r2**3
    return 2.0 * qb.sum((1.0 - qb.eye(n)) * (inv6 * inv6 - inv6))   # each pair counted twice


def force(x):
    return -qb.grad(potential)(x)


def trajectory(x, v, dt, steps):
    """``steps`` velocity-Verlet steps from ``(x, v)``: the final state and, per step, the
    kinetic and potential energy (an array (steps, 2))."""
    def step(state, i):
        x, v, a = state
        x = x + dt * v + 0.5 * dt * dt * a
        a_new = force(x)
        v = v + 0.5 * dt * (a + a_new)
        return (x, v, a_new), qb.stack([0.5 * qb.sum(v * v), potential(x)])

    (x, v, _), energies = qb.scan(step, (x, v, force(x)), length=steps)
    return x, v, energies


def initial_state(side, temperature, seed=0):
    """A cubic lattice of spacing 1.1 (about the minimum at 2^(1/6)), Maxwell velocities of
    the given temperature with no net momentum."""
    g = 1.1 * np.arange(side)
    x = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    v = np.random.default_rng(seed).normal(0.0, math.sqrt(temperature), x.shape)
    return x, v - v.mean(axis=0)


def main(side=5, steps=10000, dt=0.002, temperature=0.7, out=figures.IMAGES):
    """Run the trajectory; print and return the relative energy drift (largest deviation of
    the total energy from its start, over the start's magnitude) and the energies."""
    x0, v0 = initial_state(side, temperature)
    run = qb.jit(lambda x, v: trajectory(x, v, dt, steps))
    _, _, energies = run(qb.array(x0), qb.array(v0))
    kinetic, pot = np.asarray(energies).T
    e0 = float(potential(qb.array(x0))) + 0.5 * np.sum(v0 * v0)
    total = kinetic + pot
    drift = float(np.max(np.abs(total - e0)) / abs(e0))
    print(f"{len(x0)} particles, {steps} steps of dt = {dt}: total energy {e0:.6f} -> "
          f"{total[-1]:.6f}, relative drift {drift:.1e}; kinetic {0.5 * np.sum(v0 * v0):.3f} "
          f"-> {kinetic[-1]:.3f}")
    if out is not None:
        plot(dt * np.arange(1, steps + 1), kinetic, pot, e0, len(x0), out)
    return drift, energies


def plot(t, kinetic, pot, e0, n, out):
    """The three energies against time (top) and the total's relative deviation (bottom)."""
    plt = figures.pyplot()
    if plt is None:
        return None
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(6, 5), sharex=True,
                                 gridspec_kw={"height_ratios": [2, 1]})
    ax.plot(t, kinetic + pot, color="black", label="total")
    ax.plot(t, kinetic, color="C3", label="kinetic")
    ax.plot(t, pot, color="C0", label="potential")
    ax.set(title=f"Lennard-Jones cluster of {n} particles, velocity Verlet",
           ylabel="energy")
    ax.legend(loc="center right")
    bx.plot(t, (kinetic + pot - e0) / abs(e0), color="black", lw=0.8)
    bx.axhline(0.0, color="gray", lw=0.5)
    bx.set(xlabel="time (reduced units)", ylabel="relative drift\nof the total")
    bx.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    return figures.save(fig, out, "lennard_jones_md.png")


SMALL = {"side": 2, "steps": 200}

if __name__ == "__main__":
    figures.command_line(__doc__, main, SMALL)
