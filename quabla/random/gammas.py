"""Gamma samples (Marsaglia and Tsang's method) and the samplers made of them: beta,
dirichlet, and ball, whose generalized normals are signed gamma powers."""

import math

import numpy as np

from .. import dtypes
from ..array import array_shape
from .arguments import (
    as_param,
    check_batch,
    finish,
    flat,
    float_dtype,
    positive_size,
    real_array,
    shape_and_params,
)
from .keys import check_key, split, stream
from .outputs import box_muller, f53c, rejection, signs, standard_exponentials


def _positive(arr, name):
    """Shape parameters must be finite and positive."""
    if not np.all(np.isfinite(arr) & (arr > 0.0)):
        raise ValueError(f"{name} must be finite and positive, got {arr}")


def _gamma_parts(state, a):
    """Gamma(a) samples for a flat float64 array ``a > 0`` as ``(x, boost)``: ``x * exp(boost)``.

    Marsaglia-Tsang: outputs ``0 .. n-1`` are the boost uniforms ``ub = ((out >> 11) + 1) *
    2**-53``, one per element (read even where ``a >= 1``); then ``rejection`` rounds from
    output ``n``, three outputs ``(o0, o1, o2)`` per attempt. With ``a' = a + 1`` where
    ``a < 1``, else ``a``: ``d = a' - 1/3``, ``c = 1 / sqrt(9 * d)``;
    ``x = r * cos(t)`` (Box-Muller on ``o0, o1``), ``u = ((o2 >> 11) + 1) * 2**-53``,
    ``t1 = 1 + c * x``, ``v = t1 * t1 * t1``; accept when ``t1 > 0`` and
    ``log(u) < 0.5 * x * x + d - d * v + d * log(v)``, giving ``d * v``.
    ``boost = log(ub) / a`` where ``a < 1``, else 0.
    """
    n = a.size
    small = a < 1.0
    a1 = np.where(small, a + 1.0, a)
    d = a1 - 1.0 / 3.0
    c = 1.0 / np.sqrt(9.0 * d)

    def attempt(idx, bits):
        r, t = box_muller(bits[:, 0], bits[:, 1])
        x = r * np.cos(t)
        u = f53c(bits[:, 2])
        di = d[idx]
        t1 = 1.0 + c[idx] * x
        v = t1 * t1 * t1
        with np.errstate(invalid="ignore", divide="ignore"):
            ok = (t1 > 0.0) & (np.log(u) < 0.5 * x * x + di - di * v + di * np.log(v))
        return ok, di * v

    x = rejection(state, n, 3, attempt, n)
    boost = np.zeros(n)
    if np.any(small):
        ub = f53c(stream(state, 0, n))
        boost[small] = np.log(ub[small]) / a[small]
    return x, boost


def gamma(key, a, shape=None, dtype=dtypes.float64):
    """Gamma(a, 1) samples (``a > 0``, broadcast to ``shape``; ``shape`` defaults to ``a``'s).

    Algorithm: Marsaglia and Tsang's (2000), with the boost ``Gamma(a) = Gamma(a + 1) *
    U**(1/a)`` for ``a < 1``. Outputs ``0 .. n-1`` are the boost uniforms
    ``ub_k = ((out(k) >> 11) + 1) * 2**-53`` (read for every element). Then rejection rounds
    from output ``n``: the pending elements in C order take three outputs each,
    ``(o0, o1, o2)``; ``x`` is the first Box-Muller normal of ``(o0, o1)``,
    ``u = ((o2 >> 11) + 1) * 2**-53``; with ``a1 = a + 1`` if ``a < 1`` else ``a``,
    ``d = a1 - 1/3``, ``c = 1 / sqrt(9 * d)``, ``t = 1 + c * x``, ``v = t * t * t``: accept
    when ``t > 0`` and ``log(u) < 0.5 * x * x + d - d * v + d * log(v)``. The sample is
    ``d * v``, times ``exp(log(ub_k) / a)`` where ``a < 1``; computed in float64, then
    rounded to ``dtype`` (tiny ``a`` can underflow to 0).
    """
    k = check_key(key)
    dt = float_dtype(dtype)
    shape, (a,) = shape_and_params(shape, a=a)
    a = flat(a, shape)
    _positive(a, "a")
    x, boost = _gamma_parts(k.state, a)
    return finish((x * np.exp(boost)).reshape(shape), dt)


