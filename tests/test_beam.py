"""Beam search on a made-up language and on tiny models: what it keeps and ends, when a
sentence stops, how stopped sentences hand their rows on, and that a beam of one is greedy."""

from __future__ import annotations

import math

import pytest
import torch

from alignmt.decoding.rules import length_penalty, max_output_len
from alignmt.decoding.torch_engine.greedy import greedy_search
from alignmt.decoding.torch_engine.plan import SearchPlan
from alignmt.decoding.torch_engine.search import beam_decode, beam_search, decode, search
from alignmt.model.distribution import LogProbs
from tests.conftest import padded_batch, tiny_model
from tests.test_search import BOS, EOS, X, Y, Z


def markov_step(rules: list[dict], vocab: int = 6, steps: int = 12):
    """A step function over a made-up language, and the memory it reads.

    For sentence b, the next token after `prev` at step t (0-based) is drawn from
    rules[b][(t, prev)] if given, else rules[b][prev], else uniformly from </s>, X, Y, Z;
    each rule is a dict token -> probability. The state is the step counter; the memory
    holds each sentence's tables, so beams and dropped sentences must keep the right rows.
    alpha is one-hot on `prev` (T_src = vocab), so a hypothesis' attention rows spell out
    the tokens it was fed. `step.rows` records how many rows each call computed.
    """
    tables = torch.zeros(len(rules), steps, vocab, vocab, dtype=torch.float64)
    tables[..., [EOS, X, Y, Z]] = 0.25
    for b, sentence in enumerate(rules):
        for key, probs in sorted(sentence.items(), key=lambda kv: isinstance(kv[0], tuple)):
            t, prev = key if isinstance(key, tuple) else (slice(None), key)
            tables[b, t, prev] = 0.0
            for token, p in probs.items():
                tables[b, t, prev, token] = p

    def step(prev, state, memory):
        (t,), (table,) = state, memory
        step.rows.append(len(prev))
        logits = table[torch.arange(len(prev)), t.clamp(max=steps - 1), prev].log()  # (N, V)
        alpha = torch.nn.functional.one_hot(prev, vocab).double()  # (N, V)
        return LogProbs(logits), (t + 1,), alpha

    step.rows = []
    state = (torch.zeros(len(rules), dtype=torch.long),)
    return step, state, (tables,)


def beam_search_over(model, batches, how):
    """Beam search itself over (src, src_len) batches, even for a beam of one, which
    `search` hands to greedy search's loop; attention is over the padded source."""

    def encoded():
        for src, src_len in batches:
            memory, state = model.encode(src, src_len)
            limit = max_output_len(src_len.tolist(), how.max_len_ratio, how.max_len_offset)
            yield state, memory, torch.from_numpy(limit)

    return beam_search(model.decode_step, encoded(), how, bos_id=model.bos_id, eos_id=model.eos_id)


def assert_search_carries_each_rows_state(model) -> None:
    """Greedy search streamed, beam search of one and beam search of three over five
    sentences in batches of two agree with `model` decoding each sentence alone, and a
    beam's score is the model's teacher-forced log-probability of its output: the state
    the model carries from step to step (coverage, a monotonic walk) followed each row as
    batches refilled and beams reordered their rows."""
    src, src_len, _, _ = padded_batch(src_lens=(3, 9, 2, 6, 5), tgt_lens=(1,) * 5)
    batches = [
        (src[i : i + 2, : int(src_len[i : i + 2].max())], src_len[i : i + 2])
        for i in range(0, 5, 2)
    ]
    streamed = [hyp for [hyp] in search(model, batches, SearchPlan(width=2))]
    beam_one = beam_search_over(model, batches, SearchPlan(width=2, beam_size=1))
    beam_three = search(model, batches, SearchPlan(width=2, beam_size=3))
    for b, n in enumerate(src_len.tolist()):
        (alone,) = decode(model, src[b : b + 1, :n], src_len[b : b + 1])
        assert streamed[b].tokens == alone.tokens == beam_one[b][0].tokens
        assert math.isclose(streamed[b].score, alone.score, rel_tol=1e-9)
        best = beam_three[b][0]
        tgt_in = torch.tensor([[model.bos_id, *best.tokens[:-1]]])
        with torch.no_grad():
            logits = model(src[b : b + 1, :n], src_len[b : b + 1], tgt_in).log_probs.scores[0]
        forced = logits.log_softmax(-1)[torch.arange(len(best.tokens)), best.tokens].sum()
        assert math.isclose(best.score, float(forced), rel_tol=1e-9)


