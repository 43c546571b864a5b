"""Which tokenizers run in an exported site's page, checked before `alignmt export --web`
writes anything, and the files the page reads for them.

Every kind of tokenizer alignmt has has a twin in static/web/tokenize.js that gives the
Python side's tokens exactly: characters, spaces, d2l's words, Moses' rules (moses.js, for
the languages whose nonbreaking prefixes it carries) and SentencePiece, which
`@huggingface/tokenizers` runs from the model converted to a tokenizer.json
(`text.tokenizer_json`). That conversion is checked on the sentences the run's SentencePiece
models learnt from, its training corpus: where the `tokenizers` library, which reads the same
file, cuts a sentence differently (unigram's ties between equally likely cuts can), the
export names the sentences and refuses."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from alignmt.checkpoint.format import Header
from alignmt.text.tokenize import MosesTokenizer, SentencePieceTokenizer, Tokenizer
from alignmt.text.tokenizer_json import differences, tokenizer_json

# the languages static/web/moses_tables.js carries Moses' nonbreaking prefixes of
MOSES_LANGS = ("en", "de", "fr")
SIDES = ("source", "target")
# the page's SentencePiece tokenizer of a side, beside the manifest
TOKENIZER_FILE = "tokenizer.{side}.json"
_SERVE = "export it without --web and serve it with `alignmt serve DIR`"


def sides(header: Header) -> dict[str, Tokenizer]:
    """Side ("source", "target") -> its tokenizer."""
    return dict(zip(SIDES, (header.src_tokenizer, header.tgt_tokenizer), strict=True))


def check_web_tokenizers(header: Header, run_dir: str | Path) -> None:
    """Raise a ValueError naming the run, the side and the reason unless both sides'
    tokenizers run in the page as they do in Python: Moses' rules for a language the page
    lacks, or a SentencePiece model it would cut otherwise."""
    spm = {}
    for side, tok in sides(header).items():
        if isinstance(tok, MosesTokenizer) and tok.lang not in MOSES_LANGS:
            raise ValueError(
                f"{run_dir}: its {side} tokenizer is Moses' rules for {tok.lang}, which the "
                f"browser has only for {', '.join(MOSES_LANGS)}; {_SERVE}"
            )
        if isinstance(tok, SentencePieceTokenizer):
            spm[side] = tok
    if spm:
        _check_sentencepiece(header, spm, run_dir)


def _check_sentencepiece(
    header: Header, spm: dict[str, SentencePieceTokenizer], run_dir: str | Path
) -> None:
    """Refuse unless each converted tokenizer cuts every sentence of the run's training
    corpus into SentencePiece's pieces."""
    from alignmt.text.build import train_stream

    data = header.config.data
    try:  # the pairs it read: the first data.limit where the run set one
        rows = list(itertools.islice(train_stream(data), data.limit or None))
    except (OSError, ValueError) as missing:  # the corpus is not here: nothing to check on
        raise ValueError(
            f"{run_dir}: its SentencePiece tokenizers are checked for the browser on the "
            f"corpus they learnt from, which cannot be read here ({missing})"
        ) from None
    for side, tok in spm.items():
        sentences = [row[1 if side == "source" else 2] for row in rows]
        if differ := differences(tok.model, sentences, tok.lowercase):
            shown = "; ".join(f"line {rows[i][0]}: {sentences[i]!r}" for i in differ[:3])
            raise ValueError(
                f"{run_dir}: the browser's SentencePiece tokenizer cuts {len(differ)} of "
                f"{len(sentences)} {side} sentences of {data.train} differently ({shown}); "
                f"{_SERVE}"
            )


def write_tokenizer_files(header: Header, folder: Path) -> dict[str, str]:
    """Write the tokenizer.json of each side cut by SentencePiece into `folder`.

    Returns:
        Side ("source", "target") -> the file's name, for the sides written.
    """
    written = {}
    for side, tok in sides(header).items():
        if isinstance(tok, SentencePieceTokenizer):
            name = TOKENIZER_FILE.format(side=side)
            (folder / name).write_text(json.dumps(tokenizer_json(tok.model), ensure_ascii=False))
            written[side] = name
    return written
