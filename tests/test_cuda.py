"""On a CUDA GPU: training, decoding in float32 and under bfloat16 autocast, the demo, and
the server. Every test here is marked `cuda` and skipped, with the reason, where torch sees
no GPU; the CPU side of `--device` and `--precision` is test_device.py's and test_cli.py's."""

from __future__ import annotations

import http.client
import json
import math
import socket
from dataclasses import replace

import pytest
import torch
from benchmarks.load import local_server
from torch import Tensor

from alignmt.checkpoint.format import snapshot_steps
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import Config, DataConfig, ModelConfig, TrainConfig
from alignmt.decoding.door import open_translator
from alignmt.decoding.translator import Translator
from alignmt.training.run import train
from tests.conftest import LEXICON, brief_demo

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="no CUDA device: torch.cuda.is_available() is False",
    ),
]

CUDA = torch.device("cuda")
WORDS = sorted(LEXICON)
LINES = [" ".join(WORDS[i % 10 : i % 10 + 1 + i % 5]) for i in range(40)]


def needs_bf16() -> None:
    if not torch.cuda.is_bf16_supported():
        pytest.skip(f"{torch.cuda.get_device_name()} does not support bfloat16")


def translator(run, device, beam: int, precision: str = "float32") -> Translator:
    ckpt = load_checkpoint(run, device=device)
    search = replace(ckpt.config.search, beam_size=beam)
    return open_translator(ckpt, search=search, precision=precision)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_training_runs_on_the_gpu_and_its_checkpoint_loads_on_the_cpu(tmp_path, precision):
    if precision == "bfloat16":
        needs_bf16()
    cfg = Config(
        model=ModelConfig(emb_dim=16, enc_hidden=32, dec_hidden=64, attn_dim=32),
        data=DataConfig(task="reverse", min_len=2, max_len=4),
        train=TrainConfig(
            steps=20, log_every=10, lr=1e-2, batch_size=32, device="cuda", precision=precision
        ),
        out_dir=str(tmp_path / "run"),
    )
    result = train(cfg, progress=False)
    assert next(result.model.parameters()).device.type == "cuda"
    assert all(p.dtype == torch.float32 for p in result.model.parameters())  # autocast only
    assert len(result.losses) == 2 and all(math.isfinite(loss) for loss in result.losses)
    assert result.losses[1] < result.losses[0]
    on_cpu = load_checkpoint(result.run_dir).model.state_dict()
    for name, value in result.model.state_dict().items():
        torch.testing.assert_close(on_cpu[name], value.cpu(), msg=name)


@pytest.mark.parametrize("beam", [1, 3], ids=["greedy", "beam 3"])
def test_the_gpu_translates_as_the_cpu_does(toy_run, beam):
    nbest = min(beam, 2)
    want = translator(toy_run, "cpu", beam).translate(LINES, nbest=nbest, batch_size=8)
    gpu = translator(toy_run, CUDA, beam)
    assert next(gpu.model.parameters()).device.type == "cuda"
    got = gpu.translate(LINES, nbest=nbest, batch_size=8)
    for hyps, expected in zip(got, want, strict=True):
        for g, w in zip(hyps, expected, strict=True):
            assert g.tokens == w.tokens
            # cuDNN's RNNs may use TF32 on Ampere and later: close, not equal
            assert math.isclose(g.score, w.score, rel_tol=1e-2, abs_tol=1e-3)
            assert g.attention.device.type == "cpu"
            torch.testing.assert_close(
                torch.as_tensor(g.attention), torch.as_tensor(w.attention), atol=1e-2, rtol=1e-2
            )
            assert g.alignment == w.alignment


