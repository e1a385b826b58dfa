"""The numba.cuda back end with its real compiler, no GPU needed: every kernel generated for the
device parity corpus (and for programs taking the paths that only a GPU's launch configuration
reaches) is compiled to PTX by NVVM for its recorded signature, as a GPU would compile it. The
simulator runs kernels as Python and types nothing, so this is what catches a kernel that
numba.cuda cannot type or lower, or one a GPU would refuse (too much shared memory). That
launches match the signatures is checked on a GPU (test_device_cuda's ``_compiled_once``).

Also the kernel cache (lowering/numba_cuda/compiled.py) on a stand-in device: a cold ``bind``
compiles and stores every kernel, a warm one rebuilds them from their entries without
compiling, an entry that fails verification is compiled again, and another program compiles
only the kernels it does not share.

These run where numba-cuda's compiler libraries are installed (the 'test' extra installs NVVM
and NVRTC) and numba.cuda is not its simulator in this process.
"""

import os
import re
import sys

import numpy as np
import pytest

import cuda_runner

pytestmark = pytest.mark.cuda
cuda_runner.require_numba_cuda()

import quabla as qb  # noqa: E402
import device_cases  # noqa: E402
from lowering.numba_cuda import compiled  # noqa: E402
from lowering.numba_cuda.codegen import Launch, generate  # noqa: E402

CC = (9, 0)  # what the PTX is compiled for (an H100/H200); NVVM needs no such device


@pytest.fixture(scope="module", autouse=True)
def compiler():
    """Skips unless numba.cuda can compile here: not its simulator, and NVVM and NVRTC found."""
    import numba

    if numba.config.ENABLE_CUDASIM:
        pytest.skip("numba.cuda is its simulator in this process: it compiles nothing")
    from cuda.pathfinder import DynamicLibNotFoundError
    from numba import cuda
    from numba.cuda.cudadrv.error import NvrtcSupportError, NvvmSupportError

    try:
        cuda.compile_ptx(lambda a: None, "void(float64[::1])", cc=CC)
    except (DynamicLibNotFoundError, NvvmSupportError, NvrtcSupportError) as e:
        pytest.skip(f"numba-cuda's compiler libraries are not installed here: {e}")


def _kernels(f, *args, launch=Launch()):
    """``(generated module, {kernel: PTX})`` of ``jit(f)`` for ``args``."""
    generated = generate(qb.jit(f).lower(*args).graph, launch)
    return generated, compiled.ptx(generated.source, generated.signatures, CC)


_COMPILED = set()  # kernels compiled to PTX by this process, as _kernel_texts names them


def _kernel_texts(generated):
    """``{kernel: (imports, text with its name replaced, signature)}``: what a kernel's PTX
    depends on (kernels call only the fixed runtime module's helpers)."""
    header, *kernels = re.split(r"(?m)^@cuda\.jit\n", generated.source)
    texts = {}
    for text in kernels:
        name = re.match(r"def (\w+)\(", text).group(1)
        body = text.split("\n\n\n")[0]
        texts[name] = (header, re.sub(rf"\b{name}\b", "kernel", body),
                       str(generated.signatures[name]))
    return texts


def _new_kernels(f, *args):
    """``_kernels`` of the kernels not compiled before in this process: the corpus's cases share
    a fifth of their kernels, and the same text and signature compile to the same PTX."""
    generated = generate(qb.jit(f).lower(*args).graph, Launch())
    texts = _kernel_texts(generated)
    assert texts.keys() == generated.signatures.keys()
    new = {k: sig for k, sig in generated.signatures.items() if texts[k] not in _COMPILED}
    ptx = compiled.ptx(generated.source, new, CC) if new else {}
    _COMPILED.update(texts[k] for k in new)
    return new, ptx


def _check(generated, ptx):
    assert ptx
    _check_kernels(generated.signatures, ptx)


def _check_kernels(signatures, ptx):
    assert ptx.keys() == signatures.keys()
    for text in ptx.values():
        assert f".target sm_{CC[0]}{CC[1]}" in text
        assert text.count(".entry ") == 1


@pytest.mark.parametrize("case", device_cases.cases(), ids=lambda case: case.name)
def test_corpus_kernels_compile(case):
    _check_kernels(*_new_kernels(case.fn, *case.args))


def _energy(x):
    bench = os.path.join(cuda_runner.ROOT, "benchmarks")
    if bench not in sys.path:
        sys.path.append(bench)
    from cuda_lj import energy

    return energy(x)


def _fused_programs():
    import test_cuda_fused_loops as fused

    return [fused.fori_program, fused.scan_program, fused.grad_program]


def test_gpu_launch_paths_compile():
    """What only a GPU's launch configuration reaches: a sum longer than its block (partials,
    then a second kernel), a product in cuBLAS's arrangement (the operand copies), float64
    throughout, and the fused loops of both modes."""
    rng = np.random.default_rng(0)
    long = rng.normal(size=(3, 1000))
    a, b = rng.normal(size=(40, 50)), rng.normal(size=(50, 30))
    x32 = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    programs = [
        (lambda x: (qb.sum(x), qb.max(x, axis=1), qb.sum(x * x, axis=0)), (long,), Launch()),
        (lambda a, b: qb.sin(a.T).T @ b + 1.0, (a, b), Launch(cublas=True)),
        (qb.value_and_grad(_energy), (rng.uniform(0, 3, (16, 3)),), Launch()),
    ] + [(f, (x32, x32 + 1.5), Launch()) for f in _fused_programs()]
    for f, args, launch in programs:
        generated, ptx = _kernels(f, *args, launch=launch)
        _check(generated, ptx)
        assert ("_gemm(" in generated.source) == launch.cublas


