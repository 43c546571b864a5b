from __future__ import annotations

import gzip
import random
from dataclasses import fields

import numpy as np
import pytest
import torch

from alignmt.model.batch import Batch, guide_matrix, make_batch, pad_sequences, source_batch
from alignmt.text.corpus import CorpusError
from alignmt.text.split import bucket_batches, read_split
from alignmt.text.vocab import BOS, EOS, PAD, UNK, Vocab


@pytest.fixture
def vocab() -> Vocab:
    return Vocab("abcdefghijklmnopqrstuvwxyz")


@pytest.fixture
def batch(vocab) -> Batch:
    # Row 0 is the short one, so selecting it alone must drop padding columns.
    pairs = [("ab", "ba"), ("hello", "olleh"), ("xyz", "zyx")]
    return make_batch([(vocab.encode(s), vocab.encode(t)) for s, t in pairs], vocab, vocab)


# --- Vocab --------------------------------------------------------------------------------


def test_specials_have_ids_0_to_3(vocab):
    assert [vocab.stoi[t] for t in (PAD, BOS, EOS, UNK)] == [0, 1, 2, 3]
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2, 3)
    assert (Vocab.pad_id, Vocab.bos_id, Vocab.eos_id, Vocab.unk_id) == (0, 1, 2, 3)
    assert vocab.itos[:4] == [PAD, BOS, EOS, UNK]


def test_tokens_follow_the_specials_in_the_order_given():
    vocab = Vocab(["z", "a", "m"])
    assert vocab.itos == [PAD, BOS, EOS, UNK, "z", "a", "m"]
    assert len(vocab) == 7
    assert vocab.encode(["a", "z"]) == [5, 4]


def test_encode_then_decode_gives_back_the_tokens(vocab):
    tokens = list("attention")
    assert vocab.decode(vocab.encode(tokens)) == tokens
    assert vocab.decode(vocab.encode(tokens, add_eos=True)) == tokens


def test_encode_appends_eos_only_when_asked(vocab):
    assert vocab.encode(["a", "b"]) == [4, 5]
    assert vocab.encode(["a", "b"], add_eos=True) == [4, 5, vocab.eos_id]


def test_unknown_token_maps_to_unk(vocab):
    ids = vocab.encode(["a", "?", "B"])
    assert ids == [vocab.stoi["a"], vocab.unk_id, vocab.unk_id]
    assert vocab.decode(ids) == ["a", UNK, UNK]


def test_decode_stops_at_the_first_eos_and_drops_pad_and_bos(vocab):
    a, b, c = vocab.encode(["a", "b", "c"])
    ids = [vocab.bos_id, a, b, vocab.eos_id, c, vocab.eos_id, vocab.pad_id]
    assert vocab.decode(ids) == ["a", "b"]
    assert vocab.decode(ids, strip_special=False) == [BOS, "a", "b", EOS, "c", EOS, PAD]


def test_decode_accepts_a_tensor_row(vocab):
    assert vocab.decode(torch.tensor([4, 5, 2, 0])) == ["a", "b"]


@pytest.mark.parametrize("bad_id", [-1, 30])
def test_decode_rejects_ids_outside_the_vocabulary(vocab, bad_id):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.decode([4, bad_id])


def test_build_orders_by_frequency_then_token():
    corpus = [["b", "a", "c"], ["c", "a", "d"], ["c"]]  # c: 3, a: 2, b: 1, d: 1
    assert Vocab.build(corpus).itos[4:] == ["c", "a", "b", "d"]


def test_build_respects_min_freq_and_max_size():
    corpus = [list("cccaab"), list("dd")]  # c: 3, a: 2, d: 2, b: 1
    assert Vocab.build(corpus, min_freq=2).itos[4:] == ["c", "a", "d"]
    assert Vocab.build(corpus, max_size=2).itos[4:] == ["c", "a"]
    assert Vocab.build(corpus, min_freq=3, max_size=2).itos[4:] == ["c"]


def test_build_skips_special_tokens_in_the_corpus():
    vocab = Vocab.build([["a", UNK, "</s>", "a"]])
    assert vocab.itos == [PAD, BOS, EOS, UNK, "a"]


