"""LLVM for this host, without Numba: the target machine every entry and kernel compiles for,
the module pipeline, and object code.

Numba's CPU code generator makes the same target machine (the host's CPU and features, static
relocations, the JIT code model; its environment variables ``NUMBA_CPU_NAME``,
``NUMBA_CPU_FEATURES``, ``NUMBA_ENABLE_AVX`` and ``NUMBA_LOOP_VECTORIZE`` are read the same
way here), so an entry's object is the same whichever front end made its module: Numba's
(target.py) or the direct translation (direct.py), which never imports Numba. The pipeline is
LLVM's at ``OPTIMISATION_LEVEL`` with loops vectorised; entries leave the loop unroller out
(10-45% of LLVM's time on an entry, steps within noise: docs/compile-time.md), kernels keep it.
Two pipelines generate code with LLVM's fast instruction selector (a target machine at O0):
``BARE``, LLVM's O0 (inlining alone), for a part that does little of its program's work
(workload.py): the translation's IR is already in SSA form, so its code is about O1's size,
at a tenth of O1's time; and ``QUICK``, O1 without the vectorisers but for the sums marked to
be vectorised as ``OPTIMISED`` vectorises them (direct.py), for an edit's new parts until
their optimised code is in (numba_cpu/__init__.py: the tiers). A quick part translated here
compiles by ``BARE`` on every path (a cold compile, an edit, a forked copy), so its bits do not
depend on which path compiled it.
"""

import functools
import inspect
import os
import threading

import llvmlite.binding as llvm

__all__ = ["OPTIMISATION_LEVEL", "OPTIMISED", "QUICK", "BARE", "target_machine", "module_target",
           "tuning", "optimise", "emit", "compile_module", "externals", "ObjectCode",
           "LLVM_THREAD"]

# O3 (Numba's default) unrolls more and takes longer, for no measurable gain on generated loops
OPTIMISATION_LEVEL = 2
# Numba's baseline CPU names that virtual machines report with AVX they may not have
_NO_AVX = {"corei7-avx", "core-avx-i", "sandybridge", "ivybridge", "nocona"}

# the module pipelines (above): LLVM's speed level of each
OPTIMISED, QUICK, BARE = "optimised", "quick", "bare"
_SPEED = {OPTIMISED: OPTIMISATION_LEVEL, QUICK: 1, BARE: 0}

_lock = threading.Lock()
_machines = {}  # quick -> the target machine


def _cpu_name():
    return os.environ.get("NUMBA_CPU_NAME") or llvm.get_host_cpu_name()


def _features():
    if os.environ.get("NUMBA_CPU_FEATURES") is not None:
        return os.environ["NUMBA_CPU_FEATURES"]
    try:
        features = llvm.get_host_cpu_features()
    except RuntimeError:
        return ""
    avx = os.environ.get("NUMBA_ENABLE_AVX")
    if not (int(avx) if avx else _cpu_name() not in _NO_AVX):
        for name in features:
            if name.startswith("avx"):
                features[name] = False
    return features.flatten()


def target_machine(quick=False):
    """The host's target machine, made once (as Numba's JIT code generator makes it); the
    ``quick`` one generates code at O0 (LLVM's fast instruction selector and register
    allocator)."""
    with _lock:
        machine = _machines.get(quick)
        if machine is None:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            target = llvm.Target.from_triple(llvm.get_process_triple())
            arch = target.name
            options = dict(cpu=_cpu_name(), features=_features(),
                           opt=0 if quick else OPTIMISATION_LEVEL,
                           reloc="static" if arch.startswith("x86") else
                           ("pic" if arch.startswith("ppc") else "default"),
                           codemodel="jitdefault")
            if "jit" in inspect.signature(target.create_target_machine).parameters:
                options["jit"] = True
            machine = _machines[quick] = target.create_target_machine(**options)
        return machine


