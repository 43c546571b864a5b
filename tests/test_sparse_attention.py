"""Sparse attention weights: sparsemax (Martins & Astudillo 2016) and 1.5-entmax (Peters,
Niculae & Martins 2019), as the reference, the PyTorch scorers and the Flax side compute
them, against the `entmax` package (the authors' own) and each other."""

from __future__ import annotations

import entmax
import numpy as np
import pytest
import torch

from alignmt.model.attention.mappings import reference as mappings_ref
from alignmt.model.attention.mappings.torch import masked_sparse
from tests.architectures import ATTENTIONS
from tests.test_attention import (
    C,
    D,
    attend,
    attention,
    make_inputs,
    reference_attend,
    reference_scores,
)

FNS = ["sparsemax", "entmax15"]
PACKAGE = {"sparsemax": entmax.sparsemax, "entmax15": entmax.entmax15}


def rows(seed: int = 0) -> torch.Tensor:
    """(40, 7) float64 scores at several scales: spread out (few nonzero) to flat (all)."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.tensor([0.05, 0.5, 2.0, 20.0], dtype=torch.float64).repeat_interleave(10)
    return torch.randn(40, 7, generator=g, dtype=torch.float64) * scale[:, None]


@pytest.mark.parametrize("fn", FNS)
def test_the_reference_mappings_match_the_authors_package_in_float64(fn):
    scores = rows()
    expected = PACKAGE[fn](scores, dim=-1).numpy()
    mine = np.stack([mappings_ref.MAPPINGS[fn](e, np.ones(7, bool)) for e in scores.numpy()])
    np.testing.assert_allclose(mine, expected, rtol=0, atol=1e-12)
    zeros = (mine == 0).mean()
    assert 0.2 < zeros < 0.9  # sparse indeed, and not one-hot everywhere


def test_a_two_way_tie_splits_evenly_and_the_rest_is_exactly_zero():
    e = np.array([2.0, 2.0, 0.5, -1.0])
    for fn in FNS:
        mine = mappings_ref.MAPPINGS[fn](e, np.ones(4, bool))
        weights = masked_sparse(torch.from_numpy(e)[None], torch.ones(1, 4, dtype=torch.bool), fn)
        for alpha in (mine, weights[0].numpy()):
            np.testing.assert_allclose(alpha[:2], [0.5, 0.5], rtol=0, atol=1e-15)
            np.testing.assert_array_equal(alpha[2:], [0, 0])
    # softmax's weights on the same scores: never zero
    assert (mappings_ref.masked_softmax(e, np.ones(4, bool)) > 0.02).all()


@pytest.mark.parametrize("fn", FNS)
def test_padding_gets_zero_weight_and_changes_nothing(fn):
    scores = rows(1)[:4, :6] * 3
    mask = torch.arange(6)[None, :] < torch.tensor([6, 1, 3, 5])[:, None]
    weights = masked_sparse(scores, mask, fn)
    assert torch.equal(weights[~mask], torch.zeros((~mask).sum(), dtype=torch.float64))
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, dtype=torch.float64))
    # padding scores far above the real ones (whatever a scorer makes of padded keys)
    loud = masked_sparse(scores.masked_fill(~mask, 1e3), mask, fn)
    assert torch.equal(loud, weights)
    for b, n in enumerate(mask.sum(-1).tolist()):
        alone = PACKAGE[fn](scores[b : b + 1, :n], dim=-1)
        torch.testing.assert_close(weights[b : b + 1, :n], alone, rtol=0, atol=1e-12)


@pytest.mark.parametrize("fn", FNS)
def test_the_masked_mappings_pass_gradcheck(fn):
    scores = rows(2)[:5, :6].clone().requires_grad_(True)
    mask = torch.arange(6)[None, :] < torch.tensor([6, 2, 4, 6, 3])[:, None]
    assert torch.autograd.gradcheck(lambda e: masked_sparse(e, mask, fn), (scores,))


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize("kind", ATTENTIONS)
def test_every_score_with_sparse_weights_matches_the_reference(kind, fn):
    key_dim = D if kind in ("dot", "scaled_dot") else C
    module = attention(kind, key_dim=key_dim, attention_fn=fn)
    query, keys, mask = make_inputs(key_dim=key_dim)
    with torch.no_grad():  # scores spread enough for zeros (tanh bounds additive and concat)
        query, keys = query * 3, keys * 3
        for weight in module.parameters():
            weight.mul_(3)
    context, weights = attend(module, query, keys, mask)
    for b in range(query.size(0)):
        s, H, m = query[b].numpy(), keys[b].numpy(), mask[b].numpy()
        e = reference_scores(module, s, H[m])
        c_ref, alpha_ref = reference_attend(e, H[m], np.ones(m.sum(), bool), fn)
        np.testing.assert_allclose(weights[b, m].detach().numpy(), alpha_ref, rtol=0, atol=1e-10)
        np.testing.assert_allclose(context[b].detach().numpy(), c_ref, rtol=0, atol=1e-10)
    assert (weights[mask] == 0).any()


@pytest.mark.parametrize("fn", FNS)
def test_the_flax_mappings_match_the_reference(fn):
    jax = pytest.importorskip("jax")
    from alignmt.model.attention.mappings.flax import masked_sparse as flax_masked_sparse

    scores = rows(3)[:8] * 2
    mask = torch.arange(7)[None, :] < torch.tensor([7, 1, 3, 5, 7, 2, 6, 4])[:, None]
    with jax.enable_x64(True):
        mine = np.asarray(flax_masked_sparse(scores.numpy(), mask.numpy(), fn))
        grads = jax.grad(lambda e: flax_masked_sparse(e, mask.numpy(), fn)[:, 0].sum())(
            scores.numpy()
        )
    for b in range(8):
        expected = mappings_ref.MAPPINGS[fn](scores[b].numpy(), mask[b].numpy())
        np.testing.assert_allclose(mine[b], expected, rtol=0, atol=1e-12)
    # the same gradient as the package's own backward pass (no NaN from sqrt at 0)
    e = scores.clone().requires_grad_(True)
    masked_sparse(e, mask, fn)[:, 0].sum().backward()
    np.testing.assert_allclose(np.asarray(grads), e.grad.numpy(), rtol=0, atol=1e-10)


def test_a_sparse_model_learns_reversal_with_exact_zeros_in_its_attention(tmp_path):
    from alignmt.config import load_config
    from alignmt.model.batch import source_batch
    from alignmt.training.run import train

    overrides = [
        *("model.attention_fn=entmax15", "train.guided_alignment=task", "train.guided_cost=mse"),
        *("train.steps=150", "train.lr=1e-2", "train.log_every=50", "train.eval_every=0"),
        *("data.min_len=3", "data.max_len=5", "model.emb_dim=16", "model.enc_hidden=32"),
        *("model.dec_hidden=64", "model.attn_dim=32", f"out_dir={tmp_path / 'run'}"),
    ]
    result = train(load_config(None, overrides), progress=False)
    assert result.losses[-1] < result.losses[0] / 3
    model, vocab = result.model, result.tgt_vocab
    words = ["abcde", "hello", "xyz", "tram", "queen"]
    src, src_len = source_batch([list(w) for w in words], result.src_vocab)
    with torch.no_grad():
        memory, state = model.encode(src, src_len)
        prev, out, alphas = torch.full((len(words),), model.bos_id), [], []
        for _ in range(6):
            log_probs, state, alpha = model.decode_step(prev, state, memory)
            prev = log_probs.best()[0]
            out.append(prev)
            alphas.append(alpha)
    said = ["".join(vocab.decode(row.tolist())) for row in torch.stack(out, 1)]
    assert sum(s == w[::-1] for s, w in zip(said, words, strict=True)) >= 4
    alpha = torch.stack(alphas, 1)  # (B, 6, T_src)
    real = (torch.arange(src.size(1)) < src_len[:, None])[:, None, :].expand_as(alpha)
    assert 0.3 < (alpha[real] == 0).float().mean() < 1  # many exact zeros among real tokens
