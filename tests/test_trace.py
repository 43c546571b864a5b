"""Stepping through the decoder and tracing beam search on tiny models: what they show is
what greedy and beam search compute, and forcing or steering does what it says."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from alignmt.decoding.rules import length_penalty, max_output_len
from alignmt.decoding.torch_engine.search import beam_decode, decode
from alignmt.decoding.torch_engine.trace import beam_trace, step_through
from tests.conftest import padded_batch, tiny_model
from tests.test_beam import MIXED, mixed_id

EOS = 2


def sentences(model_args, seed):
    """The tiny model and five sources of mixed lengths, each (T_src,) with its limit."""
    model = tiny_model(**model_args, seed=seed)
    src, src_len, _, _ = padded_batch(src_lens=(9, 2, 5, 7, 3), tgt_lens=(1,) * 5)
    limits = max_output_len(src_len.tolist(), 2.0, 10).tolist()
    rows = [src[b, : int(n)] for b, n in enumerate(src_len)]
    return model, src, src_len, rows, limits


@pytest.mark.parametrize("case", MIXED, ids=mixed_id)
def test_stepping_through_is_greedy_search_with_its_attention_and_scores(case):
    model, src, src_len, rows, limits = sentences(*case)
    greedy = decode(model, src, src_len)
    for row, limit, hyp in zip(rows, limits, greedy, strict=True):
        steps = step_through(model, row, max_len=limit, top_k=3)
        assert [s.token for s in steps] == hyp.tokens
        assert math.isclose(sum(s.log_prob for s in steps), hyp.score, rel_tol=1e-9)
        assert all(s.top_tokens[0] == s.token and not s.forced for s in steps)
        assert all(s.top_log_probs == sorted(s.top_log_probs, reverse=True) for s in steps)
        if hyp.attention is None:
            assert all(s.attention is None for s in steps)
        else:
            torch.testing.assert_close(
                torch.stack([torch.as_tensor(s.attention) for s in steps]),
                torch.as_tensor(hyp.attention),
            )


@pytest.mark.parametrize("case", MIXED[:3], ids=mixed_id)
def test_a_forced_prefix_comes_first_and_greedy_goes_on_from_it(case):
    model, _, _, rows, limits = sentences(*case)
    row, limit = rows[0], limits[0]
    free = [s.token for s in step_through(model, row, max_len=limit)]
    prefix = [t for t in (7, 8, 9) if t != free[0]][:2]  # not what greedy would say first
    forced = step_through(model, row, max_len=limit, prefix=prefix)
    assert [s.token for s in forced[:2]] == prefix
    assert [s.forced for s in forced] == [True, True] + [False] * (len(forced) - 2)
    # Past the prefix it is greedy: each token is the best one at its step.
    assert all(s.token == s.top_tokens[0] for s in forced[2:])
    # The forced tokens' probabilities are the model's, not 1.
    assert all(s.log_prob < 0 for s in forced[:2])


def test_an_override_puts_all_of_that_steps_attention_on_one_source_position():
    model, _, _, rows, limits = sentences(dict(), 10)
    row, limit = rows[0], limits[0]
    free = step_through(model, row, max_len=limit)
    steered = step_through(model, row, max_len=limit, override={1: 3})
    expected = np.zeros(len(row), dtype=steered[1].attention.dtype)
    expected[3] = 1.0
    assert np.array_equal(steered[1].attention, expected)
    torch.testing.assert_close(
        torch.as_tensor(steered[0].attention), torch.as_tensor(free[0].attention)
    )  # before it: unchanged
    # The context it reads is h_3, so the step's distribution moves.
    assert steered[1].top_log_probs != free[1].top_log_probs


def test_an_override_on_a_model_without_attention_is_refused():
    model, _, _, rows, limits = sentences(dict(attention="none"), 10)
    with pytest.raises(ValueError, match="no attention"):
        step_through(model, rows[0], max_len=limits[0], override={0: 1})


@pytest.mark.parametrize("case", MIXED, ids=mixed_id)
def test_stepping_with_a_beam_follows_beam_searchs_best(case):
    model, src, src_len, rows, limits = sentences(*case)
    best = beam_decode(model, src, src_len, beam_size=4, length_penalty=0.6)
    for row, limit, [hyp] in zip(rows, limits, best, strict=True):
        steps = step_through(model, row, max_len=limit, beam_size=4, alpha=0.6)
        assert [s.token for s in steps] == hyp.tokens
        assert math.isclose(sum(s.log_prob for s in steps), hyp.score, rel_tol=1e-9)


def test_a_beam_after_a_forced_prefix_keeps_the_prefix():
    model, _, _, rows, limits = sentences(dict(), 10)
    steps = step_through(model, rows[0], max_len=limits[0], prefix=[9, 9], beam_size=3)
    assert [s.token for s in steps[:2]] == [9, 9]
    assert [s.forced for s in steps[:3]] == [True, True, False]


@pytest.mark.parametrize("case", MIXED, ids=mixed_id)
def test_the_beam_trees_finished_nodes_ranked_are_beam_searchs_nbest(case):
    model, src, src_len, rows, limits = sentences(*case)
    for nbest in (1, 4):
        beams = beam_decode(model, src, src_len, beam_size=4, nbest=nbest, length_penalty=0.6)
        for row, limit, hyps in zip(rows, limits, beams, strict=True):
            trace = beam_trace(model, row, max_len=limit, beam_size=4, alpha=0.6)
            ranked = trace.finished[:nbest]
            assert [trace.tokens(n) for n in ranked] == [h.tokens for h in hyps]
            for node, hyp in zip(ranked, hyps, strict=True):
                assert math.isclose(trace.nodes[node].score, hyp.score, rel_tol=1e-9)
                lp = length_penalty(len(hyp.tokens), 0.6)
                assert math.isclose(trace.nodes[node].final_score, hyp.score / lp, rel_tol=1e-9)


def test_every_node_extends_a_live_node_of_the_step_before():
    model, _, _, rows, limits = sentences(dict(rnn="lstm", attention="concat", init="zeros"), 2)
    trace = beam_trace(model, rows[0], max_len=limits[0], beam_size=3)
    nodes = trace.nodes
    steps = max(n.step for n in nodes) + 1
    for node in nodes:
        if node.step == 0:
            assert node.parent is None
        else:
            parent = nodes[node.parent]
            assert parent.step == node.step - 1 and parent.status == "live"
    for t in range(steps):
        at_t = [n for n in nodes if n.step == t]
        assert len(at_t) <= 6  # 2K candidates
        live = [n for n in at_t if n.status in ("live", "stopped")]
        assert len(live) <= 3 and all(n.token != EOS for n in live)
        assert all(n.status != "stopped" for n in at_t) or t == steps - 1
    finished = [nodes[i].final_score for i in trace.finished]
    assert finished == sorted(finished, reverse=True)
    # A node's attention is the alpha of the step that chose it: a distribution over the source.
    for node in nodes:
        assert math.isclose(float(node.attention.sum()), 1.0, rel_tol=1e-9)