def test_constrained_search_places_phrases_on_the_gpu_as_on_the_cpu(toy_run):
    cpu, gpu = translator(toy_run, "cpu", 3), translator(toy_run, CUDA, 3)
    phrases = [
        gpu.constraint(["katze"], ["hund"]) if i % 3 == 0 else None for i in range(len(LINES))
    ]
    want = cpu.translate(LINES, nbest=2, batch_size=8, constraints=phrases)
    got = gpu.translate(LINES, nbest=2, batch_size=8, constraints=phrases)
    for hyps, expected, constraint in zip(got, want, phrases, strict=True):
        assert [h.tokens for h in hyps] == [h.tokens for h in expected]
        if constraint is not None:
            assert gpu.met(hyps[0], constraint) == [True] and "hund" not in hyps[0].tokens
    tokens, trace = gpu.beam_trace(LINES[0], beam_size=3, constraint=phrases[0])
    assert gpu.hypothesis(tokens, trace, trace.finished[0]).tokens == want[0][0].tokens


def test_step_through_and_the_beam_tree_run_on_the_gpu_as_on_the_cpu(toy_run):
    cpu, gpu = translator(toy_run, "cpu", 3), translator(toy_run, CUDA, 3)
    line = LINES[7]
    for prefix, override in [((), None), (("ein",), {1: 0})]:
        want = cpu.step_through(line, prefix=prefix, override=override, beam_size=3)
        got = gpu.step_through(line, prefix=prefix, override=override, beam_size=3)
        assert [s.token for s in got.steps] == [s.token for s in want.steps]
        assert all(s.attention.device.type == "cpu" for s in got.steps)
    tokens, trace = gpu.beam_trace(line, beam_size=3)
    assert trace.nodes[0].attention.device.type == "cpu"
    best = gpu.hypothesis(tokens, trace, trace.finished[0])
    assert best.text == cpu.translate([line])[0][0].text


@pytest.mark.parametrize("beam", [1, 3], ids=["greedy", "beam 3"])
def test_bfloat16_autocast_decodes_mostly_as_float32_does(toy_run, beam):
    needs_bf16()
    want = translator(toy_run, CUDA, beam).translate(LINES)
    got = translator(toy_run, CUDA, beam, precision="bfloat16").translate(LINES)
    same = sum(g[0].text == w[0].text for g, w in zip(got, want, strict=True))
    assert same >= 0.8 * len(LINES)
    for (g, *_), (w, *_) in zip(got, want, strict=True):
        assert g.attention.dtype == torch.float32 and math.isfinite(g.score)
        if g.tokens == w.tokens:
            assert math.isclose(g.score, w.score, abs_tol=0.1)


@pytest.mark.slow
def test_the_demo_trains_and_scores_on_the_gpu(tmp_path):
    """`alignmt demo --device cuda` briefly: every model, snapshot and plot is made on the
    GPU with no CPU tensor meeting a CUDA model on the way."""
    out = tmp_path / "demo"
    run = brief_demo(out, "--device", "cuda")
    assert torch.cuda.get_device_name() in run.stdout.split("Training time")[1]
    results = json.loads((out / "results.json").read_text())
    assert len(results["sharpening"]["attention"]["share"]) == 21
    assert snapshot_steps(out / "attention_luong") == list(range(0, 41, 2))
    assert (out / "attention.png").stat().st_size > 0
    assert load_checkpoint(out / "attention").model.has_attention


