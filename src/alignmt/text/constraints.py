"""Lexical constraints as users write them: one JSON object per input line,
`{"include": ["phrase", ...], "exclude": ["phrase", ...]}`, the phrases raw target text that
the line's translation must contain and must not. Reading checks the file's form and names
the line of anything wrong; which tokens a phrase becomes is the translator's to say.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from alignmt.text.corpus import CorpusError

KINDS = ("include", "exclude")


@dataclass(frozen=True)
class Phrases:
    """One line's constraints as raw text."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude)


def parse_phrases(value: object) -> Phrases:
    """A JSON value (already decoded) as `Phrases`: an object with the keys `include` and
    `exclude`, each optional and a list of non-blank strings; null or {} is no constraint.

    Raises:
        ValueError: saying what is wrong with it.
    """
    if value is None:
        return Phrases()
    if not isinstance(value, dict):
        raise ValueError(f'expected a JSON object such as {{"include": [...]}}, got {value!r}')
    unknown = sorted(set(value) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown keys {unknown}: a constraint has only {list(KINDS)}")
    lists = {}
    for kind in KINDS:
        phrases = value.get(kind, [])
        if not isinstance(phrases, list) or not all(isinstance(p, str) for p in phrases):
            raise ValueError(f"{kind!r} must be a list of strings, got {phrases!r}")
        if any(not p.strip() for p in phrases):
            raise ValueError(f"{kind!r} holds a blank phrase")
        lists[kind] = tuple(phrases)
    return Phrases(**lists)


def read_constraints(path: str | Path) -> list[Phrases]:
    """Each line's constraints from a JSON-lines file; an empty line is no constraint.

    Raises:
        CorpusError: naming the file and line of a line that is not UTF-8, not JSON, or not
            a constraint.
    """
    path = Path(path)
    out = []
    with path.open("rb") as stream:
        for number, raw in enumerate(stream, 1):
            try:
                text = raw.decode("utf-8").strip()
                out.append(parse_phrases(json.loads(text)) if text else Phrases())
            except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as bad:
                raise CorpusError(f"{path}:{number}: {_reason(bad)}") from None
    return out


def _reason(error: Exception) -> str:
    if isinstance(error, UnicodeDecodeError):
        return f"not UTF-8 (byte {error.start})"
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON ({error.msg}, column {error.colno})"
    return str(error)
