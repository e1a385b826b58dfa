"""The benchmark problems, written once per implementation (Quabla, JAX, hand-written Numba).

Nothing heavy is imported at module level: ``run.py`` times ``import_library`` separately so
first-call times can be reported with and without the import. Each ``build_<impl>(problem)``
returns a ``Case``: the function to time, its arguments, how to block on its result, and a
summary of the result (floats) that the runner compares across implementations.
"""

import math
import os

PI = math.pi
N_POINTS = 8          # README PINN collocation points
MLP_POINTS = 1024     # MLP PINN collocation points
MLP_WIDTH = 32        # hidden width of the MLP PINN (benchmarks/compile.py also measures 64)
LJ_PARTICLES = {"lj": 1024, "lj_8192": 8192}  # Lennard-Jones: particles, all pairs
# training problems: which loss they train, and Adam's learning rate for it
TRAINING = {"train_pinn": "pinn_vmap", "train_pinn_trainer": "pinn_vmap",
            "train_mlp": "mlp_pinn", "train_mlp_trainer": "mlp_pinn"}
RATES = {"pinn_vmap": 0.05, "mlp_pinn": 1e-3}
SCAN_STEPS = 1000     # explicit integrator: steps of the scan
SCAN_STATES = 64      # ... and oscillators integrated at once
SCAN_DT = 0.01
DEVICE = os.environ.get("BENCH_DEVICE") or None  # Quabla's jit device (run.py --device)


class Case:
    def __init__(self, fn, args, block=lambda out: out, summary=None):
        self.fn = fn
        self.args = args
        self.block = block
        self.summary = summary or (lambda out: None)


def mlp_init():
    """Deterministic Glorot-normal parameters of the 1 -> 32 -> 32 -> 1 MLP, as NumPy arrays,
    so every implementation starts from the same values."""
    import numpy as np

    rng = np.random.default_rng(0)

    def glorot(fan_in, fan_out):
        return rng.normal(0.0, math.sqrt(2.0 / (fan_in + fan_out)), (fan_in, fan_out))

    w = MLP_WIDTH
    return {
        "W1": glorot(1, w), "b1": np.zeros(w),
        "W2": glorot(w, w), "b2": np.zeros(w),
        "W3": glorot(w, 1), "b3": np.zeros(1),
    }


def lj_positions(n):
    """``n = 2 a^3`` particles on a jittered a x a x 2a lattice of spacing 1.1 (no two closer
    than ~0.9), the same for every implementation."""
    import numpy as np

    a = round((n / 2) ** (1 / 3))
    side = np.arange(2 * a) * 1.1
    grid = np.stack(np.meshgrid(side[:a], side[:a], side, indexing="ij"), -1).reshape(-1, 3)
    rng = np.random.default_rng(0)
    return grid[:n] + rng.uniform(-0.05, 0.05, (n, 3))


def lj_energy(np_like, x):
    """Lennard-Jones energy (epsilon = sigma = 1) of all pairs, written with broadcasting for
    any NumPy-like module (``quabla`` or ``jax.numpy``); value_and_grad gives the forces."""
    n = x.shape[0]
    eye = np_like.eye(n)
    d = np_like.expand_dims(x, 1) - np_like.expand_dims(x, 0)
    r2 = np_like.sum(d * d, axis=-1) + eye          # 1 on the diagonal: no division by zero
    inv6 = (1.0 / r2) ** 3
    return 2.0 * np_like.sum((inv6 * inv6 - inv6) * (1.0 - eye))


def oscillator_start():
    """Initial displacements of the 64 damped nonlinear oscillators (deterministic)."""
    import numpy as np

    return np.linspace(-1.0, 1.0, SCAN_STATES)


def oscillator_loss(np_like, scan, theta, x0):
    """Energy-like loss of 64 oscillators x'' = -k x - c x' - a x^3 (theta = [k, c, a])
    integrated by 1000 semi-implicit Euler steps with ``scan(step, init) -> (carry, ys)``:
    the time integral of sum(x^2) plus the final sum(x^2 + v^2)."""
    k, c, a = theta[0], theta[1], theta[2]

    def step(carry):
        x, v = carry
        v = v + SCAN_DT * (-k * x - c * v - a * x * x * x)
        x = x + SCAN_DT * v
        return (x, v), np_like.sum(x * x)

    (x, v), e = scan(step, (x0, 0.0 * x0))
    return SCAN_DT * np_like.sum(e) + np_like.sum(x * x + v * v)


def _tree_summary(value, grads, leaves):
    import numpy as np

    return [float(np.asarray(value))] + [float(np.sum(np.asarray(g))) for g in leaves(grads)]


