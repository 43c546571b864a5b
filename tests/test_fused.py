"""The decoder step's hand-written paths (model/fused.py): their gradients against finite
differences in float64, whole models against the eager operators in every architecture the
paths serve (loss and every gradient, float64 to rounding and float32 within a few ulps),
padding, and where the eager operators take over: autocast, tracing for export,
`fused.eager()` and ALIGNMT_FUSED=0.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch
from torch.autograd import gradcheck

from alignmt.model import fused
from alignmt.model.decoder import Memory
from alignmt.model.loss import sequence_loss
from tests.architectures import arch_id
from tests.conftest import loss_targets, padded_batch, tiny_model

# the decoder orders with the additive and concat scores, each cell, 1 and 2 layers; Luong's
# order with a general score, whose cell alone runs fused
SERVED = [
    dict(rnn=rnn, bidirectional=bi, layers=layers, attention=score, order=order)
    for rnn, bi, layers in (("gru", True, 1), ("lstm", False, 2), ("gru", False, 2))
    for score, order in (("additive", "bahdanau"), ("concat", "bahdanau"), ("additive", "cgru"))
] + [
    dict(rnn=rnn, bidirectional=True, layers=1, attention=score, order="luong")
    for rnn in ("gru", "lstm")
    for score in ("additive", "general")
]


@pytest.fixture(autouse=True)
def _fused_on(monkeypatch):
    """These tests hold the fused paths to the eager operators: the paths are on for them,
    even in a suite run with ALIGNMT_FUSED=0 (which the other tests must pass either way)."""
    monkeypatch.setattr(fused, "_enabled", True)


def test_each_function_has_the_gradient_of_finite_differences():
    torch.manual_seed(0)
    f64 = dict(dtype=torch.float64, requires_grad=True)
    query, keys, v = torch.randn(3, 4, **f64), torch.randn(3, 5, 4, **f64), torch.randn(4, **f64)
    values = torch.randn(3, 5, 6, **f64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    assert gradcheck(lambda *a: fused.additive_attend(*a, mask), (query, keys, v, values))
    gi, gh, h = torch.randn(3, 12, **f64), torch.randn(3, 12, **f64), torch.randn(3, 4, **f64)
    assert gradcheck(fused.gru_update, (gi, gh, h))
    gates, cell = torch.randn(3, 16, **f64), torch.randn(3, 4, **f64)
    assert gradcheck(fused.lstm_update, (gates, cell))


def _loss_and_grads(model, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    src, src_len, tgt_in, tgt_len = batch
    model.zero_grad()
    out = model(src, src_len, tgt_in)
    # the attention enters the loss too, so that its own gradient is checked
    targets = loss_targets(tgt_in, tgt_len)
    loss = sequence_loss(out.log_probs.logits, targets, 0) + out.attention.square().sum()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _names(out: torch.Tensor) -> set[str]:
    """The names of the autograd nodes behind `out`."""
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo.extend(n for n, _ in node.next_functions)
    return {type(node).__name__ for node in seen}


@pytest.mark.parametrize("arch", SERVED, ids=arch_id)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_a_model_gives_the_eager_operators_loss_gradients_and_outputs(arch, dtype):
    model = tiny_model(**arch, dtype=dtype).train()
    batch = padded_batch(src_lens=(7, 2, 5, 4), tgt_lens=(3, 6, 1, 4))
    with fused.eager():
        eager_loss, eager_grads = _loss_and_grads(model, batch)
    loss, grads = _loss_and_grads(model, batch)
    # float64: rounding; float32: tanh through the sigmoid and another order of sums
    tight = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss, eager_loss, **tight)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, eager_grads[name], **tight, msg=name)
    src, src_len, tgt_in, _ = batch
    with torch.no_grad():  # decoding's path: the forward alone
        fast = model(src, src_len, tgt_in)
        with fused.eager():
            slow = model(src, src_len, tgt_in)
    torch.testing.assert_close(fast.log_probs.logits, slow.log_probs.logits, **tight)
    torch.testing.assert_close(fast.attention, slow.attention, **tight)
    nodes = _names(model(src, src_len, tgt_in).log_probs.logits)
    cell = "_LSTMUpdateBackward" if arch["rnn"] == "lstm" else "_GRUUpdateBackward"
    assert cell in nodes
    assert ("_AdditiveAttendBackward" in nodes) == (arch["attention"] in ("additive", "concat"))


def test_padding_changes_no_gradient_of_a_sentence():
    """A sentence's parameter gradients alone and as one row of a padded batch (whose other
    row is left out of the loss) are equal: padding gets zero weight, and no gradient flows
    through it."""
    model = tiny_model(rnn="gru", attention="additive", order="cgru").train()
    src, src_len, tgt_in, tgt_len = padded_batch(src_lens=(3, 7), tgt_lens=(2, 5))
    alone = _loss_and_grads(model, (src[:1, :3], src_len[:1], tgt_in[:1, :2], tgt_len[:1]))[1]
    model.zero_grad()
    out = model(src, src_len, tgt_in)
    targets = loss_targets(tgt_in, tgt_len)
    targets[1] = 0  # the second sentence's tokens all count as padding in the loss
    first = torch.zeros_like(out.attention)
    first[0, :2, :3] = 1  # the first sentence's real steps and source positions
    (
        sequence_loss(out.log_probs.logits, targets, 0) + (out.attention.square() * first).sum()
    ).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, alone[name], rtol=1e-10, atol=1e-12, msg=name)


def test_the_eager_operators_run_under_autocast_with_the_reason_logged_once(caplog):
    model = tiny_model(dtype=torch.float32).train()
    src, src_len, tgt_in, _ = padded_batch()
    fused._autocast_noted.cache_clear()
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    with caplog.at_level(logging.INFO, logger="alignmt.model.fused"), autocast:
        logits = model(src, src_len, tgt_in).log_probs.logits
        model(src, src_len, tgt_in)
    assert "_AdditiveAttendBackward" not in _names(logits)
    assert [r.getMessage() for r in caplog.records] == [
        "the decoder step runs eager PyTorch operators under autocast: their backward is "
        "written for one dtype"
    ]


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:DeprecationWarning")
def test_a_traced_step_keeps_the_papers_operators():
    """Export traces the step (torch.onnx's TorchScript exporter): the traced score has its
    tanh, no sigmoid and no Python function."""
    step = _FlatStep(tiny_model(dtype=torch.float32).decoder.attention)
    query, keys = torch.randn(2, 8), torch.randn(2, 3, 6)
    values, mask = torch.randn(2, 3, 8), torch.ones(2, 3, dtype=torch.bool)
    with torch.no_grad():
        graph = torch.jit.trace(step, (query, keys, values, mask))
    kinds = {node.kind() for node in graph.inlined_graph.nodes()}
    assert "aten::tanh" in kinds
    assert not kinds & {"aten::sigmoid_", "aten::sigmoid", "prim::PythonOp"}


class _FlatStep(torch.nn.Module):
    """One attention step over flat tensors, as the tracer takes them."""

    def __init__(self, attention: torch.nn.Module) -> None:
        super().__init__()
        self.attention = attention

    def forward(self, query, keys, values, mask):
        return self.attention(query, {}, Memory(values, mask, None, {"keys": keys}))[:2]


def test_alignmt_fused_0_turns_the_paths_off_for_a_process():
    probe = "import torch; from alignmt.model import fused; print(fused.applies(torch.ones(1)))"
    for value, expected in (("0", "False"), ("1", "True")):
        env = {**os.environ, "ALIGNMT_FUSED": value}
        done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True)
        assert done.stdout.decode().strip() == expected, done.stderr.decode()
