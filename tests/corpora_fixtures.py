"""The data folder's fixtures: the corpora the shipped configs name, got from ../shared/data
as `alignmt data get NAME --from ../shared/data` gets them (a plugin of conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from alignmt.text.corpora import CATALOGUE
from alignmt.text.download import get
from tests.conftest import SHARED


@pytest.fixture(scope="session")
def _shared_corpora(tmp_path_factory) -> Path:
    """A data folder holding the corpora the shipped configs name, got from ../shared/data
    as `alignmt data get NAME --from ../shared/data` gets them (checksums checked)."""
    if not (SHARED / "data").is_dir():
        pytest.skip(f"../shared/data is absent (looked in {SHARED})")
    root = tmp_path_factory.mktemp("shared_corpora")
    for corpus in CATALOGUE.values():
        got = get(corpus, root, mirror=SHARED / "data")
        assert not (got.missing or got.refused), got.summary()
    return root


@pytest.fixture
def corpora(_shared_corpora, monkeypatch) -> Path:
    """The data folder, with Multi30k's and Tatoeba's default files in it."""
    monkeypatch.setenv("ALIGNMT_DATA", str(_shared_corpora))
    return _shared_corpora
