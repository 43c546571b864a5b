"""The Python examples of the README and of the documentation's pages run as written, against
run folders where they expect them: every name they import from `alignmt` still imports, and
each call still takes the arguments they give it. The run folders are tiny stand-ins and
`alignmt.train` stops after a few steps, so the printed text differs from the pages'
comments; the shapes it prints do not. (The tutorials run whole, when the site is built.)"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path

import pytest

from alignmt.config import apply_overrides, load_config
from alignmt.training import run as training

ROOT = Path(__file__).resolve().parents[1]
# each page's examples run in order, in one namespace: a later one uses an earlier one's names
PAGES = [
    "README.md",
    "docs/index.md",
    "docs/getting-started.md",
    "docs/how-to/python.md",
    "docs/how-to/flax.md",
    "docs/how-to/explore.md",
    "docs/how-to/constraints.md",
]


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), flags=re.S)


def test_every_page_with_python_examples_is_run_here():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    pages = [str(p.relative_to(ROOT)) for p in pages if "_build" not in p.parts]
    with_examples = [page for page in pages if python_blocks(page)]
    assert sorted(with_examples) == sorted(PAGES)
    assert len(python_blocks("docs/how-to/python.md")) >= 2


@pytest.fixture(scope="module")
def run_folders(toy_run, toy_exported, tmp_path_factory) -> Path:
    """The folders the examples name, with a test set where they read one."""
    folder = tmp_path_factory.mktemp("examples")
    demo = folder / "runs/demo/attention"
    cfg = apply_overrides(load_config(), [f"out_dir={demo}", "train.steps=20", "model.emb_dim=8"])
    training.train(cfg, progress=False)
    shutil.copytree(toy_run, folder / "runs/multi30k_en_de")
    shutil.copytree(toy_run, folder / "runs/multi30k_en_de_vanilla")
    src = ["the big dog", "a small cat runs now"]
    (folder / "test.en").write_text("".join(line + "\n" for line in src))
    (folder / "test.de").write_text("der großer hund .\nein kleiner katze läuft jetzt .\n")
    (folder / "test.align").write_text("0-0 1-1 2-2\n0-0 1-1 2-2 3-3 4-4\n")
    shutil.copytree(toy_exported, folder / "m30k_onnx")
    return folder


@pytest.mark.parametrize("page", PAGES)
def test_the_python_examples_run(page, run_folders, monkeypatch):
    train = training.train

    def briefly(cfg, **kwargs):  # a few steps only, into a folder another page may have used
        cfg.train.steps = min(cfg.train.steps, 30)
        return train(cfg, **{**kwargs, "overwrite": True})

    monkeypatch.setattr(training, "train", briefly)
    monkeypatch.chdir(run_folders)
    printed = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(printed):
        for block in python_blocks(page):
            exec(compile(block, str(ROOT / page), "exec"), namespace)
    if page == "docs/how-to/python.md":
        assert re.search(r"^\(\d+, \d+\)$", printed.getvalue(), re.M)  # hyp.attention.shape
