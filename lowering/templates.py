"""The scalar code templates of elementwise primitives, filled in for the loop-nest back ends
(Numba CPU and numba.cuda generate from the same templates)."""

from quabla.core.primitives import PRIMITIVES

__all__ = ["operand_names", "scalar_expression"]

_OPERAND_NAMES = {"select": ("pred", "x", "y"), "cast": ("x",)}


def operand_names(op):
    """The template's names for the operands of ``op`` (from elementwise.yaml)."""
    return _OPERAND_NAMES.get(op) or tuple(PRIMITIVES[op].spec["operands"])


def scalar_expression(node, args):
    """``node``'s scalar template with the operand expressions ``args`` and its params."""
    params = dict(node.params)
    fields = dict(zip(operand_names(node.op), args))
    if node.op == "cast":
        fields["dtype"] = params["dtype"].name
    else:
        fields.update(params)
    return PRIMITIVES[node.op].scalar.format(**fields)
