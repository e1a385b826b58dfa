"""The v0.1 helpers (``tensor_*_fn``, the legacy ``*_fn``) as thin wrappers over the v0.2
transforms, following the migration rules of spec 000 §5.2.

v0.1 calling convention (spec 000 §2.2): ``specs`` lists ``(name, shape[, dtype])`` tuples
(float64 by default); ``f`` is called positionally with one array per spec, in spec order, and
returns one array; the built function takes a ``dict[str, array]`` keyed by the spec names (a
Python value takes its spec's dtype, a Tensor must match it). The ``*_batch_*`` helpers take
input names instead of specs and trace every input as float64, as v0.1 did; ``max_specializations``
becomes ``max_traces`` (a new shape evicts the oldest trace with a RetraceWarning instead of
raising). ``_cuda``/``_mlx`` helpers are the same wrappers under ``qb.jit(..., device=...)``.

What the built functions return (the spec names the v0.2 forms only; these keep v0.1's):

* jit, vmap: the output; value_and_grad: ``(value, {name: gradient})``; grad_scalar: the dict;
* jvp: ``fn(inputs, tangents)`` with tangents by name (missing ones are zero) ->
  ``(output, tangent)``; vjp: ``fn(inputs, cotangent)`` -> ``(output, {name: gradient})``;
  the legacy ``grad_fn``/``grad(fn, specs, values, ct)``: just the dict;
* hvp: ``fn(inputs, v)`` -> the Hessian of the ``wrt`` input times ``v``;
* jacobian/hessian: list-of-lists ``[out_size][in_size]`` / ``[in_size][in_size]`` of floats,
  as v0.1 returned (``qb.jacobian``/``qb.hessian`` return a Tensor ``[*out, *in]`` instead).

Gradients are taken with respect to ``wrt`` (a name or list of names; default: every floating
input); jacobian, hessian and hvp take one name (default: the first input).
"""

import operator
from functools import reduce

from .. import api, tree
from ..array import Array, asarray, zeros
from ..control import cond as _cond
from ..control import fori_loop as _fori_loop
from ..control import scan as _scan
from ..dtypes import dtype as _dtype
from ..dtypes import float64
from ..ops import sum as _sum
from ..staging.aot import Program
from ..staging.jit import Compiler

__all__ = [
    "LegacyFunction",
    "LegacyTransform",
    "TensorTraceResult",
    "TraceResult",
    "grad",
    "grad_scalar",
    "jit",
    "sum_gradients",
    "tensor_cond",
    "tensor_fori_loop",
    "tensor_fori_loop_region",
    "tensor_scan",
    "tensor_scan_region",
    "tensor_value_and_grad_data_parallel_cuda_fn",
    "trace",
    "trace_tensor",
]


# -- inputs by name ------------------------------------------------------------------------------

class _Specs:
    """Names and, unless ``batch``, declared shapes and dtypes of a helper's inputs."""

    def __init__(self, specs, batch=False):
        self.batch = batch
        if batch:  # v0.1 batch helpers: names only, every input traced as float64
            specs = [(n, None, float64) for n in specs]
        self.names, self.shapes, self.dtypes = [], [], []
        for spec in specs:
            if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3) or not isinstance(
                    spec[0], str):
                raise TypeError(f"a spec is (name, shape) or (name, shape, dtype), got {spec!r}")
            self.names.append(spec[0])
            self.shapes.append(None if spec[1] is None else tuple(spec[1]))
            self.dtypes.append(_dtype(spec[2]) if len(spec) == 3 else float64)

    def args(self, inputs):
        """The positional arrays of ``inputs`` (a dict by name), checked against the specs."""
        if not isinstance(inputs, dict):
            raise TypeError(f"v0.1 functions take a dict of inputs by name {self.names}, got "
                            f"{type(inputs).__name__}")
        missing = [n for n in self.names if n not in inputs]
        if missing or len(inputs) != len(self.names):
            raise TypeError(f"expected inputs {self.names}; missing {missing}, unexpected "
                            f"{sorted(set(inputs) - set(self.names))}")
        return tuple(self._arg(n, inputs[n], s, d)
                     for n, s, d in zip(self.names, self.shapes, self.dtypes))

    def _arg(self, name, value, shape, dtype):
        value = asarray(value, dtype if self.batch or not isinstance(value, Array) else None)
        if (shape is not None and tuple(value.shape) != shape) or value.dtype is not dtype:
            raise TypeError(f"input {name!r} must be {dtype}{list(shape or ())}, got "
                            f"{value.dtype}{list(value.shape)}")
        return value

    def positions(self, wrt, one=False):
        """The argnums of ``wrt`` (a name or names; None: every floating input, or the first)."""
        if wrt is None:
            floating = [k for k, d in enumerate(self.dtypes) if d.is_floating]
            return floating[0] if one else tuple(floating)
        names = [wrt] if isinstance(wrt, str) else list(wrt)
        unknown = [n for n in names if n not in self.names]
        if unknown or (one and len(names) != 1):
            raise ValueError(f"wrt must name {'one' if one else 'some'} of {self.names}, "
                             f"got {wrt!r}")
        k = tuple(self.names.index(n) for n in names)
        return k[0] if one else k

    def by_name(self, values, argnums):
        return {self.names[k]: v for k, v in zip(argnums, values)}

    def tangents(self, args, given):
        """One tangent per argument from a dict by name (zeros where none is given)."""
        return tuple(asarray(given[n], a.dtype) if n in given else zeros(a.shape, a.dtype)
                     for n, a in zip(self.names, args))


