"""The explorer driven in a real headless Chromium, as a user would click it: for the browser
test and benchmarks/explorer.py. Selenium (a dev dependency) drives Debian's `chromium`
through its `chromedriver`; nothing is downloaded.

Each interaction waits until the explorer (the page's `.alignmt` element: the whole page, or
a notebook widget) has no answer pending and the page has recorded the interaction's time
(window.alignmtTimings: from the click to the frame that shows it).
"""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The explorer in the page: the first, as a page holds one (a notebook may hold several).
_ROOT = "const root = document.querySelector('.alignmt');"
OFFLINE = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}


class StaticHost:
    """A folder served on 127.0.0.1 by Python's http.server in a thread, as
    `python -m http.server` or any static host serves it: `with StaticHost(folder) as url`;
    `isolating`: with the COOP/COEP headers that make a page cross-origin isolated. `asked`
    lists the paths the browser fetched, in order."""

    def __init__(self, folder: str | Path, *, isolating: bool = False) -> None:
        self.asked: list[str] = []
        asked = self.asked

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet: the tests print their own
                return None

            def end_headers(self) -> None:
                if isolating:  # as a host configured for SharedArrayBuffer sends them
                    self.send_header("Cross-Origin-Opener-Policy", "same-origin")
                    self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
                super().end_headers()

            def do_GET(self) -> None:
                asked.append(self.path)
                super().do_GET()

        handler = functools.partial(Handler, directory=str(folder))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)

    def __enter__(self) -> str:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_port}/"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class BrowserUnavailable(RuntimeError):
    """Chromium or its driver is missing, or would not start."""


# Chromium flags: no host name resolves, so only what 127.0.0.1 serves can load (the network
# conditions' "offline" would cut a page served from localhost too)
LOCAL_ONLY = ("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",)


