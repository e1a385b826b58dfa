"""Programs written the way users write them, each beside JAX (x64) in one run: cold first
call, warm first call, edit-and-rerun (the program with another loss term, run with its
original's entries in the cache) and steady step, with ratios and their geometric means
(issue 23).

    python benchmarks/corpus.py                    # every program
    python benchmarks/corpus.py pinn2d_deep burgers
    python benchmarks/corpus.py --impls quabla --json out.json

None of these programs is tuned for Quabla: each is written once, against a namespace ``L``
that is either library (``L.np`` is ``quabla`` or ``jax.numpy``, ``L.grad`` ``qb.grad`` or
``jax.grad``, and so on; ``L.scan``, ``L.cg``, ``L.odeint``, ``L.adam``, ``L.fori_loop``,
``L.logsumexp``, ``L.softmax`` and ``L.tree_map`` adapt the few signatures and places that
differ), in the spellings users reach for: ``reshape(t, (1,)) @ W`` first layers, ``einsum`` and
broadcast-multiply-sum layers, Laplacians as ``grad(grad(net, k), k)`` summed over k,
per-example gradients by ``vmap(grad)``. Every measurement runs in a process
of its own through ``run.spawn`` (fresh compile caches for the cold call, the same caches for
the warm one, which also times the step), as ``run.py`` does. Nothing asserts on time.
"""

import contextlib
import functools
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run  # noqa: E402

PI = math.pi


# -- the two libraries behind one namespace -------------------------------------------------------

class Quabla:
    name = "quabla"

    def __init__(self):
        import quabla as qb

        self.qb = qb
        self.np = qb
        for name in ("grad", "value_and_grad", "vmap", "jit", "jvp", "hessian", "jacfwd"):
            setattr(self, name, getattr(qb, name))

    def array(self, x):
        return self.qb.array(x)

    def scan(self, f, init, xs):
        """``jax.lax.scan``'s signature over Quabla's ``scan``."""
        n = self.qb.tree.leaves(xs)[0].shape[0]
        rows = lambda xs, i: self.qb.tree.map(lambda x: x[i], xs)  # noqa: E731
        return self.qb.scan(lambda c, i, xs: f(c, rows(xs, i)), init, length=n, operands=(xs,))

    def cg(self, A, b):
        return self.qb.linalg.cg(A, b, tol=1e-10)[0]

    def solve_triangular(self, a, b, lower):
        return self.qb.linalg.solve_triangular(a, b, lower=lower)

    def odeint(self, f, y0, t, *args):
        return self.qb.odeint(f, y0, t, *args, rtol=1e-8, atol=1e-8)

    def fori_loop(self, lower, upper, body, init):
        return self.qb.fori_loop(lower, upper, body, init)

    def logsumexp(self, x, axis=None):
        return self.qb.logsumexp(x, axis=axis)

    def softmax(self, x, axis=-1):
        return self.qb.nn.softmax(x, axis=axis)

    def tree_map(self, f, *trees):
        return self.qb.tree.map(f, *trees)

    def adam(self, rate):
        opt = self.qb.optim.Adam(learning_rate=rate)
        return opt.init, lambda params, grads, state: opt.update(params, grads, state)

    def block(self, out):
        return out

    def leaves(self, tree):
        return self.qb.tree.leaves(tree)

    edit = False

    def edited(self, f):
        """``f``, or in the edit phase ``f`` plus an L2 term on its first argument: the edit a
        user makes most (another loss term), for edit-and-rerun. It keeps ``f``'s name, as
        an edit of ``f``'s source does."""
        if not self.edit:
            return f

        @functools.wraps(f)
        def edited(first, *rest):
            return f(first, *rest) + 1e-4 * sum(
                self.np.sum(leaf * leaf) for leaf in self.leaves(first))
        return edited


