"""Tracing: ``TraceTensor`` placeholders, the stack of traces in progress, and ``bind``.

``bind(op, *args, **params)`` is the single entry of every primitive application. With only
eager arguments it runs the primitive's NumPy reference at once (eager mode), unless a trace is
in progress and the result is large: that is recorded in the innermost trace, as the rewriter
folds only small constants (``FOLD_LIMIT``). With a tracer among the arguments it records a
node in the innermost trace in progress that the tracers belong to. Eager arrays that meet a tracer become graph constants, and tracers of enclosing
traces are lifted into the inner graph as capture inputs, so closures compose (spec S3b, S4b).
"""

import math
import threading

import numpy as np

from ..array import Array, Shape, Tensor
from ..errors import CONTROL_FLOW_MESSAGE, TracerError
from .graph import GraphBuilder
from .primitives import PRIMITIVES
from .rewrite import FOLD_LIMIT

__all__ = ["TraceTensor", "TraceFrame", "bind", "trace_frame", "current_frames"]

_local = threading.local()


def current_frames():
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


class TraceFrame(GraphBuilder):
    """A graph under construction whose tracers are live while the traced function runs."""

    def __init__(self):
        super().__init__()
        self.level = len(current_frames())
        self.active = False
        self.captures = []       # the outer tracers lifted into this graph, in input order
        self._captured = {}      # (id(frame), node id) of an outer tracer -> local input id
        self._constants = {}     # id(tensor) -> (tensor, local constant id)

    def new_input(self, shape, dtype, name=None, weak=False):
        return TraceTensor(self, self.input(shape, dtype, name, weak), shape, dtype, weak)

    def input_like(self, graph, k, shape=None, name=None):
        """A new input standing for input ``k`` of ``graph`` (its dtype and weak flag; its
        shape unless ``shape`` is given)."""
        node = graph.nodes[graph.inputs[k]]
        return self.new_input(node.shape if shape is None else shape, node.dtype,
                              name or graph.input_names[k], node.weak)

    def operand(self, value):
        """The local node id standing for ``value`` (a tracer or an eager array)."""
        if type(value) is TraceTensor:
            frame = value._frame
            if frame is self:
                return value._id
            if not frame.active:
                raise _escaped()
            if frame.level > self.level:
                raise TracerError(
                    "a tracer of an inner trace was used in an enclosing one; return it from "
                    "the inner function instead"
                )
            key = (id(frame), value._id)
            nid = self._captured.get(key)
            if nid is None:
                nid = self.input(value.shape, value.dtype, f"__quabla_capture/{len(self.captures)}",
                                 value.weak)
                self._captured[key] = nid
                self.captures.append(value)
            return nid
        entry = self._constants.get(id(value))
        if entry is None:
            nid = self.constant(value.value, value.weak)
            self._constants[id(value)] = (value, nid)
            return nid
        return entry[1]

    def wrap(self, nid):
        node = self.nodes[nid]
        return TraceTensor(self, nid, node.shape, node.dtype, node.weak)


def _of_constants_only(frame, nid):
    """Does node ``nid`` of ``frame`` depend on no input (only on constants)?"""
    todo, seen = [nid], set()
    while todo:
        node = frame.nodes[todo.pop()]
        if node.op == "input":
            return False
        todo.extend(o for o in node.operands if o not in seen)
        seen.update(node.operands)
    return True


def _escaped():
    return TracerError(
        "a TraceTensor escaped its trace (it was stored in a global or a container and used "
        "after its function returned); return values from the traced function instead"
    )


class trace_frame:
    """Context manager that makes ``frame`` the innermost trace in progress."""

    __slots__ = ("frame",)

    def __init__(self, frame):
        self.frame = frame

    def __enter__(self):
        current_frames().append(self.frame)
        self.frame.active = True
        return self.frame

    def __exit__(self, *exc):
        self.frame.active = False
        current_frames().pop()


