"""The exported site's page and ONNX Runtime Web's threads: cross-origin isolated by its host's
COOP/COEP headers, by its own service worker where a plain static host sends none, and on one
thread, said on the page, where it cannot be (inside a frame of a page that is not)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from benchmarks.browser import Explorer, settle

from alignmt.cli import main

THREADED = re.compile(r"ONNX Runtime Web [\d.]+, \d+ threads? of \d+ cores")


@pytest.fixture(scope="module")
def site(toy_run, tmp_path_factory) -> Path:
    """The toy corpus's model (Moses' rules, en -> de) as a site; no test writes to it."""
    out = tmp_path_factory.mktemp("isolation") / "toy"
    assert main(["export", str(toy_run), "--out", str(out), "--web"]) == 0
    return out


def runtime_line(page: Explorer) -> str:
    return page.js("return document.querySelector('.alignmt .runtime').textContent")


@pytest.mark.parametrize("headers", [True, False], ids=["coop-coep", "service-worker"])
def test_the_page_is_isolated_by_its_host_or_its_service_worker(
    headers, site, browser, host, toy_run
):
    url = host(site, isolating=headers)
    page = Explorer(browser)
    page.open(url + "index.html?sentence=the%20dog%20runs")
    page.wait_for(1)
    assert page.js("return window.crossOriginIsolated") is True
    assert THREADED.search(runtime_line(page)), runtime_line(page)
    assert page.panel()["tokens"]  # it translates, isolated
    # the service worker is fetched only where the host's headers did not isolate the page
    assert ("/coi-serviceworker.js" in host.asked) == (not headers)


def test_in_a_frame_of_a_page_not_isolated_it_runs_one_thread_and_says_so(
    site, browser, host, tmp_path
):
    # the site in a folder of its own, so that its service worker's scope is not the frame's
    shutil.copytree(site, tmp_path / "site")
    (tmp_path / "frame.html").write_text(
        '<!doctype html><iframe src="site/index.html?sentence=a%20dog" '
        'style="width: 1200px; height: 900px"></iframe>',
        encoding="utf-8",
    )
    browser.get(host(tmp_path) + "frame.html")
    browser.switch_to.frame(0)
    try:
        assert settle(browser) is False  # it registered its worker, reloaded, and stayed so
        page = Explorer(browser)
        page.wait_for(1)
        assert page.js("return window.crossOriginIsolated") is False
        said = runtime_line(page)
        assert said.endswith("1 thread (the page is not cross-origin isolated)"), said
        assert page.panel()["tokens"]
    finally:
        browser.switch_to.default_content()
