"""Scorers and the masked softmax against the papers' equations, hand arithmetic and NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alignmt import reference as ref
from alignmt.model.attention import (
    AdditiveAttention,
    ConcatAttention,
    DotAttention,
    GeneralAttention,
    LocationAttention,
    make_attention,
    masked_softmax,
)
from tests.architectures import ATTENTIONS

D, C, A = 3, 4, 5


def make_inputs(query_dim=D, key_dim=C, lengths=(4, 2, 3), seed=0):
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    query = torch.randn(len(lengths), query_dim, generator=g, dtype=torch.float64)
    keys = torch.randn(len(lengths), T, key_dim, generator=g, dtype=torch.float64)
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    keys = keys.masked_fill(~mask[..., None], 0.0)  # as the encoder leaves padding
    return query, keys, mask


def scorer(kind: str, query_dim=D, key_dim=C):
    torch.manual_seed(0)
    return make_attention(kind, query_dim=query_dim, key_dim=key_dim, attn_dim=A).double()


def reference_scores(module, s: np.ndarray, H: np.ndarray, C: np.ndarray | None = None):
    """The module's scores for one sentence, computed by alignmt.reference from its weights
    (and the coverage C (T,) so far, for a scorer with coverage)."""
    w = {name: p.detach().numpy() for name, p in module.named_parameters()}
    V = w["V.weight"][:, 0] if "V.weight" in w else None
    if isinstance(module, AdditiveAttention):
        return ref.additive_scores(s, H, w["W_s.weight"], w["W_h.weight"], w["v.weight"][0], V, C)
    if isinstance(module, ConcatAttention):
        return ref.concat_scores(s, H, w["W.weight"], w["v.weight"][0], V, C)
    if isinstance(module, GeneralAttention):
        return ref.general_scores(s, H, w["W.weight"])
    if isinstance(module, LocationAttention):
        return ref.location_scores(s, H, w["W_a.weight"])
    if module.scale == 1.0:
        return ref.dot_scores(s, H)
    return ref.scaled_dot_scores(s, H)


def test_worked_example_of_seed_001_is_reproduced_to_its_printed_precision():
    alpha, c = ref.worked_example()
    np.testing.assert_allclose(np.round(alpha, 3), [0.430, 0.217, 0.353], atol=0)
    np.testing.assert_allclose(np.round(c, 3), [0.783, 0.570], atol=0)

    module = AdditiveAttention(query_dim=2, key_dim=2, attn_dim=2).double()
    with torch.no_grad():
        module.W_s.weight.copy_(torch.eye(2))
        module.W_h.weight.copy_(torch.tensor([[1.0, -1.0], [1.0, 1.0]]))
        module.v.weight.copy_(torch.tensor([[0.5, 0.5]]))
    H = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]], dtype=torch.float64)
    s = torch.tensor([[0.5, 0.8]], dtype=torch.float64)
    with torch.no_grad():
        context, weights = module(s, module.project_keys(H), H, torch.ones(1, 3, dtype=torch.bool))
    np.testing.assert_allclose(weights[0].numpy(), alpha, rtol=0, atol=1e-12)
    np.testing.assert_allclose(context[0].numpy(), c, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["additive", "concat", "general"])
def test_equal_scores_give_the_mean_of_the_real_encoder_states(kind):
    """An uninformed attention (equal scores) averages the unpadded states."""
    module = scorer(kind)
    with torch.no_grad():  # zero the last layer of the score: every e_ij becomes 0
        (module.v if kind != "general" else module.W).weight.zero_()
    query, keys, mask = make_inputs()
    context, weights = module(query, module.project_keys(keys), keys, mask)
    lengths = mask.sum(1, keepdim=True).double()
    torch.testing.assert_close(weights, mask / lengths)
    torch.testing.assert_close(context, keys.sum(1) / lengths)


def test_concat_score_equals_separate_projections_when_W_is_split():
    """v^T tanh(W [s; h]) = v^T tanh(W_q s + W_k h) for W = [W_q | W_k]."""
    concat = scorer("concat")
    additive = AdditiveAttention(query_dim=D, key_dim=C, attn_dim=A).double()
    with torch.no_grad():
        additive.W_s.weight.copy_(concat.W.weight[:, :D])
        additive.W_h.weight.copy_(concat.W.weight[:, D:])
        additive.v.weight.copy_(concat.v.weight)
    query, keys, mask = make_inputs()
    expected = additive(query, additive.project_keys(keys), keys, mask)
    actual = concat(query, concat.project_keys(keys), keys, mask)
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-12)
    # ... and literally concatenating [s; h_j], as the reference does, gives the same scores.
    W, v = concat.W.weight.detach().numpy(), concat.v.weight[0].detach().numpy()
    s, H = query[0].numpy(), keys[0].numpy()
    np.testing.assert_allclose(
        ref.concat_scores(s, H, W, v), ref.additive_scores(s, H, W[:, :D], W[:, D:], v), atol=1e-12
    )


@pytest.mark.parametrize("kind", ATTENTIONS)
def test_every_score_matches_the_numpy_reference_in_float64(kind):
    key_dim = D if kind in ("dot", "scaled_dot") else C
    module = scorer(kind, key_dim=key_dim)
    query, keys, mask = make_inputs(key_dim=key_dim)
    context, weights = module(query, module.project_keys(keys), keys, mask)
    for b in range(query.size(0)):
        s, H, m = query[b].numpy(), keys[b].numpy(), mask[b].numpy()
        c_ref, alpha_ref = ref.attend(
            reference_scores(module, s, H[m]), H[m], np.ones(m.sum(), bool)
        )
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
        expected = ref.masked_softmax(scores[b].numpy(), mask[b].numpy())
        np.testing.assert_allclose(weights[b].numpy(), expected, rtol=0, atol=1e-10)


def test_a_row_without_real_tokens_is_nan_not_spread_over_padding():
    weights = masked_softmax(torch.zeros(1, 3), torch.zeros(1, 3, dtype=torch.bool))
    assert torch.isnan(weights).all()


def test_masked_softmax_passes_gradcheck():
    scores = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.arange(5)[None, :] < torch.tensor([5, 2, 4])[:, None]
    assert torch.autograd.gradcheck(lambda e: masked_softmax(e, mask), (scores,))


@pytest.mark.parametrize("kind", ATTENTIONS)
def test_every_score_passes_gradcheck_in_query_keys_and_weights(kind):
    key_dim = D if kind in ("dot", "scaled_dot") else C
    module = scorer(kind, key_dim=key_dim)
    query, keys, mask = make_inputs(key_dim=key_dim)
    query.requires_grad_(True)
    keys.requires_grad_(True)
    full = ProjectThenScore(module)  # one call that runs project_keys and forward
    names = [name for name, _ in full.named_parameters()]

    def run(query, keys, *weights):
        params = dict(zip(names, weights, strict=True))
        return torch.func.functional_call(full, params, (query, keys, mask))

    weights = tuple(p.detach().clone().requires_grad_(True) for p in full.parameters())
    assert torch.autograd.gradcheck(run, (query, keys, *weights))


class ProjectThenScore(torch.nn.Module):
    def __init__(self, scorer: torch.nn.Module) -> None:
        super().__init__()
        self.scorer = scorer

    def forward(self, query, keys, mask):
        return self.scorer(query, self.scorer.project_keys(keys), keys, mask)


def test_the_module_keeps_no_state_between_batches():
    module = scorer("additive")
    first = make_inputs(seed=1)
    second = make_inputs(lengths=(1, 4), seed=2)
    before = module(first[0], module.project_keys(first[1]), first[1], first[2])
    module(second[0], module.project_keys(second[1]), second[1], second[2])
    after = module(first[0], module.project_keys(first[1]), first[1], first[2])
    torch.testing.assert_close(after, before, rtol=0, atol=0)
    assert set(vars(module)) == set(vars(scorer("additive")))


def test_dot_scores_refuse_mismatched_sizes_with_a_clear_error():
    with pytest.raises(ValueError, match="query_dim=3 and key_dim=4"):
        DotAttention(query_dim=3, key_dim=4)
    with pytest.raises(ValueError, match="unknown attention 'bilinear'"):
        make_attention("bilinear", query_dim=3, key_dim=3, attn_dim=3)


def test_scaled_dot_divides_the_dot_scores_by_sqrt_d():
    query, keys, mask = make_inputs(key_dim=D)
    plain, scaled = (
        DotAttention(query_dim=D, key_dim=D),
        DotAttention(query_dim=D, key_dim=D, scaled=True),
    )
    # Scaling the query by 1/sqrt(D) in the plain score is the same thing.
    expected = plain(query / np.sqrt(D), keys, keys, mask)
    torch.testing.assert_close(scaled(query, keys, keys, mask), expected)


def test_general_score_is_s_transpose_W_h():
    module = scorer("general")
    assert isinstance(module, GeneralAttention) and module.W.weight.shape == (D, C)
    query, keys, mask = make_inputs()
    _, weights = module(query, module.project_keys(keys), keys, mask)
    scores = torch.einsum("bd,dc,btc->bt", query, module.W.weight, keys)
    torch.testing.assert_close(weights, masked_softmax(scores, mask))
    assert isinstance(scorer("concat"), ConcatAttention)
