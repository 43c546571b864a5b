"""Writes docs/http-api.md, the reference of `alignmt serve`'s HTTP API, from the server's
own OpenAPI schema: each route with what it does, and each request and response object
with its fields, types, defaults and descriptions.

    python docs/http_reference.py > docs/http-api.md

A test holds the checked-in page to this output. A running server serves the same schema
at /openapi.json and browsable at /docs.
"""

from __future__ import annotations

from typing import Any

from alignmt.serve.app import create_app

REF = "#/components/schemas/"


def kind(schema: dict[str, Any]) -> str:
    """A field's type in a few words: `integer ≥ 1`, `list of string`, `Step`, ..."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(REF)
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        kinds = [kind(s) for s in schema["anyOf"] if s.get("type") != "null"]
        optional = len(kinds) < len(schema["anyOf"])
        return " or ".join(kinds) + (" or null" if optional else "")
    if schema.get("type") == "array":
        return f"list of {kind(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    words = schema.get("type", "any")
    if schema.get("type") == "object" and "additionalProperties" in schema:
        words = f"object of {kind(schema['additionalProperties'])}"
    bounds = [("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥")]
    bounds += [("maxLength", "length ≤"), ("minItems", "items ≥"), ("maxItems", "items ≤")]
    for key, sign in bounds:
        if key in schema:
            words += f" {sign} {schema[key]:g}"
    return words


def fields_table(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    rows = ["| field | type | default | what it is |", "| --- | --- | --- | --- |"]
    for name, field in schema.get("properties", {}).items():
        default = "required" if name in required else f"`{field.get('default', None)!r}`"
        text = field.get("description", "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | {kind(field)} | {default} | {text} |")
    return rows


def routes(spec: dict[str, Any]) -> list[str]:
    out = []
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            text = " ".join(op.get("description", op["summary"]).split())
            out += ["", f"### `{method.upper()} {path}`", "", text]
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                out += ["", f"Request: {kind(body['schema'])}."]
            for status, answer in op.get("responses", {}).items():
                content = answer.get("content", {}).get("application/json")
                what = kind(content["schema"]) if content and content["schema"] else ""
                said = answer["description"].replace("Successful Response", "")
                out.append(f"- {status}: " + ", ".join(part for part in (what, said) if part))
    return out


def render() -> str:
    spec = create_app({}).openapi()
    out = [
        "# HTTP API reference",
        "",
        f"`alignmt serve RUN_DIR ...`: {spec['info'].get('summary', '')} Written by",
        "`python docs/http_reference.py` from the server's OpenAPI schema, which a running",
        "server also serves at `/openapi.json`, browsable at `/docs` (Swagger UI, from the",
        "server's own files: it needs no network). Every error answers with an",
        "[ErrorResponse](#errorresponse).",
        "",
        "## Routes",
        *routes(spec),
        "",
        "## Objects",
    ]
    for name, schema in spec["components"]["schemas"].items():
        out += ["", f"### {name}", ""]
        if schema.get("description"):
            out += [schema["description"].replace("\n", " "), ""]
        out += fields_table(schema)
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(), end="")
