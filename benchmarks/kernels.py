"""Hand-written Numba kernels: the floor the generated code is compared against.

``readme_loss_and_grad`` computes the README PINN loss and its derivative in w analytically:
u = sin(w x), u_xx = -w^2 sin(w x), r = u_xx + pi^2 sin(pi x), L = mean(r^2),
dL/dw = mean(2 r dr/dw) with dr/dw = -2 w sin(w x) - w^2 x cos(w x).
``lj_energy_and_forces`` is the Lennard-Jones problem as one loop over the pairs.
"""

import math

import numpy as np
from numba import njit


@njit(cache=True)
def readme_loss_and_grad(w, x):
    n = x.shape[0]
    pi = math.pi
    loss = 0.0
    grad = 0.0
    for i in range(n):
        s = math.sin(w * x[i])
        c = math.cos(w * x[i])
        r = -w * w * s + pi * pi * math.sin(pi * x[i])
        dr = -2.0 * w * s - w * w * x[i] * c
        loss += r * r
        grad += 2.0 * r * dr
    return loss / n, grad / n


@njit(cache=True)
def lj_energy_and_forces(x):
    """Lennard-Jones energy of all pairs (epsilon = sigma = 1) and the gradient of the energy
    in the positions (minus the forces), each pair visited once."""
    n = x.shape[0]
    grad = np.zeros_like(x)
    energy = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            d0, d1, d2 = x[i, 0] - x[j, 0], x[i, 1] - x[j, 1], x[i, 2] - x[j, 2]
            inv2 = 1.0 / (d0 * d0 + d1 * d1 + d2 * d2)
            inv6 = inv2 * inv2 * inv2
            energy += 4.0 * (inv6 * inv6 - inv6)
            s = -24.0 * (2.0 * inv6 * inv6 - inv6) * inv2  # dE/dr2 * 2
            grad[i, 0] += s * d0
            grad[i, 1] += s * d1
            grad[i, 2] += s * d2
            grad[j, 0] -= s * d0
            grad[j, 1] -= s * d1
            grad[j, 2] -= s * d2
    return energy, grad
