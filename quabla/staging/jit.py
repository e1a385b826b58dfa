"""jit and the ``Compiler``: a function compiled as it is, no derivative, no batch axis.

``Jitted`` adds to ``Staged`` what jit's options mean: a device, static arguments by position or
name, keyword arguments bound per 003 §3.8, precision and compile mode. ``Compiler`` traces a
function against inputs declared by name instead, into a ``Program`` (``aot.py``).
"""

import functools
import inspect
import operator

from .. import tree
from ..core.graph import Graph
from ..core.rewrite import simplify
from ..errors import TracerError
from .aot import Program
from .signature import Aval, Printed, ShapeDtype, Static, signature_leaves
from .staged import (Staged, check_compile_mode, check_max_traces, function_name,
                     function_origin)
from .transform import Transform, trace_function

__all__ = ["Jit", "Jitted", "Compiler"]


class Jit(Transform):
    def name(self, inner):
        return f"jit({inner})"

    def stage(self, traced, treedef, template):
        return simplify(traced.graph), traced.out_tree.unflatten


class Jitted(Staged):
    """``jit(fun)``: static arguments by position or name, keyword arguments per 003 §3.8."""

    def __init__(self, fun, device, static_argnums, static_argnames, max_traces,
                 compile_mode=None, precision=None):
        self._device_name = _check_device(device)
        max_traces = check_max_traces(max_traces)
        if compile_mode is not None:
            check_compile_mode(compile_mode)
        self._params = _parameters(fun)
        static_argnums, static_argnames = _static_sets(
            self._params, static_argnums, static_argnames, function_name(fun))
        self.static_argnums = static_argnums
        self.static_argnames = static_argnames
        self._plain = not static_argnums and not static_argnames
        inner = fun if self._plain else _with_statics(fun, static_argnums)
        config = ("jit", self._device_name, static_argnums, static_argnames, max_traces,
                  compile_mode, precision)
        super().__init__(inner, Jit(), max_traces, self._device_name,
                         name=f"jit({function_name(fun)})", config=config, root=fun)
        self.compile_mode = compile_mode
        self.lower_options = {"precision": precision, "name": self.name, "function": fun,
                              "origin": function_origin(fun)}
        self.__wrapped__ = fun
        functools.update_wrapper(self, fun, updated=())

    def __call__(self, *args, **kwargs):
        if self._plain and not kwargs:
            return Staged.__call__(self, *args)
        return Staged.__call__(self, *self.staged_args(args, kwargs))

    def staged_args(self, args, kwargs):
        """The staged call: ``(statics, {name: static keyword}, *dynamic arguments)``, or the
        arguments as they are where nothing is static. Keyword names belong to the treedef."""
        if kwargs:
            args, kwargs = self._bind_keywords(args, kwargs)
        if self._plain:
            return args
        statics = tuple(Static(args[i]) if i < len(args) else None for i in self.static_argnums)
        dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        return (statics, {k: Static(v) for k, v in kwargs.items()}) + dynamic

    def _bind_keywords(self, args, kwargs):
        args = list(args)
        kwargs = dict(kwargs)
        names = _positional_names(self._params or [])
        while len(args) < len(names) and names[len(args)] in kwargs:
            args.append(kwargs.pop(names[len(args)]))
        for k in kwargs:
            if k not in self.static_argnames:
                raise TypeError(
                    f"{self.name}: keyword argument {k!r} is neither static (static_argnames) "
                    "nor the next positional parameter; pass it positionally"
                )
        return tuple(args), kwargs

    def argument_name(self, position):
        """Positions of the staged call are (statics, static keywords, *dynamic arguments)."""
        if self._plain:
            return str(position)
        dynamic = [i for i in range(len(self.static_argnums) + position)
                   if i not in self.static_argnums]
        return str(dynamic[position - 2])

    def describe(self, treedef, parts):
        """The user's call: static values at their positions, static keywords as ``name=value``."""
        if self._plain:
            return Staged.describe(self, treedef, parts)
        children = treedef.children()
        leaves = signature_leaves(parts)
        values, start = [], 0
        for child in children:
            values.append(child.unflatten(leaves[start:start + child.num_leaves]))
            start += child.num_leaves
        statics, args = values[0], values[2:]
        for i, s in sorted(zip(self.static_argnums, statics)):
            if s is not None:
                args.insert(i, s)
        args += [Printed(f"{name}={text!r}") for name, text in values[1].items()]
        return repr(tuple(args))

    def lower(self, *args, **kwargs):
        return Staged.lower(self, *self.staged_args(args, kwargs))


