"""Speed benchmark: training tokens/s, peak memory, greedy and beam-5
decoding sentences/s and their BLEU, on the matched Multi30k en→de model, with the FLOPs
arithmetic and the machine's measured matmul speed so that the fraction of the ceiling shows.

    python benchmarks/speed.py                 # CPU, 2 threads (about 3 minutes)
    python benchmarks/speed.py --profile       # also: where decoding spends its time
    python benchmarks/speed.py --device cuda   # a GPU, where there is one
    python benchmarks/speed.py --device cuda --precision bfloat16   # under bf16 autocast
    python benchmarks/speed.py --backend flax  # the same table for PyTorch and JAX/Flax

Run from the repository root with ../shared beside it and nothing else using the CPU.
Results and their history are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

import alignmt
from alignmt.analysis.scores import corpus_scores
from alignmt.config import PRECISIONS, Config, DataConfig, ModelConfig, TrainConfig
from alignmt.decoding.search import beam_decode_batches, decode_batches
from alignmt.model.allocator import keep_freed_memory
from alignmt.model.batch import source_batch
from alignmt.model.device import autocast, pick_device
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.prepare import prepare_text
from alignmt.text.split import read_split
from alignmt.training.batches import Progress, steps
from alignmt.training.distributed import Objective, World
from alignmt.training.optim import make_optimizer, train_step
from alignmt.training.run import seed_everything

MULTI30K = Path(__file__).resolve().parents[2] / "shared/data/multi30k"  # beside the repo
MAX_OUTPUT = dict(max_len_ratio=0.0, max_len_offset=100)  # "max output length 100"


def matched_config(steps: int, device: str, precision: str = "float32") -> Config:
    """The model every toolkit of docs/benchmarks.md ran: 11.6M parameters, 512 x V output;
    training under autocast at `precision`."""
    return Config(
        model=ModelConfig(
            rnn="gru",
            emb_dim=256,
            enc_hidden=256,
            bidirectional=True,
            dec_hidden=512,
            attention="additive",
            attn_dim=512,
            init="bridge",
            readout="tanh",
            readout_dim=512,
            dropout=0.2,
        ),
        data=DataConfig(
            task="corpus",
            train=f"{MULTI30K}/train",
            test=f"{MULTI30K}/test_2016_flickr",
            tokenizer="moses",
            lowercase=True,
            min_freq=2,
        ),
        train=TrainConfig(
            steps=steps,
            batch_size=64,
            lr=1e-3,
            clip_norm=1.0,
            schedule="constant",
            device=device,
            precision=precision,
            threads=2,
        ),
    )


@dataclass
class TrainSpeed:
    tokens_per_s: float  # median over the measured intervals
    src_per_tgt: float  # source tokens per target token, for the FLOPs arithmetic
    peak_rss_mib: float


def measure_training(model, text, cfg: Config, device, *, warmup: int, interval: int) -> TrainSpeed:
    """Train cfg.train.steps steps; the median target tokens/s of the intervals after warm-up.
    The forward passes run under autocast at cfg.train.precision (see `train_step`)."""
    optimizer = make_optimizer(model, cfg.train)
    objective = Objective(model)
    updates = steps(text, cfg.data, cfg.train, cfg.seed, Progress(), World())
    rates, tgt_total, src_total = [], 0, 0
    tokens, start = 0, _now(device)
    for step in range(1, cfg.train.steps + 1):
        update = next(updates)
        batch = update.batches[0].to(device)
        train_step(objective, [batch], update.tokens, optimizer, cfg.train)
        tokens += batch.num_tgt_tokens
        if step > warmup:
            tgt_total += batch.num_tgt_tokens
            src_total += int(batch.src_len.sum())
        if step % interval == 0:
            now = _now(device)
            if step > warmup:
                rates.append(tokens / (now - start))
            tokens, start = 0, now
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return TrainSpeed(statistics.median(rates), src_total / tgt_total, peak)


def _now(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def measure_decoding(search: Callable, batches, device, runs: int = 3) -> tuple[float, list]:
    """Median sentences/s of `runs` passes of `search` over the prepared batches (the
    decoding loop only: tokenising, batching and detokenising are outside the clock)."""
    speeds, outputs = [], []
    sentences = sum(src.size(0) for src, _ in batches)
    for _ in range(runs):
        start = _now(device)
        outputs = search(batches)
        speeds.append(sentences / (_now(device) - start))
    return statistics.median(speeds), outputs


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


def test_batches(text, cfg: Config, device, batch_size: int = 64):
    """The test set as length-sorted id batches, and the order that restores input order."""
    pairs = read_split(cfg.data.test, src_lang="en", tgt_lang="de", swap=False, what="data.test")
    tokens = [text.tokenizers[0].encode(p.src) for p in pairs]
    order = sorted(range(len(pairs)), key=lambda i: len(tokens[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        src, src_len = source_batch([tokens[i] for i in rows], text.src_vocab)
        batches.append((src.to(device), src_len.to(device)))
    return pairs, order, batches


def bleu(outputs, order, pairs, text) -> float:
    """Lowercased sacreBLEU of the decoded test set against the raw references."""
    hyps = [""] * len(pairs)
    for i, hyp in zip(order, outputs, strict=True):
        hyp = hyp[0] if isinstance(hyp, list) else hyp  # beam: best of the n-best
        hyps[i] = text.tokenizers[1].decode(text.tgt_vocab.decode(hyp.tokens))
    return corpus_scores(hyps, [p.tgt for p in pairs], lowercase=True).bleu


def train_flops_per_token(
    cfg: ModelConfig, tgt_vocab: int, src_per_tgt: float, src_len: float
) -> float:
    """Matmul FLOPs of one training step per target token: forward, and twice that backward."""
    attention = 2 * src_len * (cfg.attn_dim + _context_dim(cfg))  # per target token
    source = encoder_flops_per_token(cfg) * src_per_tgt
    return 3 * (source + decoder_flops_per_row(cfg, tgt_vocab) + attention)


def encoder_flops_per_token(cfg: ModelConfig) -> int:
    """Forward matmul FLOPs per source token: the GRU's input and hidden products in each
    direction, and the key projection W_h h_j, made once per source token."""
    E, H = cfg.emb_dim, cfg.enc_hidden
    directions = 2 if cfg.bidirectional else 1
    return 2 * (E * 3 * H + H * 3 * H) * directions + 2 * _context_dim(cfg) * cfg.attn_dim


def decoder_flops_per_row(cfg: ModelConfig, tgt_vocab: int) -> int:
    """Forward matmul FLOPs of one decoder step for one row (a sentence, or one beam), the
    attention over the source aside: input gates, hidden gates, query, readout, projection."""
    E, D, A, R, C = cfg.emb_dim, cfg.dec_hidden, cfg.attn_dim, cfg.readout_dim, _context_dim(cfg)
    gates = 2 * (E * 3 * D + C * 3 * D + D * 3 * D + D * A)
    return gates + 2 * ((D + C + E) * R + R * tgt_vocab)


def _context_dim(cfg: ModelConfig) -> int:
    return 2 * cfg.enc_hidden if cfg.bidirectional else cfg.enc_hidden


def decoding_flops(model, cfg: ModelConfig, tgt_vocab: int, search: Callable, batches) -> int:
    """Forward matmul FLOPs of one pass of `search`, counted from what it ran: the encoder
    over every source token, `decoder_flops_per_row` for every row of every decoder step,
    and the attention's two products (v^T tanh(...) and sum_j alpha_ij h_j) over every
    source position each row reads, padding included."""
    counts = defaultdict(int)
    step = model.decoder.step

    def counted(prev, state, memory):
        counts["rows"] += prev.size(0)
        counts["positions"] += prev.size(0) * memory.states.size(1)
        return step(prev, state, memory)

    model.decoder.step = counted
    try:
        search(batches)
    finally:
        del model.decoder.step  # back to the class's method
    source_tokens = sum(int(lens.sum()) for _, lens in batches)
    return (
        encoder_flops_per_token(cfg) * source_tokens
        + decoder_flops_per_row(cfg, tgt_vocab) * counts["rows"]
        + 2 * (cfg.attn_dim + _context_dim(cfg)) * counts["positions"]
    )


def matmul_gflops(
    device, dtype: torch.dtype = torch.float32, size=(1024, 512, 8192), repeats: int = 20
) -> float:
    """The best matmul speed of the machine in `dtype` at the sizes of the output layer."""
    m, k, n = size
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    out = a @ b
    best = float("inf")
    for _ in range(repeats):
        start = _now(device)
        torch.matmul(a, b, out=out)
        best = min(best, _now(device) - start)
    return 2 * m * k * n / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--precision",
        default="float32",
        choices=PRECISIONS,
        help="bfloat16: train and decode under autocast",
    )
    parser.add_argument(
        "--backend", default="torch", choices=["torch", "flax"], help="flax: a Flax column too"
    )
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--interval", type=int, default=50)
    parser.add_argument(
        "--profile", action="store_true", help="also print where the decoding time goes"
    )
    args = parser.parse_args()
    keep_freed_memory()
    cfg = matched_config(args.steps, args.device, args.precision)
    torch.set_num_threads(cfg.train.threads)
    device = pick_device(args.device)
    seed_everything(cfg.seed)
    text = prepare_text(cfg.data, cfg.seed)
    model = Seq2Seq.from_config(
        cfg.model, src_vocab=len(text.src_vocab), tgt_vocab=len(text.tgt_vocab)
    ).to(device)
    params = sum(p.numel() for p in model.parameters())
    speed = measure_training(model, text, cfg, device, warmup=args.warmup, interval=args.interval)
    model.eval()
    pairs, order, batches = test_batches(text, cfg, device)
    beam = dict(beam_size=5, alpha=0.6, **MAX_OUTPUT)
    searches = {  # each: batches -> one output per sentence, in batch order
        "greedy": lambda batches: decode_batches(model, batches, width=64, **MAX_OUTPUT),
        "beam 5": lambda batches: beam_decode_batches(model, batches, width=64, **beam),
    }
    with torch.no_grad(), autocast(device, args.precision):
        decoded = {
            name: measure_decoding(search, batches, device) for name, search in searches.items()
        }
        profiles = (
            {name: decoding_profile(model, search, batches) for name, search in searches.items()}
            if args.profile
            else {}
        )
        work = {
            name: decoding_flops(model, cfg.model, len(text.tgt_vocab), search, batches)
            for name, search in searches.items()
        }
    src_len = statistics.mean(int(n) for _, lens in batches for n in lens)
    flops = train_flops_per_token(cfg.model, len(text.tgt_vocab), speed.src_per_tgt, src_len)
    gflops = matmul_gflops(device, getattr(torch, args.precision))
    ceiling = gflops * 1e9 / flops
    cpu = platform.processor() or platform.machine()
    print(
        f"alignmt {alignmt.__version__}, torch {torch.__version__}, {cpu}, "
        f"{torch.get_num_threads()} threads, device {device}, precision {args.precision}"
    )
    print(
        f"model: {params / 1e6:.2f}M parameters, "
        f"vocabularies {len(text.src_vocab)} / {len(text.tgt_vocab)}\n"
    )
    bleus = " / ".join(f"{bleu(out, order, pairs, text):.1f}" for _, out in decoded.values())
    rows = [
        (
            f"training, target tokens/s (median of {args.interval}-step intervals after "
            f"{args.warmup})",
            f"{speed.tokens_per_s:,.0f}",
        ),
        ("training peak RSS", f"{speed.peak_rss_mib:,.0f} MiB"),
        *(
            (f"{name}, sentences/s (batch 64, median of 3)", f"{rate:,.1f}")
            for name, (rate, _) in decoded.items()
        ),
        (f"BLEU lc after {args.steps} steps, greedy / beam 5", bleus),
    ]
    if args.backend == "flax":
        from speed_flax import flax_column  # beside this script; imports JAX

        rate = lambda search: measure_decoding(search, batches, device)  # noqa: E731
        score = lambda outputs: bleu(outputs, order, pairs, text)  # noqa: E731
        flax, flax_rate = flax_column(text, cfg, args, batches, rate, score)
        rows = [(*row, value) for row, value in zip(rows, flax.values(), strict=False)]
        rows.append(("compilation (Flax; PyTorch compiles nothing)", "-", flax["compile"]))
        print(f"training, Flax / PyTorch: {flax_rate / speed.tokens_per_s:.2f}")
    print("| metric | alignmt |" + " Flax |" * (args.backend == "flax"))
    print("| --- | ---: |" + " ---: |" * (args.backend == "flax"))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(
        f"\nFLOPs per target token (training, matmuls): {flops / 1e6:.1f} M "
        f"(source/target tokens {speed.src_per_tgt:.2f}, mean test source {src_len:.1f})"
    )
    print(
        f"matmul, {args.precision} 1024x512x8192: {gflops:.0f} GFLOP/s -> ceiling {ceiling:,.0f} "
        f"tokens/s; measured {speed.tokens_per_s / ceiling:.0%} of it"
    )
    print(
        f"\ndecoding: forward matmul FLOPs of one pass, and the sentences/s that {gflops:.0f} "
        "GFLOP/s would allow if nothing but these matmuls took time\n"
    )
    print(
        "| search | GFLOP | ceiling, sentences/s | measured, share of it |\n| --- |" + " ---: |" * 3
    )
    for name, flops in work.items():
        most = len(pairs) / (flops / (gflops * 1e9))
        print(f"| {name} | {flops / 1e9:,.0f} | {most:,.0f} | {decoded[name][0] / most:.0%} |")
    if profiles:
        print("\nwhere one decoding pass of the test set spends its time, seconds (share)\n")
        print("| part | " + " | ".join(profiles) + " |\n| --- |" + " ---: |" * len(profiles))
        for part in profiles["greedy"]:
            cells = (f"{p[part]:.3f} ({p[part] / p['total']:.0%})" for p in profiles.values())
            print(f"| {part} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
