"""Reliability drills with text from the wild: fuzzed corpora, and fuzzed input to translate
(drill_texts.py writes both, and says what each calls for).

`corpora(workdir, reps)` writes `reps` small corpora, seeded, each with a random mix of
faults (`drill_texts.fuzzed_corpus`). Each corpus is read by `corpus.read_parallel`/
`read_tsv`, then by `prepare.prepare_text` (Moses, char or SentencePiece tokens; the token
cache on or off). It *holds* when both do what its faults call for: refuse it with a
CorpusError/ValueError whose message names the file and line, or read it with the counts
adding up, every line kept or dropped and counted (in the `ReadReport`, and in `prepare`'s
log), and with the kept pairs, and the token ids `prepare` stores, those of the clean text.
A corpus that held is deleted; one that failed stays in `workdir` to look at.

`translations(run_dir, workdir, lines)` writes `lines` fuzzed lines to translate
(`drill_texts.fuzzed_input`) and runs `python -m alignmt translate RUN_DIR` on them once,
which must exit with status 0, write one output line per input line, and warn on stderr
about each invalid line by its number (and about no other). A line *holds* when its output
line is right as far as can be told without a reference: valid UTF-8 without a CR, empty
where the input has no token, and, for the marker lines (one in 20, the run's words), the
translation that the same `Translator` gives in this process, which an output out of order
would not match. No line holds if the command fails or writes a line too many or too few.

Both return a `drill_common.Tally` result: how many were tried (corpora; input lines), how
many held, and a line on each failure.
"""

from __future__ import annotations

import logging
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from benchmarks.drill_common import Tally
from benchmarks.drill_texts import (
    Corpus,
    Fuzzed,
    data_config,
    expected_error,
    fuzzed_corpus,
    fuzzed_input,
    kept_pairs,
)

from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import DataConfig
from alignmt.decoding.door import open_translator
from alignmt.decoding.translator import Translator
from alignmt.text.corpus import CorpusError, read_parallel, read_tsv
from alignmt.text.prepare import Text, prepare_text
from alignmt.text.tokenize import SentencePieceTokenizer, Tokenizer, build_tokenizer
from alignmt.text.vocab import SPECIALS

# --- Corpora ----------------------------------------------------------------------------------


def corpora(workdir: Path, reps: int, seed: int = 0) -> dict:
    """Write `reps` fuzzed corpora under `workdir` and check how alignmt reads each (see
    the module docstring). A corpus that held is deleted, one that failed is kept there."""
    rng, tally = random.Random(seed), Tally()
    for rep in range(reps):
        folder = Path(workdir) / f"corpus{rep:04d}"
        corpus = fuzzed_corpus(rng, folder)
        cfg = data_config(rng, corpus, Path(workdir) / "cache")
        problems = [
            problem
            for check in (check_read, check_prepared)
            for problem in crash_proof(check, corpus, cfg)
        ]
        tally.add(problems, f"{folder.name} ({', '.join(corpus.notes) or 'clean'})")
        if not problems:
            shutil.rmtree(folder)
    return tally.result()


def crash_proof(
    check: Callable[[Corpus, DataConfig], list[str]], corpus: Corpus, cfg: DataConfig
) -> list[str]:
    """The problems `check` finds, or the exception it dies of as one: a drill reports
    what breaks and goes on to the next corpus."""
    try:
        return check(corpus, cfg)
    except Exception as error:  # anything but the refusals the checks expect is a failure
        return [f"{check.__name__}: {type(error).__name__}: {str(error)[:300]}"]


def check_read(corpus: Corpus, cfg: DataConfig) -> list[str]:
    """What `corpus.read_parallel`/`read_tsv` got wrong about the corpus (`cfg` is
    `prepare`'s)."""
    expected = expected_error(corpus)
    try:
        with logged("alignmt.text.corpus") as messages:
            if corpus.tsv:
                src, tgt = corpus.columns
                pairs, report = read_tsv(corpus.paths[0], src_column=src, tgt_column=tgt)
            else:
                pairs, report = read_parallel(*corpus.paths)
    except (CorpusError, ValueError) as error:
        if expected:
            return refusal_problems("corpus", expected, error)
        return [f"corpus: refused a corpus it should read: {str(error)[:300]}"]
    if expected:
        return [f"corpus: read it, but should have refused it naming {expected}"]
    kept, empty = kept_pairs(corpus)
    origin = corpus.paths[0]
    problems = []
    if [(p.src, p.tgt, p.where) for p in pairs] != [(s, t, f"{origin}:{n}") for n, s, t in kept]:
        problems.append(f"corpus: pairs differ from the clean text's ({len(pairs)} read)")
    counts = (report.read, report.kept, report.empty)
    if counts != (len(corpus.pairs), len(kept), [f"{origin}:{n}" for n in empty]):
        expected = f"{len(corpus.pairs)} lines, {len(kept)} kept, {len(empty)} empty"
        problems.append(f"corpus: report {counts[:2]} + {len(counts[2])} empty, not {expected}")
    if empty and report.summary() not in messages:
        problems.append("corpus: the dropped lines are not logged")
    return problems