def test_build_rejects_min_freq_below_one():
    with pytest.raises(ValueError, match="min_freq"):
        Vocab.build([["a"]], min_freq=0)


def test_json_round_trip_gives_an_equal_vocab():
    vocab = Vocab(["é", "a", '"', "\\", "日本", " "])
    restored = Vocab.from_json(vocab.to_json())
    assert restored == vocab
    assert restored.itos == vocab.itos
    assert restored.stoi == vocab.stoi


def test_vocabs_with_different_tokens_are_not_equal():
    assert Vocab(["a", "b"]) != Vocab(["b", "a"])
    assert Vocab(["a"]) != ["<pad>", "<s>", "</s>", "<unk>", "a"]


def test_from_json_rejects_a_vocab_without_the_specials_first():
    with pytest.raises(ValueError, match="first"):
        Vocab.from_json('{"itos": ["a", "<pad>", "<s>", "</s>", "<unk>"]}')


@pytest.mark.parametrize("tokens", [["a", "b", "a"], ["a", UNK], [PAD]])
def test_constructor_rejects_duplicates_and_specials(tokens):
    with pytest.raises(ValueError, match="duplicates or special"):
        Vocab(tokens)


# --- Batching -----------------------------------------------------------------------------


def test_pad_sequences_right_pads_with_the_pad_id():
    padded = pad_sequences([[5, 6], [7], [8, 9, 10]], pad_id=0)
    assert padded.dtype == torch.int64
    assert padded.tolist() == [[5, 6, 0], [7, 0, 0], [8, 9, 10]]


def test_pad_sequences_of_nothing_is_empty():
    assert pad_sequences([], pad_id=0).shape == (0, 0)


def test_source_batch_ends_rows_in_eos_pads_them_and_reads_unknown_tokens_as_unk(vocab):
    src, src_len = source_batch([list("ab"), list("c?d"), []], vocab)
    a, b, c, d = (vocab.stoi[t] for t in "abcd")
    pad, eos, unk = vocab.pad_id, vocab.eos_id, vocab.stoi[UNK]
    assert src.tolist() == [[a, b, eos, pad], [c, unk, d, eos], [eos, pad, pad, pad]]
    assert src_len.dtype == torch.int64
    assert src_len.tolist() == [3, 4, 1]


def test_make_batch_shapes_and_dtypes(batch):
    assert batch.src.shape == (3, 6)  # "hello" + </s>
    assert batch.tgt_in.shape == batch.tgt_out.shape == (3, 6)
    assert batch.src_len.tolist() == [3, 6, 4]
    assert batch.tgt_len.tolist() == [3, 6, 4]
    for tensor in (batch.src, batch.src_len, batch.tgt_in, batch.tgt_out, batch.tgt_len):
        assert tensor.dtype == torch.int64


def test_make_batch_puts_eos_after_source_and_target_and_bos_first(batch, vocab):
    rows = range(len(batch.src_len))
    assert all(batch.src[i, batch.src_len[i] - 1] == vocab.eos_id for i in rows)
    assert all(batch.tgt_out[i, batch.tgt_len[i] - 1] == vocab.eos_id for i in rows)
    assert (batch.tgt_in[:, 0] == vocab.bos_id).all()
    assert vocab.decode(batch.src[1]) == list("hello")
    assert vocab.decode(batch.tgt_out[1]) == list("olleh")


def test_tgt_in_is_tgt_out_shifted_by_one_on_real_positions(batch):
    for i, n in enumerate(batch.tgt_len.tolist()):
        assert batch.tgt_in[i, 1:n].tolist() == batch.tgt_out[i, : n - 1].tolist()


def test_make_batch_pads_every_tensor_with_the_pad_id_past_the_lengths(batch, vocab):
    t_src, t_tgt = batch.src.shape[1], batch.tgt_in.shape[1]
    src_real = torch.arange(t_src) < batch.src_len[:, None]  # (B, T_src)
    tgt_real = torch.arange(t_tgt) < batch.tgt_len[:, None]  # (B, T_tgt)
    assert (batch.src[~src_real] == vocab.pad_id).all()
    assert (batch.src[src_real] != vocab.pad_id).all()
    for tgt in (batch.tgt_in, batch.tgt_out):
        assert (tgt[~tgt_real] == vocab.pad_id).all()
        assert (tgt[tgt_real] != vocab.pad_id).all()


