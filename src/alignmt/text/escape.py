"""Moses' escaping of special characters, and its inverse.

The Moses scripts (Koehn et al. 2007) write the characters that their factored and syntax
formats reserve as XML entities when they tokenise, so most preprocessed translation data
reads "Parliament &apos;s prerogative , &quot;". Cutting text into tokens is `tokenize`'s.
"""

from __future__ import annotations

import re

# The entities escape-special-chars.perl writes; deescape-special-chars.perl also reads the
# names older releases wrote.
_ESCAPES = {
    "&": "&amp;",
    "|": "&#124;",
    "<": "&lt;",
    ">": "&gt;",
    "'": "&apos;",
    '"': "&quot;",
    "[": "&#91;",
    "]": "&#93;",
}
_ENTITIES = {entity: char for char, entity in _ESCAPES.items()}
_ENTITIES |= {"&bar;": "|", "&bra;": "[", "&ket;": "]"}
# One pass each way: str.translate escapes "&" exactly once, and one regex pass reads
# "&amp;apos;" as the text "&apos;" (the script's "&amp;" rule comes last for the same end).
_ESCAPE_TABLE = str.maketrans(_ESCAPES)
_ENTITY = re.compile("|".join(map(re.escape, _ENTITIES)))


def moses_escape(text: str) -> str:
    """`text` with the characters Moses escapes written as its entities: "'s" -> "&apos;s"."""
    return text.translate(_ESCAPE_TABLE)


def moses_unescape(text: str) -> str:
    """`text` with Moses' entities as their characters: "&apos;s" -> "'s"; the inverse of
    `moses_escape`. Other entities ("&nbsp;") and a bare "&" stay as written."""
    return _ENTITY.sub(lambda match: _ENTITIES[match[0]], text)