def refusal_problems(reader: str, expected: list[str], error: Exception) -> list[str]:
    """What is wrong with `reader` refusing a corpus with `error`, when its message must
    name each of `expected`."""
    missing = [name for name in expected if name not in str(error)]
    return [f"{reader}: the error does not name {missing}: {str(error)[:300]}"] if missing else []


def check_prepared(corpus: Corpus, cfg: DataConfig) -> list[str]:
    """What `prepare.prepare_text` got wrong about the corpus."""
    expected = expected_error(corpus)
    try:
        with logged("alignmt.text.prepare") as messages:
            text = prepare_text(cfg, seed=0, progress=False)
    except (CorpusError, ValueError) as error:
        if expected:
            return refusal_problems("prepare", expected, error)
        if isinstance(error, CorpusError):
            return [f"prepare: refused a corpus it should read: {str(error)[:300]}"]
        return nothing_left_problems(corpus, cfg, error)
    if expected:
        return [f"prepare: read it, but should have refused it naming {expected}"]
    return prepared_problems(corpus, cfg, text, "\n".join(messages))


def nothing_left_problems(corpus: Corpus, cfg: DataConfig, error: ValueError) -> list[str]:
    """What is wrong with `prepare` refusing a corpus it reads, for leaving no pair to
    train on: right only when none is left, and with an error that names the files."""
    if cfg.tokenizer == "sentencepiece":  # no pair is long here; can it learn each side?
        kept = kept_pairs(corpus)[0]
        left = bool(kept) and all(learnable([pair[side] for pair in kept], cfg) for side in (1, 2))
    else:
        tokenizers = [
            build_tokenizer(cfg.tokenizer, lang=lang, lowercase=False)
            for lang in (cfg.src_lang, cfg.tgt_lang)
        ]
        left = bool(survivors(corpus, cfg, tokenizers)["pairs"])
    if left:
        return [f"prepare: refused a corpus with pairs to train on: {str(error)[:300]}"]
    return refusal_problems("prepare", [str(path) for path in corpus.paths], error)


def learnable(sentences: list[str], cfg: DataConfig) -> bool:
    """Whether SentencePiece trains on `sentences` (it fails on some, such as zero-width
    spaces alone, which it normalises away)."""
    try:
        SentencePieceTokenizer.train(sentences, vocab_size=cfg.spm_vocab_size)
    except RuntimeError:
        return False
    return True


def survivors(corpus: Corpus, cfg: DataConfig, tokenizers: Sequence[Tokenizer]) -> dict:
    """The tokens of the kept pairs within data.max_tokens and data.max_len_ratio, and how
    many pairs each of the two drops."""
    result = dict(pairs=[], long=0, ratio=0)
    for _, src, tgt in kept_pairs(corpus)[0]:
        tokens = (tokenizers[0].encode(src), tokenizers[1].encode(tgt))
        longest, shortest = max(map(len, tokens)), min(map(len, tokens))
        if longest > cfg.max_tokens:
            result["long"] += 1
        elif cfg.max_len_ratio and longest > cfg.max_len_ratio * shortest:
            result["ratio"] += 1
        else:
            result["pairs"].append(tokens)
    return result