def mock_beam(rules, max_len, **kwargs):
    step, state, memory = markov_step(rules)
    start = (state, memory, torch.tensor(max_len))
    how = SearchPlan(width=len(rules), **kwargs)
    hyps = beam_search(step, [start], how, bos_id=BOS, eos_id=EOS)
    return hyps, step.rows


def assert_spells_its_inputs(hyp):
    """The mock's attention rows are one-hot on each step's input: <s> then the tokens."""
    inputs = torch.tensor([BOS, *hyp.tokens[:-1]])
    assert torch.equal(
        torch.as_tensor(hyp.attention), torch.nn.functional.one_hot(inputs, 6).double()
    )


def test_length_penalty_is_gnmts():
    assert length_penalty(1, 0.7) == 1.0  # (5 + 1) / 6 = 1 whatever alpha
    assert length_penalty(7, 1.0) == 2.0
    assert length_penalty(19, 0.0) == 1.0
    torch.testing.assert_close(
        length_penalty(torch.tensor([1, 13]), 0.5), torch.tensor([1.0, math.sqrt(3.0)])
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(beam_size=0), "beam_size"),
        (dict(nbest=0), "nbest"),
        (dict(nbest=3), "nbest"),
        (dict(width=0), "width"),
    ],
)
def test_a_search_with_bad_sizes_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SearchPlan(**dict(beam_size=2, nbest=1, width=1) | kwargs)


def test_beam_finds_the_sequence_that_greedy_misses():
    # X is likelier first (0.6), but after X nothing is likely; after Y, </s> nearly is.
    rules = [
        {
            BOS: {X: 0.6, Y: 0.4},
            X: {EOS: 0.3, X: 0.26, Y: 0.24, Z: 0.2},
            Y: {EOS: 0.9, X: 0.05, Y: 0.03, Z: 0.02},
        }
    ]
    step, state, memory = markov_step(rules)
    start = (state, memory, torch.tensor([9]))
    tokens, _, score, _, _ = greedy_search(
        step, [start], SearchPlan(width=1), bos_id=BOS, eos_id=EOS
    )
    assert tokens[0, :2].tolist() == [X, EOS]
    assert math.isclose(float(score[0]), math.log(0.6 * 0.3), rel_tol=1e-12)

    [(best, second)], _ = mock_beam(rules, [9], beam_size=2, nbest=2)
    assert best.tokens == [Y, EOS]
    assert math.isclose(best.score, math.log(0.4) + math.log(0.9), rel_tol=1e-12)
    assert second.tokens == [X, EOS]
    assert math.isclose(second.score, math.log(0.6) + math.log(0.3), rel_tol=1e-12)
    assert_spells_its_inputs(best)
    assert_spells_its_inputs(second)


def test_end_symbol_ends_a_hypothesis():
    # After </s> the language would go on to X for free; a search that kept extending
    # ended beams would return <s> </s> X ... with the same score.
    rules = [
        {
            BOS: {EOS: 0.5, X: 0.3, Y: 0.2},
            X: {EOS: 0.9, X: 0.1},
            Y: {EOS: 0.9, Y: 0.1},
            EOS: {X: 1.0},
        }
    ]
    [hyps], rows = mock_beam(rules, [6], beam_size=3, nbest=3)
    assert [h.tokens for h in hyps] == [[EOS], [X, EOS], [Y, EOS]]
    expected = [math.log(0.5), math.log(0.3 * 0.9), math.log(0.2 * 0.9)]
    for hyp, score in zip(hyps, expected, strict=True):
        assert math.isclose(hyp.score, score, rel_tol=1e-12)
        assert_spells_its_inputs(hyp)
    assert len(rows) == 2  # three hypotheses had ended after the second step


