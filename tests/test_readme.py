"""The examples of the README and of the documentation's pages, as written.

The Python examples run, against run folders where they expect them: every name they import
from `alignmt` still imports, and each call still takes the arguments they give it. The run
folders are tiny stand-ins and `alignmt.train` stops after a few steps, so the printed text
differs from the pages' comments; the shapes it prints do not. (The tutorials run whole, when
the site is built.) The shell examples are read by alignmt's own command line and config,
in the order a reader meets them (below)."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
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


# ---- The shell examples ---------------------------------------------------------------------
# Every command of every bash block, in the order a reader meets the pages (the README, then
# the site's table of contents), is parsed by alignmt's own command line and config, and
# every file or folder it reads is in the repository or made by a command met before it.
# A block of placeholders (`RUN_DIR`, `[flags]`) says `<!-- shell: synopsis -->` above it,
# and only its commands' names are checked. (CI runs the blocks too: docs/shell_blocks.py.)


def docs_script(name: str):
    """A script of docs/ as a module: shell_blocks (which finds the blocks, and which CI runs
    them with) or demo_numbers."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / f"docs/{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # for its dataclasses
    spec.loader.exec_module(module)
    return module


blocks = docs_script("shell_blocks")
# what each command reads (argparse's names) and writes
READS = ("run_dir", "run_dirs", "src", "ref", "input", "constraints", "gold_alignments")
TRACKED = set(
    subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
)


def in_repository(path: str) -> bool:
    """A tracked file, or a folder holding one: a fresh clone has it."""
    return path.rstrip("/") in TRACKED or any(t.startswith(path.rstrip("/") + "/") for t in TRACKED)


def command_names() -> set[str]:
    from alignmt.cli.parser import build_parser

    return set(next(a for a in build_parser()._actions if a.dest == "command").choices)


def redirects(words: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(the words without redirections, files read with <, files written with >)."""
    kept, read, written, i = [], [], [], 0
    while i < len(words):
        if words[i] in ("<", ">", "2>", ">>"):
            (read if words[i] == "<" else written).append(words[i + 1])
            i += 2
        else:
            kept.append(words[i])
            i += 1
    return kept, read, written


def what_it_reads_and_writes(argv: list[str]) -> tuple[list[str], list[str]]:
    """An alignmt command's input paths and outputs, from its parsed arguments (and, for
    `train`, its config's out_dir); SystemExit or ConfigError where it would not start."""
    from alignmt.cli.demo import demo_overrides
    from alignmt.cli.parser import build_parser
    from alignmt.config import config_path

    args = build_parser().parse_args(argv)
    found = vars(args)
    reads = [p for key in READS for p in _listed(found.get(key))]
    writes = [found["out"]] if found.get("out") else []
    if args.command == "train":
        cfg = apply_overrides(load_config(config_path(args.config)), list(args.overrides))
        writes.append(cfg.out_dir)
    elif args.command == "demo":
        apply_overrides(load_config(), demo_overrides(args) + list(args.overrides))
    return reads, writes


def _listed(value) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def check_block(page: str, line: int, block: str, made: set[str]) -> list[str]:
    """What is wrong with one block's commands; adds what they write to `made`."""
    problems = []
    for command in blocks.commands(block):
        words, read, written = redirects(command)
        argv = blocks.alignmt_words(words)
        where = f"{page}:{line}: {' '.join(command)}"
        if argv is None:
            read += [w for w in words[1:] if re.match(r"^(benchmarks|configs)/", w)]
        else:
            said = io.StringIO()  # argparse's message, where it refuses
            try:
                with contextlib.redirect_stderr(said):
                    reads, writes = what_it_reads_and_writes(argv)
            except (SystemExit, ValueError) as error:
                why = said.getvalue().strip().rsplit("\n", 1)[-1] or error
                problems.append(f"{where}: alignmt refuses it ({why})")
                continue
            read, written = read + reads, written + writes
        for path in read:
            made_before = any(path == m or path.startswith(f"{m}/") for m in made)
            if not in_repository(path) and not made_before:
                problems.append(f"{where}: nothing before it makes {path}")
        made.update(w.rstrip("/") for w in written)
    return problems


def test_every_shell_command_parses_and_reads_what_came_before():
    made: set[str] = set()
    problems = []
    for block in blocks.all_blocks(("run", "help-only", "synopsis")):  # Python runs above
        if block.kind == "synopsis":
            words = [blocks.alignmt_words(c) for c in blocks.commands(block.text)]
            names = {w[0] for w in words if w}
            problems += [f"{block.where}: no command {n}" for n in names - command_names()]
        else:
            problems += check_block(block.page, block.line, block.text, made)
            problems += [
                f"{block.where}: {' '.join(c)}: runs once only (say --overwrite or --resume)"
                for c in map(blocks.alignmt_words, blocks.commands(block.text))
                if c and c[0] == "train" and not {"--overwrite", "--resume"} & set(c)
                if block.kind == "run"
            ]
    assert not problems, "\n".join(problems)


def test_ci_runs_the_blocks_with_the_shim_it_states_and_stops_at_the_first_failure(tmp_path):
    made = blocks.script(
        [
            blocks.Block(
                "README.md", 4, "alignmt demo\n.venv/bin/python -m pytest -n auto\n", "run"
            ),
            blocks.Block(
                "a.md", 3, "alignmt train configs/reverse.yaml out_dir=x --overwrite\n", "run"
            ),
            blocks.Block("a.md", 9, "alignmt serve runs/x\ncurl -s 127.0.0.1:8000/\n", "run"),
            blocks.Block("b.md", 2, "alignmt demo --out y\n", "run"),
            blocks.Block("b.md", 7, "alignmt serve runs/x\ncurl -s 127.0.0.1:8000/\n", "run"),
            blocks.Block("c.md", 5, "alignmt train configs/x_gpu.yaml\n", "help-only", "(a GPU)"),
            blocks.Block("README.md", 20, "import alignmt\n", "python"),
            blocks.Block("c.md", 9, "import alignmt, sys\n", "python"),
        ],
        tmp_path / "results.json",
    )
    readme = blocks.blocks("README.md")[0].text
    assert blocks.TEST_COMMAND in readme and blocks.TEST_COMMAND in (ROOT / ".ci/run").read_text()
    assert "alignmt demo\n" in made  # the first demo as written: its numbers are checked
    assert "pytest -n auto" not in made  # CI has just run the suite
    assert "train configs/reverse.yaml train.minutes=0.3 out_dir=x --overwrite" in made
    assert "background alignmt serve runs/x\ncurl -s 127.0.0.1:8000/\nstop_background\n" in made
    assert "alignmt demo --steps 100 --samples 50 --out y" in made
    assert made.count("background alignmt serve") == 1  # the block met before is not rerun
    parsed = "bash -n <<'BLOCK'\nalignmt train configs/x_gpu.yaml\nBLOCK\n"
    assert parsed + "alignmt train --help > /dev/null\n" in made  # and not run
    assert made.count("<<'PYTHON'\nimport alignmt\nPYTHON") == 2  # the notebook cells, twice
    assert "import alignmt, sys" not in made  # the suite runs the guides' examples

    broken = blocks.script(
        [
            blocks.Block("a.md", 3, "echo one > one.txt\n", "run"),
            blocks.Block("b.md", 12, "cat one.txt\nalignmt translate nowhere < one.txt\n", "run"),
            blocks.Block("c.md", 1, "echo never > never.txt\n", "run"),
        ],
        tmp_path / "results.json",
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", broken], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "FAILED at b.md:12: alignmt translate nowhere < one.txt" in done.stderr
    assert (tmp_path / "one.txt").exists() and not (tmp_path / "never.txt").exists()


def test_the_demos_figures_on_the_pages_are_written_from_its_results():
    numbers = docs_script("demo_numbers")
    assert numbers.main([]) == 0, "run python docs/demo_numbers.py write"
    spread = json.loads(numbers.SPREAD.read_text())
    readme = (ROOT / "README.md").read_text()
    assert "<!-- demo-numbers: readme -->\n\n| length | vanilla | attention |" in readme
    # each rounding's own results lie within the ranges; ten points off does not
    for rounding in spread["roundings"].values():
        assert numbers.check(rounding["results"], spread) == []
    moved = copy.deepcopy(numbers.as_is(spread))
    moved["scores"]["vanilla"][2]["exact_match"] -= 0.1
    moved["sharpening"]["attention"]["sharpened_at"] += 500
    outside = numbers.check(moved, spread)
    assert outside[0].startswith("vanilla exact_match at 7: 71.4, the pages say 81.4")
    assert "attention sharpened at: 700.0" in "\n".join(outside)
    moved["sharpening"]["attention"]["sharpened_at"] = None  # never sharp: said, not a crash
    assert "attention sharpened at: none" in "\n".join(numbers.check(moved, spread))


def test_a_blocks_server_answers_its_next_commands_and_is_stopped_at_the_blocks_end(tmp_path):
    """Two blocks that each start a server on the same port: the second starts only if the
    first was stopped; after the run, nothing answers there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve = f"python -m http.server {port} --bind 127.0.0.1"
    made = blocks.script(
        [
            blocks.Block("a.md", 1, f"{serve}\ncurl -sf 127.0.0.1:{port}/ > first.html\n", "run"),
            blocks.Block(
                "b.md", 1, f"{serve} -d .\ncurl -sf 127.0.0.1:{port}/ > again.html\n", "run"
            ),
        ],
        tmp_path / "results.json",
        port=port,
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", made], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "Directory listing" in (tmp_path / "again.html").read_text()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # stopped
