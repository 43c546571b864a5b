"""`alignmt export RUN_DIR --out DIR --web`: an exported folder made a static site. DIR gets
index.html (the explorer's page); coi-serviceworker.js, which makes the page cross-origin
isolated, for ONNX Runtime Web's threads, on a host that sends no COOP/COEP headers; static/
(explorer.js and .css; web/ with the Web Worker that runs the graphs, the tokenizers and ONNX
Runtime Web); a tokenizer.json for each side SentencePiece cuts; and site.json, which tells
the worker what the server's /v1/models would say of the model, how it searches and what it
refuses (the engine table's row of the browser, `decoding.engine.FEATURES`). Any static file
host serves DIR; the page fetches nothing from outside it.

Only the tokenizers that have a twin in the page run there (`web_tokenizers`): the export
refuses others before anything is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from alignmt.answers.registry import model_info
from alignmt.answers.schemas import BeamRequest, StepRequest, TranslateRequest
from alignmt.answers.web_tokenizers import write_tokenizer_files
from alignmt.decoding.door import open_translator
from alignmt.decoding.engine import EVERY, FEATURES, Unavailable
from alignmt.decoding.exported import ENCODER, STEP

STATIC = Path(__file__).parent / "static"
# The most a site should weigh on disk, in MB, ONNX Runtime Web (14 MB) included: beyond it
# `alignmt export --web` stores the graphs' weights in int8 (onnx_engine/stored_int8.py)
SITE_BUDGET = 30
# coi-serviceworker (static/web, from web/package.json), the page's service worker: it adds
# the COOP/COEP headers a host may not send to every response of the site's folder
ISOLATE = "coi-serviceworker.js"
# Threads in ONNX Runtime Web need a cross-origin isolated page. Where the host's headers do not
# make it one, the page registers the service worker and reloads once under it (once a tab: a
# reload that bypasses the worker starts the explorer on one thread, as a page in a frame of a
# page that is not isolated does). The explorer starts when this resolves true.
_ISOLATED = f"""
<script>
window.alignmtIsolated = (async () => {{
  const workers = navigator.serviceWorker;
  if (window.crossOriginIsolated || !workers || !window.isSecureContext || workers.controller) {{
    return true;
  }}
  try {{
    await workers.register("{ISOLATE}");
    await workers.ready;
  }} catch {{
    return true;
  }}
  if (sessionStorage.getItem("alignmt-isolating")) return true;
  sessionStorage.setItem("alignmt-isolating", "1");
  location.reload();
  return false;
}})();
</script>"""
SITE = "site.json"
INDEX = "index.html"
# what the worker's searches read of the run's SearchConfig
_SEARCH = (
    "max_len_ratio",
    "max_len_offset",
    "beam_size",
    "length_penalty",
    "coverage_penalty",
    "replace_unk",
)


# What the page shows until the explorer replaces it: all it can show where the browser runs
# none of its scripts, as for a page opened from a file (module scripts need HTTP).
_OVER_HTTP = (
    '<p style="font: 16px sans-serif; margin: 2em">This page runs a translation model in your '
    "browser, which browsers allow only for a page served over HTTP: in this folder, run "
    '<code>python -m http.server</code> and open <a href="http://localhost:8000">'
    "http://localhost:8000</a>, or put the folder on any static host.</p>"
)


def write_site(folder: str | Path, name: str | None = None) -> list[Path]:
    """Make the exported `folder` a static site around its float32 graphs (their weights
    stored in float32 or int8, `onnx_engine/stored_int8.py`). `name` is the model's in the
    page (the folder's name if None).

    Returns:
        The files and folders written.
    """
    folder = Path(folder)
    translator = open_translator(folder, weights="float32")  # what the page runs
    info = model_info(name or folder.resolve().name, translator)
    search = {key: getattr(translator.search, key) for key in _SEARCH}
    graphs = {"encoder": ENCODER, "step": STEP}
    # the worker refuses what the engine table says the browser cannot do, in its words
    refusals = {f: str(Unavailable.of(f, "browser")) for f in sorted(EVERY - FEATURES["browser"])}
    # the worker checks a request against its route's schema, the server's own
    routes = {"translate": TranslateRequest, "step": StepRequest, "beam": BeamRequest}
    requests = {what: schema.model_json_schema() for what, schema in routes.items()}
    tokenizers = write_tokenizer_files(translator.origin.header, folder)
    site = {"info": info.model_dump(), "search": search, "graphs": graphs}
    site |= {"tokenizers": tokenizers, "refusals": refusals, "requests": requests}
    (folder / SITE).write_text(json.dumps(site, indent=1, ensure_ascii=False) + "\n")
    static = folder / "static"
    shutil.rmtree(static, ignore_errors=True)
    static.mkdir()
    for page_file in ("explorer.js", "explorer.css"):
        shutil.copy(STATIC / page_file, static / page_file)
    shutil.copytree(STATIC / "web", static / "web", ignore=shutil.ignore_patterns(ISOLATE + "*"))
    # a service worker's scope is its folder and below: the page's own folder
    shutil.copy(STATIC / "web" / ISOLATE, folder / ISOLATE)
    page = (STATIC / "explorer.html").read_text(encoding="utf-8")
    page = page.replace(
        '<div id="alignmt-page"></div>',
        f'<div id="alignmt-page" data-models=".">{_OVER_HTTP}</div>',
    )
    page = page.replace(
        "</title>", f'</title>\n<link rel="icon" href="data:,">{_ISOLATED}'
    )  # no favicon.ico 404
    (folder / INDEX).write_text(page, encoding="utf-8")
    files = [folder / name for name in (INDEX, ISOLATE, SITE, *tokenizers.values())]
    return [*files, static]
