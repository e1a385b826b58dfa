"""v0.1 names with no object in this implementation: the 2-D ``Matrix`` API's types and the
execution-plan classes of the Rust core. Each is a class, so a star import binds it and
``isinstance`` works; constructing one raises ``UnsupportedOperationError`` saying what to use.
"""

from ..errors import UnsupportedOperationError

_INSTEAD = {
    "Matrix": "the 2-D Matrix API is not part of this implementation: build a 2-D Tensor with "
              "qb.array([[...], ...]) and use the transforms (qb.grad, qb.jit, ...)",
    "TraceMatrix": "tracers of this implementation are TraceTensor (any rank), created by the "
                   "transforms",
    "TraceGraph": "graphs are not user objects here: compose transforms, and inspect a Program "
                  "(qb.jit(f).lower(...).program, or Compiler().trace(f, specs))",
    "TensorTraceGraph": "graphs are not user objects here: compose transforms, and inspect a "
                        "Program (qb.jit(f).lower(...).program, or Compiler().trace(f, specs))",
    "CpuExecutionPlan": "qb.jit(f) compiles on first call; Program.compile('cpu') gives an "
                        "Executable",
    "TensorCpuExecutionPlan": "qb.jit(f).lower(*args).compile() or Program.compile('cpu')",
    "TensorCudaExecutionPlan": "qb.jit(f, device='cuda') or Program.compile('cuda'); device "
                               "training is qb.optim.Trainer(..., device='cuda')",
    "TensorMlxExecutionPlan": "qb.jit(f, device='mlx') or Program.compile('mlx'); device "
                              "training is qb.optim.Trainer(..., device='mlx')",
}

__all__ = list(_INSTEAD)


class Unsupported:
    """Base of the placeholders: constructing one raises UnsupportedOperationError."""

    instead = ""

    def __new__(cls, *args, **kwargs):
        raise UnsupportedOperationError(
            f"quabla.{cls.__name__} (v0.1) has no equivalent in this implementation; "
            f"{cls.instead}", op=cls.__name__)


for _name, _text in _INSTEAD.items():
    globals()[_name] = type(_name, (Unsupported,), {
        "instead": _text, "__doc__": f"v0.1 ``{_name}``, unsupported: {_text}.",
        "__module__": "quabla"})
del _name, _text
