"""The corpora alignmt can get by name: where each file is published, the bytes it must have,
and where the data folder keeps it.

A config names a corpus part, `multi30k:train`, instead of a path; `locate` turns the name
into the path the readers take (`<data folder>/multi30k/train`, whose `.en.gz` and `.de.gz`
are the files), and says which command gets the corpus when it is not there. Getting the
files is `download`'s. Every file's size and SHA-256 are pinned here, so a download, a copy
from a mirror and a later read all check the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from alignmt.text.corpus import CorpusError


@dataclass(frozen=True)
class Excerpt:
    """A pinned file that is not published as such: the first `lines` lines of `member` in
    the archive `archive`, downloaded from the file's URL."""

    archive: str  # the archive's file name, as a mirror may hold it
    member: str  # the file inside the archive, matched by its last path component
    lines: int


@dataclass(frozen=True)
class Pinned:
    """One file of a corpus: its name in the corpus folder, where it comes from, and the
    size and SHA-256 its bytes must have."""

    name: str
    url: str
    size: int
    sha256: str
    default: bool = True  # got by `alignmt data get NAME`; the others need --all
    excerpt: Excerpt | None = None


@dataclass(frozen=True)
class Corpus:
    name: str
    title: str
    licence: str
    cite: str
    files: tuple[Pinned, ...]

    def parts(self) -> dict[str, list[Pinned]]:
        """The files by the part a config names: `train` for train.en.gz and train.de.gz,
        `eng-fra` for eng-fra.tsv."""
        parts: dict[str, list[Pinned]] = {}
        for file in self.files:
            parts.setdefault(_part(file.name), []).append(file)
        return parts

    def wanted(self, every: bool) -> list[Pinned]:
        return [f for f in self.files if every or f.default]


def _part(name: str) -> str:
    """train.en.gz -> train; eng-fra.tsv -> eng-fra."""
    return name.split(".")[0]


def lang(name: str) -> str:
    """train.en.gz -> en."""
    return name.split(".")[1]


# --- The catalogue --------------------------------------------------------------------------

# The publishers' repository at the commit that last changed the raw files: a URL that always
# serves the bytes pinned here.
_MULTI30K = (
    "https://raw.githubusercontent.com/multi30k/dataset/"
    "c40b37b23d6387214f8ab37335b5a8672b9745f2/data/task1/raw/"
)
# file, bytes, SHA-256; the English and German train, val and test_2016_flickr files are the
# default, the files the shipped configs read.
_MULTI30K_FILES = """
train.en.gz              568929 d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f
train.de.gz              637044 726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6
train.fr.gz              604242 622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c
train.cs.gz              593827 a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077
val.en.gz                 21650 14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28
val.de.gz                 24681 f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a
val.fr.gz                 23001 ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9
val.cs.gz                 22096 b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc
test_2016_flickr.en.gz    21077 611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9
test_2016_flickr.de.gz    22890 9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8
test_2016_flickr.fr.gz    22310 6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90
test_2016_flickr.cs.gz    22572 200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1
test_2017_flickr.en.gz    19138 76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074
test_2017_flickr.de.gz    21471 a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee
test_2017_flickr.fr.gz    20434 3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496
test_2017_mscoco.en.gz     8844 aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58
test_2017_mscoco.de.gz    10230 799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338
test_2017_mscoco.fr.gz     9751 754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0
test_2018_flickr.en.gz    23514 ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d
test_2018_flickr.de.gz    26461 ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608
test_2018_flickr.fr.gz    25321 fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501
test_2018_flickr.cs.gz    25181 7d0a9db904f94c554a8c58049a9f3a5357c27f46cc3d710d70cb0b4a2585b8c2
"""
_CONFIG_PARTS = {"train", "val", "test_2016_flickr"}

MULTI30K = Corpus(
    name="multi30k",
    title="Multi30k task 1: image descriptions translated, English with German, French, Czech",
    licence="for non-commercial research and education (Flickr30K's terms; see the "
    "publishers' README)",
    cite="Elliott et al. 2016, Multi30K: Multilingual English-German Image Descriptions "
    "(en, de); Elliott et al. 2017, WMT (fr, the 2017 tests); Barrault et al. 2018, WMT (cs)",
    files=tuple(
        Pinned(
            name,
            _MULTI30K + name,
            int(size),
            sha,
            default=_part(name) in _CONFIG_PARTS and lang(name) in ("en", "de"),
        )
        for name, size, sha in (row.split() for row in _MULTI30K_FILES.strip().splitlines())
    ),
)

