"""The control-flow functions users call: ``cond``, ``switch``, ``fori_loop``, ``scan``,
``while_loop``.

Each traces its bodies (``regions.trace_body``), checks that carries keep their structure,
shapes and dtypes and that branches agree, hoists loop-invariant work out of loop bodies and
binds one region primitive (``cond.py``, ``scan.py``, ``while_.py``). A weak-typed carry (a
Python number) adopts the dtype its body gives it, as in JAX.
"""

import numpy as np

from .. import dtypes as _dt
from .. import ops, tree
from ..array import Array, as_index
from ..core.tracing import TraceTensor, bind
from ..transforms.inline import inline
from .regions import as_leaf, aval, avals, aval_texts, hoist, trace_body, with_inputs
from .scan import INDEX_DTYPE

__all__ = ["cond", "switch", "fori_loop", "scan", "while_loop"]


def _leaves(value, what):
    leaves, treedef = tree.flatten(value)
    return [as_leaf(leaf, what) for leaf in leaves], treedef


def _index_template():
    return ops.weak_scalar(0.0, INDEX_DTYPE)


# -- cond ---------------------------------------------------------------------------------------

def cond(pred, true_fun, false_fun, *operands):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``.

    A concrete predicate (a Python bool, an eager array) calls one branch. A traced one
    becomes a ``cond`` region; both branches must return the same structure, shapes and
    dtypes. A floating predicate is true where it is nonzero."""
    pred = as_leaf(pred, "cond's predicate")
    if pred.shape != ():
        raise TypeError(f"cond: the predicate must be a scalar, got shape {list(pred.shape)}")
    if not isinstance(pred, TraceTensor):
        return (true_fun if bool(np.asarray(pred)) else false_fun)(*operands)
    if pred.dtype is not _dt.bool_:
        pred = ops.not_equal(pred, 0)
    leaves, in_tree = _leaves(operands, "cond's operands")
    args = in_tree.unflatten(leaves)
    branches = [trace_body(fun, args, f"cond's {name}") for fun, name in
                ((true_fun, "true_fun"), (false_fun, "false_fun"))]
    branches = _agree(branches, true_fun, false_fun, args)
    t, f = branches
    n = len(leaves)
    true_graph = with_inputs(t.graph, avals(f.captures), n + len(t.captures))
    false_graph = with_inputs(f.graph, avals(t.captures), n)
    outs = bind("cond", pred, *leaves, *t.captures, *f.captures,
                true_fun=true_graph, false_fun=false_graph)
    return t.out_tree.unflatten(outs)


def switch(index, branches, *operands):
    """``branches[index](*operands)``, the index clamped to the branches (JAX's
    ``lax.switch``). A concrete index calls one branch (one that is not a whole number is a
    ``TypeError``, as any index); a traced one becomes ``cond`` regions halving the branches
    at each level, and a fractional traced index is rounded down, as in indexing."""
    branches = list(branches)
    if not branches:
        raise ValueError("switch needs at least one branch")
    index = as_leaf(index, "switch's index")
    if index.shape != ():
        raise TypeError(f"switch: the index must be a scalar, got shape {list(index.shape)}")
    if not isinstance(index, TraceTensor):
        value = float(np.asarray(index.value))
        if not value.is_integer():
            raise TypeError(f"switch: the index {value} is not a whole number")
        return branches[min(max(int(value), 0), len(branches) - 1)](*operands)
    if index.dtype is _dt.bool_:
        index = ops.astype(index, _dt.float64)
    return _switch(index, branches, 0, operands)


def _switch(index, branches, first, operands):
    """The branch of ``index`` among ``branches`` (numbered from ``first``)."""
    if len(branches) == 1:
        return branches[0](*operands)
    half = len(branches) // 2
    return cond(ops.less(index, first + half),
                lambda *o: _switch(index, branches[:half], first, o),
                lambda *o: _switch(index, branches[half:], first + half, o), *operands)


def _agree(branches, true_fun, false_fun, args):
    """Both branches with the same results; a weak Python number adopts the other's dtype."""
    t, f = branches
    if t.out_tree != f.out_tree:
        raise TypeError(f"cond: true_fun returns {t.out_tree} but false_fun returns {f.out_tree}")
    ta, fa = t.out_avals, f.out_avals
    tw = [t.graph.nodes[o].weak for o in t.graph.outputs]
    fw = [f.graph.nodes[o].weak for o in f.graph.outputs]
    cast_t, cast_f = [None] * len(ta), [None] * len(fa)
    for k, ((ts, td), (fs, fd)) in enumerate(zip(ta, fa)):
        if ts != fs or (td is not fd and not (tw[k] or fw[k])):
            raise TypeError(f"cond: the branches' results differ: true_fun returns "
                            f"{aval_texts(ta)} but false_fun returns {aval_texts(fa)}")
        if td is not fd:
            (cast_t if tw[k] else cast_f)[k] = fd if tw[k] else td
    if any(cast_t):
        t = trace_body(true_fun, args, "cond's true_fun", cast=cast_t)
    if any(cast_f):
        f = trace_body(false_fun, args, "cond's false_fun", cast=cast_f)
    return [t, f]