# -- Quabla ---------------------------------------------------------------------------------------

def import_quabla():
    import quabla  # noqa: F401


def quabla_loss(problem):
    """``(loss, params, data)`` of the README PINN (its vmap form) or the MLP PINN."""
    import quabla as qb

    if problem in ("pinn", "pinn_vmap"):
        def u(x, w):
            return qb.sin(x * w)

        if problem == "pinn":   # vectorized form, no vmap (spec 000 "S3 as landed")
            u_xx = qb.grad(lambda x, w: qb.sum(qb.grad(lambda x, w: qb.sum(u(x, w)))(x, w)))
        else:                   # the README form (spec 000 §2.4)
            u_xx = qb.vmap(qb.grad(qb.grad(u)), in_axes=(0, None))

        def loss(w, x):
            return qb.mean((u_xx(x, w) + PI**2 * qb.sin(PI * x)) ** 2)

        return loss, qb.array(2.5), (qb.linspace(0.05, 0.95, N_POINTS),)

    def net(p, t):
        h = qb.tanh(t * p["W1"][0] + p["b1"])
        h = qb.tanh(h @ p["W2"] + p["b2"])
        return (h @ p["W3"] + p["b3"])[0]

    def loss(p, x):
        u_xx = qb.vmap(qb.grad(qb.grad(lambda t: net(p, t))))   # closes over p
        return qb.mean((u_xx(x) + PI**2 * qb.sin(PI * x)) ** 2)

    params = {k: qb.array(v) for k, v in mlp_init().items()}
    return loss, params, (qb.linspace(0.0, 1.0, MLP_POINTS),)


def build_quabla(problem):
    import quabla as qb

    if problem in TRAINING:
        loss, params, data = quabla_loss(TRAINING[problem])
        opt = qb.optim.Adam(learning_rate=RATES[TRAINING[problem]])
        if problem.endswith("_trainer"):   # (b) the device-resident Trainer
            trainers = []

            def train_step():   # the first call builds (traces and compiles) the Trainer
                if not trainers:
                    trainers.append(qb.optim.Trainer(loss, params, opt, *data))
                trainers[0].step()

            return Case(train_step, (), summary=lambda out: [trainers[0].loss().item()])
        step = qb.jit(qb.value_and_grad(loss))   # (a) the README loop as written
        state = [params, opt.init(params)]

        def train():
            value, g = step(state[0], *data)
            state[0], state[1] = opt.update(state[0], g, state[1])
            return value

        return Case(train, (), summary=lambda out: [out.item()])

    if problem == "scan_oscillator":
        def scan(step, init):
            return qb.scan(lambda carry, i: step(carry), init, length=SCAN_STEPS)

        step = qb.jit(qb.value_and_grad(lambda theta, x0: oscillator_loss(qb, scan, theta, x0)),
                      device=DEVICE)
        return Case(step, (qb.array([4.0, 0.3, 1.5]), qb.array(oscillator_start())),
                    summary=lambda out: [out[0].item()] + [float(g) for g in out[1].tolist()])
    if problem in LJ_PARTICLES:
        step = qb.jit(qb.value_and_grad(lambda x: lj_energy(qb, x)), device=DEVICE)
        return Case(step, (qb.array(lj_positions(LJ_PARTICLES[problem])),),
                    summary=lambda out: [out[0].item(), float(qb.sum(out[1] * out[1]).item())])
    loss, params, data = quabla_loss(problem)
    step = qb.jit(qb.value_and_grad(loss), device=DEVICE)
    if problem == "mlp_pinn":
        return Case(step, (params, *data),
                    summary=lambda out: _tree_summary(out[0], out[1], qb.tree.leaves))
    return Case(step, (params, *data), summary=lambda out: [out[0].item(), out[1].item()])


# -- JAX ------------------------------------------------------------------------------------------

def import_jax():
    import os

    import jax

    jax.config.update("jax_enable_x64", True)
    cache = os.environ.get("BENCH_JAX_CACHE_DIR")
    if cache:  # JAX's persistent compilation cache: the peer of Quabla's on-disk cache
        for name, value in (("jax_compilation_cache_dir", cache),
                            ("jax_persistent_cache_min_compile_time_secs", 0.0),
                            ("jax_persistent_cache_min_entry_size_bytes", -1)):
            try:
                jax.config.update(name, value)
            except Exception:  # older JAX: option missing
                pass
    import jax.numpy  # noqa: F401


