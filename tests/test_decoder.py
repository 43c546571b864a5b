"""Decoders: one step against the NumPy reference, and the unroll against the step loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alignmt import reference as ref
from alignmt.model.attention.heads import reference as heads_ref
from alignmt.model.attention.local import reference as local_ref
from alignmt.model.attention.mappings import reference as mappings_ref
from alignmt.model.attention_decoder import BahdanauDecoder, ConditionalDecoder, LuongDecoder
from alignmt.model.cell import StackedCell
from alignmt.model.decoder import VanillaDecoder
from tests.architectures import (
    ARCHITECTURES,
    HEADS_ARCHITECTURES,
    LOCAL_ARCHITECTURES,
    SPARSE_ARCHITECTURES,
    arch_id,
)
from tests.conftest import padded_batch, tiny_model
from tests.test_attention import reference_scores


def numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


def stack_weights(cell: StackedCell) -> list[ref.CellWeights]:
    """The reference's per-layer weights; layer 0's W_ih is [W_y | W_x] over [y; x] (W_y alone
    when there is no x)."""
    extra = [] if cell.extra_in is None else [numpy(cell.extra_in.weight)]
    layers = [
        ref.CellWeights(
            np.concatenate([numpy(cell.embed_in.weight), *extra], axis=1),
            numpy(cell.hidden_in[0].weight),
            numpy(cell.embed_in.bias),
            numpy(cell.hidden_in[0].bias),
        )
    ]
    for below, hidden in zip(cell.layer_in, cell.hidden_in[1:], strict=True):
        layers.append(
            ref.CellWeights(
                numpy(below.weight), numpy(hidden.weight), numpy(below.bias), numpy(hidden.bias)
            )
        )
    return layers


def readout_weights(decoder) -> ref.ReadoutWeights:
    out = decoder.output
    hidden = out.hidden
    return ref.ReadoutWeights(
        out.kind,
        numpy(out.proj.weight),
        numpy(out.proj.bias),
        None if hidden is None else numpy(hidden.weight),
        None if hidden is None else numpy(hidden.bias),
    )


def reference_window(decoder, i: int) -> ref.Window | None:
    """The reference's window at output position i for a local decoder; None for global."""
    window = getattr(decoder.attention, "local", None)
    if window is None:
        return None
    if window.kind == "local_m":
        return local_ref.local_m(i, window.half_width)
    W_p, v_p = numpy(window.W_p.weight), numpy(window.v_p.weight)[0]
    return local_ref.local_p(W_p, v_p, window.half_width)


def reference_step(decoder, b, prev, hs, cs, feed, memory, n, coverage=None, i=0, normalise=None):
    """One reference step for sentence b at output position i (with its coverage C_{i-1}
    (n,) for a coverage model, and `normalise` for a mapping with state); returns (logits,
    hs, cs, feed, alpha)."""
    y = numpy(decoder.embed.weight)[prev[b]]
    H = numpy(memory.states[b, :n])
    mask = np.ones(n, dtype=bool)
    if isinstance(decoder, VanillaDecoder):
        logits, hs, cs = ref.vanilla_step(
            y,
            hs,
            cs,
            None if memory.context is None else numpy(memory.context[b]),
            stack_weights(decoder.rnn),
            readout_weights(decoder),
        )
        return logits, hs, cs, None, None
    attend = reference_attender(decoder, i, coverage, normalise)
    if isinstance(decoder, LuongDecoder):
        logits, hs, cs, feed, alpha = ref.luong_step(
            y,
            hs,
            cs,
            feed,
            H,
            mask,
            attend,
            stack_weights(decoder.rnn),
            numpy(decoder.W_c.weight),
            numpy(decoder.proj.weight),
            numpy(decoder.proj.bias),
        )
        return logits, hs, cs, feed, alpha
    if isinstance(decoder, ConditionalDecoder):
        (first,) = stack_weights(decoder.rnn)
        logits, hs, cs, alpha = ref.conditional_step(
            y, hs, cs, H, mask, attend, first, stack_weights(decoder.rnn2), readout_weights(decoder)
        )
        return logits, hs, cs, None, alpha
    layers, out = stack_weights(decoder.rnn), readout_weights(decoder)
    logits, hs, cs, alpha = ref.bahdanau_step(y, hs, cs, H, mask, attend, layers, out)
    return logits, hs, cs, None, alpha


