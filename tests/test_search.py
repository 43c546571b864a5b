"""Greedy search on hand-built step functions and on tiny models, and greedy and beam search
under bfloat16 autocast."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from alignmt.decoding.rules import max_output_len
from alignmt.decoding.torch_engine.greedy import greedy_search
from alignmt.decoding.torch_engine.plan import SearchPlan
from alignmt.decoding.torch_engine.search import beam_search, decode, search
from alignmt.model.distribution import LogProbs
from tests.conftest import padded_batch, tiny_model

BOS, EOS = 1, 2
X, Y, Z = 3, 4, 5  # the made-up language's words


def scripted_step(script: list[list[int]], vocab: int = 6):
    """A step function that, for sentence b at step t, puts probability 0.7 on script[b][t]
    (its last token repeats) and shares the rest equally. The state is each row's step
    counter, the memory each row's script, and alpha a fixed row; `step.rows` records how
    many rows each call computed. Returns the step function, the state and the memory."""
    longest = max(map(len, script))
    table = torch.tensor([tokens + tokens[-1:] * (longest - len(tokens)) for tokens in script])

    def step(prev, state, memory):
        (t,), (rows,) = state, memory
        step.rows.append(len(prev))
        logits = torch.full((len(prev), vocab), math.log(0.3 / (vocab - 1)))
        logits[torch.arange(len(prev)), rows[torch.arange(len(prev)), t.clamp(max=longest - 1)]] = (
            math.log(0.7)
        )
        return LogProbs(logits), (t + 1,), torch.full((len(prev), 2), 0.5)

    step.rows = []
    return step, (torch.zeros(len(script), dtype=torch.long),), (table,)


def test_greedy_follows_the_argmax_and_stops_each_sentence_at_its_end_symbol():
    script = [[4, 5, EOS], [5, EOS], [4, 4, 4, 4, 4, 4]]
    step, state, memory = scripted_step(script)
    tokens, lengths, scores, token_scores, attention = greedy_search(
        step,
        [(state, memory, torch.tensor([9, 9, 4]))],
        SearchPlan(width=3),
        bos_id=BOS,
        eos_id=EOS,
    )
    assert lengths.tolist() == [3, 2, 4]  # the third sentence hit its length limit
    assert step.rows == [3, 3, 2, 1]  # each ended sentence left the batch
    assert tokens[0, :3].tolist() == [4, 5, EOS] and tokens[1, :2].tolist() == [5, EOS]
    assert tokens[2, :4].tolist() == [4, 4, 4, 4]
    assert tokens.size(1) == 4  # stopped once every sentence had ended
    torch.testing.assert_close(scores, lengths.float() * math.log(0.7))
    # each token's log-probability, zero past a sentence's end
    expected = (torch.arange(4) < lengths[:, None]) * math.log(0.7)
    torch.testing.assert_close(token_scores, expected.float())
    # finished sentences are padded with </s> and zero attention
    assert tokens[1, 2:].tolist() == [EOS, EOS]
    assert torch.equal(attention[1, 2:], torch.zeros(2, 2))


def test_an_ended_sentence_hands_its_row_to_the_next_one_from_any_batch():
    script = [[X, EOS], [Y, Y, Y, EOS], [EOS], [Z, EOS], [X, X, EOS]]
    step, (t,), (table,) = scripted_step(script)
    batches = [
        ((t[:3],), (table[:3],), torch.full((3,), 9)),
        ((t[3:],), (table[3:],), torch.full((2,), 9)),
    ]
    tokens, lengths, scores, _, attention = greedy_search(
        step, batches, SearchPlan(width=2), bos_id=BOS, eos_id=EOS
    )
    # rows stay full while sentences wait: 0 and 1, then 2, 3 and 4 take over ended rows
    assert step.rows == [2, 2, 2, 2, 2, 1, 1]
    assert lengths.tolist() == [2, 4, 1, 2, 3]
    assert [tokens[b, :n].tolist() for b, n in enumerate(lengths.tolist())] == script
    torch.testing.assert_close(scores, lengths.float() * math.log(0.7))
    assert attention.shape == (5, 4, 2) and torch.equal(attention[2, 1:], torch.zeros(3, 2))


def test_streamed_sentences_decode_as_they_do_alone():
    model = tiny_model(bidirectional=True, readout="tanh", seed=2)
    src, src_len, _, _ = padded_batch(src_lens=(3, 9, 2, 6, 5, 7, 4), tgt_lens=(1,) * 7)
    # batches padded to their own lengths, so the memory joined in a step must be padded too
    batches = [
        (src[i : i + 2, : int(src_len[i : i + 2].max())], src_len[i : i + 2])
        for i in range(0, 7, 2)
    ]
    streamed = [hyp for [hyp] in search(model, batches, SearchPlan(width=3))]
    assert len(streamed) == 7
    for b, n in enumerate(src_len.tolist()):
        (alone,) = decode(model, src[b : b + 1, :n], src_len[b : b + 1])
        assert streamed[b].tokens == alone.tokens
        assert math.isclose(streamed[b].score, alone.score, rel_tol=1e-9)
        torch.testing.assert_close(
            torch.as_tensor(streamed[b].attention), torch.as_tensor(alone.attention)
        )


def test_greedy_search_of_no_sentence_returns_empty_outputs():
    tokens, lengths, scores, _, attention = greedy_search(
        None, [], SearchPlan(width=4), bos_id=BOS, eos_id=EOS
    )
    assert tokens.shape == (0, 0) and lengths.shape == scores.shape == (0,) and attention is None
    with pytest.raises(ValueError, match="width must be at least 1"):
        SearchPlan(width=0)


def test_the_step_function_sees_each_previous_choice():
    seen = []

    def step(prev, state, memory):
        seen.append(prev.tolist())
        (t,) = state
        logits = torch.zeros(1, 6)
        logits[0, [4, 5, EOS][int(t)]] = 5.0
        return LogProbs(logits), (t + 1,), None

    start = ((torch.zeros(1, dtype=torch.long),), None, torch.tensor([10]))
    tokens, _, _, _, attention = greedy_search(
        step, [start], SearchPlan(width=1), bos_id=BOS, eos_id=EOS
    )
    assert seen == [[BOS], [4], [5]]
    assert tokens[0].tolist() == [4, 5, EOS] and attention is None


def test_the_length_limit_grows_with_the_source():
    assert max_output_len([1, 10], 2.0, 10).tolist() == [12, 30]
    assert max_output_len([7], 1.5, 0).tolist() == [10]
    assert max_output_len([0, 3], 0.1, 0).tolist() == [1, 1]  # at least one token


def test_greedy_output_is_the_argmax_of_the_teacher_forced_model_fed_its_own_output():
    model = tiny_model(
        bidirectional=True, readout="maxout", seed=2
    )  # an initialisation with no early </s>
    src, src_len, _, _ = padded_batch()
    hypotheses = decode(model, src, src_len, max_len_ratio=1.0, max_len_offset=3)
    assert min(len(h.tokens) for h in hypotheses) > 3
    for b, hyp in enumerate(hypotheses):
        n = int(src_len[b])
        tgt_in = torch.tensor([[BOS, *hyp.tokens[:-1]]])
        out = model(src[b : b + 1, :n], src_len[b : b + 1], tgt_in)
        log_probs = out.log_probs.logits[0].log_softmax(-1)
        assert out.log_probs.logits[0].argmax(-1).tolist() == hyp.tokens
        expected = log_probs.gather(1, torch.tensor(hyp.tokens)[:, None]).sum().item()
        assert math.isclose(hyp.score, expected, rel_tol=1e-9)
        torch.testing.assert_close(
            torch.as_tensor(hyp.attention), torch.as_tensor(out.attention)[0]
        )
        assert len(hyp.tokens) <= n + 3


def test_a_sentence_decodes_the_same_alone_and_inside_a_padded_batch():
    model = tiny_model(
        rnn="lstm", layers=2, attention="general", order="luong", dtype=torch.float32
    )
    src, src_len, _, _ = padded_batch(src_lens=(9, 2, 5, 7), tgt_lens=(1, 1, 1, 1))
    batch = decode(model, src, src_len)
    for b, n in enumerate(src_len.tolist()):
        (alone,) = decode(model, src[b : b + 1, :n], src_len[b : b + 1])
        assert alone.tokens == batch[b].tokens
        assert math.isclose(alone.score, batch[b].score, rel_tol=1e-5)
        torch.testing.assert_close(
            torch.as_tensor(alone.attention), torch.as_tensor(batch[b].attention)
        )


def test_vanilla_hypotheses_carry_no_attention():
    model = tiny_model(attention="none")
    src, src_len, _, _ = padded_batch()
    assert all(h.attention is None for h in decode(model, src, src_len))


# --- bfloat16 (autocast) ------------------------------------------------------------------


def bfloat16_step(step):
    """`step` with its logits and attention in bfloat16, as a model's under autocast."""

    def low(prev, state, memory):
        log_probs, state, alpha = step(prev, state, memory)
        return LogProbs(log_probs.logits.bfloat16()), state, alpha.bfloat16()

    return low