class Jax:
    name = "jax"

    def __init__(self):
        from problems import import_jax

        import_jax()
        import jax
        import jax.numpy as jnp

        self.jax = jax
        self.np = jnp
        for name in ("grad", "value_and_grad", "vmap", "jit", "jvp", "hessian", "jacfwd"):
            setattr(self, name, getattr(jax, name))

    def array(self, x):
        return self.np.asarray(x)

    def scan(self, f, init, xs):
        return self.jax.lax.scan(f, init, xs)

    def cg(self, A, b):
        from jax.scipy.sparse.linalg import cg

        return cg(A, b, tol=1e-10)[0]

    def solve_triangular(self, a, b, lower):
        from jax.scipy.linalg import solve_triangular

        return solve_triangular(a, b, lower=lower)

    def odeint(self, f, y0, t, *args):
        from jax.experimental.ode import odeint

        return odeint(f, y0, t, *args, rtol=1e-8, atol=1e-8)

    def fori_loop(self, lower, upper, body, init):
        return self.jax.lax.fori_loop(lower, upper, body, init)

    def logsumexp(self, x, axis=None):
        from jax.scipy.special import logsumexp

        return logsumexp(x, axis=axis)

    def softmax(self, x, axis=-1):
        return self.jax.nn.softmax(x, axis=axis)

    def tree_map(self, f, *trees):
        return self.jax.tree_util.tree_map(f, *trees)

    def adam(self, rate):
        import optax

        opt = optax.adam(rate)

        def update(params, grads, state):
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state
        return opt.init, update

    def block(self, out):
        return self.jax.block_until_ready(out)

    def leaves(self, tree):
        return self.jax.tree_util.tree_leaves(tree)

    edit = False
    edited = Quabla.edited


LIBRARIES = {"quabla": Quabla, "jax": Jax}


# -- the programs: each returns (step function, its arguments) -------------------------------------

def generator():
    import numpy as np

    return np.random.default_rng(0)


def mlp(L, sizes, scale=1.0):
    rng = generator()
    return [(L.array(rng.normal(0.0, scale / math.sqrt(m), (m, n))),
             L.array(0.01 * rng.normal(size=n))) for m, n in zip(sizes[:-1], sizes[1:])]


def forward(L, params, h, act):
    for w, b in params[:-1]:
        h = act(h @ w + b)
    w, b = params[-1]
    return h @ w + b


def pinn2d_deep(L):
    """Poisson in 2D, 2 -> 20 x 4 -> 1 tanh; the Laplacian as two grad(grad(net, k), k)."""
    params = mlp(L, [2, 20, 20, 20, 20, 1])
    net = lambda p, x, y: forward(L, p, L.np.stack([x, y]), L.np.tanh)[0]  # noqa: E731

    def loss(p, xs, ys):
        lap = lambda x, y: (L.grad(L.grad(net, 1), 1)(p, x, y)  # noqa: E731
                            + L.grad(L.grad(net, 2), 2)(p, x, y))
        f = L.vmap(lap)(xs, ys)
        src = -2 * PI**2 * L.np.sin(PI * xs) * L.np.sin(PI * ys)
        return L.np.mean((f - src) ** 2)

    pts = generator().uniform(0, 1, (512, 2))
    return L.jit(L.value_and_grad(L.edited(loss))), (params, L.array(pts[:, 0]), L.array(pts[:, 1]))


def pinn3d_mixed(L):
    """A 3D residual with the Laplacian and a mixed derivative u_xy, 3 -> 16 x 3 -> 1 tanh."""
    params = mlp(L, [3, 16, 16, 16, 1])
    net = lambda p, x, y, z: forward(L, p, L.np.stack([x, y, z]), L.np.tanh)[0]  # noqa: E731

    def residual(p, x, y, z):
        d2 = lambda k: L.grad(L.grad(net, k), k)(p, x, y, z)  # noqa: E731
        return d2(1) + d2(2) + d2(3) + L.grad(L.grad(net, 1), 2)(p, x, y, z)

    def loss(p, xs, ys, zs):
        return L.np.mean(L.vmap(residual, in_axes=(None, 0, 0, 0))(p, xs, ys, zs) ** 2)

    pts = generator().uniform(0, 1, (256, 3))
    return L.jit(L.value_and_grad(L.edited(loss))), (params,) + tuple(L.array(pts[:, k]) for k in range(3))


def burgers(L):
    """Burgers' residual u_t + u u_x - nu u_xx, (t, x) -> 32 -> 32 -> 1 softplus."""
    params = mlp(L, [2, 32, 32, 1])
    softplus = lambda h: L.np.log1p(L.np.exp(-L.np.abs(h))) + L.np.maximum(h, 0.0)  # noqa: E731
    u = lambda p, t, x: forward(L, p, L.np.stack([t, x]), softplus)[0]  # noqa: E731

    def residual(p, t, x):
        ut = L.grad(u, 1)(p, t, x)
        ux = L.grad(u, 2)(p, t, x)
        uxx = L.grad(L.grad(u, 2), 2)(p, t, x)
        return ut + u(p, t, x) * ux - 0.01 / PI * uxx

    def loss(p, ts, xs):
        return L.np.mean(L.vmap(residual, in_axes=(None, 0, 0))(p, ts, xs) ** 2)

    pts = generator().uniform(-1, 1, (256, 2))
    return L.jit(L.value_and_grad(L.edited(loss))), (params, L.array(pts[:, 0]), L.array(pts[:, 1]))


