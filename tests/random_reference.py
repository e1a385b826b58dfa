"""An independent pure-Python reading of docs/random.md's SplitMix64 stream, shared by the
random tests (so a change of the library's generator cannot change the reference with it)."""

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def ref_mix(z):
    z &= MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def ref_unmix(z):
    """The inverse of ref_mix (to build keys with chosen first outputs)."""

    def unxorshift(z, s):
        x = z
        for _ in range(64 // s + 1):
            x = z ^ (x >> s)
        return x

    z = unxorshift(z, 31)
    z = (z * pow(0x94D049BB133111EB, -1, 1 << 64)) & MASK
    z = unxorshift(z, 27)
    z = (z * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & MASK
    return unxorshift(z, 30)


def ref_out(state, i):
    """Output ``i`` of the stream of a key with state ``state``."""
    return ref_mix(state + (i + 1) * GOLDEN)
