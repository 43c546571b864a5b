"""Writes the module list of every package's `__init__.py` docstring from the map of the code,
docs/layout.md: one line per module with its row's "what it holds", and per subpackage the
first sentence of its own docstring; and alignmt's own docstring's list of the layers, with
each one's line under its heading.

    python docs/package_lists.py

tests/test_layout.py holds each docstring to what this writes, so that a package's list
cannot say other than its map.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "alignmt"
MAP = ROOT / "docs" / "layout.md"
WIDTH = 96  # of a list's lines, inside a docstring of 100-column lines
ENTRY = re.compile(r"(?:    )?[\w.]+(?:\.py|/)  ")  # a list's first line of one module
LAYER = re.compile(r"    [a-z][a-z ]*[a-z]  ")  # of one layer


def rows(path: Path = MAP) -> dict[str, str]:
    """Each module's "what it holds", by its path under src/alignmt."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = re.match(r"\| `([\w/]+\.py)` \| [^|]+ \| (.+) \|$", line)
        if line == "## The tests":
            break
        if row:
            found[row[1]] = re.sub(r"<sub>(.*?)</sub>", r"_\1", row[2])
    return found


def layers(path: Path = MAP) -> list[tuple[str, str]]:
    """The layers, first to last: each heading's name and the line under it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    for i, line in enumerate(lines):
        heading = re.fullmatch(r"## \d+\. ([a-z ]+)", line)
        if heading:
            found.append((heading[1], lines[i + 2].rstrip(".")))
    return found


def layer_listing(given: list[tuple[str, str]]) -> str:
    """alignmt's list of its layers."""
    column = max(len(name) for name, _ in given) + 2
    return "\n".join(f"    {name.ljust(column)}{what}" for name, what in given)


def packages() -> list[Path]:
    """Every package folder, the top one last (its docstring lists layers, not modules)."""
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE)


def listing(folder: Path, held: dict[str, str]) -> str:
    """The module list of the package `folder`."""
    entries = []
    for path in sorted(folder.iterdir()):
        if path.suffix == ".py" and path.name != "__init__.py":
            entries.append((path.name, held[str(path.relative_to(PACKAGE))]))
        elif (path / "__init__.py").is_file():
            first = ast.get_docstring(ast.parse((path / "__init__.py").read_text())) or ""
            entries.append((f"{path.name}/", first.split("\n\n")[0].replace("\n", " ")))
    column = max(len(name) for name, _ in entries) + 2
    lines = []
    for name, what in entries:
        wrapped = textwrap.wrap(what, WIDTH - 4 - column) or [""]
        lines.append(f"    {name.ljust(column)}{wrapped[0]}")
        lines += [" " * (4 + column) + more for more in wrapped[1:]]
    return "\n".join(lines)


def with_listing(source: str, block: str, entry: re.Pattern = ENTRY) -> str:
    """An `__init__.py`'s text with its docstring's list (lines that `entry` matches, and
    those indented under them) replaced by `block`, or `block` added at the docstring's end
    where it has none."""
    end = source.index('"""', 3)
    doc, rest = source[3:end], source[end:]
    lines = doc.split("\n")
    first = next((i for i, line in enumerate(lines) if entry.match(line)), None)
    if first is None:
        return '"""' + _as_formatted(doc.rstrip("\n") + "\n\n" + block + "\n") + rest
    last = first
    while last + 1 < len(lines) and (
        entry.match(lines[last + 1]) or lines[last + 1].startswith(" " * 8)
    ):
        last += 1
    return '"""' + _as_formatted("\n".join([*lines[:first], block, *lines[last + 1 :]])) + rest


def _as_formatted(doc: str) -> str:
    """`doc` as the formatter leaves it: where every line after the first is indented (a
    title and a list alone), it takes the common indentation away."""
    title, _, body = doc.partition("\n")
    return title + "\n" + textwrap.dedent(body)


def written(layout: Path = MAP) -> dict[Path, str]:
    """Each package's `__init__.py`, and the text the map `layout` says it should have."""
    held = rows(layout)
    out = {}
    for folder in packages():
        path = folder / "__init__.py"
        out[path] = with_listing(path.read_text(encoding="utf-8"), listing(folder, held))
    top = PACKAGE / "__init__.py"
    out[top] = with_listing(top.read_text(encoding="utf-8"), layer_listing(layers(layout)), LAYER)
    return out


if __name__ == "__main__":
    for path, text in written().items():
        if path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
