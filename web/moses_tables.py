"""Write static/web/moses_tables.js: the character classes and nonbreaking prefixes of the
Moses tokenizer as sacremoses defines them, for the browser's twin of it (static/web/moses.js).

    python web/moses_tables.py    # `bash web/vendor` runs it too

Each class is found by running sacremoses' own compiled pattern over every Unicode code point,
so that a character the Python side counts as alphanumeric (or a number, a currency sign, a
space) is exactly the one the page counts; Perl's property lists that sacremoses carries are
older than the Unicode of either Python or the browser, so JavaScript's \\p{...} would differ.
Classes are written as ranges of code points for a `u`-flagged RegExp. tests/test_web_moses.py
checks that the committed file is what this script writes with the installed sacremoses."""

from __future__ import annotations

import json
import re
import sys
from importlib.metadata import version
from pathlib import Path

from sacremoses.tokenize import MosesDetokenizer, MosesTokenizer
from sacremoses.util import is_cjk

# The languages the shipped configs read and write; the page refuses others by name.
LANGS = ("en", "de", "fr")
OUT = Path(__file__).resolve().parents[1] / "src/alignmt/answers/static/web/moses_tables.js"
# every code point, surrogates included, as one string that a one-character class scans
EVERY = "".join(map(chr, range(0x110000)))


def matched(pattern: str) -> list[int]:
    """The code points that the one-character regular expression `pattern` matches."""
    return [m.start() for m in re.finditer(pattern, EVERY)]


def ranges(points: list[int]) -> str:
    """Sorted code points as the body of a `u`-flagged character class: "\\u{41}-\\u{5a}..."."""
    spans: list[list[int]] = []
    for point in sorted(set(points)):
        if spans and spans[-1][1] == point - 1:
            spans[-1][1] = point
        else:
            spans.append([point, point])
    return "".join(f"\\u{{{a:x}}}" if a == b else f"\\u{{{a:x}}}-\\u{{{b:x}}}" for a, b in spans)


def classes() -> dict[str, str]:
    """Name -> class body, each the set its sacremoses pattern or string matches."""
    tok, detok = MosesTokenizer, MosesDetokenizer
    pad = tok.PAD_NOT_ISALNUM[0].pattern  # ([^{IsAlnum}\s\.'\`\,\-])
    currency = detok.IS_CURRENCY_SYMBOL.pattern.removeprefix("^").removesuffix("+$")
    found = {
        # str.split() and strip() split on str.isspace(), and \s is the same set in re
        "space": [p for p in range(0x110000) if chr(p).isspace()],
        "pad": matched(pad),
        "number": matched(f"[{tok.IsN}]"),
        "alpha": matched(f"[{tok.IsAlpha}]"),
        "alphaNumber": matched(f"[{tok.IsAlpha}{tok.IsN}]"),
        # the prefix rule's tests read the characters of the strings, not a pattern
        "anyAlpha": [ord(c) for c in tok.IsAlpha],
        "lower": [ord(c) for c in tok.IsLower],
        "currency": matched(currency),
        "detokAlpha": matched(f"[{detok.IsAlpha}]"),
        "cjk": [p for p in range(0x110000) if is_cjk(chr(p))],
    }
    assert matched(r"\s") == found["space"], "re's \\s is no longer str.isspace()"
    return {name: ranges(points) for name, points in found.items()}


def prefixes() -> dict[str, dict[str, list[str]]]:
    """Language -> its nonbreaking prefixes and those that hold only before a number."""
    out = {}
    for lang in LANGS:
        tok = MosesTokenizer(lang=lang)
        out[lang] = {"any": tok.NONBREAKING_PREFIXES, "numeric": tok.NUMERIC_ONLY_PREFIXES}
    return out


def write(path: Path = OUT) -> str:
    """The module's text, written to `path`."""
    text = (
        f"/* Written by web/moses_tables.py from sacremoses {version('sacremoses')}: "
        "do not edit. The character classes\n"
        "   (bodies of u-flagged RegExp classes) and nonbreaking prefixes of the Moses "
        "tokenizer, for moses.js. */\n\n"
        f"export const CLASSES = {json.dumps(classes(), indent=1)};\n\n"
        f"export const PREFIXES = {json.dumps(prefixes(), ensure_ascii=False)};\n"
    )
    path.write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
