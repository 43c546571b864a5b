"""The explorer's answers away from HTTP, and its page: the static files `alignmt serve`
serves at `/`, and the self-contained copy `alignmt explore` writes, with every answer the
page needs computed in advance and inlined, so that it opens from a file with no server and
no network.

The explorer asks the same questions wherever it runs (see static/explorer.js): of the
server's routes, of a notebook's kernel (`answer`, for the widget), or of a JSON block in the
written page (`precompute`). All three answer with the functions in inside.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from alignmt.answers import inside
from alignmt.answers.limits import Limits, RequestError
from alignmt.answers.registry import ServedModel, one_model
from alignmt.answers.schemas import BeamRequest, SnapshotsRequest, StepRequest

STATIC = Path(__file__).with_name("static")
PAGE = STATIC / "explorer.html"
# The tags that load the style and the script; the written copy puts the files there.
_STYLE_TAG = '<link rel="stylesheet" href="static/explorer.css">'
_SCRIPT_TAG = '<script type="module" src="static/explorer.js"></script>'
# What the explorer may ask: the request each question is, and the function that answers it.
QUESTIONS: dict[str, tuple[type[Any], Callable[..., bytes]]] = {
    "step": (StepRequest, inside.step),
    "beam": (BeamRequest, inside.beam),
    "snapshots": (SnapshotsRequest, inside.snapshots),
}


def answer(models: dict[str, ServedModel], limits: Limits, what: str, body: dict) -> Any:
    """What the route /v1/`what` answers to `body`, as JSON values ("models": /v1/models's
    list), checked as the route checks it.

    Raises:
        ValueError: the message the route's error would carry (an unknown model, a field
            out of range, a sentence over a limit).
    """
    if what == "models":
        return [served.info.model_dump() for served in models.values()]
    if what not in QUESTIONS:
        raise ValueError(f"the explorer asks {', '.join(['models', *QUESTIONS])}, not {what!r}")
    kind, decode = QUESTIONS[what]
    request = _request(kind, **body)
    try:
        served = one_model(models, request.model, f"/v1/{what}")
        if what == "beam":
            request = request.with_default_beam(served.translator.search.beam_size)
        request.check_limits(limits)
        return json.loads(decode(served, limits, request))
    except RequestError as error:
        raise ValueError(error.body()["error"]["message"]) from None


def precompute(
    models: dict[str, ServedModel],
    sentences: Sequence[str],
    *,
    beam_size: int,
    top_k: int = 5,
    progress: Callable[[int], None] | None = None,
    where: str = "sentence",
) -> dict[str, Any]:
    """Every answer the page asks for, for each sentence and model: the greedy step-through
    with `top_k` candidates, the beam of `beam_size`, and the snapshots where a run kept some.

    Args:
        progress: called with the count of sentences done.
        where: names the sentences in errors, as `where:N` (N from 1): the input file.

    Raises:
        ValueError: a sentence the server would refuse (no tokens, too many), naming it.
    """
    limits = Limits()
    entries = []
    for i, sentence in enumerate(sentences):
        try:
            results = {
                name: _answers(served, limits, sentence, beam_size, top_k)
                for name, served in models.items()
            }
        except ValueError as error:
            raise ValueError(f"{where}:{i + 1}: {error}") from None
        entries.append({"text": sentence, "results": results})
        if progress:
            progress(i + 1)
    return {
        "models": [served.info.model_dump() for served in models.values()],
        "beam_size": beam_size,
        "sentences": entries,
    }


def _answers(
    served: ServedModel, limits: Limits, sentence: str, beam_size: int, top_k: int
) -> dict[str, Any]:
    models, name = {served.name: served}, served.name
    ask = {"model": name, "sentence": sentence}
    step = answer(models, limits, "step", {**ask, "top_k": top_k})
    beam = answer(models, limits, "beam", {**ask, "beam_size": beam_size})
    snapshots = None
    if served.info.snapshots and served.translator.has_attention:
        snapshots = answer(models, limits, "snapshots", ask)
    return {"step": step, "beam": beam, "snapshots": snapshots}


def _request(kind: type[Any], **fields: Any) -> Any:
    """The request the page would send, or a ValueError saying why the server refuses it
    (a control character in the sentence, say)."""
    try:
        return kind(**fields)
    except ValidationError as error:
        first = error.errors()[0]
        raise ValueError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def self_contained(data: dict[str, Any], command: str) -> str:
    """The explorer as one HTML file: its style, its script and `data` (from `precompute`)
    inline; the page names `command` as what wrote it."""
    data = {**data, "command": command}
    html = PAGE.read_text(encoding="utf-8")
    style = (STATIC / "explorer.css").read_text(encoding="utf-8")
    script = (STATIC / "explorer.js").read_text(encoding="utf-8")
    # "<" escaped as \u003c keeps "</script>" in a sentence from ending the block early.
    blob = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    for tag in (_STYLE_TAG, _SCRIPT_TAG):
        if tag not in html:
            raise RuntimeError(f"{PAGE}: lacks {tag}, which the written page replaces")
    html = html.replace(_STYLE_TAG, f"<style>\n{style}</style>")
    return html.replace(
        _SCRIPT_TAG,
        f'<script id="alignmt-data" type="application/json">{blob}</script>\n'
        f'<script type="module">\n{script}</script>',
    )