class TraceTensor:
    """A placeholder for an array while a function is traced; it records operations."""

    __slots__ = ("_frame", "_id", "shape", "dtype", "weak")

    def __init__(self, frame, nid, shape, dtype, weak):
        self._frame = frame
        self._id = nid
        self.shape = Shape(shape)
        self.dtype = dtype
        self.weak = weak

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(math.prod(self.shape))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d TraceTensor")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d TraceTensor")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self):
        return f"TraceTensor(shape={self.shape}, dtype={self.dtype})"

    def __bool__(self):
        raise TracerError(CONTROL_FLOW_MESSAGE)

    def _concrete(self, what):
        hint = (f" (a result of over {FOLD_LIMIT} elements is recorded in the trace even when "
                "its operands are eager arrays: compute it before the transformed function)"
                if _of_constants_only(self._frame, self._id) else "")
        raise TracerError(
            f"{what} needs a concrete value, but this is a TraceTensor inside a transform{hint}; "
            "return the value from the transformed function instead"
        )

    def __float__(self):
        self._concrete("float()")

    def __int__(self):
        self._concrete("int()")

    def __complex__(self):
        self._concrete("complex()")

    def __index__(self):
        raise TracerError(
            "a TraceTensor cannot be used as an index: indices must be static Python ints"
        )

    def item(self):
        self._concrete("item()")

    def tolist(self):
        self._concrete("tolist()")

    def numpy(self):
        self._concrete("numpy()")

    def __array__(self, dtype=None, copy=None):
        self._concrete("conversion to a NumPy array")

    def __hash__(self):
        return object.__hash__(self)

    # A copy of a tracer must stay the same node of the same trace: a copied frame would
    # record operations nobody reads (zero derivatives, raw tracers returned to the user).
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce_ex__(self, protocol):
        self._concrete("pickling")


Array.register(TraceTensor)


def bind(op, *args, **params):
    """Apply primitive ``op`` to ``args`` (Tensors or TraceTensors): eagerly, or into a trace."""
    prim = PRIMITIVES[op]
    frame = None
    for a in args:
        if type(a) is TraceTensor:
            f = a._frame
            if not f.active:
                raise _escaped()
            if frame is None or f.level > frame.level:
                frame = f
    if prim.multiple_results:
        return _bind_results(prim, frame, args, params)
    shape, dtype, weak = prim.shape_rule(*args, **params)
    if frame is None:
        frame = _staging_frame([shape])
    if frame is None:
        with np.errstate(all="ignore"):
            value = prim.impl(*[a.value for a in args], **params)
        if type(value) is not np.ndarray or value.dtype != dtype.numpy:
            value = np.asarray(value, dtype=dtype.numpy)
        if not value.flags.c_contiguous:
            value = value.copy()
        return Tensor.wrap(value, weak)
    operands = [frame.operand(a) for a in args]
    nid = frame.add(op, operands, tuple(sorted(params.items())), shape, dtype, weak)
    return TraceTensor(frame, nid, shape, dtype, weak)


def _staging_frame(shapes):
    """The trace that a result of eager arrays only, of ``shapes``, is recorded in: the
    innermost one in progress if a result is larger than ``FOLD_LIMIT`` elements (computing it
    now would materialize it: ``1.0 - eye(8192)``, or a gradient seed times a big constant,
    is 512 MB at trace time, where the compiled program fuses it), else None (computed now)."""
    stack = current_frames()
    if stack and any(int(math.prod(shape)) > FOLD_LIMIT for shape in shapes):
        return stack[-1]
    return None


def _bind_results(prim, frame, args, params):
    """``bind`` of a primitive with several results: a list of Tensors or TraceTensors."""
    avals = prim.shape_rule(*args, **params)
    if frame is None:
        frame = _staging_frame([shape for shape, _, _ in avals])
    if frame is None:
        with np.errstate(all="ignore"):
            values = prim.impl(*[a.value for a in args], **params)
        return [Tensor.wrap(np.array(v, dtype=dtype.numpy, order="C"), weak)
                for v, (shape, dtype, weak) in zip(values, avals)]
    operands = [frame.operand(a) for a in args]
    ids = frame.add_results(prim.name, operands, tuple(sorted(params.items())), avals)
    return [frame.wrap(nid) for nid in ids]
