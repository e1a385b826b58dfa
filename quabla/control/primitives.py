"""The region primitives: ``cond``, ``scan`` and ``while``, each one rule table.

A region is one multi-result IR node whose params hold its sub-graphs:

- ``cond``: operands ``(pred, *operands)``; ``true_fun``/``false_fun`` each map the operands to
  the results.
- ``scan``: operands ``(*init, *consts)``; ``body`` maps ``(i, *carry, *consts)`` to
  ``(*carry, *ys)`` for ``i = lower, ..., lower + length - 1`` (in reverse order if
  ``reverse``); results are the final carry and each ``y`` stacked with its row ``i - lower``.
  ``fori_loop`` with static bounds is a scan without ``ys``.
- ``while``: operands ``(*init, *consts)``; ``cond_fun`` maps ``(*carry, *consts)`` to a bool
  scalar, ``body`` maps them to the next carry.

The loop index is a weak float64 scalar (Quabla has no integer dtype). The NumPy references
below run the sub-graphs with the interpreter; JVP/VJP rules are in ``autodiff.py``, batching
rules in ``batching.py``, the rewriter's pruning and merging rules in ``rewriting.py``.
"""

import numpy as np

from .. import dtypes as _dt
from ..core.dependence import loop_closure, output_dependence
from ..core.interpret import evaluate
from ..core.primitives import Primitive, register
from . import autodiff, batching, rewriting  # noqa: F401  (rewriting: the rewriter's rules)

__all__ = ["INDEX_DTYPE"]

INDEX_DTYPE = _dt.float64  # the loop index: a weak scalar, as a Python int would be


def _evaluate(graph, args):
    return evaluate(graph, list(args))


def _weak_avals(graph, outputs=None):
    outputs = graph.outputs if outputs is None else outputs
    return [(graph.nodes[o].shape, graph.nodes[o].dtype, graph.nodes[o].weak) for o in outputs]


def _operand_avals(args):
    return [(tuple(a.shape), a.dtype, a.weak) for a in args]


def _check_operands(op, graph, operands, first=0):
    """A region's operands must fit its sub-graph's inputs (from input ``first`` on): a rule
    that wires them wrongly fails here, where it binds, not when the loop runs."""
    wanted = [(g.shape, g.dtype) for g in (graph.nodes[i] for i in graph.inputs[first:])]
    given = [(tuple(a.shape), a.dtype) for a in operands]
    if wanted != given:
        raise ValueError(f"{op}: operands {given} do not fit the sub-graph's inputs {wanted}")


# -- cond ---------------------------------------------------------------------------------------

def _cond_shape(pred, *operands, true_fun, false_fun):
    _check_operands("cond", true_fun, operands)
    _check_operands("cond", false_fun, operands)
    return [(s, d, wt and wf) for (s, d, wt), (_, _, wf)
            in zip(_weak_avals(true_fun), _weak_avals(false_fun))]


def _cond_impl(pred, *operands, true_fun, false_fun):
    return _evaluate(true_fun if bool(pred) else false_fun, operands)


def _cond_dependence(*, true_fun, false_fun):
    """A result depends on the operands either branch reads for it (the predicate has no
    derivative)."""
    return [[1 + k for k in sorted(t | f)] for t, f in
            zip(output_dependence(true_fun), output_dependence(false_fun))]


register(Primitive(
    "cond", shape_rule=_cond_shape, impl=_cond_impl, jvp=autodiff.cond_jvp,
    vjp=autodiff.cond_vjp, batch=batching.cond_batch, multiple_results=True, foldable=False,
    dependence=_cond_dependence, vjp_wanted=True,
))


# -- scan ---------------------------------------------------------------------------------------

def _scan_shape(*operands, body, length, lower, reverse, n_carry):
    _check_operands("scan", body, operands, first=1)
    carry = _operand_avals(operands[:n_carry])
    ys = [((length,) + tuple(s), d, w) for s, d, w in _weak_avals(body, body.outputs[n_carry:])]
    return carry + ys


def _scan_impl(*operands, body, length, lower, reverse, n_carry):
    carry, consts = list(operands[:n_carry]), list(operands[n_carry:])
    ys = [np.empty((length,) + s, d.numpy) for s, d, _ in
          _weak_avals(body, body.outputs[n_carry:])]
    for k in (range(length - 1, -1, -1) if reverse else range(length)):
        outs = _evaluate(body, [np.asarray(float(lower + k))] + carry + consts)
        carry = outs[:n_carry]
        for stack, y in zip(ys, outs[n_carry:]):
            stack[k] = y
    return carry + ys


def _scan_dependence(*, body, length, lower, reverse, n_carry):
    return [sorted(d) for d in loop_closure(output_dependence(body), 1, n_carry)]


register(Primitive(
    "scan", shape_rule=_scan_shape, impl=_scan_impl, jvp=autodiff.scan_jvp,
    vjp=autodiff.scan_vjp, batch=batching.scan_batch, multiple_results=True, foldable=False,
    dependence=_scan_dependence, vjp_wanted=True,
))


# -- while --------------------------------------------------------------------------------------

def _while_shape(*operands, cond_fun, body, n_carry):
    _check_operands("while", cond_fun, operands)
    _check_operands("while", body, operands)
    return _operand_avals(operands[:n_carry])


def _while_impl(*operands, cond_fun, body, n_carry):
    carry, consts = list(operands[:n_carry]), list(operands[n_carry:])
    while bool(_evaluate(cond_fun, carry + consts)[0]):
        carry = _evaluate(body, carry + consts)
    return carry


def _while_dependence(*, cond_fun, body, n_carry):
    return [sorted(d) for d in loop_closure(output_dependence(body), 0, n_carry)]


register(Primitive(
    "while", shape_rule=_while_shape, impl=_while_impl, jvp=autodiff.while_jvp,
    vjp=autodiff.while_vjp, batch=batching.while_batch, multiple_results=True, foldable=False,
    dependence=_while_dependence, vjp_wanted=True,
))
