"""Where the time goes, PyTorch beside JAX/Flax, on the matched Multi30k model (speed.py's):
one training update of a fixed 64 x 24 batch split into its parts, and one decoding step.

    python benchmarks/flax_profile.py        # about a minute; nothing else using the CPU

Each row is the median of repeated calls of one compiled (Flax) or eager (PyTorch) function
after a warm-up, so compilation is left out. The Flax rows time what its loops run: the
gradient (teacher-forced `nn.scan` and its transpose), clipped Adam, a decoder step, and a
whole greedy search, whose `while_loop` runs every row to the batch's longest output where
PyTorch's search hands an ended sentence's row to the next one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch
from speed import matched_config

from alignmt.checkpoint.flax_io import build_model, params_from_tensors
from alignmt.decoding.flax_engine.search import apply_method, greedy_search
from alignmt.decoding.torch_engine.search import decode
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.prepare import prepare_text
from alignmt.training import flax_optim

ROWS, LENGTH = 64, 24


def median_ms(call: Callable[[], object], repeats: int = 10) -> float:
    jax.block_until_ready(call())  # warm-up: compiles the Flax side
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    torch.set_num_threads(2)
    cfg = matched_config(1, "cpu")
    text = prepare_text(cfg.data, cfg.seed)
    torch.manual_seed(0)
    model = Seq2Seq.from_config(
        cfg.model, src_vocab=len(text.src_vocab), tgt_vocab=len(text.tgt_vocab)
    )
    flax_model = build_model(cfg.model, text.src_vocab, text.tgt_vocab)
    tensors = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    params = jax.tree_util.tree_map(jnp.asarray, params_from_tensors(tensors, cfg.model))
    ids = np.random.default_rng(0).integers(4, 1000, size=(3, ROWS, LENGTH)).astype(np.int32)
    rows = training_rows(model, flax_model, params, cfg, ids)
    rows += decoding_rows(model, flax_model, params, ids)
    print(f"matched model, batch {ROWS} x {LENGTH} tokens, random ids; milliseconds per call\n")
    print("| part | PyTorch ms | Flax ms | Flax / PyTorch |\n| --- | ---: | ---: | ---: |")
    for name, t, f in rows:
        print(f"| {name} | {t:.1f} | {f:.1f} | {f / t:.2f} |")


def arrays_of(ids: np.ndarray) -> dict:
    """The Flax batch of `ids` (3, ROWS, LENGTH): source, teacher-forced input and output."""
    return {
        "src": ids[0],
        "src_len": np.full(ROWS, LENGTH, np.int32),
        "tgt_in": ids[1],
        "tgt_out": ids[2],
    }


def tensors_of(ids: np.ndarray) -> tuple[torch.Tensor, ...]:
    """The same batch for PyTorch: src, src_len, tgt_in, tgt_out."""
    src, tgt_in, tgt_out = (torch.from_numpy(a).long() for a in ids)
    return src, torch.full((ROWS,), LENGTH), tgt_in, tgt_out


def training_rows(model, flax_model, params, cfg, ids: np.ndarray) -> list[tuple]:
    """The loss, its gradient, and clipping with Adam, in each framework."""
    src, src_len, tgt_in, tgt_out = tensors_of(ids)
    arrays = arrays_of(ids)

    def torch_forward():
        with torch.no_grad():
            return model.loss(src, src_len, tgt_in, tgt_out, 0.1)

    def torch_grad():
        model.zero_grad()
        model.loss(src, src_len, tgt_in, tgt_out, 0.1).backward()

    tx = flax_optim.make_optimizer(cfg.train)
    updates = flax_optim.Updates(flax_model, tx, 0.1)
    key = jax.random.key(0)
    opt_state = tx.init(params)
    _, grads = updates.grad(params, arrays, key)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch_grad()
    return [
        (
            "training: loss, forward only",
            median_ms(torch_forward),
            median_ms(lambda: updates.loss(params, arrays, key)),
        ),
        (
            "training: loss and gradient",
            median_ms(torch_grad),
            median_ms(lambda: updates.grad(params, arrays, key)),
        ),
        (
            "training: clip + Adam",
            median_ms(optimizer.step),
            median_ms(lambda: updates.apply(params, opt_state, grads, jnp.float32(1e-3))),
        ),
    ]


def decoding_rows(model, flax_model, params, ids: np.ndarray) -> list[tuple]:
    """One decoder step, and greedy search of 40 steps, in each framework."""
    src, src_len, _, _ = tensors_of(ids)
    arrays = arrays_of(ids)
    model.eval()
    with torch.no_grad():
        memory, state = model.encode(src, src_len)
        prev = torch.full((ROWS,), model.bos_id)
        torch_step = median_ms(lambda: model.decode_step(prev, state, memory))
        torch_greedy = median_ms(
            lambda: decode(model, src, src_len, max_len_ratio=0.0, max_len_offset=40), 3
        )
    step = jax.jit(lambda p, prev, s, m: apply_method(flax_model, p, "decode_step", prev, s, m))
    f_memory, f_state = jax.jit(lambda p, s, n: apply_method(flax_model, p, "encode", s, n))(
        params, arrays["src"], arrays["src_len"]
    )
    f_prev = jnp.full((ROWS,), flax_model.bos_id, jnp.int32)
    limit = jnp.full((ROWS,), 40, jnp.int32)
    greedy = jax.jit(lambda p, s, n: greedy_search(flax_model, p, s, n, limit, max_len=40))
    return [
        (
            f"decoding: one step of {ROWS} rows",
            torch_step,
            median_ms(lambda: step(params, f_prev, f_state, f_memory)),
        ),
        (
            "decoding: greedy search, 40 steps",
            torch_greedy,
            median_ms(lambda: greedy(params, arrays["src"], arrays["src_len"]), 3),
        ),
    ]


if __name__ == "__main__":
    main()