# Tatoeba's sentence pairs as manythings.org publishes them for Anki, a pair a line with the
# attribution CC-BY asks for (english<TAB>french<TAB>attribution). Chosen over the d2l
# book's copy of the same archive, a 2019 snapshot with the attributions cut off. The archive
# is revised as Tatoeba grows, so the pin is on the first 5,000 pairs the configs read.
TATOEBA = Corpus(
    name="tatoeba",
    title="Tatoeba English-French: the first 5,000 of manythings.org's pairs",
    licence="CC-BY 2.0 France; each pair's line names its sentences' authors",
    cite="Tatoeba (tatoeba.org), via www.manythings.org/anki",
    files=(
        Pinned(
            "eng-fra.tsv",
            "https://www.manythings.org/anki/fra-eng.zip",
            562864,
            "d952b56a181da5270b7bb4ded3f3bbe61e67a9b1de0e0fbc1d46438c71fb55a7",
            excerpt=Excerpt("fra-eng.zip", "fra.txt", 5000),
        ),
    ),
)

CATALOGUE = {corpus.name: corpus for corpus in (MULTI30K, TATOEBA)}


# --- Where the files are kept, and a config's name for them ---------------------------------


def data_root() -> Path:
    """The data folder: $ALIGNMT_DATA, else `data` in the platform's user cache folder
    (~/.cache/alignmt/data on Linux)."""
    if os.environ.get("ALIGNMT_DATA"):
        return Path(os.environ["ALIGNMT_DATA"]).expanduser()
    return Path(platformdirs.user_cache_dir("alignmt")) / "data"


def named(spec: str) -> Corpus | None:
    """The catalogue's corpus when `spec` is NAME:PART, else None (a path)."""
    name, colon, _ = spec.partition(":")
    return CATALOGUE.get(name) if colon else None


def find(name: str) -> Corpus:
    if name not in CATALOGUE:
        raise CorpusError(f"unknown corpus {name!r}; alignmt knows {', '.join(CATALOGUE)}")
    return CATALOGUE[name]


def missing_files(corpus: Corpus, files: Sequence[Pinned], root: Path) -> list[Pinned]:
    """Those of `files` that the data folder does not hold (a file is there only once it
    has been checked and renamed into place)."""
    return [f for f in files if not (root / corpus.name / f.name).is_file()]


def locate(spec: str, langs: Sequence[str] | None, what: str) -> str:
    """The path a reader takes for the corpus part `spec` (NAME:PART), its files checked to
    be in the data folder (those for `langs`; with None, those `get` fetches by default);
    refused, naming the command that gets them.

    Returns `<data folder>/NAME/PART`, the prefix of PART.LANG.gz, or the PART.tsv file.
    """
    name, _, part = spec.partition(":")
    corpus, root = find(name), data_root()
    parts = corpus.parts()
    if part not in parts:
        raise CorpusError(f"{what}: {name} has no part {part!r}; it has {', '.join(parts)}")
    files = parts[part]
    tsv = files[0].name.endswith(".tsv")
    if langs is None:
        files = [f for f in files if f.default] or files
    elif not tsv:
        files = _in_langs(corpus, part, files, langs, what)
    if missing := missing_files(corpus, files, root):
        every = "" if all(f.default for f in missing) else " --all"
        raise CorpusError(
            f"{what}: {spec} is not in the data folder {root} (no {missing[0].name}); get it "
            f"with: alignmt data get {name}{every}"
        )
    return str(root / name / (files[0].name if tsv else part))


def _in_langs(
    corpus: Corpus, part: str, files: list[Pinned], langs: Sequence[str], what: str
) -> list[Pinned]:
    by_lang = {lang(f.name): f for f in files}
    for wanted in langs:
        if wanted not in by_lang:
            raise CorpusError(
                f"{what}: {corpus.name} publishes {part} in {', '.join(by_lang)}, not {wanted}"
            )
    return [by_lang[wanted] for wanted in langs]
