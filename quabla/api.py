"""The public transforms: jit, grad, value_and_grad, jvp, vjp and vmap (spec 003 ch. 3).

Each is a ``Transform`` (what graph to build from the traced function and how to assemble the
result) wrapped in a ``Staged`` function (signature cache, compile, inline when traced).
"""

import functools
import inspect
import numbers
import operator

from . import tree
from .array import asarray
from .core.primitives import PRIMITIVES  # noqa: F401  (rules must be registered before use)
from .core.rewrite import simplify
from .staging import (
    Aval, Printed, Staged, Static, Transform, check_compile_mode, check_max_traces, function_name,
    signature_leaves, trace_function,
)
from .transforms import batch_graph, jvp_graph, vjp_graph

__all__ = ["jit", "grad", "value_and_grad", "jvp", "vjp", "vmap"]


def _check_device(device):
    """A device name (None is "cpu"); a device this installation cannot run, or a name that is
    no device, raises UnsupportedOperationError when the function is lowered (qb.devices())."""
    if device is None:
        return "cpu"
    if not isinstance(device, str):
        raise TypeError(f"device must be a str such as 'cpu', 'cuda:0' or 'mlx', got {device!r}")
    return device


def arg_ranges(treedef):
    """Leaf index ranges of each positional argument of an argument tuple (and the arguments'
    trees): grad's and jacobian's (jacobians.py) layout of the differentiated leaves."""
    ranges, start = [], 0
    for child in treedef.children():
        ranges.append(range(start, start + child.num_leaves))
        start += child.num_leaves
    return ranges, treedef.children()


def argnum_leaves(argnums, treedef):
    """The leaves of the arguments ``argnums`` (negative ones count from the end); an argnum
    naming no argument is a ValueError, found before anything is traced. jacobian uses it too."""
    ranges, _ = arg_ranges(treedef)
    for a in argnums:
        if not -len(ranges) <= a < len(ranges):
            raise ValueError(
                f"argnums {a} is out of range for a function called with {len(ranges)} arguments"
            )
    return frozenset(i for a in argnums for i in ranges[a])


def normalize_argnums(argnums):
    """``(argnums as a tuple, whether it was one int)``, for grad and jacobian (jacobians.py)."""
    if isinstance(argnums, numbers.Integral) and not isinstance(argnums, bool):
        return (int(argnums),), True
    if isinstance(argnums, tuple) and all(isinstance(a, numbers.Integral) for a in argnums):
        if not argnums:
            raise ValueError("argnums must not be empty")
        return tuple(int(a) for a in argnums), False
    raise TypeError(f"argnums must be an int or a tuple of ints, got {argnums!r}")


# -- jit ----------------------------------------------------------------------------------------

class _Jit(Transform):
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
        super().__init__(inner, _Jit(), max_traces, self._device_name,
                         name=f"jit({function_name(fun)})", config=config, root=fun)
        self.compile_mode = compile_mode
        self.lower_options = {"precision": precision, "name": self.name, "function": fun}
        self.__wrapped__ = fun
        functools.update_wrapper(self, fun, updated=())

    def __call__(self, *args, **kwargs):
        if self._plain and not kwargs:
            return Staged.__call__(self, *args)
        return Staged.__call__(self, *self._staged_args(args, kwargs))

    def _staged_args(self, args, kwargs):
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
        lowered = Staged.lower(self, *self._staged_args(args, kwargs))
        lowered.options = self.lower_options
        return lowered


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


# -- grad and value_and_grad ----------------------------------------------------------------------

