"""Speed benchmark: training tokens/s, peak memory, greedy and beam-5
decoding sentences/s and their BLEU, on the matched Multi30k en→de model, with the FLOPs
arithmetic and the machine's measured matmul speed so that the fraction of the ceiling shows.

    python benchmarks/speed.py                 # CPU, 2 threads (about 3 minutes)
    python benchmarks/speed.py --profile       # also: where decoding spends its time
    python benchmarks/speed.py --device cuda   # a GPU, where there is one
    python benchmarks/speed.py --device cuda --precision bfloat16   # under bf16 autocast
    python benchmarks/speed.py --backend flax  # the same table for PyTorch and JAX/Flax
    python benchmarks/speed.py --weights int8 --shortlist 50   # int8 and shortlist columns
    python benchmarks/speed.py --run runs/m30k --weights int8  # a trained run: test and val

Run from the repository root after `alignmt data get multi30k`, with nothing else using the CPU.
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
from dataclasses import dataclass, replace
from functools import partial
from types import SimpleNamespace

import torch
from decode_profile import decoding_profile, print_profiles  # beside this script
from speed_report import decoding_rows, training_rows

import alignmt
from alignmt.analysis.scores import corpus_scores
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import PRECISIONS, WEIGHTS, Config, DataConfig, ModelConfig, TrainConfig
from alignmt.decoding.torch_engine.plan import SearchPlan
from alignmt.decoding.torch_engine.search import search as search_batches
from alignmt.decoding.torch_engine.speed import Speed
from alignmt.model.allocator import keep_freed_memory
from alignmt.model.batch import source_batch
from alignmt.model.device import autocast, pick_device
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.corpora import data_root
from alignmt.text.prepare import prepare_text
from alignmt.text.shortlist import Shortlist
from alignmt.text.split import read_split
from alignmt.training.batches import Progress, steps
from alignmt.training.distributed import Objective, World
from alignmt.training.graphs import GraphedObjective
from alignmt.training.optim import make_optimizer, train_step
from alignmt.training.run import text_shortlist
from alignmt.training.start import seed_everything

MULTI30K = data_root() / "multi30k"  # alignmt data get multi30k
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
    The forward passes run under autocast at cfg.train.precision (see `train_step`); with
    cfg.train.cuda_graphs the decoder's unroll replays CUDA graphs (training/graphs.py)."""
    optimizer = make_optimizer(model, cfg.train)
    objective = GraphedObjective(model) if cfg.train.cuda_graphs else Objective(model)
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


@dataclass
class TestSet:
    pairs: list  # the raw pairs, in file order
    order: list[int]  # the pairs' indices in batch order (by source length)
    batches: list  # (src, src_len) id batches of 64


