"""Reliability drills with text from the wild: fuzzed corpora, and fuzzed input to translate.

`corpora(workdir, reps)` writes `reps` small corpora, seeded: a pair of line-aligned files
(`c.en` + `c.de`, each gzipped or not) or a TSV (`c.tsv` or `c.tsv.gz`, read either way
round, with or without an attribution column), each with a random mix of these faults and
the outcome each calls for:

    read as if the text were clean
        a UTF-8 byte order mark; CRLF line ends, on some lines or all; no final newline;
        an attribution column on every line of a TSV
    read, the line dropped and counted
        whitespace-only lines and TSV fields (Unicode spaces too): dropped as empty;
        a 1 MB line: kept by `corpus`, dropped by `prepare` as over data.max_tokens
    refused, the error naming the file and the line of the first fault the reader meets
        invalid UTF-8; a NUL byte; a carriage return that ends no line (neither a line end
        nor text: see `corpus.iter_lines`); a TSV line with no tab, or with more or fewer
        fields than the first; one file of a pair shorter than the other
    refused by `prepare`, the error naming the files
        files without a line (empty, a BOM alone, gzip of nothing), or without a pair
        left, or with a side SentencePiece cannot learn (zero-width spaces alone)

Each corpus is read by `corpus.read_parallel`/`read_tsv`, then by `prepare.prepare_text`
(Moses, char or SentencePiece tokens; the token cache on or off). It *holds* when both do
what its faults call for: refuse it with a CorpusError/ValueError whose message names the
file and line, or read it with the counts adding up, every line kept or dropped and
counted (in the `ReadReport`, and in `prepare`'s log), and with the kept pairs, and the
token ids `prepare` stores, those of the clean text. A corpus that held is deleted; one
that failed stays in `workdir` to look at.

`translations(run_dir, workdir, lines)` writes `lines` lines to translate: sentences of the
run's own words, empty and whitespace-only lines, CRLF on some lines, a BOM at the start,
invalid UTF-8, NUL bytes and lone CRs inside lines, lines longer than the run's
data.max_tokens (the longest it trained on), unknown words, random Unicode, and no final
newline. It runs `python -m alignmt translate RUN_DIR` on them once, which must exit with
status 0, write one output line per input line, and warn on stderr about each invalid line
by its number (and about no other). A line *holds* when its output line is right as far as
can be told without a reference: valid UTF-8 without a CR, empty where the input has no
token, and, for the marker lines (one in 20, the run's words), the translation that the
same `Translator` gives in this process, which an output out of order would not match.
No line holds if the command fails or writes a line too many or too few.

Both return {"tried": int, "held": int, "failures": [str, ...]}: how many were tried
(corpora; input lines), how many held, and a line on each failure (the first 20).
"""

from __future__ import annotations

import gzip
import logging
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import DataConfig
from alignmt.decoding.translator import Translator
from alignmt.text.corpus import CorpusError, read_parallel, read_tsv
from alignmt.text.prepare import Text, prepare_text
from alignmt.text.tokenize import SentencePieceTokenizer, Tokenizer, build_tokenizer
from alignmt.text.vocab import SPECIALS

MAX_FAILURES = 20  # failure lines kept in a result
BOM = b"\xef\xbb\xbf"
MAX_TOKENS = 200  # data.max_tokens for the corpora: only the 1 MB lines pass it
# Words with what tokenizers trip on: accents (composed and not), ligatures, scripts,
# emoji, apostrophes, and separators that are whitespace to Python but break no line.
WORDS = ("Hund", "läuft", "café", "e\u0301t\u00e9", "Straße", "ﬁn", "日本語", "😀", "Ὀδυσσεύς",
         "l'homme", "don't", "3,5", "«oui»", "x\u2028y", "a\x85b", "\u200b", ".", "?")  # fmt: skip
