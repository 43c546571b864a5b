"""The examples of the README and of the documentation's pages, as written.

The Python examples run, against run folders where they expect them: every name they import
from `alignmt` still imports, and each call still takes the arguments they give it. The run
folders are tiny stand-ins and `alignmt.train` stops after a few steps, so the printed text
differs from the pages' comments; the shapes it prints do not. (The tutorials run whole, when
the site is built.) The shell examples are read by alignmt's own command line and config,
in the order a reader meets them (below)."""

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


# ---- The shell examples ---------------------------------------------------------------------
# Every command of every bash block, in the order a reader meets the pages (the README, then
# the site's table of contents), is parsed by alignmt's own command line and config, and
# every file or folder it reads is in the repository or made by a command met before it.
# A block of placeholders (`RUN_DIR`, `[flags]`) says `<!-- shell: synopsis -->` above it,
# and only its commands' names are checked.

SYNOPSIS = "<!-- shell: synopsis -->"
# what each command reads (argparse's names) and writes
READS = ("run_dir", "run_dirs", "src", "ref", "input", "constraints", "gold_alignments")
SEPARATORS = {"|", "&&", ";", "||"}


def reading_order() -> list[str]:
    """README.md, docs/index.md, then the pages of its tables of contents in order."""
    index = (ROOT / "docs/index.md").read_text()
    trees = re.findall(r"```\{toctree\}\n(.*?)```", index, flags=re.S)
    names = [line for tree in trees for line in tree.splitlines() if line and line[0] != ":"]
    return ["README.md", "docs/index.md", *[f"docs/{name}.md" for name in names]]


def shell_blocks(page: str) -> list[tuple[int, str, bool]]:
    """(line, text, synopsis) of each bash block of `page`."""
    text = (ROOT / page).read_text()
    found = []
    for match in re.finditer(r"^```(?:bash|sh)\n(.*?)^```", text, flags=re.S | re.M):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        found.append((text.count("\n", 0, match.start()) + 2, match.group(1), before == SYNOPSIS))
    return found


def commands(block: str) -> list[list[str]]:
    """The block's simple commands as words: lines joined at a trailing backslash, comments
    dropped, split at pipes and `&&`; a leading `time` or VAR=value dropped."""
    import shlex

    found: list[list[str]] = []
    for line in block.replace("\\\n", " ").splitlines():
        words, command = shlex.split(line, comments=True), []
        for word in [*words, ";"]:
            if word in SEPARATORS:
                while command and (command[0] == "time" or re.match(r"^\w+=", command[0])):
                    command.pop(0)
                found += [command] if command else []
                command = []
            else:
                command.append(word)
    return found


def alignmt_words(command: list[str]) -> list[str] | None:
    """The arguments of an alignmt command (`alignmt`, `.venv/bin/alignmt`, `... -m alignmt`
    under python or torchrun), or None for another program."""
    if command[0] == "alignmt" or command[0].endswith("/bin/alignmt"):
        return command[1:]
    for i in range(len(command) - 1):
        if command[i : i + 2] == ["-m", "alignmt"]:
            return command[i + 2 :]
    return None


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
    for command in commands(block):
        words, read, written = redirects(command)
        argv = alignmt_words(words)
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
            if not (ROOT / path).exists() and not made_before:
                problems.append(f"{where}: nothing before it makes {path}")
        made.update(w.rstrip("/") for w in written)
    return problems


def test_every_shell_command_parses_and_reads_what_came_before():
    made: set[str] = set()
    problems = []
    for page in reading_order():
        for line, block, synopsis in shell_blocks(page):
            if synopsis:
                names = {c[1] for c in commands(block) if alignmt_words(c)}
                problems += [f"{page}:{line}: no command {n}" for n in names - command_names()]
            else:
                problems += check_block(page, line, block, made)
    assert not problems, "\n".join(problems)