# -- carries ------------------------------------------------------------------------------------

def _trace_carried(trace, init, carry_tree, what):
    """Trace a loop part with ``trace(init_leaves, cast)`` -> (Body, carry_out_avals, out_tree,
    out weak flags); retrace until the carry keeps its avals: a weak result adopts the
    carry's dtype, a weak init adopts the result's."""
    cast = None
    for _ in range(3):
        body, out_tree, out_avals, out_weak = trace(init, cast)
        if out_tree != carry_tree:
            raise TypeError(f"{what}: the carry changes structure: it starts as {carry_tree} "
                            f"but the body returns {out_tree}")
        in_avals = [aval(x) for x in init]
        if out_avals == in_avals:
            return body, init
        new_init, cast = list(init), [None] * len(init)
        for k, ((s_in, d_in), (s_out, d_out)) in enumerate(zip(in_avals, out_avals)):
            if s_in != s_out or (d_in is not d_out and not (out_weak[k] or init[k].weak)):
                raise TypeError(f"{what}: the carry changes shape or dtype: it starts as "
                                f"{aval_texts(in_avals)} but the body returns "
                                f"{aval_texts(out_avals)}")
            if d_in is not d_out:
                if out_weak[k]:
                    cast[k] = d_in
                else:
                    new_init[k] = ops.astype(init[k], d_out)
        init = new_init
    raise TypeError(f"{what}: the carry's dtypes do not settle")  # pragma: no cover


def _result_avals(body, outputs):
    nodes = body.graph.nodes
    return [aval(nodes[o]) for o in outputs], [nodes[o].weak for o in outputs]


# -- scan / fori_loop ---------------------------------------------------------------------------

def scan(f, init, *, length, operands=(), unroll=False, reverse=False):
    """``f(carry, i, *operands) -> (carry, y)`` for ``i = 0, ..., length - 1`` (from the last
    down with ``reverse=True``); returns the final carry and the ``y``s stacked on a new
    leading axis, row ``i`` holding step ``i``'s (in either direction, as in JAX). ``i`` is a
    float64 scalar array; ``xs[i]`` reads row ``i`` of an array. ``unroll``: ``True`` inlines
    every step instead of compiling a loop, an integer ``k`` runs ``k`` steps per iteration."""
    return _scan(lambda carry, i, ops_: f(carry, i, *ops_), init, as_index(length), 0,
                 operands, unroll, reverse, "scan")


