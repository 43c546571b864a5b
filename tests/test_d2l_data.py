"""d2l.ai's data setting (Zhang et al., "Dive into Deep Learning", §10.5 and §11.4): its
words, one file split into training and validation rows, sentences cut to num_steps, a
vocabulary counted over the whole file, and the book's four-sentence check."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from alignmt.config import ConfigError, DataConfig, config_path, load_config
from alignmt.experiments.d2l import ENGS, FRAS, book_translations
from alignmt.model.batch import make_batch
from alignmt.text.corpora import locate
from alignmt.text.corpus import read_tsv
from alignmt.text.prepare import prepare_text
from alignmt.text.tokenize import D2lTokenizer, tokenizer_from_json
from alignmt.text.vocab import EOS, Vocab
from tests.conftest import needs_shared_data

# The book's raw text and what its preprocessing prints for it (§10.5): line by line, the
# two sides as `decode(encode(side))` must give them.
BOOK_RAW = "Go.\tVa !\nHi.\tSalut !\nRun!\tCours\u202f!\nRun!\tCourez\u202f!\nWho?\tQui ?"
BOOK_TEXT = "go .\tva !\nhi .\tsalut !\nrun !\tcours !\nrun !\tcourez !\nwho ?\tqui ?"


# --- The tokenizer --------------------------------------------------------------------------


def test_d2l_tokenizer_gives_the_books_preprocessed_text():
    tokenizer = D2lTokenizer(lowercase=True)
    for raw, book in zip(BOOK_RAW.split("\n"), BOOK_TEXT.split("\n"), strict=True):
        sides = [tokenizer.decode(tokenizer.encode(side)) for side in raw.split("\t")]
        assert "\t".join(sides) == book
    assert tokenizer.encode("Go.") == ["go", "."]
    assert tokenizer.encode("I'm home.") == ["i'm", "home", "."]
    assert tokenizer.decode(tokenizer.encode("I'm home.")) == "i'm home ."


def test_d2l_tokenizer_keeps_apostrophes_in_words_and_spaces_only_punctuation_after_a_word():
    tokenizer = D2lTokenizer(lowercase=True)
    assert tokenizer.encode("He's calm.") == ["he's", "calm", "."]
    assert tokenizer.encode("J'ai perdu.") == ["j'ai", "perdu", "."]
    # d2l's rule: a space before , . ! ? after a non-space, nothing after it; "...": three
    assert tokenizer.encode("Oh,no...") == ["oh", ",no", ".", ".", "."]
    assert tokenizer.encode("Allez\xa0 !  ") == ["allez", "!"]  # no empty tokens


def test_d2l_tokenizer_lowercases_only_when_asked_and_round_trips_through_json():
    for lowercase in (False, True):
        tokenizer = D2lTokenizer(lowercase=lowercase)
        rebuilt = tokenizer_from_json(tokenizer.to_json())
        assert type(rebuilt) is D2lTokenizer and rebuilt.lowercase == lowercase
        expected = ["go", "home", "!"] if lowercase else ["Go", "Home", "!"]
        assert rebuilt.encode("Go Home!") == expected


# --- Config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.valid_rows=2"], "data.valid_rows: needs data.limit set"),
        (["data.valid_rows=2", "data.limit=4", "data.valid=x"], "needs data.valid unset"),
        (["data.truncate=1"], "data.truncate: must be 0 (keep whole) or at least 2"),
        (["data.vocab_from=all"], "'all' is not one of train, file"),
    ],
)
def test_the_d2l_data_keys_refuse_what_makes_no_sense(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, overrides)


# --- Preparing a small file -----------------------------------------------------------------


def write_tsv(path: Path, pairs: list[tuple[str, str]]) -> str:
    path.write_text("".join(f"{src}\t{tgt}\tCC-BY\n" for src, tgt in pairs), encoding="utf-8")
    return str(path)


def small_config(tmp_path: Path, pairs: list[tuple[str, str]], **data) -> DataConfig:
    settings = dict(tokenizer="d2l", lowercase=True, min_freq=2, limit=4, valid_rows=2)
    return DataConfig(
        task="corpus",
        train=write_tsv(tmp_path / "pairs.tsv", pairs),
        cache_dir=str(tmp_path / "cache"),
        workers=1,
        **{**settings, **data},
    )


# Rows 1-4 train, 5-6 validate; "zebra" is seen twice, both times after row 6.
PAIRS = [
    ("Go.", "Va !"),
    ("Go now.", "Va maintenant !"),
    ("I lost.", "J'ai perdu."),
    ("I won.", "J'ai gagné."),
    ("I'm home.", "Je suis chez moi."),
    ("Go home.", "Rentre !"),
    ("A zebra.", "Un zèbre."),
    ("The zebra.", "Le zèbre."),
]


def test_the_first_limit_pairs_train_and_the_next_valid_rows_validate(tmp_path):
    text = prepare_text(small_config(tmp_path, PAIRS), seed=1, progress=False)
    assert len(text.train) == 4 and len(text.valid) == 2
    trained = [text.src_vocab.decode(src) for src, _ in text.train.pairs(range(4))]
    assert trained == [["go", "."], ["go", "<unk>", "."], ["i", "<unk>", "."], ["i", "<unk>", "."]]
    assert [(p.src, p.tgt) for p in text.valid] == PAIRS[4:6]
    assert [p.where.rsplit(":", 1)[1] for p in text.valid] == ["5", "6"]


def test_the_vocabulary_counts_the_whole_file_when_asked(tmp_path):
    # "zebra" twice after the validation rows; "go" three times within the training rows
    by_train = prepare_text(small_config(tmp_path, PAIRS), seed=1, progress=False)
    by_file = prepare_text(small_config(tmp_path, PAIRS, vocab_from="file"), seed=1)
    assert "zebra" not in by_train.src_vocab.stoi and "zebra" in by_file.src_vocab.stoi
    assert "zèbre" in by_file.tgt_vocab.stoi and "i'm" not in by_file.src_vocab.stoi  # once
    # and a cached split made with the other setting is not reused
    assert len(os.listdir(tmp_path / "cache")) == 2
    assert len(by_file.train) == 4


LONG_SRC = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def test_truncate_cuts_long_pairs_to_n_tokens_with_eos_instead_of_dropping_them(tmp_path):
    long = (" ".join(LONG_SRC) + ".", "un deux trois quatre cinq.")
    pairs = [long, *PAIRS[1:4], long, PAIRS[5]]
    # max_tokens 8 would drop the 11-token source; cut to 9 with </s>, it stays
    cfg = small_config(tmp_path, pairs, truncate=9, max_tokens=8, min_freq=1)
    text = prepare_text(cfg, seed=1, progress=False)
    assert len(text.train) == 4
    src, tgt = text.train.pairs([0])[0]
    assert text.src_vocab.decode(src) == LONG_SRC[:8]
    assert len(tgt) == 6  # shorter sides stay whole
    batch = make_batch(text.train.pairs([0]), text.src_vocab, text.tgt_vocab)
    assert batch.src.shape[1] == 9 and batch.src[0, -1] == text.src_vocab.eos_id
    assert len(text.valid_ids[0][0]) == 8  # the validation loss sees pairs cut the same way
    assert text.valid[0].src == long[0]  # while BLEU translates the whole sentence


# --- The Tatoeba file -----------------------------------------------------------------------


@pytest.mark.needs_shared_data
@needs_shared_data
def test_the_d2l_config_splits_tatoeba_as_the_book_and_counts_words_over_the_file(
    corpora, tmp_path
):
    cfg = load_config(config_path("d2l_fra_eng"), [f"data.cache_dir={tmp_path}"]).data
    text = prepare_text(cfg, seed=1, progress=False)
    pairs, _ = read_tsv(locate(cfg.train, None, "test"))  # the same path, for the same `where`
    assert len(pairs) == 5000
    assert len(text.train) == 512 and len(text.valid) == 128
    assert text.valid == pairs[512:640]  # the next 128, in file order
    tok = D2lTokenizer(lowercase=True)
    sides = [[tok.encode(p.src)[:8] for p in pairs], [tok.encode(p.tgt)[:8] for p in pairs]]
    # min_freq 2 over all 5,000 pairs, counted here without the pipeline
    vocabs = [Vocab.build(side, min_freq=2) for side in sides]
    assert (text.src_vocab, text.tgt_vocab) == tuple(vocabs)
    seen_early = Counter(t for s in sides[0][:640] for t in s)
    late = [t for t, n in Counter(t for s in sides[0][640:] for t in s).items() if n >= 2]
    assert any(t in text.src_vocab.stoi for t in late if t not in seen_early)
    expected = [(vocabs[0].encode(s), vocabs[1].encode(t)) for s, t in zip(*sides, strict=True)]
    assert text.train.pairs(range(512)) == expected[:512]  # the first 512, in file order
    trained = [text.src_vocab.decode(src) for src, _ in text.train.pairs(range(512))]
    assert ["i'm", "home", "."] not in trained
    assert "I'm home." in [p.src for p in text.valid]


@pytest.mark.needs_shared_data
@needs_shared_data
def test_the_d2l_config_trains_and_its_checkpoint_translates_the_books_sentences(corpora, tmp_path):
    from alignmt.checkpoint.torch_io import load_checkpoint
    from alignmt.training.run import train

    tiny = ["model.emb_dim=16", "model.enc_hidden=16", "model.dec_hidden=16", "model.attn_dim=16"]
    cfg = load_config(
        config_path("d2l_fra_eng"),
        [*tiny, "train.steps=4", f"out_dir={tmp_path / 'run'}", f"data.cache_dir={tmp_path}"],
    )
    result = train(cfg, progress=False)
    assert result.evals and 0 <= result.evals[-1]["bleu"] <= 100  # validated on valid_rows
    ckpt = load_checkpoint(result.run_dir)
    assert [t.to_json() for t in (ckpt.src_tokenizer, ckpt.tgt_tokenizer)] == [
        D2lTokenizer(lowercase=True).to_json()
    ] * 2
    lines = book_translations(result.run_dir)
    assert [t.src for t in lines] == list(ENGS) and [t.ref for t in lines] == list(FRAS)
    assert all(EOS not in t.tokens and len(t.tokens) <= 9 for t in lines)


# --- The book's four sentences --------------------------------------------------------------


def test_book_translations_print_as_the_book_with_its_bleu():
    outputs = [["va", "!"], ["j'ai", "perdu", "."], ["il", "est", "mouillé", "."], []]
    lines = book_translations(translate=lambda engs: outputs[: len(engs)])
    assert lines[0].line == "go . => ['va', '!'], bleu,1.000"
    assert lines[1].line == "i lost . => [\"j'ai\", 'perdu', '.'], bleu,1.000"
    # 3 of 4 unigrams, 1 of 3 bigrams (il est): (3/4)^(1/2) (1/3)^(1/4)
    assert lines[2].line == "he's calm . => ['il', 'est', 'mouillé', '.'], bleu,0.658"
    assert lines[3].line == "i'm home . => [], bleu,0.000"
