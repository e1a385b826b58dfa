"""What every transform shares: tracing the user function, the ``Transform`` protocol that
``Staged`` drives, and the layout of differentiated arguments (``argnums``).

The transforms themselves are in ``jit.py``, ``grad.py``, ``jvp_vjp.py``, ``vmap.py`` and
``jacobian.py``.
"""

import numbers

import numpy as np

from .. import dtypes, tree
from ..array import Array, asarray
from ..core.tracing import TraceFrame, trace_frame
from ..ops import weak_scalar
from .signature import PYTHON_SCALARS, Aval
from .staged import function_name

__all__ = ["Traced", "trace_function", "Transform", "arg_ranges", "argnum_leaves",
           "normalize_argnums", "graph_inputs"]


class Traced:
    """A traced function: its graph, the output structure and the captured outer tracers."""

    __slots__ = ("graph", "out_tree", "captures", "n_args")

    def __init__(self, graph, out_tree, captures, n_args):
        self.graph = graph
        self.out_tree = out_tree
        self.captures = captures
        self.n_args = n_args


def trace_function(fun, treedef, template, name="f"):
    """Trace ``fun(*treedef.unflatten(leaves))`` where ``template`` holds an ``Aval`` for each
    array leaf and the value of each static leaf. Graph inputs: the array leaves, then one
    input per captured outer tracer."""
    frame = TraceFrame()
    n_args = 0
    with trace_frame(frame):
        leaves = []
        for leaf in template:
            if type(leaf) is Aval:
                leaves.append(
                    frame.new_input(leaf.shape, leaf.dtype, f"arg{n_args}", leaf.weak))
                n_args += 1
            else:
                leaves.append(leaf)
        args = treedef.unflatten(leaves)
        out = fun(*args)
        out_leaves, out_tree = tree.flatten(out)
        outputs = []
        for leaf in out_leaves:
            if isinstance(leaf, PYTHON_SCALARS):
                leaf = weak_scalar(leaf, dtypes.bool_ if isinstance(leaf, bool) else dtypes.float64)
            elif isinstance(leaf, np.ndarray):
                leaf = asarray(leaf)
            elif not isinstance(leaf, Array):
                raise TypeError(
                    f"{name} returned a {type(leaf).__name__} leaf; transformed functions must "
                    "return arrays, Python numbers or pytrees of them"
                )
            outputs.append(frame.operand(leaf))
    graph = frame.build(outputs)
    return Traced(graph, out_tree, list(frame.captures), n_args)


class Transform:
    """How a transform turns the traced user function into its graph and its result.

    ``trace(fun, treedef, template)`` traces the function (a ``Traced``); ``stage(traced,
    treedef, template)`` transforms it into ``(graph, assemble)``: a graph whose inputs are the
    dynamic leaves followed by one capture input per ``traced.captures``, in that order, and a
    function that builds the user-visible result from the graph's outputs. The two are separate
    so that a closure over tracers can be traced again, cheaply, to find its captures.
    ``differentiated(treedef)`` names the leaves where Python scalars become float64 arrays.
    """

    def name(self, inner):
        return inner

    def differentiated(self, treedef):
        return frozenset()

    def trace(self, fun, treedef, template):
        return trace_function(fun, treedef, template, function_name(fun))

    def stage(self, traced, treedef, template):
        raise NotImplementedError


def arg_ranges(treedef):
    """Leaf index ranges of each positional argument of an argument tuple (and the arguments'
    trees): grad's and jacobian's layout of the differentiated leaves."""
    ranges, start = [], 0
    for child in treedef.children():
        ranges.append(range(start, start + child.num_leaves))
        start += child.num_leaves
    return ranges, treedef.children()


def argnum_leaves(argnums, treedef):
    """The leaves of the arguments ``argnums`` (negative ones count from the end); an argnum
    naming no argument is a ValueError, found before anything is traced."""
    ranges, _ = arg_ranges(treedef)
    for a in argnums:
        if not -len(ranges) <= a < len(ranges):
            raise ValueError(
                f"argnums {a} is out of range for a function called with {len(ranges)} arguments"
            )
    return frozenset(i for a in argnums for i in ranges[a])


def normalize_argnums(argnums):
    """``(argnums as a tuple, whether it was one int)``, for grad and jacobian."""
    if isinstance(argnums, numbers.Integral) and not isinstance(argnums, bool):
        return (int(argnums),), True
    if isinstance(argnums, tuple) and all(isinstance(a, numbers.Integral) for a in argnums):
        if not argnums:
            raise ValueError("argnums must not be empty")
        return tuple(int(a) for a in argnums), False
    raise TypeError(f"argnums must be an int or a tuple of ints, got {argnums!r}")


def graph_inputs(template):
    """``{leaf index: graph input}`` of the array leaves of ``template``: the traced graph
    takes them as its first inputs, in order."""
    arrays = [i for i, leaf in enumerate(template) if type(leaf) is Aval]
    return {i: k for k, i in enumerate(arrays)}
