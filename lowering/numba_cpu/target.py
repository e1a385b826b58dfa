"""The Numba target that generated entries compile for: Numba's CPU target with only the
typing and lowering registries that generated code uses.

Numba's CPU target loads, on a process's first compile, the implementations of everything
``@njit`` code may call (strings, typed containers, jitclasses, random generators, datetimes,
polynomials...): ~0.1 s of imports and registry installs, a third of a small program's cold
first call (docs/compile-time.md). Generated code does scalar arithmetic, ``math`` functions,
pointer loads and stores and calls of the runtime's intrinsics (runtime.py), and the array
kernels (kernels.py) add loops over ranges and ``carray`` views, so this target loads those
registries alone. Its hardware is a subclass of the CPU: everything written for ``"cpu"``
(overloads, intrinsics, ``carray``) applies to it, and overload implementations compile for
it too. An entry can call Numba functions of this target only (``kernel``), not ``@njit``
ones.

Most code never comes here: direct.py translates generated source to LLVM IR without Numba.
This target compiles the array kernels' and special functions' C functions (kernel_calls.py),
and a part that direct.py does not translate or every part under ``QUABLA_DIRECT=0``. Its
code generator optimises an entry once: Numba's runs LLVM's function
pipeline on each function, then a cheap module pipeline (to inline reference counting for its
pruner), then the full one; an entry without reference counts needs the last alone, the
pipeline of machine.py (the same results bit for bit, steps within noise, ~0.1 s less for the
MLP PINN's entry). Numba's reference-counting runtime, which entries that make ``carray``
views link, stays the CPU target's: the process has one, which the user's own Numba code links
too.
"""

import functools
from types import BuiltinFunctionType

import llvmlite.binding as llvm
from numba.core import codegen, compiler, config, cpu, intrinsics, types
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_lock import global_compiler_lock
from numba.core.datamodel import models, register_default
from numba.core.decorators import jit
from numba.core.descriptors import TargetDescriptor
from numba.core.dispatcher import Dispatcher
from numba.core.target_extension import (CPU, dispatcher_registry, jit_registry, target_override,
                                         target_registry)
from numba.core.typing.context import Context

from .. import fortran
from . import machine

__all__ = ["entry", "c_function", "lean_pipeline", "Entry", "EntryLibrary", "kernel"]

NAME = "quabla_cpu"


class EntryCPU(CPU):
    """The hardware of generated entries: the host CPU."""


class _Builtin(types.Function):
    """The type of a built-in function (an operator, a ``math`` function, ``bool``) whose
    call types are kept: they are the same for the same argument types, and Numba resolves
    every call site anew, in typing and again in lowering. ``a * b`` on two floats tries
    the datetime templates first, and each failure builds and formats an error (~2,400 per
    300-line entry, a fifth of its typing). Augmented by registries installed later, it is
    a new type with nothing kept."""

    def __init__(self, templates):
        super().__init__(templates)
        self._signatures = {}

    def get_call_type(self, context, args, kws):
        if kws:
            return super().get_call_type(context, args, kws)
        found = self._signatures.get(args)
        if found is None:
            found = self._signatures[args] = super().get_call_type(context, args, kws)
        return found

    def augment(self, other):
        if isinstance(other, types.Function) and other.typing_key == self.typing_key:
            return _Builtin(self.templates + other.templates)


register_default(_Builtin)(models.OpaqueModel)  # a function's value, as ``types.Function``'s


class _Typing(Context):
    # modules of the Python functions and classes typed as ``_Builtin``
    _PURE = frozenset({"_operator", "math", "builtins"})

    def load_additional_registries(self):
        from numba.core.typing import mathdecl

        self.install_registry(mathdecl.registry)

    def resolve_value_type(self, val):
        """As Numba's, but Python's own classes (``bool`` wraps every branch condition) and
        built-in functions (the operators, ``math``) are looked up as globals at once:
        ``typeof`` fails on them anyway, after formatting an error message and, for classes,
        importing Numba's typed containers (~10 ms) to rule those out."""
        if isinstance(val, (type, BuiltinFunctionType)) and val.__module__ in self._PURE:
            found = self._get_global_type(val)
            if found is not None:
                return found
        return super().resolve_value_type(val)

    def _insert_global(self, gv, gty):
        if type(gty) is types.Function and getattr(gv, "__module__", None) in self._PURE:
            gty = _Builtin(gty.templates)
        super()._insert_global(gv, gty)

    def resolve_value_type_prefer_literal(self, value):
        """As Numba's; a float has no literal type, so the failed attempt (an error built and
        formatted per constant) is skipped."""
        if type(value) is float:
            return self.resolve_value_type(value)
        return super().resolve_value_type_prefer_literal(value)


