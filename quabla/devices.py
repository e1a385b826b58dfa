"""``qb.devices()``: the devices this installation can run (spec 000 §3.6)."""

__all__ = ["devices"]


def devices():
    """``"cpu"`` always; ``"cuda:0"``, ``"cuda:1"``, ... for each GPU numba-cuda finds (and
    ``"cuda:0"`` under its simulator, ``NUMBA_ENABLE_CUDASIM=1``); ``"mlx"`` when MLX imports.
    Any of them (and ``"cuda"`` for ``"cuda:0"``) is a valid ``jit(..., device=...)``."""
    from lowering import available_devices

    return available_devices()