# -- result types ------------------------------------------------------------------------------

class LegacyFunction:
    """A function built by a v0.1 helper: call it with its inputs by name (a dict)."""

    def __init__(self, call, specs):
        self._call = call
        self.input_names = list(specs.names)

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __repr__(self):
        return f"<{type(self).__name__} inputs={self.input_names}>"


class LegacyTransform:
    """The legacy ``jit(specs)``/``grad_scalar(specs)``: applied to ``f``, builds its function."""

    def __init__(self, helper, specs):
        self._helper, self.specs = helper, specs

    def __call__(self, f):
        return self._helper(f, self.specs)


def _flat_matrix(block, n_in):
    """A Jacobian block ``[*out, *in]`` as v0.1's list of rows (one per output element)."""
    rows = block.size // n_in if n_in else 0
    return block.reshape((rows, n_in)).tolist()


# -- the builders: (f, specs, device, options) -> call -------------------------------------------

def _jit(f, sp, device, mt, wrt):
    run = api.jit(f, device=device, max_traces=mt)
    return lambda inputs: run(*sp.args(inputs))


def _value_and_grad(f, sp, device, mt, wrt):
    k = sp.positions(wrt)
    run = api.jit(api.value_and_grad(f, argnums=k), device=device, max_traces=mt)

    def call(inputs):
        value, grads = run(*sp.args(inputs))
        return value, sp.by_name(grads, k)
    return call


def _grad(f, sp, device, mt, wrt):
    k = sp.positions(wrt)
    run = api.jit(api.grad(f, argnums=k), device=device, max_traces=mt)
    return lambda inputs: sp.by_name(run(*sp.args(inputs)), k)


def _jvp(f, sp, device, mt, wrt):
    run = api.jit(lambda primals, tangents: api.jvp(f, primals, tangents), device=device,
                  max_traces=mt)

    def call(inputs, tangents):
        args = sp.args(inputs)
        return run(args, sp.tangents(args, tangents))
    return call


def _vjp(f, sp, device, mt, wrt):
    k = sp.positions(wrt)

    def both(primals, cotangent):
        out, pullback = api.vjp(f, *primals)
        grads = pullback(cotangent)
        return out, tuple(grads[i] for i in k)

    run = api.jit(both, device=device, max_traces=mt)

    def call(inputs, cotangent):
        out, grads = run(sp.args(inputs), cotangent)
        return out, sp.by_name(grads, k)
    return call


def _grads_of_vjp(f, sp, device, mt, wrt):
    call = _vjp(f, sp, device, mt, wrt)
    return lambda inputs, cotangent: call(inputs, cotangent)[1]


def _hvp(f, sp, device, mt, wrt):
    k = sp.positions(wrt, one=True)

    def hvp(args, v):
        def at(x):
            return api.grad(f, argnums=k)(*args[:k], x, *args[k + 1:])
        return api.jvp(at, (args[k],), (v,))[1]

    run = api.jit(hvp, device=device, max_traces=mt)

    def call(inputs, v):
        args = sp.args(inputs)
        return run(args, asarray(v, args[k].dtype))
    return call