class _Grad(Transform):
    def __init__(self, argnums, has_aux, with_value, kind):
        self.argnums, self.single = normalize_argnums(argnums)
        self.has_aux = has_aux
        self.with_value = with_value
        self.kind = kind

    def name(self, inner):
        return f"{self.kind}({inner})"

    def differentiated(self, treedef):
        return argnum_leaves(self.argnums, treedef)

    def stage(self, traced, treedef, template):
        graph = traced.graph
        out_tree = traced.out_tree
        n_out = len(graph.outputs)
        if self.has_aux:
            children = out_tree.children()
            if out_tree.node_type is not tuple or len(children) != 2:
                raise TypeError(f"{self.kind}(has_aux=True) needs a function returning (loss, aux)")
            loss_tree, aux_tree = children
            if loss_tree.num_leaves != 1:
                raise TypeError(f"{self.kind}: the loss must be one array")
        elif out_tree.num_leaves != 1 or out_tree.node_type is not None:
            raise TypeError(f"{self.kind} needs a function returning one scalar array")
        shape, dtype = graph.out_avals[0]
        if not dtype.is_floating:
            raise TypeError(f"{self.kind} needs a floating output, got {dtype}")
        if shape != ():
            raise ValueError(
                f"{self.kind} needs a scalar (rank-0) output, got shape {list(shape)}; reduce it "
                "(for example with quabla.sum), or use jacobian or vjp for non-scalar outputs"
            )
        # which graph inputs (dynamic leaves) belong to each differentiated argument
        ranges, arg_trees = arg_ranges(treedef)
        input_of_leaf = {}
        k = 0
        for i, leaf in enumerate(template):
            if type(leaf) is Aval:
                input_of_leaf[i] = k
                k += 1
        wrt = []
        layout = []  # per argnum: list of (graph output index | None) per leaf of that argument
        for a in self.argnums:
            slots = []
            for i in ranges[a]:
                leaf = template[i]
                if type(leaf) is not Aval:
                    raise TypeError(
                        f"{self.kind}: argument {a} has a non-array leaf {leaf!r} that cannot be "
                        "differentiated"
                    )
                if leaf.dtype.is_floating:
                    slots.append(n_out + len(wrt))
                    wrt.append(input_of_leaf[i])
                else:
                    slots.append(None)
            layout.append(slots)
        g = vjp_graph(graph, wrt, ["ones"] + [None] * (n_out - 1))
        argnum_trees = [arg_trees[a] for a in self.argnums]

        def assemble(outs):
            grads = [
                t.unflatten([None if s is None else outs[s] for s in slots])
                for t, slots in zip(argnum_trees, layout)
            ]
            grads = grads[0] if self.single else tuple(grads)
            if self.has_aux:
                value, aux = out_tree.unflatten(outs[:n_out])
                return ((value, aux), grads) if self.with_value else (grads, aux)
            return (outs[0], grads) if self.with_value else grads

        return g, assemble


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


def staged_grad(fun, argnums, has_aux, with_value, kind):
    """``grad``/``value_and_grad`` of ``fun`` as a Staged (``hessian`` stages one too)."""
    transform = _Grad(argnums, has_aux, with_value, kind)
    return Staged(fun, transform, config=(kind, transform.argnums, transform.single, bool(has_aux)))


# -- jvp ------------------------------------------------------------------------------------------

class _OverPrimals(Transform):
    """Staged over (primals, tangents or cotangents): the function sees the primals only."""

    def differentiated(self, treedef):
        return frozenset(range(treedef.num_leaves))

    def trace(self, fun, treedef, template):
        primals_tree, _ = treedef.children()
        return trace_function(fun, primals_tree, template[:primals_tree.num_leaves],
                              function_name(fun))


class _Jvp(_OverPrimals):
    """Staged over (primals, tangents); a non-floating primal's tangent is None."""

    def name(self, inner):
        return f"jvp({inner})"

    def stage(self, traced, treedef, template):
        n = treedef.children()[0].num_leaves
        graph = traced.graph
        n_args, n_captures = traced.n_args, len(traced.captures)
        mask = [template[k].dtype.is_floating for k in range(n) if type(template[k]) is Aval]
        g = jvp_graph(graph, mask + [False] * n_captures)
        # jvp_graph's inputs are (args, captures, tangents); staged ones (args, tangents, captures)
        n_tangents = sum(mask)
        order = list(range(n_args)) + list(range(n_args + n_captures, n_args + n_captures + n_tangents)) \
            + list(range(n_args, n_args + n_captures))
        n_out = len(graph.outputs)
        out_tree = traced.out_tree

        def assemble(outs):
            return out_tree.unflatten(outs[:n_out]), out_tree.unflatten(outs[n_out:])

        return g.with_inputs(order), assemble