def reference_attender(decoder, i: int, coverage=None, normalise=None) -> ref.Attender:
    """The reference's attention of `decoder` at output position i: its score and mapping
    (`normalise` instead, for a mapping with state) within its window, or its heads."""
    attention = decoder.attention
    score = lambda s, H: reference_scores(attention, s, H, coverage)  # noqa: E731
    normalise = normalise or mappings_ref.MAPPINGS[attention.composition.mapping.kind]
    if attention.heads is None:
        return ref.attender(score, normalise, reference_window(decoder, i))
    w = {name: numpy(p) for name, p in attention.heads.named_parameters()}
    n = attention.heads.n

    def attend(s, H, mask):
        W = (w["W_q.weight"], w["W_k.weight"], w["W_v.weight"], w["W_o.weight"])
        c, alpha, _ = heads_ref.multi_head(s, H, mask, score, normalise, *W, n)
        return c, alpha

    return attend


CASES = (
    [(arch, "none") for arch in ARCHITECTURES + SPARSE_ARCHITECTURES + LOCAL_ARCHITECTURES]
    + [(arch, "none" if arch["order"] == "luong" else "maxout") for arch in HEADS_ARCHITECTURES]
    + [
        (dict(rnn=rnn, bidirectional=True, layers=2, attention=a, order="bahdanau"), readout)
        for rnn in ("gru", "lstm")
        for a in ("additive", "none")
        for readout in ("tanh", "maxout")
    ]
    + [
        (dict(rnn=rnn, bidirectional=True, layers=2, attention=a, order="cgru"), "maxout")
        for rnn in ("gru", "lstm")
        for a in ("concat", "dot", "general", "scaled_dot")
    ]
    + [  # the scaled general score in the order it was made for
        (
            dict(
                rnn="gru", bidirectional=True, layers=2, attention="scaled_general", order="luong"
            ),
            "none",
        )
    ]
    + [
        (
            dict(
                rnn=rnn,
                bidirectional=False,
                layers=1,
                attention="none",
                order="bahdanau",
                context="init_only",
            ),
            "tanh",
        )
        for rnn in ("gru", "lstm")
    ]
)


@pytest.mark.parametrize("arch,readout", CASES, ids=[f"{arch_id(a)}-{r}" for a, r in CASES])
def test_three_decoder_steps_match_the_numpy_reference_in_float64(arch, readout):
    model = tiny_model(**arch, readout=readout, init="bridge")
    decoder = model.decoder
    src, src_len, _, _ = padded_batch()
    memory, state = model.encode(src, src_len)
    g = torch.Generator().manual_seed(5)
    for b, n in enumerate(src_len.tolist()):
        hs = [numpy(h) for h in state.hidden[b]]
        cs = None if state.cell is None else [numpy(c) for c in state.cell[b]]
        feed = None if state.feed is None else numpy(state.feed[b])
        step_state = state
        for i in range(4):
            prev = torch.randint(4, 13, (src.size(0),), generator=g)
            log_probs, step_state, alpha = model.decode_step(prev, step_state, memory)
            logits = log_probs.logits
            expected = reference_step(decoder, b, prev.numpy(), hs, cs, feed, memory, n, i=i)
            ref_logits, hs, cs, feed, ref_alpha = expected
            np.testing.assert_allclose(numpy(logits[b]), ref_logits, rtol=0, atol=1e-10)
            np.testing.assert_allclose(
                numpy(step_state.hidden[b]), np.array(hs), rtol=0, atol=1e-10
            )
            if alpha is not None:
                np.testing.assert_allclose(numpy(alpha[b, :n]), ref_alpha, rtol=0, atol=1e-10)
                assert torch.equal(alpha[b, n:], torch.zeros_like(alpha[b, n:]))


