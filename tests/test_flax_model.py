"""The Flax twin of the model (`alignmt.model.flax_*`): float64 parity with the NumPy reference
over the architecture matrix (a cover of it under -m "not slow") and float32 parity with
PyTorch on the same weights over that cover, padding, the loss and its gradients, and the
configs it refuses. (The recurrent cells against nn.GRU / nn.LSTM are test_flax_rnn.py's; the
initial distributions are checked tensor by tensor in test_flax_io.py.)

The matrix runs op by op under `jax.disable_jit()` (each scan becomes a Python loop over the
same step function), which spares an XLA compile per architecture; a few architectures run
jit-compiled against PyTorch too.
"""

from __future__ import annotations

import os
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
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
from alignmt.checkpoint.flax_io import params_from_tensors, tensors_from_params
from alignmt.config import ModelConfig
from alignmt.model.flax_distribution import LogProbs
from alignmt.model.flax_seq2seq import FlaxSeq2Seq, sequence_loss
from alignmt.model.seq2seq import Seq2Seq
from tests.architectures import ARCHITECTURES, arch_id
from tests.conftest import VOCAB, padded_batch
from tests.test_decoder import CASES, reference_step
from tests.test_encoder import cell_weights


@pytest.fixture(autouse=True, scope="module")
def _full_float32_products_and_one_torch_thread():
    """float32 matmuls in full precision, as PyTorch's (Hopper GPUs default JAX to TF32, which
    misses 1e-5 by far); one torch thread: on tiny tensors a second only spins against XLA's."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with jax.default_matmul_precision("highest"):
        yield
    torch.set_num_threads(threads)


@pytest.fixture
def x64():
    """float64 arrays stay float64 inside the test (JAX truncates them to float32 by default)."""
    with jax.enable_x64(True):
        yield


def tiny_config(arch: dict, **changes) -> ModelConfig:
    """conftest.tiny_model's config of `arch` (E = 5, H = 4, D = C, A = 6, R = 3, init bridge),
    with `changes`."""
    bi, layers = arch["bidirectional"], arch["layers"]
    return ModelConfig(
        **{
            **dict(rnn=arch["rnn"], emb_dim=5, enc_hidden=4, enc_layers=layers, bidirectional=bi),
            **dict(dec_hidden=4 * (2 if bi else 1), dec_layers=layers, attn_dim=6, init="bridge"),
            **dict(attention=arch["attention"], order=arch["order"], readout_dim=3),
            **dict(context=arch.get("context", "every_step"), **changes),
            **dict(attention_fn=arch.get("attention_fn", "softmax")),
            **dict(attention_window=arch.get("attention_window", "global"), positions=8),
            **dict(window=arch.get("window", 10)),
        }
    )


def twins(arch: dict, dtype: torch.dtype = torch.float64, **changes):
    """A seeded PyTorch model in eval mode and `dtype`, its Flax twin, and the twin's variables:
    the same weights."""
    cfg = tiny_config(arch, **changes)
    torch.manual_seed(0)
    model = Seq2Seq.from_config(cfg, src_vocab=VOCAB, tgt_vocab=VOCAB).to(dtype).eval()
    params = params_from_tensors({k: v.numpy() for k, v in model.state_dict().items()}, cfg)
    return model, FlaxSeq2Seq(cfg, VOCAB, VOCAB), {"params": params}


def as_jax(*tensors: torch.Tensor) -> list[jax.Array]:
    return [jnp.asarray(t.numpy()) for t in tensors]


ARCH = {arch_id(arch): arch for arch in ARCHITECTURES}
TIED = {"tie_embeddings": True}

# test_decoder's cases (every architecture; readouts none, tanh, maxout), then s_0 = 0 and
# tied embeddings (Bahdanau's tanh readout with R = E, Luong with D = E, vanilla init_only)
MATRIX = [(arch, {"readout": readout}) for arch, readout in CASES] + [
    (ARCH["gru-bi-L2-additive-bahdanau"], {"init": "zeros"}),
    (ARCH["lstm-uni-L1-general-luong"], {"init": "zeros"}),
    (ARCH["gru-uni-L1-none-bahdanau"], {"init": "zeros", "readout": "maxout"}),
    (ARCH["lstm-bi-L2-dot-bahdanau"], {"init": "zeros"}),
    (ARCH["gru-bi-L1-additive-bahdanau"], {"readout": "tanh", "readout_dim": 5, **TIED}),
    (ARCH["lstm-bi-L1-general-luong"], {"emb_dim": 8, **TIED}),
    (ARCH["gru-bi-L2-general-luong"], {"attention": "scaled_general"}),
    # without attention, the order names no decoder: luong's builds the vanilla one too
    (
        ARCH["gru-uni-L2-none-bahdanau-init_only"],
        {"order": "luong", "readout": "maxout", "readout_dim": 5, **TIED},
    ),
]


def case_id(arch: dict, changes: dict) -> str:
    return "-".join([arch_id(arch), *(f"{k}={v}" for k, v in changes.items())])


MATRIX_IDS = [case_id(*case) for case in MATRIX]

# A cover of the matrix: each cell, direction and depth, every score, each decoder order
# (vanilla with c at every step and at s_0 only), each readout, s_0 = 0, tied embeddings, and
# each local window and the location score.
# The float64 test and test_flax_io's name-map tests run all of the matrix in the full suite
# and the cover under -m "not slow" (the whole float64 matrix costs most of a minute of
# CPU); the float32 test, whose scan shares its step (`advance`) with decode_step, runs the
# cover (QUICK of it under -m "not slow"); COMPILED adds five, jit-compiled (two of them
# under -m "not slow").
COVER = [
    MATRIX[MATRIX_IDS.index(name)]
    for name in (
        "gru-bi-L1-additive-bahdanau-readout=none",
        "lstm-uni-L2-dot-bahdanau-readout=none",
        "gru-uni-L1-concat-bahdanau-readout=none",
        "lstm-bi-L1-scaled_dot-bahdanau-readout=none",
        "gru-uni-L2-general-bahdanau-readout=none",
        "gru-bi-L2-general-luong-readout=none",
        "lstm-uni-L1-dot-luong-readout=none",
        "lstm-uni-L2-additive-cgru-readout=none",
        "gru-uni-L2-none-bahdanau-readout=none",
        "gru-bi-L2-none-bahdanau-readout=tanh",
        "lstm-bi-L2-additive-bahdanau-readout=maxout",
        "lstm-uni-L1-none-bahdanau-init_only-readout=tanh",
        "lstm-bi-L2-dot-bahdanau-init=zeros",
        "gru-bi-L1-additive-bahdanau-readout=tanh-readout_dim=5-tie_embeddings=True",
        "lstm-bi-L1-general-luong-emb_dim=8-tie_embeddings=True",
        "gru-bi-L2-general-luong-attention=scaled_general",
        "gru-bi-L1-general-luong-local_m1-readout=none",
        "lstm-bi-L1-location-bahdanau-local_p1-readout=none",
        "gru-bi-L2-concat-cgru-sparsemax-local_p1-readout=none",
    )
]
MATRIX_CASES = [  # the matrix as test parameters: the cover fast, the rest slow
    pytest.param(*case, id=name, marks=() if case in COVER else pytest.mark.slow)
    for case, name in zip(MATRIX, MATRIX_IDS, strict=True)
]


def reference_encoding(encoder, src: torch.Tensor, src_len: torch.Tensor):
    """alignmt.reference's encoder states (B, T_src, C), 0 at padding, and final states (B, C)."""
    layers = range(encoder.layers)
    forward = [cell_weights(encoder.rnn, layer) for layer in layers]
    backward = None
    if encoder.directions == 2:
        backward = [cell_weights(encoder.rnn, layer, "_reverse") for layer in layers]
    emb, lstm = encoder.embed.weight.detach().numpy(), isinstance(encoder.rnn, nn.LSTM)
    states = np.zeros((*src.shape, encoder.out_dim))
    finals = []
    for b, n in enumerate(src_len.tolist()):
        H, final = ref.encode(emb[src[b, :n].numpy()], forward, backward, lstm)
        states[b, :n] = H
        finals.append(final)
    return states, np.array(finals)