def fori_loop(lower, upper, body_fun, init_val, *, operands=(), unroll=False):
    """``body_fun(i, carry, *operands) -> carry`` for ``i`` from ``lower`` to ``upper - 1``.
    Static bounds compile a counted loop (reverse-mode differentiable; ``unroll`` as for
    ``scan``); traced bounds make it a ``while_loop``."""
    bounds = [as_leaf(b, "fori_loop's bound") if not isinstance(b, (int, np.integer)) else b
              for b in (lower, upper)]
    if any(isinstance(b, TraceTensor) for b in bounds):
        if _unroll_steps(unroll, 2, "fori_loop") != 1:
            raise ValueError("fori_loop: unroll needs static bounds (Python ints); with traced "
                             "bounds the loop is a while_loop")
        return _traced_fori(bounds, body_fun, init_val, operands)
    lo, hi = (_static_bound(b) for b in bounds)
    carry, _ = _scan(lambda carry, i, ops_: (body_fun(i, carry, *ops_), ()), init_val,
                     max(hi - lo, 0), lo, operands, unroll, False, "fori_loop")
    return carry


def _static_bound(b):
    if isinstance(b, Array):
        value = float(np.asarray(b))
        if value != int(value):
            raise TypeError(f"fori_loop: a bound must hold an integer, got {value}")
        return int(value)
    return as_index(b)


def _traced_fori(bounds, body_fun, init_val, operands):
    """A ``while_loop`` over ``(i, carry)``. The bounds are indices: they carry no tangent
    and no cotangent (``stop_gradient``), so neither does ``i`` nor what is computed from it."""
    lower, upper = (ops.stop_gradient(ops.astype(as_leaf(b, "fori_loop's bound"), INDEX_DTYPE))
                    if isinstance(b, Array) else ops.weak_scalar(float(b), INDEX_DTYPE)
                    for b in bounds)
    _, carry = while_loop(lambda state: ops.less(state[0], upper),
                          lambda state: (ops.add(state[0], 1.0), body_fun(state[0], state[1], *operands)),
                          (lower, init_val))
    return carry


def _unroll_steps(unroll, length, what):
    """Steps per iteration, as JAX reads ``unroll``: ``True`` all of them, ``False`` one."""
    if isinstance(unroll, (bool, np.bool_)):
        return max(length, 1) if unroll else 1
    if not isinstance(unroll, (int, np.integer)) or unroll < 1:
        raise TypeError(f"{what}: unroll must be a bool or a positive int, got {unroll!r}")
    return int(unroll)


def _scan(f, init, length, lower, operands, unroll, reverse, what):
    if length < 0:
        raise ValueError(f"{what}: length must be >= 0, got {length}")
    steps = _unroll_steps(unroll, length, what)
    if 1 < steps < length:
        return _scan_blocks(f, init, length, lower, operands, steps, reverse, what)
    inline_all = unroll is True or unroll is np.True_ or steps > 1 or length == 0
    init_leaves, carry_tree = _leaves(init, f"{what}'s init")
    op_leaves, op_tree = _leaves(operands, f"{what}'s operands")
    op_args = op_tree.unflatten(op_leaves)
    n = len(init_leaves)
    shapes = {}

    def step(i, carry, ops_):
        out = f(carry, i, ops_)
        if not isinstance(out, tuple) or len(out) != 2:
            raise TypeError(f"{what}: the body must return a pair (carry, y), got "
                            f"{type(out).__name__}")
        shapes["carry"] = tree.structure(out[0])
        shapes["ys"] = tree.structure(out[1])
        return out

    def trace(init_now, cast):
        if cast is not None:  # the ys keep their dtypes
            cast = cast + [None] * shapes["ys"].num_leaves
        body = trace_body(step, (_index_template(), carry_tree.unflatten(init_now), op_args),
                          what, cast=cast)
        avals, weak = _result_avals(body, body.graph.outputs[:n])
        return body, shapes["carry"], avals, weak

    body, init_leaves = _trace_carried(trace, init_leaves, carry_tree, what)
    ys_tree = shapes["ys"]
    if length == 0 and ys_tree.num_leaves:
        raise ValueError(f"{what}: length 0 would stack zero-extent ys, which Quabla does not "
                         "support (every array has at least one element)")
    if inline_all:
        return _unrolled(body, init_leaves, op_leaves, length, lower, reverse, carry_tree,
                         ys_tree, n)
    graph, outer = hoist(body.graph, 1 + n)
    consts = inline(outer, op_leaves + body.captures)
    outs = bind("scan", *init_leaves, *consts, body=graph, length=length, lower=lower,
                reverse=reverse, n_carry=n)
    return carry_tree.unflatten(outs[:n]), ys_tree.unflatten(outs[n:])