def _dense(transform):
    def build(f, sp, device, mt, wrt):
        k = sp.positions(wrt, one=True)
        run = api.jit(transform(f, argnums=k), device=device, max_traces=mt)

        def call(inputs):
            args = sp.args(inputs)
            return _flat_matrix(run(*args).numpy(), args[k].size)
        return call
    return build


def _jacobians(f, sp, device, mt, wrt):
    k = sp.positions(wrt)
    run = api.jit(api.jacobian(f, argnums=k), device=device, max_traces=mt)

    def call(inputs):
        args = sp.args(inputs)
        return {sp.names[i]: _flat_matrix(b.numpy(), args[i].size)
                for i, b in zip(k, run(*args))}
    return call


_BUILDERS = {"jit": _jit, "value_and_grad": _value_and_grad, "grad": _grad, "jvp": _jvp,
             "vjp": _vjp, "grads": _grads_of_vjp, "hvp": _hvp,
             "jacobian": _dense(api.jacobian), "hessian": _dense(api.hessian),
             "jacobians": _jacobians}

# helper -> (result type, builder, device, mode); mode "" (specs), "vmap" (specs, in_axes,
# out_axes) or "batch" (names, max_specializations)
HELPERS = {
    "tensor_jit_fn": ("TensorJitFunction", "jit", None, ""),
    "tensor_jit_cuda_fn": ("TensorJitFunction", "jit", "cuda", ""),
    "tensor_jit_batch_fn": ("TensorBatchJitFunction", "jit", None, "batch"),
    "tensor_jit_batch_cuda_fn": ("TensorBatchCudaJitFunction", "jit", "cuda", "batch"),
    "tensor_value_and_grad_fn": ("TensorValueAndGradFunction", "value_and_grad", None, ""),
    "tensor_value_and_grad_cuda_fn": ("TensorCudaValueAndGradFunction", "value_and_grad",
                                      "cuda", ""),
    "tensor_value_and_grad_mlx_fn": ("TensorMlxValueAndGradFunction", "value_and_grad", "mlx",
                                     ""),
    "tensor_value_and_grad_batch_fn": ("TensorBatchValueAndGradFunction", "value_and_grad",
                                       None, "batch"),
    "tensor_value_and_grad_batch_cuda_fn": ("TensorBatchCudaValueAndGradFunction",
                                            "value_and_grad", "cuda", "batch"),
    "tensor_value_and_grad_batch_mlx_fn": ("TensorBatchMlxValueAndGradFunction",
                                           "value_and_grad", "mlx", "batch"),
    "tensor_grad_scalar_fn": ("TensorGradScalarFunction", "grad", None, ""),
    "tensor_jvp_fn": ("TensorJvpFunction", "jvp", None, ""),
    "tensor_vjp_fn": ("TensorVjpFunction", "vjp", None, ""),
    "tensor_hvp_scalar_fn": ("TensorHvpScalarFunction", "hvp", None, ""),
    "tensor_jacobian_fn": ("TensorJacobianFunction", "jacobian", None, ""),
    "tensor_hessian_scalar_fn": ("TensorHessianScalarFunction", "hessian", None, ""),
    "tensor_vmap_fn": ("TensorVmapFunction", "jit", None, "vmap"),
    "tensor_vmap_cuda_fn": ("TensorVmapCudaFunction", "jit", "cuda", "vmap"),
    "tensor_vmap_mlx_fn": ("TensorVmapMlxFunction", "jit", "mlx", "vmap"),
    "tensor_vmap_jvp_fn": ("TensorVmapJvpFunction", "jvp", None, "vmap"),
    "tensor_vmap_jvp_cuda_fn": ("TensorVmapCudaJvpFunction", "jvp", "cuda", "vmap"),
    "tensor_vmap_jvp_mlx_fn": ("TensorVmapMlxJvpFunction", "jvp", "mlx", "vmap"),
    "tensor_vmap_vjp_fn": ("TensorVmapVjpFunction", "vjp", None, "vmap"),
    "tensor_vmap_vjp_cuda_fn": ("TensorVmapCudaVjpFunction", "vjp", "cuda", "vmap"),
    "tensor_vmap_vjp_mlx_fn": ("TensorVmapMlxVjpFunction", "vjp", "mlx", "vmap"),
    "tensor_vmap_hvp_scalar_fn": ("TensorVmapHvpScalarFunction", "hvp", None, "vmap"),
    "tensor_vmap_hvp_scalar_cuda_fn": ("TensorVmapCudaHvpScalarFunction", "hvp", "cuda",
                                       "vmap"),
    # the legacy 2-D API's functions: the same wrappers, for arrays of any rank
    "jit_fn": ("JitFunction", "jit", None, ""),
    "value_and_grad_fn": ("ValueAndGradFunction", "value_and_grad", None, ""),
    "grad_scalar_fn": ("GradScalarFunction", "grad", None, ""),
    "grad_fn": ("GradFunction", "grads", None, ""),
    "vjp_fn": ("VjpFunction", "vjp", None, ""),
    "jvp_fn": ("JvpFunction", "jvp", None, ""),
    "jacobian_fn": ("JacobianFunction", "jacobian", None, ""),
    "jacobians_fn": ("JacobiansFunction", "jacobians", None, ""),
}

