"""Word alignments: AER by hand, Pharaoh reading, attention's argmax links, eflomal, the CLI."""

from __future__ import annotations

import gzip
import os
import sys

import numpy as np
import pytest
import torch

from alignmt.analysis.align import (
    alignment_error_rate,
    argmax_links,
    token_links,
    word_links,
)
from alignmt.analysis.task_scores import score_task
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.cli import main
from alignmt.config import load_config
from alignmt.decoding.door import open_translator
from alignmt.decoding.translator import Translator
from alignmt.model.batch import make_batch
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.corpus import CorpusError, read_lines
from alignmt.text.links import (
    GOLD_FORMATS,
    Words,
    eflomal_links,
    parse_pharaoh,
    read_alignments,
    sentence_words,
)
from alignmt.text.tasks import ALPHABET, eval_set
from alignmt.text.tokenize import MosesTokenizer, SentencePieceTokenizer
from alignmt.text.vocab import Vocab
from tests.conftest import LEXICON, engine_of, tiny_model, write_toy_corpus

# --- AER by hand --------------------------------------------------------------------------


def test_aer_with_sure_links_only_is_one_minus_the_f1_of_precision_and_recall():
    # A ∩ S = {0-0, 1-1}: 2 of 3 hypothesis links and 2 of 3 gold ones
    score = alignment_error_rate([{(0, 0), (1, 1), (2, 1)}], [{(0, 0), (1, 1), (2, 2)}])
    assert score.precision == pytest.approx(2 / 3)
    assert score.recall == pytest.approx(2 / 3)
    assert score.aer == pytest.approx(1 - (2 + 2) / (3 + 3))
    assert score.sentences == 1


def test_aer_counts_possible_links_for_precision_and_sums_over_the_corpus():
    hyps = [{(0, 0), (1, 1), (2, 2)}, {(0, 1)}]
    sures = [{(0, 0)}, {(0, 1), (1, 0)}]
    possibles = [{(1, 1), (1, 2)}, set()]  # the sure links are added to them
    score = alignment_error_rate(hyps, sures, possibles)
    # |A| = 4, |S| = 3, |A∩S| = 1 + 1 = 2, |A∩P| = 2 + 1 = 3
    assert score.precision == pytest.approx(3 / 4)
    assert score.recall == pytest.approx(2 / 3)
    assert score.aer == pytest.approx(1 - (2 + 3) / (4 + 3))  # 2/7, not the mean 0.2917
    assert score.sentences == 2


def test_an_empty_hypothesis_has_zero_precision_and_recall_and_an_aer_of_one():
    score = alignment_error_rate([set(), set()], [{(0, 0)}, {(1, 0), (0, 1)}])
    assert (score.precision, score.recall, score.aer) == (0.0, 0.0, 1.0)


def test_aer_refuses_unequal_corpora_and_a_corpus_without_links():
    with pytest.raises(ValueError, match="one entry per sentence"):
        alignment_error_rate([set()], [set(), set()])
    with pytest.raises(ValueError, match="0/0"):
        alignment_error_rate([set()], [set()], [{(0, 0)}])


# --- Pharaoh files ------------------------------------------------------------------------


def test_pharaoh_links_are_sure_with_a_dash_and_possible_with_a_question_mark_or_p():
    sure, possible = parse_pharaoh(" 0-0 1?2  2p1 3-1\t", where="x:1")
    assert sure == {(0, 0), (3, 1)}
    assert possible == {(0, 0), (3, 1), (1, 2), (2, 1)}
    assert parse_pharaoh("", where="x:1") == (set(), set())


