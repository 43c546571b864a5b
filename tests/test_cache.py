"""The training split as token arrays, and its cache folder: reuse, rebuilds, damage, drops,
parallel tokenising and SentencePiece's sample."""

from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import alignmt.text.parts as parts_module
import alignmt.text.prepare as prepare_module
from alignmt.config import ConfigError, DataConfig, load_config
from alignmt.text.cache import META, CacheError, TokenArrays, cache_root, rename_into_place
from alignmt.text.prepare import prepare_text
from alignmt.text.split import bucket_batches, read_split
from alignmt.text.tokenize import build_tokenizer
from alignmt.text.vocab import Vocab
from tests.conftest import SHARED, needs_shared_data, write_toy_corpus

ARRAY_FILES = ("src_ids.npy", "src_offsets.npy", "tgt_ids.npy", "tgt_offsets.npy")


def corpus_config(tmp_path: Path, n: int = 200, **data) -> DataConfig:
    """The toy corpus of `n` pairs, cached under tmp_path/cache."""
    prefix = write_toy_corpus(tmp_path / "data", n=n)
    data = {"tokenizer": "moses", "workers": 1, "cache_dir": str(tmp_path / "cache"), **data}
    return DataConfig(task="corpus", train=prefix, **data)


def folders(cfg: DataConfig) -> list[Path]:
    """The published cache folders (not those being built)."""
    return sorted(p for p in Path(cfg.cache_dir).iterdir() if not p.name.startswith("."))


def write_pairs(prefix: Path, pairs: list[tuple[str, str]]) -> str:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for side, lang in ((0, "en"), (1, "de")):
        Path(f"{prefix}.{lang}").write_text("".join(p[side] + "\n" for p in pairs))
    return str(prefix)


# --- TokenArrays --------------------------------------------------------------------------


def everything(arrays: TokenArrays) -> list:
    return arrays.pairs(range(len(arrays)))


def test_token_arrays_give_back_the_pairs_of_the_rows_asked_for_in_that_order():
    pairs = [([4, 5], [6]), ([7], [8, 9, 10]), ([], [11])]
    arrays = TokenArrays.from_pairs(pairs)
    assert len(arrays) == 3
    assert arrays.lengths.tolist() == [[2, 1], [1, 3], [0, 1]]
    assert arrays.pairs([2, 0]) == [pairs[2], pairs[0]]
    assert all(type(i) is int for i in arrays.pairs([1])[0][1])
    assert arrays.pairs(range(3)) == pairs
    assert len(TokenArrays.from_pairs([])) == 0 and TokenArrays.from_pairs([]).lengths.shape == (
        0,
        2,
    )


def test_a_synthetic_task_has_an_empty_training_split():
    text = prepare_text(DataConfig(task="reverse"), seed=1)
    assert len(text.train) == 0 and text.train.lengths.shape == (0, 2)


# --- The cache against the in-memory path -------------------------------------------------


def test_the_cache_gives_the_same_batches_as_the_in_memory_path(tmp_path):
    cfg = corpus_config(tmp_path, min_freq=2)
    cached = prepare_text(cfg, seed=1)
    in_memory = prepare_text(replace(cfg, cache=False, cache_dir=str(tmp_path / "unused")), 1)
    assert not (tmp_path / "unused").exists()
    assert isinstance(cached.train.src_ids.base, np.memmap)
    assert (cached.src_vocab, cached.tgt_vocab) == (in_memory.src_vocab, in_memory.tgt_vocab)
    for batch_tokens in (0, 60):
        orders = [
            bucket_batches(
                text.train.lengths, batch_size=16, batch_tokens=batch_tokens, rng=random.Random(3)
            )
            for text in (cached, in_memory)
        ]
        assert [b.tolist() for b in orders[0]] == [b.tolist() for b in orders[1]]
        assert [cached.train.pairs(b) for b in orders[0]] == [
            in_memory.train.pairs(b) for b in orders[1]
        ]


