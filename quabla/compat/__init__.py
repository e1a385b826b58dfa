"""The v0.1 names (spec 000 §5, Appendix A): one table, read by ``quabla.__getattr__``,
``quabla.legacy`` and the D17 dispatch of ``quabla.grad``/``quabla.jit``.

Each row is ``name | status | target | replacement``. ``target`` is where the object lives,
``module:attribute`` relative to this package (``@package`` is ``quabla`` itself); it is
imported only when the name is first used, so ``import quabla`` stays as fast as before.

Statuses (§5.1): ``deprecated`` warns once per name on first attribute access and is then
bound; ``legacy`` lives in ``quabla.legacy`` (no warning there) and warns once at top level;
``core``/``advanced`` rows fill v0.1 names this implementation lacks, bound without a warning;
``core+legacy`` (``grad``, ``jit``) are real top-level names whose v0.1 call forms dispatch to
``quabla.legacy`` (D17). A star import binds every row without a warning and without spending
the once-per-name warning (``star_import``).
"""

import dis
import importlib
import sys
import warnings

__all__ = ["TABLE", "Row", "attribute", "legacy_call", "resolve", "star_names"]

_ROWS = """
Adam | deprecated | optimizers:Adam | qb.optim.Adam (init/update) or qb.optim.Trainer
CpuExecutionPlan | legacy | unsupported:CpuExecutionPlan | qb.jit(f) (compiled on first call)
GradFunction | legacy | wrappers:GradFunction | qb.vjp(f, *primals)
GradScalarFunction | legacy | wrappers:GradScalarFunction | qb.grad(f, argnums)
GradScalarTransform | legacy | wrappers:GradScalarTransform | qb.grad(f, argnums)
JacobianFunction | legacy | wrappers:JacobianFunction | qb.jacobian(f, argnums)
JacobiansFunction | legacy | wrappers:JacobiansFunction | qb.jacobian(f, argnums=(0, ..., n-1))
JitFunction | legacy | wrappers:JitFunction | qb.jit(f)
JitTransform | legacy | wrappers:JitTransform | qb.jit(f)
JvpFunction | legacy | wrappers:JvpFunction | qb.jvp(f, primals, tangents)
Matrix | legacy | unsupported:Matrix | qb.array(rows) (a 2-D Tensor)
TensorBatchCudaJitFunction | deprecated | wrappers:TensorBatchCudaJitFunction | qb.jit(f, device="cuda", max_traces=4)
TensorBatchCudaValueAndGradFunction | deprecated | wrappers:TensorBatchCudaValueAndGradFunction | qb.jit(qb.value_and_grad(f, argnums), device="cuda", max_traces=4)
TensorBatchJitFunction | deprecated | wrappers:TensorBatchJitFunction | qb.jit(f, max_traces=4)
TensorBatchMlxValueAndGradFunction | deprecated | wrappers:TensorBatchMlxValueAndGradFunction | qb.jit(qb.value_and_grad(f, argnums), device="mlx", max_traces=4)
TensorBatchValueAndGradFunction | deprecated | wrappers:TensorBatchValueAndGradFunction | qb.jit(qb.value_and_grad(f, argnums), max_traces=4)
TensorCondFunction | deprecated | wrappers:TensorCondFunction | Python if on a concrete flag + qb.jit(branch)
TensorCondJvpFunction | deprecated | wrappers:TensorCondJvpFunction | Python if + qb.jvp(branch, ...)
TensorCondValueAndGradFunction | deprecated | wrappers:TensorCondValueAndGradFunction | Python if + qb.value_and_grad(branch)
TensorCpuExecutionPlan | advanced | unsupported:TensorCpuExecutionPlan | qb.jit(f).lower(...).compile() or Program.compile("cpu")
TensorCudaAdamOptimizer | advanced | optimizers:TensorCudaAdamOptimizer | qb.optim.Trainer(..., device="cuda")
TensorCudaExecutionPlan | advanced | unsupported:TensorCudaExecutionPlan | qb.jit(f, device="cuda") or Program.compile("cuda")
TensorCudaValueAndGradFunction | deprecated | wrappers:TensorCudaValueAndGradFunction | qb.jit(qb.value_and_grad(f, argnums), device="cuda")
TensorGradScalarFunction | deprecated | wrappers:TensorGradScalarFunction | qb.grad(f, argnums=(0, ..., n-1))
TensorHessianScalarFunction | deprecated | wrappers:TensorHessianScalarFunction | qb.hessian(f, argnums=i)
TensorHvpScalarFunction | deprecated | wrappers:TensorHvpScalarFunction | qb.jvp(qb.grad(f), (x,), (v,))
TensorJacobianFunction | deprecated | wrappers:TensorJacobianFunction | qb.jacobian(f, argnums=i)
TensorJitFunction | deprecated | wrappers:TensorJitFunction | qb.jit(f)
TensorJvpFunction | deprecated | wrappers:TensorJvpFunction | qb.jvp(f, primals, tangents)
TensorMlxAdamOptimizer | advanced | optimizers:TensorMlxAdamOptimizer | qb.optim.Trainer(..., device="mlx")
TensorMlxExecutionPlan | advanced | unsupported:TensorMlxExecutionPlan | qb.jit(f, device="mlx") or Program.compile("mlx")
TensorMlxValueAndGradFunction | deprecated | wrappers:TensorMlxValueAndGradFunction | qb.jit(qb.value_and_grad(f, argnums), device="mlx")
TensorTraceGraph | deprecated | unsupported:TensorTraceGraph | composition of transforms; Program for inspection
TensorTraceResult | deprecated | wrappers:TensorTraceResult | Program
TensorValueAndGradFunction | deprecated | wrappers:TensorValueAndGradFunction | qb.value_and_grad(f, argnums)
TensorView | core | @package:Tensor | Tensor (every Tensor is an immutable view of its data)
TensorVjpFunction | deprecated | wrappers:TensorVjpFunction | qb.vjp(f, *primals)
TensorVmapCudaFunction | deprecated | wrappers:TensorVmapCudaFunction | qb.jit(qb.vmap(f, in_axes, out_axes), device="cuda")
TensorVmapCudaHvpScalarFunction | deprecated | wrappers:TensorVmapCudaHvpScalarFunction | qb.jit(<vmap HVP composition>, device="cuda")
TensorVmapCudaJvpFunction | deprecated | wrappers:TensorVmapCudaJvpFunction | qb.jit(<jvp of vmap>, device="cuda")
TensorVmapCudaVjpFunction | deprecated | wrappers:TensorVmapCudaVjpFunction | qb.jit(<vjp of vmap>, device="cuda")
TensorVmapFunction | deprecated | wrappers:TensorVmapFunction | qb.vmap(f, in_axes, out_axes)
TensorVmapHvpScalarFunction | deprecated | wrappers:TensorVmapHvpScalarFunction | qb.jvp(qb.grad(lambda x: qb.sum(qb.vmap(f)(x))), (x,), (v,))
TensorVmapJvpFunction | deprecated | wrappers:TensorVmapJvpFunction | qb.jvp(qb.vmap(f, ...), primals, tangents)
TensorVmapMlxFunction | deprecated | wrappers:TensorVmapMlxFunction | qb.jit(qb.vmap(f, in_axes, out_axes), device="mlx")
TensorVmapMlxJvpFunction | deprecated | wrappers:TensorVmapMlxJvpFunction | qb.jit(<jvp of vmap>, device="mlx")
TensorVmapMlxVjpFunction | deprecated | wrappers:TensorVmapMlxVjpFunction | qb.jit(<vjp of vmap>, device="mlx")
TensorVmapVjpFunction | deprecated | wrappers:TensorVmapVjpFunction | qb.vjp(qb.vmap(f, ...), *primals)
TraceGraph | legacy | unsupported:TraceGraph | composition of transforms; Program for inspection
TraceMatrix | legacy | unsupported:TraceMatrix | TraceTensor (the tracer inside transforms)
TraceResult | legacy | wrappers:TraceResult | Program (Compiler().trace(f, specs))
ValueAndGradFunction | legacy | wrappers:ValueAndGradFunction | qb.value_and_grad(f, argnums)
VjpFunction | legacy | wrappers:VjpFunction | qb.vjp(f, *primals)
cuda_adam_loss_optimizer | deprecated | optimizers:cuda_adam_loss_optimizer | qb.optim.Trainer(..., device="cuda")
cuda_adam_optimizer | deprecated | optimizers:cuda_adam_optimizer | qb.optim.Trainer(..., device="cuda")
cuda_adam_step | deprecated | optimizers:cuda_adam_step | qb.optim.Trainer(..., device="cuda")
cuda_adam_vjp_optimizer | deprecated | optimizers:cuda_adam_vjp_optimizer | qb.optim.Trainer(..., device="cuda")
dtype | core | aliases:dtype | qb.dtype(...) resolves a dtype; isinstance(x, qb.dtype) tests one
grad | core+legacy | wrappers:grad | qb.grad(fun, argnums)
grad_fn | legacy | wrappers:grad_fn | qb.vjp(f, *primals)
grad_scalar | legacy | wrappers:grad_scalar | qb.grad(f, argnums)
grad_scalar_fn | legacy | wrappers:grad_scalar_fn | qb.grad(f, argnums)
jacobian_fn | legacy | wrappers:jacobian_fn | qb.jacobian(f, argnums)
jacobians_fn | legacy | wrappers:jacobians_fn | qb.jacobian(f, argnums=(0, ..., n-1))
jit | core+legacy | wrappers:jit | qb.jit(fun, device=...)
jvp_fn | legacy | wrappers:jvp_fn | qb.jvp(f, primals, tangents)
mlx_adam_loss_optimizer | deprecated | optimizers:mlx_adam_loss_optimizer | qb.optim.Trainer(..., device="mlx")
quabla | deprecated | @package | the quabla package itself (there is no native module)
sum_gradients | deprecated | wrappers:sum_gradients | qb.tree.map(operator.add, a, b)
tensor_cond | deprecated | wrappers:tensor_cond | qb.cond(pred, true_fun, false_fun, *operands)
tensor_cond_fn | deprecated | wrappers:tensor_cond_fn | Python if on a concrete flag + qb.jit(branch)
tensor_cond_jvp_fn | deprecated | wrappers:tensor_cond_jvp_fn | Python if + qb.jvp(branch, ...)
tensor_cond_value_and_grad_fn | deprecated | wrappers:tensor_cond_value_and_grad_fn | Python if + qb.value_and_grad(branch)
tensor_fori_loop | deprecated | wrappers:tensor_fori_loop | qb.fori_loop(..., unroll=True)
tensor_fori_loop_region | deprecated | wrappers:tensor_fori_loop_region | qb.fori_loop(lower, upper, body, init, operands=...)
tensor_grad_scalar_fn | deprecated | wrappers:tensor_grad_scalar_fn | qb.grad(f, argnums=(0, ..., n-1))
tensor_hessian_scalar_fn | deprecated | wrappers:tensor_hessian_scalar_fn | qb.hessian(f, argnums=i) (returns a Tensor)
tensor_hvp_scalar_fn | deprecated | wrappers:tensor_hvp_scalar_fn | qb.jvp(qb.grad(f), (x,), (v,))
tensor_jacobian_fn | deprecated | wrappers:tensor_jacobian_fn | qb.jacobian(f, argnums=i) (returns a Tensor)
tensor_jit_batch_cuda_fn | deprecated | wrappers:tensor_jit_batch_cuda_fn | qb.jit(f, device="cuda", max_traces=4)
tensor_jit_batch_fn | deprecated | wrappers:tensor_jit_batch_fn | qb.jit(f, max_traces=4)
tensor_jit_cuda_fn | deprecated | wrappers:tensor_jit_cuda_fn | qb.jit(f, device="cuda")
tensor_jit_fn | deprecated | wrappers:tensor_jit_fn | qb.jit(f)
tensor_jvp_fn | deprecated | wrappers:tensor_jvp_fn | qb.jvp(f, primals, tangents)
tensor_scan | deprecated | wrappers:tensor_scan | qb.scan(f, init, length=n, unroll=True)
tensor_scan_region | deprecated | wrappers:tensor_scan_region | qb.scan(f, init, length=upper-lower, operands=...)
tensor_value_and_grad_batch_cuda_fn | deprecated | wrappers:tensor_value_and_grad_batch_cuda_fn | qb.jit(qb.value_and_grad(f, argnums), device="cuda", max_traces=4)
tensor_value_and_grad_batch_fn | deprecated | wrappers:tensor_value_and_grad_batch_fn | qb.jit(qb.value_and_grad(f, argnums), max_traces=4)
tensor_value_and_grad_batch_mlx_fn | deprecated | wrappers:tensor_value_and_grad_batch_mlx_fn | qb.jit(qb.value_and_grad(f, argnums), device="mlx", max_traces=4)
tensor_value_and_grad_cuda_fn | deprecated | wrappers:tensor_value_and_grad_cuda_fn | qb.jit(qb.value_and_grad(f, argnums), device="cuda")
tensor_value_and_grad_data_parallel_cuda_fn | deprecated | wrappers:tensor_value_and_grad_data_parallel_cuda_fn | qb.distributed.value_and_grad(f, devices=..., shard_argnums=...)
tensor_value_and_grad_fn | deprecated | wrappers:tensor_value_and_grad_fn | qb.value_and_grad(f, argnums)
tensor_value_and_grad_mlx_fn | deprecated | wrappers:tensor_value_and_grad_mlx_fn | qb.jit(qb.value_and_grad(f, argnums), device="mlx")
tensor_vjp_fn | deprecated | wrappers:tensor_vjp_fn | qb.vjp(f, *primals)
tensor_vmap_cuda_fn | deprecated | wrappers:tensor_vmap_cuda_fn | qb.jit(qb.vmap(f, in_axes, out_axes), device="cuda")
tensor_vmap_fn | deprecated | wrappers:tensor_vmap_fn | qb.vmap(f, in_axes, out_axes)
tensor_vmap_hvp_scalar_cuda_fn | deprecated | wrappers:tensor_vmap_hvp_scalar_cuda_fn | qb.jit(<vmap HVP composition>, device="cuda")
tensor_vmap_hvp_scalar_fn | deprecated | wrappers:tensor_vmap_hvp_scalar_fn | qb.jvp(qb.grad(lambda x: qb.sum(qb.vmap(f)(x))), (x,), (v,))
tensor_vmap_jvp_cuda_fn | deprecated | wrappers:tensor_vmap_jvp_cuda_fn | qb.jit(<jvp of vmap>, device="cuda")
tensor_vmap_jvp_fn | deprecated | wrappers:tensor_vmap_jvp_fn | qb.jvp(qb.vmap(f, ...), primals, tangents)
tensor_vmap_jvp_mlx_fn | deprecated | wrappers:tensor_vmap_jvp_mlx_fn | qb.jit(<jvp of vmap>, device="mlx")
tensor_vmap_mlx_fn | deprecated | wrappers:tensor_vmap_mlx_fn | qb.jit(qb.vmap(f, in_axes, out_axes), device="mlx")
tensor_vmap_vjp_cuda_fn | deprecated | wrappers:tensor_vmap_vjp_cuda_fn | qb.jit(<vjp of vmap>, device="cuda")
tensor_vmap_vjp_fn | deprecated | wrappers:tensor_vmap_vjp_fn | qb.vjp(qb.vmap(f, ...), *primals)
tensor_vmap_vjp_mlx_fn | deprecated | wrappers:tensor_vmap_vjp_mlx_fn | qb.jit(<vjp of vmap>, device="mlx")
trace | legacy | wrappers:trace | Compiler().trace(f, specs) (qb.trace is NumPy's trace)
trace_tensor | deprecated | wrappers:trace_tensor | qb.jit(f).lower(...) or Compiler().trace(f, specs)
value_and_grad_fn | legacy | wrappers:value_and_grad_fn | qb.value_and_grad(f, argnums)
vjp_fn | legacy | wrappers:vjp_fn | qb.vjp(f, *primals)
"""