def test_bfloat16_logits_are_scored_and_ranked_in_float32():
    script = [[X, Y, X, Y, X, EOS], [Z, Z, EOS]]
    logits = torch.full((6,), math.log(0.3 / 5))
    logits[X] = math.log(0.7)
    # what each chosen token's log-probability is, from logits rounded to bfloat16
    per_token = float(logits.bfloat16().float().log_softmax(-1)[X])
    step, state, memory = scripted_step(script)
    start = [(state, memory, torch.tensor([9, 9]))]
    _, lengths, scores, _, attention = greedy_search(
        bfloat16_step(step), start, SearchPlan(width=2), bos_id=BOS, eos_id=EOS
    )
    assert lengths.tolist() == [6, 3]
    assert scores.dtype == attention.dtype == torch.float32
    torch.testing.assert_close(scores, lengths.float() * per_token)
    step, state, memory = scripted_step(script)
    start = [(state, memory, torch.tensor([9, 9]))]
    how = SearchPlan(beam_size=3, width=2)
    beams = beam_search(bfloat16_step(step), start, how, bos_id=BOS, eos_id=EOS)
    for (best, *_), tokens in zip(beams, script, strict=True):
        assert best.tokens == tokens
        assert math.isclose(best.score, len(tokens) * per_token, rel_tol=1e-6)
        assert best.attention.dtype == np.float32


