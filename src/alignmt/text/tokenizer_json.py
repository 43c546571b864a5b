"""A SentencePiece model (Kudo & Richardson 2018) as a Hugging Face `tokenizer.json`: the
format that the `tokenizers` library reads in Rust and Python and `@huggingface/tokenizers`
in JavaScript, so that an exported model's page cuts subwords as `SentencePieceTokenizer`
does. Only what alignmt's own training writes is carried: a BPE or unigram model with
`<unk>` its one special piece, the whitespace marked "▁" with a dummy prefix, and the
normalisation rules compiled into the model (`precompiled_charsmap`).

The pieces are the model's: encoding the same pieces gives the same ids. BPE is carried as
ranked merges: each piece the model can build from two others, ranked by its score, which
SentencePiece's BPE encoder merges in that order. Whether the two agree on a corpus is
measured, not assumed (`differences`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence

from sentencepiece import SentencePieceProcessor
from sentencepiece import sentencepiece_model_pb2 as model_pb2

from alignmt.text.tokenize import SPACE

_UNIGRAM, _BPE = 1, 2  # TrainerSpec.ModelType


def tokenizer_json(model: bytes) -> dict:
    """The tokenizer.json of the serialised SentencePiece `model`, as a dict.

    Raises:
        ValueError: a model of another type than BPE or unigram, or with normalisation
            options alignmt does not train with.
    """
    proto = model_pb2.ModelProto()
    proto.ParseFromString(model)
    spec, trained = proto.normalizer_spec, proto.trainer_spec
    if not (spec.add_dummy_prefix and spec.escape_whitespaces and spec.remove_extra_whitespaces):
        raise ValueError("only SentencePiece models with its default whitespace handling convert")
    pieces = [(p.piece, p.score) for p in proto.pieces]
    unk = trained.unk_id
    if trained.model_type == _UNIGRAM:
        tokens = {"type": "Unigram", "unk_id": unk, "vocab": [list(p) for p in pieces]}
    elif trained.model_type == _BPE:
        tokens = {
            "type": "BPE",
            "unk_token": pieces[unk][0],
            "fuse_unk": True,  # SentencePiece writes a run of unknown characters as one piece
            "byte_fallback": False,
            "vocab": {piece: i for i, (piece, _) in enumerate(pieces)},
            "merges": merges(pieces),
        }
    else:
        raise ValueError(f"SentencePiece model type {trained.model_type}: only BPE and unigram")
    # SentencePiece's own order: its compiled rules, then the spaces at either end dropped and
    # runs of them made one
    normalizers = [
        {"type": "Strip", "strip_left": True, "strip_right": True},
        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
    ]
    if spec.precompiled_charsmap:
        charsmap = base64.b64encode(spec.precompiled_charsmap).decode("ascii")
        normalizers.insert(0, {"type": "Precompiled", "precompiled_charsmap": charsmap})
    space = {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": True}
    unk_token = {"id": unk, "content": pieces[unk][0], "special": True, "normalized": False}
    unk_token |= {"single_word": False, "lstrip": False, "rstrip": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [unk_token],
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": space,
        "post_processor": None,
        "decoder": space,
        "model": tokens,
    }


def merges(pieces: Sequence[tuple[str, float]]) -> list[list[str]]:
    """BPE's merges, first to last: for each piece (by score, highest first) every split of
    it into two pieces of the model, by the ids of the two."""
    ids = {piece: i for i, (piece, _) in enumerate(pieces)}
    ranked = sorted(range(len(pieces)), key=lambda i: -pieces[i][1])
    out = []
    for i in ranked:
        piece = pieces[i][0]
        splits = [(piece[:k], piece[k:]) for k in range(1, len(piece))]
        splits = [(a, b) for a, b in splits if a in ids and b in ids]
        out += [[a, b] for a, b in sorted(splits, key=lambda s: (ids[s[0]], ids[s[1]]))]
    return out


def differences(model: bytes, sentences: Sequence[str], lowercase: bool) -> list[int]:
    """The indices of `sentences` that the tokenizer.json of `model`, run by the `tokenizers`
    library, cuts into other pieces than SentencePiece does."""
    from tokenizers import Tokenizer

    converted = Tokenizer.from_str(json.dumps(tokenizer_json(model)))
    processor = SentencePieceProcessor(model_proto=model)
    texts = [s.lower() for s in sentences] if lowercase else list(sentences)
    want = processor.encode(texts, out_type=int)
    got = converted.encode_batch(texts, add_special_tokens=False)
    return [i for i, (w, g) in enumerate(zip(want, got, strict=True)) if w != g.ids]