def start_chromium(width: int = 1400, height: int = 1100, flags: Sequence[str] = ()) -> Any:
    """A headless Chromium under Selenium, with `flags` besides its own, or
    BrowserUnavailable saying why not."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not chromium or not driver_path:
        raise BrowserUnavailable(
            "Debian's chromium and chromium-driver are needed: apt-get install chromium "
            "chromium-driver"
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as error:
        raise BrowserUnavailable(f"selenium is not installed ({error})") from error
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--force-device-scale-factor=1",
        *flags,
    ):
        options.add_argument(flag)
    try:
        return webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    except Exception as error:  # selenium raises several kinds; all mean "no browser"
        raise BrowserUnavailable(f"chromium would not start: {error}") from error


def settle(driver: Any, tries: int = 5) -> bool:
    """Wait while an exported site's page makes itself cross-origin isolated (it may reload
    once, under its service worker); whether it is. A page that is no such site is settled."""
    from selenium.common.exceptions import JavascriptException, WebDriverException

    driver.set_script_timeout(60)
    for _ in range(tries):
        try:
            started = driver.execute_async_script(
                "const done = arguments[0];"
                "(window.alignmtIsolated ?? Promise.resolve(true)).then(done);"
            )
        except (JavascriptException, WebDriverException):  # unloaded by the reload
            started = False
        if started:
            return driver.execute_script("return window.crossOriginIsolated")
        time.sleep(0.2)
    raise AssertionError(f"the page did not settle after {tries} loads")


@dataclass
class Explorer:
    """One explorer page in `driver`, its first panel unless told otherwise."""

    driver: Any
    timeout: float = 30.0

    def open(self, url: str, *, offline: bool = False) -> None:
        """Load the page; `offline` cuts the browser's network first."""
        if offline:
            self.driver.execute_cdp_cmd("Network.enable", {})
            self.driver.execute_cdp_cmd("Network.emulateNetworkConditions", OFFLINE)
        self.driver.get(url)
        settle(self.driver)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def timings(self) -> list[dict[str, Any]]:
        """Every interaction so far: {"kind", "ms", "shown"}: its kind, how long it took to
        show, and when it was shown (ms since the page began to load)."""
        return self.js("return window.alignmtTimings || []")

    def wait_for(self, done: int) -> None:
        """Until `done` interactions are recorded and no request is in flight; a failed
        interaction's message (the page's notice) is raised."""
        from selenium.common.exceptions import TimeoutException
        from selenium.webdriver.support.ui import WebDriverWait

        def settled(driver: Any) -> bool:
            return driver.execute_script(
                f"{_ROOT} return root !== null && root.dataset.pending === '0' && "
                "((window.alignmtTimings || []).length >= arguments[0] || "
                "root.querySelector('.notice').classList.contains('error'))",
                done,
            )

        try:
            WebDriverWait(self.driver, self.timeout).until(settled)
        except TimeoutException:
            state = self.js(
                f"{_ROOT} return root === null ? ['no explorer', 0, ''] : [root.dataset.pending,"
                "(window.alignmtTimings || []).length, root.querySelector('.notice').textContent]"
            )
            raise AssertionError(
                f"after {self.timeout} s, {state[1]} of {done} interactions shown, "
                f"{state[0]} requests in flight; the page says: {state[2]!r}"
            ) from None
        error = self.js(
            f"{_ROOT} const n = root.querySelector('.notice');"
            "return n.classList.contains('error') ? n.textContent : null"
        )
        if error:
            raise AssertionError(f"the page says: {error}")

    def act(self, script: str, *args: Any) -> None:
        """Run `script` (a click, a key) and wait for the interaction it starts."""
        before = len(self.timings())
        self.js(script, *args)
        self.wait_for(before + 1)

    def translate(self, sentence: str, *, model: str | None = None, other: str = "") -> None:
        self.act(
            f"{_ROOT} const [s, m, o] = arguments;"
            "root.querySelector('.sentence').value = s;"
            "if (m) root.querySelector('.model').value = m;"
            "root.querySelector('.other').value = o;"
            "root.querySelector('.go').click()",
            sentence,
            model,
            other,
        )

    def key(self, name: str) -> None:
        """Press a key on the page ("ArrowRight", "ArrowLeft")."""
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        before = len(self.timings())
        self.js("document.activeElement.blur()")
        keys = {"ArrowRight": Keys.RIGHT, "ArrowLeft": Keys.LEFT}
        ActionChains(self.driver).send_keys(keys[name]).perform()
        self.wait_for(before + 1)

    def panel(self, index: int = 0) -> dict[str, Any]:
        """What panel `index` shows: output tokens with their probabilities and shading, the
        current step, the source words with their α and coverage (and which are marked as
        under 0.5), the marked (largest-α) word, the candidates, and the what-if box."""
        return self.js(
            r"""
            const p = document.querySelectorAll('.panel')[arguments[0]];
            const all = (s) => [...p.querySelectorAll(s)];
            const words = all(':scope > .source > .src');
            const none = p.querySelector(':scope > .source > .novanilla');
            const box = p.querySelector('.whatif');
            return {
              tokens: all('.output .tok').map((t) => t.textContent),
              probabilities: all('.output .tok').map((t) => Number(t.dataset.p)),
              // the confidence shading's opacity, as the browser computed it
              shade: all('.output .tok').map((t) => {
                const rgba = getComputedStyle(t).backgroundColor.match(/[\d.]+/g);
                return rgba.length === 4 ? Number(rgba[3]) : 1;
              }),
              current: Number(p.querySelector('.output .tok.current').dataset.i),
              forced: all('.output .tok.forced').map((t) => Number(t.dataset.i)),
              source: words.map((s) => s.querySelector('.word').textContent),
              alpha: words.map((s) => Number(s.dataset.alpha)),
              coverage: words.map((s) => Number(s.querySelector('.cov').dataset.coverage)),
              under: words.filter((s) => s.querySelector('.cov.under'))
                .map((s) => Number(s.dataset.j)),
              top: words.filter((s) => s.classList.contains('top')).map((s) => Number(s.dataset.j)),
              candidates: all('.topk li').map((li) => li.dataset.token),
              statement: none ? none.textContent : null,
              whatif: box.hidden ? null : {kind: box.dataset.kind,
                changed: box.dataset.changed === 'true', text: box.textContent},
            };""",
            index,
        )

    def force(self, token: str, index: int = 0) -> None:
        self.act(
            "const p = document.querySelectorAll('.panel')[arguments[0]];"
            "[...p.querySelectorAll('.topk li')].find((li) => li.dataset.token === arguments[1])"
            ".click()",
            index,
            token,
        )

    def override(self, source: int, index: int = 0) -> None:
        self.act(
            "document.querySelectorAll('.panel')[arguments[0]]"
            ".querySelectorAll(':scope > .source > .src')[arguments[1]].click()",
            index,
            source,
        )

    def open_beam(self, index: int = 0) -> dict[str, Any]:
        """Open the beam panel (which searches) and say what it drew."""
        self.act(
            "const p = document.querySelectorAll('.panel')[arguments[0]];"
            "p.querySelector('.beam-box summary').click()",
            index,
        )
        return self.js(
            """
            const p = document.querySelectorAll('.panel')[arguments[0]];
            return {
              nodes: p.querySelectorAll('svg.tree .node').length,
              statuses: [...p.querySelectorAll('svg.tree .node')].map((g) => g.classList[1]),
              nbest: [...p.querySelectorAll('.nbest li')].map((li) => li.firstChild.textContent),
              chosen: p.querySelectorAll('.beam-node .src').length,
            };""",
            index,
        )

    def constrain_beam(self, include: str, exclude: str = "", index: int = 0) -> dict[str, Any]:
        """Type phrases under the (open) beam, search again, and say what it drew."""
        self.act(
            "const p = document.querySelectorAll('.panel')[arguments[0]];"
            "p.querySelector('.beam-include').value = arguments[1];"
            "p.querySelector('.beam-exclude').value = arguments[2];"
            "p.querySelector('.beam-go').click()",
            index,
            include,
            exclude,
        )
        return self.js(
            """
            const p = document.querySelectorAll('.panel')[arguments[0]];
            const marks = (kind) => p.querySelectorAll(`svg.tree circle.${kind}`).length;
            return {
              nodes: p.querySelectorAll('svg.tree .node').length,
              met: marks('met'),
              pending: marks('pending'),
              nbest: [...p.querySelectorAll('.nbest li')].map((li) => li.firstChild.textContent),
              said: p.querySelector('.beam-node p').textContent,
            };""",
            index,
        )

    def notice(self) -> str:
        """What the explorer's notice line says."""
        return self.js(f"{_ROOT} return root.querySelector('.notice').textContent")

    def resources(self) -> list[str]:
        """Every resource the page has fetched (network entries), by URL."""
        return self.js("return performance.getEntriesByType('resource').map((e) => e.name)")
