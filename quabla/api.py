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

    ``static_argnums``/``static_argnames`` name arguments that are Python values rather than
    arrays: each new value traces a new program. More than ``max_traces`` signatures of one
    function warn ``RetraceWarning`` and evict the oldest.

    Examples
    --------
    >>> import quabla as qb
    >>> @qb.jit
    ... def step(x, scale):
    ...     return qb.tanh(scale * x)
    >>> step(qb.array([0.0, 1.0]), 0.5)
    Tensor([0.        , 0.46211716], dtype=float64)
    """
    if isinstance(fun, list):  # v0.1 jit(input_specs) (D17)
        return _legacy("jit", fun)
    if fun is None:
        return lambda f: jit(f, device=device, static_argnums=static_argnums,
                             static_argnames=static_argnames, max_traces=max_traces,
                             precision=precision, compile=compile)
    if precision not in (None, "float64"):
        raise ValueError(f"precision must be None or 'float64', got {precision!r}")
    return Jitted(fun, device, static_argnums, static_argnames, max_traces, compile, precision)


def grad(fun=None, argnums=0, has_aux=False, *legacy):
    """The gradient of a scalar function with respect to the arguments ``argnums``.

    Parameters
    ----------
    fun : callable
        Returns a 0-d float array (and an auxiliary pytree with ``has_aux=True``). Without
        ``fun``, ``grad(argnums=...)`` is a decorator.
    argnums : int or tuple of int
        Which positional arguments to differentiate; a tuple gives a tuple of gradients.
    has_aux : bool
        ``fun`` returns ``(value, aux)``; the result is then ``(gradient, aux)``.

    Returns
    -------
    callable
        Takes ``fun``'s arguments and returns the gradient, a pytree shaped like the
        arguments named by ``argnums``. Traced once per signature and compiled.

    Examples
    --------
    >>> import quabla as qb
    >>> qb.grad(lambda x: qb.sum(x ** 3))(qb.array([1.0, 2.0]))
    Tensor([ 3., 12.], dtype=float64)
    >>> qb.grad(lambda x, w: qb.sin(x * w), argnums=(0, 1))(1.0, 2.0)
    (Tensor(-0.83229367, dtype=float64), Tensor(-0.41614684, dtype=float64))
    """
    if legacy:  # v0.1 grad(fn, specs, values, ct) (D17)
        return _legacy("grad", fun, argnums, has_aux, *legacy)
    if fun is None:
        return lambda f: grad(f, argnums=argnums, has_aux=has_aux)
    return staged_grad(fun, argnums, has_aux, False, "grad")


def value_and_grad(fun=None, argnums=0, has_aux=False):
    """``(value, gradient)`` of a scalar function, in one program.

    Takes the arguments of `grad`; the value comes from the same program as the gradient,
    so asking for both costs one forward pass. With ``has_aux=True`` the result is
    ``((value, aux), gradient)``, as in JAX.

    Examples
    --------
    >>> import quabla as qb
    >>> qb.value_and_grad(lambda w: qb.sum((2.0 * w - 1.0) ** 2))(qb.array([0.0, 1.0]))
    (Tensor(2., dtype=float64), Tensor([-4.,  4.], dtype=float64))
    """
    if fun is None:
        return lambda f: value_and_grad(f, argnums=argnums, has_aux=has_aux)
    return staged_grad(fun, argnums, has_aux, True, "value_and_grad")


def jvp(fun, primals, tangents):
    """Forward mode: ``(fun(*primals), J @ tangents)``, the value and the directional
    derivative along ``tangents``.

    ``primals`` and ``tangents`` are tuples with one entry per argument of ``fun``, each
    tangent shaped like its primal (Python numbers are accepted for 0-d ones).

    Examples
    --------
    >>> import quabla as qb
    >>> qb.jvp(qb.sin, (0.0,), (2.0,))
    (Tensor(0., dtype=float64), Tensor(2., dtype=float64))
    """
    primals, tangents = match_tangents(primals, tangents)
    return Staged(fun, Jvp(), config=("jvp",))(primals, tangents)


def vjp(fun, *primals, has_aux=False):
    """Reverse mode: ``(fun(*primals), vjp_fun)``; ``vjp_fun(ct)`` returns a tuple with one
    cotangent per primal, ``ct @ J``. With ``has_aux=True`` the result is
    ``(out, vjp_fun, aux)``.

    Examples
    --------
    >>> import quabla as qb
    >>> out, pullback = qb.vjp(lambda x: x ** 2, qb.array([1.0, 3.0]))
    >>> pullback(qb.array([1.0, 0.5]))
    (Tensor([2., 3.], dtype=float64),)
    """
    out = Staged(fun, VjpForward(), config=("vjp", bool(has_aux)))(*primals)
    if has_aux:
        out, aux = out
    backward = Staged(fun, VjpBackward(has_aux), config=("vjp_fun", bool(has_aux)))

    def vjp_fun(cotangent):
        return backward(tuple(primals), match_cotangents(out, cotangent))

    return (out, vjp_fun, aux) if has_aux else (out, vjp_fun)


def vmap(fun, in_axes=0, out_axes=0, axis_size=None):
    """Vectorize ``fun`` over an axis of its arguments: ``fun`` is written for one example
    and the result runs it on a batch, as one program with no Python loop.

    Parameters
    ----------
    in_axes : int, None, or a pytree of them
        Per argument (a prefix of the arguments' pytree), the axis that is mapped, or None
        for an argument shared by every example.
    out_axes : int or pytree of int
        Where the mapped axis goes in each output.
    axis_size : int, optional
        The size of the mapped axis, needed only when no argument is mapped.

    Examples
    --------
    >>> import quabla as qb
    >>> per_point = qb.vmap(qb.grad(lambda x, w: qb.sin(x * w)), in_axes=(0, None))
    >>> per_point(qb.array([0.0, 1.0]), 2.0)
    Tensor([ 2.        , -0.83229367], dtype=float64)
    """
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


def _legacy(name, *args):
    """D17: the v0.1 call forms of grad and jit go to ``quabla.legacy`` with a warning."""
    from .compat import legacy_call

    return legacy_call(name, *args)