@pytest.mark.parametrize("arch,changes", MATRIX_CASES)
def test_encoder_and_two_decoder_steps_match_the_numpy_reference_in_float64(arch, changes, x64):
    model, flax_model, variables = twins(arch, **changes)
    src, src_len, _, _ = padded_batch()  # (3, 6), lengths 6, 2, 4
    with jax.disable_jit():  # the encoder's scan op by op: compiling it costs more
        memory, state = flax_model.apply(variables, *as_jax(src, src_len), method="encode")
    states, finals = reference_encoding(model.encoder, src, src_len)
    assert memory.states.dtype == jnp.float64
    np.testing.assert_allclose(memory.states, states, rtol=0, atol=1e-10)
    cfg, decoder = flax_model.cfg, model.decoder
    s_0 = np.zeros((3, cfg.dec_layers, cfg.dec_hidden))  # (B, L, D)
    if cfg.init == "bridge":
        W, bias = decoder.bridge.weight.detach().numpy(), decoder.bridge.bias.detach().numpy()
        s_0 = np.tanh(finals @ W.T + bias).reshape(s_0.shape)
    np.testing.assert_allclose(state.hidden, s_0, rtol=0, atol=1e-10)
    fixed = cfg.attention == "none" and cfg.context == "every_step"
    reference_memory = SimpleNamespace(  # what reference_step reads of torch's Memory
        states=torch.from_numpy(states), context=torch.from_numpy(finals) if fixed else None
    )
    lstm, luong = cfg.rnn == "lstm", cfg.attention != "none" and cfg.order == "luong"
    zeros = np.zeros((cfg.dec_layers, cfg.dec_hidden))
    carried = [(list(s), list(zeros) if lstm else None, zeros[0] if luong else None) for s in s_0]
    g = torch.Generator().manual_seed(5)
    # the second step reads all that the first carries (s, the LSTM cells, Luong's h~); a
    # third would read nothing new
    for i in range(2):
        prev = torch.randint(4, VOCAB, (3,), generator=g).numpy()
        log_probs, state, alpha = flax_model.apply(
            variables, prev, state, memory, method="decode_step"
        )
        logits = log_probs.logits
        for b, n in enumerate(src_len.tolist()):
            expected = reference_step(decoder, b, prev, *carried[b], reference_memory, n, i=i)
            ref_logits, hs, cs, feed, ref_alpha = expected
            carried[b] = (hs, cs, feed)
            np.testing.assert_allclose(logits[b], ref_logits, rtol=0, atol=1e-10)
            np.testing.assert_allclose(state.hidden[b], np.array(hs), rtol=0, atol=1e-10)
            if lstm:
                np.testing.assert_allclose(state.cell[b], np.array(cs), rtol=0, atol=1e-10)
            if luong:
                np.testing.assert_allclose(state.feed[b], feed, rtol=0, atol=1e-10)
            if cfg.attention == "none":
                assert alpha is None
            else:
                np.testing.assert_allclose(alpha[b, :n], ref_alpha, rtol=0, atol=1e-10)
                assert np.all(np.asarray(alpha[b, n:]) == 0)


