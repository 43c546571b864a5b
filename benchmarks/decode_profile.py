"""Where one decoding pass spends its time (`benchmarks/speed.py --profile`): each Linear of
the decoder through forward hooks, the rest of the decoder step, the encoder, and the search
around the step."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager

from torch import nn


def decoding_profile(model, search: Callable, batches) -> dict[str, float]:
    """Where one decoding pass spends its time, in seconds: each Linear of the decoder
    (forward hooks), the rest of the decoder step (attention scores, softmax, GRU gates,
    concatenations), the encoder, and the search around the step (argmax or top-k, scores,
    bookkeeping)."""
    seconds: dict[str, float] = defaultdict(float)
    with _timed(model, "encode", seconds), _timed(model, "decode_step", seconds):
        hooks = [
            hook
            for name, module in model.decoder.named_modules()
            if isinstance(module, nn.Linear)
            for hook in _linear_timer(module, f"decoder.{name}", seconds)
        ]
        start = time.perf_counter()
        search(batches)
        total = time.perf_counter() - start
        for hook in hooks:
            hook.remove()
    linears = sum(v for k, v in seconds.items() if k.startswith("decoder."))
    profile = {
        k: v for k, v in sorted(seconds.items(), key=lambda kv: -kv[1]) if k.startswith("decoder.")
    }
    profile["rest of the decoder step"] = seconds["decode_step"] - linears
    profile["encoder"] = seconds["encode"]
    profile["search around the step"] = total - seconds["decode_step"] - seconds["encode"]
    profile["total"] = total
    return profile


@contextmanager
def _timed(model, method: str, seconds: dict[str, float]):
    """Add the time spent in `model.<method>` to seconds[method] while the block runs."""
    original = getattr(model, method)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds[method] += time.perf_counter() - start

    setattr(model, method, timed)
    try:
        yield
    finally:
        delattr(model, method)  # back to the class's method


def _linear_timer(module: nn.Module, name: str, seconds: dict[str, float]):
    """Forward hooks that add the module's forward time to seconds[name]."""
    started = []

    def before(_module, _args):
        started.append(time.perf_counter())

    def after(_module, _args, _output):
        seconds[name] += time.perf_counter() - started.pop()

    return module.register_forward_pre_hook(before), module.register_forward_hook(after)


def print_profiles(profiles: dict[str, dict[str, float]]) -> None:
    print("\nwhere one decoding pass of the test set spends its time, seconds (share)\n")
    print("| part | " + " | ".join(profiles) + " |\n| --- |" + " ---: |" * len(profiles))
    for part in next(iter(profiles.values())):  # every path times the same parts
        cells = (f"{p[part]:.3f} ({p[part] / p['total']:.0%})" for p in profiles.values())
        print(f"| {part} | " + " | ".join(cells) + " |")