def _pinn1d(L, first_layer):
    params = mlp(L, [1, 32, 32, 1])

    def net(p, t):
        (w1, b1), rest = p[0], p[1:]
        h = L.np.tanh(first_layer(t, w1) + b1)
        return forward(L, rest, h, L.np.tanh)[0]

    def loss(p, xs):
        u_xx = L.vmap(L.grad(L.grad(net, 1), 1), in_axes=(None, 0))(p, xs)
        return L.np.mean((u_xx + PI**2 * L.np.sin(PI * xs)) ** 2)

    return L.jit(L.value_and_grad(L.edited(loss))), (params, L.array(generator().uniform(0, 1, 512)))


def mlp_reshape(L):
    """The 1D MLP PINN whose first layer is ``reshape(t, (1,)) @ W1``."""
    return _pinn1d(L, lambda t, w: L.np.reshape(t, (1,)) @ w)


def mlp_einsum(L):
    """The same PINN, its first layer an ``einsum``."""
    return _pinn1d(L, lambda t, w: L.np.einsum("i,ij->j", L.np.reshape(t, (1,)), w))


def mlp_broadcast_sum(L):
    """The same PINN, its first layer a broadcast multiply and a sum."""
    return _pinn1d(L, lambda t, w: L.np.sum(L.np.reshape(t, (1, 1)) * w, axis=0))


def rosenbrock_hessian(L):
    """The dense Hessian of the 32-d Rosenbrock function."""
    f = lambda x: L.np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)  # noqa: E731
    return L.jit(L.hessian(L.edited(f))), (L.array(generator().uniform(-1, 1, 32)),)


def mlp_hvp(L):
    """A Hessian-vector product (forward over reverse) of an MLP regression loss."""
    params = mlp(L, [8, 64, 64, 1])
    rng = generator()
    x, y = L.array(rng.normal(size=(128, 8))), L.array(rng.normal(size=(128, 1)))
    loss = lambda p: L.np.mean((forward(L, p, x, L.np.tanh) - y) ** 2)  # noqa: E731
    hvp = lambda p, v: L.jvp(L.grad(L.edited(loss)), (p,), (v,))[1]  # noqa: E731
    return L.jit(hvp), (params, params)


def poisson_cg(L):
    """Matrix-free 1D Poisson by conjugate gradients, the gradient w.r.t. the source."""
    n = 64
    h2 = (1.0 / (n + 1)) ** 2

    def apply(u):
        left = L.np.concatenate([L.np.zeros(1), u[:-1]])
        right = L.np.concatenate([u[1:], L.np.zeros(1)])
        return (2.0 * u - left - right) / h2

    def loss(s):
        u = L.cg(apply, s)
        return L.np.sum(u * u)

    return L.jit(L.value_and_grad(L.edited(loss))), (L.array(generator().uniform(-1, 1, n)),)


def lotka_volterra(L):
    """Lotka-Volterra by odeint, the gradient w.r.t. its four parameters."""
    def f(y, t, theta):
        a, b, c, d = theta[0], theta[1], theta[2], theta[3]
        return L.np.stack([a * y[0] - b * y[0] * y[1], -c * y[1] + d * y[0] * y[1]])

    t = L.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])

    def loss(theta):
        ys = L.odeint(f, L.array([1.0, 0.5]), t, theta)
        return L.np.sum((ys - 1.0) ** 2)

    return L.jit(L.value_and_grad(L.edited(loss))), (L.array([1.1, 0.4, 0.4, 0.1]),)


def scan_sin(L):
    """An explicit integrator with a sin force, 1000 steps of 64 oscillators, a per-step
    observable, value_and_grad w.r.t. the stiffness."""
    dt = 0.01

    def loss(k, x0):
        def step(state, drive):
            x, v = state
            v = v - dt * (k * L.np.sin(x) + 0.1 * v - drive)
            x = x + dt * v
            return (x, v), L.np.mean(x * x)

        drives = 0.01 * L.np.sin(L.np.linspace(0.0, 10.0, 1000))
        _, energy = L.scan(step, (x0, 0.0 * x0), drives)
        return L.np.mean(energy)

    return L.jit(L.value_and_grad(L.edited(loss))), (L.array(1.3), L.array(generator().uniform(-1, 1, 64)))