def forward_and_steps(module: FlaxSeq2Seq, src, src_len, tgt_in, steps: int = 2):
    """The teacher-forced logits and attention, and `steps` decode_step calls fed tgt_in."""
    log_probs, attention = module(src, src_len, tgt_in)
    memory, state = module.encode(src, src_len)
    stepped = []
    for t in range(steps):
        step, state, alpha = module.decode_step(tgt_in[:, t], state, memory)
        stepped.append((step.logits, alpha))
    return log_probs.logits, attention, stepped


def assert_float32_logits_equal_pytorchs(arch: dict, changes: dict, compiled: bool) -> None:
    model, flax_model, variables = twins(arch, torch.float32, **changes)
    src, src_len, tgt_in, _ = padded_batch((4, 2, 3), (3, 2, 1))  # (3, 4), (3,), (3, 3)
    with torch.no_grad():
        out = model(src, src_len, tgt_in)
        memory, state = model.encode(src, src_len)
        expected = []
        for t in range(2):
            step, state, alpha = model.decode_step(tgt_in[:, t], state, memory)
            expected.append((step.logits, alpha))
    run = lambda *args: flax_model.apply(variables, *args, method=forward_and_steps)  # noqa: E731
    if compiled:
        logits, attention, stepped = jax.jit(run)(*as_jax(src, src_len, tgt_in))
    else:
        with jax.disable_jit():
            logits, attention, stepped = run(*as_jax(src, src_len, tgt_in))
    assert logits.dtype == jnp.float32
    np.testing.assert_allclose(logits, out.log_probs.logits, rtol=0, atol=1e-5)
    assert (attention is None) == (out.attention is None)
    if attention is not None:
        np.testing.assert_allclose(attention, out.attention, rtol=0, atol=1e-5)
    for (step_logits, alpha), (torch_logits, torch_alpha) in zip(stepped, expected, strict=True):
        np.testing.assert_allclose(step_logits, torch_logits, rtol=0, atol=1e-5)
        if alpha is not None:
            np.testing.assert_allclose(alpha, torch_alpha, rtol=0, atol=1e-5)