def beta(key, a, b, shape=None, dtype=dtypes.float64):
    """Beta(a, b) samples from two gammas, ``Ga / (Ga + Gb)``.

    ``shape`` defaults to the broadcast shape of ``a`` and ``b``. With ``(ka, kb) =
    split(key)``, ``Ga`` and ``Gb`` are ``gamma(ka, a, shape)`` and ``gamma(kb, b, shape)``
    taken in log space (``log(d * v) + log(ub) / a``, see ``gamma``), ``z = log Ga - log Gb``,
    and the sample is the logistic ``1 / (1 + exp(-z))`` if ``z >= 0`` else
    ``exp(z) / (1 + exp(z))``, in float64, then rounded to ``dtype``.
    """
    k = check_key(key)
    dt = float_dtype(dtype)
    shape, (a, b) = shape_and_params(shape, a=a, b=b)
    a, b = flat(a, shape), flat(b, shape)
    _positive(a, "a")
    _positive(b, "b")
    ka, kb = split(k)
    xa, ba = _gamma_parts(ka.state, a)
    xb, bb = _gamma_parts(kb.state, b)
    z = (np.log(xa) + ba) - (np.log(xb) + bb)
    with np.errstate(over="ignore"):
        x = np.where(z >= 0.0, 1.0 / (1.0 + np.exp(-z)), np.exp(z) / (1.0 + np.exp(z)))
    return finish(x.reshape(shape), dt)


def dirichlet(key, alpha, shape=None, dtype=dtypes.float64):
    """Dirichlet(alpha) samples over the last axis of ``alpha`` (``K`` categories).

    The result has shape ``shape + (K,)``; ``shape`` defaults to ``alpha.shape[:-1]`` and must
    be a broadcast of it. Algorithm: normalized gammas, in log space. ``L`` is ``gamma(key,
    alpha, shape + (K,))`` in log space (``log(d * v) + log(ub) / a``, see ``gamma``); the
    sample is ``exp(L - max L) / sum(exp(L - max L))`` along the last axis, in float64, then
    rounded to ``dtype``.
    """
    k = check_key(key)
    dt = float_dtype(dtype)
    alpha = real_array(alpha, "alpha")
    if alpha.ndim == 0:
        raise ValueError("alpha must have rank 1 or more (the last axis holds the categories)")
    _positive(alpha, "alpha")
    batch = alpha.shape[:-1]
    if shape is None:
        shape = batch
    else:
        shape = array_shape(shape)
        check_batch(shape, batch, "shape of alpha[..., 0]")
    full = shape + alpha.shape[-1:]
    x, boost = _gamma_parts(k.state, flat(alpha, full))
    logs = (np.log(x) + boost).reshape(full)
    e = np.exp(logs - logs.max(axis=-1, keepdims=True))
    return finish(e / e.sum(axis=-1, keepdims=True), dt)


def ball(key, d, p=2, shape=(), dtype=dtypes.float64):
    """Points uniform in the unit ``p``-norm ball of dimension ``d``; shape ``shape + (d,)``.

    Algorithm (JAX's, after Barthe et al. 2005): ``(k1, k2) = split(key)``; ``g`` is the
    generalized normal of shape ``shape + (d,)`` from ``k1``: with ``(k3, k4) = split(k1)``,
    ``g = s * G**(1/p)``, ``G = gamma(k3, 1/p)`` and ``s = rademacher(k4)``; ``e =
    exponential(k2, shape)``; the point is ``g / (sum(|g|**p) + e)**(1/p)`` (sum over the last
    axis), in float64, then rounded to ``dtype``.
    """
    k = check_key(key)
    dt = float_dtype(dtype)
    shape = array_shape(shape)
    d = positive_size(d, "d")
    p = as_param(p, "p")
    if np.ndim(p) or not (np.isfinite(p) and p > 0.0):
        raise ValueError(f"p must be a finite positive number, got {p}")
    k1, k2 = split(k)
    k3, k4 = split(k1)
    count = math.prod(shape) * d
    x, boost = _gamma_parts(k3.state, np.full(count, 1.0 / p))
    g = (signs(k4.state, count) * (x * np.exp(boost)) ** (1.0 / p)).reshape(shape + (d,))
    e = standard_exponentials(k2.state, math.prod(shape)).reshape(shape)
    norm = (np.sum(np.abs(g) ** p, axis=-1) + e) ** (1.0 / p)
    return finish(g / norm[..., None], dt)
