"""Scheduled sampling in Flax: all truth is Flax's teacher forcing, no truth with argmax is
PyTorch's free running on the same weights, and a Flax run trains with a schedule."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
import torch

if os.environ.get("CI"):  # CI installs the [flax] extra: there a missing JAX is a failure
    import jax
else:
    jax = pytest.importorskip(
        "jax", reason="the [flax] extra is not installed: pip install -e '.[flax]'"
    )
import jax.numpy as jnp

from alignmt.training.run import train
from tests.conftest import padded_batch
from tests.test_flax_model import ARCH, as_jax, twins, x64  # noqa: F401 (a fixture)
from tests.test_flax_train import reverse_config
from tests.test_scheduled_sampling import free_running

# each decoder (each case compiles its own scans; PyTorch's tests run under -m "not slow")
CASES = [
    pytest.param(arch, changes, id=name, marks=pytest.mark.slow)
    for arch, changes, name in [
        (ARCH["gru-bi-L1-additive-cgru"], {"readout": "tanh"}, "cgru"),
        (ARCH["gru-bi-L1-additive-bahdanau"], {"readout": "maxout"}, "bahdanau"),
        (ARCH["lstm-uni-L2-general-luong"], {}, "luong"),
        (ARCH["gru-uni-L1-none-bahdanau"], {"readout": "tanh"}, "vanilla"),
        (ARCH["lstm-bi-L2-additive-cgru"], {"readout": "tanh"}, "cgru-lstm-L2"),
    ]
]


def flax_logits(flax_model, variables, src, src_len, tgt_in, **sampling):
    """The Flax model's training-mode logits (B, T_tgt, V), dropout being 0."""
    rngs = {"dropout": jax.random.key(0), "sampling": jax.random.key(1)}
    log_probs, _ = flax_model.apply(
        variables, *as_jax(src, src_len, tgt_in), train=True, rngs=rngs, **sampling
    )
    return np.asarray(log_probs.logits)


@pytest.mark.usefixtures("x64")
@pytest.mark.parametrize("arch,changes", CASES)
def test_all_truth_is_teacher_forcing_and_no_truth_is_pytorchs_free_running(arch, changes):
    model, flax_model, variables = twins(arch, **changes)
    src, src_len, tgt_in, _ = padded_batch()
    forced = flax_logits(flax_model, variables, src, src_len, tgt_in)
    truth = flax_logits(flax_model, variables, src, src_len, tgt_in, teacher=jnp.float64(1.0))
    np.testing.assert_allclose(truth, forced, rtol=0, atol=1e-12)

    gold = torch.randint(4, 13, tgt_in.shape, generator=torch.Generator().manual_seed(1))
    gold[:, 0] = model.bos_id
    own = flax_logits(
        flax_model, variables, src, src_len, gold, teacher=jnp.float64(0.0), pick="argmax"
    )
    _, expected = free_running(model, src, src_len, gold.size(1))
    np.testing.assert_allclose(own, expected.detach().numpy(), rtol=0, atol=1e-10)


@pytest.mark.slow  # two Flax runs, compiled
def test_a_flax_run_with_scheduled_sampling_starts_as_teacher_forcing_and_departs(tmp_path):
    """Without dropout, a linear schedule's first update (eps_0 = 1) is teacher forcing's;
    the model's own tokens change the losses that follow."""

    def run(name: str, **sampling):
        cfg = reverse_config(tmp_path / name, steps=12, log_every=1, **sampling)
        return train(replace(cfg, model=replace(cfg.model, dropout=0.0)), progress=False)

    forced = run("forced")
    sampled = run(
        "sampled", scheduled_sampling="linear", sampling_slope=0.08, sampling_pick="argmax"
    )
    assert sampled.losses[0] == pytest.approx(forced.losses[0], rel=1e-6)
    assert sampled.losses[-1] != pytest.approx(forced.losses[-1], rel=1e-3)
