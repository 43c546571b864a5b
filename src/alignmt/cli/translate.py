"""`alignmt translate RUN_DIR`: stdin to stdout, one output line per input line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from alignmt.decoding.words import word_alignment
from alignmt.text.constraints import read_constraints
from alignmt.text.corpus import input_lines

if TYPE_CHECKING:
    from alignmt.decoding.constraint import Constraint
    from alignmt.decoding.engine import Feature
    from alignmt.decoding.results import Translation
    from alignmt.decoding.translator import Translator
    from alignmt.text.tokenize import Tokenizer


def run(args: argparse.Namespace) -> int:
    sampling = sampling_for(args)  # its flags are checked before any work
    needs: list[Feature] = []  # refused before the model is loaded, if its engine lacks them
    if args.sample:
        needs.append("sampling")
    if args.constraints:
        needs.append("constrained search")
    translator = translator_for(args.run_dirs, args, needs)
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


def translator_for(
    runs: str | list[str], args: argparse.Namespace, needs: Sequence[Feature] = ()
) -> Translator:
    """The model of a run, an exported folder or (several runs) an ensemble, on --engine,
    --device and --precision, searching as the first stored its search, with --beam,
    --replace-unk, --coverage-penalty, --weights and --shortlist applied; what its engine
    cannot do of `needs` is refused before it is loaded."""
    from alignmt.decoding.door import open_translator

    return open_translator(
        runs,
        engine="auto" if getattr(args, "engine", "torch") == "torch" else args.engine,
        device=args.device,
        precision=args.precision,
        beam_size=args.beam,
        coverage_penalty=args.coverage_penalty,
        weights=args.weights,
        shortlist=args.shortlist,
        replace_unk=args.replace_unk or None,
        needs=needs,
    )
