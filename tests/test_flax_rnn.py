"""The Flax recurrence (`alignmt.model.flax_rnn`) against PyTorch's: a Flax `Direction` holds
one direction of an nn.GRU / nn.LSTM layer exactly, GRU's b_hn sits inside the reset product,
the LSTM carry is (c, h) and steps as nn.LSTMCell, and in the encoder the backward direction
starts at each sentence's own last token, not at the padding. (The whole model against the
reference and PyTorch is test_flax_model.py's.)
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch import nn

if os.environ.get("CI"):  # CI installs the [flax] extra: there a missing JAX is a failure
    try:
        import jax
    except ImportError as err:
        raise ImportError(f"CI installs the [flax] extra, but JAX does not import: {err}") from err
else:
    jax = pytest.importorskip(
        "jax", reason="the [flax] extra is not installed: pip install -e '.[flax]'"
    )

import jax.numpy as jnp

from alignmt import reference as ref
from alignmt.model.flax_rnn import Direction
from tests.conftest import padded_batch
from tests.test_encoder import cell_weights
from tests.test_flax_model import (  # the autouse fixture applies here too
    ARCH,
    _full_float32_products_and_one_torch_thread,  # noqa: F401
    as_jax,
    twins,
    x64,  # noqa: F401 (a fixture)
)


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
@pytest.mark.usefixtures("x64")
def test_the_backward_direction_starts_at_each_sentences_own_last_token(rnn):
    model, flax_model, variables = twins(ARCH[f"{rnn}-bi-L1-additive-bahdanau"])
    src, src_len, _, _ = padded_batch()  # lengths 6, 2, 4 in 6 columns
    with jax.disable_jit():
        memory, _ = flax_model.apply(variables, *as_jax(src, src_len), method="encode")
    backward = cell_weights(model.encoder.rnn, 0, "_reverse")
    emb = model.encoder.embed.weight.detach().numpy()
    for b, n in enumerate(src_len.tolist()):
        x = emb[src.numpy()[b, n - 1 : n]]  # (1, E): </s>, the backward RNN's first input
        first, _ = ref.encode(x, [backward], None, lstm=rnn == "lstm")  # one step from h = 0
        np.testing.assert_allclose(memory.states[b, n - 1, 4:], first[0], rtol=0, atol=1e-12)


def direction_params(rnn: nn.Module, suffix: str) -> dict:
    """One direction of a PyTorch RNN layer as flax_rnn.Direction's parameters."""
    get = lambda name: getattr(rnn, f"{name}{suffix}").detach().numpy()  # noqa: E731
    return {
        "ih": {"kernel": get("weight_ih").T, "bias": get("bias_ih")},
        "hh": {"kernel": get("weight_hh").T, "bias": get("bias_hh")},
    }


@pytest.mark.parametrize("rnn", ["gru", "lstm"])
@pytest.mark.usefixtures("x64")
def test_a_flax_direction_holds_a_pytorch_rnn_layer_exactly(rnn):
    torch.manual_seed(0)
    layer = {"gru": nn.GRU, "lstm": nn.LSTM}[rnn](3, 4, batch_first=True, bidirectional=True)
    layer = layer.double()
    x, lengths = torch.randn(2, 5, 3, dtype=torch.float64), torch.tensor([5, 3])  # (B, T, I)
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
    with torch.no_grad():
        out, final = layer(packed)
    states, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)  # (B, T, 2H)
    h_n = final[0] if rnn == "lstm" else final  # (2, B, H): forward, backward
    for reverse in (False, True):
        direction = Direction(rnn, 3, 4, reverse)
        params = direction_params(layer, "_l0_reverse" if reverse else "_l0")
        with jax.disable_jit():
            flax_states, flax_final = direction.apply({"params": params}, *as_jax(x, lengths))
        expected = states[..., 4:] if reverse else states[..., :4]
        np.testing.assert_allclose(flax_states, expected, rtol=0, atol=1e-12)
        np.testing.assert_allclose(flax_final, h_n[int(reverse)], rtol=0, atol=1e-12)


@pytest.mark.usefixtures("x64")
def test_gru_b_hn_sits_inside_the_reset_product_as_in_pytorch():
    """n = tanh(W_in x + b_in + r * (W_hn h + b_hn)): moving b_hn out of the product, into
    b_in (where Flax's own GRUCell has its only bias), changes every state."""
    torch.manual_seed(0)
    gru = nn.GRU(3, 4, batch_first=True).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64)  # (B, T, I)
    with torch.no_grad():
        gru.bias_hh_l0[8:] = 1.5  # b_hn, the last of the r, z, n blocks
        expected, _ = gru(x)  # (B, T, H)
    inside, outside = direction_params(gru, "_l0"), direction_params(gru, "_l0")
    outside["ih"]["bias"] = inside["ih"]["bias"] + np.r_[np.zeros(8), inside["hh"]["bias"][8:]]
    outside["hh"]["bias"] = np.r_[inside["hh"]["bias"][:8], np.zeros(4)]
    direction, lengths = Direction("gru", 3, 4), jnp.array([5, 5])
    with jax.disable_jit():
        held = direction.apply({"params": inside}, x.numpy(), lengths)[0]
        moved = direction.apply({"params": outside}, x.numpy(), lengths)[0]
    np.testing.assert_allclose(held, expected, rtol=0, atol=1e-12)
    assert np.abs(np.asarray(moved) - expected.numpy()).max(axis=(0, 2)).min() > 1e-2  # (T,)


@pytest.mark.usefixtures("x64")
def test_the_lstm_carry_is_c_then_h_and_steps_as_nn_lstmcell():
    torch.manual_seed(0)
    cell = nn.LSTMCell(3, 4).double()
    x, h, c = (torch.randn(2, n, dtype=torch.float64) for n in (3, 4, 4))
    with torch.no_grad():
        h_next, c_next = cell(x, (h, c))
    params = direction_params(cell, "")
    gates = x.numpy() @ params["ih"]["kernel"] + params["ih"]["bias"]  # (B, 4H): W_ih x + b_ih
    carry, out = Direction("lstm", 3, 4).apply(
        {"params": params}, (c.numpy(), h.numpy()), gates, method="step"
    )
    np.testing.assert_allclose(carry[0], c_next, rtol=0, atol=1e-12)
    np.testing.assert_allclose(carry[1], h_next, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out, h_next, rtol=0, atol=1e-12)
