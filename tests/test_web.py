"""The explorer in the browser with nothing installed (`alignmt export RUN --out DIR --web`):
the site it writes, served as any static host would, runs the model in Chromium with ONNX
Runtime Web and answers as PyTorch and the server do."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from benchmarks.browser import settle

from alignmt.cli import main
from alignmt.decoding.engine import Unavailable
from tests.conftest import chromium

SENTENCES = 50


def ask_worker(browser, url: str, requests: list[dict]) -> list[dict]:
    """Open `url` (a site's index.html) and put each {what, body} to a Web Worker of its own,
    as the explorer does; its answers ({answer} or {error, needsServer}), in order."""
    browser.get(url)
    settle(browser)
    browser.set_script_timeout(300)
    return browser.execute_async_script(
        """
        const [requests, done] = arguments;
        const worker = new Worker("static/web/worker.js", { type: "module" });
        let last = 0;
        const ask = (what, body) => new Promise((resolve) => {
          const id = ++last;
          const heard = ({ data }) => {
            if (data.id !== id) return;
            worker.removeEventListener("message", heard);
            resolve(data);
          };
          worker.addEventListener("message", heard);
          worker.postMessage({ id, what, body });
        });
        (async () => {
          const opened = await ask("open", { folders: [new URL(".", location.href).href] });
          if (opened.error) return done([opened]);
          const answers = [];
          for (const { what, body } of requests) answers.push(await ask(what, body));
          done(answers);
        })();
        """,
        requests,
    )


def assert_same(got, want, where: str = "answer", tol: float = 1e-4) -> None:
    """`got` (the page's) equals `want` (the server's): the same keys and strings, numbers
    within `tol`."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{where}: {set(got) ^ set(want)}"
        for key in want:
            assert_same(got[key], want[key], f"{where}.{key}", tol)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got} != {want}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{i}]", tol)
    elif isinstance(want, float) or (isinstance(got, float) and isinstance(want, int)):
        assert got == pytest.approx(want, abs=tol), f"{where}: {got} != {want}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


# --- the runs -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reverse_run(tmp_path_factory) -> Path:
    """The reversal task's shipped model, trained until it reverses (400 steps)."""
    from alignmt.config import config_path, load_config
    from alignmt.training.run import train

    out = tmp_path_factory.mktemp("reverse") / "reverse"
    cfg = load_config(config_path("reverse"), ["train.steps=400", f"out_dir={out}"])
    return train(cfg, progress=False).run_dir