def _unrolled(body, carry, op_leaves, length, lower, reverse, carry_tree, ys_tree, n):
    """Every step inlined: no region, so every transform and back end handles it as it is."""
    ys = [None] * length
    for k in (range(length - 1, -1, -1) if reverse else range(length)):
        i = ops.weak_scalar(float(lower + k), INDEX_DTYPE)
        outs = inline(body.graph, [i] + list(carry) + op_leaves + body.captures)
        carry, ys[k] = outs[:n], outs[n:]
    stacked = [ops.stack([step[j] for step in ys]) for j in range(ys_tree.num_leaves)]
    return carry_tree.unflatten(list(carry)), ys_tree.unflatten(stacked)


def _scan_blocks(f, init, length, lower, operands, steps, reverse, what):
    """``unroll=steps``: a loop whose body runs ``steps`` steps of ``f`` one after the other,
    then the ``length % steps`` steps left inlined (before the loop when ``reverse``)."""
    blocks, rest = divmod(length, steps)

    def block(carry, j, ops_):
        ys = [None] * steps
        for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
            carry, ys[t] = f(carry, ops.add(ops.multiply(j, float(steps)), float(lower + t)),
                             ops_)
        return carry, tree.map(lambda *rows: ops.stack(rows), *ys)

    def looped(carry):
        carry, ys = _scan(block, carry, blocks, 0, operands, False, reverse, what)
        return carry, tree.map(lambda y: ops.reshape(y, (blocks * steps,) + tuple(y.shape[2:])),
                               ys)

    def inlined(carry):
        return _scan(f, carry, rest, lower + blocks * steps, operands, True, reverse, what)

    if not rest:
        return looped(init)
    if reverse:
        carry, ys_rest = inlined(init)
        carry, ys = looped(carry)
    else:
        carry, ys = looped(init)
        carry, ys_rest = inlined(carry)
    return carry, tree.map(lambda y, r: ops.concat([y, r], axis=0), ys, ys_rest)


# -- while_loop ---------------------------------------------------------------------------------

def while_loop(cond_fun, body_fun, init_val):
    """Repeat ``carry = body_fun(carry)`` while ``cond_fun(carry)``; returns the final carry.
    Forward-mode differentiable; reverse mode raises (use ``fori_loop`` or ``scan``)."""
    init_leaves, carry_tree = _leaves(init_val, "while_loop's init_val")
    n = len(init_leaves)

    def trace(init_now, cast):
        body = trace_body(body_fun, (carry_tree.unflatten(init_now),), "while_loop's body_fun",
                          cast=cast)
        avals, weak = _result_avals(body, body.graph.outputs)
        return body, body.out_tree, avals, weak

    body, init_leaves = _trace_carried(trace, init_leaves, carry_tree, "while_loop")
    test = trace_body(cond_fun, (carry_tree.unflatten(init_leaves),), "while_loop's cond_fun")
    if test.out_tree.num_leaves != 1 or test.out_avals[0] != ((), _dt.bool_):
        raise TypeError(f"while_loop: cond_fun must return a bool scalar, got "
                        f"{aval_texts(test.out_avals)}")
    cond_graph, cond_outer = hoist(test.graph, n)
    body_graph, body_outer = hoist(body.graph, n)
    cond_consts = inline(cond_outer, test.captures)
    body_consts = inline(body_outer, body.captures)
    cond_graph = with_inputs(cond_graph, avals(body_consts), n + len(cond_consts))
    body_graph = with_inputs(body_graph, avals(cond_consts), n)
    outs = bind("while", *init_leaves, *cond_consts, *body_consts, cond_fun=cond_graph,
                body=body_graph, n_carry=n)
    return carry_tree.unflatten(outs)