# </s> now (0.4), or X X </s> (0.35 * 0.95 * 0.95 = 0.315875, better per token); every
# other hypothesis ends no earlier than step 3 and is worse.
LENGTH_RULES = [
    {
        (0, BOS): {EOS: 0.4, X: 0.35, Y: 0.15, Z: 0.1},
        (1, X): {X: 0.95, EOS: 0.03, Y: 0.015, Z: 0.005},
        (1, Y): {X: 0.5, Y: 0.3, Z: 0.2},
        (2, X): {EOS: 0.95, X: 0.03, Y: 0.015, Z: 0.005},
    }
]


def test_without_length_penalty_the_short_hypothesis_wins_and_search_stops_early():
    [[best]], rows = mock_beam(LENGTH_RULES, [10], beam_size=2)
    assert best.tokens == [EOS] and math.isclose(best.score, math.log(0.4), rel_tol=1e-12)
    # After one step, </s> (log 0.4) beats the best live beam (log 0.35), which can only fall.
    assert len(rows) == 1


def test_length_penalty_orders_hypotheses_by_score_over_lp():
    short, long = [EOS], [X, X, EOS]
    short_score, long_score = math.log(0.4), math.log(0.35 * 0.95 * 0.95)
    [by_score], _ = mock_beam(LENGTH_RULES, [10], beam_size=2, nbest=2)
    assert [h.tokens for h in by_score] == [short, long]
    # alpha = 2: lp(1) = 1 and lp(3) = (8/6)^2, so -1.152 / 1.778 = -0.648 > -0.916.
    [by_norm], _ = mock_beam(LENGTH_RULES, [10], beam_size=2, nbest=2, length_penalty=2.0)
    assert [h.tokens for h in by_norm] == [long, short]
    assert long_score / (8 / 6) ** 2 > short_score
    for hyps in (by_score, by_norm):  # the raw score is returned, not the normalised one
        scores = {tuple(h.tokens): h.score for h in hyps}
        assert math.isclose(scores[tuple(short)], short_score, rel_tol=1e-12)
        assert math.isclose(scores[tuple(long)], long_score, rel_tol=1e-12)


NEVER_ENDS = {BOS: {X: 0.5, Y: 0.3, Z: 0.2}} | {p: {X: 0.6, Y: 0.3, Z: 0.1} for p in (X, Y, Z)}


def test_each_sentence_stops_at_its_own_length_limit():
    hyps, _ = mock_beam([NEVER_ENDS] * 3, [2, 5, 1], beam_size=3, nbest=3)
    for sentence, limit in zip(hyps, [2, 5, 1], strict=True):
        assert len(sentence) == 3
        assert all(len(h.tokens) == limit and EOS not in h.tokens for h in sentence)
        assert sentence[0].tokens == [X] * limit
        expected = math.log(0.5) + (limit - 1) * math.log(0.6)
        assert math.isclose(sentence[0].score, expected, rel_tol=1e-12)
    assert [h.tokens for h in hyps[2]] == [[X], [Y], [Z]]
    assert [h.tokens for h in hyps[0]] == [[X, X], [Y, X], [X, Y]]  # 0.3, 0.18, 0.15


def test_finished_sentences_leave_the_batch_and_the_rest_decode_as_alone():
    rules = [
        {BOS: {EOS: 0.9, X: 0.1}, X: {EOS: 0.9, X: 0.1}},  # ends after one step
        {**{p: {X: 0.6, Y: 0.4} for p in (BOS, X, Y)}, (3, X): {EOS: 0.7, X: 0.3}}
        | {(3, Y): {EOS: 0.7, X: 0.3}},  # two beams end at step 4
        NEVER_ENDS,  # runs to its limit
    ]
    batch, rows = mock_beam(rules, [6, 6, 6], beam_size=2, nbest=2)
    # B_t * K rows: sentence 0 has K = 2 ended hypotheses after step 2, sentence 1 after 4
    assert rows == [6, 6, 4, 4, 2, 2]
    assert [len(h.tokens) for h in batch[1]] == [4, 4]
    for b, sentence in enumerate(rules):
        [alone], _ = mock_beam([sentence], [6], beam_size=2, nbest=2)
        assert [h.tokens for h in alone] == [h.tokens for h in batch[b]]
        assert [h.score for h in alone] == [h.score for h in batch[b]]
        for a, h in zip(alone, batch[b], strict=True):
            assert torch.equal(torch.as_tensor(a.attention), torch.as_tensor(h.attention))
            assert_spells_its_inputs(h)