def jvp(fun, primals, tangents):
    """Forward mode: ``(fun(*primals), J @ tangents)``."""
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp: primals and tangents must be tuples with one entry per argument")
    if len(primals) != len(tangents):
        raise ValueError("jvp: primals and tangents must have the same length")
    primals = tuple(primals)
    tangents = _match_tangents(primals, tuple(tangents))
    return Staged(fun, _Jvp(), config=("jvp",))(primals, tangents)


def _match_tangents(primals, tangents):
    """One tangent per floating primal leaf (None for the others): Python numbers adopt their
    primal's dtype and shape, arrays must match exactly."""
    from . import ops

    p_leaves, p_tree = tree.flatten(primals)
    t_leaves, t_tree = tree.flatten(tangents, is_leaf=lambda x: x is None)
    if len(t_leaves) != len(p_leaves):
        raise ValueError(f"jvp: tangents {t_tree} do not match primals {p_tree}")
    out = []
    for p, t in zip(p_leaves, t_leaves):
        p = asarray(float(p) if isinstance(p, (int, float)) and not isinstance(p, bool) else p)
        if not p.dtype.is_floating:
            out.append(None)  # bool leaves have no tangent
            continue
        if t is None:
            raise ValueError("jvp: a floating primal needs a tangent (got None)")
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            t = ops.broadcast_to(ops.weak_scalar(t, p.dtype), p.shape)
        else:
            t = asarray(t)
        if tuple(t.shape) != tuple(p.shape) or t.dtype is not p.dtype:
            raise ValueError(
                f"jvp: tangent {t.dtype}{list(t.shape)} does not match primal {p.dtype}{list(p.shape)}"
            )
        out.append(t)
    return p_tree.unflatten(out)


# -- vjp ------------------------------------------------------------------------------------------

class _VjpForward(Transform):
    def __init__(self, has_aux):
        self.has_aux = has_aux

    def name(self, inner):
        return f"vjp({inner})"

    def differentiated(self, treedef):
        return frozenset(range(treedef.num_leaves))

    def stage(self, traced, treedef, template):
        return traced.graph, traced.out_tree.unflatten


class _VjpBackward(_OverPrimals):
    """Staged over (primals, cotangents): returns one cotangent tree per primal."""

    def __init__(self, has_aux):
        self.has_aux = has_aux

    def name(self, inner):
        return f"vjp_fun({inner})"

    def stage(self, traced, treedef, template):
        primals_tree, _ = treedef.children()
        n = primals_tree.num_leaves
        graph = traced.graph
        out_tree = traced.out_tree
        n_out = len(graph.outputs)
        if self.has_aux:
            main_leaves = out_tree.children()[0].num_leaves
        else:
            main_leaves = n_out
        seeds = [
            "input" if (k < main_leaves and graph.out_avals[k][1].is_floating) else None
            for k in range(n_out)
        ]
        inputs = [k for k, leaf in enumerate(template[:n]) if type(leaf) is Aval]
        floating = [j for j, k in enumerate(inputs) if template[k].dtype.is_floating]
        g = vjp_graph(graph, floating, seeds)
        # vjp_graph's inputs are (args, captures, cotangents); staged ones (args, cotangents,
        # captures), with a cotangent for each floating output (the others pass None)
        n_args, n_inputs = traced.n_args, len(graph.inputs)
        n_cts = sum(1 for seed in seeds if seed)
        order = list(range(n_args)) + list(range(n_inputs, n_inputs + n_cts)) \
            + list(range(n_args, n_inputs))
        g = g.with_inputs(order)
        arg_trees = primals_tree.children()
        slots, j, start = [], 0, 0
        for t in arg_trees:
            row = []
            for i in range(start, start + t.num_leaves):
                leaf = template[i]
                if type(leaf) is Aval and leaf.dtype.is_floating:
                    row.append(n_out + j)
                    j += 1
                else:
                    row.append(None)
            slots.append(row)
            start += t.num_leaves

        def assemble(outs):
            return tuple(t.unflatten([None if s is None else outs[s] for s in row])
                         for t, row in zip(arg_trees, slots))

        return g, assemble


