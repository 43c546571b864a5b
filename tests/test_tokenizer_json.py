"""A SentencePiece model as a tokenizer.json (`text.tokenizer_json`): the `tokenizers`
library, reading it, cuts the corpora as SentencePiece does, and says where it does not."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from alignmt.text.corpus import read_lines
from alignmt.text.tokenize import SentencePieceTokenizer
from alignmt.text.tokenizer_json import differences, merges, tokenizer_json

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


@functools.cache
def multi30k(lang: str) -> tuple[list[str], list[str]]:
    """(train, train + val + test_2016_flickr) sentences of one side."""
    if not SHARED.is_dir():
        pytest.skip(f"../shared/data is absent (looked in {SHARED})")
    parts = [read_lines(SHARED / "multi30k" / f"{p}.{lang}.gz") for p in ("train", "val")]
    test = read_lines(SHARED / "multi30k" / f"test_2016_flickr.{lang}.gz")
    return parts[0], parts[0] + parts[1] + test


@functools.cache
def trained(lang: str, model_type: str) -> SentencePieceTokenizer:
    """The Multi30k recipe's SentencePiece model of one side (8,000 pieces, lowercased)."""
    return SentencePieceTokenizer.train(
        multi30k(lang)[0], vocab_size=8000, model_type=model_type, lowercase=True
    )


@pytest.mark.parametrize(("lang", "model_type"), [("en", "bpe"), ("de", "unigram")])
def test_the_converted_model_cuts_multi30k_as_sentencepiece(lang, model_type):
    """(test_web_tokenizers.py checks every corpus side both ways, and the page besides.)"""
    sentences = multi30k(lang)[1]
    differ = differences(trained(lang, model_type).model, sentences, lowercase=True)
    if model_type == "bpe":
        assert differ == []
        return
    # unigram's one tie on German: "000" as "00" + "0" or "0" + "00", equally likely; the
    # two break it differently, and the export refuses the model (test_web_tokenizers.py)
    assert [sentences[i] for i in differ] == [
        "Dieser Mann ist ein Gewerkschaftsmitarbeiter, der 95.000\xa0im Jahr damit verdient, "
        "für die Regierung Fußböden zu wischen."
    ]


def test_the_merges_build_each_piece_from_two_in_the_order_of_its_score():
    tok = trained("en", "bpe")
    file = tokenizer_json(tok.model)
    vocab = file["model"]["vocab"]
    ranked = merges([(p, float(-i)) for p, i in sorted(vocab.items(), key=lambda x: x[1])])
    assert ranked == file["model"]["merges"] and len(ranked) > 1000
    built = [vocab[a + b] for a, b in ranked]
    assert all(a in vocab and b in vocab for a, b in ranked)
    assert built == sorted(built)  # SentencePiece's BPE scores are its ids, negated
    assert file["model"]["type"] == "BPE" and file["model"]["unk_token"] == "<unk>"
    assert tokenizer_json(trained("en", "unigram").model)["model"]["type"] == "Unigram"


def test_a_model_with_whitespace_handling_of_its_own_is_refused():
    import io

    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["a b c d e f g"] * 50),
        model_writer=model,
        vocab_size=12,
        add_dummy_prefix=False,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="default whitespace handling"):
        tokenizer_json(model.getvalue())
