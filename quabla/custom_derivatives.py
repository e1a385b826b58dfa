"""Functions whose derivatives the user writes: ``custom_jvp`` and ``custom_vjp``, with JAX's
decorator API (``defjvp``, ``defjvps``, ``defvjp``, ``nondiff_argnums``).

Called eagerly, the function simply runs. Called on tracers (under ``jit``, ``grad``,
``vmap``...), the function and its rules are traced into sub-graphs and one primitive is bound,
whose rules are the user's:

- ``custom_jvp_call``: operands ``(*args, *captures of fun, *captures of the rule)``; params
  ``fun`` (the function's graph), ``jvp`` (the rule's graph over the primals and their
  tangents, returning the primal and tangent results), ``n_args``, ``n_fun_captures``. JVP:
  the rule, inlined. VJP: the rule's tangent results are linear in its tangent inputs, so the
  cotangents are the VJP of the rule's graph with respect to those inputs (JAX transposes the
  rule the same way). Batching: both graphs batched. The rule is used for the first
  derivative; higher ones differentiate the rule, as in JAX.
- ``custom_vjp_call``: operands ``(*args, *captures)``; params ``fwd`` (the arguments to the
  results and the residuals: the node's results are both), ``bwd`` (the residuals and the
  results' cotangents to one cotangent per argument), ``n_args``, ``n_out``. VJP: ``bwd`` on
  the residuals the node computed. Forward mode is a ``TypeError``, as in JAX. Under a
  transform the primal results are ``fwd``'s.

Both expand to their function's graph before lowering (``core.expand``), so back ends never
meet them. A value the function closes over carries no derivative through the user's rule:
differentiating with respect to one is a ``TypeError`` (JAX's rule too). The function called
by its own rules (``fwd`` returning ``f(x)``, a JVP rule computing ``f(x)``) runs as it is:
a derivative of the rule's graph (a second derivative) differentiates that call as written,
where JAX would apply the custom rule again.
"""

import contextlib
import functools
import inspect
import threading

from . import ops, tree
from .control.regions import as_leaf, avals, graph_input, trace_body, traced
from .core.interpret import evaluate
from .core.primitives import Primitive, Zero, is_zero, register
from .core.tracing import TraceTensor, bind, current_frames
from .transforms.batching import batch_graph
from .transforms.inline import inline
from .transforms.jvp import materialize
from .transforms.vjp import vjp_graph

__all__ = ["custom_jvp", "custom_vjp"]

_CLOSED_OVER = ("{kind} function {name} is differentiated with respect to a value it closes "
                "over; its rule only gives derivatives with respect to its arguments: pass the "
                "value as an argument")


# -- the user-facing decorators -----------------------------------------------------------------

class _Custom:
    """What both decorators share: argument binding, ``nondiff_argnums``, eager calls."""

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(sorted(set(nondiff_argnums)))

    def _split(self, args, kwargs):
        """``(static args, differentiable args)`` of a call, keywords bound to positions."""
        if kwargs:
            args = inspect.signature(self.fun).bind(*args, **kwargs).args
        n = len(args)
        for k in self.nondiff_argnums:
            if not -n <= k < n:
                raise ValueError(f"nondiff_argnums {k} is out of range for {n} arguments")
        static = {k % n for k in self.nondiff_argnums}
        return ([args[k] for k in sorted(static)],
                [a for k, a in enumerate(args) if k not in static], static)

    def _call_with(self, fun, static, static_pos, diff):
        """``fun`` called with the static arguments back in their positions."""
        args, it_s, it_d = [], iter(static), iter(diff)
        for k in range(len(static) + len(diff)):
            args.append(next(it_s) if k in static_pos else next(it_d))
        return fun(*args)

    def _traced(self, leaves):
        """Whether a call traces its rules: it is traced, and not made by its own rules (a
        rule calling the function, as ``fwd`` usually does, runs the function as it is)."""
        return (current_frames() or any(type(x) is TraceTensor for x in leaves)) \
            and id(self) not in _in_rules()

    @contextlib.contextmanager
    def _rules(self):
        active = _in_rules()
        active.add(id(self))
        try:
            yield
        finally:
            active.discard(id(self))

    def _name(self):
        return getattr(self.fun, "__name__", repr(self.fun))

    def __call__(self, *args, **kwargs):
        """Eagerly (or from its own rules) the function as it is; traced, ``_bind``."""
        static, diff, static_pos = self._split(args, kwargs)
        name = f"{self._kind} function {self._name()}"
        leaves, in_tree = tree.flatten(diff)
        leaves = [as_leaf(x, f"an argument of {name}") for x in leaves]
        if not self._traced(leaves):
            return self._call_with(self.fun, static, static_pos, in_tree.unflatten(leaves))
        if not self._has_rules():
            raise AttributeError(f"no rule defined for {name}: define one with {self._define}")
        return self._bind(static, diff, static_pos, leaves, in_tree, name)


