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

from alignmt.checkpoint.format import snapshot_steps
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import Config, DataConfig, ModelConfig, TrainConfig
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
    return Translator.from_checkpoint(ckpt, search, precision=precision)


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
            torch.testing.assert_close(g.attention, w.attention, atol=1e-2, rtol=1e-2)
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