def prepared_problems(corpus: Corpus, cfg: DataConfig, text: Text, log: str) -> list[str]:
    """What is wrong in the ids and the log of a corpus `prepare` read."""
    kept, empty = kept_pairs(corpus)
    left = survivors(corpus, cfg, text.tokenizers)
    problems = []
    counts = f": {len(corpus.pairs)} lines, {len(kept)} kept, {len(empty)} dropped as empty"
    if counts not in log:
        problems.append(f"prepare: the log does not say '{counts[2:]}'")
    named = [f"{corpus.paths[0]}:{line}" for line in empty[:3]]
    if not all(name in log for name in named):
        problems.append(f"prepare: the log does not name the empty lines {named}")
    for kind, rule in (("long", "longer than"), ("ratio", "with one side over")):
        said = f"dropped {left[kind]} of {len(kept)} pairs {rule}" in log
        if said != bool(left[kind]):
            problems.append(f"prepare: {left[kind]} pairs are {kind}; the log says otherwise")
    vocabs = (text.src_vocab, text.tgt_vocab)
    expected = [
        tuple(v.encode(t) for v, t in zip(vocabs, pair, strict=True)) for pair in left["pairs"]
    ]
    stored = [tuple(pair) for pair in text.train.pairs(range(len(text.train)))]
    if stored != expected:
        problems.append(
            f"prepare: {len(stored)} pairs of ids stored, not the {len(expected)} of the clean text"
        )
    return problems


@contextmanager
def logged(name: str) -> Iterator[list[str]]:
    """The messages that logger `name` logs at INFO and above, while inside."""
    messages: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger(name)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# --- Input to translate -----------------------------------------------------------------------


def translations(run_dir: Path, workdir: Path, lines: int, seed: int = 0) -> dict:
    """Translate `lines` fuzzed lines with `alignmt translate RUN_DIR` and check the output
    line by line (see the module docstring)."""
    rng, tally = random.Random(seed), Tally()
    ckpt = load_checkpoint(run_dir)
    translator = open_translator(ckpt)
    words = translator.src_vocab.itos[len(SPECIALS) :]
    fuzzed = fuzzed_input(rng, lines, words, ckpt.config.data.max_tokens)
    path = Path(workdir) / "translate_input.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(fuzzed.raw))
    with path.open("rb") as stdin:
        run = subprocess.run(
            [sys.executable, "-m", "alignmt", "translate", str(run_dir)],
            stdin=stdin,
            capture_output=True,
            timeout=120 + lines,
        )
    outputs = output_lines(run, lines, tally)
    if outputs is None:  # not a line held
        tally.tried = lines
        return tally.result()
    stderr = run.stderr.decode("utf-8", "replace")
    warned = {int(n) for n in re.findall(r"stdin:(\d+): invalid UTF-8", stderr)}
    expected = expected_outputs(translator, fuzzed)
    for i, output in enumerate(outputs):
        problem = line_problem(output, expected[i], fuzzed.invalid(i), i + 1 in warned)
        what = f"line {i + 1} ({fuzzed.kinds[i]}, {fuzzed.raw[i][:60]!r})"
        tally.add([problem] if problem else [], what)
    return tally.result()


def output_lines(run: subprocess.CompletedProcess, lines: int, tally: Tally) -> list[bytes] | None:
    """The output's lines, or None (and the failure in the tally) if the run failed or
    wrote a line too many or too few."""
    if run.returncode != 0:
        tail = run.stderr.decode("utf-8", "replace")[-500:]
        tally.fail(f"translate exited with status {run.returncode}: {tail}")
        return None
    out = run.stdout
    newlines = out.count(b"\n")
    if newlines != lines or (out and not out.endswith(b"\n")):
        tally.fail(
            f"{newlines} newlines out for {lines} input lines; the output ends {out[-40:]!r}"
        )
        return None
    return out.split(b"\n")[:-1]


def expected_outputs(translator: Translator, fuzzed: Fuzzed) -> list[str | None]:
    """Each line's output where it is known: "" for a line without tokens, the in-process
    translation of a marker line; None for the rest."""
    texts = [fuzzed.text(i) for i in range(len(fuzzed.raw))]
    expected: list[str | None] = [
        "" if not translator.source_tokens(text) else None for text in texts
    ]
    markers = [i for i, kind in enumerate(fuzzed.kinds) if kind == "marker"]
    translated = translator.translate([texts[i] for i in markers], warn=False)
    for i, hyps in zip(markers, translated, strict=True):
        expected[i] = hyps[0].text
    return expected


def line_problem(output: bytes, expected: str | None, invalid: bool, warned: bool) -> str | None:
    """What is wrong with one output line, or None."""
    try:
        text = output.decode("utf-8")
    except UnicodeDecodeError:
        return f"the output {output[:60]!r} is not UTF-8"
    if "\r" in text:
        return f"the output {text[:60]!r} holds a CR"
    if expected is not None and text != expected:
        return f"the output is {text[:60]!r}, expected {expected[:60]!r}"
    if invalid != warned:
        return "invalid UTF-8 with no warning naming it" if invalid else "a warning names it"
    return None