_local = threading.local()


def _in_rules():
    """The custom functions whose rules this thread is tracing."""
    if not hasattr(_local, "active"):
        _local.active = set()
    return _local.active


class custom_jvp(_Custom):
    """A function with a user-defined JVP: ``f = custom_jvp(fun)`` then ``@f.defjvp`` on
    ``rule(primals, tangents) -> (primal_out, tangent_out)`` (with ``nondiff_argnums``, the
    rule takes those arguments first)."""

    jvp = None
    _kind, _define = "custom_jvp", "defjvp"

    def _has_rules(self):
        return self.jvp is not None

    def defjvp(self, jvp):
        self.jvp = jvp
        return jvp

    def defjvps(self, *jvps):
        """One rule per argument, ``jvp_k(tangent_k, primal_out, *primals) -> tangent``
        contribution (None: no contribution); their sum is the tangent."""
        def rule(primals, tangents):
            out = self.fun(*primals)
            total = None
            for jvp_k, t in zip(jvps, tangents):
                if jvp_k is None:
                    continue
                term = jvp_k(t, out, *primals)
                total = term if total is None else tree.map(ops.add, total, term)
            return out, total if total is not None else tree.map(_zeros, out)
        self.jvp = rule
        return rule

    def _bind(self, static, diff, static_pos, leaves, in_tree, name):
        body = trace_body(lambda *a: self._call_with(self.fun, static, static_pos, a),
                          in_tree.unflatten(leaves), name)
        tangent_avals = [_Example(x.shape, x.dtype) for x in leaves]

        def rule(*flat):
            primals = in_tree.unflatten(list(flat[:len(leaves)]))
            tangents = in_tree.unflatten(list(flat[len(leaves):]))
            result = self.jvp(*static, primals, tangents)
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise TypeError(f"the JVP rule of {name} must return (primal_out, tangent_out)")
            return _checked_pair(result, body, name)

        with self._rules():
            rule_body = trace_body(rule, leaves + tangent_avals, f"the JVP rule of {name}")
        outs = bind("custom_jvp_call", *leaves, *body.captures, *rule_body.captures,
                    fun=body.graph, jvp=rule_body.graph, n_args=len(leaves),
                    n_fun_captures=len(body.captures), name=name)
        return body.out_tree.unflatten(outs)


def _checked_pair(result, body, name):
    """The rule's ``(primal_out, tangent_out)`` as one flat list, checked against ``fun``'s
    results: the same structure, shapes and dtypes."""
    primal, tangent = result
    flat = []
    for part, what in ((primal, "primal output"), (tangent, "tangent output")):
        leaves, treedef = tree.flatten(part)
        if treedef != body.out_tree:
            raise TypeError(f"the JVP rule of {name} returns a {what} of structure {treedef}; "
                            f"the function returns {body.out_tree}")
        leaves = [as_leaf(x, f"the JVP rule of {name}") for x in leaves]
        for x, (shape, dtype) in zip(leaves, body.graph.out_avals):
            if tuple(x.shape) != tuple(shape) or x.dtype is not dtype and not x.weak:
                raise TypeError(f"the JVP rule of {name} returns a {what} of shape "
                                f"{list(x.shape)} and dtype {x.dtype.name} where the function "
                                f"returns shape {list(shape)} and dtype {dtype.name}")
        flat += [x if x.dtype is d else ops.astype(x, d)
                 for x, (_, d) in zip(leaves, body.graph.out_avals)]
    return flat


