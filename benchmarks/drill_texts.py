"""Fuzzed text for the input drills (drill_inputs.py): corpora written with faults, and
lines for `alignmt translate`, each with what a correct reader makes of it.

`fuzzed_corpus` writes a small corpus: a pair of line-aligned files (`c.en` + `c.de`, each
gzipped or not) or a TSV (`c.tsv` or `c.tsv.gz`, read either way round, with or without an
attribution column), with a random mix of these faults and the outcome each calls for:

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

`expected_error` and `kept_pairs` say which outcome a corpus calls for, and `data_config`
how `prepare` is to read it.

`fuzzed_input` writes lines to translate (`KINDS`): sentences of the run's own words, empty
and whitespace-only lines, CRLF on some lines, a BOM at the start, invalid UTF-8, NUL bytes
and lone CRs inside lines, lines longer than the run's data.max_tokens, unknown words,
random Unicode, and no final newline.
"""

from __future__ import annotations

import gzip
import random
from dataclasses import dataclass, field
from pathlib import Path

from alignmt.config import DataConfig

BOM = b"\xef\xbb\xbf"
MAX_TOKENS = 200  # data.max_tokens for the corpora: only the 1 MB lines pass it
# Words with what tokenizers trip on: accents (composed and not), ligatures, scripts,
# emoji, apostrophes, and separators that are whitespace to Python but break no line.
WORDS = (
    "Hund",
    "läuft",
    "café",
    "e\u0301t\u00e9",
    "Straße",
    "ﬁn",
    "日本語",
    "😀",
    "Ὀδυσσεύς",
    "l'homme",
    "don't",
    "3,5",
    "«oui»",
    "x\u2028y",
    "a\x85b",
    "\u200b",
    ".",
    "?",
)
SPACES = (" ", "  ", "\u3000", "\xa0", "\x0b\x0c", "\u2028", "\x85", "\x1f", "\u2003 ")
INVALID = (b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe2\x82", b"\x80")


# --- Corpora ----------------------------------------------------------------------------------


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
        paths = [folder / f"c.{lang}" for lang in ("en", "de")]
        corpus = Corpus(paths, texts, pairs, {}, notes=notes)
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
    columns = (int(swap), int(not swap))
    return Corpus([folder / "c.tsv"], [texts], pairs, {}, columns, attribution, notes)


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
    return DataConfig(
        task="corpus",
        train=train,
        tokenizer=tokenizer,
        max_tokens=MAX_TOKENS,
        max_len_ratio=ratio,
        tsv_swap=corpus.columns[0] == 1,
        spm_vocab_size=100,
        cache=rng.random() < 0.5,
        cache_dir=str(cache_dir),
        workers=1,
    )


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
        src, tgt = ("", "") if pair is None else (pair[corpus.columns[0]], pair[corpus.columns[1]])
        src, tgt = src.strip(), tgt.strip()
        if src and tgt:
            kept.append((line, src, tgt))
        else:
            empty.append(line)
    return kept, empty


# --- Input to translate -----------------------------------------------------------------------


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


# The kinds of input line, and how often each comes.
KINDS = {
    "marker": 5,
    "sentence": 25,
    "empty": 8,
    "spaces": 7,
    "unknown": 10,
    "unicode": 10,
    "nul": 5,
    "cr": 5,
    "invalid": 8,
    "long": 1,
}


def fuzzed_input(rng: random.Random, lines: int, words: list[str], max_tokens: int) -> Fuzzed:
    """`lines` lines of the kinds in KINDS, CRLF on a fifth, a BOM first, and the last one
    without its newline half the time (when it has bytes to be a line without it)."""
    kinds = rng.choices(list(KINDS), weights=list(KINDS.values()), k=lines)
    raw = [
        input_line(rng, kind, words, max_tokens) + (b"\r\n" if rng.random() < 0.2 else b"\n")
        for kind in kinds
    ]
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
        return " ".join(
            "".join(rng.choices(letters, k=rng.randint(6, 12))) for _ in range(rng.randint(1, 6))
        ).encode()
    if kind == "unicode":
        return random_unicode(rng).encode()
    return line_bytes(rng, known, kind)  # "nul", "cr" or "invalid"


def random_unicode(rng: random.Random) -> str:
    """Up to 30 code points from all planes, no surrogates and no newline."""
    chars, n = [], rng.randint(1, 30)
    while len(chars) < n:
        low, high = rng.choice(((0, 0x7F), (0x80, 0x2FFF), (0x3000, 0xFFFF), (0x10000, 0x10FFFF)))
        point = rng.randint(low, high)
        if point != 0x0A and not 0xD800 <= point <= 0xDFFF:
            chars.append(chr(point))
    return "".join(chars)
