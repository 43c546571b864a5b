"""Serve's promise, read from its source: nothing under alignmt/serve imports training,
experiments, the command line or matplotlib, even inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import alignmt

FORBIDDEN = ("alignmt.training", "alignmt.experiments", "alignmt.cli", "matplotlib")


def test_the_service_never_imports_training_experiments_the_cli_or_matplotlib():
    """Follows every import written in the serve modules, at the top or inside a function,
    through each `alignmt` module and package they reach (the lazy top-level `alignmt`
    aside), and fails on any of FORBIDDEN: a check of what is written, where test_layers.py
    checks what an import loads."""
    src = Path(alignmt.__file__).parent
    todo = [f"alignmt.serve.{p.stem}" for p in (src / "serve").glob("*.py")]
    seen: set[str] = set()
    written: dict[str, str] = {}  # module imported -> the first module that imports it
    while todo:
        name = todo.pop()
        path = _module_file(src, name)
        if name in seen or path is None:  # None: a name that is not a module
            continue
        seen.add(name)
        for imported in _imports(ast.parse(path.read_text())):
            written.setdefault(imported, name)
            parts = imported.split(".")
            if parts[0] == "alignmt":  # the module and each package above it
                todo += [".".join(parts[:i]) for i in range(2, len(parts) + 1)]
    assert {"alignmt.checkpoint.torch_io", "alignmt.decoding.translator"} <= seen
    bad = {m: by for m, by in written.items() if any(_within(m, f) for f in FORBIDDEN)}
    assert bad == {}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _module_file(src: Path, name: str) -> Path | None:
    path = src.parent / (name.replace(".", "/") + ".py")
    package = path.with_suffix("") / "__init__.py"
    return path if path.is_file() else package if package.is_file() else None


def _imports(tree: ast.AST) -> list[str]:
    """Every module an import statement names; `from a import b` names a.b too, in case b
    is a module."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return names
