"""Buffer planning for the loop-nest back ends: where intermediate arrays live.

Intermediates are slices of one scratch buffer per dtype that the caller passes in and reuses
across calls, so a step allocates nothing but its results. A slot is handed out again once the
value in it is dead (its last reader has run), which keeps the working set small and hot in
cache. Offsets are multiples of 8 elements (64 bytes for float64).
"""

__all__ = ["ScratchPlan"]

ALIGN = 8


class ScratchPlan:
    def __init__(self):
        self.size = {}    # dtype name -> elements the buffer needs
        self._free = {}   # dtype name -> [(start, size)] of dead slots
        self._live = {}   # owner -> [dtype name, start, size, expiry]

    def take(self, owner, dtype, size, expiry):
        """A slot of ``size`` elements for ``owner``, free again after statement ``expiry``."""
        size = -(-max(size, 1) // ALIGN) * ALIGN
        free = self._free.setdefault(dtype, [])
        for k, (start, room) in enumerate(free):
            if room >= size:
                free[k] = (start + size, room - size)
                if free[k][1] == 0:
                    del free[k]
                break
        else:
            start = self.size.get(dtype, 0)
            self.size[dtype] = start + size
        self._live[owner] = [dtype, start, size, expiry]
        return start

    def extend(self, owner, expiry):
        """A view of ``owner``'s slot is read until ``expiry``: keep the slot that long."""
        entry = self._live.get(owner)
        if entry is not None:
            entry[3] = max(entry[3], expiry)

    def release(self, now):
        """Free the slots whose values are dead after statement ``now``."""
        for owner in [o for o, e in self._live.items() if e[3] <= now]:
            dtype, start, size, _ = self._live.pop(owner)
            self._free[dtype].append((start, size))
            self._free[dtype].sort()
