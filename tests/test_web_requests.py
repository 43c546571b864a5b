"""The browser worker's request checks (web/requests.js) are the server's schemas: every
constraint the JSON Schema of a route's request states is broken once, in Node, and the
worker's words must be the server's 422 message for the same body."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from alignmt.answers.schemas import BeamRequest, StepRequest, TranslateRequest

WEB = Path(__file__).resolve().parents[1] / "src" / "alignmt" / "answers" / "static" / "web"
NODE = shutil.which("node")
ROUTES = {"translate": TranslateRequest, "step": StepRequest, "beam": BeamRequest}
VALID = {"translate": {"sentences": ["the big dog"]}, "step": {"sentence": "the big dog"}}
VALID["beam"] = VALID["step"]
WRONG = {  # a value of another JSON type than each one
    "integer": "3",
    "number": "0.5",
    "string": 3,
    "boolean": 1,
    "array": "the big dog",
    "object": 3,
}

pytestmark = pytest.mark.skipif(
    not NODE and not os.environ.get("CI"), reason="Node.js runs the worker's checks here"
)


def resolved(root: dict, field: dict) -> dict:
    """A field's schema behind a $ref, and the non-null branch of an optional one."""
    if "anyOf" in field:
        field = next(branch for branch in field["anyOf"] if branch.get("type") != "null")
    if "$ref" in field:
        field = root["$defs"][field["$ref"].split("/")[-1]]
    return field


def broken(root: dict, field: dict) -> list:
    """Values that break each constraint `field` states, one constraint each."""
    field = resolved(root, field)
    values = [WRONG[field["type"]]] if "type" in field else []
    if "minimum" in field:
        values.append(field["minimum"] - 1)
    if "exclusiveMinimum" in field:
        values.append(field["exclusiveMinimum"])
    if "maximum" in field:
        values.append(field["maximum"] + 0.5)
    if "enum" in field:
        values.append("no such")
    if field.get("minItems"):
        values.append([])
    if field.get("type") == "array":
        values += [[value] for value in broken(root, field["items"])]
    if field.get("type") == "object" and "properties" in field:
        values += [
            {name: value} for name, f in field["properties"].items() for value in broken(root, f)
        ]
        values.append({"no such": 1})
    elif isinstance(field.get("additionalProperties"), dict):
        values += [{"1": value} for value in broken(root, field["additionalProperties"])]
    return values


def bodies(what: str) -> list[dict]:
    """A valid request of the route made invalid every way its schema says it can be."""
    schema = ROUTES[what].model_json_schema()
    out = []
    for name, field in schema["properties"].items():
        out += [VALID[what] | {name: value} for value in broken(schema, field)]
    out += [{k: v for k, v in VALID[what].items() if k != name} for name in schema["required"]]
    return [*out, VALID[what] | {"no_such_field": True}]


def test_every_broken_constraint_of_a_request_is_refused_by_the_worker_as_the_server_does(
    client, tmp_path
):
    cases = [(what, body) for what in ROUTES for body in bodies(what)]
    assert len(cases) > 40  # every route, field and constraint
    server = []
    for what, body in cases:
        response = client.post(f"/v1/{what}", json=body)
        assert response.status_code == 422, (what, body, response.json())
        server.append(response.json()["error"]["message"])
    shutil.copy(WEB / "requests.js", tmp_path / "requests.mjs")
    given = [(ROUTES[what].model_json_schema(), body) for what, body in cases]
    (tmp_path / "cases.json").write_text(json.dumps(given))
    runner = tmp_path / "run.mjs"
    runner.write_text(
        'import { readFileSync } from "node:fs";\n'
        'import { problem } from "./requests.mjs";\n'
        'const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));\n'
        "console.log(JSON.stringify(cases.map(([schema, body]) => problem(schema, body))));\n"
    )
    done = subprocess.run(
        [NODE, str(runner), str(tmp_path / "cases.json")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    worker = json.loads(done.stdout)
    differ = [(w, s, *c) for w, s, c in zip(worker, server, cases, strict=True) if w != s]
    assert differ == []


def test_a_valid_request_passes_the_workers_checks(tmp_path):
    shutil.copy(WEB / "requests.js", tmp_path / "requests.mjs")
    script = (
        'import { problem } from "./requests.mjs";\nconsole.log(JSON.stringify('
        + (json.dumps([[ROUTES[w].model_json_schema(), VALID[w]] for w in ROUTES]))
        + ".map(([s, b]) => problem(s, b))));\n"
    )
    (tmp_path / "run.mjs").write_text(script)
    done = subprocess.run([NODE, str(tmp_path / "run.mjs")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [None, None, None]


@pytest.fixture(scope="module")
def client(toy_run):
    from tests.conftest import SERVE_LIMITS, serving

    with serving(toy_run, limits=SERVE_LIMITS) as client:
        yield client
