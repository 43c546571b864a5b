"""Raw sentences in, raw translations out: tokenise, encode, search, decode, detokenise.

Owns `Translator`, which binds a model to the tokenizers and vocabularies it was trained
with (all stored in its checkpoint, so a run folder alone translates raw text), sorts input
by length into batches, and returns each sentence's hypotheses with their attention and
hard alignment; it also steps through one sentence's decoding and traces its beam search
(`trace`) in words. It decodes on its model's device, at its precision
(`alignmt.model.device`), and hands back everything on the CPU. Search itself is `search`'s;
scoring translations is `alignmt.analysis.scores`'.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TypeVar

import torch
from torch import Tensor

from alignmt.checkpoint.torch_io import Checkpoint, load_snapshot
from alignmt.config import Precision, SearchConfig
from alignmt.decoding.constraints import Constraint, Table
from alignmt.decoding.ensemble import Ensemble, check_shared
from alignmt.decoding.packed import int8_linears
from alignmt.decoding.rules import Sampling, sentence_limit
from alignmt.decoding.sample import sampler
from alignmt.decoding.search import search
from alignmt.decoding.settings import Check, Search
from alignmt.decoding.speed import check_speed
from alignmt.decoding.steps import Hypothesis
from alignmt.decoding.trace import BeamTrace, DecoderStep, beam_trace, step_through
from alignmt.decoding.words import (
    hard_alignment,
    phrase_ids,
    prefix_ids,
    replace_unknown,
    source_as_read,
    warn_unknown,
)
from alignmt.model.batch import source_batch
from alignmt.model.device import autocast, check_precision
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.shortlist import Shortlist
from alignmt.text.tokenize import Tokenizer
from alignmt.text.vocab import EOS, Vocab

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Translation:
    text: str  # the detokenised output
    tokens: list[str]  # output tokens, </s> included when produced
    src_tokens: list[str]  # the source as the model read it: tokens (<unk> for unknown) + </s>
    score: float  # summed log-probability
    attention: Tensor | None  # (len(tokens), len(src_tokens)); None for vanilla
    probabilities: list[float]  # each output token's, given those before it

    @property
    def alignment(self) -> str | None:
        """The hard alignment in Pharaoh format; None for vanilla (see `hard_alignment`)."""
        return None if self.attention is None else hard_alignment(self.attention, self.tokens)


@dataclass
class Stepped:
    """One sentence's decoding, step by step (see `trace.step_through`)."""

    translation: Translation  # the output it reached
    steps: list[DecoderStep]  # one per output token; ids index the target vocabulary


