"""What the solver primitives share: the user's function as a sub-graph, the two array
namespaces the iterations are written against, and derivative helpers on sub-graphs.

Each solver's iteration is written once against a namespace ``xp``: ``NUMPY`` runs it on
ndarrays (the primitive's reference, i.e. eager mode), ``TRACED`` records it with Quabla ops and
``while_loop``/``fori_loop`` regions (the primitive's ``expand`` rule, what back ends compile).

Solvers work lane by lane: a primitive's ``nbatch`` leading axes are independent problems
(``vmap`` adds one), so inner products reduce over the trailing axes only, per-lane scalars keep
those axes as size 1 (``lane_sum``), and a loop runs while any lane is active, freezing the
lanes that are done.

Each primitive takes one array; a pytree argument (``b``, ``x0``, ``y0``) reaches it raveled
(``Flat``), with the user's functions wrapped to see pytrees, so the rules serve pytrees
unchanged.
"""

import numpy as np

from .. import ops, tree
from ..array import Array, Tensor, asarray
from ..core.primitives import Zero, is_zero
from ..core.rewrite import simplify
from ..core.tracing import TraceFrame, trace_frame
from ..core.interpret import evaluate
from ..errors import QuablaError
from ..flatten_util import ravel_pytree
from ..control.regions import aval_texts, trace_body
from ..transforms.inline import inline
from ..transforms.jvp import jvp_graph, materialize
from ..transforms.vjp import vjp_graph
from ..transforms.batching import batch_graph

__all__ = ["ConvergenceError", "NUMPY", "TRACED", "operator_graph", "graph_of", "apply_jvp",
           "apply_vjp", "batch_sub", "lead", "as_float_array", "Flat", "nan_unless", "failure_info"]


class ConvergenceError(QuablaError, RuntimeError):
    """A solver stopped without converging (``newton``'s ``maxiter``, ``odeint``'s ``mxstep``)."""


def nan_unless(ok, value):
    """``value`` where ``ok``, NaN elsewhere, in its derivatives too: ``value`` is multiplied
    by 1 or NaN, so tangents and cotangents through a failed solve are NaN. (A ``where`` would
    give the value NaN but the gradient 0 there: a finite, wrong gradient.)"""
    return ops.multiply(value, ops.where(ok, 1.0, float("nan")))


def failure_info(xp, converged, steps):
    """A solver's ``info``: 0 where ``converged``, else the steps taken, at least 1 (a NaN from
    the start stops a loop before its first step: a failure all the same, never a 0)."""
    return xp.where(converged, 0.0, xp.maximum(steps, 1.0))


def as_float_array(x, what):
    x = x if isinstance(x, Array) else asarray(x)
    if not x.dtype.is_floating:
        raise TypeError(f"{what} must be a floating array, got {x.dtype}")
    return x


def _describe(treedef, avals):
    if treedef.node_type is None:
        return f"one array of {aval_texts(avals)}"
    return f"a pytree {str(treedef)[len('TreeDef('):-1]} of arrays {aval_texts(avals)}"


class Flat:
    """A solver's pytree argument (``b``, ``x0``, ``y0``) as the one float array its primitive
    takes, and the user's functions of such pytrees as functions of that array.

    A single array is taken as it is (its shape is the problem's: lanes, Jacobians and ``ys``
    keep it); any other pytree is raveled by ``ravel_pytree`` into a vector of its leaves'
    widest dtype, and unraveled back into each leaf's shape and dtype. The wrapping is made of
    differentiable ops, so the primitive's own derivative and batching rules serve pytrees."""

    def __init__(self, value, what):
        leaves, self.treedef = tree.flatten(value)
        leaves = [as_float_array(x, what) for x in leaves]
        if not leaves:
            raise ValueError(f"{what} must hold at least one array, got {self.treedef}")
        self.avals = [(tuple(x.shape), x.dtype) for x in leaves]
        self.single = self.treedef.node_type is None
        if self.single:
            self.array, self._unravel = leaves[0], None
        else:
            self.array, self._unravel = ravel_pytree(self.treedef.unflatten(leaves))

    def __str__(self):
        return _describe(self.treedef, self.avals)

    def unflat(self, array):
        """The pytree of ``array`` (this array's shape, or with leading axes: each leaf gets
        them too)."""
        return array if self.single else self._unravel(array)

    def flat(self, value, what, error=TypeError, verb="must be"):
        """``value``, a pytree of this structure, shapes and dtypes, as one array like
        ``self.array``; ``error`` naming both structures otherwise."""
        leaves, treedef = tree.flatten(value)
        leaves = [x if isinstance(x, Array) else asarray(x) for x in leaves]
        avals = [(tuple(x.shape), x.dtype) for x in leaves]
        if treedef != self.treedef or avals != self.avals:
            raise error(f"{what} {verb} {self}, got {_describe(treedef, avals)}")
        return leaves[0] if self.single else ravel_pytree(leaves)[0]

    def function(self, fun, what):
        """``fun(pytree, *rest) -> pytree`` (both of this structure) as ``(array, *rest) ->
        array``: what ``operator_graph`` traces."""
        return lambda x, *rest: self.flat(fun(self.unflat(x), *rest), what, verb="must return")