def test_many_reductions_fit_a_block_shared_memory():
    """Thirty sums over one axis are one kernel's accumulators: they share one shared array,
    so the kernel stays within a block's 48 KiB of static shared memory (a GPU refuses more)."""
    f = lambda x: [qb.sum(qb.sin(x * (k + 1.0)), axis=1) for k in range(30)]
    generated, ptx = _kernels(f, np.ones((4, 5000)))
    _check(generated, ptx)
    for text in ptx.values():
        shared = sum(map(int, re.findall(r"\.shared \.align \d+ \.b8 \S+\[(\d+)\]", text)))
        assert shared <= 48 * 1024


def test_kernels_equal_up_to_names_are_one_kernel():
    """A PINN's gradient repeats the same elementwise steps on different values: those
    launches share one kernel (compiled once), and no two kernels of a module are the same."""
    case = {case.name: case for case in device_cases.cases()}["pinn-value_and_grad"]
    generated = generate(qb.jit(case.fn).lower(*case.args).graph, Launch())
    launches = re.findall(r"^ +(k\d+)\[", generated.source, re.M)
    assert set(launches) == generated.signatures.keys()
    assert len(launches) > len(generated.signatures)
    bodies = re.findall(r"^@cuda\.jit\ndef k\d+(\(.*?)(?=^@cuda|^def )", generated.source,
                        re.M | re.S)
    kernels = list(zip(bodies, generated.signatures.values()))  # both in the order defined
    assert len(bodies) == len(generated.signatures) == len(set(kernels))


def test_an_element_read_several_times_is_loaded_once():
    generated, ptx = _kernels(lambda x, y: x * x * y[::-1] + qb.sin(x) * y[::-1],
                              np.ones(9), np.ones(9))
    _check(generated, ptx)
    assert generated.source.count("x0[i0]") == 1 and "m0 = x0[i0]" in generated.source
    assert generated.source.count("x1[8 - i0]") == 1  # the reversed y, once too


class _Device:
    compute_capability = CC


@pytest.fixture
def stand_in_gpu(monkeypatch, tmp_path):
    """numba-cuda compiling for a device of compute capability CC with no device present:
    only its queries of the current device, and loading a cubin onto it, are stood in for.
    Counts the kernels compiled; the cache is private to the test."""
    from numba.cuda import codegen, dispatcher

    from lowering import cache

    monkeypatch.setenv("QUABLA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_DIRS", None)
    monkeypatch.setattr(dispatcher, "get_current_device", _Device)
    monkeypatch.setattr(codegen.CUDACodeLibrary, "_ensure_cc",
                        lambda self, cc: cc or (*CC, "a"))
    monkeypatch.setattr(dispatcher._Kernel, "bind", lambda self: None)
    made = []
    init = dispatcher._Kernel.__init__

    def counted(self, py_func, *args, **options):
        made.append(py_func.__name__)
        init(self, py_func, *args, **options)
    monkeypatch.setattr(dispatcher._Kernel, "__init__", counted)
    return made


def _bound(generated):
    """``{kernel name: its one compiled kernel}`` of ``generated`` bound on the stand-in."""
    module = compiled.bind(generated.source, "quabla_cuda_test", generated.signatures,
                           generated.texts, _Device())
    kernels = {k: getattr(module, k).overloads for k in generated.signatures}
    assert all(len(overloads) == 1 for overloads in kernels.values())
    return {k: next(iter(o.values())) for k, o in kernels.items()}


def _generated(f, *args):
    return generate(qb.jit(f).lower(*args).graph, Launch())


def test_kernel_cache_round_trip(stand_in_gpu):
    from lowering import cache

    made = stand_in_gpu
    x, y = np.ones((5, 7)), np.ones((3, 7))
    generated = _generated(lambda x, y: (qb.sum(qb.exp(x) * y[0]), x @ y.T), x, y)
    names = sorted(generated.signatures)
    keys = {k: compiled.cache_key(generated.texts[k], generated.signatures[k], CC)
            for k in names}
    cold = _bound(generated)
    assert sorted(made) == names  # every kernel compiled once, eagerly
    assert cache.info()["entries"] == len(names) == len(set(keys.values()))
    warm = _bound(generated)
    assert sorted(made) == names  # nothing compiled again
    for k in names:
        assert warm[k].argument_types == cold[k].argument_types
        assert (warm[k].library.get_asm_str((*CC, "a"))
                == cold[k].library.get_asm_str((*CC, "a")))  # the stored PTX, not NVVM's again

    corrupted = names[0]
    with open(os.path.join(cache.cache_dir(), keys[corrupted] + ".o"), "r+b") as f:
        f.seek(10)
        f.write(b"\0" * 8)  # a corrupted entry is never unpickled: it fails its digest
    made.clear()
    _bound(generated)
    assert made == [corrupted]  # only that kernel is compiled again, and stored again
    assert cache.read_object(keys[corrupted]) is not None

    # another program holding some of the same kernels (under other names) compiles the rest
    edited = _generated(lambda x, y: (qb.sum(qb.exp(x) * y[0]), x @ y.T, qb.tanh(y) * 3.0),
                        x, y)
    shared = {k for k in edited.signatures
              if compiled.cache_key(edited.texts[k], edited.signatures[k], CC)
              in keys.values()}
    assert shared and len(shared) < len(edited.signatures)
    made.clear()
    _bound(edited)
    assert sorted(made) == sorted(set(edited.signatures) - shared)

    assert compiled.cache_key(generated.texts[corrupted], generated.signatures[corrupted],
                              (8, 0)) != keys[corrupted]  # another compute capability
