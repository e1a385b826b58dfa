"""Random numbers with explicit keys, in the style of ``jax.random`` (spec 004 §6.2).

There is no global random state. A :class:`Key` holds one 64-bit SplitMix64 state; the same key
always gives the same numbers. Sampling is eager, on the host, in NumPy, and vectorized.

The exact algorithm, which ``docs/random.md`` restates so another tool can reproduce the
streams (all arithmetic modulo 2**64):

* ``mix(z)``: ``z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9``; ``z = (z ^ (z >> 27)) *
  0x94D049BB133111EB``; ``return z ^ (z >> 31)`` (the SplitMix64 finalizer, a bijection).
* ``key(seed)`` has state ``seed mod 2**64``.
* The stream of a key with state ``s``: its i-th 64-bit output (i = 0, 1, ...) is
  ``mix(s + (i + 1) * 0x9E3779B97F4A7C15)``, the reference SplitMix64 seeded with ``s``.
* ``split(key, num)``: child j (j = 0 .. num-1) has state
  ``mix(mix(s ^ SPLIT_TAG) + (j + 1) * 0x9E3779B97F4A7C15)``.
* ``fold_in(key, data)``: state ``mix(mix(s ^ FOLD_TAG) + ((data mod 2**64) + 1) * golden)``.
* A sample of shape ``shape`` takes the first ``prod(shape)`` outputs (the first
  ``2 * ceil(prod(shape) / 2)`` for normals) and fills the result in C order.
* The other samplers (``randint``, ``choice``, ``permutation``, ``categorical``,
  ``truncated_normal``, ``exponential``, ``gumbel``, ``laplace``, ``gamma``, ``beta``,
  ``dirichlet``, ``multivariate_normal``, ``orthogonal``, ``ball``, ``rademacher``) are built on
  the same stream; each docstring, and ``docs/random.md``, says which outputs it reads and how.
  Rejection samplers work in rounds: the elements still pending, in C order, take consecutive
  fresh outputs after every output read before (see ``outputs.rejection``).

Quabla has no integer dtype: index-valued results (``randint``, ``choice`` and ``permutation``
of an integer ``n``, ``categorical``) are float64 arrays holding whole numbers.

The modules: ``keys`` (the generator, ``Key``, ``key``, ``split``, ``fold_in``), ``outputs``
(outputs to floats, rejection rounds, bounded integers, standard samples), ``arguments``
(argument checks, parameter shapes, results), ``discrete``, ``continuous``, ``gammas``
(gamma and what is built on it), ``multivariate`` and ``initializers``.
"""

from .continuous import exponential, gumbel, laplace, normal, truncated_normal, uniform
from .discrete import bernoulli, categorical, choice, permutation, rademacher, randint
from .gammas import ball, beta, dirichlet, gamma
from .initializers import glorot_normal, glorot_uniform, he_normal
from .keys import Key, fold_in, key, split
from .multivariate import multivariate_normal, orthogonal

__all__ = [
    "Key",
    "key",
    "split",
    "fold_in",
    "uniform",
    "normal",
    "bernoulli",
    "randint",
    "choice",
    "permutation",
    "categorical",
    "truncated_normal",
    "exponential",
    "gumbel",
    "laplace",
    "gamma",
    "beta",
    "dirichlet",
    "multivariate_normal",
    "orthogonal",
    "ball",
    "rademacher",
    "glorot_normal",
    "glorot_uniform",
    "he_normal",
]