AUTOCAST_ARCHS = [
    dict(),
    dict(rnn="lstm", layers=2, bidirectional=False, attention="general"),
    dict(order="luong", attention="general"),  # its input feeding starts as float32 zeros
    dict(attention="none"),
]


@pytest.mark.parametrize("arch", AUTOCAST_ARCHS, ids=lambda a: "-".join(map(str, a.values())))
def test_models_decode_under_bfloat16_autocast_into_float32_results(arch):
    model = tiny_model(dtype=torch.float32, **arch)
    src, src_len, _, _ = padded_batch(src_lens=(3, 9, 2, 6, 5), tgt_lens=(1,) * 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        # width 2: ended sentences hand their rows to new ones, whose first state is the
        # encoder's dtype while the rows' states are the steps' bfloat16
        greedy = search(model, [(src, src_len)], SearchPlan(width=2))
        beams = search(model, [(src, src_len)], SearchPlan(width=2, beam_size=3))
    for hyp in [*(g[0] for g in greedy), *(b[0] for b in beams)]:
        assert math.isfinite(hyp.score)
        if model.has_attention:
            assert hyp.attention.dtype == np.float32
            ones = torch.ones(len(hyp.tokens))
            torch.testing.assert_close(
                torch.as_tensor(hyp.attention).sum(-1), ones, atol=1e-2, rtol=0
            )