_OTHER_TYPES = ["TensorCondFunction", "TensorCondJvpFunction", "TensorCondValueAndGradFunction"]
for _name in sorted({row[0] for row in HELPERS.values()} | set(_OTHER_TYPES)):
    globals()[_name] = type(_name, (LegacyFunction,), {
        "__doc__": f"v0.1 ``{_name}``: a function built by a compatibility helper.",
        "__module__": "quabla"})
for _name in ("JitTransform", "GradScalarTransform"):
    globals()[_name] = type(_name, (LegacyTransform,), {
        "__doc__": f"v0.1 ``{_name}``: applied to a function, builds its legacy function.",
        "__module__": "quabla"})


def _helper(name, result, kind, device, mode):
    cls, build = globals()[result], _BUILDERS[kind]
    summed = kind == "hvp" and mode == "vmap"  # the HVP of sum(vmap(f)), as v0.1

    if mode == "batch":
        def helper(f, names, max_specializations=4, wrt=None):
            sp = _Specs(names, batch=True)
            return cls(build(f, sp, device, max_specializations, wrt), sp)
    elif mode == "vmap":
        def helper(f, specs, in_axes=0, out_axes=0, *, out_axis=None, wrt=None):
            sp = _Specs(specs)
            mapped = api.vmap(f, tuple(in_axes) if isinstance(in_axes, list) else in_axes,
                              out_axes if out_axis is None else out_axis)
            fun = (lambda *a: _sum(mapped(*a))) if summed else mapped
            return cls(build(fun, sp, device, 8, wrt), sp)
    else:
        def helper(f, specs, wrt=None):
            sp = _Specs(specs)
            return cls(build(f, sp, device, 8, wrt), sp)

    helper.__name__ = helper.__qualname__ = name
    helper.__doc__ = f"v0.1 ``{name}``: returns a ``{result}`` (see the module docstring)."
    return helper


for _name, _row in HELPERS.items():
    globals()[_name] = _helper(_name, *_row)
del _name, _row


# -- cond helpers: Python if on a concrete flag ---------------------------------------------

def _cond_helper(name, result, kind):
    def helper(true_fn, false_fn, specs):
        sp = _Specs(specs)
        branches = [_BUILDERS[kind](fn, sp, None, 8, None) for fn in (false_fn, true_fn)]
        return globals()[result](lambda flag, *args: branches[bool(flag)](*args), sp)

    helper.__name__ = helper.__qualname__ = name
    helper.__doc__ = (f"v0.1 ``{name}(true_fn, false_fn, specs)``: ``fn(flag, inputs, ...)`` "
                      f"runs the {kind} of the branch a concrete ``flag`` picks.")
    return helper


tensor_cond_fn = _cond_helper("tensor_cond_fn", "TensorCondFunction", "jit")
tensor_cond_jvp_fn = _cond_helper("tensor_cond_jvp_fn", "TensorCondJvpFunction", "jvp")
tensor_cond_value_and_grad_fn = _cond_helper("tensor_cond_value_and_grad_fn",
                                             "TensorCondValueAndGradFunction", "value_and_grad")


