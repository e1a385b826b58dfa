"""What the examples share: where their figures go, matplotlib or a note without it, and the
command line (``--small`` for the sizes the tests run, ``--out DIR`` for the figure's folder).

Notes go to standard error, so an example's standard output is its results alone."""

import argparse
import os
import pathlib
import sys

IMAGES = pathlib.Path(__file__).resolve().parents[1] / "docs" / "images"  # what the docs show


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only), or None with a note."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install 'quabla[examples]'): no figure",
              file=sys.stderr)
        return None
    return plt


def save(fig, out, name):
    """Write ``fig`` as ``out/name`` (a PNG at 120 dpi), close it, and return the path."""
    import matplotlib.pyplot as plt

    path = pathlib.Path(out) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"saved {path}", file=sys.stderr)
    return path


def command_line(doc, main, small):
    """Run ``main`` from the command line: full size with the figure in docs/images, or
    ``--small`` (or ``QUABLA_EXAMPLE_SMALL=1``) at the sizes ``small`` with the figure in the
    current folder, so that a quick run leaves the docs' figures alone."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="the sizes the tests run")
    parser.add_argument("--out", help="folder for the figure (default docs/images; "
                                      "with --small, the current folder)")
    args = parser.parse_args()
    quick = args.small or os.environ.get("QUABLA_EXAMPLE_SMALL") == "1"
    return main(**(small if quick else {}), out=args.out or ("." if quick else IMAGES))
