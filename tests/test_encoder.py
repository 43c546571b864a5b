"""The encoder: shapes, padding invariance, and parity with the NumPy recurrence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alignmt import reference as ref
from alignmt.model.encoder import Encoder
from tests.conftest import VOCAB, padded_batch

GRID = [(rnn, bi, layers) for rnn in ("gru", "lstm") for bi in (True, False) for layers in (1, 2)]


def make_encoder(rnn: str, bidirectional: bool, layers: int) -> Encoder:
    torch.manual_seed(0)
    encoder = Encoder(
        vocab_size=VOCAB, emb_dim=5, hidden=4, layers=layers, rnn=rnn, bidirectional=bidirectional
    )
    return encoder.double().eval()


@pytest.mark.parametrize("rnn,bidirectional,layers", GRID)
def test_states_and_final_state_have_the_documented_shapes(rnn, bidirectional, layers):
    encoder = make_encoder(rnn, bidirectional, layers)
    src, src_len, _, _ = padded_batch()
    states, final = encoder(src, src_len)
    C = 4 * (2 if bidirectional else 1)
    assert encoder.out_dim == C
    assert states.shape == (3, src.size(1), C)
    assert final.shape == (3, C)


@pytest.mark.parametrize("rnn,bidirectional,layers", GRID)
def test_padding_does_not_change_encoder_states(rnn, bidirectional, layers):
    encoder = make_encoder(rnn, bidirectional, layers)
    src, src_len, _, _ = padded_batch()
    states, final = encoder(src, src_len)
    for b, n in enumerate(src_len.tolist()):
        alone_states, alone_final = encoder(src[b : b + 1, :n], src_len[b : b + 1])
        torch.testing.assert_close(states[b, :n], alone_states[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(final[b], alone_final[0], rtol=0, atol=1e-12)
        assert torch.equal(states[b, n:], torch.zeros_like(states[b, n:]))


def cell_weights(rnn: torch.nn.Module, layer: int, suffix: str = "") -> ref.CellWeights:
    get = lambda name: getattr(rnn, f"{name}_l{layer}{suffix}").detach().numpy()  # noqa: E731
    return ref.CellWeights(get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"))


@pytest.mark.parametrize("rnn,bidirectional,layers", GRID)
def test_encoder_matches_the_numpy_recurrence_in_float64(rnn, bidirectional, layers):
    encoder = make_encoder(rnn, bidirectional, layers)
    src, src_len, _, _ = padded_batch()
    states, final = encoder(src, src_len)
    forward = [cell_weights(encoder.rnn, layer) for layer in range(layers)]
    backward = (
        [cell_weights(encoder.rnn, layer, "_reverse") for layer in range(layers)]
        if bidirectional
        else None
    )
    emb = encoder.embed.weight.detach().numpy()
    for b, n in enumerate(src_len.tolist()):
        H, h_final = ref.encode(emb[src[b, :n].numpy()], forward, backward, lstm=rnn == "lstm")
        np.testing.assert_allclose(states[b, :n].detach().numpy(), H, rtol=0, atol=1e-10)
        np.testing.assert_allclose(final[b].detach().numpy(), h_final, rtol=0, atol=1e-10)


def test_state_dropout_zeroes_states_in_training_only_and_spares_the_final_state():
    torch.manual_seed(0)
    encoder = Encoder(vocab_size=VOCAB, emb_dim=3, hidden=32, bidirectional=True, state_dropout=0.5)
    encoder.double()
    src, src_len, _, _ = padded_batch()
    clean_states, clean_final = encoder.eval()(src, src_len)
    states, final = encoder.train()(src, src_len)
    real = states[src != 0]  # (real tokens, C)
    dropped = (real == 0).double().mean().item()
    assert 0.35 < dropped < 0.65  # ~half of the real tokens' units, never all or none
    kept = real != 0
    torch.testing.assert_close(real[kept], 2 * clean_states[src != 0][kept])  # scaled by 1/(1-p)
    torch.testing.assert_close(final, clean_final)  # the bridge's input is not dropped
    assert torch.equal(states[src == 0], torch.zeros_like(states[src == 0]))