class Row:
    """One v0.1 name: its status, where its object lives, and what to use instead."""

    __slots__ = ("name", "replacement", "status", "target")

    def __init__(self, name, status, target, replacement):
        self.name, self.status, self.target, self.replacement = name, status, target, replacement

    def __repr__(self):
        return f"Row({self.name!r}, {self.status!r}, {self.target!r})"


TABLE = {row.name: row for row in (Row(*(part.strip() for part in line.split("|")))
                                   for line in _ROWS.strip().splitlines())}


def resolve(row):
    """The object of ``row``, importing its module on first use."""
    where, _, attr = row.target.partition(":")
    module = sys.modules["quabla"] if where == "@package" else importlib.import_module(
        f"{__name__}.{where}")
    return getattr(module, attr) if attr else module


def star_names(real):
    """The rows a star import binds beyond the ``real`` names of ``__all__``."""
    return [name for name in TABLE if name not in real]


_IMPORT_STAR = dis.opmap.get("IMPORT_STAR")          # Python <= 3.11
_INTRINSIC = dis.opmap.get("CALL_INTRINSIC_1")       # Python >= 3.12
_INTRINSIC_IMPORT_STAR = 2


def _quiet(frame):
    """Whether the attribute lookup comes from ``from quabla import *`` (the IMPORT_STAR
    instruction, or CALL_INTRINSIC_1 INTRINSIC_IMPORT_STAR, is the caller's current one) or
    from importlib's ``_handle_fromlist`` probing names with ``hasattr`` before any import
    binds them: neither should warn or bind."""
    if frame is None:
        return False
    code = frame.f_code
    if code.co_name == "_handle_fromlist" and frame.f_globals.get("__name__") in (
            "importlib._bootstrap", "_frozen_importlib"):
        return True
    raw, i = code.co_code, frame.f_lasti
    if not 0 <= i < len(raw):
        return False
    op = raw[i]
    return op == _IMPORT_STAR or (op == _INTRINSIC and raw[i + 1] == _INTRINSIC_IMPORT_STAR)


