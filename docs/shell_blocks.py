"""The shell blocks of the README and the guides, in the order a reader meets them, run.

    python docs/shell_blocks.py             # the blocks, in reading order, with what is done
    python docs/shell_blocks.py run         # run them in a fresh clone (CI does)

A reader follows README.md, then docs/index.md and the pages of its tables of contents in
order. `run` clones this repository's HEAD into an empty folder, with no ../shared beside it
and the corpora in $ALIGNMT_DATA (a mirror: `alignmt data get` finds them there and checks
their sums), and runs every block there, one after another in one bash session under `set -euo
pipefail`: the `source .venv/bin/activate` of one block holds in the next, as for a reader.
The first failing command stops the run and is named with its page and line. The commands
run as written, but for this stated shim, which keeps the run to minutes:

- a training (`alignmt train CONFIG`, under torchrun too) gets `train.minutes=0.3` after its
  config, and benchmarks/multi30k_bleu.sh its own knob, MINUTES=0.3;
- every demo but the first gets `--steps 100 --samples 50`; the first, the README's, runs
  whole, and the numbers the pages quote from it are compared with what it printed
  (docs/demo_numbers.py);
- a server (`alignmt serve`, `python -m http.server`) starts in the background; the block's
  next commands run once it answers on 127.0.0.1:8000, and it stops at the block's end;
- the README's test command is not run: CI runs it just before;
- a block met before, word for word, is not run twice.

The README's Python example, its notebook cells, runs too, twice (as a notebook's cells may
be), in the environment its first line made. The guides' Python examples run in the test
suite against stand-in run folders (tests/test_readme.py).

A block that cannot run here says why in a marker above it, `<!-- shell: help-only REASON -->`
(a GPU, several machines, hours of training): bash parses it, and each command it names
answers `--help` (a script run by bash is parsed). A block of placeholders (`RUN_DIR`,
`[flags]`) says `<!-- shell: synopsis -->`; tests/test_readme.py checks its commands' names.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- shell: (synopsis|help-only) ?(.*?) ?-->$")
SEPARATORS = {"|", "&&", ";", "||"}
TEST_COMMAND = ".venv/bin/python -m pytest -n auto"  # the README's; .ci/run runs it
TRAIN_SHIM = "train.minutes=0.3"
DEMO_SHIM = "--steps 100 --samples 50"
SERVERS = re.compile(r"^(alignmt serve|python -m http\.server)\b", re.M)
PORT = 8000
KINDS = ("run", "help-only", "synopsis", "python")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # of the block's first command
    text: str
    kind: str  # "run", "help-only", "synopsis" or "python"
    why: str = ""  # a help-only block's reason

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def reading_order() -> list[str]:
    """README.md, docs/index.md, then the pages of its tables of contents in order."""
    index = (ROOT / "docs/index.md").read_text()
    trees = re.findall(r"```\{toctree\}\n(.*?)```", index, flags=re.S)
    names = [line for tree in trees for line in tree.splitlines() if line and line[0] != ":"]
    return ["README.md", "docs/index.md", *[f"docs/{name}.md" for name in names]]


def blocks(page: str) -> list[Block]:
    """The bash and Python blocks of `page`; a bash block has the kind its marker (if any)
    gives it."""
    text = (ROOT / page).read_text()
    found = []
    for match in re.finditer(r"^```(bash|sh|python)\n(.*?)^```", text, flags=re.S | re.M):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
        marker = MARKER.match(before)
        line = text.count("\n", 0, match.start()) + 2
        kind, why = (marker.group(1), marker.group(2).strip("()")) if marker else ("run", "")
        kind = "python" if match.group(1) == "python" else kind
        found.append(Block(page, line, match.group(2), kind, why))
    return found


def all_blocks(kinds: tuple[str, ...] = KINDS) -> list[Block]:
    """Every block of those kinds, in reading order."""
    return [block for page in reading_order() for block in blocks(page) if block.kind in kinds]


def commands(text: str) -> list[list[str]]:
    """The simple commands of a block as words: lines joined at a trailing backslash,
    comments dropped, split at pipes and `&&`; a leading `time` or VAR=value dropped."""
    found: list[list[str]] = []
    for line in text.replace("\\\n", " ").splitlines():
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


# ---- Running them ---------------------------------------------------------------------------

PRELUDE = """\
set -euo pipefail
export MINUTES=0.3  # benchmarks/multi30k_bleu.sh's trainings, as the shim's
where=start
trap 'echo "FAILED at $where: $BASH_COMMAND" >&2' ERR
trap '[ -z "${{server:-}}" ] || kill "$server" 2>/dev/null || true' EXIT  # a failed block's server
# A server in the background, waited for until it answers; stopped at its block's end.
background() {{
    if curl -sf -o /dev/null 127.0.0.1:{port}/; then
        echo "127.0.0.1:{port} already answers: an earlier server was not stopped" >&2
        return 1
    fi
    (exec "$@") > server.log 2>&1 &  # exec: $! is the server itself, which kill stops
    server=$!
    for _ in $(seq 1200); do
        curl -sf -o /dev/null 127.0.0.1:{port}/ && return 0
        kill -0 "$server" 2>/dev/null || {{ cat server.log >&2; return 1; }}
        sleep 0.25
    done
    echo "no answer on 127.0.0.1:{port} after 5 minutes" >&2
    return 1
}}
stop_background() {{ kill "$server" && wait "$server" || true; server=; }}
"""


def shimmed(block: Block, first_demo: bool) -> str:
    """A block's text with the shim applied (module docstring)."""
    text = block.text.replace(TEST_COMMAND, ": the test suite, which CI has just run")
    text = re.sub(r"(\balignmt train \S+)", rf"\1 {TRAIN_SHIM}", text)
    if not first_demo:
        text = re.sub(r"(\balignmt demo)\b", rf"\1 {DEMO_SHIM}", text)
    return SERVERS.sub(r"background \1", text)


