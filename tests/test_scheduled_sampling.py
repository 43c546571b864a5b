"""Scheduled sampling (Bengio et al. 2015) in PyTorch: the schedules, the choice of each
position's input, and the two ends of the rate: all truth is teacher forcing, none is free
running."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
import torch

from alignmt.config import ConfigError, TrainConfig, load_config
from alignmt.model.decoder import Sampling
from alignmt.training.optim import sampling_at, teacher_rate
from alignmt.training.run import train
from tests.conftest import padded_batch, tiny_model
from tests.test_train import tiny_config

ORDERS = [
    dict(attention="additive", order="bahdanau", readout="maxout"),
    dict(attention="general", order="luong"),
    dict(attention="additive", order="cgru", readout="tanh"),
    dict(attention="none", readout="tanh"),
]
ORDER_IDS = ["bahdanau", "luong", "cgru", "vanilla"]


def test_the_three_schedules_are_the_papers():
    linear = TrainConfig(scheduled_sampling="linear", sampling_slope=1e-3, sampling_floor=0.2)
    assert [teacher_rate(linear, i) for i in (0, 300, 800, 5000)] == pytest.approx(
        [1.0, 0.7, 0.2, 0.2]
    )
    exponential = TrainConfig(scheduled_sampling="exponential", sampling_k=0.999)
    assert teacher_rate(exponential, 0) == 1.0
    assert teacher_rate(exponential, 1000) == pytest.approx(0.999**1000)
    sigmoid = TrainConfig(scheduled_sampling="inverse_sigmoid", sampling_k=100.0)
    assert teacher_rate(sigmoid, 0) == pytest.approx(100 / 101)
    assert teacher_rate(sigmoid, 460) == pytest.approx(100 / (100 + math.exp(4.6)))
    assert teacher_rate(sigmoid, 10**6) == pytest.approx(0.0, abs=1e-100)  # no overflow
    assert teacher_rate(TrainConfig(), 10**6) == 1.0
    assert sampling_at(TrainConfig(), 5) is None
    assert sampling_at(sigmoid, 0) == Sampling(100 / 101, "sample")


@pytest.mark.parametrize(
    "schedule,k,says",
    [
        ("exponential", 1.0, "must be in (0, 1) for the exponential schedule"),
        ("inverse_sigmoid", 0.5, "must be at least 1 for the inverse_sigmoid schedule"),
        ("linear", 1.5, "must be in (0, 1] for the linear schedule"),
    ],
)
def test_a_k_that_never_decays_is_refused_with_its_schedule(schedule, k, says):
    with pytest.raises(ConfigError, match=re.escape(f"train.sampling_k: {says}")):
        load_config(overrides=[f"train.scheduled_sampling={schedule}", f"train.sampling_k={k}"])


def test_each_position_reads_the_truth_at_the_rate_and_else_the_models_own_token():
    torch.manual_seed(0)
    rows = 20_000
    gold = torch.full((rows,), 7)
    logits = torch.log(torch.tensor([0.0, 0.0, 0.0, 0.75, 0.25])).expand(rows, -1)
    fed = Sampling(0.3, "sample").mix(gold, logits)
    assert (fed == 7).float().mean().item() == pytest.approx(0.3, abs=0.015)
    own = fed[fed != 7]
    assert set(own.tolist()) == {3, 4}  # drawn from the distribution, never a 0-mass token
    assert (own == 3).float().mean().item() == pytest.approx(0.75, abs=0.015)
    best = Sampling(0.0, "argmax").mix(gold, logits)
    assert torch.equal(best, torch.full((rows,), 3))


@pytest.mark.parametrize("arch", ORDERS, ids=ORDER_IDS)
def test_all_truth_is_teacher_forcing_loss_and_gradients(arch):
    """The sampled unroll (per step, each input chosen after the step before) with eps = 1
    gives teacher forcing's loss and gradients, to float64 rounding."""
    model = tiny_model(**arch).train()
    src, src_len, tgt_in, _ = padded_batch()
    tgt_out = torch.roll(tgt_in, -1, dims=1).masked_fill(tgt_in == 0, 0)
    losses, grads = [], []
    for sampling in (None, Sampling(1.0, "sample")):
        model.zero_grad()
        loss = model.loss(src, src_len, tgt_in, tgt_out, 0.1, sampling=sampling)
        loss.backward()
        losses.append(loss.item())
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    assert losses[0] == pytest.approx(losses[1], rel=0, abs=1e-12)
    assert len(grads[0]) == len(grads[1])
    for forced, sampled in zip(*grads, strict=True):
        torch.testing.assert_close(forced, sampled, rtol=0, atol=1e-12)


def free_running(model, src, src_len, steps: int):
    """Greedy decoding without stopping: the inputs fed and the logits (B, steps, V)."""
    memory, state = model.encode(src, src_len)
    prev = torch.full((src.size(0),), model.bos_id)
    fed, logits = [prev], []
    for _ in range(steps):
        log_probs, state, _ = model.decode_step(prev, state, memory)
        step_logits = log_probs.logits
        prev = step_logits.argmax(-1)
        fed.append(prev)
        logits.append(step_logits)
    return torch.stack(fed[:-1], 1), torch.stack(logits, 1)


@pytest.mark.parametrize("arch", ORDERS, ids=ORDER_IDS)
def test_no_truth_with_argmax_is_free_running(arch):
    """eps = 0 and argmax: every position reads the model's own best token before it, so
    the unroll's logits are greedy decoding's, whatever the gold target says."""
    model = tiny_model(**arch, seed=3)
    src, src_len, tgt_in, _ = padded_batch()
    gold = torch.randint(4, 13, tgt_in.shape, generator=torch.Generator().manual_seed(1))
    gold[:, 0] = model.bos_id
    memory, state = model.encode(src, src_len)
    unrolled = model.decoder.unroll(gold, state, memory, Sampling(0.0, "argmax"))
    logits = model.decoder.projection(unrolled.features)
    _, expected = free_running(model, src, src_len, gold.size(1))
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-12)
    assert not torch.equal(logits.argmax(-1)[:, :-1], gold[:, 1:])  # the truth went unread


def test_a_run_with_scheduled_sampling_trains_and_its_first_update_is_teacher_forcing(tmp_path):
    """eps_0 = 1 under every schedule: the first logged loss of a linear-schedule run is the
    teacher-forced run's, and later ones differ as the model's own tokens come in."""

    def run(name: str, **sampling):
        cfg = tiny_config(tmp_path / name, steps=30, log_every=1)
        return train(replace(cfg, train=replace(cfg.train, **sampling)), progress=False)

    forced = run("forced")
    sampled = run(
        "sampled", scheduled_sampling="linear", sampling_slope=0.03, sampling_pick="argmax"
    )
    assert sampled.losses[0] == forced.losses[0]
    assert sampled.losses[-1] != forced.losses[-1]
    assert sampled.losses[-1] < sampled.losses[0]
