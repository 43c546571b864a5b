"""GPU training speed: the matched Multi30k model (speed.py's) trained with and without CUDA
graphs over the decoder's unroll, at batches of 64 sentences and of a token budget; for each,
target tokens/s, the GPU-busy share from the profiler, peak GPU memory and the graphs captured.

    python benchmarks/gpu.py                      # on a CUDA machine, about 3 minutes
    python benchmarks/gpu.py --budgets 4096 8192  # token budgets to measure (0: 64 sentences)

Run from the repository root after `alignmt data get multi30k`. Results are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import torch
from speed import matched_config, matmul_gflops  # beside this script
from torch.profiler import ProfilerActivity, profile

from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.prepare import prepare_text
from alignmt.training.batches import Progress, steps
from alignmt.training.distributed import Objective, World
from alignmt.training.graphs import GraphedObjective
from alignmt.training.optim import make_optimizer, train_step
from alignmt.training.start import seed_everything


def gpu_busy(run_steps) -> float:
    """The share of the wall time of `run_steps()` in which a kernel or copy ran on the GPU
    (the union of the profiler's device intervals, so overlapping kernels count once)."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        start = time.perf_counter_ns()
        run_steps()
        torch.cuda.synchronize()
        wall = time.perf_counter_ns() - start
    intervals = sorted(
        (e.start_ns(), e.end_ns())
        for e in prof.profiler.kineto_results.events()
        if e.device_type() == torch.autograd.DeviceType.CUDA
    )
    busy, reach = 0, 0
    for begin, end in intervals:
        busy += max(0, end - max(begin, reach))
        reach = max(reach, end)
    return busy / wall


def measure(text, cfg, *, warmup: int, measured: int, profiled: int) -> dict[str, float]:
    """Train `warmup + measured + profiled` steps of a fresh model; tokens/s over the
    measured steps (synchronised at both ends), then the busy share over the profiled ones."""
    seed_everything(cfg.seed)
    device = torch.device("cuda")
    model = Seq2Seq.from_config(
        cfg.model, src_vocab=len(text.src_vocab), tgt_vocab=len(text.tgt_vocab)
    ).to(device)
    optimizer = make_optimizer(model, cfg.train)
    objective = GraphedObjective(model) if cfg.train.cuda_graphs else Objective(model)
    updates = steps(text, cfg.data, cfg.train, cfg.seed, Progress(), World())

    def run(count: int) -> int:
        tokens = 0
        for _ in range(count):
            batch = next(updates).batches[0].to(device)
            train_step(objective, [batch], batch.num_tgt_tokens, optimizer, cfg.train)
            tokens += batch.num_tgt_tokens
        return tokens

    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    run(warmup)
    torch.cuda.synchronize()
    warm = time.perf_counter() - start
    start = time.perf_counter()
    tokens = run(measured)
    torch.cuda.synchronize()
    rate = tokens / (time.perf_counter() - start)
    return {
        "tokens/s": rate,
        "busy": gpu_busy(lambda: run(profiled)),
        "peak GiB": torch.cuda.max_memory_allocated() / 2**30,
        "graphs": len(getattr(objective, "graphs", {})),
        "warm-up s": warm,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[0, 2048, 4096, 8192, 16384])
    parser.add_argument("--warmup", type=int, default=40, help="steps before the clock starts")
    parser.add_argument("--steps", type=int, default=60, help="steps timed")
    parser.add_argument("--profiled", type=int, default=10, help="steps profiled after those")
    parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    base = matched_config(0, "cuda", args.precision)
    text = prepare_text(base.data, base.seed)
    rows = []
    for graphs in (False, True):  # every eager row first: they print even if a capture fails
        for budget in args.budgets:
            train = replace(base.train, batch_tokens=budget, cuda_graphs=graphs, threads=0)
            result = measure(
                text,
                replace(base, train=train),
                warmup=args.warmup,
                measured=args.steps,
                profiled=args.profiled,
            )
            rows.append((budget, graphs, result))
            print(budget, graphs, result, flush=True)
    cuda = torch.device("cuda")
    print(
        f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, precision "
        f"{args.precision}; matmul 1024x512x8192: float32 {matmul_gflops(cuda):,.0f}, "
        f"bfloat16 {matmul_gflops(cuda, torch.bfloat16):,.0f} GFLOP/s\n"
    )
    eager = {budget: r["tokens/s"] for budget, graphs, r in rows if not graphs}
    print(
        "| batch | graphs | target tokens/s | vs eager | GPU busy | peak GPU memory "
        "| graphs captured | warm-up |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for budget, graphs, r in rows:
        print(
            f"| {f'{budget:,} tokens' if budget else '64 sentences'} | {'yes' if graphs else 'no'} "
            f"| {r['tokens/s']:,.0f} | {r['tokens/s'] / eager[budget]:.2f}x | {r['busy']:.0%} "
            f"| {r['peak GiB']:.1f} GiB | {r['graphs']} | {r['warm-up s']:.1f} s |"
        )


if __name__ == "__main__":
    main()