def per_example_grads(L):
    """Per-example gradients of a softmax classifier 784 -> 128 -> 10, batch 64."""
    params = mlp(L, [784, 128, 10])
    rng = generator()
    x = L.array(rng.normal(size=(64, 784)))
    labels = L.array(rng.integers(0, 10, 64).astype(float))

    def loss(p, xi, label):
        logits = forward(L, p, xi, L.np.tanh)
        shifted = logits - L.np.max(logits)
        logp = shifted - L.np.log(L.np.sum(L.np.exp(shifted)))
        onehot = L.np.where(L.np.equal(L.np.arange(10), label), 1.0, 0.0)  # qb: == is identity
        return -L.np.sum(onehot * logp)

    return L.jit(L.vmap(L.grad(L.edited(loss)), in_axes=(None, 0, 0))), (params, x, labels)


def train_adam(L):
    """One training step of an MLP regression with Adam: value_and_grad, then the update."""
    params = mlp(L, [4, 64, 64, 1])
    rng = generator()
    x, y = L.array(rng.normal(size=(256, 4))), L.array(rng.normal(size=(256, 1)))
    init, update = L.adam(1e-3)
    loss = lambda p: L.np.mean((forward(L, p, x, L.np.tanh) - y) ** 2)  # noqa: E731

    def step(p, state):
        value, grads = L.value_and_grad(L.edited(loss))(p)
        p, state = update(p, grads, state)
        return value, p, state

    return L.jit(step), (params, init(params))


def kernel_lsq(L):
    """Kernel least squares, 100 x 100 Gaussian kernel, SGD with momentum written out."""
    rng = generator()
    pts = L.array(rng.uniform(-1, 1, (100, 2)))
    target = L.array(rng.normal(size=100))
    d2 = L.np.sum((pts[:, None, :] - pts[None, :, :]) ** 2, axis=-1)
    K = L.np.exp(-d2 / 0.5)

    def step(alpha, velocity):
        objective = lambda a: L.np.mean((K @ a - target) ** 2) + 1e-3 * L.np.sum(a * a)  # noqa: E731
        value, g = L.value_and_grad(L.edited(objective))(alpha)
        velocity = 0.9 * velocity - 0.01 * g
        return value, alpha + velocity, velocity

    return L.jit(step), (L.array([0.0] * 100), L.array([0.0] * 100))


# Added in session 21, written before anything was measured on them: each found something
# (gp_nll's solvers compiled by Numba, heat_roll's rolls materialised as slices and copies).

def ns_steady(L):
    """Steady 2D incompressible Navier-Stokes residuals, (x, y) -> (u, v, p), 2 -> 24 -> 24 -> 3
    tanh; first derivatives by jacfwd, second by hessian of each velocity component."""
    params = mlp(L, [2, 24, 24, 3])
    nu = 0.02
    net = lambda p, z: forward(L, p, z, L.np.tanh)  # noqa: E731

    def residual(p, z):
        out = net(p, z)
        J = L.jacfwd(net, argnums=1)(p, z)  # 3 x 2
        Hu = L.hessian(lambda q: net(p, q)[0])(z)
        Hv = L.hessian(lambda q: net(p, q)[1])(z)
        u, v = out[0], out[1]
        mom_x = u * J[0, 0] + v * J[0, 1] + J[2, 0] - nu * (Hu[0, 0] + Hu[1, 1])
        mom_y = u * J[1, 0] + v * J[1, 1] + J[2, 1] - nu * (Hv[0, 0] + Hv[1, 1])
        return L.np.stack([mom_x, mom_y, J[0, 0] + J[1, 1]])

    def loss(p, pts):
        return L.np.mean(L.vmap(residual, in_axes=(None, 0))(p, pts) ** 2)

    pts = L.array(generator().uniform(0, 1, (256, 2)))
    return L.jit(L.value_and_grad(L.edited(loss))), (params, pts)


def gp_nll(L):
    """A Gaussian process's negative log marginal likelihood (RBF kernel, 80 points, Cholesky
    and a triangular solve), value and gradient w.r.t. the three log hyperparameters."""
    rng = generator()
    X = L.array(rng.uniform(-2, 2, (80, 2)))
    y = L.array(rng.normal(size=80))

    def nll(theta):
        ell, var, noise = L.np.exp(theta[0]), L.np.exp(theta[1]), L.np.exp(theta[2])
        d2 = L.np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
        K = var * L.np.exp(-0.5 * d2 / ell ** 2) + (noise + 1e-6) * L.np.eye(80)
        C = L.np.linalg.cholesky(K)
        a = L.solve_triangular(C, y, lower=True)
        return 0.5 * L.np.sum(a * a) + L.np.sum(L.np.log(L.np.diag(C))) + 40 * math.log(2 * PI)

    return L.jit(L.value_and_grad(L.edited(nll))), (L.array([0.1, 0.2, -2.0]),)


