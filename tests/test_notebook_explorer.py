"""The explorer inline: `run.explore()` is an anywidget whose JavaScript is the explorer's own
module; the kernel answers its questions as the HTTP API would; its state follows Python both
ways; and with no kernel it shows the answers stored for its sentences."""

from __future__ import annotations

import html
import json
import re

import pytest

import alignmt
from alignmt.answers.page import STATIC
from tests.conftest import serving

SENTENCE = "the big dog sleeps now"
OTHER = "a small cat runs"


@pytest.fixture(scope="module")
def api(toy_run, vanilla_run):
    with serving(toy_run, vanilla_run) as client:
        yield client


def ask(widget, what: str, **body) -> dict:
    """A question as the widget's JavaScript sends it, and the reply the kernel sends back."""
    sent = []
    widget.send = lambda content, buffers=None: sent.append(content)
    widget._answer(widget, {"id": "view:1", "what": what, "body": body}, [])
    (reply,) = sent
    assert reply["id"] == "view:1"
    return reply


def test_the_kernel_answers_the_widget_as_the_http_api_answers(toy_run, vanilla_run, api):
    widget = alignmt.load(toy_run).explore(SENTENCE, beside=vanilla_run)
    assert widget.model_name == "run" and widget.beside == "vanilla"
    models = ask(widget, "models")["answer"]
    assert models == api.get("/v1/models").json()["models"]
    plain = api.post("/v1/step", json={"sentence": SENTENCE}).json()
    prefix = [*plain["tokens"][:1], "katze"]
    for body in (
        {"sentence": SENTENCE, "top_k": 5},
        {"sentence": SENTENCE, "prefix": prefix, "override": {"2": 0}},
        {"sentence": SENTENCE, "model": "vanilla"},
    ):
        assert ask(widget, "step", **body)["answer"] == api.post("/v1/step", json=body).json()
    body = {"sentence": OTHER, "beam_size": 3}
    assert ask(widget, "beam", **body)["answer"] == api.post("/v1/beam", json=body).json()
    body = {"sentence": SENTENCE}
    assert ask(widget, "snapshots", **body)["answer"] == api.post("/v1/snapshots", json=body).json()

    # What the route refuses, the kernel refuses with the route's message.
    for what, body in (
        ("step", {"sentence": SENTENCE, "model": "nope"}),
        ("step", {"sentence": SENTENCE, "top_k": 0}),
        ("beam", {"sentence": "dog " * 400}),
        ("snapshots", {"sentence": SENTENCE, "model": "vanilla"}),
    ):
        reply = ask(widget, what, **body)
        refused = api.post(f"/v1/{what}", json=body).json()["error"]["message"]
        assert "answer" not in reply and reply["error"].endswith(refused.split(": ")[-1])
    assert "not 'train'" in ask(widget, "train")["error"]
    # a fault behind a question still gets an answer, so the widget never waits forever
    widget._models["run"] = None
    assert ask(widget, "step", sentence=SENTENCE)["error"].startswith("AttributeError")


def test_the_widget_is_the_explorers_module_and_holds_its_answers_for_no_kernel(toy_run, api):
    run = alignmt.load(toy_run)
    widget = run.explore([SENTENCE, OTHER], beam=3)
    assert widget._esm == (STATIC / "explorer.js").read_text()  # one source of the explorer
    assert widget.sentences == [SENTENCE, OTHER] and widget.sentence == SENTENCE
    stored = widget.offline
    assert [s["text"] for s in stored["sentences"]] == [SENTENCE, OTHER]
    assert stored["beam_size"] == 3 and [m["name"] for m in stored["models"]] == ["run"]
    first = stored["sentences"][0]["results"]["run"]
    assert first["step"] == api.post("/v1/step", json={"sentence": SENTENCE}).json()
    assert first["snapshots"] == api.post("/v1/snapshots", json={"sentence": SENTENCE}).json()

    data, _ = widget._repr_mimebundle_()
    assert json.loads(json.dumps(data["application/vnd.jupyter.widget-view+json"]))["model_id"]
    frame = re.search(r'srcdoc="(.*?)"', data["text/html"], re.S).group(1)
    page = html.unescape(frame)
    blob = re.search(r'type="application/json">(.*?)</script>', page, re.S).group(1)
    assert json.loads(blob)["sentences"] == stored["sentences"]

    with pytest.raises(ValueError, match="at least one sentence"):
        run.explore([])
    with pytest.raises(FileNotFoundError):
        run.explore(SENTENCE, beside=toy_run.parent / "no-such-run")


def test_outside_a_notebook_explore_says_what_to_run_instead(toy_run, caplog):
    alignmt.load(toy_run).explore(SENTENCE)  # pytest runs no Jupyter kernel
    assert f"alignmt explore {toy_run} --input FILE --out page.html" in caplog.text
    assert f"alignmt serve {toy_run}" in caplog.text


# ---- In JupyterLab, driven from Chromium --------------------------------------------------


