"""`alignmt translate RUN_DIR`: stdin to stdout, one output line per input line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from alignmt.decoding.onnx_format import is_exported
from alignmt.decoding.words import word_alignment
from alignmt.text.constraints import read_constraints
from alignmt.text.corpus import input_lines

if TYPE_CHECKING:
    from alignmt.config import SearchConfig
    from alignmt.decoding.constraints import Constraint
    from alignmt.decoding.flax_translator import FlaxTranslator
    from alignmt.decoding.onnx_runtime import OnnxTranslator
    from alignmt.decoding.translator import Translation, Translator
    from alignmt.text.tokenize import Tokenizer


def run(args: argparse.Namespace) -> int:
    sampling = sampling_for(args)  # its flags are checked before any work
    if any(is_exported(d) for d in args.run_dirs):
        translator = runtime_translator_for(args)
    elif args.backend == "torch":
        translator = translator_for(args.run_dirs, args)
    elif args.jsonl or args.sample or args.constraints or len(args.run_dirs) > 1:
        raise ValueError(
            "--backend flax decodes one run, without --jsonl (token probabilities), --sample "
            "or --constraints: use --backend torch for those and for ensembles"
        )
    else:
        translator = flax_translator_for(args.run_dirs[0], args)
    if not args.sample and not 1 <= args.nbest <= translator.search.beam_size:
        raise ValueError(f"--nbest must be in [1, beam size {translator.search.beam_size}]")
    tokens = [translator.source_tokens(line) for line in input_lines(sys.stdin.buffer)]
    check_lengths(tokens, args.max_source_tokens)
    constraints = constraints_for(args, translator, len(tokens))
    asked = sampling | ({"constraints": constraints} if constraints is not None else {})
    results = translator.translate_tokens(
        tokens, nbest=args.nbest, batch_size=args.batch_size, **asked
    )
    # Input is read as UTF-8 whatever the locale, so output is written as UTF-8 too: in an
    # ASCII or cp1252 locale the first line it could not hold would end the output there.
    sys.stdout.reconfigure(encoding="utf-8")
    tokenizers = (translator.src_tokenizer, translator.tgt_tokenizer)
    align = partial(alignment_of, mode=args.alignment, tokenizers=tokenizers)
    for number, hyps in enumerate(results):
        if args.jsonl:
            out = [as_json(h, align) for h in hyps]
            if constraints is not None and constraints[number] is not None:
                for one, h in zip(out, hyps, strict=True):
                    one["met"] = translator.met(h, constraints[number])
            print(json.dumps(out, ensure_ascii=False))
        elif args.alignment:
            print("\t".join(f"{h.text}\t{align(h) or ''}" for h in hyps))
        else:
            print("\t".join(h.text for h in hyps))
    return 0


def constraints_for(
    args: argparse.Namespace, translator: Translator, lines: int
) -> list[Constraint | None] | None:
    """The --constraints file's line for each input line, as target ids; None without the
    flag. The file must have a line for every input line, and every phrase must split into
    tokens of the target vocabulary."""
    if not args.constraints:
        return None
    if args.sample:
        raise ValueError("--constraints constrain beam search: they cannot be sampled")
    phrases = read_constraints(args.constraints)
    if len(phrases) != lines:
        raise ValueError(
            f"{args.constraints}: {len(phrases)} lines for {lines} input lines; give each "
            "input line its line of constraints (an empty one for none)"
        )
    out: list[Constraint | None] = []
    for number, given in enumerate(phrases, 1):
        try:
            out.append(translator.constraint(given.include, given.exclude) if given else None)
        except ValueError as bad:
            raise ValueError(f"{args.constraints}:{number}: {bad}") from None
    return out


def alignment_of(
    translation: Translation, mode: str | None, tokenizers: tuple[Tokenizer, Tokenizer]
) -> str | None:
    """The hypothesis's hard alignment between tokens or words (`mode`); None where the
    model has no attention, or none was asked for."""
    if mode is None or translation.attention is None:
        return None
    if mode == "words":
        return word_alignment(
            translation.attention, translation.src_tokens, translation.tokens, tokenizers
        )
    return translation.alignment


def as_json(translation: Translation, align: Callable[[Translation], str | None]) -> dict:
    """One hypothesis of a --jsonl line: its text, its tokens with each one's probability
    (word-level confidence), its summed log-probability and, if asked, its alignment."""
    out = {
        "text": translation.text,
        "tokens": translation.tokens,
        "probabilities": [round(p, 5) for p in translation.probabilities],
        "score": round(translation.score, 5),
    }
    alignment = align(translation)
    return out | ({"alignment": alignment} if alignment is not None else {})


def sampling_for(args: argparse.Namespace) -> dict:
    """translate_tokens' `sampling` argument from --sample and its flags, or nothing."""
    sampled = ("temperature", "top_k", "top_p", "samples", "seed")
    if not args.sample:
        given = [name for name in sampled if getattr(args, name) is not None]
        given = ["--" + name.replace("_", "-") for name in given]
        if given:
            raise ValueError(f"{', '.join(given)} only apply with --sample")
        return {}
    if args.nbest > 1:
        raise ValueError("--sample draws outputs instead of searching: use --samples, not --nbest")
    from alignmt.decoding.rules import Sampling

    options = {name: getattr(args, name) for name in sampled if getattr(args, name) is not None}
    return {"sampling": Sampling(**options)}


