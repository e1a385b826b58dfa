"""Imports run one way (docs/architecture.md, "Layers"): ``lowering`` imports nothing of
``quabla`` above its core (the IR, primitives, interpreter, version) and the leaf modules
``dtypes``, ``errors`` and ``memory``; the core imports no back end. Read from the source, so a lazy
import inside a function counts as much as one at the top."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
ALLOWED_FROM_LOWERING = ("quabla.core", "quabla.dtypes", "quabla.errors", "quabla.memory")


def _imports(path):
    """The absolute names ``path`` imports (relative imports resolved against its package)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = list(package[:len(package) - node.level + 1]) if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            yield from (f"{module}.{alias.name}" for alias in node.names)


def _offending(folder, test):
    return sorted(f"{path.relative_to(ROOT)}: {name}" for path in (ROOT / folder).rglob("*.py")
                  for name in _imports(path) if test(name))


def test_lowering_imports_only_the_core_of_quabla():
    assert _offending("lowering", lambda name: (name == "quabla" or name.startswith("quabla."))
                      and not name.startswith(ALLOWED_FROM_LOWERING)) == []


def test_the_core_imports_no_back_end():
    assert _offending("quabla/core", lambda name: name.split(".")[0] == "lowering") == []


def test_only_quabla_lower_hands_graphs_to_lowering_compile():
    """Solvers are expanded on the way in (``quabla.lower``), so lowering never traces."""
    callers = []
    for path in (ROOT / "quabla").rglob("*.py"):
        text = path.read_text()
        if "lowering.compile(" in text or "lowering import compile" in text:
            callers.append(str(path.relative_to(ROOT)))
    assert callers == ["quabla/lower.py"]


def test_arrays_and_ops_import_nothing_built_on_them():
    """``array.py``, ``ops.py`` and the tracer are the floor the NumPy-style modules stand on:
    ``qb.array`` of tracers and advanced indexing live above them (``indexing.py``), reached
    through the arrays' operators, which ``operators.py`` installs."""
    above = ("quabla.indexing", "quabla.reductions", "quabla.shapes", "quabla.nn",
             "quabla.special", "quabla.operators", "quabla.api", "quabla.staging")
    offending = sorted(f"{path}: {name}" for path in ("quabla/array.py", "quabla/ops.py",
                                                      "quabla/core/tracing.py")
                       for name in _imports(ROOT / path) if name.startswith(above))
    assert offending == []


def test_nothing_below_distributed_imports_it():
    """``quabla.distributed`` is built on the transforms and ``optim`` (its Trainer extends
    theirs through ``combine=``); only the package's ``__init__`` and the v0.1 names of
    ``quabla/compat/`` (the top layer, wrappers over every public function) reach it."""
    above = {"distributed", "compat"}
    offending = sorted(
        f"{path.relative_to(ROOT)}: {name}" for path in (ROOT / "quabla").rglob("*.py")
        if not above & set(path.relative_to(ROOT).parts) and path != ROOT / "quabla/__init__.py"
        for name in _imports(path) if name.startswith("quabla.distributed"))
    assert offending == []
