"""The built documentation site (docs/_build/html, from `sphinx-build -W -b html docs
docs/_build/html`), read as its readers read it: every link and anchor inside it leads
somewhere, nothing is fetched from the network, the tutorials show the outputs and figures
their build computed, and the references are complete.

    sphinx-build -W --keep-going -b html docs docs/_build/html && python -m pytest docs/test_site.py

CI builds the site (which executes the tutorials) and then runs this file."""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import alignmt
from alignmt.config import _KEYS

SITE = Path(__file__).resolve().parent / "_build" / "html"
pytestmark = pytest.mark.skipif(
    not (SITE / "index.html").is_file() and not os.environ.get("CI"),
    reason=f"no built site at {SITE}: run sphinx-build -W -b html docs docs/_build/html",
)


class Page(HTMLParser):
    """A built page's ids, and each link and resource it names: (tag, attribute, url)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.urls: list[tuple[str, str, str]] = []
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            if value and (tag, name) in RESOURCES | {("a", "href")}:
                self.urls.append((tag, name, value))


# what a browser fetches to show a page (an <a> is only followed)
RESOURCES = {("img", "src"), ("script", "src"), ("link", "href"), ("iframe", "src")}


def pages() -> dict[Path, Page]:
    # _static holds the theme's templates, not pages
    found = sorted(p for p in SITE.rglob("*.html") if "_static" not in p.relative_to(SITE).parts)
    return {path: Page(path) for path in found}


def test_every_link_and_anchor_inside_the_site_leads_somewhere():
    read = pages()
    assert len(read) >= 20
    broken = []
    for path, page in read.items():
        for tag, _, url in page.urls:
            parts = urlsplit(url)
            if parts.scheme in ("http", "https", "mailto") or url.startswith("data:"):
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{path.relative_to(SITE)}: <{tag}> {url}")
            elif parts.fragment and parts.fragment not in (read.get(target) or Page(target)).ids:
                broken.append(f"{path.relative_to(SITE)}: <{tag}> {url} (no such anchor)")
    assert broken == []


def test_nothing_a_page_shows_comes_from_the_network():
    fetched = [
        f"{path.relative_to(SITE)}: {url}"
        for path, page in pages().items()
        for tag, attribute, url in page.urls
        if (tag, attribute) in RESOURCES and urlsplit(url).scheme in ("http", "https")
    ]
    assert fetched == []


TUTORIALS = [
    "bottleneck",
    "equations",
    "translation",
    "d2l",
    "steering",
    "explanation",
    "where_to_look",
    "exercises",
]


def test_every_tutorial_is_on_the_site_with_its_outputs():
    sources = sorted(p.stem for p in (SITE.parents[1] / "tutorials").glob("*.md"))
    assert sorted([*TUTORIALS, "index"]) == sources
    for name in TUTORIALS:
        page = (SITE / "tutorials" / f"{name}.html").read_text()
        assert page.count('class="cell_output') >= 2, name
        assert "highlight-ipythontb" not in page, name  # no cell showed an error


def test_the_tutorials_show_what_their_build_computed():
    bottleneck = (SITE / "tutorials" / "bottleneck.html").read_text()
    equations = (SITE / "tutorials" / "equations.html").read_text()
    translation = (SITE / "tutorials" / "translation.html").read_text()
    for page in (bottleneck, equations, translation):
        assert page.count('class="cell_output') >= 3
        assert len(re.findall(r"<img[^>]+src=\"\.\./_images/[0-9a-f]{64}\.png\"", page)) >= 2
        assert "highlight-ipythontb" not in page
    assert "0.430" in equations and "0.783" in equations  # the worked example, as computed
    assert "length 10" in bottleneck
    assert "BLEU by source length" in translation  # the reports, rendered as tables
    for page in (bottleneck, translation):  # the explorer, in its offline form
        assert 'class="alignmt-offline"' in page


def test_the_python_api_page_has_every_public_name():
    page = Page(SITE / "reference" / "python.html")
    missing = [name for name in alignmt.__all__ if name != "__version__"]
    missing = [name for name in missing if f"alignmt.{name}" not in page.ids]
    assert missing == []


def test_the_configuration_page_has_every_key():
    text = (SITE / "configuration.html").read_text()
    cell = '<td><p><code class="docutils literal notranslate"><span class="pre">{}</span>'
    assert [key for key in _KEYS if cell.format(key) not in text] == []


@pytest.mark.parametrize("page", ["index.html", "tutorials/bottleneck.html"])
def test_pages_open_offline_in_a_browser(browser, page, tmp_path):
    from benchmarks.browser import OFFLINE

    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.emulateNetworkConditions", OFFLINE)
    browser.get((SITE / page).as_uri())
    fetched = browser.execute_script(
        "return performance.getEntriesByType('resource').map((e) => e.name)"
        ".filter((url) => !url.startsWith('file:'))"
    )
    assert fetched == []
    assert browser.execute_script("return document.querySelectorAll('nav a').length") > 10
    if page.startswith("tutorials/"):  # the explorer in the page renders a translation
        frame = browser.find_element("css selector", "iframe.alignmt-offline")
        browser.execute_script("arguments[0].scrollIntoView()", frame)
        browser.switch_to.frame(frame)
        try:
            from selenium.webdriver.support.ui import WebDriverWait

            WebDriverWait(browser, 20).until(
                lambda d: d.execute_script("return document.querySelectorAll('.panel').length") == 2
            )
        finally:
            browser.switch_to.default_content()
    browser.save_screenshot(str(tmp_path / f"{page.replace('/', '_')}.png"))


def test_the_tutorials_export_their_models_into_the_site_as_live_explorers():
    for tutorial, name in (
        ("bottleneck", "bottleneck"),
        ("d2l", "d2l"),
        ("translation", "multi30k"),
    ):
        live = SITE / "live" / name
        site = json.loads((live / "site.json").read_text())
        assert (live / "index.html").is_file() and (live / site["graphs"]["step"]).is_file()
        assert (live / "static" / "web" / "ort" / "ort-wasm-simd-threaded.wasm").is_file()
        page = (SITE / "tutorials" / f"{tutorial}.html").read_text()
        assert f'src="../live/{name}/index.html?sentence=' in page
    assert (SITE / "try.html").read_text().count('class="alignmt-live"') == 3


def test_a_reader_types_a_caption_into_the_multi30k_explorer_and_reads_the_models_german(
    tmp_path,
):
    """The try page's English->German explorer, served as a static host serves the site:
    a typed caption comes out as the model's greedy German in Python (ONNX Runtime on the
    same folder), through the page's own Moses tokenizer and detokenizer."""
    from benchmarks.browser import LOCAL_ONLY, Explorer, StaticHost, start_chromium

    from alignmt.decoding.door import open_translator

    caption = "Two young men are playing soccer on a field."
    (python, *_), *_ = open_translator(SITE / "live" / "multi30k", beam_size=1).translate([caption])
    driver = start_chromium(flags=LOCAL_ONLY)
    with StaticHost(SITE) as url:
        try:
            driver.get(f"{url}try.html")
            frame = driver.find_element("css selector", "iframe.alignmt-live")
            assert "multi30k" in frame.get_attribute("src")  # the first explorer on the page
            driver.execute_script("arguments[0].scrollIntoView()", frame)
            driver.switch_to.frame(frame)
            page = Explorer(driver, timeout=60)
            page.wait_for(1)
            page.translate(caption)
            shown = page.panel()
            assert shown["source"][:4] == ["two", "young", "men", "are"]  # Moses' words, lowercased
            assert shown["tokens"][: len(python.tokens)] == python.tokens
            driver.switch_to.default_content()
            driver.save_screenshot(str(tmp_path / "try_multi30k.png"))
        finally:
            driver.quit()


def test_a_reader_types_a_sentence_into_a_live_explorer_and_steps_it(tmp_path):
    """Served over HTTP, as a static host serves the site, in a browser that can reach no
    other host: the try page's reversal explorer answers a typed string."""
    from benchmarks.browser import LOCAL_ONLY, Explorer, StaticHost, start_chromium

    driver = start_chromium(flags=LOCAL_ONLY)
    with StaticHost(SITE) as url:
        try:
            driver.get(f"{url}try.html")
            frame = driver.find_element("css selector", "iframe.alignmt-live[src*=bottleneck]")
            driver.execute_script("arguments[0].scrollIntoView()", frame)
            driver.switch_to.frame(frame)
            page = Explorer(driver, timeout=60)
            page.wait_for(1)  # the linked sentence, translated at once
            page.translate("student")
            page.act("document.querySelector('.panel .next').click()")
            shown = page.panel()
            assert shown["source"][:7] == list("student") and shown["current"] == 1
            assert "".join(shown["tokens"][:7]) == "tneduts"  # the model reverses it
            driver.switch_to.default_content()
            driver.save_screenshot(str(tmp_path / "try.png"))
        finally:
            driver.quit()