def test_num_tgt_tokens_counts_targets_with_eos(batch):
    assert batch.num_tgt_tokens == (2 + 1) + (5 + 1) + (3 + 1)


def test_an_empty_source_becomes_just_eos(vocab):
    batch = make_batch([([], vocab.encode("ab"))], vocab, vocab)
    assert batch.src.tolist() == [[vocab.eos_id]]
    assert batch.src_len.tolist() == [1]


def test_make_batch_of_no_pairs_raises(vocab):
    with pytest.raises(ValueError, match="pairs: empty"):
        make_batch([], vocab, vocab)


@pytest.mark.parametrize("bad_target", [[4, 2], [1, 4], [0], [30]])
def test_make_batch_rejects_specials_and_out_of_range_ids(vocab, bad_target):
    with pytest.raises(ValueError, match=r"pairs\[1\] target"):
        make_batch([([4], [5]), ([4], bad_target)], vocab, vocab)


def test_select_of_a_short_row_has_no_padding_and_equals_its_own_batch(batch, vocab):
    alone = batch.select(0)
    assert alone.src.shape == (1, 3)
    assert alone.tgt_in.shape == alone.tgt_out.shape == (1, 3)
    assert not (alone.src == vocab.pad_id).any()
    expected = make_batch([(vocab.encode("ab"), vocab.encode("ba"))], vocab, vocab)
    for f in fields(Batch):
        if f.name == "guide":  # neither carries word links
            assert alone.guide is None and expected.guide is None
            continue
        assert torch.equal(getattr(alone, f.name), getattr(expected, f.name)), f.name


def test_select_cuts_a_guide_to_the_rows_and_their_lengths(batch, vocab):
    links = [[(0, 0)], [(1, 0), (0, 1)]][: len(batch.src_len)]
    guided = Batch(**{f.name: getattr(batch, f.name) for f in fields(Batch)})
    guided.guide = guide_matrix(links + [[]] * (len(batch.src_len) - len(links)), batch)
    alone = guided.select(0)
    assert alone.guide.shape == (1, alone.tgt_out.size(1), alone.src.size(1))
    assert torch.equal(
        alone.guide[0], guided.guide[0, : alone.tgt_out.size(1), : alone.src.size(1)]
    )


def test_select_of_several_rows_keeps_their_order_and_trims_to_the_longest(batch, vocab):
    picked = batch.select([2, 0])
    assert picked.src.shape == (2, 4)  # "xyz" + </s>
    assert picked.src_len.tolist() == [4, 3]
    assert vocab.decode(picked.tgt_out[0]) == list("zyx")
    assert vocab.decode(picked.src[1]) == list("ab")


def test_select_of_no_rows_raises(batch):
    with pytest.raises(ValueError, match="no rows"):
        batch.select([])


def test_to_moves_every_tensor_and_leaves_the_original(batch):
    # "meta" stands in for an accelerator: a real device move without needing one.
    guided = Batch(**{f.name: getattr(batch, f.name) for f in fields(Batch)})
    guided.guide = torch.zeros(*batch.tgt_out.shape, batch.src.size(1))
    moved = guided.to("meta")
    assert all(getattr(moved, f.name).device.type == "meta" for f in fields(Batch))
    assert all(getattr(guided, f.name).device.type == "cpu" for f in fields(Batch))
    assert batch.to("meta").guide is None  # a batch without links stays without


# --- corpus splits and bucketing --------------------------------------------------------------


def test_bucket_batches_cover_every_pair_once_and_group_similar_lengths():
    rng = random.Random(0)
    lengths = [(rng.randint(1, 40), rng.randint(1, 40)) for _ in range(1000)]
    batches = bucket_batches(lengths, batch_size=20, rng=random.Random(1), pool=10)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert all(len(b) <= 20 for b in batches)

    def padding(batches):
        return sum(
            len(b) * max(lengths[i][1] for i in b) - sum(lengths[i][1] for i in b) for b in batches
        )

    shuffled = list(range(1000))
    random.Random(1).shuffle(shuffled)
    unsorted = [shuffled[i : i + 20] for i in range(0, 1000, 20)]
    assert padding(batches) < padding(unsorted) / 5


