"""Writes docs/configuration.md, the reference of every config key, from `alignmt.config`
itself: each section's fields in order, with the type as declared, the default, and the
comments written beside and above the field.

    python docs/config_reference.py > docs/configuration.md

A test holds the checked-in page to this output, so a new or changed field shows up in a
diff of the page.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Literal, get_args, get_origin

from alignmt import config

SOURCE = Path(config.__file__)


def comments_by_line(text: str) -> dict[int, str]:
    """Each comment's text (without `#`), by its line number (from 1)."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return {t.start[0]: t.string[1:].strip() for t in tokens if t.type == tokenize.COMMENT}


def describe(node: ast.AnnAssign, comments: dict[int, str], lines: list[str]) -> str:
    """The comment lines right above a field and the one beside it, as one text."""
    above, line = [], node.lineno - 1
    while line in comments and lines[line - 1].lstrip().startswith("#"):
        above.insert(0, comments[line])
        line -= 1
    beside = comments.get(node.end_lineno)  # on the field's own line: a trailing comment
    return " ".join([*above, *([beside] if beside else [])])


def section_rows(cls: type, tree: ast.Module, comments, lines) -> list[tuple[str, str, str]]:
    """(field, type as written, description) for each field of dataclass `cls`."""
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    nodes = {n.target.id: n for n in body.body if isinstance(n, ast.AnnAssign)}
    return [
        (f.name, written(nodes[f.name].annotation), describe(nodes[f.name], comments, lines))
        for f in fields(cls)
    ]


def written(annotation: ast.expr) -> str:
    """The type as written, where a Literal alias of config.py (`Score`) is spelt out: a
    reader wants the choices, not the alias's name."""
    text = ast.unparse(annotation)
    alias = getattr(config, text, None)
    return f"Literal{list(get_args(alias))}" if get_origin(alias) is Literal else text


def default(value: object) -> str:
    return "`" + ('""' if value == "" else repr(value)) + "`"


def table(prefix: str, cls: type, values: object, source) -> list[str]:
    """The Markdown table of dataclass `cls`'s fields, their keys written `prefix` + name."""
    rows = ["| key | type | default | what it sets |", "| --- | --- | --- | --- |"]
    for name, kind, text in section_rows(cls, *source):
        cells = [f"`{prefix}{name}`", f"`{kind}`", default(getattr(values, name)), text]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return rows


def render() -> str:
    text = SOURCE.read_text()
    source = (ast.parse(text), comments_by_line(text), text.splitlines())
    out = [
        "# Configuration reference",
        "",
        "Every key a config file, a `key.path=value` override or `alignmt.train(**fields)`",
        "can set, in the order `alignmt train --print-config` writes them. Written by",
        "`python docs/config_reference.py` from `alignmt/config.py`: the types are as declared",
        "there (`Count` is an integer ≥ 1, `NonNegative` ≥ 0, `Positive` > 0, `Probability` in",
        "[0, 1)); a value outside its type is refused with the file, the key and the rule.",
    ]
    root = config.Config()
    for f in fields(config.Config):
        value = getattr(root, f.name)
        if is_dataclass(value):
            out += ["", f"## {f.name}", "", *table(f"{f.name}.", type(value), value, source)]
    top = [row for row in table("", config.Config, root, source)[2:] if "Config`" not in row]
    out += ["", "## top level", "", *table("", config.Config, root, source)[:2], *top]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(), end="")
