"""A ``dot_general`` as a batch of matrix products: its operands' axes grouped as (batch, rows,
contraction) and (batch, contraction, columns), the form every back end computes it in (a
loop nest or BLAS on the CPU, a tiled kernel or cuBLAS on CUDA, one ``matmul`` on MLX)."""

import math
from typing import NamedTuple

__all__ = ["Product", "product"]


class Product(NamedTuple):
    """The sizes ``B, M, K, N`` of the batch, rows, contraction and columns, and the axes of
    each operand in that order: ``lhs_order`` (batch, rows, contraction) and ``rhs_order``
    (batch, contraction, columns), with the free axes ``lhs_free`` and ``rhs_free``."""
    B: int
    M: int
    K: int
    N: int
    lhs_order: tuple
    rhs_order: tuple
    lhs_free: tuple
    rhs_free: tuple

    @property
    def dims(self):
        return self.B, self.M, self.K, self.N


def product(dimension_numbers, lshape, rshape):
    """The ``Product`` of a ``dot_general`` with these ``dimension_numbers`` on operands of
    ``lshape`` and ``rshape``."""
    (lc, rc), (lb, rb) = dimension_numbers
    lf = tuple(d for d in range(len(lshape)) if d not in lc and d not in lb)
    rf = tuple(d for d in range(len(rshape)) if d not in rc and d not in rb)

    def size(shape, dims):
        return math.prod(shape[d] for d in dims)

    return Product(size(lshape, lb), size(lshape, lf), size(lshape, lc), size(rshape, rf),
                   tuple(lb) + lf + tuple(lc), tuple(rb) + tuple(rc) + rf, lf, rf)