SPACES = (" ", "  ", "\u3000", "\xa0", "\x0b\x0c", "\u2028", "\x85", "\x1f", "\u2003 ")
INVALID = (b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe2\x82", b"\x80")


@dataclass
class Tally:
    """What a drill tried, how much held, and the first failures."""

    tried: int = 0
    held: int = 0
    failures: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        if len(self.failures) < MAX_FAILURES:
            self.failures.append(message)

    def result(self) -> dict:
        return {"tried": self.tried, "held": self.held, "failures": self.failures}


# --- Corpora ----------------------------------------------------------------------------


@dataclass
class Corpus:
    """A fuzzed corpus as written, and what it is made of."""

    paths: list[Path]  # [source file, target file], or [the TSV]
    texts: list[list[str]]  # per file, each line's text (a fault's bytes go in on writing)
    pairs: list[tuple[str, str] | None]  # each line's (source, target); None: a blank line
    faults: dict[tuple[int, int], str]  # (file, 0-based line) -> a fault to refuse
    columns: tuple[int, int] = (0, 1)  # the TSV's source and target columns
    attribution: bool = False  # a TSV's third column
    notes: list[str] = field(default_factory=list)  # the faults, for failure messages
    huge: bool = False  # a line of 1 MB

    @property
    def tsv(self) -> bool:
        return len(self.paths) == 1


def corpora(workdir: Path, reps: int, seed: int = 0) -> dict:
    """Write `reps` fuzzed corpora under `workdir` and check how alignmt reads each (see
    the module docstring). A corpus that held is deleted, one that failed is kept there."""
    rng, tally = random.Random(seed), Tally()
    for rep in range(reps):
        folder = Path(workdir) / f"corpus{rep:04d}"
        corpus = fuzzed_corpus(rng, folder)
        cfg = data_config(rng, corpus, Path(workdir) / "cache")
        problems = [problem for check in (check_read, check_prepared)
                    for problem in crash_proof(check, corpus, cfg)]  # fmt: skip
        tally.tried += 1
        tally.held += not problems
        for problem in problems:
            tally.fail(f"{folder.name} ({', '.join(corpus.notes) or 'clean'}): {problem}")
        if not problems:
            shutil.rmtree(folder)
    return tally.result()


def crash_proof(check: Callable[[Corpus, DataConfig], list[str]], corpus: Corpus,
                cfg: DataConfig) -> list[str]:  # fmt: skip
    """The problems `check` finds, or the exception it dies of as one: a drill reports
    what breaks and goes on to the next corpus."""
    try:
        return check(corpus, cfg)
    except Exception as error:  # anything but the refusals the checks expect is a failure
        return [f"{check.__name__}: {type(error).__name__}: {str(error)[:300]}"]


def fuzzed_corpus(rng: random.Random, folder: Path) -> Corpus:
    """A corpus of up to 30 lines with random faults (see the module docstring), written
    to `folder`."""
    tsv, n = rng.random() < 0.5, 0 if rng.random() < 0.06 else rng.randint(1, 30)
    pairs: list[tuple[str, str] | None] = [(sentence(rng), sentence(rng)) for _ in range(n)]
    notes = ["empty"] if n == 0 else []
    for i in range(n):
        if rng.random() < 0.12:
            pairs[i] = blank_sides(rng, pairs[i], tsv)
            notes.append(f"blank@{i + 1}")
    huge = n > 0 and rng.random() < 0.08
    if huge:
        i, side = rng.randrange(n), rng.randrange(2)
        pairs[i] = (megabyte(rng), sentence(rng)) if side == 0 else (sentence(rng), megabyte(rng))
        notes.append(f"1MB@{i + 1}")
    folder.mkdir(parents=True, exist_ok=True)
    if tsv:
        corpus = tsv_corpus(rng, folder, pairs, notes)
    else:
        texts = [[p[side] for p in pairs] for side in (0, 1)]
        corpus = Corpus(
            [folder / f"c.{lang}" for lang in ("en", "de")], texts, pairs, {}, notes=notes
        )
        shorten(rng, corpus)
    corpus.huge = huge
    plant_faults(rng, corpus)
    for f, path in enumerate(corpus.paths):
        corpus.paths[f] = write(rng, path, corpus, f)
    return corpus


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))


