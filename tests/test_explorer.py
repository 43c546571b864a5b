"""The explorer: the page and /v1/snapshots through FastAPI's TestClient, the page that
`alignmt explore` writes, and both in a real headless Chromium, clicked as a user would."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
from pathlib import Path

import pytest
import torch
from benchmarks.load import free_port

from alignmt.answers.page import precompute, self_contained
from alignmt.answers.registry import load_models
from alignmt.checkpoint.format import snapshot_steps
from alignmt.checkpoint.torch_io import load_checkpoint, load_snapshot
from alignmt.cli import main
from tests.conftest import serving

SENTENCE = "the big dog sleeps now"
OTHER = "a small cat runs"


@pytest.fixture(scope="module")
def snapshot_run(toy_run) -> Path:
    """The toy corpus model, which keeps its weights every 100 of its 300 steps."""
    return toy_run


@pytest.fixture(scope="module")
def client(snapshot_run, vanilla_run):
    with serving(snapshot_run, vanilla_run) as client:
        yield client


# ---- The page and /v1/snapshots, without a browser ----------------------------------------


def test_the_server_serves_the_explorer_page_and_its_files(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="static/explorer.js">' in page.text
    script = client.get("/static/explorer.js")
    assert script.status_code == 200 and "v1/step" in script.text
    assert client.get("/static/explorer.css").status_code == 200
    assert client.get("/static/../page.py").status_code == 404


def test_models_list_the_snapshots_a_run_kept(client, snapshot_run):
    models = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
    assert models["run"]["snapshots"] == [0, 100, 200, 300] == snapshot_steps(snapshot_run)
    assert models["vanilla"]["snapshots"] == []


def test_snapshots_read_the_served_output_with_each_kept_model(client, snapshot_run):
    answer = client.post("/v1/snapshots", json={"sentence": SENTENCE}).json()
    greedy = client.post("/v1/step", json={"sentence": SENTENCE}).json()
    assert (
        answer["tokens"] == greedy["tokens"] and answer["source_tokens"] == greedy["source_tokens"]
    )
    assert [s["step"] for s in answer["snapshots"]] == [0, 100, 200, 300]
    shape = (len(answer["tokens"]), len(answer["source_tokens"]))
    for snapshot in answer["snapshots"]:
        attention = torch.tensor(snapshot["attention"])
        assert attention.shape == shape
        assert torch.allclose(attention.sum(-1), torch.ones(shape[0]), atol=1e-4)
    # The served model is the best checkpoint; its step's snapshot holds the same weights,
    # so reading its own greedy output it attends exactly as it did.
    served_step = load_checkpoint(snapshot_run).step
    (same,) = [s for s in answer["snapshots"] if s["step"] == served_step]
    rows = [s["attention"] for s in greedy["steps"]]
    assert torch.allclose(torch.tensor(same["attention"]), torch.tensor(rows), atol=1e-5)
    assert same["tokens"] == greedy["tokens"]
    # The untrained weights attend differently from the trained ones.
    first = torch.tensor(answer["snapshots"][0]["attention"])
    assert not torch.allclose(first, torch.tensor(rows), atol=0.05)


def test_snapshots_are_refused_where_there_is_nothing_to_follow(client, tmp_path):
    vanilla = client.post("/v1/snapshots", json={"model": "vanilla", "sentence": SENTENCE})
    assert vanilla.status_code == 422
    assert "no attention" in vanilla.json()["error"]["message"]
    empty = client.post("/v1/snapshots", json={"sentence": "   "})
    assert empty.status_code == 422


def test_a_run_without_snapshots_is_told_how_to_keep_them(toy_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(toy_run, run, ignore=shutil.ignore_patterns("snapshots"))
    with serving(run) as client:
        answer = client.post("/v1/snapshots", json={"sentence": SENTENCE})
    assert answer.status_code == 422
    assert "train.snapshot_every" in answer.json()["error"]["message"]


def test_a_snapshot_can_be_served_beside_its_run(snapshot_run):
    """Two checkpoints of one run side by side: a snapshot file is a model of its own."""
    snapshot = snapshot_run / "snapshots" / "step_000100.safetensors"
    with serving(snapshot_run, snapshot) as client:
        names = [m["name"] for m in client.get("/v1/models").json()["models"]]
        steps = [
            client.post("/v1/step", json={"model": name, "sentence": SENTENCE}).json()
            for name in names
        ]
    assert names == ["run", "step_000100"]
    assert steps[0]["steps"][0]["attention"] != steps[1]["steps"][0]["attention"]


def test_load_snapshot_names_the_steps_there_are(snapshot_run):
    with pytest.raises(FileNotFoundError, match="100"):
        load_snapshot(snapshot_run, 150)


# ---- The page written by `alignmt explore` -------------------------------------------------


def test_the_written_page_holds_the_servers_answers(client, snapshot_run, vanilla_run):
    models = load_models([snapshot_run, vanilla_run])
    data = precompute(models, [SENTENCE], beam_size=3)
    page = self_contained(data, "alignmt explore test")
    blob = re.search(
        r'<script id="alignmt-data" type="application/json">(.*?)</script>', page, re.S
    ).group(1)
    stored = json.loads(blob)
    assert stored["command"] == "alignmt explore test"
    answers = stored["sentences"][0]["results"]
    for name in ("run", "vanilla"):
        assert (
            answers[name]["step"]
            == client.post("/v1/step", json={"model": name, "sentence": SENTENCE}).json()
        )
        assert (
            answers[name]["beam"]
            == client.post(
                "/v1/beam", json={"model": name, "sentence": SENTENCE, "beam_size": 3}
            ).json()
        )
    assert answers["run"]["snapshots"]["snapshots"][0]["step"] == 0
    assert answers["vanilla"]["snapshots"] is None
    assert 'src="static/' not in page and 'href="static/' not in page  # nothing to fetch


def test_a_sentence_cannot_end_the_pages_script_early(snapshot_run):
    models = load_models([snapshot_run])
    evil = "the dog </script><script>alert(1)</script>"
    page = self_contained(precompute(models, [evil], beam_size=2), "x")
    assert page.count("</script>") == 2  # the data block's and the code's
    blob = re.search(r'type="application/json">(.*?)</script>', page, re.S).group(1)
    assert json.loads(blob)["sentences"][0]["text"] == evil


def test_explore_writes_one_page_and_names_bad_input_lines(snapshot_run, tmp_path, capsys):
    sentences = tmp_path / "in.txt"
    sentences.write_text(f"{SENTENCE}\n{OTHER}\n")
    out = tmp_path / "page.html"
    assert (
        main(
            [
                "explore",
                str(snapshot_run),
                "--input",
                str(sentences),
                "--out",
                str(out),
                "--beam",
                "2",
            ]
        )
        == 0
    )
    assert "2 sentences" in capsys.readouterr().out
    assert out.stat().st_size < 2_000_000 and "alignmt-data" in out.read_text()

    sentences.write_text(f"{SENTENCE}\n\n")
    assert main(["explore", str(snapshot_run), "--input", str(sentences), "--out", str(out)]) == 2
    assert f"{sentences}:2: empty line" in capsys.readouterr().err
    sentences.write_text(f"{SENTENCE}\n" + "dog " * 500 + "\n")
    assert main(["explore", str(snapshot_run), "--input", str(sentences), "--out", str(out)]) == 2
    assert f"{sentences}:2: " in capsys.readouterr().err
    sentences.write_bytes(b"the dog\n\xff\xfe\n")
    assert main(["explore", str(snapshot_run), "--input", str(sentences), "--out", str(out)]) == 2
    assert f"{sentences}:2" in capsys.readouterr().err


# ---- In a real browser ---------------------------------------------------------------------


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=values.__getitem__)


def _report(timings: list[dict], where: str) -> None:
    kinds: dict[str, list[float]] = {}
    for t in timings:
        kinds.setdefault(t["kind"], []).append(t["ms"])
    lines = [
        f"{k}: n={len(v)} median {statistics.median(v):.1f} ms, max {max(v):.1f} ms"
        for k, v in kinds.items()
    ]
    print(f"\nexplorer interactions ({where}, from the click to the frame that shows it):")
    print("\n".join("  " + line for line in lines))


@pytest.mark.slow
def test_a_user_steps_forces_overrides_and_opens_the_beam(
    browser, snapshot_run, vanilla_run, tmp_path
):
    """One user's session, in the order a user would take it; each part checks the page
    against what the API answers for the same request."""
    from benchmarks.browser import Explorer
    from benchmarks.load import local_server

    port = free_port()
    with serving(snapshot_run, vanilla_run) as api:
        expected = api.post("/v1/step", json={"sentence": SENTENCE}).json()
        with local_server([snapshot_run, vanilla_run], port):
            page = Explorer(browser)
            page.open(f"http://127.0.0.1:{port}/")
            page.translate(SENTENCE, other="vanilla")
            _steps(page, expected)
            _forces(page, api, expected)
            _overrides(page, api, expected)
            _erases(page, api)
            _opens_the_beam(page, api, tmp_path)
            _shows_snapshots(page, expected, tmp_path)
            _report(page.timings(), "live server, toy model")


def _steps(page, expected: dict) -> None:
    """The first step, each token's confidence, then three steps on: α, coverage, candidates."""
    shown = page.panel()
    assert shown["tokens"] == expected["tokens"] and shown["current"] == 0
    # word-level confidence: each token shaded by its doubt, 0.8 (1 - p)
    probabilities = [step["probability"] for step in expected["steps"]]
    assert shown["probabilities"] == pytest.approx(probabilities, abs=1e-3)
    for i, p in enumerate(probabilities[1:], 1):  # the current token has its own colour
        assert shown["shade"][i] == pytest.approx(0.8 * (1 - p), abs=0.01)

    for _ in range(3):
        page.key("ArrowRight")
    shown = page.panel()
    alpha = expected["steps"][3]["attention"]
    assert shown["current"] == 3
    assert shown["alpha"] == pytest.approx(alpha, abs=1e-6)
    assert shown["top"] == [_argmax(alpha)]  # the marked word has the largest α
    # each word's coverage: its attention summed over steps 1 to 4
    coverage = [sum(s["attention"][j] for s in expected["steps"][:4]) for j in range(len(alpha))]
    assert shown["coverage"] == pytest.approx(coverage, abs=1e-6)
    assert shown["under"] == [j for j, c in enumerate(coverage) if c < 0.5]
    assert shown["candidates"][0] == expected["steps"][3]["top_k"][0]["token"]
    assert page.panel(1)["statement"].startswith("This model has no attention")