# The float32 test under -m "not slow": each decoder order, a readout, tied embeddings
QUICK = [
    "gru-bi-L1-additive-bahdanau-readout=none",
    "gru-bi-L2-general-luong-readout=none",
    "lstm-uni-L2-additive-cgru-readout=none",
    "lstm-uni-L1-none-bahdanau-init_only-readout=tanh",
    "gru-bi-L1-additive-bahdanau-readout=tanh-readout_dim=5-tie_embeddings=True",
]
FLOAT32 = [
    pytest.param(
        *case, id=case_id(*case), marks=() if case_id(*case) in QUICK else pytest.mark.slow
    )
    for case in COVER
]


@pytest.mark.parametrize("arch,changes", FLOAT32)
def test_float32_logits_and_attention_equal_pytorchs_on_the_same_weights(arch, changes):
    assert_float32_logits_equal_pytorchs(arch, changes, compiled=False)


COVERAGE = [  # coverage (Tu et al. 2016), each kind in each decoder order; two of them fast
    pytest.param(ARCH[name], {"coverage": kind}, id=f"{name}-{kind}", marks=marks)
    for name, kind, marks in [
        ("gru-bi-L1-additive-bahdanau", "fertility", ()),
        ("lstm-uni-L2-concat-bahdanau", "sum", pytest.mark.slow),
        ("gru-uni-L2-additive-cgru", "fertility", ()),
        ("lstm-bi-L1-additive-bahdanau", "sum", pytest.mark.slow),
    ]
]


@pytest.mark.parametrize("arch,changes", COVERAGE)
def test_a_coverage_model_computes_in_flax_what_it_does_in_pytorch(arch, changes):
    """The Flax twin of the coverage entry carries C_{i,j} step to step as PyTorch's does:
    from the second step on, the scores read it."""
    assert_float32_logits_equal_pytorchs(arch, changes, compiled=False)


COMPILED = [
    pytest.param(*case, id=case_id(*case), marks=marks)
    for case, marks in [
        ((ARCH["gru-bi-L2-additive-bahdanau"], {"readout": "maxout"}), ()),
        ((ARCH["lstm-uni-L1-general-luong"], {}), pytest.mark.slow),
        ((ARCH["lstm-bi-L2-none-bahdanau"], {"readout": "tanh"}), pytest.mark.slow),
        ((ARCH["gru-bi-L2-additive-cgru"], {"readout": "tanh"}), pytest.mark.slow),
        (MATRIX[-1], ()),
    ]
]


@pytest.mark.parametrize("arch,changes", COMPILED)
def test_jit_compiled_scans_give_pytorchs_logits_too(arch, changes):
    assert_float32_logits_equal_pytorchs(arch, changes, compiled=True)


# Each cell, direction and depth, and each kind of decoder; the fast subset runs the first
# (op by op, each case costs 5-13 s of CPU)
PADDED = [
    ARCH["gru-bi-L1-additive-bahdanau"],
    *(
        pytest.param(arch, marks=pytest.mark.slow)
        for arch in (
            ARCH["gru-uni-L2-none-bahdanau-init_only"],
            ARCH["lstm-bi-L2-general-luong"],
            ARCH["lstm-uni-L1-additive-cgru"],
        )
    ),
]


def encode_and_decode(module: FlaxSeq2Seq, src, src_len, tgt_in):
    """The memory, s_0, and the teacher-forced logits and attention."""
    memory, state = module.encode(src, src_len)
    log_probs, attention, _ = module.decoder(tgt_in, state, memory, False)
    return memory, state, log_probs.logits, attention


@pytest.mark.parametrize("arch", PADDED, ids=arch_id)
def test_padding_changes_no_state_and_no_logit_of_a_sentence(arch, x64):
    """A sentence alone and in a batch padded past every sentence: the same states at its
    real positions and logits at its real steps, exactly 0 states and weights at padding."""
    _, flax_model, variables = twins(arch)
    src, src_len, tgt_in, tgt_len = padded_batch()
    src, tgt_in = F.pad(src, (0, 2)), F.pad(tgt_in, (0, 2))  # (3, 8), (3, 7)
    apply = jax.jit(partial(flax_model.apply, method=encode_and_decode))
    run = lambda *args: apply(variables, *as_jax(*args))  # noqa: E731
    memory, state, logits, attention = run(src, src_len, tgt_in)
    for b, (n, m) in enumerate(zip(src_len.tolist(), tgt_len.tolist(), strict=True)):
        alone = run(src[b : b + 1, :n], src_len[b : b + 1], tgt_in[b : b + 1, :m])
        np.testing.assert_allclose(memory.states[b, :n], alone[0].states[0], rtol=0, atol=1e-12)
        assert np.all(np.asarray(memory.states[b, n:]) == 0)
        np.testing.assert_allclose(state.hidden[b], alone[1].hidden[0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(logits[b, :m], alone[2][0], rtol=0, atol=1e-12)
        if attention is not None:
            np.testing.assert_allclose(attention[b, :m, :n], alone[3][0], rtol=0, atol=1e-12)
            assert np.all(np.asarray(attention[b, :, n:]) == 0)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_sequence_loss_equals_torch_cross_entropy_over_real_tokens(smoothing, x64):
    logits = 3 * torch.randn(3, 5, VOCAB, dtype=torch.float64)  # (B, T_tgt, V)
    _, _, targets, _ = padded_batch()  # (3, 5) ids, padded with 0
    expected = F.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), ignore_index=0, label_smoothing=smoothing
    )

    def loss(logits, targets):
        logits, targets = as_jax(logits, targets)
        return float(sequence_loss(LogProbs(logits), targets, 0, smoothing))

    assert loss(logits, targets) == pytest.approx(expected.item(), rel=1e-12, abs=0)
    at_padding = (targets == 0)[..., None]
    assert loss(logits.masked_fill(at_padding, 50.0), targets) == pytest.approx(expected.item())
    assert loss(logits, torch.zeros_like(targets)) == 0.0  # no real token: 0, not nan


