"""GNMT's coverage penalty in beam search: its value, that it changes the winner the way
it should, that padding and streaming never change it, and its flag and config key."""

from __future__ import annotations

import math

import pytest
import torch

from alignmt.cli.parser import build_parser
from alignmt.config import ConfigError, load_config
from alignmt.decoding.torch_engine.beam import coverage_penalty
from alignmt.decoding.torch_engine.plan import SearchPlan
from alignmt.decoding.torch_engine.search import beam_decode, beam_search, search
from alignmt.model.distribution import LogProbs
from tests.conftest import padded_batch, tiny_model

BOS, EOS, X, Y = 1, 2, 3, 4


def test_the_penalty_sums_the_log_of_each_words_capped_coverage_and_skips_padding():
    covered = torch.tensor([[0.5, 1.5, 0.0], [1.0, 1.0, 1.0], [0.25, 0.5, 0.0]])
    cp = coverage_penalty(covered, beta=0.2)
    expected = [0.2 * math.log(0.5), 0.0, 0.2 * (math.log(0.25) + math.log(0.5))]
    assert cp.tolist() == pytest.approx(expected, abs=1e-6)


def two_way_step(prev, state, memory):
    """X first (p 0.6) looks at word 0 twice; Y (p 0.4) then looks at word 1: both then end.
    X </s> scores log 0.54 and covers (1.8, 0.2); Y </s> scores log 0.36 and covers (1, 1)."""
    logits = torch.full((len(prev), 5), -30.0)
    first = prev == BOS
    logits[first, X], logits[first, Y] = math.log(0.6), math.log(0.4)
    logits[~first, EOS], logits[~first, X] = math.log(0.9), math.log(0.1)
    near, far = torch.tensor([0.9, 0.1]), torch.tensor([0.1, 0.9])
    alpha = torch.where((prev == Y)[:, None], far, near)
    return LogProbs(logits), state, alpha


@pytest.mark.parametrize("beta,winner", [(0.0, [X, EOS]), (0.2, [X, EOS]), (1.0, [Y, EOS])])
def test_the_penalty_prefers_the_output_that_attended_to_every_word(beta, winner):
    # ranks: X </s> log 0.54 + beta log 0.2, Y </s> log 0.36; they cross at beta = 0.252
    batch = [((torch.zeros(1),), (torch.zeros(1),), torch.tensor([5]))]
    how = SearchPlan(beam_size=2, width=1, coverage_penalty=beta)
    (best,) = beam_search(two_way_step, batch, how, bos_id=BOS, eos_id=EOS)[0][:1]
    assert best.tokens == winner
    assert best.score == pytest.approx(math.log(0.54 if winner[0] == X else 0.36), abs=1e-5)


def test_a_model_without_attention_is_refused():
    model = tiny_model(attention="none")
    src, src_len, _, _ = padded_batch()
    with pytest.raises(ValueError, match="coverage_penalty sums attention"):
        beam_decode(model, src, src_len, beam_size=2, coverage_penalty=0.5)


@pytest.mark.parametrize("order", ["bahdanau", "luong"])
def test_streamed_and_padded_sentences_search_as_they_do_alone(order):
    attention = "additive" if order == "bahdanau" else "general"
    model = tiny_model(attention=attention, order=order, seed=4)
    src, src_len, _, _ = padded_batch(src_lens=(3, 9, 2, 6, 5), tgt_lens=(1,) * 5)
    batches = [
        (src[i : i + 2, : int(src_len[i : i + 2].max())], src_len[i : i + 2])
        for i in range(0, 5, 2)
    ]
    how = dict(beam_size=3, coverage_penalty=2.0, length_penalty=0.6)
    streamed = search(model, batches, SearchPlan(width=2, **how))
    for b, n in enumerate(src_len.tolist()):
        (alone,) = beam_decode(model, src[b : b + 1, :n], src_len[b : b + 1], **how)
        assert streamed[b][0].tokens == alone[0].tokens
        assert streamed[b][0].score == pytest.approx(alone[0].score, rel=1e-9)


def test_the_flag_and_the_config_key_take_a_weight_of_zero_or_more(capsys):
    parser = build_parser()
    args = parser.parse_args(["evaluate", "runs/x", "--coverage-penalty", "0.2"])
    assert args.coverage_penalty == 0.2
    with pytest.raises(SystemExit):
        parser.parse_args(["translate", "runs/x", "--coverage-penalty", "-1"])
    assert "must be a finite number, 0 or more" in capsys.readouterr().err
    assert load_config(None, ["search.coverage_penalty=0.4"]).search.coverage_penalty == 0.4
    with pytest.raises(ConfigError, match=r"search\.coverage_penalty: must not be negative"):
        load_config(None, ["search.coverage_penalty=-0.1"])


def test_the_explorers_beam_tree_ranks_hypotheses_as_the_search_does():
    from alignmt.decoding.rules import max_output_len
    from alignmt.decoding.torch_engine.trace import beam_trace

    model = tiny_model(seed=6)
    src, src_len, _, _ = padded_batch(src_lens=(7,), tgt_lens=(1,))
    max_len = int(max_output_len(src_len.tolist(), 2.0, 10)[0])
    for beta in (0.0, 3.0):
        trace = beam_trace(model, src[0], max_len=max_len, beam_size=3, alpha=0.6, beta=beta)
        how = dict(beam_size=3, length_penalty=0.6, coverage_penalty=beta)
        (best,) = beam_decode(model, src, src_len, **how)[0]
        assert trace.tokens(trace.finished[0]) == best.tokens