def _forces(page, api, expected: dict) -> None:
    """What if the decoder had taken its second choice for the fourth token?"""
    shown = page.panel()
    candidate = next(c for c in shown["candidates"] if c != shown["tokens"][3])
    page.force(candidate)
    after = page.panel()
    prefix = [*expected["tokens"][:3], candidate]
    forced = api.post("/v1/step", json={"sentence": SENTENCE, "prefix": prefix}).json()
    assert after["tokens"][3] == candidate and after["tokens"] == forced["tokens"]
    assert after["forced"] == [0, 1, 2, 3] and after["whatif"]["kind"] == "force"
    assert after["tokens"][:3] == expected["tokens"][:3]


def _overrides(page, api, expected: dict) -> None:
    """What if the second token's step had looked at a word other than the one it chose?"""
    page.js("document.querySelector('.panel .whatif button').click()")  # back
    page.key("ArrowLeft")
    page.key("ArrowLeft")
    before = page.panel()
    assert before["current"] == 1 and before["tokens"] == expected["tokens"]
    elsewhere = len(before["source"]) - 2  # the last word, not </s>
    assert elsewhere != before["top"][0]
    page.override(elsewhere)
    steered = page.panel()
    asked = {"sentence": SENTENCE, "prefix": expected["tokens"][:1], "override": {"1": elsewhere}}
    truth = api.post("/v1/step", json=asked).json()
    assert steered["tokens"] == truth["tokens"]
    assert steered["alpha"][elsewhere] == 1.0 and steered["top"] == [elsewhere]
    assert steered["whatif"]["changed"] == (truth["tokens"] != expected["tokens"])
    if not steered["whatif"]["changed"]:
        assert "did not change" in steered["whatif"]["text"]