def heat_roll(L):
    """Explicit 1D heat equation on a periodic grid (a roll Laplacian), 400 steps by scan, the
    gradient of the final misfit w.r.t. each cell's diffusivity."""
    n, dt = 128, 0.2
    x = L.np.linspace(0.0, 1.0, n)
    u0 = L.np.exp(-100.0 * (x - 0.5) ** 2)
    target = L.np.exp(-60.0 * (x - 0.45) ** 2) * 0.8

    def misfit(kappa):
        def step(u, _):
            return u + dt * kappa * (L.np.roll(u, 1) - 2.0 * u + L.np.roll(u, -1)), None
        u, _ = L.scan(step, u0, L.np.zeros(400))
        return L.np.sum((u - target) ** 2)

    return L.jit(L.value_and_grad(L.edited(misfit))), (L.array(0.3 + 0.1 * generator().uniform(size=n)),)


# Added in session 22, written before anything was measured on them: stencils spelled with
# pad (a Dirichlet boundary) and with concatenates (periodic upwind differences). The first
# found linspace without `endpoint`.

def heat_pad2d(L):
    """2D heat equation, zero Dirichlet boundary by pad, 5-point Laplacian by slices of the
    padded grid, 60 explicit steps by scan; gradient of the final misfit w.r.t. the
    diffusivity field."""
    n, dt = 40, 0.2
    g = L.np.linspace(0.0, 1.0, n)
    X, Y = g[:, None], g[None, :]
    u0 = L.np.exp(-80.0 * ((X - 0.5) ** 2 + (Y - 0.5) ** 2))
    target = L.np.exp(-50.0 * ((X - 0.45) ** 2 + (Y - 0.55) ** 2)) * 0.7

    def misfit(kappa):
        def step(u, _):
            p = L.np.pad(u, 1)
            lap = p[2:, 1:-1] + p[:-2, 1:-1] + p[1:-1, 2:] + p[1:-1, :-2] - 4.0 * u
            return u + dt * kappa * lap, None
        u, _ = L.scan(step, u0, L.np.zeros(60))
        return L.np.sum((u - target) ** 2)

    kappa = L.array(0.2 + 0.05 * generator().uniform(size=(n, n)))
    return L.jit(L.value_and_grad(L.edited(misfit))), (kappa,)


def burgers_upwind(L):
    """1D viscous Burgers by finite differences: upwind advection and a central diffusion
    term built from concatenates (periodic), 150 steps by scan; gradient of the final energy
    w.r.t. the initial condition's Fourier amplitudes."""
    n, dt, nu = 96, 0.002, 0.01
    x = L.np.linspace(0.0, 1.0, n, endpoint=False)
    dx = 1.0 / n
    modes = L.np.stack([L.np.sin(2 * PI * (k + 1) * x) for k in range(4)])

    def energy(a):
        u0 = a @ modes + 1.0

        def step(u, _):
            left = L.np.concatenate([u[-1:], u[:-1]])
            right = L.np.concatenate([u[1:], u[:1]])
            adv = u * (u - left) / dx
            dif = nu * (right - 2.0 * u + left) / dx ** 2
            return u + dt * (dif - adv), None
        u, _ = L.scan(step, u0, L.np.zeros(150))
        return 0.5 * L.np.sum(u ** 2) * dx

    return L.jit(L.value_and_grad(L.edited(energy))), (L.array([0.3, -0.2, 0.1, 0.05]),)


# Added in session 23, written before anything was measured on them: a sine-activated PINN
# (SIREN's spelling) and a generalised linear model's likelihood (log, softplus, a sum).

def siren_helmholtz(L):
    """1D Helmholtz PINN u'' + k^2 u = f with sine activations (x -> 32 -> 32 -> 1, the first
    layer scaled by 6 as SIREN writes it), u'' by grad(grad(u)) under vmap, 400 points."""
    params = mlp(L, [1, 32, 32, 1])
    xs = L.array(generator().uniform(-1.0, 1.0, 400))

    def u(p, x):
        h = L.np.sin(6.0 * (L.np.reshape(x, (1,)) @ p[0][0] + p[0][1]))
        h = L.np.sin(h @ p[1][0] + p[1][1])
        return (h @ p[2][0] + p[2][1])[0]

    def loss(p, xs):
        uxx = L.vmap(L.grad(L.grad(u, 1), 1), in_axes=(None, 0))(p, xs)
        uu = L.vmap(u, in_axes=(None, 0))(p, xs)
        return L.np.mean((uxx + 4.0 * uu - L.np.sin(2.0 * xs)) ** 2)

    return L.jit(L.value_and_grad(L.edited(loss))), (params, xs)