def _check_device(device):
    """A device name (None is "cpu"); a device this installation cannot run, or a name that is
    no device, raises UnsupportedOperationError when the function is lowered (qb.devices())."""
    if device is None:
        return "cpu"
    if not isinstance(device, str):
        raise TypeError(f"device must be a str such as 'cpu', 'cuda:0' or 'mlx', got {device!r}")
    return device


def _with_statics(fun, static_argnums):
    """The traced function: re-inserts static positional values, unwraps static keywords."""
    def call(statics, static_kwargs, *dynamic):
        args = list(dynamic)
        for i, s in sorted(zip(static_argnums, statics)):
            if s is not None:
                args.insert(i, s.value)
        return fun(*args, **{k: v.value for k, v in static_kwargs.items()})
    call.__name__ = function_name(fun)
    return call


def _parameters(fun):
    """The parameters of ``fun``, or None where its signature cannot be inspected."""
    try:
        return list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return None


def _positional_names(params):
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _index_tuple(value):
    """``static_argnums`` as a tuple of ints: an int or a sequence of them, as JAX takes it."""
    try:
        return (operator.index(value),)
    except TypeError:
        pass
    try:
        return tuple(operator.index(i) for i in value)
    except TypeError:
        raise TypeError(
            f"static_argnums must be an int or a sequence of ints, got {value!r}") from None


def _name_tuple(value):
    """``static_argnames`` as a tuple of strs: a str or a sequence of them."""
    if isinstance(value, str):
        return (value,)
    try:
        names = tuple(value)
    except TypeError:
        names = None
    if names is None or not all(isinstance(n, str) for n in names):
        raise TypeError(f"static_argnames must be a str or a sequence of strs, got {value!r}")
    return names


def _static_sets(params, static_argnums, static_argnames, name):
    """Static positions and names, each completed from the other through the signature.

    As in JAX, a position or name that no parameter has is a ValueError (``*args`` takes any
    later position, ``**kwargs`` any name); an uninspectable callable is taken at its word.
    """
    nums = set(_index_tuple(static_argnums))
    names = set(_name_tuple(static_argnames))
    if params is None:
        return tuple(sorted(nums)), frozenset(names)
    positional = _positional_names(params)
    kinds = {p.kind for p in params}
    n = len(positional)
    for i in list(nums):
        if -n <= i < n:
            nums.discard(i)
            nums.add(i % n)
            names.add(positional[i])
        elif i < 0 or inspect.Parameter.VAR_POSITIONAL not in kinds:
            raise ValueError(
                f"jit({name}) has static_argnums={static_argnums!r}, but {i} is not the index of "
                f"one of its {n} positional parameters"
            )
    unknown = names - {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    if unknown and inspect.Parameter.VAR_KEYWORD not in kinds:
        raise ValueError(
            f"jit({name}) has static_argnames={static_argnames!r}, but it has no parameter "
            f"named {', '.join(map(repr, sorted(unknown)))}"
        )
    nums.update(positional.index(k) for k in names if k in positional)
    return tuple(sorted(nums)), frozenset(names)


_LEAF = tree.flatten(0)[1]


class Compiler:
    """Traces functions against declared inputs: ``Compiler().trace(f, specs)``."""

    def trace(self, fun, specs):
        """A ``Program`` of ``fun`` called with one array per spec, in order; each spec is
        ``(name, shape)`` or ``(name, shape, dtype)`` (float64 by default)."""
        names, template = [], []
        for spec in specs:
            if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3) or not isinstance(
                    spec[0], str):
                raise TypeError(f"a spec is (name, shape) or (name, shape, dtype), got {spec!r}")
            if spec[0] in names:
                raise ValueError(f"input name {spec[0]!r} is declared twice")
            abstract = ShapeDtype(*spec[1:])
            names.append(spec[0])
            template.append(Aval(abstract.shape, abstract.dtype))
        treedef = tree.flatten(tuple(range(len(template))))[1]
        traced = trace_function(fun, treedef, template, function_name(fun))
        if traced.captures:
            raise TracerError(f"{function_name(fun)} closes over tracers of a trace in "
                              "progress; a Program traces a function on its own")
        graph = simplify(traced.graph)
        graph = Graph(graph.nodes, graph.inputs, graph.outputs, names)
        return Program(graph, single=traced.out_tree == _LEAF)
