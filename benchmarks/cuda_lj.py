"""Lennard-Jones energy and forces on a CUDA device: ``qb.jit(qb.value_and_grad(energy),
device="cuda")`` against a hand-written numba.cuda kernel of the same problem.

The energy sums all pairs by broadcasting (n x n x 3 differences, no cut-off); the forces are
minus its gradient. The hand-written kernel gives each particle one thread that loops over all
others. Printed per size: the time per call of each, their ratio, the bytes Quabla's kernels
move per call (estimated from the arrays each kernel names, ``CudaExecutable.traffic``) and the
GB/s that makes, next to the device's memory bandwidth (from its clock and bus width), and
whether the two agree.

    python benchmarks/cuda_lj.py               # 1024 and 8192 particles on the GPU
    python benchmarks/cuda_lj.py --tiny        # 12 particles, under NUMBA_ENABLE_CUDASIM=1
                                               # unless that variable is set already
    python benchmarks/cuda_lj.py --first-call  # this process's first call of 1024 particles:
                                               # cold, then warm from the compile cache when
                                               # run again
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def energy(x):
    """Sum over pairs of 4 (r^-12 - r^-6): half the sum over ordered pairs. The identity added
    to the squared distances makes each self-pair term 4 (1 - 1) = 0, with zero gradient."""
    import quabla as qb

    d = x[:, None, :] - x[None, :, :]
    r2 = qb.sum(d * d, axis=-1) + qb.eye(x.shape[0], dtype=x.dtype)
    inv6 = 1.0 / r2 ** 3
    return 2.0 * qb.sum(inv6 * inv6 - inv6)


def particles(n, dtype, seed=0):
    """``n`` points near a cubic lattice of spacing 1.2 (no two closer than ~1)."""
    side = int(np.ceil(n ** (1 / 3)))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
    jitter = np.random.default_rng(seed).uniform(-0.05, 0.05, (n, 3))
    return ((grid + jitter) * 1.2).astype(dtype)


def hand_kernel():
    global cuda  # a global of the kernel, as the simulator needs (it swaps the kernel's globals)
    from numba import cuda

    @cuda.jit
    def lennard_jones(x, e, f):
        i = cuda.grid(1)
        n = x.shape[0]
        if i >= n:
            return
        xi, yi, zi = x[i, 0], x[i, 1], x[i, 2]
        ei = x[i, 0] * 0
        fx, fy, fz = ei, ei, ei
        for j in range(n):
            if j != i:
                dx, dy, dz = xi - x[j, 0], yi - x[j, 1], zi - x[j, 2]
                r2 = dx * dx + dy * dy + dz * dz
                inv6 = 1 / (r2 * r2 * r2)
                ei += 2 * (inv6 * inv6 - inv6)
                s = 24 * (2 * inv6 * inv6 - inv6) / r2
                fx += s * dx
                fy += s * dy
                fz += s * dz
        e[i] = ei
        f[i, 0] = fx
        f[i, 1] = fy
        f[i, 2] = fz

    def run(x):
        d_x = cuda.to_device(x)
        e = cuda.device_array(x.shape[0], x.dtype)
        f = cuda.device_array(x.shape, x.dtype)
        threads = 8 if _simulated() else 128
        lennard_jones[-(-x.shape[0] // threads), threads](d_x, e, f)
        return e.copy_to_host().sum(dtype=np.float64), f.copy_to_host()
    return run


def _simulated():
    import numba

    return bool(numba.config.ENABLE_CUDASIM)


def peak_bandwidth():
    """Bytes/s of the device's memory (2 transfers per clock over its bus), or None."""
    if _simulated():
        return None
    from numba import cuda

    device = cuda.get_current_device()
    try:
        clock_khz = device.MEMORY_CLOCK_RATE
        bus_bits = device.GLOBAL_MEMORY_BUS_WIDTH
    except AttributeError:
        return None
    return 2 * clock_khz * 1e3 * bus_bits / 8


def timed(fn, arg, repeats):
    fn(arg)  # compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(arg)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(n, dtype, repeats):
    import quabla as qb
    from quabla.lower import compile_graph as lower_compile

    x = particles(n, dtype)
    jitted = qb.jit(qb.value_and_grad(energy), device="cuda")
    value, grad = jitted(x)
    executable = lower_compile(jitted.lower(x).graph, "cuda")
    hand = hand_kernel()
    e_hand, f_hand = hand(x)
    tol = 2e-3 if dtype == np.float32 else 1e-9
    agree = (np.isclose(float(value), e_hand, rtol=tol)
             and np.allclose(-np.asarray(grad), f_hand, rtol=tol, atol=tol * np.abs(f_hand).max()))
    t_qb = timed(lambda a: jitted(a), x, repeats)
    t_hand = timed(hand, x, repeats)
    return dict(n=n, t_qb=t_qb, t_hand=t_hand, traffic=executable.traffic, agree=bool(agree))


def first_call(n, dtype):
    """Prints the seconds of ``import quabla`` and of the first call in this process."""
    x = particles(n, dtype)
    start = time.perf_counter()
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import quabla as qb

    imported = time.perf_counter()
    qb.jit(qb.value_and_grad(energy), device="cuda")(x)
    done = time.perf_counter()
    print(f"n={n}: import {imported - start:.3f} s, first call {done - imported:.3f} s")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="12 particles, once (under the "
                        "simulator unless NUMBA_ENABLE_CUDASIM is set)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 8192])
    parser.add_argument("--float64", action="store_true")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--first-call", action="store_true", help="time the import and the "
                        "first call (compiling, or loading the cached kernels) of the first size")
    args = parser.parse_args(argv)
    if args.first_call:
        return first_call(args.sizes[0], np.float64 if args.float64 else np.float32)
    if args.tiny:
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # read when Numba is first imported
        args.sizes, args.repeats = [12], 1
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    dtype = np.float64 if args.float64 else np.float32
    peak = peak_bandwidth()
    print(f"device bandwidth: {peak / 1e9:.0f} GB/s" if peak else "device bandwidth: unknown")
    print(f"{'n':>6} {'quabla ms':>10} {'hand ms':>9} {'ratio':>6} {'MB/call':>8} "
          f"{'GB/s':>7} {'of peak':>7}  agree")
    results = []
    for n in args.sizes:
        r = measure(n, dtype, args.repeats)
        results.append(r)
        rate = r["traffic"] / r["t_qb"] / 1e9
        share = f"{rate * 1e9 / peak:7.1%}" if peak else f"{'-':>7}"
        print(f"{n:6d} {r['t_qb'] * 1e3:10.3f} {r['t_hand'] * 1e3:9.3f} "
              f"{r['t_qb'] / r['t_hand']:6.1f} {r['traffic'] / 1e6:8.1f} {rate:7.2f} {share}  "
              f"{r['agree']}")
    return 0 if all(r["agree"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
