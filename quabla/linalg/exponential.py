"""``qb.linalg.expm``, ``jax.scipy.linalg.expm``'s counterpart: scaling and squaring with the
degree-13 Padé approximant (Higham 2005), made of matmuls, one ``solve`` and a counted loop,
so its derivatives (forward and reverse) are those of its parts."""

import math

import numpy as np

from .. import ops
from ..array import Tensor
from ..control import fori_loop
from ..core.tracing import bind
from .decompositions import matrices

__all__ = ["expm"]

# The numerators' coefficients b_0..b_13 of the [13/13] Padé approximant, and the 1-norm up
# to which it is accurate to double precision unscaled (Higham 2005, table 2.3).
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
           129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
           40840800.0, 960960.0, 16380.0, 182.0, 1.0)
_THETA13 = 5.371920351148152


def expm(A, *, upper_triangular=False, max_squarings=16):
    """The matrix exponentials of square matrices [..., n, n]. Each matrix is scaled by 2^-s
    (s the least with |A|_1 / 2^s <= 5.37), the Padé approximant taken, and squared s times;
    the loop runs ``max_squarings`` steps for every matrix (a step past s keeps its value),
    and a matrix needing more squarings gives NaN, as JAX's. ``upper_triangular`` is accepted
    for JAX's signature and changes nothing."""
    a = matrices(A, "expm", square=True)
    if not isinstance(max_squarings, int) or max_squarings < 0:
        raise ValueError(f"quabla.linalg.expm: max_squarings must be an int >= 0, got {max_squarings!r}")
    n = a.shape[-1]
    eye = ops.broadcast_to(Tensor.wrap(np.eye(n, dtype=a.dtype.numpy)), tuple(a.shape))
    norm1 = ops.max(ops.sum(ops.abs(a), -2), -1)
    s = ops.stop_gradient(ops.maximum(ops.ceil(ops.log2(ops.divide(norm1, _THETA13))), 0.0))
    s = ops.where(ops.isnan(s), 0.0, s)  # a NaN matrix stays NaN through the approximant
    scale = ops.expand_dims(ops.expand_dims(ops.power(2.0, ops.negative(s)), -1), -1)
    x = ops.multiply(a, scale)
    b = _PADE13
    x2 = ops.matmul(x, x)
    x4 = ops.matmul(x2, x2)
    x6 = ops.matmul(x4, x2)
    terms = lambda c6, c4, c2, c0: ops.add(ops.add(ops.multiply(c6, x6), ops.multiply(c4, x4)),
                                           ops.add(ops.multiply(c2, x2), ops.multiply(c0, eye)))
    u = ops.matmul(x, ops.add(ops.matmul(x6, terms(b[13], b[11], b[9], 0.0)),
                              terms(b[7], b[5], b[3], b[1])))
    v = ops.add(ops.matmul(x6, terms(b[12], b[10], b[8], 0.0)), terms(b[6], b[4], b[2], b[0]))
    r = bind("solve", ops.subtract(v, u), ops.add(v, u))
    steps = ops.expand_dims(ops.expand_dims(s, -1), -1)

    def square(i, y):
        return ops.where(ops.less(i, steps), ops.matmul(y, y), y)

    if max_squarings:
        r = fori_loop(0, max_squarings, square, r)
    return ops.where(ops.greater(steps, float(max_squarings)), math.nan, r)
