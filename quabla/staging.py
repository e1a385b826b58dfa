"""Staging: how a transformed function is traced, transformed, compiled, cached and called.

A ``Staged`` function flattens its arguments, computes a signature (pytree structure, per-leaf
shape and dtype, static values), and looks it up in a bounded LRU cache of compiled programs.
On a miss, its ``Transform`` traces the user function into a graph, transforms it graph to
graph, and the graph is lowered. Called on tracers (inside another transform), the staged
graph is inlined into the enclosing trace instead, which is how transforms compose.
"""

import logging
import os
import time
import warnings
import weakref
from collections import OrderedDict

import numpy as np

from . import tree
from .array import Array, Tensor, asarray
from .core.tracing import TraceFrame, TraceTensor, current_frames, trace_frame
from .errors import RetraceWarning
from .transforms import inline

__all__ = ["Staged", "Transform", "trace_function", "signature_text", "logger"]

logger = logging.getLogger("quabla")
if os.environ.get("QUABLA_LOG_COMPILES") and not logger.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("quabla: %(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(logging.INFO)

_PYTHON_SCALARS = (bool, int, float)


class _Aval:
    """A leaf of a signature: shape and dtype of an array argument."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = dtype

    def __repr__(self):
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


class _Text:
    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def signature_text(treedef, parts):
    """``(float64[3], {'w': float64[2, 1]}, 0.5)``: how signatures are shown to users."""
    return repr(treedef.unflatten(signature_leaves(parts)))


def signature_leaves(parts):
    """One printable placeholder per signature part: an aval or a static value."""
    from .dtypes import _BY_NUMPY

    leaves = []
    for part in parts:
        if part[0] == "static":
            value = part[2]
            leaves.append(_Text(repr(float.fromhex(value)) if part[1] is float else repr(value)))
        else:
            leaves.append(_Text(repr(_Aval(part[0], _BY_NUMPY[part[1]]))))
    return leaves


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _user_stacklevel():
    """The ``stacklevel`` that attributes a warning to the first caller outside quabla."""
    import sys

    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


class Traced:
    """A traced function: its graph, the output structure and the captured outer tracers."""

    __slots__ = ("graph", "out_tree", "captures", "n_args")

    def __init__(self, graph, out_tree, captures, n_args):
        self.graph = graph
        self.out_tree = out_tree
        self.captures = captures
        self.n_args = n_args


def trace_function(fun, treedef, template, name="f"):
    """Trace ``fun(*treedef.unflatten(leaves))`` where ``template`` holds an ``_Aval`` for each
    array leaf and the value of each static leaf. Graph inputs: the array leaves, then one
    input per captured outer tracer."""
    frame = TraceFrame()
    n_args = 0
    with trace_frame(frame):
        leaves = []
        for leaf in template:
            if type(leaf) is _Aval:
                leaves.append(frame.new_input(leaf.shape, leaf.dtype, f"arg{n_args}"))
                n_args += 1
            else:
                leaves.append(leaf)
        args = treedef.unflatten(leaves)
        out = fun(*args)
        out_leaves, out_tree = tree.flatten(out)
        outputs = []
        for leaf in out_leaves:
            if isinstance(leaf, _PYTHON_SCALARS):
                from .ops import _weak_scalar
                from . import dtypes

                leaf = _weak_scalar(leaf, dtypes.bool_ if isinstance(leaf, bool) else dtypes.float64)
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
        return trace_function(fun, treedef, template, _function_name(fun))

    def stage(self, traced, treedef, template):
        raise NotImplementedError


class _Entry:
    __slots__ = ("run", "assemble", "graph", "key")

    def __init__(self, run, assemble, graph, key):
        self.run = run
        self.assemble = assemble
        self.graph = graph
        self.key = key


_SHARED = weakref.WeakKeyDictionary()  # root function -> {transform chain: caches}


def _new_caches():
    """Programs, the all-Tensor fast path, inline graphs, differentiated leaves, and the
    signatures whose staging captured tracers (they are probed on every call)."""
    return OrderedDict(), {}, OrderedDict(), {}, OrderedDict()


def _avals(tracers):
    return tuple((tuple(t.shape), t.dtype) for t in tracers)


def _shared_caches(root, chain):
    """The caches of every ``Staged`` with this root function and transform chain, so that
    ``grad(f)`` re-created in a loop reuses the traces of ``f`` ("S2 as landed"). The root is
    held weakly and the caches hold no reference to it; None where it cannot be shared."""
    if chain is None:
        return None
    try:
        table = _SHARED.get(root)
        if table is None:
            table = _SHARED[root] = {}
        caches = table.get(chain)
    except TypeError:  # an unhashable config, or a callable without weak references
        return None
    if caches is None:
        caches = table[chain] = _new_caches()
    return caches


class Staged:
    """A transformed function: cached, compiled on first call per signature, inlined in traces.

    ``config`` (hashable) identifies the transform; with it, every Staged of the same root
    function and chain of configs shares one cache. ``root`` overrides ``fun`` as that root.
    """

    def __init__(self, fun, transform, max_traces=8, device=None, name=None, config=None,
                 root=None):
        if not callable(fun):
            raise TypeError(f"expected a callable, got {type(fun).__name__}")
        self.fun = fun
        self.transform = transform
        self.max_traces = int(max_traces)
        if self.max_traces < 1:
            raise ValueError("max_traces must be at least 1")
        self.device = device
        self.name = name or transform.name(_function_name(fun))
        base = fun if root is None else root
        inner = base.chain if isinstance(base, Staged) else ()
        self.root = base.root if isinstance(base, Staged) else base
        self.chain = None if config is None or inner is None else inner + (config,)
        caches = _shared_caches(self.root, self.chain) or _new_caches()
        # the fast path maps the signature of an all-Tensor argument list to its entry
        self._cache, self._flat, self._inline_cache, self._diff, self._probes = caches
        self.__wrapped__ = fun
        self.__doc__ = getattr(fun, "__doc__", None)

    def __repr__(self):
        return f"<{self.name}>"

    # -- the hot path --------------------------------------------------------------------------
    def __call__(self, *args):
        for a in args:
            if type(a) is not Tensor:
                break
        else:
            entry = self._flat.get(tuple([(a._value.shape, a._value.dtype) for a in args]))
            if entry is not None:
                self._cache.move_to_end(entry.key)
                outs = entry.run(*[a._value for a in args])
                return entry.assemble([_wrap(o) for o in outs])
        leaves, treedef = tree.flatten(args)
        diff = self._diff.get(treedef)
        if diff is None:
            diff = self._diff[treedef] = self.transform.differentiated(treedef)
        parts, dynamic, traced = _signature(leaves, diff)
        key = (treedef, parts)
        if not traced:
            entry = self._cache.get(key)
            if entry is not None:
                self._cache.move_to_end(key)
                self._remember_flat(args, entry)
                outs = entry.run(*[d._value for d in dynamic])
                return entry.assemble([_wrap(o) for o in outs])
        return self._miss(key, treedef, parts, leaves, dynamic, traced, args)

    def _remember_flat(self, args, entry):
        if all(type(a) is Tensor for a in args):
            self._flat[tuple([(a._value.shape, a._value.dtype) for a in args])] = entry

    # -- staging -------------------------------------------------------------------------------
    def _template(self, parts, leaves):
        from .dtypes import _BY_NUMPY

        return [
            leaf if part[0] == "static" else _Aval(part[0], _BY_NUMPY[part[1]])
            for part, leaf in zip(parts, leaves)
        ]

    def _stage(self, treedef, parts, leaves, traced=None):
        """Trace (unless a probe just did) and transform: ``(graph, assemble, captures)``."""
        start = time.perf_counter()
        template = self._template(parts, leaves)
        if traced is None:
            traced = self.transform.trace(self.fun, treedef, template)
        graph, assemble = self.transform.stage(traced, treedef, template)
        if logger.isEnabledFor(logging.INFO):
            logger.info("traced %s for %s in %.1f ms (%d ops)", self.name,
                        self.describe(treedef, parts), 1e3 * (time.perf_counter() - start),
                        graph.node_count())
        return graph, assemble, traced.captures

    def _miss(self, key, treedef, parts, leaves, dynamic, traced, args):
        if traced or (key in self._probes and current_frames()):
            return self._splice(key, treedef, parts, leaves, dynamic)
        staged = self._stage(treedef, parts, leaves)
        if staged[2]:  # it closes over tracers of a trace in progress: splice it in there
            return self._splice(key, treedef, parts, leaves, dynamic, staged)
        graph, assemble, _ = staged
        from lowering import compile as lower_compile

        start = time.perf_counter()
        executable = lower_compile(graph, self.device)
        if logger.isEnabledFor(logging.INFO):
            logger.info("compiled %s for %s in %.1f ms", self.name,
                        self.describe(treedef, parts), 1e3 * (time.perf_counter() - start))
        entry = _Entry(getattr(executable, "run", executable), assemble, graph, key)
        self._remember(self._cache, key, entry, treedef, parts)
        self._remember_flat(args, entry)
        outs = entry.run(*[d._value for d in dynamic])
        return assemble([_wrap(o) for o in outs])

    def _splice(self, key, treedef, parts, leaves, dynamic, staged=None):
        """Inline the staged graph into the trace in progress, staging it on a cache miss.

        A graph that captured nothing is cached per signature. Once a signature's staging has
        captured tracers, each call traces ``fun`` again without transforming it (the probe),
        because a closure can refer to a different tracer on every call (a rebound name, a
        mutated container); the graph is cached per signature and avals of the captures, and
        its capture inputs bind to this call's captures in the order the probe met them, the
        order the staging trace met them too. Cached graphs hold no tracers.
        """
        traced = None
        if staged is None:
            if key in self._probes:
                self._probes.move_to_end(key)
                traced = self.transform.trace(self.fun, treedef, self._template(parts, leaves))
                key = (key, _avals(traced.captures))
            cached = self._inline_cache.get(key)
            if cached is not None:
                self._inline_cache.move_to_end(key)
                graph, assemble = cached
                captures = traced.captures if traced is not None else []
                return assemble(inline(graph, list(dynamic) + captures))
            staged = self._stage(treedef, parts, leaves, traced)
        graph, assemble, captures = staged
        if captures and traced is None:
            self._remember(self._probes, key, None, treedef, parts)
            key = (key, _avals(captures))
        self._remember(self._inline_cache, key, (graph, assemble), treedef, parts)
        return assemble(inline(graph, list(dynamic) + captures))

    def _remember(self, cache, key, value, treedef, parts):
        if key not in cache and len(cache) >= self.max_traces:
            old_key, _ = cache.popitem(last=False)
            if cache is self._cache:
                self._flat.clear()
                warnings.warn(
                    f"{self.name} exceeded max_traces={self.max_traces} and evicted its least "
                    f"recently used trace:\n  {self.describe(*old_key)}\nnew signature:\n  "
                    f"{self.describe(treedef, parts)}\nFrequent eviction means compiling on "
                    "every call: pad batches to a few sizes, or pass changing scalars as arrays.",
                    RetraceWarning,
                    stacklevel=_user_stacklevel(),
                )
        cache[key] = value

    def lower(self, *args):
        """Trace and transform for ``args`` without running: the IR and the generated source."""
        from .lowered import Lowered

        leaves, treedef = tree.flatten(args)
        parts, _, _ = _signature(leaves, self.transform.differentiated(treedef))
        graph, _, _ = self._stage(treedef, parts, leaves)
        return Lowered(graph, self.device, self.name)

    def describe(self, treedef, parts):
        """The signature as users see it (the arguments they passed)."""
        return signature_text(treedef, parts)

    def cache_size(self):
        return len(self._cache)


def _wrap(value):
    """Adopt a freshly computed result array as a Tensor (the output half of the hot path)."""
    t = _new_tensor(Tensor)
    value.setflags(write=False)  # half the cost of assigning flags.writeable
    t._value = value
    t._weak = False
    return t


_new_tensor = object.__new__


def _signature(leaves, diff):
    """Classify leaves: (signature parts, dynamic array leaves, any tracer among them)."""
    parts = []
    dynamic = []
    traced = False
    for i, leaf in enumerate(leaves):
        t = type(leaf)
        if t is Tensor:
            v = leaf._value
            parts.append((v.shape, v.dtype))
            dynamic.append(leaf)
        elif t is TraceTensor:
            parts.append((tuple(leaf.shape), leaf.dtype.numpy))
            dynamic.append(leaf)
            traced = True
        elif t is float or t is int or t is bool:
            if i in diff:
                leaf = Tensor._wrap(np.array(float(leaf)))
                parts.append(((), leaf._value.dtype))
                dynamic.append(leaf)
            else:
                parts.append(("static", t, leaf.hex() if t is float else leaf))
        elif isinstance(leaf, (np.ndarray, np.generic)) or isinstance(leaf, Array):
            leaf = asarray(leaf)
            parts.append((leaf._value.shape, leaf._value.dtype))
            dynamic.append(leaf)
        else:
            _static_leaf(leaf)
            parts.append(("static", t, leaf))
    return tuple(parts), dynamic, traced


def _static_leaf(leaf):
    from .random import Key

    if isinstance(leaf, Key):
        raise TypeError(
            "a random Key cannot be an argument of a transform; sample outside and pass arrays"
        )
    try:
        hash(leaf)
    except TypeError:
        raise TypeError(
            f"argument leaf of type {type(leaf).__name__} is neither an array nor a hashable "
            "static value"
        ) from None


def _function_name(fun):
    if isinstance(fun, Staged):
        return fun.name
    name = getattr(fun, "__name__", None)
    return name if name else type(fun).__name__