def jax_loss(problem):
    """``(loss, params, data)``: the same problems as ``quabla_loss``."""
    import jax
    import jax.numpy as jnp

    if problem in ("pinn", "pinn_vmap"):
        def u(x, w):
            return jnp.sin(x * w)

        if problem == "pinn":
            u_xx = jax.grad(lambda x, w: jnp.sum(jax.grad(lambda x, w: jnp.sum(u(x, w)))(x, w)))
        else:
            u_xx = jax.vmap(jax.grad(jax.grad(u)), in_axes=(0, None))

        def loss(w, x):
            return jnp.mean((u_xx(x, w) + PI**2 * jnp.sin(PI * x)) ** 2)

        return loss, jnp.asarray(2.5), (jnp.linspace(0.05, 0.95, N_POINTS),)

    def net(p, t):
        h = jnp.tanh(t * p["W1"][0] + p["b1"])
        h = jnp.tanh(h @ p["W2"] + p["b2"])
        return (h @ p["W3"] + p["b3"])[0]

    def loss(p, x):
        u_xx = jax.vmap(jax.grad(jax.grad(lambda t: net(p, t))))
        return jnp.mean((u_xx(x) + PI**2 * jnp.sin(PI * x)) ** 2)

    params = {k: jnp.asarray(v) for k, v in mlp_init().items()}
    return loss, params, (jnp.linspace(0.0, 1.0, MLP_POINTS),)


def _jax_train_step(loss, lr, b1=0.9, b2=0.999, eps=1e-8):
    """(c): value_and_grad and Adam (float64 moments) in one ``jax.jit``."""
    import jax
    import jax.numpy as jnp

    tree_map = jax.tree_util.tree_map

    @jax.jit
    def train(params, m, v, t, *data):
        value, g = jax.value_and_grad(loss)(params, *data)
        t = t + 1.0
        m = tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        params = tree_map(lambda p, m, v: p - lr * (m / (1 - b1 ** t))
                          / (jnp.sqrt(v / (1 - b2 ** t)) + eps), params, m, v)
        return params, m, v, t, value

    return train


def build_jax(problem):
    import jax
    import jax.numpy as jnp

    def block(out):
        return jax.block_until_ready(out)

    if problem in TRAINING:
        loss, params, data = jax_loss(TRAINING[problem])
        train = _jax_train_step(loss, RATES[TRAINING[problem]])
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        state = [params, zeros, zeros, jnp.asarray(0.0)]

        def step():
            out = train(*state, *data)
            state[:] = out[:4]
            return out[4]

        return Case(step, (), block, lambda out: [float(out)])

    if problem == "scan_oscillator":
        def scan(step, init):
            return jax.lax.scan(lambda carry, _: step(carry), init, None, length=SCAN_STEPS)

        step = jax.jit(jax.value_and_grad(lambda theta, x0: oscillator_loss(jnp, scan, theta, x0)))
        return Case(step, (jnp.asarray([4.0, 0.3, 1.5]), jnp.asarray(oscillator_start())), block,
                    lambda out: [float(out[0])] + [float(g) for g in out[1]])
    if problem in LJ_PARTICLES:
        step = jax.jit(jax.value_and_grad(lambda x: lj_energy(jnp, x)))
        return Case(step, (jnp.asarray(lj_positions(LJ_PARTICLES[problem])),), block,
                    lambda out: [float(out[0]), float(jnp.sum(out[1] * out[1]))])
    loss, params, data = jax_loss(problem)
    step = jax.jit(jax.value_and_grad(loss))
    if problem == "mlp_pinn":
        return Case(step, (params, *data), block,
                    lambda out: _tree_summary(out[0], out[1], jax.tree_util.tree_leaves))
    return Case(step, (params, *data), block, lambda out: [float(out[0]), float(out[1])])


# -- hand-written Numba ---------------------------------------------------------------------------

def import_numba():
    import numba  # noqa: F401


def build_numba(problem):
    if problem in ("pinn", "pinn_vmap"):
        import numpy as np

        from kernels import readme_loss_and_grad

        args = (2.5, np.linspace(0.05, 0.95, N_POINTS))
        return Case(readme_loss_and_grad, args, summary=lambda out: [out[0], out[1]])
    if problem in LJ_PARTICLES:
        import numpy as np

        from kernels import lj_energy_and_forces

        return Case(lj_energy_and_forces, (lj_positions(LJ_PARTICLES[problem]),),
                    summary=lambda out: [out[0], float(np.sum(out[1] * out[1]))])
    return None  # no hand-written kernel for this problem


IMPLS = {
    "quabla": (import_quabla, build_quabla),
    "jax": (import_jax, build_jax),
    "numba": (import_numba, build_numba),
}