class custom_vjp(_Custom):
    """A function with a user-defined VJP: ``f = custom_vjp(fun)``, then
    ``f.defvjp(fwd, bwd)`` with ``fwd(*args) -> (out, residuals)`` and
    ``bwd(residuals, out_cotangent) -> (one cotangent per argument, or None)``. With
    ``nondiff_argnums``, ``bwd`` takes those arguments first."""

    fwd = bwd = None
    _kind, _define = "custom_vjp", "defvjp"

    def _has_rules(self):
        return self.fwd is not None

    def defvjp(self, fwd, bwd):
        self.fwd, self.bwd = fwd, bwd

    def _bind(self, static, diff, static_pos, leaves, in_tree, name):
        trees = {}

        def forward(*a):
            result = self._call_with(self.fwd, static, static_pos, a)
            if not (isinstance(result, (tuple, list)) and len(result) == 2):
                raise TypeError(f"the fwd rule of {name} must return (output, residuals)")
            out, res = result
            out_leaves, trees["out"] = tree.flatten(out)
            res_leaves, trees["res"] = tree.flatten(res)
            trees["n_out"] = len(out_leaves)
            return out_leaves + res_leaves

        with self._rules():
            fwd = trace_body(forward, in_tree.unflatten(leaves), f"the fwd rule of {name}")
        n_out = trees["n_out"]
        out_avals = fwd.graph.out_avals

        def backward(*flat):
            res = trees["res"].unflatten(list(flat[:len(out_avals) - n_out]))
            ct = trees["out"].unflatten(list(flat[len(out_avals) - n_out:]))
            cts = self.bwd(*static, res, ct)
            if not isinstance(cts, (tuple, list)) or len(cts) != len(diff):
                raise TypeError(f"the bwd rule of {name} must return a tuple of {len(diff)} "
                                f"cotangents (one per argument), got {type(cts).__name__}")
            return _cotangents(cts, diff, leaves, name)

        examples = [_Example(s, d) for s, d in out_avals[n_out:] + out_avals[:n_out]]
        with self._rules():
            bwd = trace_body(backward, examples, f"the bwd rule of {name}")
        if bwd.captures:
            raise TypeError(f"the bwd rule of {name} closes over traced values; pass what it "
                            "needs as residuals")
        outs = bind("custom_vjp_call", *leaves, *fwd.captures, fwd=fwd.graph, bwd=bwd.graph,
                    n_args=len(leaves), n_out=n_out, name=name)
        return trees["out"].unflatten(outs[:n_out])


class _Example:
    """A stand-in for an argument of a traced rule: ``trace_body`` reads its aval only."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype, self.weak = tuple(shape), dtype, False


def _zeros(x):
    return materialize(Zero(tuple(x.shape), x.dtype), tuple(x.shape), x.dtype)


def _cotangents(cts, diff, leaves, name):
    """``bwd``'s cotangents, one per argument (None: zero), flattened like the arguments."""
    flat = []
    for k, (ct, arg) in enumerate(zip(cts, diff)):
        arg_leaves, arg_tree = tree.flatten(arg)
        if ct is None:
            ct_leaves = [None] * len(arg_leaves)
        else:
            ct_leaves, ct_tree = tree.flatten(ct, is_leaf=lambda x: x is None)
            if ct_tree != arg_tree:
                raise TypeError(f"the bwd rule of {name} returns a cotangent of structure "
                                f"{ct_tree} for argument {k}, of structure {arg_tree}")
        flat += ct_leaves
    out = []
    for ct, x in zip(flat, leaves):
        if ct is None:
            out.append(_zeros(x))
            continue
        ct = as_leaf(ct, f"the bwd rule of {name}")
        if tuple(ct.shape) != tuple(x.shape):
            raise TypeError(f"the bwd rule of {name} returns a cotangent of shape "
                            f"{list(ct.shape)} for an argument of shape {list(x.shape)}")
        out.append(ct if ct.dtype is x.dtype else ops.astype(ct, x.dtype))
    return out


# -- custom_jvp_call ----------------------------------------------------------------------------

def _results(graph):
    return avals(graph.nodes[o] for o in graph.outputs)


def _jvp_call_shape(*operands, fun, jvp, n_args, n_fun_captures, name):
    return _results(fun)


def _jvp_call_impl(*operands, fun, jvp, n_args, n_fun_captures, name):
    return evaluate(fun, list(operands[:n_args + n_fun_captures]))


def _jvp_call_expand(*operands, fun, jvp, n_args, n_fun_captures, name):
    return inline(fun, list(operands[:n_args + n_fun_captures]))


def _dense(values, like):
    return [materialize(v, tuple(x.shape), x.dtype) for v, x in zip(values, like)]


def _jvp_call_jvp(primals, tangents, outs, *, fun, jvp, n_args, n_fun_captures, name):
    """The user's rule, inlined: its tangent results."""
    if any(not is_zero(t) for t in tangents[n_args:]):
        raise TypeError(_CLOSED_OVER.format(kind="custom_jvp", name=name))
    args = list(primals[:n_args])
    rule_captures = list(primals[n_args + n_fun_captures:])
    results = inline(jvp, args + _dense(tangents[:n_args], args) + rule_captures)[len(outs):]
    return [t if o.dtype.is_floating else Zero(tuple(o.shape), o.dtype)
            for t, o in zip(results, outs)]


def _jvp_call_vjp(cts, primals, outs, *, fun, jvp, n_args, n_fun_captures, name, wanted):
    """The transpose of the rule's tangent map: its VJP with respect to its tangent inputs
    (at zero tangents: the map is linear in them)."""
    if any(wanted[n_args:]):
        raise TypeError(_CLOSED_OVER.format(kind="custom_jvp", name=name))
    n_out = len(outs)
    ct_f = [not is_zero(c) and c.dtype.is_floating for c in cts]
    wrt = [n_args + k for k in range(n_args) if wanted[k] and primals[k].dtype.is_floating]
    if not any(ct_f) or not wrt:
        return [None] * len(primals)
    back = vjp_graph(jvp, wrt, [None] * n_out + ["input" if f else None for f in ct_f])
    args = list(primals[:n_args])
    grads = inline(back, args + [_zeros(x) for x in args]
                   + list(primals[n_args + n_fun_captures:])
                   + [c for c, f in zip(cts, ct_f) if f])[2 * n_out:]
    by_arg = dict(zip(wrt, grads))
    return [by_arg.get(n_args + k) for k in range(n_args)] + [None] * (len(primals) - n_args)