def _erases(page, api) -> None:
    """Beside attention: erasure for the second token, as the server computes it."""
    page.js("document.querySelector('.panel .whatif button').click()")  # back
    page.act(
        "const pick = document.querySelector('.panel .attribution-pick');"
        "pick.value = 'erasure'; pick.dispatchEvent(new Event('change'))"
    )
    bars = page.js(
        "return [...document.querySelectorAll('.panel .attribution .src')]"
        ".map((bar) => Number(bar.dataset.score))"
    )
    erased = api.post("/v1/step", json={"sentence": SENTENCE, "attribution": "erasure"})
    assert bars == pytest.approx(erased.json()["steps"][1]["attribution"], abs=1e-6)
    page.act(
        "const pick = document.querySelector('.panel .attribution-pick');"
        "pick.value = ''; pick.dispatchEvent(new Event('change'))"
    )


def _opens_the_beam(page, api, tmp_path: Path) -> None:
    """The beam as a tree, then searched again, made to say a word its best output lacks and
    not its first word."""
    beam = api.post("/v1/beam", json={"sentence": SENTENCE}).json()
    tree = page.open_beam()
    assert tree["nodes"] == len(beam["nodes"])
    assert tree["nbest"] == [h["text"] for h in beam["finished"]]
    assert set(tree["statuses"]) <= {"live", "finished", "pruned", "stopped"}
    assert tree["chosen"] == len(beam["source_tokens"])  # the best one's attention

    best = beam["finished"][0]["tokens"]
    wanted = next(n["token"] for n in beam["nodes"] if n["token"] not in best)
    ask = {"include": [wanted], "exclude": [best[0]]}
    constrained = api.post("/v1/beam", json={"sentence": SENTENCE, "constraints": ask}).json()
    drawn = page.constrain_beam(wanted, best[0])
    assert drawn["nodes"] == len(constrained["nodes"])
    assert drawn["nbest"] == [h["text"] for h in constrained["finished"]]
    met = sum(all(n["met"]) for n in constrained["nodes"])
    assert (drawn["met"], drawn["pending"]) == (met, len(constrained["nodes"]) - met)
    assert f'"{wanted}" met' in drawn["said"]  # the best one, chosen, met it
    page.js("document.querySelector('.panel .beam-controls').scrollIntoView()")
    page.driver.save_screenshot(str(tmp_path / "constrained.png"))