@pytest.fixture(scope="module")
def tatoeba_run(_shared_corpora, tmp_path_factory) -> tuple[Path, list[str]]:
    """The d2l config on Tatoeba En->Fr (its tokenizer: the book's), smaller and briefly
    trained, and English sentences from past the pairs it trains and validates on."""
    from alignmt.config import config_path, load_config
    from alignmt.training.run import train

    root = tmp_path_factory.mktemp("tatoeba")
    small = ["model.emb_dim=64", "model.enc_hidden=64", "model.dec_hidden=64", "model.attn_dim=64"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ALIGNMT_DATA", str(_shared_corpora))
        cfg = load_config(
            config_path("d2l_fra_eng"),
            [*small, "train.steps=300", f"out_dir={root / 'run'}", f"data.cache_dir={root}"],
        )
        run = train(cfg, progress=False).run_dir
    pairs = (_shared_corpora / "tatoeba" / "eng-fra.tsv").read_text(encoding="utf-8").splitlines()
    return run, [pair.split("\t")[0] for pair in pairs[1000 : 1000 + SENTENCES]]


@pytest.fixture(scope="module")
def multi30k_run(_shared_corpora, tmp_path_factory) -> tuple[Path, list[str]]:
    """The shipped Multi30k recipe (English -> German, Moses' rules), smaller and briefly
    trained on its first 6,000 pairs, and the first test_2016_flickr captions: the page's
    paths, not its quality, are under test (the tokenizer's every rule is in
    test_web_moses.py)."""
    from alignmt.config import config_path, load_config
    from alignmt.text.corpus import read_lines
    from alignmt.training.run import train

    root = tmp_path_factory.mktemp("multi30k")
    small = ["model.emb_dim=32", "model.enc_hidden=32", "model.dec_hidden=32", "model.attn_dim=32"]
    brief = ["model.readout_dim=32", "train.steps=200", "train.eval_every=0", "data.limit=6000"]
    where = [f"out_dir={root / 'run'}", f"data.cache_dir={root}"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ALIGNMT_DATA", str(_shared_corpora))
        cfg = load_config(config_path("multi30k_en_de"), [*small, *brief, *where])
        run = train(cfg, progress=False).run_dir
    test = read_lines(_shared_corpora / "multi30k" / "test_2016_flickr.en.gz")
    return run, test[:20]


@pytest.fixture(scope="module")
def toy_sentencepiece_run(tmp_path_factory) -> tuple[Path, list[str]]:
    """The toy corpus cut into SentencePiece subwords (BPE), trained until it translates,
    and held-out toy sentences: the page's SentencePiece path, end to end."""
    from dataclasses import replace

    from alignmt.training.run import train
    from tests.conftest import held_out_toy_lines, toy_corpus_config

    folder = tmp_path_factory.mktemp("toy_sentencepiece")
    cfg = toy_corpus_config(folder, steps=300, eval_every=0)
    cfg = replace(cfg, data=replace(cfg.data, tokenizer="sentencepiece", spm_vocab_size=60))
    run = train(cfg, progress=False).run_dir
    return run, held_out_toy_lines(folder / "held")[:SENTENCES]


@pytest.fixture(scope="module")
def reverse_site(reverse_run, tmp_path_factory) -> Path:
    """The reversal run exported with --web, float32 graphs; no test writes to it."""
    return export_web(reverse_run, tmp_path_factory.mktemp("reverse_site") / "site", "--float32")


def export_web(run: Path, out: Path, *flags: str) -> Path:
    assert main(["export", str(run), "--out", str(out), "--web", *flags]) == 0
    return out


def reversal_sentences() -> list[str]:
    rng = np.random.default_rng(5)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    return ["".join(rng.choice(letters, rng.integers(3, 11))) for _ in range(SENTENCES)]


def server_answers(run: Path, requests: list[dict]) -> list[dict]:
    """What `alignmt serve RUN` answers to each {what, body}: PyTorch decoding for a run
    folder, ONNX Runtime for an exported one (which answers translate alone)."""
    from alignmt.answers import inside
    from alignmt.answers.limits import Limits
    from alignmt.answers.registry import load_models
    from alignmt.answers.schemas import BeamRequest, StepRequest, TranslateRequest
    from alignmt.answers.translate import translate_batch

    (model,) = load_models([run]).values()
    ask = {
        "step": (inside.step, StepRequest),
        "beam": (inside.beam, BeamRequest),
        "translate": (lambda *a: translate_batch(*a[:2], [a[2]])[0], TranslateRequest),
    }
    answers = []
    for request in requests:
        answer, schema = ask[request["what"]]
        answers.append(json.loads(answer(model, Limits(), schema(**request["body"]))))
    return answers


# --- the page equals PyTorch and the server ---------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("task", ["reversal", "tatoeba", "multi30k", "toy_sentencepiece"])
def test_the_page_translates_as_pytorch_greedy_and_beam(
    task, request, browser, host, tmp_path, monkeypatch
):
    if task == "reversal":
        run, sentences = request.getfixturevalue("reverse_run"), reversal_sentences()
    else:  # d2l's words on Tatoeba; Moses' rules on Multi30k; SentencePiece; both ways
        run, sentences = request.getfixturevalue(f"{task}_run")
    if task == "multi30k":  # its corpus is named by the catalogue's name
        monkeypatch.setenv("ALIGNMT_DATA", str(request.getfixturevalue("_shared_corpora")))
    site = export_web(run, tmp_path / "site", "--float32")
    requests = [{"what": "step", "body": {"sentence": s}} for s in sentences]
    requests += [{"what": "beam", "body": {"sentence": s, "beam_size": 5}} for s in sentences]
    requests += [  # all at once, as /v1/translate: greedy in one batch, and beam 5's two best
        {"what": "translate", "body": {"sentences": sentences, "beam_size": 1, "attention": True}},
        {"what": "translate", "body": {"sentences": sentences, "beam_size": 5, "nbest": 2}},
    ]
    got = ask_worker(browser, host(site) + "index.html", requests)
    want = server_answers(run, requests)
    for asked, page, server in zip(requests, got, want, strict=True):
        assert "answer" in page, f"{asked}: the page says {page.get('error')}"
        answer = page["answer"]
        if asked["what"] == "step":  # PyTorch's greedy tokens exactly
            assert answer["tokens"] == server["tokens"], asked
        elif asked["what"] == "beam":  # and its best beam-5 hypothesis
            assert answer["finished"][0]["tokens"] == server["finished"][0]["tokens"], asked
        # the whole answer: every step's attention and candidates, the tree's every node
        assert_same(answer, server, f"{asked['what']} {asked['body'].get('sentence')!r}")


ARCHITECTURES = {
    "lstm-vanilla": ["model.rnn=lstm", "model.attention=none"],
    "lstm-luong-local_p-general": [
        "model.rnn=lstm",
        "model.order=luong",
        "model.attention=general",
        "model.attention_window=local_p",
        "model.window=2",
    ],
    "gru-monotonic": ["model.attention_fn=monotonic"],
    "gru-heads": ["model.attention=scaled_dot", "model.heads=4"],
    "gru-hard_monotonic": ["model.attention_fn=hard_monotonic"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_other_architectures_answer_in_the_page_as_on_the_server(name, browser, host, tmp_path):
    """A cell with a memory cell, a model without attention, Luong's order with a local
    window, whose every step also says its centre p_i, monotonic attention, whose every
    step says where its walk stands and its stop probability there, four heads, whose
    every step gives each head's weights, and hard monotonic attention, whose every step
    says its expected position and the probability that it moved on."""
    from alignmt.config import config_path, load_config
    from alignmt.training.run import train

    overrides = [*ARCHITECTURES[name], "train.steps=200", f"out_dir={tmp_path / name}"]
    run = train(load_config(config_path("reverse"), overrides), progress=False).run_dir
    site = export_web(run, tmp_path / "site", "--float32")
    sentences = reversal_sentences()[:8]
    requests = [{"what": "step", "body": {"sentence": s, "prefix": ["z"]}} for s in sentences]
    requests += [{"what": "beam", "body": {"sentence": s, "beam_size": 4}} for s in sentences]
    requests.append({"what": "translate", "body": {"sentences": sentences, "beam_size": 1}})
    got = ask_worker(browser, host(site) + "index.html", requests)
    for asked, page, server in zip(requests, got, server_answers(run, requests), strict=True):
        assert "answer" in page, f"{asked}: the page says {page.get('error')}"
        assert_same(page["answer"], server, f"{name} {asked['what']}")
    if "local" in name:  # the window's centre, step by step
        assert all("centre" in step["shown"] for step in got[0]["answer"]["steps"])
    if name == "gru-monotonic":
        for answer in (page["answer"] for page in got[:8]):
            positions = [step["shown"]["position"] for step in answer["steps"]]
            assert positions == sorted(positions)
            assert all(step["shown"]["stop"] >= 0.5 for step in answer["steps"])
    if "heads" in name:
        for answer in (page["answer"] for page in got[:8]):
            T = len(answer["source_tokens"])
            assert all(np.shape(step["shown"]["heads"]) == (4, T) for step in answer["steps"])
    if "hard" in name:
        for answer in (page["answer"] for page in got[:8]):
            assert all(0 <= step["shown"]["move"] <= 1 + 1e-6 for step in answer["steps"])


@pytest.mark.slow
def test_forcing_steering_and_the_beam_tree_answer_as_the_server(
    reverse_run, reverse_site, browser, host, tmp_path
):
    site = reverse_site
    sentence = "attention"
    requests = [
        {"what": "step", "body": {"sentence": sentence, "prefix": ["n", "o"], "top_k": 3}},
        {"what": "step", "body": {"sentence": sentence, "override": {"1": 0, "4": 8}}},
        {"what": "step", "body": {"sentence": sentence, "prefix": ["x"], "override": {"0": 2}}},
        {"what": "step", "body": {"sentence": "abc", "prefix": ["c", "</s>"]}},
        {"what": "beam", "body": {"sentence": sentence, "beam_size": 3}},
        {"what": "beam", "body": {"sentence": "zyxwvutsrqpo"}},  # the run's beam: 5
    ]
    got = ask_worker(browser, host(site) + "index.html", requests)
    for asked, page, server in zip(
        requests, got, server_answers(reverse_run, requests), strict=True
    ):
        assert "answer" in page, f"{asked}: the page says {page.get('error')}"
        assert_same(page["answer"], server, f"{asked}")
    steered = got[1]["answer"]["steps"]
    assert steered[1]["overridden"] and steered[1]["attention"][0] == 1.0


@pytest.mark.slow
def test_what_the_browser_cannot_answer_is_refused_with_the_reason(
    reverse_run, reverse_site, browser, host, tmp_path
):
    site = reverse_site
    requests = [
        {"what": "step", "body": {"sentence": "abc", "attribution": "gradient"}},
        {"what": "snapshots", "body": {"sentence": "abc"}},
        {"what": "beam", "body": {"sentence": "abc", "constraints": {"include": ["c"]}}},
        # and what the server refuses, the page refuses with its words
        {"what": "step", "body": {"sentence": "abc", "prefix": ["no such", "it's"]}},
        {"what": "step", "body": {"sentence": "abc", "prefix": ["a", "</s>", "b"]}},
        {"what": "step", "body": {"sentence": "abc", "override": {"0": 9}}},
        {"what": "step", "body": {"sentence": "abc", "override": {"99": 1}}},
        {"what": "step", "body": {"sentence": "abc", "top_k": 31}},
    ]
    got = ask_worker(browser, host(site) + "index.html", requests)
    assert [g.get("needsServer") for g in got] == [True] * 3 + [False] * 5
    # what the engine table says the browser cannot do, in its words
    refused = [Unavailable.of(f, "browser") for f in ("attribution", "constrained search")]
    assert [got[0]["error"], got[2]["error"]] == [str(r) for r in refused]
    assert "snapshots" in got[1]["error"]
    assert [g["error"] for g in got[3:]] == server_refusals(reverse_run, requests[3:])


def server_refusals(run: Path, requests: list[dict]) -> list[str]:
    """The message of the 422 the server answers each request with."""
    from alignmt.answers.limits import RequestError

    said = []
    for request in requests:
        with pytest.raises(RequestError) as refused:
            server_answers(run, [request])
        said.append(str(refused.value))
    return said


@pytest.fixture(scope="module")
def local_browser():
    """A headless Chromium in which no host name resolves: the page can load only what the
    static host on 127.0.0.1 serves, as offline as a page over HTTP can be."""
    from benchmarks.browser import LOCAL_ONLY

    yield from chromium(*LOCAL_ONLY)


@pytest.mark.slow
def test_a_link_opens_the_page_on_a_sentence_that_steps_forces_and_steers_offline(
    reverse_run, reverse_site, local_browser, host, tmp_path
):
    from benchmarks.browser import Explorer

    site = reverse_site
    url = host(site)
    page = Explorer(local_browser)
    page.open(url + "index.html?sentence=attention")
    page.wait_for(1)  # translated and shown at once
    greedy = {"sentence": "attention"}
    assert (
        page.panel()["tokens"]
        == server_answers(reverse_run, [{"what": "step", "body": greedy}])[0]["tokens"]
    )
    page.key("ArrowRight")
    page.key("ArrowRight")
    shown = page.panel()
    assert shown["current"] == 2
    forced, prefix = shown["candidates"][1], shown["tokens"][:2]
    bodies = [
        {"sentence": "attention", "prefix": [*prefix, forced]},
        {"sentence": "attention", "prefix": prefix, "override": {"2": 0}},
    ]
    want = server_answers(reverse_run, [{"what": "step", "body": b} for b in bodies])
    beam = server_answers(reverse_run, [{"what": "beam", "body": {"sentence": "attention"}}])[0]
    page.force(forced)
    assert page.panel()["tokens"] == want[0]["tokens"]
    page.override(0)
    now = page.panel()
    assert now["whatif"]["kind"] == "override" and now["current"] == 2
    assert now["alpha"][0] == 1.0 and now["tokens"] == want[1]["tokens"]
    assert page.open_beam()["nodes"] == len(beam["nodes"])
    # what needs a live model is hidden or says why, never broken
    pick = page.js(
        "const p = document.querySelector('.attribution-pick'); return [p.disabled, p.title]"
    )
    assert pick[0] and "gradients" in pick[1]
    assert page.js("return document.querySelector('.training-box').hidden")
    shot = Path(os.environ.get("ALIGNMT_SCREENSHOT", tmp_path / "web.png"))
    local_browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    # every file came from the folder, and the folder's graphs, worker and runtime were used
    assert all(resource.startswith(url) for resource in page.resources())
    files = {"/" + p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    fetched = {path.split("?")[0] for path in host.asked}
    assert fetched <= files, fetched - files
    assert {"/step.onnx", "/encoder.onnx", "/static/web/ort/ort-wasm-simd-threaded.wasm"} <= fetched


@pytest.mark.slow
def test_opened_from_a_file_the_page_says_to_serve_it(reverse_site, browser):
    browser.get((reverse_site / "index.html").as_uri())  # module scripts do not run from file://
    said = browser.find_element("css selector", "#alignmt-page").text
    assert "served over HTTP" in said and "python -m http.server" in said


def test_the_runtime_in_the_package_is_the_one_the_lock_file_pins():
    root = Path(__file__).resolve().parents[1]
    pinned = json.loads((root / "web" / "package.json").read_text())["dependencies"]
    locked = json.loads((root / "web" / "package-lock.json").read_text())["packages"]
    version = locked["node_modules/onnxruntime-web"]["version"]
    assert pinned["onnxruntime-web"] == version
    ort = root / "src" / "alignmt" / "answers" / "static" / "web" / "ort"
    assert (ort / "VERSION").read_text().startswith(f"onnxruntime-web {version},")
    names = {"ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"}
    assert names <= {p.name for p in ort.iterdir()}
    assert (
        f"ONNX Runtime Web v{version}\n"
        in (ort / "ort.wasm.min.mjs").read_text(encoding="utf-8")[:200]
    )