def _jvp_call_batch(args, batched, size, *, fun, jvp, n_args, n_fun_captures, name):
    """Both graphs batched alike: a result batched in the function or in the rule is batched
    in both (the rule's tangents are batched as their primals are)."""
    arg_b = list(batched[:n_args])
    fun_b = arg_b + list(batched[n_args:n_args + n_fun_captures])
    rule_b = arg_b + arg_b + list(batched[n_args + n_fun_captures:])
    n_out = len(fun.outputs)
    _, f_out = batch_graph(fun, fun_b, size)
    _, r_out = batch_graph(jvp, rule_b, size)
    out_b = [f or p or t for f, p, t in zip(f_out, r_out[:n_out], r_out[n_out:])]
    new_fun, _ = batch_graph(fun, fun_b, size, out_mapped=out_b)
    new_jvp, _ = batch_graph(jvp, rule_b, size, out_mapped=out_b + out_b)
    outs = bind("custom_jvp_call", *args, fun=new_fun, jvp=new_jvp, n_args=n_args,
                n_fun_captures=n_fun_captures, name=name)
    return outs, out_b


register(Primitive(
    "custom_jvp_call", shape_rule=_jvp_call_shape, impl=_jvp_call_impl, jvp=_jvp_call_jvp,
    vjp=_jvp_call_vjp, batch=_jvp_call_batch, multiple_results=True, foldable=False,
    expand=_jvp_call_expand, vjp_wanted=True,
))


# -- custom_vjp_call ----------------------------------------------------------------------------

def _vjp_call_shape(*operands, fwd, bwd, n_args, n_out, name):
    return _results(fwd)


def _vjp_call_impl(*operands, fwd, bwd, n_args, n_out, name):
    return evaluate(fwd, list(operands))


def _vjp_call_expand(*operands, fwd, bwd, n_args, n_out, name):
    return inline(fwd, list(operands))


def _vjp_call_jvp(primals, tangents, outs, *, fwd, bwd, n_args, n_out, name):
    raise TypeError(f"can't apply forward-mode differentiation (jvp, jacfwd, hessian) to "
                    f"{name}: it defines a VJP only (use custom_jvp for forward mode)")


def _vjp_call_vjp(cts, primals, outs, *, fwd, bwd, n_args, n_out, name, wanted):
    """``bwd`` on the residuals this node computed and the results' cotangents."""
    if any(wanted[n_args:]):
        raise TypeError(_CLOSED_OVER.format(kind="custom_vjp", name=name))
    if all(is_zero(c) for c in cts[:n_out]):
        return [None] * len(primals)
    grads = inline(bwd, list(outs[n_out:]) + _dense(cts[:n_out], outs[:n_out]))
    return [g if wanted[k] and primals[k].dtype.is_floating else None
            for k, g in enumerate(grads)] + [None] * (len(primals) - n_args)


def _vjp_call_batch(args, batched, size, *, fwd, bwd, n_args, n_out, name):
    """``fwd`` batched; ``bwd`` batched over its residuals and cotangents, each argument's
    cotangent batched as the argument is (summed over the lanes for a shared argument)."""
    new_fwd, out_b = batch_graph(fwd, list(batched), size)
    arg_b = list(batched[:n_args])
    bwd_in = out_b[n_out:] + out_b[:n_out]
    _, grad_b = batch_graph(bwd, bwd_in, size)
    back, _ = batch_graph(bwd, bwd_in, size, out_mapped=arg_b)
    if any(g and not a for g, a in zip(grad_b, arg_b)):
        def summed(xs):
            return [ops.sum(g, axis=0) if gb and not ab else g
                    for g, gb, ab in zip(inline(back, xs), grad_b, arg_b)]
        back = traced([graph_input(back, k) for k in range(len(back.inputs))], summed)
    outs = bind("custom_vjp_call", *args, fwd=new_fwd, bwd=back, n_args=n_args, n_out=n_out,
                name=name)
    return outs, out_b


register(Primitive(
    "custom_vjp_call", shape_rule=_vjp_call_shape, impl=_vjp_call_impl, jvp=_vjp_call_jvp,
    vjp=_vjp_call_vjp, batch=_vjp_call_batch, multiple_results=True, foldable=False,
    expand=_vjp_call_expand, vjp_wanted=True,
))
