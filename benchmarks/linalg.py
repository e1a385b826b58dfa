"""eigh, svd and slogdet of 64x64 and 256x256 matrices, values and value-and-gradient, beside
NumPy/SciPy (LAPACK) and JAX's CPU step (when installed), in one run:

    python benchmarks/linalg.py [--repeat N]

Prints the median time of each in milliseconds. With SciPy installed Quabla's CPU back end calls
its LAPACK for these sizes (lowering/numba_cpu/lapack.py); QUABLA_BLAS=0 measures the
hand-written kernels instead. docs/linear-algebra.md has the numbers and what they mean."""

import argparse
import statistics
import time

import numpy as np

import quabla as qb


def _median_ms(fn, repeat):
    fn()  # compile / warm up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _losses(xp, la):
    return {
        "eigh": (lambda a: la.eigh(a), lambda a: xp.sum(la.eigh(a)[0] ** 2) + xp.sum(la.eigh(a)[1] ** 4)),
        "svd": (lambda a: la.svd(a, full_matrices=False),
                lambda a: xp.sum(la.svd(a, full_matrices=False)[1] ** 2)
                + xp.sum(la.svd(a, full_matrices=False)[0] ** 4)),
        "slogdet": (lambda a: la.slogdet(a), lambda a: la.slogdet(a)[1]),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="*", default=[64, 256])
    args = parser.parse_args()
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_platforms", "cpu")
        jnp = jax.numpy
    except ImportError:
        jax = None
    rng = np.random.default_rng(0)
    numpy_fns = {"eigh": np.linalg.eigh, "svd": lambda a: np.linalg.svd(a, full_matrices=False),
                 "slogdet": np.linalg.slogdet}
    print(f"{'op':8} {'n':>4} {'numpy':>9} {'quabla':>9} {'jax':>9} | {'quabla v+g':>10} {'jax v+g':>9}  (ms)")
    for n in args.sizes:
        a = rng.standard_normal((n, n))
        a = a + a.T + n * np.eye(n)
        qa = qb.array(a)
        for name, (value, loss) in _losses(qb, qb.linalg).items():
            t_np = _median_ms(lambda: numpy_fns[name](a), args.repeat)
            qv = qb.jit(value)
            qg = qb.jit(qb.value_and_grad(loss))
            t_q = _median_ms(lambda: qv(qa), args.repeat)
            t_qg = _median_ms(lambda: qg(qa), args.repeat)
            t_j = t_jg = float("nan")
            if jax is not None:
                jv, jl = _losses(jnp, jnp.linalg)[name]
                jv, jg = jax.jit(jv), jax.jit(jax.value_and_grad(jl))
                ja = jnp.asarray(a)
                t_j = _median_ms(lambda: jax.block_until_ready(jv(ja)), args.repeat)
                t_jg = _median_ms(lambda: jax.block_until_ready(jg(ja)), args.repeat)
            print(f"{name:8} {n:>4} {t_np:9.2f} {t_q:9.2f} {t_j:9.2f} | {t_qg:10.2f} {t_jg:9.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