def test_batches(text, cfg: Config, device, batch_size: int = 64, split: str = "") -> TestSet:
    """A split (default the test set) as length-sorted id batches, and the order that
    restores input order."""
    split = split or cfg.data.test
    pairs = read_split(split, src_lang="en", tgt_lang="de", swap=False, what=split)
    tokens = [text.tokenizers[0].encode(p.src) for p in pairs]
    order = sorted(range(len(pairs)), key=lambda i: len(tokens[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        src, src_len = source_batch([tokens[i] for i in rows], text.src_vocab)
        batches.append((src.to(device), src_len.to(device)))
    return TestSet(pairs, order, batches)


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
    args = parse_args()
    keep_freed_memory()
    cfg = matched_config(args.steps, args.device, args.precision)
    torch.set_num_threads(cfg.train.threads)
    device = pick_device(args.device)
    seed_everything(cfg.seed)
    model, cfg, text, shortlist, speed = model_and_text(args, cfg, device)
    model.eval()
    paths = decoding_paths(args, shortlist)
    test = test_batches(text, cfg, device)
    greedy = SearchPlan(width=64, **MAX_OUTPUT)
    beam = SearchPlan(beam_size=5, length_penalty=0.6, width=64, **MAX_OUTPUT)
    searches = {  # each: (batches, speed) -> one output per sentence, in batch order
        "greedy": lambda b, s: search_batches(model, b, replace(greedy, speed=s or Speed())),
        "beam 5": lambda b, s: search_batches(model, b, replace(beam, speed=s or Speed())),
    }
    with torch.no_grad(), autocast(device, args.precision):
        decoded = {  # (search, path) -> (sentences/s, outputs), paths interleaved per search
            (name, path): measure_decoding(partial(search, s=chosen), test.batches, device)
            for name, search in searches.items()
            for path, chosen in paths.items()
        }
        profiles = {
            f"{name}, {path}": decoding_profile(model, partial(search, s=chosen), test.batches)
            for name, search in (searches.items() if args.profile else ())
            for path, chosen in paths.items()
        }
        work = {
            name: decoding_flops(
                model, cfg.model, len(text.tgt_vocab), partial(search, s=None), test.batches
            )
            for name, search in searches.items()
        }
        valid = valid_bleus(searches, paths, text, cfg, device) if args.run else {}
    gflops = matmul_gflops(device, getattr(torch, args.precision))
    print_header(args, model, text, device)
    caps = {
        name: len(test.pairs) / (flops / (gflops * 1e9)) for name, flops in work.items()
    }  # sentences/s the float32 matmuls would allow, nothing else costing anything
    score = lambda outputs: bleu(outputs, test.order, test.pairs, text)  # noqa: E731
    rows = training_rows(speed, args) + decoding_rows(decoded, caps, valid, paths, score)
    if args.backend == "flax":
        rows = flax_rows(rows, text, cfg, args, test, device, speed)
    columns = ["Flax"] if args.backend == "flax" else [p for p in paths if p != "float32"]
    print("| metric | alignmt |" + "".join(f" {c} |" for c in columns))
    print("| --- | ---: |" + " ---: |" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if speed is not None:
        print_training_arithmetic(cfg, text, speed, test, gflops)
    print_decoding_arithmetic(work, caps, decoded, paths, gflops)
    if profiles:
        print_profiles(profiles)


def model_and_text(args: argparse.Namespace, cfg: Config, device):
    """The model to decode with, the config, the text, the shortlist and the training speed:
    the run's (`--run`, not trained here, no speed) or one trained here for `--steps`."""
    if args.run:
        ckpt = load_checkpoint(args.run, device=device)
        text = SimpleNamespace(
            tokenizers=(ckpt.src_tokenizer, ckpt.tgt_tokenizer),
            src_vocab=ckpt.src_vocab,
            tgt_vocab=ckpt.tgt_vocab,
        )
        return ckpt.model, replace(ckpt.config, train=cfg.train), text, ckpt.shortlist, None
    text = prepare_text(cfg.data, cfg.seed)
    model = Seq2Seq.from_config(
        cfg.model, src_vocab=len(text.src_vocab), tgt_vocab=len(text.tgt_vocab)
    ).to(device)
    speed = measure_training(model, text, cfg, device, warmup=args.warmup, interval=args.interval)
    shortlist = text_shortlist(text) if args.shortlist else None
    return model, cfg, text, shortlist, speed


def print_header(args: argparse.Namespace, model, text, device) -> None:
    params = sum(p.numel() for p in model.parameters())
    cpu = platform.processor() or platform.machine()
    print(
        f"alignmt {alignmt.__version__}, torch {torch.__version__}, {cpu}, "
        f"{torch.get_num_threads()} threads, device {device}, precision {args.precision}"
    )
    source = args.run or f"{args.steps} training steps"
    print(
        f"model: {params / 1e6:.2f}M parameters, "
        f"vocabularies {len(text.src_vocab)} / {len(text.tgt_vocab)}, from {source}\n"
    )


def print_decoding_arithmetic(work, caps, decoded, paths, gflops: float) -> None:
    print(
        f"\ndecoding: forward matmul FLOPs of one pass in float32 over the whole vocabulary, "
        f"and the sentences/s that {gflops:.0f} GFLOP/s would allow if nothing but these "
        "matmuls took time (the float32 cap)\n"
    )
    print(
        "| search | GFLOP | float32 cap, sentences/s |" + "".join(f" {p}: share |" for p in paths)
    )
    print("| --- |" + " ---: |" * (2 + len(paths)))
    for name, flops in work.items():
        shares = "".join(f" {decoded[name, p][0] / caps[name]:.0%} |" for p in paths)
        print(f"| {name} | {flops / 1e9:,.0f} | {caps[name]:,.0f} |" + shares)


def parse_args() -> argparse.Namespace:
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
    parser.add_argument(
        "--weights", default="float32", choices=WEIGHTS, help="int8: an int8 column too"
    )
    parser.add_argument(
        "--shortlist", type=int, default=0, metavar="K", help="K > 0: a shortlist column too"
    )
    parser.add_argument(
        "--run", metavar="RUN_DIR", help="decode this run's model (and its val set) untrained"
    )
    args = parser.parse_args()
    if args.backend == "flax" and (args.weights != "float32" or args.shortlist or args.run):
        parser.error("--backend flax compares float32 over the whole vocabulary, trained here")
    return args


def decoding_paths(args: argparse.Namespace, shortlist: Shortlist | None) -> dict[str, Speed]:
    """The decoding paths to measure: float32, and int8 and/or a shortlist as asked."""
    paths = {"float32": Speed()}
    int8 = args.weights == "int8"
    if int8:
        paths["int8"] = Speed(int8=True)
    if args.shortlist:
        if shortlist is None:
            raise SystemExit(f"{args.run}: no shortlist.safetensors (alignmt shortlist RUN_DIR)")
        listed = shortlist.top(args.shortlist)
        paths[f"shortlist {args.shortlist}"] = Speed(shortlist=listed)
        if int8:
            paths[f"int8 + shortlist {args.shortlist}"] = Speed(int8=True, shortlist=listed)
    return paths


def valid_bleus(searches, paths, text, cfg: Config, device) -> dict[tuple[str, str], float]:
    """The BLEU of each search on each path over the validation set, decoded once each."""
    val = test_batches(text, cfg, device, split=cfg.data.valid)
    return {
        (name, path): bleu(search(val.batches, chosen), val.order, val.pairs, text)
        for name, search in searches.items()
        for path, chosen in paths.items()
    }


def flax_rows(rows, text, cfg, args, test, device, speed) -> list[tuple[str, ...]]:
    """`rows` with the Flax column beside them (see speed_flax.py)."""
    from speed_flax import flax_column  # beside this script; imports JAX

    rate = lambda search: measure_decoding(search, test.batches, device)  # noqa: E731
    score = lambda outputs: bleu(outputs, test.order, test.pairs, text)  # noqa: E731
    flax, flax_rate = flax_column(text, cfg, args, test.batches, rate, score)
    values = [flax["training"], flax["peak"], flax["greedy"], flax["beam 5"], "", "", flax["bleu"]]
    rows = [(*row, value) for row, value in zip(rows, values, strict=False)]
    rows.append(("compilation (Flax; PyTorch compiles nothing)", "-", flax["compile"]))
    print(f"training, Flax / PyTorch: {flax_rate / speed.tokens_per_s:.2f}")
    return rows


def print_training_arithmetic(cfg: Config, text, speed: TrainSpeed, test, gflops: float) -> None:
    src_len = statistics.mean(int(n) for _, lens in test.batches for n in lens)
    flops = train_flops_per_token(cfg.model, len(text.tgt_vocab), speed.src_per_tgt, src_len)
    ceiling = gflops * 1e9 / flops
    print(
        f"\nFLOPs per target token (training, matmuls): {flops / 1e6:.1f} M "
        f"(source/target tokens {speed.src_per_tgt:.2f}, mean test source {src_len:.1f})"
    )
    print(
        f"matmul, {cfg.train.precision} 1024x512x8192: {gflops:.0f} GFLOP/s -> ceiling "
        f"{ceiling:,.0f} tokens/s; measured {speed.tokens_per_s / ceiling:.0%} of it"
    )


if __name__ == "__main__":
    main()