def test_talp_files_count_words_from_one_and_read_as_the_same_pharaoh_links(tmp_path):
    pharaoh, talp = tmp_path / "gold.pharaoh", tmp_path / "gold.talp"
    pharaoh.write_text("0-0 1?1 2p2\n\n1-0 0p1\n")
    talp.write_text("1-1 2p2 3p3\n\n2-1 1p2\n")
    lengths = [(3, 3), (1, 1), (2, 2)]
    assert read_alignments(talp, lengths=lengths, gold_format="talp") == read_alignments(
        pharaoh, lengths=lengths
    )
    # Och & Ney's AER from sure and possible links, by hand: A = {0-0, 1-1, 2-0}, S = {0-0},
    # P = S + {1-1, 2-2}: precision |A&P|/|A| = 2/3, recall |A&S|/|S| = 1,
    # AER = 1 - (|A&S| + |A&P|) / (|A| + |S|) = 1 - 3/4
    sures, possibles = read_alignments(talp, gold_format="talp")
    score = alignment_error_rate(
        [{(0, 0), (1, 1), (2, 0)}, set(), set()],
        sures[:1] + [set()] * 2,
        possibles[:1] + [set()] * 2,
    )
    assert (score.precision, score.recall, score.aer) == pytest.approx((2 / 3, 1.0, 0.25))


def test_the_command_offers_the_gold_formats_the_reader_knows():
    from alignmt.cli.parser import build_parser

    args = build_parser().parse_args(["evaluate", "run", "--gold-format", "talp"])
    assert args.gold_format == "talp"
    for name in GOLD_FORMATS:
        assert build_parser().parse_args(["evaluate", "r", "--gold-format", name]).gold_format
    with pytest.raises(SystemExit):
        build_parser().parse_args(["evaluate", "run", "--gold-format", "moses"])


def test_a_talp_file_with_an_index_0_or_a_link_past_its_pair_is_refused_by_line(tmp_path):
    talp = tmp_path / "gold.talp"
    talp.write_text("1-1\n0-1 1-1\n")
    with pytest.raises(CorpusError, match=r"gold.talp:2: '0-1' has an index 0, but talp files"):
        read_alignments(talp, gold_format="talp")
    talp.write_text("1-1\n2-3\n")
    with pytest.raises(CorpusError, match=r"gold.talp:2: link '2-3' lies outside .* 2 source"):
        read_alignments(talp, lengths=[(1, 1), (2, 2)], gold_format="talp")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("x-2", "not a link"),
        ("1:2", "not a link"),
        ("1-", "not a link"),
        ("-1-2", "a negative index"),
        ("1--2", "a negative index"),
        ("1?-2", "a negative index"),
    ],
)
def test_a_malformed_link_is_an_error_naming_file_line_and_the_text(tmp_path, text, problem):
    gold = tmp_path / "gold.txt"
    gold.write_text(f"0-0\n0-1 {text} 1-1\n")
    with pytest.raises(CorpusError) as error:
        read_alignments(gold)
    assert f"gold.txt:2: {text!r} is {problem}" in str(error.value)


def test_a_link_outside_its_sentence_pair_is_an_error_when_the_lengths_are_known(tmp_path):
    gold = tmp_path / "gold.txt"
    gold.write_text("0-0 1-1\n2-0\n")
    assert read_alignments(gold)[0] == [{(0, 0), (1, 1)}, {(2, 0)}]  # unchecked
    with pytest.raises(CorpusError, match=r"gold.txt:2: link '2-0' lies outside .* 2 source"):
        read_alignments(gold, lengths=[(2, 2), (2, 3)])


def test_gzipped_alignments_read_like_plain_ones(tmp_path):
    gold = tmp_path / "gold.txt.gz"
    with gzip.open(gold, "wt") as file:
        file.write("0-0 1p1\n\n1-0\n")
    sures, possibles = read_alignments(gold, lengths=[(2, 2), (1, 1), (2, 1)])
    assert sures == [{(0, 0)}, set(), {(1, 0)}]
    assert possibles == [{(0, 0), (1, 1)}, set(), {(1, 0)}]


def test_a_line_count_mismatch_names_both_sides_and_both_counts(tmp_path):
    gold = tmp_path / "gold.txt"
    gold.write_text("0-0\n0-0\n")
    with pytest.raises(CorpusError) as error:
        read_alignments(gold, lengths=[(1, 1)] * 3, pairs_from="t.en + t.de")
    message = str(error.value)
    assert "gold.txt has 2 lines" in message and "t.en + t.de has 3 sentence pairs" in message


# --- Attention's argmax links -------------------------------------------------------------


