"""Translating raw text with a run folder: order, blank lines, n-best, attention, quality."""

from __future__ import annotations

import numpy as np
import torch

from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding.door import open_translator
from alignmt.decoding.rules import length_penalty
from alignmt.decoding.words import hard_alignment, replace_unknown, word_alignment
from alignmt.text.tokenize import MosesTokenizer, SentencePieceTokenizer
from tests.conftest import LEXICON


def _translator(run, **search):
    return open_translator(run, device="cpu", **search)


def test_a_run_folder_alone_translates_raw_text(toy_run):
    lines = ["A red dog runs.", "the small cat sleeps now", "Big cat"]
    out = [hyps[0].text for hyps in _translator(toy_run).translate(lines)]
    # detokenised output; "A", "Big" and "." of the input are unseen words, read as <unk>
    expected = ["ein roter hund läuft.", "der kleiner katze schläft jetzt.", "großer katze."]
    assert out[1] == expected[1]
    assert sum(o == e for o, e in zip(out, expected, strict=True)) >= 1
    assert all(o.endswith(".") for o in out)


def test_output_order_and_content_do_not_depend_on_batching(toy_run):
    words = sorted(LEXICON)
    lines = [" ".join(words[i % 10 : i % 10 + 1 + i % 5]) for i in range(23)]
    translator = _translator(toy_run)
    one_by_one = [h[0].text for h in translator.translate(lines, batch_size=1)]
    batched = [h[0].text for h in translator.translate(lines, batch_size=8)]
    assert batched == one_by_one
    assert one_by_one[0] == _translator(toy_run).translate(lines[:1])[0][0].text


def test_blank_lines_get_empty_translations_so_lines_stay_aligned(toy_run):
    out = _translator(toy_run).translate(["a dog", "", "   ", "a cat"])
    assert [len(hyps) for hyps in out] == [1, 1, 1, 1]
    assert out[1][0].text == out[2][0].text == ""
    assert out[0][0].text and out[3][0].text


def test_nbest_returns_distinct_hypotheses_best_first(toy_run):
    hyps = _translator(toy_run, beam_size=4).translate(["the big dog sleeps"], nbest=3)[0]
    assert len(hyps) == 3
    assert len({tuple(h.tokens) for h in hyps}) == 3
    # best first: in the order beam search ranks them, score over GNMT's length penalty
    alpha = _translator(toy_run).search.length_penalty
    ranked = [h.score / length_penalty(len(h.tokens), alpha) for h in hyps]
    assert ranked == sorted(ranked, reverse=True)
    assert (
        hyps[0].text
        == _translator(toy_run, beam_size=4).translate(["the big dog sleeps"])[0][0].text
    )


def test_attention_has_a_row_per_output_token_and_a_column_per_source_token(toy_run):
    for beam in (1, 3):
        t = _translator(toy_run, beam_size=beam).translate(["a dog runs"])[0][0]
        assert t.src_tokens == ["a", "dog", "runs", "</s>"]
        assert t.tokens[-1] == "</s>"
        assert t.attention.shape == (len(t.tokens), len(t.src_tokens))
        torch.testing.assert_close(torch.as_tensor(t.attention).sum(-1), torch.ones(len(t.tokens)))


def test_unknown_source_words_read_as_unk_and_are_reported(toy_run, caplog):
    t = _translator(toy_run).translate(["a zebra runs"])[0][0]
    assert t.src_tokens == ["a", "<unk>", "runs", "</s>"]
    assert "not in the vocabulary, read as <unk>: line 1: 'zebra'" in caplog.text


def test_an_unknown_output_word_is_replaced_by_the_source_word_it_attends_to_most():
    attention = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.0, 0.1, 0.9]])
    # the second <unk> attends most to </s>, so it takes the best real source word instead
    out = replace_unknown(["ein", "<unk>", "<unk>"], ["a", "Zorro"], attention)
    assert out == ["ein", "Zorro", "Zorro"]
    assert replace_unknown(["<unk>"], ["Zorro", "x"], attention[:1]) == ["Zorro"]


def test_hard_alignment_is_each_words_most_attended_source_word_in_pharaoh_order():
    attention = torch.tensor([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.1, 0.3, 0.6]])
    # source "a b </s>": j-i pairs; the </s> row and the </s> column take no part
    assert hard_alignment(attention, ["x", "y", "</s>"]) == "1-0 0-1"
    # an output cut by the length limit has no </s>: its last word is aligned too, to a
    # real source word even where </s> holds the most weight
    assert hard_alignment(attention, ["x", "y", "z"]) == "1-0 0-1 1-2"
    assert hard_alignment(attention[:1], ["</s>"]) == ""


def test_word_alignment_links_the_words_whose_pieces_are_linked():
    spm = SentencePieceTokenizer.__new__(SentencePieceTokenizer)  # only its kind is read
    moses = MosesTokenizer(lang="en")
    # source pieces "▁a b ▁c </s>" are the words "ab c"; output "▁x ▁y z </s>" is "x yz"
    attention = torch.tensor(
        [
            [0.1, 0.7, 0.1, 0.1],  # ▁x  <- b  (word 0)
            [0.1, 0.1, 0.7, 0.1],  # ▁y  <- ▁c (word 1)
            [0.7, 0.1, 0.1, 0.1],  # z   <- ▁a (word 0)
            [0.1, 0.1, 0.1, 0.7],  # </s>
        ]
    )
    src, out = ["▁a", "b", "▁c", "</s>"], ["▁x", "▁y", "z", "</s>"]
    assert hard_alignment(attention, out) == "1-0 2-1 0-2"
    assert word_alignment(attention, src, out, (spm, spm)) == "0-0 0-1 1-1"
    # where tokens are words, word and token alignments are one
    assert word_alignment(attention, src, out, (moses, moses)) == "1-0 2-1 0-2"


def test_a_bfloat16_translator_decodes_on_the_cpu_much_as_a_float32_one(toy_run):
    words = sorted(LEXICON)
    lines = [" ".join(words[i % 10 : i % 10 + 1 + i % 4]) for i in range(20)]
    ckpt = load_checkpoint(toy_run)
    full = open_translator(ckpt)
    half = open_translator(ckpt, precision="bfloat16")
    for beam in (1, 3):
        want = [h[0].text for h in full.translate(lines, beam_size=beam)]
        got = [h[0] for h in half.translate(lines, beam_size=beam)]
        assert sum(w == g.text for w, g in zip(want, got, strict=True)) >= 0.8 * len(lines)
        assert all(g.attention.dtype == np.float32 for g in got)
    stepped = half.step_through(lines[3], top_k=3, beam_size=3)
    assert stepped.translation.text and stepped.steps[0].attention.dtype == np.float32
    _, trace = half.beam_trace(lines[3], beam_size=3)
    assert trace.finished and trace.nodes[0].attention.dtype == np.float32
