"""The reference pages docs/configuration.md and docs/http-api.md are what their generators
(docs/config_reference.py, docs/http_reference.py) write now, from config.py and from the
server's OpenAPI schema, and each is complete: every key, route, object and field, each
described."""

from __future__ import annotations

from pathlib import Path

import pytest

from alignmt.config import _KEYS
from alignmt.serve.app import create_app
from tests.conftest import docs_script

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize(
    "page,script", [("configuration.md", "config_reference"), ("http-api.md", "http_reference")]
)
def test_the_page_is_what_its_generator_writes_now(page, script):
    assert (DOCS / page).read_text() == docs_script(script).render(), (
        f"run: python docs/{script}.py > docs/{page}"
    )


def test_every_config_key_has_a_row_with_a_description():
    page = docs_script("config_reference").render()
    rows = [line[2:-2].split(" | ", 3) for line in page.splitlines() if line.startswith("| `")]
    assert sorted(key.strip("`") for key, *_ in rows) == sorted(_KEYS)
    assert [key for key, _, _, text in rows if not text.strip()] == []


def test_every_field_of_every_http_object_is_described():
    undescribed = [
        f"{name}.{field}"
        for name, schema in create_app({}).openapi()["components"]["schemas"].items()
        for field, spec in schema.get("properties", {}).items()
        if not spec.get("description")
    ]
    assert undescribed == []


def test_every_route_and_object_of_the_schema_has_its_section():
    page, spec = docs_script("http_reference").render(), create_app({}).openapi()
    for path, methods in spec["paths"].items():
        for method in methods:
            assert f"### `{method.upper()} {path}`" in page
    for name, schema in spec["components"]["schemas"].items():
        assert f"### {name}\n" in page
        for field in schema.get("properties", {}):
            assert f"| `{field}` |" in page, (name, field)
