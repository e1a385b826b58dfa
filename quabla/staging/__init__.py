"""Staging: how a transformed function is traced, transformed, compiled, cached and called.

Modules, each importing only those listed before it:

- ``signature``: a call's signature (``classify_leaves``, ``Aval``, ``Static``, ``ShapeDtype``),
  the key of every cache.
- ``aot``: what ``lower`` and ``compile`` give (``Lowered``, ``CallSignature``, ``Compiled``) and
  the name-keyed ``Program``/``Executable``.
- ``staged``: ``Staged``, the transformed function: its caches (LRU, the all-Tensor fast path,
  single flight, probes), compiling a miss and splicing into an enclosing trace.
- ``transform``: ``trace_function``, the ``Transform`` protocol and the ``argnums`` layout.
- the transforms: ``jit`` (and the ``Compiler``), ``grad``, ``jvp_vjp``, ``vmap``, ``jacobian``.

The public wrappers (``qb.jit``, ``qb.grad``, ...) are in ``quabla/api.py``.
"""
