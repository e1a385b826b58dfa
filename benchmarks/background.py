"""Background against blocking compilation: the MLP PINN's first call and 300 Adam steps.

    python benchmarks/background.py [--steps 300]

Each mode runs in a fresh process with an empty compile cache: ``QUABLA_COMPILE=eager`` (the
first call compiles before it returns) and ``QUABLA_COMPILE=background`` (calls interpret until
a worker process has compiled the program). The training loop is the README's, as
``run.py train_mlp`` writes it: ``jit(value_and_grad(loss))`` and ``opt.update``, both programs
in the chosen mode. "after tracing" is the first call's time from the end of its trace (the
``traced`` log record) to its return. ``--blas-threads 1`` pins NumPy's BLAS threads, as in
``run.py``: the interpreter's products run there, and on a 2-core machine two BLAS threads and
the worker oversubscribe the cores (both the interpreted steps and the compile slow down).
Nothing here asserts on time.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _child(steps):
    import logging

    sys.path.insert(0, HERE)
    from problems import RATES, quabla_loss

    import quabla as qb

    traced = []

    class Marks(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("traced"):
                traced.append(record.created)
            elif "native code" in record.getMessage():
                switches.append(time.time())

    switches = []
    logger = logging.getLogger("quabla")
    logger.addHandler(Marks())
    logger.setLevel(logging.INFO)
    loss, params, data = quabla_loss("mlp_pinn")
    step = qb.jit(qb.value_and_grad(loss))
    opt = qb.optim.Adam(learning_rate=RATES["mlp_pinn"])
    state = opt.init(params)
    start = time.time()
    value, grads = step(params, *data)
    first = time.time()
    params, state = opt.update(params, grads, state)
    for _ in range(steps - 1):
        value, grads = step(params, *data)
        params, state = opt.update(params, grads, state)
    end = time.time()
    return {"first": first - start, "after_trace": first - traced[0],
            "steps": end - start, "switches": [s - start for s in switches],
            "loss": float(value.item())}


def run(mode, steps):
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, QUABLA_COMPILE=mode, QUABLA_CACHE_DIR=os.path.join(tmp, "qb"),
                   NUMBA_CACHE_DIR=os.path.join(tmp, "nb"))
        env.pop("QUABLA_LOG_COMPILES", None)
        out = subprocess.run([sys.executable, __file__, "--child", str(steps)], env=env,
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout.splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--blas-threads", type=int)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child)))
        return
    if args.blas_threads:
        for name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
            os.environ[name] = str(args.blas_threads)
    print(f"MLP PINN (H=32, 1024 points), cold cache, {args.steps} Adam steps, BLAS threads: "
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'default')}")
    print(f"{'mode':<12}{'first call':>12}{'after trace':>13}{'all steps':>11}  final loss")
    for mode in ("eager", "background"):
        r = run(mode, args.steps)
        switched = ", ".join(f"{s:.2f} s" for s in r["switches"])
        print(f"{mode:<12}{r['first']:>10.3f} s{r['after_trace']:>11.3f} s{r['steps']:>9.2f} s"
              f"  {r['loss']:.6g}" + (f"  (native from {switched})" if switched else ""))


if __name__ == "__main__":
    main()
