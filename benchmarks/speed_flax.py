"""The Flax column of benchmarks/speed.py (`--backend flax`): the same model, data and steps,
trained and decoded in JAX, with compilation timed apart from the steady state.

Compilation is counted once per shape: the first update of each new padded batch shape is
timed into `compile_s` and left out of the tokens/s intervals.
"""

from __future__ import annotations

import resource
import statistics
import time
from dataclasses import dataclass

import jax

from alignmt.checkpoint.flax_io import Params, build_model
from alignmt.config import Config, SearchConfig
from alignmt.decoding.flax_engine.search import FlaxSearch
from alignmt.training import flax_optim
from alignmt.training.batches import Progress, steps
from alignmt.training.distributed import World

MAX_OUTPUT = dict(max_len_ratio=0.0, max_len_offset=100)  # speed.py's "max output length 100"


@dataclass
class FlaxTraining:
    tokens_per_s: float  # median over the measured intervals, compilation left out
    compile_s: float  # seconds of the updates that compiled a new shape
    shapes: int  # distinct padded batch shapes, each compiled once
    peak_rss_mib: float
    params: Params  # the trained weights, for decoding


def measure_flax_training(text, cfg: Config, *, warmup: int, interval: int) -> FlaxTraining:
    """Train cfg.train.steps steps in Flax; tokens/s as `speed.measure_training` counts it."""
    model = build_model(cfg.model, text.src_vocab, text.tgt_vocab)
    tx = flax_optim.make_optimizer(cfg.train)
    params = flax_optim.init_params(model, cfg.seed)
    opt_state, key = tx.init(params), jax.random.key(cfg.seed + 1)
    updates = flax_optim.Updates(model, tx, cfg.train.label_smoothing)
    batches = steps(text, cfg.data, cfg.train, cfg.seed, Progress(), World())
    rates, compile_s, tokens, compiled, start = [], 0.0, 0, False, time.perf_counter()
    for step in range(1, cfg.train.steps + 1):
        batch = next(batches).batches[0]
        arrays = flax_optim.padded(batch, cfg.train.batch_size, text.tgt_vocab.eos_id)
        new_shape = arrays["src"].shape + arrays["tgt_in"].shape not in updates.shapes
        began = time.perf_counter()
        params, opt_state, loss, _ = updates.step(
            params, opt_state, [arrays], [1.0], jax.random.fold_in(key, step), cfg.train.lr
        )
        if new_shape:  # the step's time is mostly XLA compiling it
            jax.block_until_ready(loss)
            compile_s += time.perf_counter() - began
        tokens, compiled = tokens + batch.num_tgt_tokens, compiled or new_shape
        if step % interval == 0:
            jax.block_until_ready(loss)
            now = time.perf_counter()
            if step > warmup and not compiled:  # wall time, batching included, as for torch
                rates.append(tokens / (now - start))
            tokens, compiled, start = 0, False, now
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return FlaxTraining(
        statistics.median(rates), compile_s, len(updates.shapes), peak, jax.device_get(params)
    )


def flax_column(text, cfg: Config, args, batches, decode_rate, bleu) -> tuple[dict, float]:
    """The Flax side of speed.py's table, in its row order, and the seconds spent compiling.

    Args:
        batches: speed.test_batches' (src, src_len) batches of the test set.
        decode_rate: speed.measure_decoding; bleu: outputs -> the test set's BLEU.
    """
    trained = measure_flax_training(text, cfg, warmup=args.warmup, interval=args.interval)
    model = build_model(cfg.model, text.src_vocab, text.tgt_vocab)
    sources = [
        src[row, :length].tolist()
        for src, lens in batches
        for row, length in enumerate(lens.tolist())
    ]
    compile_s, rates, bleus = trained.compile_s, {}, []
    for name, beam in (("greedy", 1), ("beam 5", 5)):
        search = FlaxSearch(
            model, trained.params, SearchConfig(beam_size=beam, length_penalty=0.6, **MAX_OUTPUT)
        )
        start = time.perf_counter()
        search(sources)  # compiles once per bucket; timed apart
        compile_s += time.perf_counter() - start
        rates[name], outputs = decode_rate(lambda _, s=search: [h[0] for h in s(sources)])
        bleus.append(f"{bleu(outputs):.1f}")
    return {
        "training": f"{trained.tokens_per_s:,.0f}",
        "peak": f"{trained.peak_rss_mib:,.0f} MiB",
        "greedy": f"{rates['greedy']:,.1f}",
        "beam 5": f"{rates['beam 5']:,.1f}",
        "bleu": " / ".join(bleus),
        "compile": f"{compile_s:.1f} s ({trained.shapes} training shapes)",
    }, trained.tokens_per_s
