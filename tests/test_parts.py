"""Tests for alignmt.text.parts and SentencePiece's sample in alignmt.text.build: parallel
tokenising gives byte for byte what one process gives, and the sample a SentencePiece model
is trained on is deterministic and keeps every token encodable."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import alignmt.text.parts as parts_module
from alignmt.config import DataConfig
from alignmt.text.parts import Seen
from alignmt.text.prepare import prepare_text
from alignmt.text.split import read_split
from alignmt.text.tokenize import SentencePieceTokenizer
from alignmt.text.vocab import Vocab
from tests.test_cache import ARRAY_FILES, corpus_config, everything, folders, write_pairs

# --- Parallel tokenising and SentencePiece's sample ---------------------------------------


def test_seen_numbers_the_tokens_of_all_parts_and_counts_them():
    seen = Seen()
    many = [f"t{i}" for i in range(10_000)]  # more than its first capacity
    assert seen.add(many, np.ones(10_000, dtype=np.int64)).tolist() == list(range(10_000))
    assert seen.add(["new", "t5"], np.array([7, 2])).tolist() == [10_000, 5]
    vocab = seen.vocab(min_freq=2)
    assert vocab.itos[4:] == ["new", "t5"]  # 7 and 3 occurrences; the rest once
    assert seen.ids(vocab)[[10_000, 5, 0]].tolist() == [4, 5, vocab.unk_id]


def test_two_workers_write_byte_identical_arrays_to_one(tmp_path, monkeypatch):
    monkeypatch.setattr(parts_module, "CHUNK_PAIRS", 70)  # 300 pairs: 5 chunks
    cfg = corpus_config(tmp_path, n=300, max_tokens=5)
    prepare_text(cfg, seed=1)
    two = replace(cfg, workers=2, cache_dir=str(tmp_path / "cache2"))
    prepare_text(two, seed=1)
    (one_folder,), (two_folder,) = folders(cfg), folders(two)
    for name in (*ARRAY_FILES, "src_vocab.json", "tgt_vocab.json"):
        assert (one_folder / name).read_bytes() == (two_folder / name).read_bytes(), name
    assert not list(one_folder.glob("part*")) and not list(two_folder.glob("part*"))


def test_sentencepiece_trains_on_every_pair_of_a_corpus_smaller_than_its_sample(tmp_path):
    cfg = corpus_config(tmp_path, tokenizer="sentencepiece", spm_vocab_size=40, cache=False)
    text = prepare_text(cfg, seed=1)
    pairs = read_split(cfg.train, src_lang="en", tgt_lang="de", swap=False, what="x")
    alone = SentencePieceTokenizer.train([p.src for p in pairs], vocab_size=40, seed=1)
    assert text.tokenizers[0].model == alone.model


def test_a_sentencepiece_sample_smaller_than_the_corpus_is_deterministic(tmp_path):
    cfg = corpus_config(
        tmp_path, tokenizer="sentencepiece", spm_vocab_size=40, spm_sample=30, cache=False
    )
    first, again = prepare_text(cfg, seed=1), prepare_text(cfg, seed=1)
    other = prepare_text(cfg, seed=2)
    every = prepare_text(replace(cfg, spm_sample=0), seed=1)
    assert first.tokenizers[1].model == again.tokenizers[1].model
    assert everything(first.train) == everything(again.train) and len(first.train) == 200
    # another seed or no sample trains on other sentences, so on other counts
    assert first.tokenizers[1].model != other.tokenizers[1].model
    assert first.tokenizers[1].model != every.tokenizers[1].model


def test_tokens_a_sampled_sentencepiece_model_lacks_stay_tokens_of_their_own(tmp_path):
    pairs = [("a b", "x y")] * 40 + [("a é", "x ü")]  # é and ü are rare: maybe not sampled
    cfg = DataConfig(
        task="corpus",
        train=write_pairs(tmp_path / "t", pairs),
        workers=1,
        tokenizer="sentencepiece",
        spm_vocab_size=10,
        spm_sample=5,
        cache=False,
    )
    text = prepare_text(cfg, seed=1)
    src_tokenizer, tgt_tokenizer = text.tokenizers
    assert "⁇" in src_tokenizer.decode(src_tokenizer.encode("é"))  # not in the sample
    tokens = [(src_tokenizer.encode(s), tgt_tokenizer.encode(t)) for s, t in pairs]
    src_vocab = Vocab.build([s for s, _ in tokens])
    assert text.src_vocab == src_vocab and "é" in "".join(src_vocab.itos)
    assert text.tgt_vocab == Vocab.build([t for _, t in tokens])
    assert everything(text.train) == [
        (src_vocab.encode(s), text.tgt_vocab.encode(t)) for s, t in tokens
    ]
