"""Devices and precisions: what `--device` and `--precision` accept, and what they refuse.
The GPU itself is tests/test_cuda.py's."""

from __future__ import annotations

import pytest
import torch

from alignmt.model.device import autocast, check_precision, pick_device

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")


@no_gpu
def test_asking_for_cuda_without_a_gpu_is_an_error_not_a_silent_fallback():
    assert pick_device("auto") == torch.device("cpu")
    for name in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match=rf"--device={name}, but torch sees no CUDA device"):
            pick_device(name)


@no_gpu
def test_the_error_names_the_flag_or_key_that_asked():
    with pytest.raises(ValueError, match=r"^train\.device=cuda, "):
        pick_device("cuda", flag="train.device")


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:-1", "cuda:x", "CPU", "cuda0"])
def test_a_device_name_that_is_none_of_the_forms_lists_them(name):
    with pytest.raises(ValueError, match="expected auto, cpu, cuda or cuda:N"):
        pick_device(name)


def test_cpu_is_always_there():
    assert pick_device("cpu") == torch.device("cpu")


def test_float32_changes_nothing_and_bfloat16_autocasts_on_the_cpu():
    cpu = torch.device("cpu")
    linear = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    with autocast(cpu, "float32"):
        assert not torch.is_autocast_enabled("cpu")
        assert linear(x).dtype == torch.float32
    with autocast(cpu, "bfloat16"):
        assert torch.is_autocast_enabled("cpu")
        assert linear(x).dtype == torch.bfloat16
    assert linear.weight.dtype == torch.float32  # autocast, not a conversion of the weights


def test_an_unknown_precision_is_refused_by_name():
    with pytest.raises(ValueError, match="precision 'float16': expected one of float32, bfloat16"):
        check_precision(torch.device("cpu"), "float16")
    with pytest.raises(ValueError, match="'half'"):
        autocast(torch.device("cpu"), "half")
