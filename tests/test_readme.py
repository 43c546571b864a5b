"""The README's Python examples run as written, against run folders where they expect them:
every name they import from `alignmt` still imports, and each call still takes the arguments
they give it. The run folders are tiny stand-ins, so the printed text differs from the
README's comments; the shapes it prints do not."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path

from alignmt.config import apply_overrides, load_config
from alignmt.training.run import train

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_python_examples():
    assert len(python_blocks()) >= 2


def test_the_readme_python_examples_run(toy_run, tmp_path, monkeypatch):
    demo = tmp_path / "runs/demo/attention"
    cfg = apply_overrides(load_config(), [f"out_dir={demo}", "train.steps=20", "model.emb_dim=8"])
    train(cfg, progress=False)
    shutil.copytree(toy_run, tmp_path / "runs/multi30k_en_de")
    src = ["the big dog", "a small cat runs now"]
    (tmp_path / "test.en").write_text("".join(line + "\n" for line in src))
    (tmp_path / "test.de").write_text("der großer hund .\nein kleiner katze läuft jetzt .\n")
    (tmp_path / "test.align").write_text("0-0 1-1 2-2\n0-0 1-1 2-2 3-3 4-4\n")
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(printed):
        for block in python_blocks():  # in order: a later example uses an earlier one's names
            exec(compile(block, str(README), "exec"), namespace)
    assert "torch.Size([" in printed.getvalue()  # hyp.attention.shape