def test_argmax_links_skip_the_source_end_marker_and_the_target_end_marker():
    attention = [
        # source: 2 words + </s>; target: 2 words + </s>
        np.array([[0.1, 0.2, 0.7], [0.6, 0.3, 0.1], [0.0, 0.0, 1.0]]),
        # source: 1 word + </s>; target: 1 word + </s>
        np.array([[0.3, 0.7], [0.1, 0.9]]),
    ]
    # row 0 of sentence 0 weighs </s> most: its best real word is 1
    assert argmax_links(attention) == [{(1, 0), (0, 1)}, {(0, 0)}]


def test_an_empty_source_or_reference_has_no_links():
    only_the_end = [np.ones((2, 1)), np.ones((1, 1))]  # only </s> to attend to, or to write
    assert argmax_links(only_the_end) == [set(), set()]


def test_attention_links_of_a_sorted_padded_batch_equal_each_pair_aligned_alone():
    model = tiny_model(dtype=torch.float32)
    vocab = Vocab("abcdefghi")  # 13 ids, as the tiny model has
    pairs = [([4, 5, 6, 7, 8], [9, 10]), ([11], [4, 5, 6, 7]), ([], [5]), ([4, 12], [])]
    batched = token_links(engine_of(model, vocab), pairs, batch_size=3)
    for pair, links in zip(pairs, batched, strict=True):
        src = torch.tensor([[*pair[0], vocab.eos_id]])
        tgt_in = torch.tensor([[vocab.bos_id, *pair[1]]])
        alpha = model(src, torch.tensor([src.size(1)]), tgt_in).attention[0]  # (T_tgt, T_src)
        n, m = len(pair[0]), len(pair[1])
        expected = {(int(alpha[j, :n].argmax()), j) for j in range(m)} if n else set()
        assert links == expected
    assert [len(links) for links in batched] == [2, 4, 0, 0]


def test_a_model_without_attention_cannot_align():
    vocab = Vocab("abcdefghi")
    with pytest.raises(ValueError, match="has no attention to align with"):
        token_links(engine_of(tiny_model(attention="none"), vocab), [([4], [5])])


@pytest.fixture(scope="module")
def reversal_models(tmp_path_factory):
    """An untrained and a briefly trained attention model for string reversal (seconds)."""
    from alignmt.training.run import train

    run = tmp_path_factory.mktemp("reverse")
    cfg = load_config(
        "configs/reverse.yaml",
        [
            "train.steps=200",
            "train.lr=1e-2",
            "data.min_len=3",
            "data.max_len=6",
            "model.emb_dim=16",
            "model.enc_hidden=32",
            "model.dec_hidden=64",
            "model.attn_dim=32",
            f"out_dir={run}",
        ],
    )
    train(cfg, progress=False)
    torch.manual_seed(3)
    size = len(Vocab(ALPHABET))
    untrained = Seq2Seq.from_config(cfg.model, src_vocab=size, tgt_vocab=size)
    return {"untrained": untrained.eval(), "trained": load_checkpoint(run).model}


@pytest.mark.parametrize("which", ["untrained", "trained"])
def test_reversal_aer_is_one_minus_the_alignment_accuracy_of_score_task(reversal_models, which):
    # Reversal's gold alignment is exact and one link per character, so |A| = |S| = n L
    # and AER = 1 - |A∩S| / (n L): one minus the share of argmaxes on the right position.
    # score_task takes the argmax over </s> too and counts it a miss there, where the links
    # take the best character instead: those of its misses that this makes right are added.
    model = reversal_models[which]
    vocab, length, n = Vocab(ALPHABET), 6, 200
    accuracy = score_task(model, vocab, "reverse", length, n=n, seed=5).alignment
    pairs = [(vocab.encode(s), vocab.encode(t)) for s, t in eval_set("reverse", length, n, seed=5)]
    hyps = token_links(engine_of(model, vocab), pairs, batch_size=64)
    gold = [{(length - 1 - j, j) for j in range(length)}] * n
    score = alignment_error_rate(hyps, gold)

    batch = make_batch(pairs, vocab, vocab)
    alpha = model(batch.src, batch.src_len, batch.tgt_in).attention[:, :length]  # (n, L, L + 1)
    right = torch.arange(length - 1, -1, -1)  # (L,) the anti-diagonal
    on_end = alpha.argmax(-1) == length  # (n, L)
    rescued = int((on_end & (alpha[..., :length].argmax(-1) == right)).sum())
    assert score.aer == pytest.approx(1 - accuracy - rescued / (n * length), abs=1e-6)
    assert score.precision == score.recall == pytest.approx(1 - score.aer)
    if which == "untrained":
        assert rescued > 0  # so the </s> rule is exercised: 1 - AER > accuracy here
    else:
        assert on_end.sum() == 0 and score.aer == pytest.approx(1 - accuracy, abs=1e-6)


