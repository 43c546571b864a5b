"""docs/configuration.md is the reference docs/config_reference.py writes from config.py:
up to date, with every key, and a description for each."""

from __future__ import annotations

from pathlib import Path

from alignmt.config import _KEYS
from tests.conftest import docs_script

DOCS = Path(__file__).resolve().parents[1] / "docs"


def render() -> str:
    return docs_script("config_reference").render()


def test_the_configuration_page_is_what_the_generator_writes_now():
    assert (DOCS / "configuration.md").read_text() == render(), (
        "run: python docs/config_reference.py > docs/configuration.md"
    )


def test_every_key_has_a_row_with_a_description():
    rows = [line[2:-2].split(" | ", 3) for line in render().splitlines() if line.startswith("| `")]
    assert sorted(key.strip("`") for key, *_ in rows) == sorted(_KEYS)
    assert [key for key, _, _, text in rows if not text.strip()] == []