def poisson_glm(L):
    """Poisson regression with a softplus link, 2000 samples x 20 features: the negative
    log-likelihood (log of the rate, log-factorials by lgamma-free constants) and its
    gradient, plus an L1-smoothed penalty log(cosh(w))."""
    rng = generator()
    X = L.array(rng.normal(size=(2000, 20)) / 4.0)
    y = L.array(rng.poisson(2.0, size=2000).astype(float))

    def nll(w):
        rate = L.np.logaddexp(X @ w, 0.0) + 1e-9
        data = L.np.mean(rate - y * L.np.log(rate))
        return data + 1e-3 * L.np.sum(L.np.log(L.np.cosh(w)))

    return L.jit(L.value_and_grad(L.edited(nll))), (L.array(0.1 * rng.normal(size=20)),)


# Added in session 30, after programs written for a check found them behind JAX: linear models
# whose products are a tall matrix times a vector, and a row times a matrix's transpose.

def least_squares_tall(L):
    """Linear least squares on 5000 samples x 37 features: the mean squared residual of
    ``X @ w`` and its gradient (``X.T @ r``)."""
    rng = generator()
    X = L.array(rng.normal(size=(5000, 37)))
    y = L.array(rng.normal(size=5000))

    def loss(w):
        return L.np.mean((X @ w - y) ** 2)

    return L.jit(L.value_and_grad(L.edited(loss))), (L.array(rng.normal(size=37)),)


def ridge_rows(L):
    """Ridge regression with the weights as a row, ``w @ X.T`` on 3000 samples x 29 features,
    its gradient a row times the matrix."""
    rng = generator()
    X = L.array(rng.normal(size=(3000, 29)))
    y = L.array(rng.normal(size=3000))

    def loss(w):
        return L.np.sum((w @ X.T - y) ** 2) + 0.1 * L.np.sum(w * w)

    return L.jit(L.value_and_grad(L.edited(loss))), (L.array(rng.normal(size=29)),)


# Added in session 31 from programs written for a check: a fixed-step integrator in a
# fori_loop under vmap (its gradient was wrong before the fix of that session), a mixture
# model's likelihood by logsumexp and an attention layer's softmax (both found behind JAX).

def vdp_rk4(L):
    """Van der Pol oscillators: RK4 in a ``fori_loop`` (300 steps) closing over ``mu``,
    vmapped over 64 initial states; the mean final energy and its gradient w.r.t. ``mu``."""
    y0 = L.array(generator().normal(size=(64, 2)))

    def final(mu, y):
        def f(y):
            return L.np.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])

        def body(i, y):
            h = 0.01
            k1 = f(y)
            k2 = f(y + 0.5 * h * k1)
            k3 = f(y + 0.5 * h * k2)
            k4 = f(y + h * k3)
            return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return L.fori_loop(0, 300, body, y)

    def energy(mu):
        ys = L.vmap(final, (None, 0))(mu, y0)
        return L.np.mean(L.np.sum(ys ** 2, axis=1))

    return L.jit(L.value_and_grad(L.edited(energy))), (L.array(1.3),)


def gmm_nll(L):
    """A diagonal Gaussian mixture (8 components in 2D) fitted to 2000 points: the negative
    log-likelihood by ``logsumexp`` over components and its gradient w.r.t. the means,
    log-scales and mixture logits."""
    rng = generator()
    X = L.array(rng.normal(size=(2000, 2)) * 2.0)

    def nll(p):
        mu, log_scale, logits = p
        z = (X[:, None, :] - mu[None, :, :]) / L.np.exp(log_scale)[None, :, :]
        log_pdf = (-0.5 * L.np.sum(z ** 2, axis=-1) - L.np.sum(log_scale, axis=-1)[None, :]
                   - math.log(2 * PI))
        log_w = logits - L.logsumexp(logits)
        return -L.np.mean(L.logsumexp(log_pdf + log_w[None, :], axis=1))

    p = (L.array(rng.normal(size=(8, 2))), L.array(0.1 * rng.normal(size=(8, 2))),
         L.array(0.1 * rng.normal(size=8)))
    return L.jit(L.value_and_grad(L.edited(nll))), (p,)