def vjp(fun, *primals, has_aux=False):
    """Reverse mode: ``(fun(*primals), vjp_fun)``; ``vjp_fun(ct)`` returns one cotangent per primal."""
    out = Staged(fun, _VjpForward(has_aux), config=("vjp", bool(has_aux)))(*primals)
    if has_aux:
        out, aux = out
    backward = Staged(fun, _VjpBackward(has_aux), config=("vjp_fun", bool(has_aux)))

    def vjp_fun(cotangent):
        cts = _match_cotangents(out, cotangent)
        return backward(tuple(primals), cts)

    return (out, vjp_fun, aux) if has_aux else (out, vjp_fun)


def _match_cotangents(out, cotangent):
    """One cotangent per floating output leaf (None for the others): Python numbers adopt the
    output's dtype and shape, arrays must match exactly."""
    from . import ops

    o_leaves, o_tree = tree.flatten(out)
    c_leaves, c_tree = tree.flatten(cotangent, is_leaf=lambda x: x is None)
    if len(o_leaves) != len(c_leaves):
        raise ValueError(f"vjp_fun: cotangent {c_tree} does not match the output {o_tree}")
    result = []
    for o, c in zip(o_leaves, c_leaves):
        if c is None:
            if o.dtype.is_floating:
                raise ValueError("vjp_fun: a floating output needs a cotangent (got None)")
        elif isinstance(c, (int, float)) and not isinstance(c, bool):
            c = ops.broadcast_to(ops.weak_scalar(c, o.dtype), o.shape)
        else:
            c = asarray(c)
        if c is not None and (tuple(c.shape) != tuple(o.shape) or c.dtype is not o.dtype):
            raise ValueError(
                f"vjp_fun: cotangent {c.dtype}{list(c.shape)} does not match output "
                f"{o.dtype}{list(o.shape)}"
            )
        result.append(c if o.dtype.is_floating else None)
    return o_tree.unflatten(result)


# -- vmap -----------------------------------------------------------------------------------------