def test_the_arrays_hold_what_tokenising_and_the_vocabularies_give(tmp_path):
    cfg = corpus_config(tmp_path, min_freq=2, lowercase=True)
    text = prepare_text(cfg, seed=1)
    pairs = read_split(cfg.train, src_lang="en", tgt_lang="de", swap=False, what="x")
    tokens = [(text.tokenizers[0].encode(p.src), text.tokenizers[1].encode(p.tgt)) for p in pairs]
    assert text.src_vocab == Vocab.build([s for s, _ in tokens], min_freq=2)
    assert text.tgt_vocab == Vocab.build([t for _, t in tokens], min_freq=2)
    assert everything(text.train) == [
        (text.src_vocab.encode(s), text.tgt_vocab.encode(t)) for s, t in tokens
    ]


# --- Reuse and rebuilds -------------------------------------------------------------------


def test_a_second_prepare_maps_the_cache_without_tokenising_again(tmp_path, monkeypatch):
    cfg = corpus_config(tmp_path)
    first = prepare_text(cfg, seed=1)
    (folder,) = folders(cfg)
    inode = folder.stat().st_ino

    def no_build(*args, **kwargs):
        raise AssertionError("tokenised again")

    monkeypatch.setattr(prepare_module, "build_split", no_build)
    second = prepare_text(cfg, seed=1)
    assert folders(cfg) == [folder] and folder.stat().st_ino == inode
    assert everything(second.train) == everything(first.train)
    assert second.tokenizers[0].to_json() == first.tokenizers[0].to_json()


def test_new_contents_of_the_same_size_and_time_rebuild_the_cache(tmp_path):
    cfg = corpus_config(tmp_path)
    before = prepare_text(cfg, seed=1)
    path = Path(f"{cfg.train}.de")
    stat = path.stat()
    text = path.read_text()
    path.write_text(text.replace("hund", "hunt", 1))  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    after = prepare_text(cfg, seed=1)
    assert len(folders(cfg)) == 2
    assert "hunt" in after.tgt_vocab.stoi and "hunt" not in before.tgt_vocab.stoi


@pytest.mark.parametrize(
    "change",
    [
        "lowercase=True",
        "max_tokens=4",
        "min_freq=3",
        "limit=50",
        "max_len_ratio=2.0",
        "tokenizer=char",
        "tokenizer=space",
    ],
)
def test_a_changed_setting_builds_a_new_cache_folder(tmp_path, change):
    cfg = corpus_config(tmp_path)
    prepare_text(cfg, seed=1)
    key, value = change.split("=")
    changed = load_config(None, [f"data.{key}={value}"]).data
    prepare_text(replace(cfg, **{key: getattr(changed, key)}), seed=1)
    assert len(folders(cfg)) == 2


def test_a_sentencepiece_setting_or_seed_builds_a_new_cache_folder(tmp_path):
    cfg = corpus_config(tmp_path, tokenizer="sentencepiece", spm_vocab_size=40)
    prepare_text(cfg, seed=1)
    prepare_text(cfg, seed=2)
    prepare_text(replace(cfg, spm_vocab_size=45), seed=1)
    assert len(folders(cfg)) == 3


def test_unescape_builds_a_new_cache_folder_for_the_space_tokenizer(tmp_path):
    cfg = corpus_config(tmp_path, tokenizer="space")
    prepare_text(cfg, seed=1)
    text = prepare_text(replace(cfg, unescape=True), seed=1)
    assert len(folders(cfg)) == 2
    assert [t.unescape for t in text.tokenizers] == [True, True]  # not the stale folder's