class EntryLibrary(codegen.JITCodeLibrary):
    """The machine code of an entry (or a kernel), optimised as the module docstring says."""

    _REFERENCE_COUNTS = ("NRT_incref", "NRT_decref")
    unroll = True  # a kernel's loops are unrolled; an entry's are not (``Entry``)

    def _optimize_functions(self, ll_module):
        pass  # the module pipeline below runs the same passes on every function

    def _optimize_final_module(self):
        module = self._final_module
        if any(f.name in self._REFERENCE_COUNTS for f in module.functions):
            return super()._optimize_final_module()  # a kernel: Numba's pruning pipeline
        machine.optimise(module, unroll=self.unroll)


class _Codegen(codegen.JITCPUCodegen):
    _library_class = EntryLibrary

    def magic_tuple(self):
        """Numba's cache key of this target's machine code: the host's, and which BLAS and
        LAPACK the kernels call (the width of its integers is in their code)."""
        return super().magic_tuple() + (fortran.origin(),)

    def _customize_tm_options(self, options):
        super()._customize_tm_options(options)
        options["opt"] = machine.OPTIMISATION_LEVEL

    def _pass_builder(self, opt=None, loop_vectorize=None, slp_vectorize=None, unroll=True):
        """Numba's pass builder with the tuning of machine.py (for kernels that link Numba's
        runtime, which Numba's own pipelines optimise)."""
        return llvm.create_pass_builder(self._tm, machine.tuning(
            bool(config.SLP_VECTORIZE if slp_vectorize is None else slp_vectorize), unroll,
            loop_vectorize))


class _Lowering(cpu.CPUContext):
    def init(self):
        super().init()
        self._internal_codegen = _Codegen("quabla.entries")
        self._implementations = {}
        self._sizes = {}

    def get_function(self, fn, sig, _firstcall=True):
        """As Numba's, kept per function type and signature: Numba looks the implementation
        up again at every call site and wraps it after reading its Python signature (for a
        ``loc`` parameter), ~15 µs a statement. A function type (an operator, ``math``, an
        intrinsic) names one implementation per signature once it is typed."""
        if not isinstance(fn, types.Function):
            return super().get_function(fn, sig, _firstcall)
        key = fn, sig
        found = self._implementations.get(key)
        if found is None:
            found = self._implementations[key] = super().get_function(fn, sig, _firstcall)
        return found

    def get_abi_sizeof(self, ty):
        """As Numba's, kept per LLVM type: llvmlite finds a size by parsing a module that
        holds a global of the type (~0.2 ms), and Numba asks for each variable it allocates."""
        found = self._sizes.get(ty)
        if found is None:
            found = self._sizes[ty] = super().get_abi_sizeof(ty)
        return found

    def load_additional_registries(self):
        # registered on import: numbers, tuples and ranges (the kernels' loops and shapes)
        from numba.cpython import iterators, mathimpl, numbers, rangeobj, tupleobj  # noqa: F401

        self.install_registry(mathimpl.registry)

    def post_lowering(self, module, library):
        """As the CPU target's, but Numba's reference-counting runtime is linked (and so
        compiled, ~20 ms of a process's first compile) only into entries compiled with it."""
        if self.is32bit:
            intrinsics.fix_divmod(module)
        if self.enable_nrt:
            from numba.core.registry import cpu_target
            from numba.core.runtime import rtsys

            # the process has one runtime, compiled by the CPU target's code generator: the
            # user's own Numba code links it too, and cannot link one compiled by this target's
            rtsys.initialize(cpu_target.target_context)
            library.add_linking_library(rtsys.library)


# Passes of Numba's nopython pipeline for constructs generated code never contains (with
# blocks, closures and comprehensions, functions or overloads to inline, raises,
# constant-foldable branches, nested functions, literally / literal_unroll, parfors; after
# typing, string-literal getitems, arrays of constant lists and array expressions:
# NopythonRewrites), or for inspection (AnnotateTypes): each walks the whole function, and
# the entry of a deep program is large (docs/compile-time.md); the inlining passes also import
# Numba's array implementation. ReconstructSSA is left out too: every variable of generated
# code keeps one type, which is all Numba's untyped SSA form is for, and it costs a pass over
# the whole function per variable assigned more than once (loop-carried scalars, swapped
# carry buffers): half the compile time of a 1,500-line adjoint ODE solve. So are the
# rewrites before typing (constant getitems and setitems, which arrays do not need, prints,
# raises, static powers) and the stripping of phi nodes, which only SSA reconstruction makes:
# each then recomputes every variable's lifetime over the unchanged function (liveness over
# blocks times variables), as IRProcessing has; ~0.12 s each of that ODE solve.
_UNUSED_PASSES = ("WithLifting", "GenericRewrites", "InlineClosureLikes", "InlineInlinables",
                  "InlineOverloads", "RewriteDynamicRaises", "RewriteSemanticConstants",
                  "DeadBranchPrune", "MakeFunctionToJitFunction", "FindLiterallyCalls",
                  "LiteralUnroll", "LiteralPropagationSubPipelinePass", "ReconstructSSA",
                  "PreLowerStripPhis", "NopythonRewrites", "AnnotateTypes",
                  "DumpParforDiagnostics")
