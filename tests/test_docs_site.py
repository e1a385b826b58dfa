"""The documentation site builds with warnings as errors, and its API reference names every
public name of ``quabla`` with a docstring (the pages' ``>>>`` blocks run as doctests through
pyproject.toml's ``--doctest-glob``)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

import quabla as qb

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODULES = ["tree", "random", "optim", "linalg", "nn", "special", "distributed", "flatten_util"]


def public_names():
    """(qualified name, object) of every name a user reaches: ``qb.__all__`` but the v0.1
    names (``quabla.compat``, documented in docs/guide/migrating.md), the attributes kept out
    of it because they shadow builtins, and each public module's ``__all__``."""
    from quabla.compat import TABLE, resolve

    def v01(name):  # a name the compatibility layer binds (perhaps bound already)
        return name in TABLE and (name not in vars(qb) or vars(qb)[name] is resolve(TABLE[name]))

    names = [n for n in qb.__all__ if n not in ("__version__", "dtypes") and n not in MODULES
             and not v01(n)]
    names += ["abs", "sum", "max", "min", "any", "all", "round", "map"]
    found = [(f"quabla.{n}", getattr(qb, n)) for n in names]
    for module in MODULES:
        found += [(f"quabla.{module}.{n}", getattr(getattr(qb, module), n))
                  for n in getattr(qb, module).__all__]
    return found


def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path)],
        check=False, cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "api" / "transforms" / "index.html").exists()
    assert 'id="quabla.grad"' in (tmp_path / "api" / "transforms" / "index.html").read_text()


def test_every_public_name_has_a_docstring():
    missing = [name for name, obj in public_names() if not (obj.__doc__ or "").strip()]
    assert not missing, missing


def test_every_public_name_is_in_the_api_reference():
    pages = "\n".join(p.read_text() for p in (ROOT / "docs" / "api").glob("*.md"))
    listed = set(re.findall(r"^::: (quabla[\w.]*)", pages, flags=re.MULTILINE))
    modules = {f"quabla.{m}" for m in MODULES}
    missing = [name for name, _ in public_names()
               if name not in listed and name.rsplit(".", 1)[0] not in modules | listed]
    assert not missing, missing


def test_api_docstring_examples_run():
    """The transforms' docstrings carry examples for the API pages: they must stay true."""
    import doctest

    import quabla.api

    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(quabla.api, optionflags=flags, verbose=False)
    assert result.attempted >= 6 and result.failed == 0, result
