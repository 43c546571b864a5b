"""The tutorials (MyST notebooks kept as text, beside this file) run as a reader runs them:
converted by Jupytext and executed cell by cell in a fresh IPython kernel, where their own
`assert`s hold the numbers they state. A cell that raises fails the test.

    python -m pytest docs/tutorials

They train the models they show, so they run apart from the test suite (CI runs both)."""

from __future__ import annotations

from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

TUTORIALS = sorted(Path(__file__).parent.glob("*.md"))


def figures(notebook) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        for output in cell.get("outputs", [])
    )


def test_there_are_tutorials():
    assert [p.stem for p in TUTORIALS] == ["bottleneck", "equations"]


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_the_tutorial_runs_and_its_numbers_hold(path, tmp_path):
    notebook = jupytext.read(path)
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    assert figures(notebook) >= 2  # the heatmaps