# --- Words of a sentence ------------------------------------------------------------------


def test_moses_words_are_its_tokens_and_a_blank_line_has_none():
    words = sentence_words(MosesTokenizer(lang="en", lowercase=True), "A dog's ball.")
    assert words.tokens == words.words == ["a", "dog", "'s", "ball", "."]
    assert words.word_of == [0, 1, 2, 3, 4]
    assert sentence_words(MosesTokenizer(lang="en"), "  ") == Words([], [], [])


def test_sentencepiece_pieces_group_into_the_whitespace_separated_words():
    sentences = ["the dog runs", "a red dog sleeps now", "the small cat runs"] * 20
    spm = SentencePieceTokenizer.train(sentences, vocab_size=30, lowercase=True)
    line = "The reddish dogs run"
    words = sentence_words(spm, line)
    assert len(words.tokens) > 4  # the test needs words cut into pieces
    assert words.words == line.lower().split()
    assert words.word_of == sorted(words.word_of) and words.word_of[-1] == 3


def test_word_links_join_the_pieces_of_a_word(monkeypatch):
    source = Words(["▁a", "b", "▁c"], ["ab", "c"], [0, 0, 1])
    reference = Words(["▁x", "▁y", "z"], ["x", "yz"], [0, 1, 1])
    found = [{(0, 0), (1, 0), (2, 1), (2, 2)}]
    monkeypatch.setattr("alignmt.analysis.align.token_links", lambda *args, **kwargs: found)
    translator = Translator.__new__(Translator)
    translator.src_vocab, translator.tgt_vocab = Vocab([]), Vocab([])
    translator.engine = None  # token_links, which would read it, is replaced
    assert word_links(translator, [source], [reference]) == [{(0, 0), (1, 1)}]


# --- The evaluate command -----------------------------------------------------------------


def _toy_test_set(folder):
    (folder / "t.en").write_text("a red dog runs\nthe cat sleeps\n\nsmall dog\n")
    (folder / "t.de").write_text("ein roter hund läuft .\nder katze schläft .\n\nkleiner hund .\n")
    return str(folder / "t.en"), str(folder / "t.de")


def _evaluate(run, folder, *flags) -> list[str]:
    """`alignmt evaluate` of `run` on `_toy_test_set(folder)`, writing into `folder`, not
    into the run, which other tests read."""
    src, ref = str(folder / "t.en"), str(folder / "t.de")
    return ["evaluate", str(run), "--out", str(folder / "eval"), "--src", src, "--ref", ref, *flags]


