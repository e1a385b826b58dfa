"""The scalar code templates of elementwise primitives, filled in for the loop-nest back ends
(Numba CPU and numba.cuda generate from the same templates), and the literals of their code."""

import math

from quabla.core.primitives import PRIMITIVES

__all__ = ["operand_names", "scalar_expression", "literal", "np_dtype", "combine"]

_OPERAND_NAMES = {"select": ("pred", "x", "y"), "cast": ("x",)}


def operand_names(op):
    """The template's names for the operands of ``op`` (from elementwise.yaml)."""
    return _OPERAND_NAMES.get(op) or tuple(PRIMITIVES[op].spec["operands"])


def scalar_expression(node, args, serial=False):
    """``node``'s scalar template with the operand expressions ``args`` and its params; its
    ``serial`` one if it has one and ``serial`` (one element computed on its own, not in a loop
    that vectorises: libm's call is faster there than the vectorisable body)."""
    params = dict(node.params)
    fields = dict(zip(operand_names(node.op), args))
    if node.op == "cast":
        fields["dtype"] = params["dtype"].name
    else:
        fields.update(params)
    prim = PRIMITIVES[node.op]
    template = (prim.spec or {}).get("serial") if serial else None
    return (template or prim.scalar).format(**fields)


def literal(value, dtype):
    """The source of a scalar of ``dtype`` (a dtype name): float32 literals are wrapped so
    Numba types them float32; infinities and NaN are spelled with ``math``."""
    if dtype == "bool":
        return "True" if value else "False"
    value = float(value)
    if math.isnan(value):
        text = "math.nan"
    elif math.isinf(value):
        text = "math.inf" if value > 0 else "(-math.inf)"
    else:
        text = repr(value)
    return f"np.float32({text})" if dtype == "float32" else text


def np_dtype(dtype):
    """The NumPy type of a dtype name, as generated code spells it."""
    return {"float64": "np.float64", "float32": "np.float32", "bool": "np.bool_"}[dtype]


_COMBINE = {"reduce_sum": "{a} + {b}", "reduce_max": "_max({a}, {b})",
            "reduce_min": "_min({a}, {b})", "reduce_or": "{a} or {b}",
            "reduce_and": "{a} and {b}", "dot_general": "{a} + {b}"}


def combine(op, a, b):
    """The source accumulating ``b`` into ``a`` for a reduction ``op`` (a product's partial
    sums add): NaN-propagating ``_max``/``_min`` as the reference's ``np.max``/``np.min``."""
    return _COMBINE[op].format(a=a, b=b)