# ... and, in an entry without reference counts, IRLegalization: it recomputes the lifetimes
# once more to insert the deletions that decrement reference counts
_WITHOUT_NRT = ("IRLegalization",)
_PIPELINE = None


def lean_pipeline(quick=False):
    """The compiler class of generated entries: Numba's nopython pipeline less the passes
    in ``_UNUSED_PASSES`` (and ``_WITHOUT_NRT`` for an entry without reference counts).
    ``quick`` (a part doing little of its program's work, workload.py) picks LLVM's pipeline in
    the direct translation; Numba compiles such a part as any other."""
    global _PIPELINE
    if _PIPELINE is None:
        class LeanPipeline(CompilerBase):
            def define_pipelines(self):
                pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
                unused = _UNUSED_PASSES + (() if self.state.flags.nrt else _WITHOUT_NRT)
                pm.passes = [p for p in pm.passes if p[0].__name__ not in unused]
                pm.finalize()
                return [pm]

        _PIPELINE = LeanPipeline
    return _PIPELINE


class _Descriptor(TargetDescriptor):
    options = cpu.CPUTargetOptions

    @functools.cached_property
    def typing_context(self):
        return _Typing()

    @functools.cached_property
    def target_context(self):
        return _Lowering(self.typing_context, NAME)


_DESCRIPTOR = _Descriptor(NAME)


class _EntryDispatcher(Dispatcher):
    targetdescr = _DESCRIPTOR


target_registry[NAME] = EntryCPU
dispatcher_registry[EntryCPU] = _EntryDispatcher
jit_registry[EntryCPU] = functools.partial(jit, _target=NAME)  # @overload implementations

# A Numba function of this target (the array kernels): an entry can call only those.
kernel = jit(nopython=True, error_model="numpy", cache=True, _target=NAME)


class Entry:
    """A compiled entry: ``void entry(void *args)`` named ``native_name`` in ``library``.

    Numba's front end (typing, lowering: Python, holding the GIL) runs when the entry is
    made; LLVM's passes and code generation run on a thread of their own
    (``machine.ObjectCode``), so the front end of an entry's next part runs meanwhile
    (numba_cpu/__init__.py). ``result()`` waits for them. ``address()`` links the code into
    Numba's own engine instead: entries with reference counts (``nrt``), which link Numba's
    runtime, always go that way."""

    def __init__(self, library, native_name, nrt):
        self.library = library
        self.native_name = native_name
        library.unroll = False
        if nrt or library._linking_libraries:
            library.get_pointer_to_function(native_name)  # Numba's finalize, into its engine
            self._object = machine.ObjectCode.done(
                library._get_compiled_object(), library._final_module)
        else:
            self._object = machine.ObjectCode(library._final_module)

    def result(self):
        """``(object code, external symbols)``."""
        return self._object.result()

    def address(self):
        """Where the entry is in Numba's engine (linked there on the first call)."""
        self.result()  # the module is optimised once, on the thread; not at the same time
        return self.library.get_pointer_to_function(self.native_name)


def entry(pipeline_class, nrt=False):
    """A decorator that compiles ``def f(args)`` as a C function ``void f(void *)`` for this
    target with ``pipeline_class``, as ``numba.cfunc`` would for the CPU target. An entry
    allocates nothing; one that makes arrays (``carray`` views for the kernels) needs ``nrt``:
    Numba then counts their references."""
    return lambda function: c_function(function, (types.voidptr,), pipeline_class, nrt)


def c_function(function, argtypes, pipeline_class, nrt=False, restype=types.void):
    """``function`` compiled for this target as a C function ``restype f(argtypes...)``: its
    ``Entry``."""
    flags = compiler.Flags()
    cpu.CPUTargetOptions.parse_as_flags(flags, {"error_model": "numpy"})
    flags.no_cpython_wrapper = True
    flags.no_cfunc_wrapper = False
    flags.no_compile = True
    flags.enable_pyobject = False
    flags.nrt = nrt
    # while typing, templates that resolve "the current target" find this one
    with global_compiler_lock, target_override(NAME):
        result = compiler.compile_extra(
            _DESCRIPTOR.typing_context, _DESCRIPTOR.target_context, function,
            args=tuple(argtypes), return_type=restype, flags=flags, locals={},
            pipeline_class=pipeline_class)
        return Entry(result.library, result.fndesc.llvm_cfunc_wrapper_name, nrt)