# -- data parallel -------------------------------------------------------------------------------

def tensor_value_and_grad_data_parallel_cuda_fn(function, input_specs, parameter_names,
                                                mapped_input_names, device_ordinals,
                                                reduction="mean"):
    """v0.1 data-parallel value and gradient: ``qb.distributed.value_and_grad`` over
    ``cuda:<ordinal>`` devices, sharding the mapped inputs; returns ``(value, {param: grad})``."""
    from .. import distributed

    sp = _Specs(input_specs)
    params = sp.positions(parameter_names)
    run = distributed.value_and_grad(
        function, devices=[f"cuda:{int(i)}" for i in device_ordinals],
        shard_argnums=sp.positions(mapped_input_names), argnums=params, reduction=reduction)

    def call(inputs):
        value, grads = run(*sp.args(inputs))
        return value, sp.by_name(grads, params)
    return globals()["TensorValueAndGradFunction"](call, sp)


# -- control flow, trees, traces ------------------------------------------------------------------

def tensor_cond(pred, true_fn, false_fn, operands=()):
    """v0.1 ``tensor_cond(pred, t, f, operands)``: ``qb.cond(pred, t, f, *operands)``."""
    return _cond(pred, true_fn, false_fn, *operands)


def tensor_fori_loop(lower, upper, body, init, operands=()):
    """``qb.fori_loop(..., unroll=True)``; ``body(i, carry, *operands)``."""
    return _fori_loop(lower, upper, body, init, operands=tuple(operands), unroll=True)


def tensor_fori_loop_region(lower, upper, body, init, operands=()):
    """``qb.fori_loop(lower, upper, body, init, operands=...)`` (a compiled loop region)."""
    return _fori_loop(lower, upper, body, init, operands=tuple(operands))


def tensor_scan(f, init, length, operands=()):
    """``qb.scan(f, init, length=n, unroll=True)``; ``f(carry, i, *operands) -> (carry, y)``."""
    return _scan(f, init, length=length, operands=tuple(operands), unroll=True)


def tensor_scan_region(f, init, lower, upper, operands=()):
    """``qb.scan`` over ``i`` from ``lower`` to ``upper - 1`` as a loop region; ``f`` sees the
    absolute index."""
    return _scan(lambda carry, i, *ops: f(carry, i + lower, *ops), init, length=upper - lower,
                 operands=tuple(operands))


def sum_gradients(*grads):
    """The sum of gradient dicts (pytrees): ``qb.tree.map(operator.add, a, b)``."""
    return reduce(lambda a, b: tree.map(operator.add, a, b), grads)


class TensorTraceResult(Program):
    """v0.1 ``trace_tensor``'s result: a ``Program`` that remembers its function and specs
    (``fun``, ``specs``), so the device optimizer factories can train it."""

    def __init__(self, fun, specs):
        program = Compiler().trace(fun, specs)
        super().__init__(program.graph, program.single)
        self.fun, self.specs = fun, [tuple(s) for s in specs]


class TraceResult(TensorTraceResult):
    """The legacy ``trace(f, specs)``'s result (a ``Program``)."""


TensorTraceResult.__module__ = TraceResult.__module__ = "quabla"


def trace_tensor(f, specs):
    """v0.1 ``trace_tensor(f, specs)``: ``Compiler().trace(f, specs)`` as a TensorTraceResult."""
    return TensorTraceResult(f, specs)


def trace(f, specs):
    """Legacy ``trace(f, specs)``: a TraceResult (``Compiler().trace(f, specs)``)."""
    return TraceResult(f, specs)


def jit(specs):
    """Legacy ``jit(specs)``: a JitTransform; ``jit(specs)(f)`` is a JitFunction."""
    return globals()["JitTransform"](globals()["jit_fn"], specs)


def grad_scalar(specs):
    """Legacy ``grad_scalar(specs)``: ``grad_scalar(specs)(f)`` is a GradScalarFunction."""
    return globals()["GradScalarTransform"](globals()["grad_scalar_fn"], specs)


def grad(fn, specs, values, ct):
    """Legacy ``grad(fn, specs, values, ct)``: the gradients by name of ``fn`` at ``values``
    (a dict) for the output cotangent ``ct``."""
    return globals()["grad_fn"](fn, specs)(values, ct)

