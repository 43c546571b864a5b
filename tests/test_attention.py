"""The attention room's scores and its composer against the papers' equations, hand
arithmetic and the entries' float64 references; its declarations, and run folders written
before the room: loaded, and resumed."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import ModelConfig, apply_overrides, load_config
from alignmt.model.attention import registry
from alignmt.model.attention.additive import reference as additive_ref
from alignmt.model.attention.coverage import reference as coverage_ref
from alignmt.model.attention.location import reference as location_ref
from alignmt.model.attention.mappings import reference as mappings_ref
from alignmt.model.attention.mappings.torch import masked_softmax
from alignmt.model.attention.multiplicative import reference as multiplicative_ref
from alignmt.model.attention.torch import Attention
from alignmt.model.decoder import Memory
from alignmt.training.run import train
from tests.architectures import ATTENTIONS

D, C, A = 3, 4, 5
LEGACY = Path(__file__).parent / "data" / "legacy"


def make_inputs(query_dim=D, key_dim=C, lengths=(4, 2, 3), seed=0):
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    query = torch.randn(len(lengths), query_dim, generator=g, dtype=torch.float64)
    keys = torch.randn(len(lengths), T, key_dim, generator=g, dtype=torch.float64)
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    keys = keys.masked_fill(~mask[..., None], 0.0)  # as the encoder leaves padding
    return query, keys, mask


def attention(kind: str = "additive", query_dim=D, key_dim=C, **model) -> Attention:
    """The room's composer for a config's attention (A = 5 unless `attn_dim`), in float64."""
    torch.manual_seed(0)
    cfg = ModelConfig(**{"attention": kind, "attn_dim": A, "positions": 8, **model})
    return Attention(registry.compose(cfg), query_dim=query_dim, key_dim=key_dim).double()


def attend(module: Attention, query, keys, mask):
    """One step of `module` from its first slots: context (B, C) and alpha (B, T_src)."""
    memory = Memory(keys, mask, None, module.prepare(keys, mask))
    context, alpha, _ = module(query, module.start(memory), memory)
    return context, alpha


def reference_scores(module: Attention, s: np.ndarray, H: np.ndarray, C=None) -> np.ndarray:
    """The module's scores for one sentence, computed by the entries' references from its
    weights (and the coverage C (T,) so far, for a model with coverage)."""
    w = {name: p.detach().numpy() for name, p in module.score.named_parameters()}
    term = None
    if C is not None:
        term = coverage_ref.hidden_term(C, module.coverage.V.weight.detach().numpy()[:, 0])
    kind = module.composition.score.kind
    if kind == "additive":
        return additive_ref.additive_scores(
            s, H, w["W_s.weight"], w["W_h.weight"], w["v.weight"][0], term
        )
    if kind == "concat":
        return additive_ref.concat_scores(s, H, w["W.weight"], w["v.weight"][0], term)
    if kind == "general":
        return multiplicative_ref.general_scores(s, H, w["W.weight"])
    if kind == "scaled_general":
        return multiplicative_ref.scaled_general_scores(s, H, w["W.weight"], w["g"].item())
    if kind == "location":
        return location_ref.location_scores(s, H, w["W_a.weight"])
    if kind == "dot":
        return multiplicative_ref.dot_scores(s, H)
    return multiplicative_ref.scaled_dot_scores(s, H)


def reference_attend(e: np.ndarray, H: np.ndarray, mask: np.ndarray, kind="softmax"):
    """(c, alpha) for scores e over the positions of `mask`, with the reference mapping."""
    alpha = mappings_ref.MAPPINGS[kind](e, mask)
    return alpha @ H, alpha


def test_worked_example_of_seed_001_is_reproduced_to_its_printed_precision():
    alpha, c = additive_ref.worked_example()
    np.testing.assert_allclose(np.round(alpha, 3), [0.430, 0.217, 0.353], atol=0)
    np.testing.assert_allclose(np.round(c, 3), [0.783, 0.570], atol=0)

    module = attention(query_dim=2, key_dim=2, attn_dim=2)
    with torch.no_grad():
        module.score.W_s.weight.copy_(torch.eye(2))
        module.score.W_h.weight.copy_(torch.tensor([[1.0, -1.0], [1.0, 1.0]]))
        module.score.v.weight.copy_(torch.tensor([[0.5, 0.5]]))
    H = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]], dtype=torch.float64)
    s = torch.tensor([[0.5, 0.8]], dtype=torch.float64)
    with torch.no_grad():
        context, weights = attend(module, s, H, torch.ones(1, 3, dtype=torch.bool))
    np.testing.assert_allclose(weights[0].numpy(), alpha, rtol=0, atol=1e-12)
    np.testing.assert_allclose(context[0].numpy(), c, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["additive", "concat", "general"])
def test_equal_scores_give_the_mean_of_the_real_encoder_states(kind):
    """An uninformed attention (equal scores) averages the unpadded states."""
    module = attention(kind)
    with torch.no_grad():  # zero the last layer of the score: every e_ij becomes 0
        (module.score.v if kind != "general" else module.score.W).weight.zero_()
    query, keys, mask = make_inputs()
    context, weights = attend(module, query, keys, mask)
    lengths = mask.sum(1, keepdim=True).double()
    torch.testing.assert_close(weights, mask / lengths)
    torch.testing.assert_close(context, keys.sum(1) / lengths)


def test_concat_score_equals_separate_projections_when_W_is_split():
    """v^T tanh(W [s; h]) = v^T tanh(W_q s + W_k h) for W = [W_q | W_k]."""
    concat, additive = attention("concat"), attention("additive")
    with torch.no_grad():
        additive.score.W_s.weight.copy_(concat.score.W.weight[:, :D])
        additive.score.W_h.weight.copy_(concat.score.W.weight[:, D:])
        additive.score.v.weight.copy_(concat.score.v.weight)
    query, keys, mask = make_inputs()
    expected = attend(additive, query, keys, mask)
    torch.testing.assert_close(attend(concat, query, keys, mask), expected, rtol=0, atol=1e-12)
    # ... and literally concatenating [s; h_j], as the reference does, gives the same scores.
    W, v = concat.score.W.weight.detach().numpy(), concat.score.v.weight[0].detach().numpy()
    s, H = query[0].numpy(), keys[0].numpy()
    np.testing.assert_allclose(
        additive_ref.concat_scores(s, H, W, v),
        additive_ref.additive_scores(s, H, W[:, :D], W[:, D:], v),
        atol=1e-12,
    )


@pytest.mark.parametrize("kind", [*ATTENTIONS, "scaled_general", "location"])
def test_every_score_matches_the_numpy_reference_in_float64(kind):
    key_dim = D if kind in ("dot", "scaled_dot") else C
    module = attention(kind, key_dim=key_dim)
    query, keys, mask = make_inputs(key_dim=key_dim)
    context, weights = attend(module, query, keys, mask)
    for b in range(query.size(0)):
        s, H, m = query[b].numpy(), keys[b].numpy(), mask[b].numpy()
        e = reference_scores(module, s, H[m])
        c_ref, alpha_ref = reference_attend(e, H[m], np.ones(m.sum(), bool))
        np.testing.assert_allclose(weights[b, m].detach().numpy(), alpha_ref, rtol=0, atol=1e-10)
        np.testing.assert_allclose(context[b].detach().numpy(), c_ref, rtol=0, atol=1e-10)


def test_masked_softmax_matches_the_reference_and_zeroes_padding_exactly():
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(4, 6, generator=g, dtype=torch.float64) * 30  # large scores too
    mask = torch.arange(6)[None, :] < torch.tensor([6, 1, 3, 5])[:, None]
    weights = masked_softmax(scores, mask)
    assert torch.equal(weights[~mask], torch.zeros((~mask).sum(), dtype=torch.float64))
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, dtype=torch.float64))
    for b in range(4):
        expected = mappings_ref.masked_softmax(scores[b].numpy(), mask[b].numpy())
        np.testing.assert_allclose(weights[b].numpy(), expected, rtol=0, atol=1e-10)


def test_a_row_without_real_tokens_is_nan_not_spread_over_padding():
    weights = masked_softmax(torch.zeros(1, 3), torch.zeros(1, 3, dtype=torch.bool))
    assert torch.isnan(weights).all()


def test_masked_softmax_passes_gradcheck():
    scores = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.arange(5)[None, :] < torch.tensor([5, 2, 4])[:, None]
    assert torch.autograd.gradcheck(lambda e: masked_softmax(e, mask), (scores,))


@pytest.mark.parametrize("kind", [*ATTENTIONS, "scaled_general", "location"])
def test_every_score_passes_gradcheck_in_query_keys_and_weights(kind):
    key_dim = D if kind in ("dot", "scaled_dot") else C
    module = attention(kind, key_dim=key_dim)
    query, keys, mask = make_inputs(key_dim=key_dim)
    query.requires_grad_(True)
    keys.requires_grad_(True)
    names = [name for name, _ in module.named_parameters()]

    def run(query, keys, *weights):
        params = dict(zip(names, weights, strict=True))
        return torch.func.functional_call(
            _PrepareThenAttend(module),
            {f"module.{n}": p for n, p in params.items()},
            (query, keys, mask),
        )

    weights = tuple(p.detach().clone().requires_grad_(True) for p in module.parameters())
    assert torch.autograd.gradcheck(run, (query, keys, *weights))


class _PrepareThenAttend(torch.nn.Module):
    def __init__(self, module: Attention) -> None:
        super().__init__()
        self.module = module

    def forward(self, query, keys, mask):
        return attend(self.module, query, keys, mask)


def test_the_module_keeps_no_state_between_batches():
    module = attention("additive")
    first = make_inputs(seed=1)
    second = make_inputs(lengths=(1, 4), seed=2)
    before = attend(module, *first)
    attend(module, *second)
    torch.testing.assert_close(attend(module, *first), before, rtol=0, atol=0)
    assert set(vars(module.score)) == set(vars(attention("additive").score))


def test_dot_scores_refuse_mismatched_sizes_with_a_clear_error():
    with pytest.raises(ValueError, match="query_dim=3 and key_dim=4"):
        attention("dot", query_dim=3, key_dim=4)


def test_scaled_dot_divides_the_dot_scores_by_sqrt_d():
    query, keys, mask = make_inputs(key_dim=D)
    plain, scaled = attention("dot", key_dim=D), attention("scaled_dot", key_dim=D)
    # Scaling the query by 1/sqrt(D) in the plain score is the same thing.
    torch.testing.assert_close(
        attend(scaled, query, keys, mask), attend(plain, query / np.sqrt(D), keys, mask)
    )


def test_the_scaled_general_score_starts_as_the_general_score_over_sqrt_d_and_learns_g():
    """g s^T W h_j with g = 1/sqrt(D) before training, and g a weight the loss reaches."""
    plain, scaled = attention("general"), attention("scaled_general")
    with torch.no_grad():
        scaled.score.W.weight.copy_(plain.score.W.weight)
    g = scaled.score.g.item()
    assert g == pytest.approx(1 / np.sqrt(D), rel=1e-7)  # made in float32
    query, keys, mask = make_inputs()
    torch.testing.assert_close(
        attend(scaled, query, keys, mask), attend(plain, query * g, keys, mask), rtol=0, atol=1e-12
    )
    context, _ = attend(scaled, query, keys, mask)
    context.square().sum().backward()
    assert scaled.score.g.grad is not None and scaled.score.g.grad.abs().item() > 0


def test_general_score_is_s_transpose_W_h():
    module = attention("general")
    assert module.score.W.weight.shape == (D, C)
    query, keys, mask = make_inputs()
    _, weights = attend(module, query, keys, mask)
    scores = torch.einsum("bd,dc,btc->bt", query, module.score.W.weight, keys)
    torch.testing.assert_close(weights, masked_softmax(scores, mask))


# --- the room's declarations --------------------------------------------------------------


def _every_config():
    for score in [*ATTENTIONS, "location"]:
        for window in ("global", "local_m", "local_p"):
            for coverage in ("none", "sum", "fertility"):
                for fn in ("softmax", "sparsemax"):
                    yield ModelConfig(
                        attention=score,
                        attention_window=window,
                        coverage=coverage,
                        attention_fn=fn,
                    )


def test_every_composition_declares_unique_slots_with_the_rows_first():
    """Slot names are graph inputs and outputs: two mechanisms may not share one, and every
    slot moves with its rows."""
    seen = 0
    for cfg in _every_config():
        try:
            composition = registry.compose(cfg)
        except ValueError:
            assert cfg.coverage != "none" and cfg.attention not in ("additive", "concat")
            continue
        names = [slot.name for slot in (*composition.state, *composition.memory)]
        assert len(names) == len(set(names)), names
        assert all(slot.axes[0] == "rows" for slot in (*composition.state, *composition.memory))
        assert {s.slot for s in composition.shown} <= {s.name for s in composition.state}
        seen += 1
    assert seen == 6 * 3 * 2 + 2 * 3 * 2 * 2  # score x window x mapping, with coverage too


def test_a_modifier_without_attention_or_without_a_hidden_layer_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"model.attention=none has none: use model.coverage=none"):
        registry.compose(ModelConfig(attention="none", coverage="sum"))
    with pytest.raises(ValueError, match=r"use model.attention_window=global"):
        registry.compose(ModelConfig(attention="none", attention_window="local_m"))
    with pytest.raises(
        ValueError, match=r"the dot score has none: use a score with one \(additive, concat\)"
    ):
        registry.compose(ModelConfig(attention="dot", coverage="fertility"))
    assert registry.compose(ModelConfig(attention="none")) is None


# --- run folders written before the room ---------------------------------------------------


@pytest.mark.parametrize("name", ["concat_fertility_local_p", "dot_local_p_luong", "additive_sum"])
def test_a_checkpoint_written_before_the_room_loads_and_computes_what_it_did(name):
    """tests/data/legacy holds checkpoints that the code before the room wrote (the score's
    weights under decoder.attention, the window's under decoder.window, coverage's V inside
    the score and U_f on the decoder), with the logits that code gave on one batch."""
    ckpt = load_checkpoint(LEGACY / f"{name}.safetensors")
    given = json.loads((LEGACY / "legacy_logits.json").read_text())
    with torch.no_grad():
        out = ckpt.model(*(torch.tensor(given[k]) for k in ("src", "src_len", "tgt_in")))
    # The logits were stored on one CPU with the fused step: another CPU's kernels, or
    # ALIGNMT_FUSED=0, round them differently (up to 2.4e-7 seen), while a weight loaded
    # under the wrong name or not at all moves them by far more than the bound.
    expected = torch.tensor(given["logits"][name])
    torch.testing.assert_close(out.log_probs.logits, expected, rtol=0, atol=1e-5)
    assert all(
        n.startswith("decoder.attention.") for n in ckpt.model.state_dict() if "attention" in n
    )


def test_todays_names_are_left_as_they_are_and_old_ones_are_moved():
    composition = registry.compose(
        ModelConfig(attention="concat", coverage="fertility", attention_window="local_p")
    )
    today = {
        "decoder.attention.score.W.weight": 1,
        "decoder.attention.coverage.V.weight": 2,
        "decoder.attention.coverage.U_f.weight": 3,
        "decoder.attention.local.W_p.weight": 4,
    }
    assert registry.current_names(today, composition) == today
    before = {
        "decoder.attention.W.weight": 1,
        "decoder.attention.V.weight": 2,
        "decoder.U_f.weight": 3,
        "decoder.window.W_p.weight": 4,
    }
    assert registry.current_names(before, composition) == today
    vanilla = replace(ModelConfig(), attention="none")
    assert registry.current_names(before, registry.compose(vanilla)) == before


@pytest.mark.parametrize("engine", ["torch", "flax"])
def test_a_run_stopped_before_the_room_resumes_as_if_it_never_stopped(engine, tmp_path):
    """tests/data/legacy/resume: the code before the room trained a local-p model for 2 steps of
    4 (a constant rate, so the step count changes nothing else) and, apart, for all 4; Flax
    under the suite's XLA flags (conftest.py). The first resumed here ends with the second's
    weights: its optimiser state (PyTorch's moments by position, optax's by parameter path)
    meets the weights it was kept for. Bit for bit on the CPU that stored them; elsewhere, or
    with ALIGNMT_FUSED=0, float32 rounds differently (4.5e-8 seen), while a moment meeting
    the wrong weight moves it by about the learning rate (3e-3) at each step."""
    if engine == "flax":
        pytest.importorskip("flax")
    run = _legacy_run(f"{engine}_local_p_half", tmp_path)
    cfg = apply_overrides(load_config(run / "config.yaml"), [f"out_dir={run}", "train.steps=4"])
    train(cfg, progress=False, resume=True)
    whole = load_file(LEGACY / "resume" / f"{engine}_local_p_whole.safetensors")
    resumed = load_file(run / "model.safetensors")
    expected = registry.current_names(whole, registry.compose(cfg.model))
    assert resumed.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(resumed[name], expected[name], rtol=0, atol=1e-5)


def test_a_coverage_run_stopped_before_the_room_is_refused_and_kept(tmp_path):
    """Coverage's weights moved among the model's parameters, so the old PyTorch moments,
    stored by position, would reach other weights: resuming is refused, the folder kept."""
    run = _legacy_run("torch_sum_half", tmp_path)
    kept = {path.name: path.read_bytes() for path in run.iterdir()}
    cfg = apply_overrides(load_config(run / "config.yaml"), [f"out_dir={run}", "train.steps=4"])
    with pytest.raises(ValueError, match=r"last.safetensors: was saved by an alignmt .* cannot"):
        train(cfg, progress=False, resume=True)
    assert {path.name: path.read_bytes() for path in run.iterdir()} == kept


def _legacy_run(name: str, tmp_path: Path) -> Path:
    run = tmp_path / name
    shutil.copytree(LEGACY / "resume" / name, run)
    return run