@pytest.mark.slow
def test_in_jupyterlab_the_widget_steps_forces_and_follows_python(browser, toy_run, tmp_path):
    from benchmarks.browser import Explorer
    from benchmarks.jupyter import Lab, jupyter_lab, write_notebook
    from benchmarks.load import free_port

    run = alignmt.load(toy_run)
    (greedy,) = run.translate(SENTENCE, beam=1)
    cell = f"import alignmt\nw = alignmt.load({str(toy_run)!r}).explore({SENTENCE!r})\nw"
    write_notebook(tmp_path / "explore.ipynb", [cell])
    with jupyter_lab(tmp_path, free_port()) as url:
        lab = Lab(browser, url)
        lab.open("explore.ipynb")
        lab.run_all()
        page = Explorer(browser, timeout=90)  # a kernel's first answer waits for its imports
        page.wait_for(1)  # the widget translates its sentence by itself
        shown = page.panel()
        assert shown["tokens"] == greedy.tokens and shown["current"] == 0
        assert shown["alpha"] == pytest.approx(greedy.attention[0].tolist(), abs=1e-4)

        # "next step": the bars under the source words change to step 2's attention
        page.act("document.querySelector('.alignmt .panel .next').click()")
        shown = page.panel()
        assert shown["current"] == 1
        assert shown["alpha"] == pytest.approx(greedy.attention[1].tolist(), abs=1e-4)
        assert lab.kernel("print(w.step, w.tokens)") == f"1 {greedy.tokens}\n"

        # Python forces a prefix; the widget decodes the rest and shows it
        prefix = [greedy.tokens[0], "katze"]
        forced = run.translator.step_through(SENTENCE, prefix=prefix, top_k=1).translation
        before = len(page.timings())
        lab.kernel(f"w.prefix = {prefix!r}")
        page.wait_for(before + 1)
        shown = page.panel()
        assert shown["tokens"] == forced.tokens and shown["forced"] == [0, 1]
        assert shown["whatif"]["kind"] == "force"

        # a click forces a candidate through the kernel, and Python sees where it is
        page.js("document.querySelector('.alignmt .whatif button').click()")  # back
        candidate = next(c for c in page.panel()["candidates"] if c != greedy.tokens[1])
        page.force(candidate)
        shown = page.panel()
        assert shown["tokens"][:2] == [greedy.tokens[0], candidate]
        said = lab.kernel(
            f"print(w.prefix == {shown['tokens'][:2]!r}, w.tokens == {shown['tokens']!r})"
        )
        assert said == "True True\n"
        browser.save_screenshot(str(tmp_path / "jupyterlab.png"))


@pytest.mark.slow
def test_with_no_kernel_the_stored_answers_are_shown(browser, toy_run, tmp_path):
    from benchmarks.browser import Explorer

    widget = alignmt.load(toy_run).explore([SENTENCE, OTHER])
    expected = widget.offline["sentences"][0]["results"]["run"]["step"]

    # A renderer that runs no widgets (nbviewer, a docs page) shows the output's HTML form.
    data, _ = widget._repr_mimebundle_()
    out = tmp_path / "exported.html"
    out.write_text(f"<!doctype html><meta charset='utf-8'><body>{data['text/html']}</body>")
    page = Explorer(browser)
    page.open(out.as_uri(), offline=True)
    browser.switch_to.frame(browser.find_element("css selector", "iframe.alignmt-offline"))
    try:
        page.wait_for(1)
        page.act("document.querySelector('.alignmt .panel .next').click()")
        shown = page.panel()
        assert shown["tokens"] == expected["tokens"] and shown["current"] == 1
        assert shown["alpha"] == pytest.approx(expected["steps"][1]["attention"])
        assert page.resources() == []  # nothing fetched
    finally:
        browser.switch_to.default_content()

    # A page that runs the widget from its saved state, with no kernel to answer it.
    browser.get("about:blank")
    browser.set_script_timeout(30)
    said = browser.execute_async_script(
        """
        const [code, state, done] = arguments;
        const url = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
        const { default: widget } = await import(url);
        const model = {  // what anywidget hands the module, with nobody behind send()
          get: (name) => state[name], set() {}, save_changes() {}, on() {}, off() {},
          send() {},
        };
        const root = document.createElement("div");
        document.body.append(root);
        widget.render({ model, el: root });
        // the notice comes once the stored answers are shown: until then it is the stored
        // page's own ("Computed in advance ..."), so a busy machine could read that one
        const wait = () => root.querySelector(".output .tok") && root.dataset.pending === "0"
          && root.querySelector(".notice").textContent.startsWith("No kernel")
          ? done([...root.querySelectorAll(".output .tok")].map((t) => t.textContent)
            .concat([root.querySelector(".notice").textContent]))
          : setTimeout(wait, 100);
        wait();
        """,
        widget._esm,
        {
            name: getattr(widget, name)
            for name in ("sentences", "sentence", "model_name", "beside", "offline")
        },
    )
    *tokens, notice = said
    assert tokens == expected["tokens"]
    assert notice.startswith("No kernel answered")
