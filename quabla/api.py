"""The public transforms (spec 003 ch. 3): jit, grad, value_and_grad, jvp, vjp, vmap, jacobian,
jacfwd, jacrev and hessian.

Each wraps the user function in a ``Staged`` function with the ``Transform`` that builds its
graph (``quabla/staging/``); here are their public signatures, defaults and argument checks.
"""

from .staging.grad import staged_grad
from .staging.jacobian import staged_jacobian
from .staging.jit import Jitted
from .staging.jvp_vjp import Jvp, VjpBackward, VjpForward, match_cotangents, match_tangents
from .staging.staged import Staged
from .staging.vmap import staged_vmap

__all__ = ["jit", "grad", "value_and_grad", "jvp", "vjp", "vmap", "jacobian", "jacfwd", "jacrev",
           "hessian"]


def jit(fun=None, *, device=None, static_argnums=(), static_argnames=(), max_traces=8,
        precision=None, compile=None):  # noqa: A002 - the option's documented name
    """Compile ``fun``: one program per signature, cached (at most ``max_traces``, LRU).

    ``device`` is one of ``qb.devices()``. ``precision="float64"`` keeps a float64 program in
    float64 where the device can (MLX on its CPU stream) and raises UnsupportedOperationError
    where it cannot; without it, a device that runs float64 as float32 warns once per function.
    ``compile="eager"`` (the default, unless ``QUABLA_COMPILE`` names another mode) compiles a
    new signature before its first call returns, and results are deterministic.
    ``compile="background"`` answers such a call at once with the NumPy reference interpreter
    while a worker process compiles the program, and switches to native code on the first
    call after the worker is done (logged under ``QUABLA_LOG_COMPILES``); results across the
    switch agree within float tolerance but are not bitwise identical.
    """
    if fun is None:
        return lambda f: jit(f, device=device, static_argnums=static_argnums,
                             static_argnames=static_argnames, max_traces=max_traces,
                             precision=precision, compile=compile)
    if precision not in (None, "float64"):
        raise ValueError(f"precision must be None or 'float64', got {precision!r}")
    return Jitted(fun, device, static_argnums, static_argnames, max_traces, compile, precision)


def grad(fun=None, argnums=0, has_aux=False):
    """The gradient of a scalar function with respect to the arguments ``argnums``."""
    if fun is None:
        return lambda f: grad(f, argnums=argnums, has_aux=has_aux)
    return staged_grad(fun, argnums, has_aux, False, "grad")


def value_and_grad(fun=None, argnums=0, has_aux=False):
    """``(value, gradient)`` of a scalar function, in one program."""
    if fun is None:
        return lambda f: value_and_grad(f, argnums=argnums, has_aux=has_aux)
    return staged_grad(fun, argnums, has_aux, True, "value_and_grad")


def jvp(fun, primals, tangents):
    """Forward mode: ``(fun(*primals), J @ tangents)``."""
    primals, tangents = match_tangents(primals, tangents)
    return Staged(fun, Jvp(), config=("jvp",))(primals, tangents)


def vjp(fun, *primals, has_aux=False):
    """Reverse mode: ``(fun(*primals), vjp_fun)``; ``vjp_fun(ct)`` returns one cotangent per primal."""
    out = Staged(fun, VjpForward(), config=("vjp", bool(has_aux)))(*primals)
    if has_aux:
        out, aux = out
    backward = Staged(fun, VjpBackward(has_aux), config=("vjp_fun", bool(has_aux)))

    def vjp_fun(cotangent):
        return backward(tuple(primals), match_cotangents(out, cotangent))

    return (out, vjp_fun, aux) if has_aux else (out, vjp_fun)


def vmap(fun, in_axes=0, out_axes=0, axis_size=None):
    """Vectorize ``fun`` over the ``in_axes`` of its arguments (pytree prefixes, None = shared).
    ``axis_size``: the size of the mapped axis, needed when no argument is mapped."""
    return staged_vmap(fun, in_axes, out_axes, axis_size)


def jacobian(fun, argnums=0, has_aux=False):
    """Dense Jacobian blocks ``[*out.shape, *in.shape]`` of ``fun`` (pytrees nest the blocks),
    in the mode that needs fewer passes (forward mode where reverse mode is impossible).
    ``has_aux=True``: ``fun`` returns ``(output, aux)`` and this returns ``(jacobian, aux)``."""
    return staged_jacobian(fun, argnums, "auto", has_aux, False, "jacobian")


def jacfwd(fun, argnums=0, has_aux=False, holomorphic=False):
    """The Jacobian by forward mode: one JVP per input element, batched (JAX's ``jacfwd``)."""
    return staged_jacobian(fun, argnums, "forward", has_aux, holomorphic, "jacfwd")


def jacrev(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """The Jacobian by reverse mode: one VJP per output element, batched (JAX's ``jacrev``).
    ``allow_int`` is accepted for JAX's signature: Quabla has no integer dtype."""
    return staged_jacobian(fun, argnums, "reverse", has_aux, holomorphic, "jacrev")


def hessian(fun, argnums=0):
    """Dense Hessian blocks ``[*in.shape, *in.shape]``: forward mode over reverse mode."""
    return jacobian(staged_grad(fun, argnums, False, False, "grad"), argnums)
