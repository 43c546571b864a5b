"""int8 decoding: the quantised product, the Linears that run it, and decoding within a
stated tolerance of float32."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding.door import open_translator
from alignmt.decoding.torch_engine import packed
from alignmt.decoding.torch_engine.int8 import int8_linear, quantize
from alignmt.decoding.torch_engine.packed import int8_linears, packed_linears
from tests.conftest import held_out_toy_lines


def test_on_the_int8_grid_the_product_is_exact():
    # Rows whose largest entry is 127 quantise to themselves, so the int32 sums are the
    # exact product: any slip in a scale or a transpose shows.
    torch.manual_seed(0)
    x = torch.randint(-127, 128, (5, 24)).float()
    w = torch.randint(-127, 128, (9, 24)).float()
    x[:, 0], w[:, 0] = 127.0, -127.0
    bias = torch.randn(9)
    got = int8_linear(x, quantize(w, bias))
    torch.testing.assert_close(got, x @ w.T + bias, rtol=0, atol=1e-3)


def test_the_error_stays_within_the_rounding_bound():
    # Each rounding moves an entry by at most half a step: |dy| <= sum_k (|x_k| s_w / 2 +
    # |w_k| r_x / 2 + s_w r_x / 4) for each output.
    torch.manual_seed(1)
    x, w = torch.randn(7, 3, 40), torch.randn(30, 40) * 0.1
    got = int8_linear(x, quantize(w, None))
    exact = x @ w.T
    r = x.abs().amax(-1, keepdim=True) / 127  # (7, 3, 1)
    s = w.abs().amax(-1) / 127  # (30,)
    bound = (x.abs() @ torch.ones(40, 1)) * s / 2 + r * (w.abs().sum(-1)) / 2 + 40 * r * s / 4
    assert got.shape == (7, 3, 30)
    assert ((got - exact).abs() <= bound + 1e-5).all()
    assert (got - exact).abs().max() > 0  # it did round


def test_a_projection_cut_to_some_units_rounds_as_the_whole():
    torch.manual_seed(2)
    w, b = torch.randn(50, 16), torch.randn(50)
    index = torch.tensor([3, 0, 41, 7])
    x = torch.randn(4, 16)
    whole = int8_linear(x, quantize(w, b))  # (4, 50)
    torch.testing.assert_close(int8_linear(x, quantize(w, b).units(index)), whole[:, index])


def test_int8_linears_run_in_int8_and_give_the_linear_back():
    torch.manual_seed(3)
    linear = nn.Linear(32, 20)
    x = torch.randn(6, 32)
    with torch.no_grad():
        with int8_linears(linear):
            inside = linear(x)
        after = linear(x)
    assert "forward" not in vars(linear)
    torch.testing.assert_close(inside, int8_linear(x, quantize(linear.weight, linear.bias)))
    assert not torch.equal(inside, after)  # int8 inside, float32 after
    with int8_linears(linear):  # gradients on: training must see the float weight
        assert "forward" not in vars(linear)


def test_the_quantised_weight_is_kept_until_the_weight_changes():
    linear = nn.Linear(8, 4)
    with torch.no_grad():
        first = packed.quantised(linear)
        assert packed.quantised(linear) is first  # kept: a server quantises once
        linear.weight.mul_(2)  # an in-place change moves the version counter
        again = packed.quantised(linear)
    assert again is not first
    torch.testing.assert_close(again.scales, first.scales * 2)


def test_packing_leaves_int8_linears_alone_and_few_outputs_stay_float32():
    linear, score = nn.Linear(16, packed.INT8_MIN_UNITS), nn.Linear(16, 1)  # score: like v
    x = torch.randn(4, 16)
    with torch.no_grad(), int8_linears(linear), packed_linears(linear, rows=4):
        torch.testing.assert_close(linear(x), int8_linear(x, quantize(linear.weight, linear.bias)))
    assert "forward" not in vars(linear)
    with torch.no_grad(), int8_linears(score):
        assert "forward" not in vars(score)


def test_int8_decoding_stays_within_tolerance_of_float32(toy_run, tmp_path):
    """The stated tolerance, on the toy model: every step's log-probabilities within 0.15
    of float32's, and greedy and beam outputs the same for at least 95% of sentences."""
    ckpt = load_checkpoint(toy_run)
    lines = held_out_toy_lines(tmp_path)
    outputs = {}
    for weights in ("float32", "int8"):
        for beam in (1, 3):
            search = replace(ckpt.config.search, weights=weights, beam_size=beam)
            translator = open_translator(ckpt, search=search)
            outputs[weights, beam] = [t[0].text for t in translator.translate(lines)]
    for beam in (1, 3):
        same = sum(
            a == b for a, b in zip(outputs["float32", beam], outputs["int8", beam], strict=True)
        )
        assert same >= 0.95 * len(lines)
    src = torch.tensor([ckpt.src_vocab.encode(lines[0].split(), add_eos=True)])
    model = ckpt.model
    with torch.no_grad():
        memory, state = model.encode(src, torch.tensor([src.size(1)]))
        prev = torch.tensor([model.bos_id])
        for _ in range(4):
            plain, _, _ = model.decode_step(prev, state, memory)
            plain = plain.logits
            with int8_linears(model.decoder):
                quick, state, _ = model.decode_step(prev, state, memory)
                quick = quick.logits
            gap = (plain.log_softmax(-1) - quick.log_softmax(-1)).abs().max()
            assert 0 < gap <= 0.15
            prev = plain.argmax(-1)


def test_int8_is_refused_off_the_float32_cpu(toy_run):
    ckpt = load_checkpoint(toy_run)
    search = replace(ckpt.config.search, weights="int8")
    with pytest.raises(ValueError, match=r"int8 .* bfloat16"):
        open_translator(ckpt, search=search, precision="bfloat16")


@pytest.mark.parametrize(("cpu", "warned"), [("AVX2", True), ("AVX512", False)])
def test_int8_warns_where_the_cpu_has_no_fast_int8_gemm(toy_run, monkeypatch, caplog, cpu, warned):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: cpu)
    ckpt = load_checkpoint(toy_run)
    open_translator(ckpt, search=replace(ckpt.config.search, weights="int8"))
    said = [r.getMessage() for r in caplog.records if "no fast kernel" in r.getMessage()]
    assert len(said) == warned and (not said or f"for this CPU ({cpu})" in said[0])