class _Vmap(Transform):
    def __init__(self, in_axes, out_axes):
        self.in_axes = in_axes
        self.out_axes = out_axes

    def name(self, inner):
        return f"vmap({inner})"

    def trace(self, fun, treedef, template):
        example, _, _ = self._unmapped(treedef, template)
        return trace_function(fun, treedef, example, function_name(fun))

    def _unmapped(self, treedef, template):
        """The template the function sees (mapped axes removed), each leaf's axis, the size."""
        in_axes = self.in_axes
        if isinstance(in_axes, list):
            in_axes = tuple(in_axes)
        n_args = len(treedef.children())
        if isinstance(in_axes, tuple) and len(in_axes) != n_args:
            raise ValueError(f"vmap: in_axes has {len(in_axes)} entries for {n_args} arguments")
        full = treedef.unflatten(template)
        prefix = in_axes if isinstance(in_axes, tuple) else (in_axes,) * n_args
        axes = tree.broadcast_prefix(prefix, full, is_leaf=lambda x: x is None)
        size = None
        example = []
        mapped = []
        for leaf, axis in zip(template, axes):
            if axis is not None and not isinstance(axis, numbers.Integral):
                raise TypeError(f"vmap: in_axes entries must be ints or None, got {axis!r}")
            if type(leaf) is not Aval:
                if axis is not None:
                    raise ValueError("vmap: Python scalars and static values must have in_axes None")
                example.append(leaf)
                continue
            if axis is None:
                example.append(leaf)
                mapped.append(None)
                continue
            ndim = len(leaf.shape)
            if not -ndim <= axis < ndim:
                raise ValueError(f"vmap: in_axes {axis} is out of range for an argument of rank {ndim}")
            axis %= ndim
            n = leaf.shape[axis]
            if size is None:
                size = n
            elif n != size:
                raise ValueError(
                    f"vmap got inconsistent sizes for the mapped axes: {size} and {n}"
                )
            example.append(Aval(leaf.shape[:axis] + leaf.shape[axis + 1:], leaf.dtype, leaf.weak))
            mapped.append(axis)
        if size is None:
            raise ValueError("vmap needs at least one mapped argument (in_axes are all None)")
        return example, mapped, size

    def stage(self, traced, treedef, template):
        from . import ops
        from .core.tracing import TraceFrame, trace_frame
        from .transforms import inline

        _, mapped, size = self._unmapped(treedef, template)
        out_tree = traced.out_tree
        out_axes = self.out_axes
        if isinstance(out_axes, list):
            out_axes = tuple(out_axes)
        outs_prefix = tree.broadcast_prefix(
            out_axes, out_tree.unflatten([0] * out_tree.num_leaves), is_leaf=lambda x: x is None
        ) if not isinstance(out_axes, (int, type(None))) else [out_axes] * out_tree.num_leaves
        flags = [m is not None for m in mapped] + [False] * len(traced.captures)
        batched, out_batched = batch_graph(traced.graph, flags, size,
                                           [a is not None for a in outs_prefix])
        for flag, axis in zip(out_batched, outs_prefix):
            if axis is None and flag:
                raise ValueError("vmap: an output with out_axes=None depends on a mapped input")
        # the staged graph takes the arguments as given: move mapped axes to the front first
        frame = TraceFrame()
        with trace_frame(frame):
            inputs = [frame.new_input(leaf.shape, leaf.dtype, f"arg{k}", leaf.weak)
                      for k, leaf in enumerate(l for l in template if type(l) is Aval)]
            captures = [frame.new_input(c.shape, c.dtype, f"__quabla_capture/{k}", c.weak)
                        for k, c in enumerate(traced.captures)]
            moved = [x if a in (None, 0) else ops.transpose(
                x, (a,) + tuple(d for d in range(x.ndim) if d != a))
                for x, a in zip(inputs, mapped)]
            outs = inline(batched, moved + captures)
            final = []
            for value, axis in zip(outs, outs_prefix):
                if axis is not None:
                    ndim = value.ndim
                    if not -ndim <= axis < ndim:
                        raise ValueError(f"vmap: out_axes {axis} is out of range for rank {ndim}")
                    axis %= ndim
                    if axis:
                        perm = list(range(1, ndim))
                        perm.insert(axis, 0)
                        value = ops.transpose(value, tuple(perm))
                final.append(frame.operand(value))
            graph = frame.build(final)
        return simplify(graph), out_tree.unflatten


def vmap(fun, in_axes=0, out_axes=0):
    """Vectorize ``fun`` over the ``in_axes`` of its arguments (pytree prefixes, None = shared)."""
    return Staged(fun, _Vmap(in_axes, out_axes), config=_vmap_config(in_axes, out_axes))


def _vmap_config(in_axes, out_axes):
    """A hashable key of the in_axes/out_axes prefix trees, or None (then nothing is shared)."""
    try:
        key = ("vmap",) + tuple(
            (type(axes), tuple(leaves), treedef)
            for axes in (in_axes, out_axes) for leaves, treedef in [tree.flatten(axes)]
        )
        hash(key)
        return key
    except (TypeError, ValueError):
        return None
