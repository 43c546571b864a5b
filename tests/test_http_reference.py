"""docs/http-api.md is the reference docs/http_reference.py writes from the server's
OpenAPI schema: up to date, with every route and every object."""

from __future__ import annotations

from pathlib import Path

from alignmt.serve.app import create_app
from tests.conftest import docs_script

DOCS = Path(__file__).resolve().parents[1] / "docs"


def render() -> str:
    return docs_script("http_reference").render()


def test_the_http_page_is_what_the_generator_writes_now():
    assert (DOCS / "http-api.md").read_text() == render(), (
        "run: python docs/http_reference.py > docs/http-api.md"
    )


def test_every_field_of_every_object_is_described():
    undescribed = [
        f"{name}.{field}"
        for name, schema in create_app({}).openapi()["components"]["schemas"].items()
        for field, spec in schema.get("properties", {}).items()
        if not spec.get("description")
    ]
    assert undescribed == []


def test_every_route_and_object_of_the_schema_has_its_section():
    page, spec = render(), create_app({}).openapi()
    for path, methods in spec["paths"].items():
        for method in methods:
            assert f"### `{method.upper()} {path}`" in page
    for name, schema in spec["components"]["schemas"].items():
        assert f"### {name}\n" in page
        for field in schema.get("properties", {}):
            assert f"| `{field}` |" in page, (name, field)