def check_lengths(tokens: list[list[str]], limit: int) -> None:
    """Refuse the input, before any decoding, if a line is longer than `limit` source tokens:
    the decoder's time grows with the source length, and an over-long line would hold up the
    whole run (about 43 s for 1,000 tokens on two CPU cores) or be cut without a word."""
    for number, line in enumerate(tokens, 1):
        if len(line) > limit:
            raise ValueError(
                f"stdin:{number}: {len(line)} source tokens, over --max-source-tokens {limit}; "
                "split the line, or raise the limit"
            )


def translator_for(runs: str | list[str], args: argparse.Namespace) -> Translator:
    """The model of a run (or the ensemble of several) on --device at --precision,
    searching with --beam and --replace-unk (the first run's search otherwise)."""
    # imported here, so that --backend flax loads no torch
    from alignmt.checkpoint.torch_io import load_checkpoint
    from alignmt.decoding.translator import Translator
    from alignmt.model.device import pick_device

    runs = [runs] if isinstance(runs, str) else runs
    ckpts = [load_checkpoint(run, device=pick_device(args.device)) for run in runs]
    search = search_for(ckpts[0].config.search, args)
    if len(ckpts) > 1:
        return Translator.ensemble(ckpts, runs, search, precision=args.precision)
    return Translator.from_checkpoint(ckpts[0], search, precision=args.precision)


def runtime_translator_for(args: argparse.Namespace) -> OnnxTranslator:
    """The exported model (`alignmt export`) of the one folder given, on ONNX Runtime and
    NumPy: no torch is imported. It searches as the run did, with --beam and --replace-unk;
    --weights int8 runs the graphs' int8 copies (`alignmt export --int8`)."""
    asked = [
        flag
        for flag, given in (
            ("several folders (an ensemble)", len(args.run_dirs) > 1),
            ("--sample", args.sample),
            ("--constraints", args.constraints),
            ("--backend flax", args.backend != "torch"),
            ("--coverage-penalty", args.coverage_penalty),
            ("--shortlist", args.shortlist),
            ("--precision", args.precision != "float32"),
            ("--device", args.device not in ("auto", "cpu")),
        )
        if given
    ]
    if asked:
        raise ValueError(
            f"an exported model translates one folder on the CPU, greedy or with a beam, "
            f"float32 or (--weights int8) int8; not with {', '.join(asked)}: translate the run "
            f"folder for those"
        )
    from alignmt.decoding.onnx_runtime import OnnxModel, OnnxTranslator

    model = OnnxModel(args.run_dirs[0], int8=args.weights == "int8")
    return OnnxTranslator(model, search_for(model.header.config.search, args))


def flax_translator_for(run: str, args: argparse.Namespace) -> FlaxTranslator:
    """The model of `run` in JAX/Flax on --device, searching as `translator_for`'s does."""
    try:
        from alignmt.checkpoint.flax_io import load_flax
        from alignmt.decoding.flax_translator import FlaxTranslator
    except ImportError as missing:
        raise ValueError(f"--backend flax needs the [flax] extra ({missing})") from None
    if args.precision != "float32":
        raise ValueError(f"--backend flax decodes in float32, not --precision {args.precision}")
    ckpt = load_flax(run)
    search = search_for(ckpt.config.search, args)
    return FlaxTranslator.from_checkpoint(ckpt, search, device=args.device)


def search_for(search: SearchConfig, args: argparse.Namespace) -> SearchConfig:
    """A run's search with --beam, --replace-unk, --coverage-penalty, --weights and
    --shortlist applied."""
    search = search if args.beam is None else replace(search, beam_size=args.beam)
    if args.coverage_penalty is not None:
        search = replace(search, coverage_penalty=args.coverage_penalty)
    search = with_speed(search, args)
    search = replace(search, replace_unk=search.replace_unk or args.replace_unk)
    if search.beam_size < 1:
        raise ValueError(f"--beam must be at least 1, got {search.beam_size}")
    return search


def with_speed(search: SearchConfig, args: argparse.Namespace) -> SearchConfig:
    """`search` with --weights and --shortlist applied, where given."""
    if args.weights is not None:
        search = replace(search, weights=args.weights)
    if args.shortlist is not None:
        search = replace(search, shortlist=args.shortlist)
    return search
