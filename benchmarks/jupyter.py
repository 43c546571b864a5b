"""JupyterLab started for a test or a measurement, and driven in Chromium as a person would
use it: open a notebook, run its cells, click in its outputs. Nothing is downloaded:
JupyterLab, its widget manager and anywidget's extension come with the dev extra.

The lab runs with `expose_app_in_browser`, so that the page's `window.jupyterapp` can run
cells and ask the kernel; the configuration, runtime and workspace folders are the lab's
own (under its root), so that nothing of a user's Jupyter setup leaks in.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat


def write_notebook(path: Path, cells: list[str]) -> Path:
    """A notebook of code cells, unexecuted, with the kernel this Python runs."""
    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(book, path)
    return path


@contextmanager
def jupyter_lab(
    root: Path, port: int, timeout: float = 90.0, python: str | Path = sys.executable
) -> Iterator[str]:
    """JupyterLab serving `root` on 127.0.0.1:`port`, run by `python` (whose environment
    the notebooks' kernel is too); yields its URL with the token. Its log is root/.lab.log."""
    token = secrets.token_hex(12)
    private = {
        "JUPYTER_CONFIG_DIR": ".config",
        "JUPYTER_RUNTIME_DIR": ".runtime",
        "IPYTHONDIR": ".ipython",
    }
    env = {**os.environ, **{key: str(root / name) for key, name in private.items()}}
    command = [
        str(python), "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}", f"--LabApp.workspaces_dir={root / '.workspaces'}",
        "--LabApp.expose_app_in_browser=True", "--allow-root",
        # nothing asked of the network: no news, no update check, no extension index
        "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]  # fmt: skip
    # the "get notified about Jupyter news?" prompt would cover the notebook's outputs
    page_config = root / ".config" / "labconfig" / "page_config.json"
    page_config.parent.mkdir(parents=True, exist_ok=True)
    disabled = {"@jupyterlab/apputils-extension:announcements": True}
    page_config.write_text(json.dumps({"disabledExtensions": disabled}))
    log = (root / ".lab.log").open("wb")
    lab = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(lab, f"{url}/api/status?token={token}", timeout, root / ".lab.log")
        yield f"{url}/lab/tree/{{}}?token={token}"
    finally:
        lab.terminate()
        try:
            lab.wait(20)
        except subprocess.TimeoutExpired:
            lab.kill()
        log.close()


def _wait_until_up(lab: subprocess.Popen, status: str, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lab.poll() is not None:
            raise RuntimeError(f"JupyterLab exited ({lab.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(status, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"JupyterLab did not answer in {timeout:.0f} s:\n{log.read_text()[-3000:]}")


@dataclass
class Lab:
    """A notebook open in JupyterLab in `driver`."""

    driver: Any
    url: str  # from jupyter_lab, with {} for the notebook's path
    timeout: float = 120.0

    def open(self, notebook: str) -> None:
        """Open `notebook` and wait until its kernel is ready."""
        self.driver.set_script_timeout(self.timeout)
        self.driver.get(self.url.format(notebook))
        self._wait(
            "const app = window.jupyterapp, nb = app && app.shell.currentWidget;"
            "return Boolean(nb && nb.sessionContext && nb.sessionContext.session &&"
            " nb.sessionContext.session.kernel && nb.content && nb.content.widgets.length);"
        )
        self.driver.execute_async_script(
            "const done = arguments[0];"
            "window.jupyterapp.shell.currentWidget.sessionContext.ready.then(() => done(true));"
        )

    def run_all(self) -> None:
        """Run every cell, as Run > Run All Cells does, and wait until the kernel is idle."""
        self.driver.execute_async_script(
            "const done = arguments[0], app = window.jupyterapp;"
            "app.commands.execute('notebook:run-all-cells').then(() => done(true));"
        )

    def run_cell(self, index: int) -> None:
        """Select cell `index` and run it, as Run > Run Selected Cell does; returns when the
        kernel has run it."""
        self.driver.execute_async_script(
            "const [index, done] = arguments, app = window.jupyterapp;"
            "app.shell.currentWidget.content.activeCellIndex = index;"
            "app.commands.execute('notebook:run-cell').then(() => done(true));",
            index,
        )

    def kernel(self, code: str) -> str:
        """Run `code` in the notebook's kernel (no cell); what it printed. A Python error
        is raised here."""
        printed, error = self.driver.execute_async_script(
            """
            const [code, done] = arguments;
            const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
            const future = kernel.requestExecute({ code });
            let out = "", error = null;
            future.onIOPub = (msg) => {
              if (msg.header.msg_type === "stream") out += msg.content.text;
              if (msg.header.msg_type === "error") error = msg.content.traceback.join("\\n");
            };
            future.done.then(() => done([out, error]), (e) => done([out, String(e)]));
            """,
            code,
        )
        if error:
            raise AssertionError(f"the kernel says:\n{error}")
        return printed

    def _wait(self, condition: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not self.driver.execute_script(condition):
            if time.monotonic() > deadline:
                raise AssertionError(f"JupyterLab: not ready after {self.timeout:.0f} s")
            time.sleep(0.2)