def attention(L):
    """One self-attention layer in ``einsum`` (batch 8, length 32, width 16) with a softmax
    over the keys, mean-pooled into a regression; gradient w.r.t. the four weights."""
    rng = generator()
    X = L.array(rng.normal(size=(8, 32, 16)))
    y = L.array(rng.normal(size=8))

    def loss(p):
        wq, wk, wv, w = p
        q, k, v = (L.np.einsum("bld,de->ble", X, m) for m in (wq, wk, wv))
        a = L.softmax(L.np.einsum("bqe,bke->bqk", q, k) / 4.0, axis=-1)
        pooled = L.np.mean(L.np.einsum("bqk,bke->bqe", a, v), axis=1)
        return L.np.mean((pooled @ w - y) ** 2)

    p = tuple(L.array(rng.normal(size=s) / 4.0) for s in ((16, 16), (16, 16), (16, 16), (16,)))
    return L.jit(L.value_and_grad(L.edited(loss))), (p,)


# Added in session 32 from programs written for a check: a Sinkhorn transport cost (its row
# maxima did not vectorise) and a training loop inside one jitted fori_loop (a first layer's
# weight gradient summed element by element), both found behind JAX.

def sinkhorn(L):
    """Entropic optimal transport between 48 and 64 points: 60 log-domain Sinkhorn iterations
    (``logsumexp`` along rows, then columns) in a ``fori_loop``; the transport cost and its
    gradient w.r.t. the source points."""
    rng = generator()
    x = L.array(rng.normal(size=(48, 2)))
    target = L.array(rng.normal(size=(64, 2)) + 1.0)
    eps = 0.1

    def cost(x):
        C = L.np.sum((x[:, None, :] - target[None, :, :]) ** 2, axis=-1)

        def body(i, fg):
            f, g = fg
            f = -eps * math.log(48) - eps * L.logsumexp((g[None, :] - C) / eps, axis=1)
            g = -eps * math.log(64) - eps * L.logsumexp((f[:, None] - C) / eps, axis=0)
            return f, g
        f, g = L.fori_loop(0, 60, body, (L.np.zeros(48), L.np.zeros(64)))
        return L.np.sum(L.np.exp((f[:, None] + g[None, :] - C) / eps) * C)

    return L.jit(L.value_and_grad(L.edited(cost))), (x,)


def sgd_in_loop(L):
    """50 steps of SGD with momentum for a 1 -> 32 -> 32 -> 1 tanh MLP fitted to a noisy sine,
    all in one jitted ``fori_loop`` (the gradient inside its body); the final loss."""
    rng = generator()
    x = L.array(L.np.linspace(-3.0, 3.0, 128)[:, None])
    y = L.array(L.np.sin(2.0 * x) + 0.05 * rng.normal(size=(128, 1)))
    params = mlp(L, [1, 32, 32, 1])
    loss = L.edited(lambda p: L.np.mean((forward(L, p, x, L.np.tanh) - y) ** 2))

    def train(params):
        def body(i, state):
            p, velocity = state
            velocity = L.tree_map(lambda v, g: 0.9 * v + g, velocity, L.grad(loss)(p))
            return L.tree_map(lambda w, v: w - 0.02 * v, p, velocity), velocity
        zeros = L.tree_map(L.np.zeros_like, params)
        p, _ = L.fori_loop(0, 50, body, (params, zeros))
        return loss(p), p

    return L.jit(train), (params,)


PROGRAMS = {f.__name__: f for f in (
    pinn2d_deep, pinn3d_mixed, burgers, mlp_reshape, mlp_einsum, mlp_broadcast_sum,
    rosenbrock_hessian, mlp_hvp, poisson_cg, lotka_volterra, scan_sin, per_example_grads,
    train_adam, kernel_lsq, ns_steady, gp_nll, heat_roll, heat_pad2d, burgers_upwind,
    siren_helmholtz, poisson_glm, least_squares_tall, ridge_rows, vdp_rk4, gmm_nll, attention,
    sinkhorn, sgd_in_loop)}


# -- measuring ------------------------------------------------------------------------------------

class _Case:
    def __init__(self, fn, args, block):
        self.fn, self.args, self.block = fn, args, block


def child(impl, program, phase):
    """One (library, program, phase) in this process: the first call, and the step when warm."""
    import time

    t0 = time.perf_counter()
    lib = LIBRARIES[impl]()
    lib.edit = phase == "edit"
    fn, args = PROGRAMS[program](lib)
    t1 = time.perf_counter()
    out = lib.block(fn(*args))
    t2 = time.perf_counter()
    result = {"setup": t1 - t0, "first_call": t2 - t1, "summary": summary(lib, out)}
    if phase == "warm":
        result["step"] = run.steady(_Case(fn, args, lib.block))
    return result


