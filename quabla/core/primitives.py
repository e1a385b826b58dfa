"""The primitive registry: one ``Primitive`` (one rule table) per IR op.

A primitive bundles its shape/dtype rule, its NumPy reference implementation (which is also
the engine of eager mode and of constant folding), and its JVP, VJP and batching rules. Rules
are written with the ordinary ``quabla.ops`` functions, so applying one while a graph is being
built simply records more nodes: that is what makes the transforms graph-to-graph. Back ends
look up their lowering of a primitive by its name (see ``lowering/``).
"""

__all__ = ["Primitive", "PRIMITIVES", "register", "Zero", "is_zero", "always"]

PRIMITIVES = {}


class Zero:
    """A symbolic zero tangent or cotangent of a given shape and dtype: never materialised."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = dtype

    def __repr__(self):
        return f"Zero({list(self.shape)}, {self.dtype})"


def is_zero(value):
    return value is None or isinstance(value, Zero)


class Primitive:
    """The rule table of one IR op.

    - ``shape_rule(*avals, **params) -> (shape, dtype, weak)``; an aval has ``shape``, ``dtype``
      and ``weak`` attributes (Tensors and TraceTensors qualify).
    - ``impl(*ndarrays, **params) -> ndarray``: the NumPy reference.
    - ``jvp(primals, tangents, out, **params) -> tangent | Zero``; tangents may be ``Zero``.
    - ``vjp(ct, primals, out, **params) -> [cotangent | Zero | None per operand]``.
    - ``batch(args, batched, size, **params) -> (out, out_batched)``: the batch axis leads.
    - ``differentiable=False`` marks ops with no derivative (comparisons, bool logic).
    - ``kind``: the op's class, which the scheduler, the rewriter and the emitters read:
      ``"elementwise"`` (fused into loop nests through its scalar template ``scalar``),
      ``"index_map"`` (fused as a remapped read of its operands: broadcast, transpose, slice,
      rev, and pad and concatenate, whose reads are guarded), ``"reduction"`` (fused as an accumulation starting from ``identity``),
      ``"region"`` (control flow around sub-graphs), or None (a whole-array operation).
    - ``cheap(params) -> bool``: an op worth computing again rather than storing: elementwise
      arithmetic and comparisons (not transcendental functions), which a later loop computes
      again (the schedule), and the moves of elements that are no index maps (a reshape, a
      loop's row read by its index), which a scan's reverse pass makes again.
    - ``multiple_results``: the shape rule returns a list of avals, ``impl`` a list of arrays,
      and ``jvp``/``vjp``/``batch`` take and return one entry per result (``vjp`` gets a list of
      cotangents). Control-flow regions are such primitives; their params hold sub-``Graph``s.
    - ``dependence(**params) -> [operand positions per result]``: which operands each result
      of a multi-result primitive depends on differentiably (``core.dependence``; without it,
      every result depends on every operand).
    - ``vjp_wanted``: the VJP rule also takes ``wanted``, per operand whether its cotangent
      is needed (a ``while`` loop can be reverse-differentiated only where none is).
    - ``expand(*args, **params) -> [outputs]``: the op written with other ops and regions (a
      solver's iteration as a loop); ``quabla.core.expand`` replaces the node by it before
      lowering, so back ends never see the op.
    """

    __slots__ = (
        "name", "shape_rule", "impl", "jvp", "vjp", "batch", "differentiable",
        "kind", "identity", "cheap", "scalar", "foldable", "spec", "multiple_results", "expand", "vjp_wanted",
        "dependence",
    )

    def __init__(self, name, *, shape_rule, impl, jvp=None, vjp=None, batch=None,
                 differentiable=True, kind=None, identity=None, cheap=None, scalar=None,
                 foldable=True, spec=None,
                 multiple_results=False, expand=None, vjp_wanted=False, dependence=None):
        self.name = name
        self.shape_rule = shape_rule
        self.impl = impl
        self.jvp = jvp
        self.vjp = vjp
        self.batch = batch
        self.differentiable = differentiable
        self.kind = kind
        self.identity = identity  # a reduction's value over no elements
        self.cheap = cheap or _never
        self.scalar = scalar  # scalar code template for the loop-nest back ends
        self.foldable = foldable
        self.spec = spec  # the declarative entry (elementwise.yaml) this rule table came from
        self.multiple_results = multiple_results
        self.expand = expand
        self.vjp_wanted = vjp_wanted
        self.dependence = dependence

    @property
    def elementwise(self):
        return self.kind == "elementwise"

    def __repr__(self):
        return f"<Primitive {self.name}>"


def _never(params):
    return False


def always(params):
    """``cheap`` of an op that is always worth computing again."""
    return True


def register(prim):
    if prim.name in PRIMITIVES:
        raise ValueError(f"primitive {prim.name!r} is registered twice")
    PRIMITIVES[prim.name] = prim
    return prim
