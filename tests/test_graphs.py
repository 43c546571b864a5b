"""`train.cuda_graphs` without a GPU: the bucket arithmetic, the refusals, and that padding a
batch to its bucket changes neither the loss nor any gradient (the graph capture itself is
replaced by the plain module here; tests/test_cuda.py replays real graphs)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from alignmt.config import Config, DataConfig, ModelConfig, TrainConfig
from alignmt.training import graphs
from alignmt.training.graphs import GraphedObjective, check_graphs, padded_rows
from alignmt.training.run import train
from tests.architectures import ARCHITECTURES, arch_id
from tests.conftest import loss_targets, padded_batch, tiny_model


def test_rows_are_padded_to_four_buckets_per_power_of_two():
    assert [padded_rows(n) for n in (1, 8, 9, 17, 64, 65, 100, 170, 600)] == [
        8, 8, 16, 24, 64, 80, 112, 192, 640,
    ]  # fmt: skip
    for rows in range(1, 5000):
        assert 0 <= padded_rows(rows) - rows < max(8, rows / 4)


@pytest.fixture
def without_capture(monkeypatch):
    """GraphedObjective on the CPU: 'capturing' returns the module, which runs eagerly."""
    monkeypatch.setattr(graphs.torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(graphs.torch.cuda, "make_graphed_callables", lambda module, *a, **k: module)


# (source lengths, target lengths) and the bucket (rows, T_src, T_tgt) each is padded to
SHAPES = [((6, 2, 4), (3, 5, 1), (8, 8, 8)), ((9, 1, 3, 12, 5), (11, 2, 7, 4, 9), (8, 16, 16))]


@pytest.mark.parametrize("arch", ARCHITECTURES[::3], ids=arch_id)
def test_padding_to_the_bucket_changes_no_loss_and_no_gradient(arch, without_capture):
    model = tiny_model(**arch).train()  # dropout is 0: train mode computes the same function
    objective = GraphedObjective(model)
    for src_lens, tgt_lens, bucket in SHAPES:
        src, src_len, tgt_in, tgt_len = padded_batch(src_lens, tgt_lens)
        tgt_out = loss_targets(tgt_in, tgt_len)
        model.zero_grad()
        want = model.loss(src, src_len, tgt_in, tgt_out, label_smoothing=0.1)
        want.backward()
        expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        got = objective(src, src_len, tgt_in, tgt_out, label_smoothing=0.1)
        got.backward()
        assert bucket in objective.graphs
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        assert {n for n, p in model.named_parameters() if p.grad is not None} == set(expected)
        for name, grad in expected.items():
            torch.testing.assert_close(model.get_parameter(name).grad, grad, msg=name)
    assert len(objective.graphs) == len(SHAPES)


def graph_config(**train) -> Config:
    return Config(
        model=ModelConfig(emb_dim=8, enc_hidden=8, dec_hidden=16, attn_dim=8),
        data=DataConfig(task="reverse", min_len=2, max_len=4),
        train=TrainConfig(steps=2, cuda_graphs=True, **train),
    )


@pytest.mark.parametrize(
    "cfg, device, processes, message",
    [
        (graph_config(), "cpu", 1, "needs a CUDA device; this run trains on cpu"),
        (graph_config(), "cuda", 2, "trains in one process; torchrun started several"),
        (graph_config(guided_alignment="task"), "cuda", 1, "turn off train.guided_alignment"),
        (graph_config(scheduled_sampling="linear"), "cuda", 1, "and train.scheduled_sampling"),
    ],
    ids=["cpu", "torchrun", "guided", "scheduled sampling"],
)
def test_graphs_are_refused_where_they_cannot_run(cfg, device, processes, message):
    with pytest.raises(ValueError, match=message):
        check_graphs(cfg, torch.device(device), processes)


def test_a_cpu_run_with_graphs_stops_before_training(tmp_path):
    cfg = replace(graph_config(device="cpu"), out_dir=str(tmp_path / "run"))
    with pytest.raises(ValueError, match=r"train\.cuda_graphs=true needs a CUDA device"):
        train(cfg, progress=False)


def test_a_flax_run_with_graphs_is_refused(tmp_path):
    pytest.importorskip("jax")
    from alignmt.training.run import train

    cfg = replace(graph_config(engine="flax"), out_dir=str(tmp_path / "run"))
    with pytest.raises(ValueError, match="XLA compiles the Flax step whole already"):
        train(cfg, progress=False)
    assert not (tmp_path / "run").exists()  # refused before the run claimed its folder