def attribute(module, name, frame):
    """``quabla.<name>`` for a name the package does not bind: ``frame`` is the caller's.

    Deprecated and legacy names warn once, naming the replacement, and are then bound in
    ``module`` (later lookups never come here); a star import gets the object silently and
    binds nothing in ``module``, so the first explicit access still warns."""
    row = TABLE.get(name)
    if row is None:
        raise AttributeError(f"module 'quabla' has no attribute {name!r}")
    value = resolve(row)
    if _quiet(frame):
        return value
    if row.status == "deprecated":
        warnings.warn(f"quabla.{name} is deprecated (v0.1); use {row.replacement}",
                      DeprecationWarning, stacklevel=3)
    elif row.status == "legacy":
        warnings.warn(f"quabla.{name} is a legacy v0.1 name: use quabla.legacy.{name}, or "
                      f"{row.replacement}", DeprecationWarning, stacklevel=3)
    setattr(module, name, value)
    return value


def legacy_call(name, *args):
    """D17: a v0.1 call form of ``quabla.grad``/``quabla.jit``, sent to ``quabla.legacy``."""
    row = TABLE[name]
    warnings.warn(f"this is the v0.1 form of quabla.{name} (quabla.legacy.{name}); use "
                  f"{row.replacement}", DeprecationWarning, stacklevel=4)
    return resolve(row)(*args)
