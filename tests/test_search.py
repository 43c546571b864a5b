"""Greedy search on a hand-built step function and on tiny models."""

from __future__ import annotations

import math

import torch

from alignmt.search import decode, greedy_search, max_output_len
from tests.conftest import padded_batch, tiny_model

BOS, EOS = 1, 2


def scripted_step(script: list[list[int]], vocab: int = 6):
    """A step function that, for sentence b at step t, puts probability 0.7 on script[b][t]
    and shares the rest equally; the state is the step counter, the attention a fixed row."""

    def step(prev: torch.Tensor, t: int):
        logits = torch.full((len(script), vocab), math.log(0.3 / (vocab - 1)))
        for b, tokens in enumerate(script):
            logits[b, tokens[min(t, len(tokens) - 1)]] = math.log(0.7)
        alpha = torch.full((len(script), 2), 0.5)
        return logits, t + 1, alpha

    return step


def test_greedy_follows_the_argmax_and_stops_each_sentence_at_its_end_symbol():
    script = [[4, 5, EOS], [5, EOS], [4, 4, 4, 4, 4, 4]]
    tokens, lengths, scores, attention = greedy_search(
        scripted_step(script), 0, bos_id=BOS, eos_id=EOS, max_len=torch.tensor([9, 9, 4])
    )
    assert lengths.tolist() == [3, 2, 4]  # the third sentence hit its length limit
    assert tokens[0, :3].tolist() == [4, 5, EOS] and tokens[1, :2].tolist() == [5, EOS]
    assert tokens[2, :4].tolist() == [4, 4, 4, 4]
    assert tokens.size(1) == 4  # stopped once every sentence had ended
    torch.testing.assert_close(scores, lengths.float() * math.log(0.7))
    # finished sentences are padded with </s> and zero attention
    assert tokens[1, 2:].tolist() == [EOS, EOS]
    assert torch.equal(attention[1, 2:], torch.zeros(2, 2))


def test_the_step_function_sees_each_previous_choice():
    seen = []

    def step(prev, state):
        seen.append(prev.tolist())
        logits = torch.zeros(1, 6)
        logits[0, [4, 5, EOS][state]] = 5.0
        return logits, state + 1, None

    tokens, _, _, attention = greedy_search(
        step, 0, bos_id=BOS, eos_id=EOS, max_len=torch.tensor([10])
    )
    assert seen == [[BOS], [4], [5]]
    assert tokens[0].tolist() == [4, 5, EOS] and attention is None


def test_the_length_limit_grows_with_the_source():
    assert max_output_len(torch.tensor([1, 10]), 2.0, 10).tolist() == [12, 30]
    assert max_output_len(torch.tensor([7]), 1.5, 0).tolist() == [10]


def test_greedy_output_is_the_argmax_of_the_teacher_forced_model_fed_its_own_output():
    model = tiny_model(bidirectional=True, readout="maxout", seed=2)  # seed 2: no early </s>
    src, src_len, _, _ = padded_batch()
    hypotheses = decode(model, src, src_len, max_len_ratio=1.0, max_len_offset=3)
    assert min(len(h.tokens) for h in hypotheses) > 3
    for b, hyp in enumerate(hypotheses):
        n = int(src_len[b])
        tgt_in = torch.tensor([[BOS, *hyp.tokens[:-1]]])
        out = model(src[b : b + 1, :n], src_len[b : b + 1], tgt_in)
        log_probs = out.logits[0].log_softmax(-1)
        assert out.logits[0].argmax(-1).tolist() == hyp.tokens
        expected = log_probs.gather(1, torch.tensor(hyp.tokens)[:, None]).sum().item()
        assert math.isclose(hyp.score, expected, rel_tol=1e-9)
        torch.testing.assert_close(hyp.attention, out.attention[0])
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
        torch.testing.assert_close(alone.attention, batch[b].attention)


def test_vanilla_hypotheses_carry_no_attention():
    model = tiny_model(attention="none")
    src, src_len, _, _ = padded_batch()
    assert all(h.attention is None for h in decode(model, src, src_len))
