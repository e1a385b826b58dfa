"""The README "At a Glance" problem (spec 000 §2.4, v0.2): fit w in u(x) = sin(w x) so that
u'' = -pi^2 sin(pi x) on eight collocation points. Exact second derivatives come from
grad(grad(u)), vectorized over the points with vmap. ``qb.optim.Trainer`` compiles the
gradient and the Adam update into one program and keeps w, the moments and x between steps:
the fastest way to train. ``loop`` is the same training written with the pure, composable
pieces (``jit(value_and_grad)`` and ``opt.update``); both give the same bits.

Run: python examples/readme_pinn.py      (prints w = 3.141593, loss = 1.5e-13)
"""

import math

import quabla as qb


def u(x, w):                                   # one collocation point, scalar x
    return qb.sin(x * w)


u_xx = qb.vmap(qb.grad(qb.grad(u)), in_axes=(0, None))   # exact d2u/dx2 per point


def loss(w, x):
    return qb.mean((u_xx(x, w) + math.pi**2 * qb.sin(math.pi * x)) ** 2)


def main(steps=300):
    x, w = qb.linspace(0.05, 0.95, 8), qb.array(2.5)
    trainer = qb.optim.Trainer(loss, w, qb.optim.Adam(learning_rate=0.05), x)
    trainer.fit(steps)                         # progress bar on a terminal
    w, value = trainer.params, trainer.loss()
    print(f"w = {w.item():.6f}, loss = {value.item():.1e}")
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


if __name__ == "__main__":
    main()