@functools.lru_cache(maxsize=None)
def module_target():
    """``(triple, data layout)`` of the host, for a module translated here: asked of LLVM once
    per process, since every call into llvmlite waits for its one lock, which a thread
    optimising a part holds for as long as that takes (a part's translation would wait). The
    layout is a target machine's made already (both have the one layout: an edit that
    compiles quick code makes only the quick one first, ~1 ms), else the optimised one's."""
    with _lock:
        made = next(iter(_machines.values()), None)
    return llvm.get_process_triple(), str((made or target_machine()).target_data)


def tuning(slp=False, unroll=False, loop_vectorize=None, pipeline=OPTIMISED):
    """The module pipeline's options: ``slp`` turns on LLVM's SLP vectoriser (Numba leaves it
    off), ``unroll`` its loop unroller (entries leave it off); ``pipeline``: ``OPTIMISED``,
    or ``QUICK`` and ``BARE``, without the vectorisers (a marked sum's loop aside)."""
    options = llvm.create_pipeline_tuning_options(speed_level=_SPEED[pipeline])
    if pipeline != OPTIMISED:
        loop_vectorize = False
    elif loop_vectorize is None:
        loop_vectorize = int(os.environ.get("NUMBA_LOOP_VECTORIZE", "1"))
    options.loop_vectorization = bool(loop_vectorize)
    options.slp_vectorization = slp
    options.loop_unrolling = unroll
    return options


def optimise(module, slp=False, unroll=False, pipeline=OPTIMISED):
    """The module ``pipeline`` (``tuning``) on the parsed LLVM ``module``."""
    builder = llvm.create_pass_builder(target_machine(pipeline != OPTIMISED),
                                       tuning(slp, unroll, pipeline=pipeline))
    builder.getModulePassManager().run(module, builder)


def emit(module, pipeline=OPTIMISED):
    """The object code of the LLVM ``module`` run through ``pipeline``."""
    return target_machine(pipeline != OPTIMISED).emit_object(module)


def compile_module(text, slp=False, unroll=True):
    """The object code of the LLVM IR module ``text``, verified, optimised and compiled."""
    module = llvm.parse_assembly(text)
    module.verify()
    optimise(module, slp, unroll)
    return emit(module)


# LLVM's passes and code generation run on a thread of their own (``ObjectCode``); the compile
# breakdown (benchmarks/compile.py) runs them on the caller's, to time them apart
LLVM_THREAD = True


def externals(module):
    """The symbols ``module`` names but does not define (LLVM's intrinsics aside)."""
    return sorted(g.name for g in list(module.functions) + list(module.global_variables)
                  if g.is_declaration and not g.name.startswith("llvm."))


class ObjectCode:
    """The object code of an entry's LLVM module (parsed, or its text: parsed and verified
    here, in an LLVM context of its own, which no other thread touches), run through
    ``pipeline`` (without unrolling) and compiled on a thread of its own: llvmlite
    releases the GIL, so the front end of the next part runs meanwhile. ``result()`` waits:
    ``(object code, external symbols)``."""

    def __init__(self, module, pipeline=OPTIMISED):
        self._result = None
        self._pipeline = pipeline
        if not LLVM_THREAD:
            self._compile(module)
        else:
            self._thread = threading.Thread(target=self._compile, args=(module,), daemon=True)
            self._thread.start()

    @classmethod
    def done(cls, code, module):
        """One already compiled (``code``, from ``module``)."""
        made = cls.__new__(cls)
        made._result = code, externals(module)
        return made

    def _compile(self, module):
        try:
            if isinstance(module, str):
                context = llvm.create_context()
                module = llvm.parse_assembly(module, context)
                module.verify()
            optimise(module, pipeline=self._pipeline)
            self._result = emit(module, self._pipeline), externals(module)
        except BaseException as error:  # raised again by result()
            self._result = error

    def result(self):
        if self._result is None:
            self._thread.join()
        if isinstance(self._result, BaseException):
            raise self._result
        return self._result