def help_only(block: Block) -> str:
    """Bash parses the block; each command answers --help (a bash script is parsed)."""
    lines = [f"bash -n <<'BLOCK'\n{block.text}BLOCK"]
    for words in commands(block.text):
        argv = alignmt_words(words)
        if argv is not None:
            lines.append(f"alignmt {shlex.quote(argv[0])} --help > /dev/null")
        elif words[0] in ("python", "python3") and words[1].endswith(".py"):
            lines.append(f"python {shlex.quote(words[1])} --help > /dev/null")
        elif words[0] == "bash":
            lines.append(f"bash -n {shlex.quote(words[1])}")
        elif "/" in words[0]:  # a program the block itself installs (.venv-torch/bin/pip)
            continue
        else:
            lines.append(f"command -v {shlex.quote(words[0])} > /dev/null")
    return "\n".join(lines) + "\n"


def script(blocks_: list[Block], results: Path, port: int = PORT) -> str:
    """One bash script that runs every block, timed, in order; after the first demo it copies
    its results.json to `results`. A server is waited for on `port`."""
    parts, seen, demo_seen = [PRELUDE.format(port=port)], set(), False
    for block in blocks_:
        if block.kind == "synopsis" or (block.kind == "python" and block.page != "README.md"):
            continue
        head = f"\nwhere={block.where}; SECONDS=0; echo '=== {block.where} ({block.kind})'\n"
        if block.text in seen:
            parts.append(head + "echo '(met before, word for word: not run again)'\n")
            continue
        seen.add(block.text)
        if block.kind == "help-only":
            said = shlex.quote(f"(help only: {block.why})")
            parts.append(head + f"echo {said}\n" + help_only(block))
        elif block.kind == "python":
            cell = f".venv/bin/python - <<'PYTHON'\n{block.text}PYTHON\n"
            parts.append(head + cell + "echo '(and again)'\n" + cell)
        else:
            first_demo = not demo_seen and bool(re.search(r"\balignmt demo\b", block.text))
            body = shimmed(block, first_demo)
            if first_demo:
                body += f"cp runs/demo/results.json {shlex.quote(str(results))}\n"
                demo_seen = True
            if SERVERS.search(block.text):
                body += "stop_background\n"
            parts.append(head + body)
        parts.append(f'printf "\\n=== %s: %d s\\n" {block.where} "$SECONDS"\n')  # after any output
    return "".join(parts)


def run() -> int:
    """Clone HEAD into a temporary folder and run the blocks there; then compare the demo's
    numbers with the pages'. Returns the exit status."""
    work = Path(tempfile.mkdtemp(prefix="alignmt-reader-"))
    clone, results = work / "alignmt", work / "demo-results.json"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    text = script(all_blocks(), results)
    (work / "reader.sh").write_text(text)
    print(f"the blocks, shimmed, as one script: {work / 'reader.sh'}", flush=True)
    done = subprocess.run(["bash", str(work / "reader.sh")], cwd=clone)
    if done.returncode:
        return done.returncode
    return subprocess.call(
        [sys.executable, str(ROOT / "docs/demo_numbers.py"), "check", str(results)]
    )


def main(argv: list[str]) -> int:
    if argv == ["run"]:
        return run()
    if argv:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    for block in all_blocks():
        first = block.text.strip().splitlines()[0]
        print(f"{block.where:40} {block.kind:10} {first[:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