def test_the_cache_folder_defaults_to_the_environment_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("ALIGNMT_CACHE", str(tmp_path / "a"))
    assert cache_root("") == tmp_path / "a"
    assert cache_root(str(tmp_path / "b")) == tmp_path / "b"
    monkeypatch.delenv("ALIGNMT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_root("") == tmp_path / "x" / "alignmt"


def test_the_test_suite_caches_outside_the_home_folder():
    assert os.environ["ALIGNMT_CACHE"] and Path.home() not in Path(cache_root("")).parents


# --- Building safely ----------------------------------------------------------------------


def test_a_failed_build_leaves_nothing_behind_and_the_next_one_succeeds(tmp_path, monkeypatch):
    cfg = corpus_config(tmp_path)

    def dies(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(parts_module, "assemble", dies)
    with pytest.raises(KeyboardInterrupt):
        prepare_text(cfg, seed=1)
    assert list(Path(cfg.cache_dir).iterdir()) == []
    monkeypatch.undo()
    assert len(prepare_text(cfg, seed=1).train) == 200


def test_a_killed_build_s_leftover_folder_is_ignored_and_pointed_out(tmp_path, caplog):
    cfg = corpus_config(tmp_path)
    prepare_text(cfg, seed=1)
    (folder,) = folders(cfg)
    leftover = folder.parent / f".{folder.name}.x.building"  # as a killed build leaves it
    folder.rename(leftover)
    assert len(prepare_text(cfg, seed=1).train) == 200
    assert folders(cfg) == [folder]
    assert f"{leftover}: another process is building this cache, or was killed" in caplog.text


def test_publishing_a_folder_another_process_published_first_keeps_theirs(tmp_path):
    theirs, mine = tmp_path / "key", tmp_path / ".key.1.building"
    for folder in (theirs, mine):
        folder.mkdir()
        (folder / META).write_text(folder.name)
    rename_into_place(mine, theirs)
    assert (theirs / META).read_text() == "key" and not mine.exists()


# --- Damaged caches -----------------------------------------------------------------------


def damaged(tmp_path: Path, damage) -> str:
    """The CacheError's message after `damage(folder)` on a fresh cache."""
    cfg = corpus_config(tmp_path)
    prepare_text(cfg, seed=1)
    (folder,) = folders(cfg)
    damage(folder)
    with pytest.raises(CacheError) as info:
        prepare_text(cfg, seed=1)
    message = str(info.value)
    assert str(folder) in message and "delete it" in message
    return message


def test_a_truncated_array_file_is_a_cache_error_naming_it(tmp_path):
    def truncate(folder):
        path = folder / "tgt_ids.npy"
        path.write_bytes(path.read_bytes()[:-10])

    assert "tgt_ids.npy: " in damaged(tmp_path, truncate)


def test_a_missing_file_is_a_cache_error_naming_it(tmp_path):
    assert "src_vocab.json: missing" in damaged(tmp_path, lambda f: (f / "src_vocab.json").unlink())


def test_a_corrupt_meta_json_is_a_cache_error_naming_it(tmp_path):
    def corrupt(folder):
        (folder / META).write_text((folder / META).read_text()[:-20])

    assert f"{META}: unreadable" in damaged(tmp_path, corrupt)


def test_decreasing_offsets_are_a_cache_error_naming_the_file(tmp_path):
    def swap(folder):
        offsets = np.load(folder / "src_offsets.npy", mmap_mode="r+")
        offsets[1], offsets[2] = offsets[2], offsets[1]
        offsets.flush()

    assert "src_offsets.npy: offsets decrease" in damaged(tmp_path, swap)


def test_offsets_past_the_ids_are_a_cache_error(tmp_path):
    def stretch(folder):
        offsets = np.load(folder / "tgt_offsets.npy", mmap_mode="r+")
        offsets[-1] += 1
        offsets.flush()

    assert "tgt_offsets.npy: offsets run from 0 to" in damaged(tmp_path, stretch)


def test_ids_outside_the_vocabulary_are_a_cache_error(tmp_path):
    def overflow(folder):
        ids = np.load(folder / "src_ids.npy", mmap_mode="r+")
        ids[0] = 60_000
        ids.flush()

    assert "src_ids.npy: ids from" in damaged(tmp_path, overflow)


def test_an_array_that_is_not_npy_is_a_cache_error(tmp_path):
    def scramble(folder):
        path = folder / "src_offsets.npy"
        path.write_bytes(b"\0" * path.stat().st_size)

    assert "src_offsets.npy: not a readable .npy file" in damaged(tmp_path, scramble)


# --- Dropped pairs ------------------------------------------------------------------------


def test_empty_over_long_and_lopsided_pairs_are_counted_and_located(tmp_path, caplog):
    pairs = [("a dog", "ein hund")] * 4
    pairs[1] = ("", "ein hund")  # empty
    pairs[2] = ("a " * 9 + "dog", "ein hund")  # 10 tokens: over max_tokens and lopsided
    pairs[3] = ("a red dog", "ein")  # 3 to 1: lopsided
    prefix = write_pairs(tmp_path / "data" / "train", [*pairs, ("the cat", "die katze")])
    cfg = DataConfig(
        task="corpus",
        train=prefix,
        tokenizer="moses",
        workers=1,
        max_tokens=8,
        max_len_ratio=2.5,
        cache_dir=str(tmp_path / "cache"),
    )
    for attempt in ("build", "hit"):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            text = prepare_text(cfg, seed=1)
        assert len(text.train) == 2, attempt
        assert f"1 dropped as empty ({prefix}.en:2)" in caplog.text
        assert f"dropped 1 of 4 pairs longer than 8 tokens (data.max_tokens): {prefix}.en:3" in (
            caplog.text
        )
        assert "dropped 1 of 4 pairs with one side over 2.5 times" in caplog.text
        assert f"(data.max_len_ratio): {prefix}.en:4" in caplog.text
    meta = json.loads((folders(cfg)[0] / META).read_text())
    assert meta["dropped"] == {
        "empty": {"count": 1, "first": [2]},
        "long": {"count": 1, "first": [3]},
        "ratio": {"count": 1, "first": [4]},
    }


def test_a_corpus_with_nothing_left_to_train_on_says_so(tmp_path):
    prefix = write_pairs(tmp_path / "data" / "train", [("a " * 9, "b"), ("", "c")])
    cfg = DataConfig(task="corpus", train=prefix, max_tokens=5, cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match=r"no pair is left .* 2 lines read \(1 empty, 1 long"):
        prepare_text(cfg, seed=1)


# --- Config -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "override",
    ["data.workers=-1", "data.spm_sample=-5", "data.max_len_ratio=-1", "data.max_len_ratio=0.5"],
)
def test_nonsense_cache_and_filter_settings_are_config_errors(override):
    with pytest.raises(ConfigError, match=override.split("=")[0]):
        load_config(None, [override])


# --- The shared corpus --------------------------------------------------------------------


@pytest.mark.needs_shared_data
@needs_shared_data
@pytest.mark.parametrize("kind", ["moses", "sentencepiece"])
def test_multi30k_val_prepares_exactly_as_tokenising_it_in_memory_does(tmp_path, kind):
    cfg = DataConfig(
        task="corpus",
        train=str(SHARED / "data/multi30k/val"),
        tokenizer=kind,
        lowercase=True,
        min_freq=2,
        max_tokens=30,
        spm_vocab_size=500,
        cache_dir=str(tmp_path),
    )
    text = prepare_text(cfg, seed=1)
    pairs = read_split(cfg.train, src_lang="en", tgt_lang="de", swap=False, what="x")
    tokenizers = [
        build_tokenizer(
            kind,
            lang=lang,
            lowercase=True,
            vocab_size=500,
            train_sentences=[getattr(p, side) for p in pairs],
        )
        for side, lang in (("src", "en"), ("tgt", "de"))
    ]
    tokens = [(tokenizers[0].encode(p.src), tokenizers[1].encode(p.tgt)) for p in pairs]
    tokens = [(s, t) for s, t in tokens if max(len(s), len(t)) <= 30]
    assert len(tokens) < len(pairs)  # some were dropped
    assert [t.to_json() for t in text.tokenizers] == [t.to_json() for t in tokenizers]
    src_vocab = Vocab.build([s for s, _ in tokens], min_freq=2)
    tgt_vocab = Vocab.build([t for _, t in tokens], min_freq=2)
    assert (text.src_vocab, text.tgt_vocab) == (src_vocab, tgt_vocab)
    assert everything(text.train) == [(src_vocab.encode(s), tgt_vocab.encode(t)) for s, t in tokens]