def test_bucket_batches_by_tokens_stay_within_the_budget_and_depend_only_on_the_rng():
    rng = random.Random(0)
    lengths = [(5, rng.randint(1, 30)) for _ in range(500)] + [(5, 300)]  # one over budget

    def make(seed):
        rng = random.Random(seed)
        return [
            b.tolist() for b in bucket_batches(lengths, batch_size=1, batch_tokens=200, rng=rng)
        ]

    batches = make(3)
    assert sorted(i for b in batches for i in b) == list(range(501))
    for b in batches:
        assert len(b) == 1 or len(b) * (max(lengths[i][1] for i in b) + 1) <= 200
    assert [500] in batches  # too long for any budget, it still gets a batch of its own
    assert make(3) == batches and make(4) != batches


def list_bucket_batches(lengths, *, batch_size, batch_tokens, rng, pool=100):
    """bucket_batches as it was written on Python lists, before numpy: the reference."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    per_pool = pool * (batch_size if not batch_tokens else max(1, batch_tokens // 16))
    batches = []
    for start in range(0, len(order), per_pool):
        chunk = sorted(order[start : start + per_pool], key=lambda i: lengths[i][::-1])
        if not batch_tokens:
            batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
            continue
        current, longest = [], 0
        for i in chunk:
            longest_with = max(longest, lengths[i][1] + 1)
            if current and longest_with * (len(current) + 1) > batch_tokens:
                batches.append(current)
                current, longest_with = [], lengths[i][1] + 1
            current.append(i)
            longest = longest_with
        batches += [current] if current else []
    rng.shuffle(batches)
    return batches


@pytest.mark.parametrize(
    ("batch_size", "batch_tokens", "pool"), [(7, 0, 3), (64, 0, 100), (1, 90, 2), (64, 600, 100)]
)
def test_bucket_batches_are_those_of_the_list_implementation_for_the_same_rng(
    batch_size, batch_tokens, pool
):
    rng = random.Random(batch_size + batch_tokens)
    # few distinct lengths: many ties, whose order only a stable sort keeps
    lengths = [(rng.randint(1, 12), rng.randint(1, 12)) for _ in range(5000)] + [(3, 95)]
    expected = list_bucket_batches(
        lengths, batch_size=batch_size, batch_tokens=batch_tokens, rng=random.Random(5), pool=pool
    )
    for given in (lengths, np.array(lengths, dtype=np.int32)):
        batches = bucket_batches(
            given, batch_size=batch_size, batch_tokens=batch_tokens, rng=random.Random(5), pool=pool
        )
        assert [b.tolist() for b in batches] == expected


def test_bucket_batches_of_no_pairs_are_none():
    assert bucket_batches(np.zeros((0, 2), dtype=np.int64), batch_size=4, rng=random.Random()) == []


def test_read_split_finds_plain_or_gzipped_files_and_names_what_is_missing(tmp_path):
    (tmp_path / "t.en").write_text("a dog\n")
    with gzip.open(tmp_path / "t.de.gz", "wt") as f:
        f.write("ein hund\n")
    pairs = read_split(str(tmp_path / "t"), src_lang="en", tgt_lang="de", swap=False, what="x")
    assert [(p.src, p.tgt) for p in pairs] == [("a dog", "ein hund")]
    with pytest.raises(CorpusError, match=r"data.valid: neither .*v\.en nor .*v\.en\.gz exists"):
        read_split(str(tmp_path / "v"), src_lang="en", tgt_lang="de", swap=False, what="data.valid")


def test_read_split_reads_tsv_either_way_round(tmp_path):
    tsv = tmp_path / "p.tsv"
    tsv.write_text("Hi.\tSalut.\tCC-BY 2.0 (France) Attribution: tatoeba.org\n")
    forward = read_split(str(tsv), src_lang="en", tgt_lang="fr", swap=False, what="x")
    backward = read_split(str(tsv), src_lang="fr", tgt_lang="en", swap=True, what="x")
    assert (forward[0].src, forward[0].tgt) == ("Hi.", "Salut.")
    assert (backward[0].src, backward[0].tgt) == ("Salut.", "Hi.")