def operator_graph(fun, template, operands, what):
    """Trace ``fun(x, *operands)`` for ``x`` like ``template``: returns ``(graph, consts)``,
    the graph taking ``(x, *consts)`` (the operand leaves, then the closed-over tracers), and
    the result avals (shape, dtype) of the graph's outputs."""
    leaves = [leaf if isinstance(leaf, Array) else asarray(leaf)
              for leaf in tree.leaves(operands)]
    op_tree = tree.structure(operands)
    body = trace_body(lambda x, *flat: fun(x, *op_tree.unflatten(list(flat))),
                      (template, *leaves), what)
    return body.graph, leaves + list(body.captures), body.out_tree


def graph_of(fn, graph=None, avals=()):
    """A graph with the inputs of ``graph`` (or none), then one input per ``(shape, dtype,
    weak)`` in ``avals``, and the outputs ``fn(*inputs)``: derived operators (a transposed
    matvec, a Jacobian, an augmented ODE)."""
    frame = TraceFrame()
    with trace_frame(frame):
        ins = [] if graph is None else [frame.input_like(graph, k) for k in range(len(graph.inputs))]
        ins += [frame.new_input(s, d, f"in{k}", w) for k, (s, d, w) in enumerate(avals)]
        outs = fn(*ins)
        built = frame.build([frame.operand(o) for o in outs])
    return simplify(built)


def apply_jvp(graph, args, tangents):
    """Tangents of the outputs of ``graph`` at ``args`` (tangents may be ``Zero``/None)."""
    mask = [not is_zero(t) for t in tangents]
    if not any(mask):
        return [Zero(s, d) for s, d in graph.out_avals]
    outs = inline(jvp_graph(graph, mask), list(args) + [t for t in tangents if not is_zero(t)])
    return outs[len(graph.outputs):]


def apply_vjp(graph, args, cts, wrt):
    """Cotangents of inputs ``wrt`` of ``graph`` at ``args`` for output cotangents ``cts``."""
    cts = [materialize(c, s, d) for c, (s, d) in zip(cts, graph.out_avals)]
    outs = inline(vjp_graph(graph, list(wrt), ["input"] * len(cts)), list(args) + cts)
    return outs[len(graph.outputs):]


def batch_sub(graph, flags, size):
    """``graph`` batched over its inputs with ``flags``; every output batched."""
    return batch_graph(graph, list(flags), size, [True] * len(graph.outputs))[0]


def lead(x, size):
    """``x`` with a new leading axis of ``size`` (an operand that vmap did not batch)."""
    return ops.broadcast_to(x, (size,) + tuple(x.shape))


