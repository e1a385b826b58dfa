"""Buffer planning for the loop-nest back ends: where intermediate arrays live.

Intermediates are slices of one scratch buffer per dtype that the caller passes in and reuses
across calls, so a step allocates nothing but its results. A slot is handed out again once the
value in it is dead (its last reader has run), which keeps the working set small and hot in
cache. Offsets are multiples of 8 elements (64 bytes for float64).

Slots of 4 KiB or more are padded to a multiple of 4 KiB plus one 64-byte line, so slots laid
out one after another start at different offsets modulo 4 KiB. Without that, every large slot
starts at the same offset in a page, and a fused loop streaming through ten of them at once
makes all its loads and stores compete for the same L1 cache sets (and trips the CPU's 4 KiB
store-to-load aliasing check): the MLP PINN step ran ~15 % slower.
"""

__all__ = ["ScratchPlan", "PRIVATE", "dtype_of"]

ALIGN = 8
PAGE = 4096      # bytes: the period of L1 set indices and of 4K aliasing
LINE = 64        # bytes: the stagger between consecutive large slots
ITEMSIZE = {"float64": 8, "float32": 4, "bool": 1}
# A buffer whose name ends so is per thread: each thread of a threaded tile loop has its own.
PRIVATE = "/thread"


def dtype_of(buffer):
    """The dtype name of a scratch buffer's name."""
    return buffer.split("/")[0]


class ScratchPlan:
    def __init__(self):
        self.size = {}    # dtype name -> elements the buffer needs
        self._free = {}   # dtype name -> [(start, size)] of dead slots
        self._live = {}   # owner -> [dtype name, start, size, expiry]
        self._ties = {}   # owner -> the owners whose slots must live as long as its own

    def take(self, owner, dtype, size, expiry):
        """A slot of ``size`` elements for ``owner``, free again after statement ``expiry``."""
        size = -(-max(size, 1) // ALIGN) * ALIGN
        itemsize = ITEMSIZE.get(dtype_of(dtype), 8)
        page = PAGE // itemsize
        if size >= page:
            size = -(-size // page) * page + max(ALIGN, LINE // itemsize)
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

    def append(self, dtype, size):
        """A slot after every other, never handed out again: for a value that must not share
        memory with any (a threaded entry's 0-d values passed from one phase to the next)."""
        start = self.size.get(dtype, 0)
        self.size[dtype] = start + -(-max(size, 1) // ALIGN) * ALIGN
        return start

    def extend(self, owner, expiry):
        """A view of ``owner``'s slot is read until ``expiry``: keep the slot that long (and the
        slots tied to it)."""
        for o in (owner,) + self._ties.get(owner, ()):
            entry = self._live.get(o)
            if entry is not None:
                entry[3] = max(entry[3], expiry)

    def tie(self, a, b):
        """``a`` and ``b`` name each other's slots in turn (a loop carry's two buffers, swapped
        every iteration): whatever keeps one alive keeps both."""
        self._ties[a] = self._ties.get(a, ()) + (b,)
        self._ties[b] = self._ties.get(b, ()) + (a,)
        self.extend(a, self._live[b][3])
        self.extend(b, self._live[a][3])

    def expiry(self, owner):
        """The statement after which ``owner``'s slot is free (None if it holds none)."""
        entry = self._live.get(owner)
        return None if entry is None else entry[3]

    def release(self, now):
        """Free the slots whose values are dead after statement ``now``."""
        for owner in [o for o, e in self._live.items() if e[3] <= now]:
            dtype, start, size, _ = self._live.pop(owner)
            self._free[dtype].append((start, size))
            self._free[dtype].sort()