def test_a_server_on_the_gpu_answers_a_translate_request(toy_run):
    with socket.socket() as probe:  # a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    body = {"sentences": LINES[:3], "beam_size": 3, "nbest": 2, "attention": True}
    with local_server([toy_run], port, "--device", "cuda"):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request(
            "POST", "/v1/translate", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        answer = json.loads(response.read())
    assert response.status == 200, answer
    want = translator(toy_run, "cpu", 3).translate(LINES[:3], nbest=2)
    for sentence, expected in zip(answer["translations"], want, strict=True):
        assert [h["tokens"] for h in sentence["hypotheses"]] == [w.tokens for w in expected]
        assert all(len(h["attention"]) == len(h["tokens"]) for h in sentence["hypotheses"])


def _gpu_batches(seed: int = 0):
    """Three batches of the toy vocabulary's ids, two of one bucket and one of another."""
    from tests.conftest import loss_targets, padded_batch

    shapes = [((6, 2, 4), (3, 5, 1)), ((5, 7, 3), (4, 2, 6)), ((9, 1, 3, 12, 5), (11, 2, 7, 4, 9))]
    for i, (src_lens, tgt_lens) in enumerate(shapes):
        src, src_len, tgt_in, tgt_len = padded_batch(src_lens, tgt_lens, seed=seed + i)
        yield [t.to(CUDA) for t in (src, src_len, tgt_in, loss_targets(tgt_in, tgt_len))]


def _losses_and_grads(objective, batches) -> tuple[list[Tensor], dict[str, Tensor]]:
    """The loss of each batch and the gradients summed over them, as accumulated
    micro-batches are, all detached: no autograd node outlives the call. (A gradient
    accumulator kept alive from an eager backward on the default stream cannot take the
    gradients of a graph being captured on a side stream.)"""
    objective.model.zero_grad(set_to_none=True)
    losses = []
    for batch in batches:
        loss = objective(*batch, label_smoothing=0.1)
        loss.backward()
        losses.append(loss.detach())
    named = objective.model.named_parameters()
    return losses, {n: p.grad.clone() for n, p in named if p.grad is not None}


@pytest.mark.parametrize("arch", [dict(), dict(rnn="lstm", order="luong", attention="general")])
def test_the_graphed_unroll_gives_the_eager_losses_and_accumulated_gradients(arch, monkeypatch):
    """Three micro-batches, two in one bucket (so one graph replays twice into gradients
    that accumulate) and one in another, against the eager losses of the unpadded batches:
    close, not equal, since the padded matmuls sum in another order."""
    from alignmt.training.distributed import Objective
    from alignmt.training.graphs import GraphedObjective
    from tests.conftest import tiny_model

    model = tiny_model(dtype=torch.float32, **arch).to(CUDA).train()
    batches = list(_gpu_batches())
    eager, graphed = Objective(model), GraphedObjective(model)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # the encoder in float32
    for _ in range(2):  # the first call captures, the second only replays
        want, want_grads = _losses_and_grads(eager, batches)
        got, got_grads = _losses_and_grads(graphed, batches)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert got_grads.keys() == want_grads.keys()
        for name, grad in want_grads.items():
            torch.testing.assert_close(
                got_grads[name], grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}"
            )
    assert sorted(graphed.graphs) == [(8, 8, 8), (8, 16, 16)]


def _toy_graph_run(folder, cuda_graphs: bool, precision: str):
    from tests.conftest import toy_corpus_config

    cfg = toy_corpus_config(
        folder,
        steps=300,
        log_every=30,
        eval_every=300,
        device="cuda",
        precision=precision,
        cuda_graphs=cuda_graphs,
    )
    return train(cfg, progress=False)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_training_with_graphs_follows_the_eager_loss_curve(tmp_path, precision):
    """The toy corpus trained 300 steps with and without graphs from the same weights and
    batches, dropout on (so their masks differ). The tolerance is the spread of two eager CPU
    runs with different seeds (up to 38% late in training, where losses are near 0.1)."""
    if precision == "bfloat16":
        needs_bf16()
    eager = _toy_graph_run(tmp_path / "eager", False, precision)
    graphed = _toy_graph_run(tmp_path / "graphs", True, precision)
    assert len(graphed.losses) == len(eager.losses) == 10
    assert graphed.losses[-1] < 0.1 * graphed.losses[0]
    for got, want in zip(graphed.losses, eager.losses, strict=True):
        assert math.isclose(got, want, rel_tol=0.4, abs_tol=0.05), (graphed.losses, eager.losses)
    assert graphed.evals[-1]["bleu"] > 60 and eager.evals[-1]["bleu"] > 60