def _shows_snapshots(page, expected: dict, tmp_path: Path) -> None:
    """The attention of the snapshots kept in training, one row per output token."""
    page.act("document.querySelector('.panel .training-box summary').click()")
    snapshots = page.js("return document.querySelectorAll('.training .matrix tr').length")
    assert snapshots == len(expected["tokens"]) + 1  # its rows and the header
    shot = Path(os.environ.get("ALIGNMT_SCREENSHOT", tmp_path / "explorer.png"))
    page.driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000


@pytest.mark.slow
def test_the_written_page_steps_offline_from_a_file(browser, snapshot_run, vanilla_run, tmp_path):
    from benchmarks.browser import Explorer
    from selenium.webdriver.support.ui import WebDriverWait

    sentences = tmp_path / "in.txt"
    sentences.write_text(f"{SENTENCE}\n{OTHER}\n")
    out = tmp_path / "page.html"
    assert (
        main(
            [
                "explore",
                str(snapshot_run),
                str(vanilla_run),
                "--input",
                str(sentences),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    stored = json.loads(
        re.search(r'type="application/json">(.*?)</script>', out.read_text(), re.S).group(1)
    )
    expected = stored["sentences"][1]["results"]["run"]["step"]

    page = Explorer(browser)
    page.open(out.as_uri(), offline=True)
    page.wait_for(1)  # the page shows its first sentence by itself
    page.act(
        "const s = document.querySelector('.alignmt .sentence-pick');"
        "s.value = arguments[0]; s.dispatchEvent(new Event('change'))",
        OTHER,
    )
    page.key("ArrowRight")
    page.key("ArrowRight")
    shown = page.panel()
    assert shown["tokens"] == expected["tokens"] and shown["current"] == 2
    assert shown["top"] == [_argmax(expected["steps"][2]["attention"])]
    stored_beam = stored["sentences"][1]["results"]["run"]["beam"]
    assert page.open_beam()["nodes"] == len(stored_beam["nodes"])

    # What-if needs the server, and the page says so instead of failing silently.
    before = len(page.timings())
    page.js("document.querySelectorAll('.panel .topk li')[1].click()")
    WebDriverWait(browser, 10).until(lambda _: "needs the server" in page.notice())
    assert len(page.timings()) == before and page.panel()["tokens"] == expected["tokens"]
    assert page.resources() == []  # nothing fetched: no network needed