# (architecture, seed) whose greedy outputs mix early </s>, late </s> and the length limit
MIXED = [
    (dict(), 10),
    (dict(attention="none"), 10),
    (dict(rnn="lstm", attention="concat", init="zeros"), 2),
    (dict(attention="dot", readout="maxout"), 9),
    (dict(rnn="lstm", bidirectional=False, layers=2, attention="general", order="luong"), 4),
    (dict(order="cgru"), 4),
]


def mixed_id(case):
    arch, seed = case
    return "-".join([*map(str, arch.values()), f"seed{seed}"])


@pytest.mark.parametrize("alpha", [0.0, 1.5])
@pytest.mark.parametrize("case", MIXED, ids=mixed_id)
def test_beam_of_one_is_greedy(case, alpha):
    arch, seed = case
    model = tiny_model(**arch, seed=seed)
    src, src_len, _, _ = padded_batch(src_lens=(9, 2, 5, 7, 3), tgt_lens=(1,) * 5)
    greedy = decode(model, src, src_len)
    how = SearchPlan(beam_size=1, length_penalty=alpha, width=len(src_len))
    beam = beam_search_over(model, [(src, src_len)], how)
    for g, [b], n in zip(greedy, beam, src_len.tolist(), strict=True):
        assert b.tokens == g.tokens
        assert math.isclose(b.score, g.score, rel_tol=1e-12)
        if g.attention is None:
            assert b.attention is None
        else:
            torch.testing.assert_close(
                torch.as_tensor(b.attention)[:, :n],
                torch.as_tensor(g.attention),
                rtol=1e-12,
                atol=1e-12,
            )


@pytest.mark.parametrize("case", MIXED, ids=mixed_id)
def test_each_hypothesis_is_its_teacher_forced_score_and_attention(case):
    arch, seed = case
    model = tiny_model(**arch, seed=seed)
    src, src_len, _, _ = padded_batch(src_lens=(9, 2, 5, 7, 3), tgt_lens=(1,) * 5)
    alpha = 0.6
    beams = beam_decode(model, src, src_len, beam_size=5, nbest=4, length_penalty=alpha)
    limits = max_output_len(src_len.tolist(), 2.0, 10).tolist()
    for b, hyps in enumerate(beams):
        n = int(src_len[b])
        assert len(hyps) == 4
        assert len({tuple(h.tokens) for h in hyps}) == 4
        ranked = [h.score / length_penalty(len(h.tokens), alpha) for h in hyps]
        assert ranked == sorted(ranked, reverse=True)
        for hyp in hyps:
            assert EOS not in hyp.tokens[:-1] and len(hyp.tokens) <= limits[b]
            assert hyp.tokens[-1] == EOS or len(hyp.tokens) == limits[b]
            tgt_in = torch.tensor([[BOS, *hyp.tokens[:-1]]])
            out = model(src[b : b + 1, :n], src_len[b : b + 1], tgt_in)
            log_probs = out.log_probs.logits[0].log_softmax(-1)  # (len, V)
            expected = log_probs.gather(1, torch.tensor(hyp.tokens)[:, None]).sum().item()
            assert math.isclose(hyp.score, expected, rel_tol=1e-9)
            if out.attention is None:
                assert hyp.attention is None
            else:
                torch.testing.assert_close(
                    torch.as_tensor(hyp.attention), torch.as_tensor(out.attention)[0]
                )


