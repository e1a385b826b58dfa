"""``Staged``: a transformed function, cached, compiled on first call per signature, inlined in
traces.

A call flattens its arguments, computes the signature (``signature.py``) and looks it up in a
bounded LRU cache of compiled programs. On a miss, its ``Transform`` (``transform.py``) traces
the user function and transforms the trace into a graph, staged once however many threads miss
at once, and the graph is lowered. Called on tracers (inside another transform), the staged
graph is inlined into the enclosing trace instead, which is how transforms compose.
"""

import logging
import numbers
import os
import sys
import threading
import time
import warnings
import weakref
from collections import OrderedDict

import numpy as np

from .. import tree
from ..array import Tensor, adopt
from ..core.tracing import current_frames
from ..errors import RetraceWarning, TracerError
from ..lower import compile_graph, compile_in_background, prepare
from ..memory import collection_paused
from ..random import Key
from ..transforms import inline
from .aot import CallSignature, Lowered
from .signature import (BadLeaf, Count, ShapeDtype, classify_leaves, signature_text,
                        template_of)

__all__ = ["Staged", "function_name", "function_origin", "check_compile_mode",
           "check_max_traces", "regrouped", "logger"]

logger = logging.getLogger("quabla")
if os.environ.get("QUABLA_LOG_COMPILES") and not logger.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("quabla: %(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(logging.INFO)


class _Entry:
    __slots__ = ("run", "assemble", "graph", "key")

    def __init__(self, run, assemble, graph, key):
        self.run = run
        self.assemble = assemble
        self.graph = graph
        self.key = key


_SHARED = weakref.WeakKeyDictionary()  # root function -> {transform chain: caches}


def _new_caches():
    """Programs, the all-Tensor fast path, the fast path of trees of Tensors, inline graphs,
    differentiated leaves, the signatures whose staging captured tracers (they are probed on
    every call), the signatures being compiled (``_Flight``s) and the lock of that table and
    of the programs' table."""
    return OrderedDict(), {}, {}, OrderedDict(), {}, OrderedDict(), {}, threading.Lock()


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


class _Flight:
    """A signature being staged and compiled by one thread; the others missing it wait for
    its entry (None when it had to be inlined instead) or its error."""

    __slots__ = ("owner", "done", "entry", "error")

    def __init__(self):
        self.owner = threading.get_ident()
        self.done = threading.Event()
        self.entry = None
        self.error = None


class Staged:
    """A transformed function: cached, compiled on first call per signature, inlined in traces.

    ``transform`` is a ``Transform``. ``config`` (hashable) identifies it; with it, every Staged
    of the same root function and chain of configs shares one cache. ``root`` overrides
    ``fun`` as that root. ``compile_mode`` is jit's ``compile=`` (``check_compile_mode``; None:
    ``QUABLA_COMPILE``).
    """

    compile_mode = None
    lower_options = None  # passed to lowering.compile (jit's precision, the function's name)

    def __init__(self, fun, transform, max_traces=8, device=None, name=None, config=None,
                 root=None):
        if not callable(fun):
            raise TypeError(f"expected a callable, got {type(fun).__name__}")
        self.fun = fun
        self.transform = transform
        self.max_traces = check_max_traces(max_traces)
        self.device = device
        self.name = name or transform.name(function_name(fun))
        base = fun if root is None else root
        inner = base.chain if isinstance(base, Staged) else ()
        self.root = base.root if isinstance(base, Staged) else base
        self.chain = None if config is None or inner is None else inner + (config,)
        caches = _shared_caches(self.root, self.chain) or _new_caches()
        # the fast paths map the shapes and dtypes of an all-Tensor argument list, or of the
        # leaves of a tree of Tensors (per structure, with its matcher), to its entry
        (self._cache, self._flat, self._trees, self._inline_cache, self._diff, self._probes,
         self._flights, self._lock) = caches
        self.__wrapped__ = fun
        self.__doc__ = getattr(fun, "__doc__", None)

    def __repr__(self):
        return f"<{self.name}>"

    # -- the hot path --------------------------------------------------------------------------
    def __call__(self, *args):
        arrays = [a.value for a in args if type(a) is Tensor and not a.weak]
        if len(arrays) == len(args):
            # _flat_key and _touch, inlined: this is every call's dispatch
            entry = self._flat.get(tuple([(a.shape, a.dtype) for a in arrays]))
            if entry is not None:
                try:
                    self._cache.move_to_end(entry.key)
                except KeyError:  # evicted meanwhile by another thread
                    pass
                return entry.assemble(list(map(adopt, entry.run(*arrays))))
        for match, table in list(self._trees.values()):  # a structure seen before: no flattening
            leaves = match(args)
            if leaves is None:
                continue
            arrays = [a.value for a in leaves if type(a) is Tensor and not a.weak]
            if len(arrays) == len(leaves):
                entry = table.get(tuple([(a.shape, a.dtype) for a in arrays]))
            else:  # Python scalars among the leaves
                key, arrays = _mixed_key(leaves)
                entry = None if key is None else table.get(key)
            if entry is not None:
                _touch(self._cache, entry.key)
                return entry.assemble(list(map(adopt, entry.run(*arrays))))
            break
        leaves, treedef = tree.flatten(args)
        diff = self._diff.get(treedef)
        if diff is None:
            diff = self._diff[treedef] = self.transform.differentiated(treedef)
        try:
            parts, dynamic, traced = classify_leaves(leaves, diff)
        except BadLeaf as bad:
            raise self.argument_error(args, bad.index) from None
        key = (treedef, parts)
        if not traced:
            entry = self._cache.get(key)
            if entry is not None:
                _touch(self._cache, key)
                self._remember_fast(args, treedef, leaves, entry, diff)
                outs = entry.run(*[d.value for d in dynamic])
                return entry.assemble(list(map(adopt, outs)))
        return self._miss(key, treedef, parts, leaves, dynamic, traced, args)

    def native_run(self, args):
        """``run`` of the program compiled for ``args``, all Tensors (flat raw arrays in and
        out), or None when there is none yet: for a caller that keeps its own signature-keyed
        fast path (``Optimizer.update``) and checks the signature itself."""
        entry = self._flat.get(_flat_key([a.value for a in args]))
        return None if entry is None else entry.run

    def _remember_fast(self, args, treedef, leaves, entry, diff):
        """The fast paths' tables; weak Tensors, and Python scalars in differentiated
        positions (``diff``: arrays there), are left to the full signature."""
        if all(type(a) is Tensor and not a.weak for a in args):
            self._flat[_flat_key([a.value for a in args])] = entry
            return
        if all(type(a) is Tensor and not a.weak for a in leaves):
            key = _flat_key([a.value for a in leaves])
        elif any(i in diff for i, a in enumerate(leaves) if type(a) is not Tensor):
            return
        else:
            key = _mixed_key(leaves)[0]
            if key is None:
                return
        known = self._trees.get(treedef)
        if known is None:
            known = self._trees[treedef] = (treedef.matcher(), {})
        known[1][key] = entry

    def argument_error(self, args, index):
        """The TypeError for a leaf that is neither an array, a Python scalar nor None."""
        path, leaf = tree.flatten_with_path(args)[0][index]
        if isinstance(leaf, Key):
            return TypeError(
                "a random Key cannot be an argument of a transform; sample outside and pass arrays"
            )
        if isinstance(leaf, ShapeDtype):
            return TypeError(f"{self.name}: a ShapeDtype is an argument of lower(), not of a call")
        where = self.argument_name(path[0]) + "".join(f"[{key!r}]" for key in path[1:])
        return TypeError(
            f"{self.name}: argument {where} of type {type(leaf).__name__} is not an array, a "
            "Python scalar or None; mark it static (jit's static_argnums/static_argnames), "
            "close over it, or register its type as a pytree (quabla.tree.register)"
        )

    def argument_name(self, position):
        """How the user names the argument at ``position`` of the staged call."""
        return str(position)

    # -- staging -------------------------------------------------------------------------------
    def _stage(self, treedef, parts, leaves, traced=None):
        """Trace (unless a probe just did) and transform: ``(graph, assemble, captures)``."""
        start = time.perf_counter()
        template = template_of(parts, leaves)
        if traced is None:
            traced = self.transform.trace(self.fun, treedef, template)
        graph, assemble = self.transform.stage(traced, treedef, template)
        assemble = regrouped(assemble, len(graph.outputs))
        if logger.isEnabledFor(logging.INFO):
            logger.info("traced %s for %s in %.1f ms (%d ops)", self.name,
                        self.describe(treedef, parts), 1e3 * (time.perf_counter() - start),
                        graph.node_count())
        return graph, assemble, traced.captures

    def _miss(self, key, treedef, parts, leaves, dynamic, traced, args):
        if traced or (key in self._probes and current_frames()):
            return self._splice(key, treedef, parts, leaves, dynamic)
        entry, staged = self._single_flight(key, treedef, parts, leaves)
        if entry is None:  # it closes over tracers of a trace in progress: splice it in there
            return self._splice(key, treedef, parts, leaves, dynamic, staged)
        self._remember_fast(args, treedef, leaves, entry, self._diff[treedef])
        outs = entry.run(*[d.value for d in dynamic])
        return entry.assemble(list(map(adopt, outs)))

    def _single_flight(self, key, treedef, parts, leaves):
        """``(entry, staged)`` for a missed signature, staged and compiled once however many
        threads miss it at once: the first does the work, the others wait for its entry or
        its error (after an interrupt, they try themselves). Nothing is cached for a failure,
        so a later call tries again. ``entry`` is None where the staging captured tracers
        (``staged`` is to be spliced into this thread's trace)."""
        while True:
            with self._lock:
                entry = self._cache.get(key)
                if entry is not None:
                    return entry, None
                flight = self._flights.get(key)
                if flight is None or flight.owner == threading.get_ident():
                    flight = self._flights[key] = _Flight()
                    break
            flight.done.wait()
            if flight.error is not None:
                # the shared error: drop this frame's references to it, or it forms a cycle
                error, flight = flight.error, None
                try:
                    raise error
                finally:
                    del error
            if flight.entry is not None:
                return flight.entry, None
            # the first thread spliced its staging into its own trace: stage for this one
        try:
            with collection_paused():
                prepare(self.device)  # the back end loads its compiler while this traces
                staged = self._stage(treedef, parts, leaves)
                if not staged[2]:
                    flight.entry = self._compile(key, treedef, parts, staged)
            return flight.entry, staged
        except Exception as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                if self._flights.get(key) is flight:
                    del self._flights[key]
            flight.done.set()
            flight = None  # an error's traceback holds this frame: no cycle through the flight

    def _compile(self, key, treedef, parts, staged):
        """Lower a staged graph and cache the program as the entry of ``key``. In background
        mode the entry's ``run`` interprets until a worker has compiled the program, and is
        then replaced by the native one (so the hot path is the same as eager mode's)."""
        graph, assemble, _ = staged
        entry = _Entry(None, assemble, graph, key)
        if check_compile_mode(self.compile_mode) == "background":
            executable = compile_in_background(
                graph, self.device, f"{self.name} for {self.describe(treedef, parts)}",
                lambda run: setattr(entry, "run", run), self.lower_options)
        else:
            start = time.perf_counter()
            executable = compile_graph(graph, self.device, self.lower_options)
            if logger.isEnabledFor(logging.INFO):
                logger.info("compiled %s for %s in %.1f ms", self.name,
                            self.describe(treedef, parts), 1e3 * (time.perf_counter() - start))
        entry.run = getattr(executable, "run", executable)
        with self._lock:
            self._remember(self._cache, key, entry, treedef, parts)
        return entry

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
                _touch(self._probes, key)
                traced = self.transform.trace(self.fun, treedef, template_of(parts, leaves))
                key = (key, _avals(traced.captures))
            cached = self._inline_cache.get(key)
            if cached is not None:
                _touch(self._inline_cache, key)
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
                self._trees.clear()
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
        """Trace and transform for ``args`` (arrays or ``ShapeDtype`` leaves) without running:
        the IR, the generated source and ``compile()`` for this signature."""
        leaves, treedef = tree.flatten(args)
        diff = self.transform.differentiated(treedef)
        try:
            parts, _, _ = classify_leaves(leaves, diff, abstract=True)
        except BadLeaf as bad:
            raise self.argument_error(args, bad.index) from None
        graph, assemble, captures = self._stage(treedef, parts, leaves)
        if captures:
            raise TracerError(f"{self.name} closes over tracers of a trace in progress; it "
                              "cannot be lowered on its own")
        return Lowered(graph, self.device, self.name,
                       CallSignature(self, treedef, parts, diff, assemble), self.lower_options)

    def staged_args(self, args, kwargs):
        """The staged call of ``args`` and ``kwargs`` (``Jitted`` binds keywords)."""
        if kwargs:
            raise TypeError(f"{self.name} takes no keyword arguments")
        return args

    def describe(self, treedef, parts):
        """The signature as users see it (the arguments they passed)."""
        return signature_text(treedef, parts)


def _avals(tracers):
    return tuple((tuple(t.shape), t.dtype) for t in tracers)


def _flat_key(arrays):
    """The fast path's key of a call whose arguments are all strong Tensors: their arrays'
    shapes and dtypes."""
    return tuple([(a.shape, a.dtype) for a in arrays])


def _mixed_key(leaves):
    """The tree fast path's key of leaves that are strong Tensors and Python scalars, and the
    arrays a program takes for them (a ``Count`` as a float64 array, a static scalar none):
    ``(None, None)`` for any other leaf. A scalar's part is its type and value, as in the
    signature; the caller keeps scalars in differentiated positions out (arrays there)."""
    key, arrays = [], []
    for a in leaves:
        t = type(a)
        if t is Tensor and not a.weak:
            v = a.value
            key.append((v.shape, v.dtype))
            arrays.append(v)
        elif t is Count:
            key.append(Count)
            arrays.append(np.array(float(a)))
        elif t is float:
            key.append((t, a.hex()))
        elif t is int or t is bool:
            key.append((t, a))
        else:
            return None, None
    return tuple(key), arrays


def _touch(cache, key):
    """Mark ``key`` recently used; another thread may have evicted it meanwhile."""
    try:
        cache.move_to_end(key)
    except KeyError:
        pass


class _Result:
    """A stand-in for the program's result at ``index``: what ``regrouped`` assembles."""

    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


def regrouped(assemble, n):
    """``assemble`` of ``n`` results as one generated expression (``TreeDef.builder``) when all
    it does is place results in a tree (every transform's does), else ``assemble`` itself:
    assembling is on the hot path of every call."""
    try:
        leaves, treedef = tree.flatten(assemble([_Result(i) for i in range(n)]))
    except Exception:  # it computes with the results: keep it
        return assemble
    if not all(type(leaf) is _Result for leaf in leaves):
        return assemble
    build, order = treedef.builder(), [leaf.index for leaf in leaves]
    if order == list(range(n)):
        return build
    return lambda outs: build([outs[i] for i in order])


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _user_stacklevel():
    """The ``stacklevel`` that attributes a warning to the first caller outside quabla."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


COMPILE_MODES = ("eager", "background")


def check_compile_mode(value):
    """The compile mode: ``value`` (jit's ``compile=``), else ``QUABLA_COMPILE``, else eager;
    a ``ValueError`` names the valid ones."""
    source = "compile"
    if value is None:
        value, source = os.environ.get("QUABLA_COMPILE") or "eager", "QUABLA_COMPILE"
    if value not in COMPILE_MODES:
        raise ValueError(f"{source}={value!r} names no compile mode; valid values are "
                         f"{', '.join(map(repr, COMPILE_MODES))}")
    return value


def check_max_traces(value):
    """``max_traces`` as an int, or the error for one that is not a positive int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"max_traces must be a positive int, got {value!r}")
    if value < 1:
        raise ValueError(f"max_traces must be a positive int, got {value}")
    return int(value)


def function_origin(fun):
    """A text naming ``fun`` as an edit of its source keeps it, or None where it has no code:
    the staged name (``value_and_grad(loss)``: the transforms) and the file and qualified name
    of the user's function beneath the wrappers (``__wrapped__``; a lambda's line too). The
    compile path takes a new program of the same origin for an edit (lowering/numba_cpu)."""
    level = fun
    for _ in range(64):  # (a chain of wrappers that loops ends here)
        inner = getattr(level, "__wrapped__", None)
        if inner is None:
            break
        level = inner
    code = getattr(level, "__code__", None)
    qualname = getattr(level, "__qualname__", None)
    if code is None or not isinstance(qualname, str):
        return None
    line = f":{code.co_firstlineno}" if level.__name__ == "<lambda>" else ""
    return f"{function_name(fun)} {code.co_filename}:{qualname}{line}"


def function_name(fun):
    """The name of ``fun`` in staged names, logs and errors: a staged function's own
    (``jit(f)``, where ``__name__`` is ``f``'s), else its ``__name__``, else its type's."""
    if isinstance(fun, Staged):
        return fun.name
    name = getattr(fun, "__name__", None)
    return name if name else type(fun).__name__
