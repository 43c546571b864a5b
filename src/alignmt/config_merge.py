"""How nested mappings become a tree of dataclasses, and how the tree is checked.

Owns the machinery under `config`, for any tree of dataclasses: each value is coerced from
its field's declared type (never guessed, never from the key's name), merged into a copy of
the tree, and the whole tree then checked against the rules that its `Annotated` types carry
(`config_rules`). Every mistake is a `ConfigError` that names the source and the dotted key,
with a close-match hint. Knows nothing of alignmt's own sections, of YAML or of command lines:
`config` holds the tree, reads the files and turns overrides into mappings. Imports no alignmt
module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import fields, is_dataclass, replace
from difflib import get_close_matches
from typing import Any, Literal, get_args, get_origin, get_type_hints


class ConfigError(ValueError):
    """A config file, dict or override that does not fit the `Config` tree."""


_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _types(cls: type) -> dict[str, Any]:
    # The annotations are strings (postponed evaluation); get_type_hints resolves them, and
    # without include_extras strips Annotated down to the type that values are coerced to.
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


def field_rules(cls: type) -> dict[str, tuple[Any, ...]]:
    """Each field's rules: the metadata of its Annotated type, () for a plain one."""
    hints = get_type_hints(cls, include_extras=True)
    return {f.name: getattr(hints[f.name], "__metadata__", ()) for f in fields(cls)}


def dotted_keys(cls: type, prefix: str = "") -> list[str]:
    """Every leaf field of dataclass `cls` and its sections, as `section.field`, in order."""
    keys = []
    for name, tp in _types(cls).items():
        keys += dotted_keys(tp, f"{prefix}{name}.") if is_dataclass(tp) else [prefix + name]
    return keys


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """`"; did you mean 'train.lr'?"` for the choice closest to `word`, or "" for none."""
    leaf = word.rsplit(".", 1)[-1].lower()
    initials = "".join(part[:1] for part in leaf.split("_"))
    # Abbreviated fields (lr) are too short for difflib to tie to their spelled-out names.
    close = [c for c in choices if len(initials) > 1 and c.rsplit(".", 1)[-1] == initials]
    close = close or get_close_matches(word.lower(), choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _parse_number(text: str) -> int | float | str:
    try:  # int() where it is exact: float() would round big integers
        return int(text) if text.strip().lstrip("+-").isdigit() else float(text)
    except ValueError:
        return text  # rejected by the caller, which names the expected type


def _coerce(value: Any, tp: Any, where: str) -> Any:
    if get_origin(tp) is Literal:
        if isinstance(value, str) and value in get_args(tp):
            return value
        choices, hint = ", ".join(get_args(tp)), did_you_mean(str(value), get_args(tp))
        raise ConfigError(f"{where}: {value!r} is not one of {choices}{hint}")
    parsed = value
    if isinstance(value, str) and tp is not str:
        # Command-line values are all strings, and YAML 1.1 reads 5e-4 (no dot) as one too.
        parsed = _BOOLS.get(value.lower(), value) if tp is bool else _parse_number(value)
    if tp is float and type(parsed) is int:
        parsed = float(parsed)
    if tp is int and type(parsed) is float and parsed.is_integer():
        parsed = int(parsed)  # 2000.0 and 1e4 name integers
    # `type is`, not isinstance: True is no int here, and inf or nan is no learning rate.
    if type(parsed) is tp and (tp is not float or math.isfinite(parsed)):
        return parsed
    expected = {bool: "true or false", int: "an integer", float: "a finite number"}
    raise ConfigError(f"{where}: expected {expected.get(tp, 'a string')}, got {value!r}")


def merge(obj: Any, data: Any, source: str, root: Any = None, prefix: str = "") -> Any:
    """Returns a copy of dataclass `obj` with the keys in `data` coerced and replaced.

    Args:
        obj: the tree (or, in the recursion, the section) to start from; left unchanged.
        data: nested mapping of any subset of its keys; None: no keys.
        source: what `data` came from (a file, "command line"), for error messages.
        root: the whole tree, whose dotted keys an unknown key's hint is drawn from; None: `obj`.
        prefix: the dotted path of `obj` inside `root`, ending in "." ("" at the top).

    Returns:
        A copy that shares no section object with `obj`.
    """
    root = obj if root is None else root
    data = {} if data is None else data  # a YAML section whose keys are all commented out
    if not isinstance(data, Mapping):
        where = f"{source}: {prefix[:-1]}" if prefix else source
        raise ConfigError(f"{where}: expected a mapping of keys, got {data!r}")
    types = _types(type(obj))
    # Sections are mutable: copy them all, so that the result shares none with `obj`.
    changes = {k: replace(getattr(obj, k)) for k, tp in types.items() if is_dataclass(tp)}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in types:
            hint = did_you_mean(path, dotted_keys(type(root)))
            raise ConfigError(f"{source}: unknown key {path!r}{hint}")
        if is_dataclass(types[key]):
            changes[key] = merge(getattr(obj, key), value, source, root, path + ".")
        else:
            changes[key] = _coerce(value, types[key], f"{source}: {path}")
    return replace(obj, **changes)


def check_rules(obj: Any, source: str, root: Any = None, prefix: str = "") -> None:
    """Raises ConfigError for the first value, in field order, that breaks its field's rules."""
    root = obj if root is None else root
    for name, rules in field_rules(type(obj)).items():
        value, key = getattr(obj, name), prefix + name
        if is_dataclass(value):
            check_rules(value, source, root, f"{key}.")
            continue
        if isinstance(value, float) and not math.isfinite(value):  # built in code, not coerced
            problem = "must be a finite number"
        else:
            problem = next((p for rule in rules if (p := rule.problem(value, root))), None)
        if problem:
            raise ConfigError(f"{source}: {key}: {problem}, got {value!r}")
