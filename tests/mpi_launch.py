"""How the tests start MPI jobs: ``mpiexec`` (the ``mpich`` wheel's, beside this Python, or
one on PATH) running ``python -m mpi4py`` on this checkout's quabla, with one Quabla and BLAS
thread per rank and the caller's compile caches. ``unavailable()`` says why MPI cannot run
here (the tests skip with that reason), or None."""

import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"


def mpiexec():
    beside = pathlib.Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def unavailable():
    """Why an MPI job cannot be launched here, or None."""
    try:
        import mpi4py  # noqa: F401  (the package only: MPI is not initialized in this process)
    except ImportError:
        return "mpi4py is not installed (pip install 'quabla[mpi]')"
    if mpiexec() is None:
        return "no mpiexec (pip install mpich, or a site MPI)"
    return None


def environment(**extra):
    env = dict(os.environ)
    env.pop("QUABLA_DISTRIBUTED", None)
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]),
        QUABLA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
        # Open MPI refuses root without these (CI runs as root); MPICH ignores them
        OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        # more ranks than cores: MPICH allows it as is, Open MPI with this
        OMPI_MCA_rmaps_base_oversubscribe="1",
        **extra)
    return env


def launch(n, script, *args, timeout=600):
    """``mpiexec -n n python -m mpi4py script *args``: the finished ``CompletedProcess``
    (``subprocess.TimeoutExpired`` if it runs past ``timeout`` seconds)."""
    command = [mpiexec(), "-n", str(n), sys.executable, "-m", "mpi4py", str(script),
               *map(str, args)]
    return subprocess.run(command, env=environment(), capture_output=True, text=True,
                          timeout=timeout, cwd=str(ROOT))