def test_a_sentence_beam_decodes_the_same_alone_and_inside_a_padded_batch():
    model = tiny_model(rnn="lstm", attention="concat", init="zeros", seed=2)
    src, src_len, _, _ = padded_batch(src_lens=(9, 2, 5, 7, 3), tgt_lens=(1,) * 5)
    batch = beam_decode(model, src, src_len, beam_size=4, nbest=2, length_penalty=0.5)
    assert_each_beams_as_alone(model, src, src_len, batch, beam_size=4, nbest=2, length_penalty=0.5)


def assert_each_beams_as_alone(model, src, src_len, results, **search):
    """results[b] equals sentence b's beam search alone: tokens, scores and attention."""
    for b, n in enumerate(src_len.tolist()):
        [alone] = beam_decode(model, src[b : b + 1, :n], src_len[b : b + 1], **search)
        assert [h.tokens for h in alone] == [h.tokens for h in results[b]]
        for a, h in zip(alone, results[b], strict=True):
            assert math.isclose(a.score, h.score, rel_tol=1e-9)
            torch.testing.assert_close(torch.as_tensor(a.attention), torch.as_tensor(h.attention))


def test_streamed_sentences_beam_decode_as_they_do_alone():
    model = tiny_model(rnn="gru", attention="additive", readout="maxout", seed=2)
    src, src_len, _, _ = padded_batch(src_lens=(9, 2, 5, 7, 3, 6), tgt_lens=(1,) * 6)
    # batches padded to their own lengths, so memories of different lengths share steps
    batches = [
        (src[i : i + 2, : int(src_len[i : i + 2].max())], src_len[i : i + 2])
        for i in range(0, 6, 2)
    ]
    calls = []
    step = model.decode_step
    model.decode_step = lambda prev, *rest: calls.append(len(prev)) or step(prev, *rest)
    streamed = search(model, batches, SearchPlan(width=2, beam_size=3, nbest=2, length_penalty=0.5))
    del model.decode_step
    assert max(calls) == 2 * 3 and calls.count(6) > len(calls) // 2  # 2 sentences, 3 beams
    assert_each_beams_as_alone(
        model, src, src_len, streamed, beam_size=3, nbest=2, length_penalty=0.5
    )


def test_a_stopped_sentence_hands_its_beams_to_the_next_one():
    # Sentence 0 ends at once; 1 and 2 run longer; 2 waits until 0 stops, then takes its rows.
    rules = [{BOS: {EOS: 0.9, X: 0.1}}, {}, {BOS: {X: 1.0}, X: {EOS: 1.0}}]
    step, (t,), (tables,) = markov_step(rules)
    batches = [
        ((t[:2],), (tables[:2],), torch.tensor([4, 4])),
        ((t[2:],), (tables[2:],), torch.tensor([4])),
    ]
    hyps = beam_search(step, batches, SearchPlan(beam_size=2, width=2), bos_id=BOS, eos_id=EOS)
    assert step.rows[:2] == [4, 4]  # sentence 2 joined at the second step, in 0's rows
    assert hyps[0][0].tokens == [EOS] and hyps[2][0].tokens == [X, EOS]
    assert math.isclose(hyps[2][0].score, 0.0, abs_tol=1e-12)
    assert_spells_its_inputs(hyps[2][0])


def test_a_beam_wider_than_half_the_vocabulary_keeps_only_live_beams_and_finds_the_best():
    # K = 5 beams over V = 6 tokens: each beam has fewer than 2K extensions, so candidates
    # come from several beams; </s> must still never be kept as a live beam.
    rules = [{BOS: {X: 0.5, Y: 0.3, Z: 0.2}, X: {EOS: 0.1, Y: 0.9}, Y: {EOS: 0.8, Z: 0.2}}]
    [hyps], _ = mock_beam(rules, [6], beam_size=5, nbest=5)
    assert hyps[0].tokens == [X, Y, EOS]  # 0.5 * 0.9 * 0.8 = 0.36
    assert math.isclose(hyps[0].score, math.log(0.36), rel_tol=1e-12)
    scores = [h.score for h in hyps]
    assert scores == sorted(scores, reverse=True) and len(hyps) == 5
    for hyp in hyps:
        assert EOS not in hyp.tokens[:-1]  # no hypothesis continues past an </s>
        assert_spells_its_inputs(hyp)