class _Numpy:
    """The iterations on ndarrays: a solver primitive's reference."""

    where = staticmethod(np.where)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    sqrt = staticmethod(np.sqrt)
    abs = staticmethod(np.abs)
    logical_and = staticmethod(np.logical_and)
    equal = staticmethod(np.equal)

    @staticmethod
    def lane_sum(x, nbatch):
        return np.sum(x, axis=tuple(range(nbatch, x.ndim)), keepdims=True)

    @staticmethod
    def lane_max(x, nbatch):
        return np.max(x, axis=tuple(range(nbatch, x.ndim)), keepdims=True, initial=0.0)

    @staticmethod
    def apply(graph, *args):
        return evaluate(graph, [np.asarray(a) for a in args])

    @staticmethod
    def while_loop(cond, body, state):
        while bool(np.any(cond(state))):
            state = body(state)
        return state

    @staticmethod
    def fori_loop(lower, upper, body, state):
        for i in range(lower, upper):
            state = body(np.float64(i), state)
        return state

    @staticmethod
    def row(x, i):
        return x[int(i)]

    @staticmethod
    def add_row(x, i, v):
        x = np.array(x)
        x[int(i)] += v
        return x

    @staticmethod
    def set_row(x, i, v):
        x = np.array(x)
        x[int(i)] = v
        return x

    @staticmethod
    def const(value):
        return value

    @staticmethod
    def zeros(shape, like):
        return np.zeros(shape, np.asarray(like).dtype)

    @staticmethod
    def solve(a, r):  # stacks [..., n, n] and [..., n]; NaN for a singular matrix
        from ..core.primitives import PRIMITIVES

        return PRIMITIVES["solve"].impl(a, r)

    @staticmethod
    def first_to_last(x):
        return np.moveaxis(x, 0, -1)

    @staticmethod
    def swap01(x):
        return np.swapaxes(x, 0, 1)

    @staticmethod
    def sum0(x):
        return np.sum(x, axis=0)

    @staticmethod
    def reshape(x, shape):
        return np.reshape(x, shape)


class _Traced:
    """The iterations as Quabla ops and loop regions: a solver primitive's expansion."""

    where = staticmethod(ops.where)
    maximum = staticmethod(ops.maximum)
    minimum = staticmethod(ops.minimum)
    sqrt = staticmethod(ops.sqrt)
    abs = staticmethod(ops.abs)
    logical_and = staticmethod(ops.logical_and)
    equal = staticmethod(ops.equal)  # arrays' ``==`` is identity, as for any Python object
    reshape = staticmethod(ops.reshape)

    @staticmethod
    def lane_sum(x, nbatch):
        axes = tuple(range(nbatch, x.ndim))
        return ops.sum(x, axis=axes, keepdims=True) if axes else x

    @staticmethod
    def lane_max(x, nbatch):
        axes = tuple(range(nbatch, x.ndim))
        return ops.max(x, axis=axes, keepdims=True) if axes else x

    @staticmethod
    def apply(graph, *args):
        return inline(graph, list(args))

    @staticmethod
    def while_loop(cond, body, state):
        from ..control import while_loop

        return while_loop(lambda s: ops.any(cond(s)), body, state)

    @staticmethod
    def fori_loop(lower, upper, body, state):
        from ..control import fori_loop

        return fori_loop(lower, upper, body, state)

    @staticmethod
    def row(x, i):
        return x[i]

    @staticmethod
    def add_row(x, i, v):
        from ..core.tracing import bind

        if not isinstance(i, Array):
            i = ops.weak_scalar(float(i), x.dtype)
        return bind("dynamic_update_add", x, i, ops.broadcast_to(ops.astype(v, x.dtype), x.shape[1:]))

    def set_row(self, x, i, v):
        return self.add_row(x, i, ops.subtract(v, x[i]))

    @staticmethod
    def const(value):
        return Tensor.wrap(np.array(value, order="C"), False)

    @staticmethod
    def zeros(shape, like):
        return Tensor.wrap(np.zeros(shape, like.dtype.numpy), False)

    @staticmethod
    def solve(a, r):
        return ops.squeeze(ops.solve(a, ops.expand_dims(r, -1)), -1)

    @staticmethod
    def first_to_last(x):
        return ops.transpose(x, tuple(range(1, x.ndim)) + (0,))

    @staticmethod
    def swap01(x):
        return ops.transpose(x, (1, 0) + tuple(range(2, x.ndim)))

    @staticmethod
    def sum0(x):
        return ops.sum(x, axis=0)


NUMPY, TRACED = _Numpy(), _Traced()