def test_loss_gradients_equal_pytorchs_and_reach_the_attention_weights(x64):
    model, flax_model, variables = twins(ARCH["gru-bi-L1-additive-bahdanau"], readout="maxout")
    src, src_len, tgt_in, _ = padded_batch()
    g = torch.Generator().manual_seed(2)
    targets = torch.randint(1, VOCAB, tgt_in.shape, generator=g).masked_fill(tgt_in == 0, 0)
    logits = model(src, src_len, tgt_in).log_probs.logits.flatten(0, 1)
    F.cross_entropy(logits, targets.flatten(), ignore_index=0, label_smoothing=0.1).backward()

    def loss(params):
        logits, _ = flax_model.apply({"params": params}, *as_jax(src, src_len, tgt_in))
        return sequence_loss(logits, jnp.asarray(targets.numpy()), 0, 0.1)

    grads = jax.jit(jax.grad(loss))(variables["params"])
    for name in ("W_s", "W_h", "v"):
        kernel = np.asarray(grads["decoder"]["attention"]["score"][name]["kernel"])
        assert np.isfinite(kernel).all() and np.abs(kernel).min() > 0, name
    flax_grads = tensors_from_params(grads, flax_model.cfg)
    for name, param in model.named_parameters():
        np.testing.assert_allclose(flax_grads[name], param.grad, rtol=0, atol=1e-10, err_msg=name)


def refusal(build) -> str | None:
    """The message of the ValueError that `build()` raises; None when it raises none."""
    try:
        build()
    except ValueError as err:
        return str(err)
    return None


@pytest.mark.parametrize(
    "changes",
    [
        dict(attention="general", order="luong", readout="maxout"),
        dict(attention="none", context="init_only", init="zeros"),
        dict(emb_dim=8, enc_hidden=4, dec_hidden=8, tie_embeddings=True),
        dict(attention="general", coverage="sum"),
        dict(attention="none", attention_window="local_p"),
    ],
    ids=["luong-readout", "init_only-zeros", "tie-24-units", "coverage-general", "vanilla-window"],
)
def test_the_flax_model_refuses_what_pytorch_refuses_when_it_is_set_up(changes):
    cfg = ModelConfig(**changes)
    expected = refusal(lambda: Seq2Seq.from_config(cfg, src_vocab=VOCAB, tgt_vocab=VOCAB))
    assert expected is not None
    assert refusal(lambda: model_shapes(cfg)) == expected


def model_shapes(cfg: ModelConfig):
    """FlaxSeq2Seq(cfg)'s parameter shapes, traced without running or compiling anything."""
    src, src_len, tgt_in, _ = padded_batch()
    init = FlaxSeq2Seq(cfg, VOCAB, VOCAB).init
    return jax.eval_shape(init, jax.random.key(0), *as_jax(src, src_len, tgt_in))["params"]


def test_dot_attention_between_states_of_different_sizes_is_refused():
    cfg = ModelConfig(attention="dot", enc_hidden=8, bidirectional=True, dec_hidden=8)
    with pytest.raises(ValueError, match="same size, got query_dim=8 and key_dim=16"):
        Seq2Seq.from_config(cfg, src_vocab=VOCAB, tgt_vocab=VOCAB)
    with pytest.raises(ValueError, match="same size, got query_dim=8 and key_dim=16"):
        model_shapes(cfg)