def summary(lib, out):
    """A few numbers of the result, to check that both libraries computed the same."""
    import numpy as np

    if lib.name == "jax":
        leaves = lib.jax.tree_util.tree_leaves(out)
    else:
        leaves = lib.qb.tree.leaves(out)
    flat = np.concatenate([np.ravel(np.asarray(x, dtype=np.float64)) for x in leaves])
    return [float(flat.sum()), float(np.abs(flat).max())]


def measure(program, impls, timeout):
    results = {}
    with contextlib.ExitStack() as stack:
        caches = {impl: stack.enter_context(tempfile.TemporaryDirectory(
            prefix=f"qb-corpus-{program}-{impl}-")) for impl in impls}
        for impl in impls:
            cache = caches[impl]
            run.prime(__file__, (impl, program, "cold"), timeout)
            cold = run.spawn(__file__, (impl, program, "cold"), cache, timeout)
            warm = (run.spawn(__file__, (impl, program, "warm"), cache, timeout)
                    if "error" not in cold else cold)
            # the program with another loss term, its original's entries in the cache
            edit = (run.spawn(__file__, (impl, program, "edit"), cache, timeout)
                    if "error" not in cold else cold)
            results[impl] = {"cold": cold, "warm": warm, "edit": edit}
        # the steps again, the libraries taking turns: this machine's speed drifts over the
        # seconds between one library's step and the other's; each keeps its faster one
        for impl in impls:
            warm = results[impl]["warm"]
            if "step" in warm:
                again = run.spawn(__file__, (impl, program, "warm"), caches[impl], timeout)
                warm["steps"] = [warm["step"], again.get("step")]
                warm["step"] = min(t for t in warm["steps"] if t is not None)
    return results


def _get(results, impl, phase, key):
    return results.get(impl, {}).get(phase, {}).get(key)


def table(all_results, impls):
    columns = [("cold", "first_call"), ("warm", "first_call"), ("edit", "first_call"),
               ("warm", "step")]
    names = ["cold", "warm", "edit", "step"]
    head = ["program"] + [f"{impl} {name}" for name in names for impl in impls]
    head += [f"{impl} edit/cold" for impl in impls]
    if len(impls) == 2:
        head += ["cold ratio", "warm ratio", "edit ratio", "step ratio", "agree"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    logs = {c: [] for c in columns}
    for program, results in all_results.items():
        row = [program]
        for phase, key in columns:
            row += [run.fmt_time(_get(results, impl, phase, key)) for impl in impls]
        for impl in impls:
            edit, cold = (_get(results, impl, phase, "first_call") for phase in ("edit", "cold"))
            row.append(f"{edit / cold:.2f}" if edit and cold else "n/a")
            if edit and cold:
                logs.setdefault(impl, []).append(math.log(edit / cold))
        if len(impls) == 2:
            for column in columns:
                a, b = (_get(results, impl, *column) for impl in impls)
                if a and b:
                    logs[column].append(math.log(a / b))
                row.append(f"{a / b:.2f}" if a and b else "n/a")
            sa, sb = (_get(results, impl, "cold", "summary") for impl in impls)
            row.append("yes" if sa and sb and all(
                math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9) for x, y in zip(sa, sb)) else "NO")
        lines.append(" | ".join(row))
    mean = lambda v: f"{math.exp(sum(v) / len(v)):.2f}" if v else "n/a"  # noqa: E731
    edits = [mean(logs.get(impl, [])) for impl in impls]
    ratios = [mean(logs[c]) for c in columns] + [""] if len(impls) == 2 else []
    lines.append(" | ".join(["geometric mean"] + [""] * (len(columns) * len(impls))
                            + edits + ratios))
    return "\n".join(lines + run.failures(all_results))


def main(argv=None):
    parser = run.program_parser(__doc__.splitlines()[0], PROGRAMS)
    args = parser.parse_args(argv)
    if args.child:
        return run.report(child, args.child)
    impls = [i for i in args.impls.split(",") if i != "jax" or run.importable("jax")]
    unknown = [p for p in args.programs if p not in PROGRAMS]
    if unknown:
        parser.error(f"unknown programs {unknown}; choose from {list(PROGRAMS)}")
    all_results = {}
    for program in args.programs:
        all_results[program] = measure(program, impls, args.timeout)
        print(f"{program}: done", file=sys.stderr, flush=True)
    print(f"load average before: {os.getloadavg()[0]:.2f}; cores: {os.cpu_count()}")
    print(table(all_results, impls))
    if args.json:
        run.save_json(args.json, all_results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
