"""A newcomer's path, timed: from `pip install` to the explorer of a trained model inline in a
fresh notebook, as a person would take it, in JupyterLab driven from a headless Chromium.

    python benchmarks/newcomer.py              # the notebook part, about 2 minutes
    python benchmarks/newcomer.py --install    # and a fresh virtual environment first

The notebook has three cells, each run as Run > Run Selected Cell would:

    import alignmt
    run = alignmt.train("reverse", steps=600, out_dir="runs/reverse")
    run.explore(["attention", "alignment"])

`--install` times `pip install torch==2.13.0` and then this checkout with its notebook extra
and JupyterLab into a new virtual environment (the wheels come from pip's cache or the
index, as they would for the person), and runs JupyterLab and the notebook in it. Prints a
table of seconds per stage. Run from the repository root with nothing else using the CPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.browser import Explorer, start_chromium
from benchmarks.jupyter import Lab, jupyter_lab, write_notebook
from benchmarks.load import free_port

ROOT = Path(__file__).resolve().parents[1]
CELLS = [
    "import alignmt",
    'run = alignmt.train("reverse", steps={steps}, out_dir="runs/reverse")',
    'run.explore(["attention", "alignment"])',
]


def install(folder: Path) -> tuple[Path, list[tuple[str, float]]]:
    """A fresh virtual environment with torch's CPU wheel, then alignmt[notebook] and
    JupyterLab: its Python, and the seconds each step took."""
    venv = folder / "venv"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    stages = [
        ("python -m venv", [sys.executable, "-m", "venv", str(venv)]),
        ("pip install torch==2.13.0", [*pip, "torch==2.13.0"]),
        ("pip install 'alignmt[notebook]' jupyterlab", [*pip, f"{ROOT}[notebook]", "jupyterlab"]),
    ]
    times = []
    for name, command in stages:
        start = time.perf_counter()
        subprocess.run(command, check=True)
        times.append((name, time.perf_counter() - start))
    return venv / "bin" / "python", times


def notebook(folder: Path, steps: int, python: Path) -> list[tuple[str, float]]:
    """The three cells in a fresh notebook in JupyterLab: the seconds to each stage."""
    cells = [cell.format(steps=steps) for cell in CELLS]
    write_notebook(folder / "newcomer.ipynb", cells)
    times = []
    start = time.perf_counter()
    with jupyter_lab(folder, free_port(), timeout=180, python=python) as url:
        times.append(("JupyterLab answers", time.perf_counter() - start))
        driver = start_chromium()
        try:
            lab = Lab(driver, url, timeout=600)
            mark = time.perf_counter()
            lab.open("newcomer.ipynb")
            times.append(("notebook open, kernel ready", time.perf_counter() - mark))
            for i, cell in enumerate(cells):
                mark = time.perf_counter()
                lab.run_cell(i)
                if i == len(cells) - 1:
                    Explorer(driver, timeout=120).wait_for(1)  # the widget shows a translation
                times.append((f"cell {i + 1}: {cell}", time.perf_counter() - mark))
            driver.save_screenshot(str(folder / "newcomer.png"))
        finally:
            driver.quit()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--install", action="store_true", help="time a fresh install first")
    parser.add_argument("--steps", type=int, default=600, help="training steps (600)")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        python, times = install(folder) if args.install else (Path(sys.executable), [])
        times += notebook(folder, args.steps, python)
    width = max(len(name) for name, _ in times)
    print(f"\n{'stage':<{width}}  seconds")
    for name, seconds in times:
        print(f"{name:<{width}}  {seconds:7.1f}")
    notebook_part = [s for name, s in times if not name.startswith(("python -m", "pip "))]
    print(f"{'from opening JupyterLab to the explorer':<{width}}  {sum(notebook_part):7.1f}")
    print(f"{'in all':<{width}}  {sum(s for _, s in times):7.1f}")


if __name__ == "__main__":
    main()
