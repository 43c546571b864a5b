"""Which JAX device a `--device` flag or `train.device` asks for: the one picker that Flax
training and the flax engine share (PyTorch's is device.py's `pick_device`)."""

from __future__ import annotations

import re

import jax

from alignmt.config import DEVICES


def jax_device(name: str, *, flag: str = "--device") -> jax.Device:
    """The JAX device `name` asks for: "auto" is JAX's default (a GPU when its plugin sees
    one), "cpu", "cuda" or "cuda:N"; asking for a GPU that JAX does not see is an error
    naming `flag`, not a silent fallback to the CPU."""
    if name == "auto":
        return jax.devices()[0]
    if name == "cpu":
        return jax.devices("cpu")[0]
    index = re.fullmatch(r"cuda(?::(\d+))?", name)
    if index is None:
        raise ValueError(f"{flag}={name}: expected {DEVICES}")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    number = int(index[1] or 0)
    if number >= len(gpus):
        raise ValueError(f"{flag}={name}, but JAX sees {len(gpus)} GPU(s); use auto or cpu")
    return gpus[number]