def megabyte(rng: random.Random) -> str:
    """1 MB of words and spaces."""
    line = sentence(rng) + " "
    return (line * (2**20 // len(line) + 1))[: 2**20].strip()


def blank_sides(rng: random.Random, pair: tuple[str, str], tsv: bool) -> tuple[str, str] | None:
    """A pair with one side or both whitespace-only; None for a TSV line that is all blank."""
    if tsv and rng.random() < 0.3:
        return None
    side = rng.randrange(3)  # 0: the source, 1: the target, 2: both
    spaces = [rng.choice(SPACES) if side in (s, 2) else pair[s] for s in (0, 1)]
    return spaces[0], spaces[1]


def tsv_corpus(
    rng: random.Random, folder: Path, pairs: list[tuple[str, str] | None], notes: list[str]
) -> Corpus:
    """A TSV of the pairs, maybe with an attribution column, read either way round."""
    attribution = rng.random() < 0.4
    texts = []
    for i, pair in enumerate(pairs):
        if pair is None:
            texts.append(rng.choice((*SPACES, "\t", " \t ")))  # a tab is no field on a blank line
        else:
            texts.append("\t".join(pair) + (f"\tCC-BY 2.0 #{i}" if attribution else ""))
    swap = rng.random() < 0.3
    notes += ["attribution"] * attribution + ["swapped"] * swap
    return Corpus([folder / "c.tsv"], [texts], pairs, {}, columns=(int(swap), int(not swap)),
                  attribution=attribution, notes=notes)  # fmt: skip


def shorten(rng: random.Random, corpus: Corpus) -> None:
    """Cut a few lines off the end of one file of a pair, now and then."""
    n = len(corpus.pairs)
    if n and rng.random() < 0.12:
        side, cut = rng.randrange(2), rng.randint(1, min(3, n))
        corpus.texts[side] = corpus.texts[side][: n - cut]
        corpus.notes.append(f"{corpus.paths[side].name} {cut} short")


def plant_faults(rng: random.Random, corpus: Corpus) -> None:
    """Plant none, one or two faults that must be refused, each on its own line."""
    for _ in range(rng.choices((0, 1, 2), weights=(55, 30, 15))[0]):
        kinds = ["invalid", "nul", "cr"]
        if corpus.tsv:
            kinds += ["no tab", "extra field", "missing field"]
        kind = rng.choice(kinds)
        f = rng.randrange(len(corpus.paths))
        lines = fault_lines(corpus, f, kind)
        if lines:
            i = rng.choice(lines)
            corpus.faults[(f, i)] = kind
            corpus.texts[f][i] = column_fault(corpus.texts[f][i], kind)
            corpus.notes.append(f"{kind}@{corpus.paths[f].name}:{i + 1}")


def fault_lines(corpus: Corpus, f: int, kind: str) -> list[int]:
    """Lines of file `f` that may take a fault of `kind`: any line without one for a byte
    fault; for a column fault, a line after the first non-blank one (whose width the reader
    holds the others to) that the fault leaves non-blank (a blank line has no width)."""
    texts = corpus.texts[f]
    free = [i for i in range(len(texts)) if (f, i) not in corpus.faults]
    if kind in ("invalid", "nul", "cr"):
        return free
    if kind == "missing field" and not corpus.attribution:
        return []
    filled = [i for i in free if texts[i].strip() and column_fault(texts[i], kind).strip()]
    return [i for i in filled if any(texts[j].strip() for j in range(i))]


def column_fault(text: str, kind: str) -> str:
    """`text` with a TSV fault of `kind`: no tab, a tab inside a sentence, or the
    attribution missing; other kinds leave it (they are planted in its bytes)."""
    if kind == "no tab":
        return text.replace("\t", " ")
    if kind == "extra field":
        return text.replace(" ", "\t", 1) if " " in text else text + "\tx"
    if kind == "missing field":
        return text.rsplit("\t", 1)[0]
    return text


def write(rng: random.Random, path: Path, corpus: Corpus, f: int) -> Path:
    """Write file `f` of the corpus at `path`, or gzipped beside it; returns where: a BOM
    now and then, LF or CRLF ends (some lines or all), maybe no final newline."""
    ends = rng.choice(((b"\n",), (b"\r\n",), (b"\n", b"\r\n")))
    data = [BOM if rng.random() < 0.25 else b""]
    notes = corpus.notes
    if data[0]:
        notes.append(f"BOM {path.name}")
    if b"\r\n" in ends:
        notes.append(f"CRLF {path.name}")
    texts = corpus.texts[f]
    for i, text in enumerate(texts):
        data += [line_bytes(rng, text, corpus.faults.get((f, i))), rng.choice(ends)]
    if texts and data[-2] and rng.random() < 0.3:  # a line without its newline must hold bytes
        data[-1] = b""
        notes.append(f"no final newline {path.name}")
    if rng.random() < 0.4:
        path = path.with_name(path.name + ".gz")
        notes.append(f"gzip {path.name}")
        with gzip.GzipFile(path, "wb", mtime=0) as file:
            file.write(b"".join(data))
    else:
        path.write_bytes(b"".join(data))
    return path


def line_bytes(rng: random.Random, text: str, fault: str | None) -> bytes:
    """`text` in UTF-8, with the bytes of a fault inserted between two characters."""
    bad = {"invalid": rng.choice(INVALID), "nul": b"\0", "cr": b"\r"}.get(fault)
    if bad is None:
        return text.encode()
    if fault == "cr":  # a character must follow, or it would end the line as CRLF does
        text = text or "x"
        at = rng.randrange(len(text))
    else:
        at = rng.randint(0, len(text))
    return text[:at].encode() + bad + text[at:].encode()


def data_config(rng: random.Random, corpus: Corpus, cache_dir: Path) -> DataConfig:
    """How `prepare` reads the corpus: a 1 MB line is cut into characters, which takes a
    fraction of a second where Moses takes seconds; SentencePiece trains on the pairs."""
    kinds = ("char",) if corpus.huge else ("moses", "moses", "char", "sentencepiece")
    tokenizer = rng.choice(kinds)
    ratio = 0.0 if tokenizer == "sentencepiece" or rng.random() < 0.6 else 2.5
    path = corpus.paths[0]
    train = str(path) if corpus.tsv else str(path).removesuffix(".gz").removesuffix(".en")
    return DataConfig(task="corpus", train=train, tokenizer=tokenizer, max_tokens=MAX_TOKENS,
                      max_len_ratio=ratio, tsv_swap=corpus.columns[0] == 1, spm_vocab_size=100,
                      cache=rng.random() < 0.5, cache_dir=str(cache_dir), workers=1)  # fmt: skip


def expected_error(corpus: Corpus) -> list[str] | None:
    """What the refusal of the corpus must name, or None if it must be read: the file and
    line of the first fault the reader meets, or both files and the first unpartnered line
    of a pair whose line counts differ."""
    counts = [len(texts) for texts in corpus.texts]
    for f, i in reading_order(counts):
        if (f, i) in corpus.faults:
            return [f"{corpus.paths[f]}:{i + 1}:"]
    if len(set(counts)) > 1:
        longer = corpus.paths[counts.index(max(counts))]
        return [*map(str, corpus.paths), f"line {min(counts) + 1} of {longer}"]
    return None


def reading_order(counts: list[int]) -> list[tuple[int, int]]:
    """(file, 0-based line) in the order the reader decodes them: a TSV's lines in turn; a
    pair's files a line each in turn until one ends, then the rest of the longer one (which
    `corpus` reads to count its lines for the message)."""
    short = min(counts)
    both = [(f, i) for i in range(short + 1) for f in range(len(counts)) if i < counts[f]]
    return both + [(f, i) for f in range(len(counts)) for i in range(short + 1, counts[f])]


def kept_pairs(corpus: Corpus) -> tuple[list[tuple[int, str, str]], list[int]]:
    """The (line, source, target) a correct reader keeps, stripped, and the lines it drops
    as empty."""
    kept, empty = [], []
    for line, pair in enumerate(corpus.pairs, 1):
        src, tgt = ("", "") if pair is None else (pair[corpus.columns[0]].strip(),
                                                  pair[corpus.columns[1]].strip())  # fmt: skip
        if src and tgt:
            kept.append((line, src, tgt))
        else:
            empty.append(line)
    return kept, empty


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
        tokenizers = [build_tokenizer(cfg.tokenizer, lang=lang, lowercase=False)
                      for lang in (cfg.src_lang, cfg.tgt_lang)]  # fmt: skip
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
    expected = [tuple(v.encode(t) for v, t in zip(vocabs, pair, strict=True))
                for pair in left["pairs"]]  # fmt: skip
    stored = [tuple(pair) for pair in text.train.pairs(range(len(text.train)))]
    if stored != expected:
        problems.append(f"prepare: {len(stored)} pairs of ids stored, not the "
                        f"{len(expected)} of the clean text")  # fmt: skip
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


# --- Translations -----------------------------------------------------------------------


@dataclass
class Fuzzed:
    """Input lines to translate, as written and as `translate` must read them."""

    raw: list[bytes]  # each line, terminator included; the first starts with a BOM
    kinds: list[str]  # what each line is ("marker", "invalid", ...)

    def content(self, i: int) -> bytes:
        """Line i without its terminator (\\n or \\r\\n), or the first line's BOM."""
        raw = self.raw[i].removeprefix(BOM) if i == 0 else self.raw[i]
        return raw.removesuffix(b"\n").removesuffix(b"\r")

    def text(self, i: int) -> str:
        """Line i as `translate` must read it: bad bytes as U+FFFD."""
        return self.content(i).decode("utf-8", "replace")

    def invalid(self, i: int) -> bool:
        """Whether line i is not UTF-8 (and must be warned about)."""
        try:
            self.content(i).decode("utf-8")
        except UnicodeDecodeError:
            return True
        return False


def translations(run_dir: Path, workdir: Path, lines: int, seed: int = 0) -> dict:
    """Translate `lines` fuzzed lines with `alignmt translate RUN_DIR` and check the output
    line by line (see the module docstring)."""
    rng, tally = random.Random(seed), Tally(tried=lines)
    ckpt = load_checkpoint(run_dir)
    translator = Translator.from_checkpoint(ckpt)
    words = translator.src_vocab.itos[len(SPECIALS) :]
    fuzzed = fuzzed_input(rng, lines, words, ckpt.config.data.max_tokens)
    path = Path(workdir) / "translate_input.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(fuzzed.raw))
    with path.open("rb") as stdin:
        run = subprocess.run([sys.executable, "-m", "alignmt", "translate", str(run_dir)],
                             stdin=stdin, capture_output=True, timeout=120 + lines)  # fmt: skip
    outputs = output_lines(run, lines, tally)
    if outputs is None:
        return tally.result()
    stderr = run.stderr.decode("utf-8", "replace")
    warned = {int(n) for n in re.findall(r"stdin:(\d+): invalid UTF-8", stderr)}
    expected = expected_outputs(translator, fuzzed)
    for i, output in enumerate(outputs):
        problem = line_problem(output, expected[i], fuzzed.invalid(i), i + 1 in warned)
        tally.held += problem is None
        if problem:
            tally.fail(f"line {i + 1} ({fuzzed.kinds[i]}, {fuzzed.raw[i][:60]!r}): {problem}")
    return tally.result()


# The kinds of input line, and how often each comes.
KINDS = {"marker": 5, "sentence": 25, "empty": 8, "spaces": 7, "unknown": 10, "unicode": 10,
         "nul": 5, "cr": 5, "invalid": 8, "long": 1}  # fmt: skip


def fuzzed_input(rng: random.Random, lines: int, words: list[str], max_tokens: int) -> Fuzzed:
    """`lines` lines of the kinds in KINDS, CRLF on a fifth, a BOM first, and the last one
    without its newline half the time (when it has bytes to be a line without it)."""
    kinds = rng.choices(list(KINDS), weights=list(KINDS.values()), k=lines)
    raw = [input_line(rng, kind, words, max_tokens) + (b"\r\n" if rng.random() < 0.2 else b"\n")
           for kind in kinds]  # fmt: skip
    if raw:
        raw[0] = BOM + raw[0]
        last = raw[-1].removesuffix(b"\n")
        if last.removeprefix(BOM) and rng.random() < 0.5:
            raw[-1] = last
    return Fuzzed(raw, kinds)


def input_line(rng: random.Random, kind: str, words: list[str], max_tokens: int) -> bytes:
    """One line of `kind`, without its terminator."""
    known = " ".join(rng.choice(words) for _ in range(rng.randint(1, 10)))
    if kind in ("marker", "sentence"):
        return known.encode()
    if kind == "long":  # every word is a token at least
        return " ".join(rng.choice(words) for _ in range(max_tokens + rng.randint(1, 60))).encode()
    if kind == "empty":
        return b""
    if kind == "spaces":
        return "".join(rng.choice((*SPACES, "\t")) for _ in range(rng.randint(1, 4))).encode()
    if kind == "unknown":
        letters = "qxzjkvwy"
        return " ".join("".join(rng.choices(letters, k=rng.randint(6, 12)))
                        for _ in range(rng.randint(1, 6))).encode()  # fmt: skip
    if kind == "unicode":
        return random_unicode(rng).encode()
    if kind == "cr":
        return line_bytes(rng, known, "cr")
    return line_bytes(rng, known, kind)  # "nul" or "invalid"


def random_unicode(rng: random.Random) -> str:
    """Up to 30 code points from all planes, no surrogates and no newline."""
    chars, n = [], rng.randint(1, 30)
    while len(chars) < n:
        low, high = rng.choice(((0, 0x7F), (0x80, 0x2FFF), (0x3000, 0xFFFF), (0x10000, 0x10FFFF)))
        point = rng.randint(low, high)
        if point != 0x0A and not 0xD800 <= point <= 0xDFFF:
            chars.append(chr(point))
    return "".join(chars)


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
    for i, hyps in zip(markers, translator.translate([texts[i] for i in markers], warn=False),
                       strict=True):  # fmt: skip
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