def test_evaluate_prints_precision_recall_and_aer_against_gold_links(toy_run, tmp_path, capsys):
    gold = tmp_path / "gold.align"
    # word-for-word with the final "." unaligned, plus one possible link
    gold.write_text("0-0 1-1 2-2 3-3\n0-0 1-1 2-2 2?3\n\n0-0 1-1\n")
    src, ref = _toy_test_set(tmp_path)
    argv = _evaluate(toy_run, tmp_path, "--gold-alignments", str(gold))
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "teacher-forced argmax over 4 sentence pairs (12 links)" in printed
    row = next(line for line in printed.splitlines() if line.startswith(f"| {gold} |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1:3] == ["9", "10"]  # sure and possible gold links
    precision, recall, aer = (float(cell.rstrip("%")) for cell in cells[3:])
    # 12 hypothesis links (one per reference word) against 9 sure ones
    assert aer == pytest.approx(100 - 100 * (recall * 9 / 100 + precision * 12 / 100) / 21, abs=0.1)
    ckpt = load_checkpoint(toy_run)  # the same numbers as the library's, from the same files
    translator = open_translator(ckpt)
    cut = [
        [sentence_words(tok, line) for line in read_lines(path)]
        for tok, path in ((ckpt.src_tokenizer, src), (ckpt.tgt_tokenizer, ref))
    ]
    expected = alignment_error_rate(word_links(translator, *cut), *read_alignments(gold))
    assert (precision, recall, aer) == tuple(
        round(100 * x, 1) for x in (expected.precision, expected.recall, expected.aer)
    )
    assert "BLEU" not in printed

    # the same links counted from 1 ("talp"), read with --gold-format talp: the same scores
    talp = tmp_path / "gold.talp"
    talp.write_text("1-1 2-2 3-3 4-4\n1-1 2-2 3-3 3p4\n\n1-1 2-2\n")
    argv[-1] = str(talp)
    assert main([*argv, "--gold-format", "talp"]) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith(f"| {talp} |"))
    assert [cell.strip() for cell in row.strip("|").split("|")][1:] == cells[1:]
    assert main(argv) == 2  # read as Pharaoh, its last word's links fall past the pairs
    assert "gold.talp:1: link '4-4' lies outside" in capsys.readouterr().err


def test_evaluate_names_the_gold_file_line_and_both_line_counts(toy_run, tmp_path, capsys):
    gold = tmp_path / "gold.align"
    src, ref = _toy_test_set(tmp_path)
    base = _evaluate(toy_run, tmp_path, "--gold-alignments", str(gold))
    gold.write_text("0-0\n")
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "gold.align has 1 lines" in err and f"{src} + {ref} has 4 sentence pairs" in err
    gold.write_text("0-0\n0-9\n\n0-0\n")
    assert main(base) == 2
    assert "gold.align:2: link '0-9' lies outside" in capsys.readouterr().err
    assert main([*base, "--heatmaps", "1"]) == 2  # nothing is translated to draw
    assert "need translations" in capsys.readouterr().err


def test_reference_aligner_without_eflomal_says_how_to_install_it(toy_run, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "eflomal", None)  # makes `import eflomal` fail
    assert main(["evaluate", str(toy_run), "--reference-aligner", "eflomal"]) == 2
    assert "pip install 'eflomal>=2.0'" in capsys.readouterr().err


# --- eflomal ------------------------------------------------------------------------------


def _require_eflomal():
    try:
        import eflomal  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            raise  # CI installs the align extra: a missing eflomal is a broken install there
        pytest.skip("eflomal is not installed (pip install -e '.[align]')")


def test_eflomal_finds_the_word_for_word_alignment_of_the_toy_corpus(tmp_path):
    _require_eflomal()
    prefix = write_toy_corpus(tmp_path, n=300)
    src, tgt = ([line.split() for line in read_lines(f"{prefix}.{lang}")] for lang in ("en", "de"))
    links = eflomal_links(src, tgt)
    gold = [{(k, k) for k in range(len(words))} for words in src]  # "." is left unaligned
    assert len(links) == 300
    assert all(len({j for _, j in sentence}) == len(sentence) for sentence in links)  # forward
    assert alignment_error_rate(links, gold).aer < 0.1
    assert all(tgt[0][j] == LEXICON[src[0][i]] for i, j in links[0] if j < len(src[0]))


def test_evaluate_scores_attention_against_eflomal_trained_on_the_runs_corpus(
    toy_run, tmp_path, capsys
):
    _require_eflomal()
    _toy_test_set(tmp_path)
    argv = _evaluate(toy_run, tmp_path, "--reference-aligner", "eflomal")
    assert main(argv) == 0
    captured = capsys.readouterr()
    row = next(line for line in captured.out.splitlines() if line.startswith("| eflomal"))
    assert "forward links, all sure" in row
    assert "eflomal" in captured.err  # a progress line per stage
