"""Attribution beside attention (analysis/attribution.py): gradient x input, integrated
gradients and erasure on models whose answer is known, against finite differences, under
padding; shift-att; and the evaluate command's --alignment-from."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alignmt.analysis.attribution import METHODS, rank_agreement
from alignmt.cli import main
from alignmt.decoding.torch_engine.relevance import counterfactual_flips, relevance
from alignmt.model.batch import make_batch
from alignmt.text.vocab import Vocab
from tests.conftest import VOCAB, engine_of, tiny_model
from tests.test_align import _evaluate, _toy_test_set

VOCABULARY = Vocab([f"w{k}" for k in range(VOCAB - 4)])  # 4 specials + 9 words: ids 4..12
ATTRIBUTIONS = ["gradient", "integrated", "erasure"]


def batch_of(pairs):
    return make_batch(pairs, VOCABULARY, VOCABULARY)


PAIRS = [([5, 7, 9, 4], [6, 8, 10]), ([8, 4], [5, 5, 11, 12]), ([7, 12, 6], [9])]


def one_word_model(word: int = 7, **arch):
    """A tiny model whose encoder reads one word alone: every other embedding, </s>
    included, is zero, so that nothing else in the source can move the output."""
    model = tiny_model(**arch)
    with torch.no_grad():
        keep = model.encoder.embed.weight[word].clone()
        model.encoder.embed.weight.zero_()
        model.encoder.embed.weight[word] = keep
    return model


@pytest.mark.parametrize("method", ATTRIBUTIONS)
@pytest.mark.parametrize("order", ["bahdanau", "luong"])
def test_a_model_that_reads_one_word_is_explained_by_that_word_alone(method, order):
    model = one_word_model(attention="general", order=order)
    batch = batch_of([([5, 7, 9, 4], [6, 8, 10, 11])])
    scores = relevance(model, batch, method)[0]  # (T_tgt, T_src)
    assert (scores[:, 1].abs() > 1e-6).all()  # every output token moves with word 7...
    others = scores[:, [0, 2, 3, 4]]
    assert torch.equal(others, torch.zeros_like(others))  # ...and with nothing else
    # attention gives no such answer: it is spread over the sentence
    attention = relevance(model, batch, "attention")[0]
    assert (attention[:, [0, 2, 3, 4]] > 0.01).any()


def test_gradient_times_input_is_the_derivative_of_scaling_each_words_embedding():
    """x_j . df_i/dx_j = d/de f_i(x with x_j scaled by 1 + e) at e = 0, by central
    differences in float64."""
    model = tiny_model(attention="additive", order="cgru", rnn="lstm")
    batch = batch_of(PAIRS[:1])
    found = relevance(model, batch, "gradient")[0]  # (T_tgt, T_src)
    expected = torch.zeros_like(found, dtype=torch.float64)
    eps = 1e-6
    for j in range(batch.src.size(1)):
        values = []
        for sign in (1, -1):
            handle = model.encoder.embed.register_forward_hook(
                lambda m, i, out, j=j, s=sign: torch.cat(
                    [out[:, :j], out[:, j : j + 1] * (1 + s * eps), out[:, j + 1 :]], 1
                )
            )
            with torch.no_grad():
                logits = model(batch.src, batch.src_len, batch.tgt_in).log_probs.logits
            handle.remove()
            values.append(logits.log_softmax(-1).gather(-1, batch.tgt_out[..., None])[0, :, 0])
        expected[:, j] = ((values[0] - values[1]) / (2 * eps)).abs()
    np.testing.assert_allclose(found.numpy(), expected.float().numpy(), rtol=1e-4, atol=1e-6)


def test_integrated_gradients_add_up_to_the_change_from_the_zero_source():
    """Completeness (Sundararajan et al. 2017): sum_j IG_j = f(x) - f(0), so the sum of
    their sizes is at least its size, and equal where all IG_j share a sign."""
    model = one_word_model(word=5, attention="additive")
    batch = batch_of([([5, 4, 9], [6, 8])])
    found = relevance(model, batch, "integrated", steps=64)[0]  # (T_tgt, T_src)
    with torch.no_grad():
        full = model(batch.src, batch.src_len, batch.tgt_in).log_probs.logits.log_softmax(-1)
        model.encoder.embed.weight.zero_()
        empty = model(batch.src, batch.src_len, batch.tgt_in).log_probs.logits.log_softmax(-1)
    index = batch.tgt_out[0][:, None]
    change = (full[0].gather(-1, index) - empty[0].gather(-1, index))[:, 0].abs()
    # one word read: its IG is the whole change
    torch.testing.assert_close(found.sum(-1), change.float(), rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_padding_changes_no_attribution(method):
    model = tiny_model(attention="general", order="luong")
    together = relevance(model, batch_of(PAIRS), method)
    for b, pair in enumerate(PAIRS):
        alone = relevance(model, batch_of([pair]), method)[0]
        n, m = alone.shape
        torch.testing.assert_close(together[b, :n, :m], alone, rtol=1e-6, atol=1e-9)
        assert torch.equal(together[b, n:], torch.zeros_like(together[b, n:]))
        assert torch.equal(together[b, :, m:], torch.zeros_like(together[b, :, m:]))


def test_shift_reads_each_tokens_attention_from_the_step_after_it():
    model = tiny_model(attention="additive")
    batch = batch_of(PAIRS)
    attention, shifted = (relevance(model, batch, m) for m in ("attention", "shift"))
    for b, m in enumerate(batch.tgt_len.tolist()):
        torch.testing.assert_close(shifted[b, : m - 1], attention[b, 1:m])
        torch.testing.assert_close(shifted[b, m - 1], attention[b, m - 1])  # </s> keeps its own


def test_erasure_works_without_attention_and_attention_needs_it():
    model = tiny_model(attention="none")
    assert relevance(model, batch_of(PAIRS), "erasure").abs().sum() > 0
    with pytest.raises(ValueError, match="no attention to read"):
        relevance(model, batch_of(PAIRS), "shift")
    with pytest.raises(ValueError, match="unknown attribution 'saliency'"):
        relevance(model, batch_of(PAIRS), "saliency")


def test_evaluate_scores_each_attribution_against_gold_links(toy_run, tmp_path, capsys):
    gold = tmp_path / "gold.align"
    gold.write_text("0-0 1-1 2-2 3-3\n0-0 1-1 2-2 2?3\n\n0-0 1-1\n")
    _toy_test_set(tmp_path)
    argv = _evaluate(toy_run, tmp_path, "--gold-alignments", str(gold))
    for method, said in (("integrated", "Integrated gradients"), ("shift", "shift-att")):
        assert main([*argv, "--alignment-from", method]) == 0
        printed = capsys.readouterr().out
        assert said in printed and "over 4 sentence pairs (12 links)" in printed
    assert main(_evaluate(toy_run, tmp_path, "--alignment-from", "erasure")) == 2
    assert "--alignment-from chooses the links" in capsys.readouterr().err


@pytest.mark.parametrize("method", ATTRIBUTIONS)
def test_the_flax_engine_attributes_with_jax_grad_as_pytorch_does_with_captum(toy_run, method):
    """Gradient x input and integrated gradients (`jax.grad`, the same Gauss-Legendre points
    as Captum's) and erasure on the Flax twin of the toy run: PyTorch's numbers, on pairs of
    the model's own outputs and of others, batched differently; ONNX Runtime, which has no
    gradients, refuses them by the table."""
    pytest.importorskip("jax")
    from alignmt.decoding.door import open_translator

    torch_side = open_translator(toy_run, device="cpu")
    flax_side = open_translator(toy_run, engine="flax", device="cpu")
    pairs = []
    for line in ["the big dog sleeps now", "a cat", "the small red cat runs"]:
        src = torch_side.src_vocab.encode(torch_side.source_tokens(line))
        (best,) = torch_side.translate([line])[0]
        out = torch_side.tgt_vocab.encode(best.tokens[:-1])
        pairs += [(src, out), (src, out[::-1])]
    want = torch_side.engine.relevance(pairs, method, batch_size=4)
    got = flax_side.engine.relevance(pairs, method, batch_size=3)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4)
    assert max(float(np.abs(w).max()) for w in want) > 0.01  # they explain something


def test_attribution_is_refused_where_the_engine_has_no_gradients(toy_exported):
    from alignmt.decoding.door import open_translator
    from alignmt.decoding.engine import Unavailable

    exported = open_translator(toy_exported)
    with pytest.raises(Unavailable, match="attribution is not available with the onnxruntime"):
        exported.engine.relevance([([5, 6], [7])], "gradient")


def test_the_step_answer_gives_each_output_tokens_attribution(client, toy_run):
    from alignmt.analysis.attribution import translation_relevance
    from alignmt.decoding.door import open_translator
    from tests.conftest import post

    sentence = "a red dog runs"
    _, plain = post(client, "/v1/step", {"sentence": sentence})
    status, body = post(client, "/v1/step", {"sentence": sentence, "attribution": "erasure"})
    assert status == 200 and body["tokens"] == plain["tokens"]
    assert all(s["attribution"] is None for s in plain["steps"])
    translator = open_translator(toy_run)
    src = translator.src_vocab.encode(body["source_tokens"][:-1])
    expected = translation_relevance(
        translator, src, translator.tgt_vocab.encode(body["tokens"]), "erasure"
    )
    found = np.array([s["attribution"] for s in body["steps"]])
    np.testing.assert_allclose(found, expected, rtol=0, atol=1e-5)

    status, refused = post(
        client, "/v1/step", {"sentence": sentence, "attribution": "gradient", "override": {"1": 0}}
    )
    assert status == 422 and refused["error"]["field"] == "attribution"
    status, refused = post(
        client, "/v1/step", {"sentence": sentence, "model": "vanilla", "attribution": "shift"}
    )
    assert status == 422 and "has none" in refused["error"]["message"]
    status, _ = post(client, "/v1/step", {"sentence": sentence, "attribution": "saliency"})
    assert status == 422


def test_a_notebook_run_gives_attention_and_attribution_as_arrays_and_heatmaps(toy_run):
    import alignmt

    run = alignmt.load(toy_run)
    found = run.attribution("a red dog runs", "gradient")
    (best,) = run.translate("a red dog runs")
    assert found.tokens == best.tokens and found.src_tokens == best.src_tokens
    shape = (len(best.tokens), len(best.src_tokens))
    assert found.scores.shape == found.attention.shape == shape
    assert (found.scores >= 0).all() and found.scores.sum() > 0
    figure = found.heatmap()
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert titles == ["attention", "|gradient × input|"]
    bars = [ax.get_ylabel() for ax in figure.axes if ax.get_ylabel() != "output"]
    assert bars == ["α", "share of the row's largest"]


def test_rank_agreement_is_kendalls_tau_row_by_row_over_the_real_source():
    engine = engine_of(tiny_model(attention="additive"), VOCABULARY)
    attention = engine.relevance(PAIRS, "attention")
    assert [a.shape for a in attention] == [(len(t) + 1, len(s) + 1) for s, t in PAIRS]
    same = rank_agreement(attention, attention)
    assert len(same) == sum(len(t) + 1 for _, t in PAIRS)
    assert same == pytest.approx([1.0] * len(same))
    reversed_ = rank_agreement(attention, [-a for a in attention])
    assert reversed_ == pytest.approx([-1.0] * len(same))
    flat = [np.ones_like(a) for a in attention]  # a constant row has no ranking: left out
    assert rank_agreement(attention, flat) == []


def test_counterfactual_flips_are_the_explorers_what_if_at_every_step(toy_run):
    from alignmt.decoding.door import open_translator

    translator = open_translator(toy_run)
    vocab = translator.tgt_vocab
    for line in ("the big dog sleeps now", "a small cat runs"):
        steps = translator.step_through(line).steps
        tokens = [s.token for s in steps]
        assert tokens[-1] == vocab.eos_id
        src = translator.src_vocab.encode(translator.source_tokens(line))
        batch = make_batch([(src, tokens[:-1])], translator.src_vocab, vocab)
        flipped, tried = counterfactual_flips(translator.engine.model, batch)
        assert tried == len(tokens)
        expected = 0
        for i, step in enumerate(steps):
            second = int(np.argsort(-step.attention[: len(src)], kind="stable")[1])
            prefix = [vocab.itos[t] for t in tokens[:i]]
            moved = translator.step_through(line, prefix=prefix, override={i: second})
            expected += moved.steps[i].token != step.token
        assert flipped == expected


def test_a_comparison_gives_each_methods_links_and_taus_whatever_the_batching():
    """`explanation.compare`: every method's argmax links equal `token_links`' for it,
    and batches of one or of all the pairs (padded) give the same links and taus."""
    from alignmt.analysis.align import alignment_error_rate, token_links
    from alignmt.analysis.explanation import compare

    engine = engine_of(tiny_model(attention="additive", order="luong"), VOCABULARY)
    alone = compare(engine, PAIRS, batch_size=1)
    padded = compare(engine, PAIRS, batch_size=len(PAIRS))
    assert alone.links == padded.links and set(alone.taus) == set(METHODS) - {"attention"}
    for method in METHODS:
        expected = token_links(engine, PAIRS, method=method)
        assert alone.links[method] == expected
        if method != "attention":
            np.testing.assert_allclose(alone.taus[method], padded.taus[method], atol=1e-6)
    gold = [{(0, 0), (1, 1)}, {(0, 0)}, {(2, 0)}]
    aers = alone.aer(gold)
    assert aers["erasure"] == alignment_error_rate(alone.links["erasure"], gold).aer
    assert len(set(aers.values())) > 1  # the methods do not all agree


def test_greedy_flips_sum_the_what_if_over_each_greedy_translation(toy_run):
    from alignmt.analysis.explanation import compare_words, greedy_flips
    from alignmt.decoding.door import open_translator
    from alignmt.text.links import sentence_words

    translator = open_translator(toy_run)
    lines = ["the big dog sleeps now", "a small cat runs", "a dog"]
    expected = [0, 0]
    for line in lines:
        (best,) = translator.translate([line], beam_size=1)[0]
        ids = translator.tgt_vocab.encode(best.tokens)[:-1]  # </s> is the last step's output
        src = translator.src_vocab.encode(translator.source_tokens(line))
        batch = make_batch([(src, ids)], translator.src_vocab, translator.tgt_vocab)
        flipped, tried = counterfactual_flips(translator.engine.model, batch)
        expected = [expected[0] + flipped, expected[1] + tried]
    assert list(greedy_flips(translator, lines, batch_size=2)) == expected

    sources = [sentence_words(translator.src_tokenizer, line) for line in lines]
    found = compare_words(translator, sources, sources)  # words link within each sentence
    for links, words in zip(found.links["integrated"], sources, strict=True):
        assert links and all(i < len(words.words) and j < len(words.words) for i, j in links)
