"""Hand-written Numba kernels: the floor the generated code is compared against.

``readme_loss_and_grad`` computes the README PINN loss and its derivative in w analytically:
u = sin(w x), u_xx = -w^2 sin(w x), r = u_xx + pi^2 sin(pi x), L = mean(r^2),
dL/dw = mean(2 r dr/dw) with dr/dw = -2 w sin(w x) - w^2 x cos(w x).
"""

import math

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