@pytest.mark.parametrize(
    "arch",
    ARCHITECTURES + SPARSE_ARCHITECTURES + LOCAL_ARCHITECTURES + HEADS_ARCHITECTURES,
    ids=arch_id,
)
def test_teacher_forced_forward_equals_the_step_by_step_loop(arch):
    model = tiny_model(**arch, readout="none" if arch["order"] == "luong" else "maxout")
    src, src_len, tgt_in, _ = padded_batch()
    out = model(src, src_len, tgt_in)
    memory, state = model.encode(src, src_len)
    for t in range(tgt_in.size(1)):
        log_probs, state, alpha = model.decode_step(tgt_in[:, t], state, memory)
        torch.testing.assert_close(log_probs.logits, out.log_probs.logits[:, t], rtol=0, atol=1e-12)
        if alpha is None:
            assert out.attention is None
        else:
            torch.testing.assert_close(alpha, out.attention[:, t], rtol=0, atol=1e-12)
    torch.testing.assert_close(state.hidden, out.state.hidden, rtol=0, atol=1e-12)


def test_init_only_vanilla_needs_the_bridge_and_has_no_context_weights():
    with pytest.raises(ValueError, match="init=bridge"):
        tiny_model(attention="none", context="init_only", init="zeros")
    decoder = tiny_model(attention="none", context="init_only", readout="tanh").decoder
    assert decoder.rnn.extra_in is None
    assert decoder.output.hidden.in_features == decoder.hidden + decoder.emb_dim  # [s_i; y]


def test_init_only_vanilla_depends_on_the_source_only_through_the_initial_state():
    model = tiny_model(attention="none", context="init_only")
    src, src_len, tgt_in, _ = padded_batch()
    memory, state = model.encode(src, src_len)
    assert memory.context is None
    other_src = torch.randint(4, 13, src.shape, generator=torch.Generator().manual_seed(3))
    other_memory, _ = model.encode(other_src.masked_fill(src == 0, 0), src_len)
    same_state = model.decoder(tgt_in, state, other_memory).log_probs.logits
    torch.testing.assert_close(same_state, model.decoder(tgt_in, state, memory).log_probs.logits)


@pytest.mark.parametrize("init", ["zeros", "bridge"])
def test_initial_state_is_zeros_or_the_bridged_final_encoder_state(init):
    model = tiny_model(init=init, layers=2)
    src, src_len, _, _ = padded_batch()
    _, final = model.encoder(src, src_len)
    _, state = model.encode(src, src_len)
    if init == "zeros":
        assert torch.equal(state.hidden, torch.zeros_like(state.hidden))
    else:
        bridge = model.decoder.bridge
        expected = torch.tanh(final @ bridge.weight.T + bridge.bias).view(3, 2, -1)
        torch.testing.assert_close(state.hidden, expected)


def test_decoders_are_the_ones_the_config_names():
    assert isinstance(tiny_model(attention="additive").decoder, BahdanauDecoder)
    assert isinstance(tiny_model(attention="general", order="luong").decoder, LuongDecoder)
    assert isinstance(tiny_model(attention="none").decoder, VanillaDecoder)
    for rnn in ("gru", "lstm"):
        assert isinstance(tiny_model(rnn=rnn, order="cgru").decoder, ConditionalDecoder)


def test_maxout_readout_shrinks_the_vocabulary_projection_to_R_inputs():
    plain = tiny_model(readout="none").decoder.output.proj
    maxout = tiny_model(readout="maxout").decoder.output
    assert plain.in_features == 8 + 8 + 5  # [s_i; c_i; y_{i-1}] = D + C + E
    assert maxout.hidden.out_features == 2 * 3 and maxout.proj.in_features == 3