class Translator:
    """A trained model with its tokenizers and vocabularies, translating raw text.

    It decodes where the model is, under `autocast(device, precision)`: put the model on
    the device first (`load_checkpoint(..., device=...)`). `search.weights` and
    `search.shortlist` choose int8 matmuls and the run's shortlist (see `speed.Speed`).
    """

    def __init__(
        self,
        model: Seq2Seq | Ensemble,
        *,
        tokenizers: tuple[Tokenizer, Tokenizer],
        vocabs: tuple[Vocab, Vocab],
        search: SearchConfig,
        precision: Precision = "float32",
        shortlist: Shortlist | None = None,
    ) -> None:
        self.model = model.eval()
        self.src_tokenizer, self.tgt_tokenizer = tokenizers
        self.src_vocab, self.tgt_vocab = vocabs
        self.search = search
        check_precision(self.device, precision)
        self.precision = precision
        self.shortlist = shortlist
        self.speed = check_speed(search, shortlist, vocabs, self.device, precision)

    @property
    def device(self) -> torch.device:
        """Where the model is, and so where it decodes."""
        return next(self.model.parameters()).device

    @contextmanager
    def numerics(self) -> Iterator[None]:
        """The context the model runs in outside search (stepping through, the beam tree,
        attention's links): autocast to bfloat16, or nothing for float32; with int8
        weights, the decoder's Linears in int8, over the whole vocabulary."""
        with autocast(self.device, self.precision), ExitStack() as stack:
            if self.speed.int8:
                stack.enter_context(int8_linears(self.model.decoder))
            yield

    @classmethod
    def ensemble(
        cls,
        ckpts: Sequence[Checkpoint],
        names: Sequence[str],
        search: SearchConfig,
        *,
        precision: Precision = "float32",
    ) -> Translator:
        """The checkpoints' models decoding as one (`ensemble.Ensemble`), on their device.
        They must share tokenizers and vocabularies (so they read the same source ids and
        write the same target ones); one that does not is refused, named by `names`."""
        check_shared(ckpts, names)
        first = ckpts[0]
        return cls(
            Ensemble([ckpt.model for ckpt in ckpts]),
            tokenizers=(first.src_tokenizer, first.tgt_tokenizer),
            vocabs=(first.src_vocab, first.tgt_vocab),
            search=search,
            precision=precision,
            shortlist=first.shortlist,
        )

    @classmethod
    def from_checkpoint(
        cls,
        ckpt: Checkpoint,
        search: SearchConfig | None = None,
        *,
        precision: Precision = "float32",
    ) -> Translator:
        """The checkpoint's model, on the device it was loaded to, searching as `search`
        says (default: its stored config) at `precision`."""
        return cls(
            ckpt.model,
            tokenizers=(ckpt.src_tokenizer, ckpt.tgt_tokenizer),
            vocabs=(ckpt.src_vocab, ckpt.tgt_vocab),
            search=search or ckpt.config.search,
            precision=precision,
            shortlist=ckpt.shortlist,
        )

    def snapshot(self, run_dir: str | Path, step: int) -> Translator:
        """The weights run `run_dir` kept at training `step` (train.snapshot_every),
        searching as this translator does, on its device and at its precision."""
        ckpt = load_snapshot(run_dir, step, device=self.device)
        return Translator.from_checkpoint(ckpt, self.search, precision=self.precision)

    @torch.no_grad()
    def translate(
        self,
        lines: Sequence[str],
        *,
        nbest: int = 1,
        batch_size: int = 64,
        warn: bool = True,
        sampling: Sampling | None = None,
        beam_size: int | None = None,
        constraints: Sequence[Constraint | None] | None = None,
    ) -> list[list[Translation]]:
        """Translate raw sentences, `nbest` hypotheses each, best first (or, with
        `sampling`, its number of samples each, in the order they were drawn).

        Args:
            lines: raw source sentences; a blank one gets one empty translation, so that
                output lines stay aligned with input lines.
            nbest: hypotheses per sentence, at most the beam size.
            batch_size: the most sentences decoded at once. Sentences go in sorted by length,
                to limit padding, and one that ends hands its rows to the next.
            warn: log a warning counting source tokens outside the vocabulary.
            sampling: draw outputs (`sample.Sampling`) instead of searching.
            beam_size: the beam for this call; None: `search.beam_size`.
            constraints: each line's lexical constraints (`constraint` makes them from
                phrases; None: none), searched by dynamic beam allocation
                (`constraints.Table`), even with a beam of one.

        Returns:
            One list of `nbest` translations per line, in input order.
        """
        return self.translate_tokens(
            [self.source_tokens(line) for line in lines],
            nbest=nbest,
            batch_size=batch_size,
            warn=warn,
            sampling=sampling,
            beam_size=beam_size,
            constraints=constraints,
        )

    def constraint(self, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> Constraint:
        """Phrases of raw target text that an output must contain (`include`) and must not
        (`exclude`), as target ids: each split by the target tokenizer into the units the
        model writes (words, or subword pieces). A phrase that splits into nothing, or into
        a token outside the target vocabulary, is a ValueError naming it."""
        split = partial(phrase_ids, tokenizer=self.tgt_tokenizer, vocab=self.tgt_vocab)
        return Constraint(
            include=tuple(split("include", p) for p in include),
            exclude=tuple(split("exclude", p) for p in exclude),
        )

    def met(self, translation: Translation, constraint: Constraint) -> list[bool]:
        """Whether `translation` contains each of the constraint's include phrases."""
        return constraint.met([self.tgt_vocab.stoi[t] for t in translation.tokens])

    def source_tokens(self, line: str) -> list[str]:
        """The source tokenizer's tokens of a raw sentence; none for a blank one."""
        return self.src_tokenizer.encode(line) if line.strip() else []

    @torch.no_grad()
    def translate_tokens(
        self,
        tokens: list[list[str]],
        *,
        nbest: int = 1,
        batch_size: int = 64,
        warn: bool = True,
        sampling: Sampling | None = None,
        beam_size: int | None = None,
        check: Check | None = None,
        constraints: Sequence[Constraint | None] | None = None,
    ) -> list[list[Translation]]:
        """`translate` for sentences already split by `source_tokens`; `check` is called
        before every decoder step and stops the search by raising (a server's deadline)."""
        if warn:
            warn_unknown(tokens, self.src_vocab)
        if constraints is not None and len(constraints) != len(tokens):
            raise ValueError(f"{len(constraints)} constraints for {len(tokens)} sentences")
        how = self.settings(nbest, batch_size, sampling, beam_size, check)
        draws = sampling.samples if sampling is not None else 1
        results: list[list[Translation]] = [[] for _ in tokens]
        todo = sorted((i for i, t in enumerate(tokens) if t), key=lambda i: len(tokens[i]))
        # Groups of many batches keep the search's rows busy until a group's end (see
        # `search`) and bound the attention held at once.
        for rows in _chunks(todo, 16 * batch_size):
            sentences = [tokens[i] for i in rows for _ in range(draws)]
            batches = [self._source_ids(chunk) for chunk in _chunks(sentences, batch_size)]
            # Not numerics(): search puts int8 in place itself, the shortlist's projection too.
            if constraints is not None:  # the table's rows follow the search's order
                table = Table.of([constraints[i] for i in rows], self.device)
                how = replace(how, constraints=table)
            with autocast(self.device, self.precision):
                found = search(self.model, batches, how)
            if sampling is not None:  # each draw is a sentence of its own: regroup them
                found = [[h for hyps in group for h in hyps] for group in _chunks(found, draws)]
            for i, sentence_hyps in zip(rows, found, strict=True):
                results[i] = [self._translation(tokens[i], h) for h in sentence_hyps]
        empty = Translation("", [], [EOS], 0.0, None, [])
        return [r or [empty] * (draws if sampling is not None else nbest) for r in results]

    def settings(
        self,
        nbest: int = 1,
        width: int = 64,
        sampling: Sampling | None = None,
        beam_size: int | None = None,
        check: Check | None = None,
    ) -> Search:
        """The search of one call: this translator's, with the call's choices. Sampling
        takes one generator per call, whose seed fixes every draw."""
        pick = None
        if sampling is not None:
            pick = sampler(sampling, torch.Generator(self.device).manual_seed(sampling.seed))
        return Search.from_config(
            self.search,
            nbest=nbest,
            width=width,
            beam_size=beam_size,
            pick=pick,
            speed=self.speed,
            check=check,
        )

    @torch.no_grad()
    def step_through(
        self,
        line: str,
        *,
        prefix: Sequence[str] = (),
        override: dict[int, int] | None = None,
        top_k: int = 5,
        beam_size: int = 1,
        check: Check | None = None,
    ) -> Stepped:
        """The decoder over one raw sentence, step by step: `prefix` (target tokens) forced
        first, `override` (output position -> source position) steering attention, then
        greedy (beam_size 1) or beam search to the end; `check` runs before every decoder
        step. See `trace.step_through`."""
        src_tokens = self._one_source(line)
        prefix_ids = self.target_ids(prefix)
        src, max_len = self._one_source_ids(src_tokens)
        with self.numerics():
            steps = step_through(
                self.model,
                src,
                max_len=max_len,
                prefix=prefix_ids,
                override=override,
                top_k=top_k,
                beam_size=beam_size,
                alpha=self.search.length_penalty,
                beta=self.search.coverage_penalty,
                check=check,
            )
        attention = _stack([s.attention for s in steps])
        log_probs = [s.log_prob for s in steps]
        hyp = Hypothesis([s.token for s in steps], sum(log_probs), attention, log_probs)
        return Stepped(self._translation(src_tokens, hyp), steps)

    @torch.no_grad()
    def beam_trace(
        self,
        line: str,
        *,
        beam_size: int,
        check: Check | None = None,
        constraint: Constraint | None = None,
    ) -> tuple[list[str], BeamTrace]:
        """Every candidate beam search weighs for one raw sentence (see `trace.beam_trace`),
        and the sentence's source tokens (for `hypothesis`); `check` runs before every
        decoder step; `constraint` constrains the search."""
        src_tokens = self._one_source(line)
        src, max_len = self._one_source_ids(src_tokens)
        with self.numerics():
            trace = beam_trace(
                self.model,
                src,
                max_len=max_len,
                beam_size=beam_size,
                alpha=self.search.length_penalty,
                beta=self.search.coverage_penalty,
                check=check,
                constraint=constraint,
            )
        return src_tokens, trace

    def hypothesis(self, src_tokens: list[str], trace: BeamTrace, node: int) -> Translation:
        """The hypothesis that ends at `node` of a beam trace, as a translation."""
        nodes = [trace.nodes[i] for i in trace.path(node)]
        attention = _stack([n.attention for n in nodes])
        sums = [n.score for n in nodes]  # each node's summed log-probability
        log_probs = [b - a for a, b in zip([0.0, *sums], sums, strict=False)]
        hyp = Hypothesis([n.token for n in nodes], sums[-1], attention, log_probs)
        return self._translation(src_tokens, hyp)

    def target_ids(self, tokens: Sequence[str]) -> list[int]:
        """Ids of target tokens that a caller forces (see `words.prefix_ids`)."""
        return prefix_ids(tokens, self.tgt_vocab)

    def _one_source(self, line: str) -> list[str]:
        tokens = self.source_tokens(line)
        if not tokens:
            raise ValueError("the sentence is empty")
        return tokens

    def output_limit(self, src_tokens: list[str]) -> int:
        """The most output tokens (</s> included) a sentence of these tokens may get."""
        return sentence_limit(len(src_tokens), self.search)

    def _one_source_ids(self, tokens: list[str]) -> tuple[Tensor, int]:
        """(T_src,) ids of one tokenised sentence, and its output length limit."""
        src, _ = self._source_ids([tokens])
        return src[0], self.output_limit(tokens)

    def _source_ids(self, sentences: list[list[str]]) -> tuple[Tensor, Tensor]:
        """A padded id batch: src (B, T_src) ending in </s>, and src_len (B,)."""
        src, src_len = source_batch(sentences, self.src_vocab)
        return src.to(self.device), src_len.to(self.device)

    def source_as_read(self, src_tokens: list[str]) -> list[str]:
        """The source tokens as the model reads them (see `words.source_as_read`)."""
        return source_as_read(src_tokens, self.src_vocab)

    def _translation(self, src_tokens: list[str], hyp: Hypothesis) -> Translation:
        out = self.tgt_vocab.decode(hyp.tokens, strip_special=False)
        attention = None if hyp.attention is None else hyp.attention.float()
        words = self.tgt_vocab.decode(hyp.tokens)
        if self.search.replace_unk and attention is not None:
            words = replace_unknown(words, src_tokens, attention)
        text = self.tgt_tokenizer.decode(words)
        probabilities = [math.exp(score) for score in hyp.token_scores]
        src = self.source_as_read(src_tokens)
        return Translation(text, out, src, hyp.score, attention, probabilities)


def _stack(rows: list[Tensor | None]) -> Tensor | None:
    """Per-step attention rows (T_src,) as one (steps, T_src) matrix; None for vanilla."""
    return None if rows[0] is None else torch.stack(rows)


def _chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
