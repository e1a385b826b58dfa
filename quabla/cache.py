"""``python -m quabla.cache info|clear``: show or empty the on-disk compile cache.

``info`` prints where new entries go (and which read-only caches are also read), how many
entries there are, their size and the bound (``QUABLA_CACHE_MAX_BYTES``). ``clear`` deletes
the entries of the private directory and nothing else in it. See docs/compile-cache.md.
"""

import argparse
import sys
import time

from lowering import cache

__all__ = ["main"]


def _size(count):
    """``count`` bytes, exactly and readably."""
    value, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{count} bytes" if unit == "B" else f"{count} bytes ({value:.1f} {unit})"


def _when(ns):
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9))


def _info():
    state = cache.info()
    lines = [f"location: {state['directory']}"]
    lines += [f"also read (read-only): {folder}" for folder in state["read_only"]]
    lines += [f"entries: {state['entries']}",
              f"size: {_size(state['bytes'])}",
              f"bound: {_size(state['max_bytes'])} (QUABLA_CACHE_MAX_BYTES)"]
    if state["last_used"] is not None:
        least, most = state["last_used"]
        lines.append(f"last used: {_when(most)} (least recently used entry: {_when(least)})")
    print("\n".join(lines))


def _clear():
    entries, freed = cache.clear()
    noun = "entry" if entries == 1 else "entries"
    print(f"removed {entries} {noun}, {_size(freed)}, from {cache.cache_dir()}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m quabla.cache",
                                     description="Show or empty Quabla's compile cache.")
    parser.add_argument("command", choices=("info", "clear"),
                        help="info: location, entries, size and bound; clear: delete the "
                             "entries (only the cache's own files)")
    args = parser.parse_args(argv)
    try:
        {"info": _info, "clear": _clear}[args.command]()
    except ValueError as exc:  # a bad QUABLA_CACHE_MAX_BYTES
        parser.error(str(exc))


if __name__ == "__main__":
    sys.exit(main())
