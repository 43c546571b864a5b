"""Raw sentences in, raw translations out, over any engine: tokenise, sort, search, decode,
detokenise.

`Translator` binds an engine (engine.py: PyTorch, Flax or ONNX Runtime) to the tokenizers
and vocabularies its model was trained with. It does everything around the search once for
every engine: blank lines and unknown words, sorting by length and cutting the input into
groups, sampling's repeated draws, lexical constraints as target ids, n-best, the words of
each output (<unk> replacement, the alignment) and its text; and it refuses what the engine
cannot do, by the engine's table, before any work. The search itself, and the step-by-step
views of one sentence, are the engine's. `door.open_translator` makes one from a folder.
Nothing here imports a framework.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TypeVar

from alignmt.checkpoint.format import Header
from alignmt.config import SearchConfig
from alignmt.decoding.constraint import Constraint
from alignmt.decoding.engine import Call, Check, Engine, Feature
from alignmt.decoding.results import BeamTrace, Hypothesis, Stepped, Translation, stack_rows
from alignmt.decoding.rules import Sampling, check_search_args, sentence_limit
from alignmt.decoding.words import (
    phrase_ids,
    prefix_ids,
    replace_unknown,
    source_as_read,
    warn_unknown,
)
from alignmt.text import copy
from alignmt.text.tokenize import Tokenizer
from alignmt.text.vocab import EOS, Vocab

log = logging.getLogger(__name__)
T = TypeVar("T")
# Sentences searched per call of the engine's search: groups of many batches keep a search's
# rows busy until the group's end (continuous batching) and bound the attention held at once.
GROUP = 16  # batches


@dataclass(frozen=True)
class Origin:
    """Where a translator's model came from, so that its run's snapshots open alike."""

    folder: Path | None  # the run folder (or the exported folder); None: a model in memory
    header: Header  # its config, vocabularies, tokenizers and training step
    # a training step's snapshot, searching as given, on the same engine, device and
    # precision; None: none can be opened (an ensemble, an exported model)
    reopen: Callable[[int, SearchConfig], Translator] | None = None


class Translator:
    """A model's engine with its tokenizers and vocabularies, translating raw text."""

    def __init__(
        self,
        engine: Engine,
        *,
        tokenizers: tuple[Tokenizer, Tokenizer],
        vocabs: tuple[Vocab, Vocab],
        search: SearchConfig,
        origin: Origin | None = None,
    ) -> None:
        self.engine = engine
        self.src_tokenizer, self.tgt_tokenizer = tokenizers
        self.src_vocab, self.tgt_vocab = vocabs
        self.search = search
        self.origin = origin

    @property
    def has_attention(self) -> bool:
        return self.engine.has_attention

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
            sampling: draw outputs (`rules.Sampling`) instead of searching.
            beam_size: the beam for this call; None: `search.beam_size`.
            constraints: each line's lexical constraints (`constraint` makes them from
                phrases; None: none), searched by dynamic beam allocation, even with a beam
                of one.

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
        if constraints is not None and len(constraints) != len(tokens):
            raise ValueError(f"{len(constraints)} constraints for {len(tokens)} sentences")
        call = self._call(nbest, batch_size, sampling, beam_size, check, constraints)
        if warn:
            warn_unknown(tokens, self.src_vocab, copies=self.engine.copies)
        draws = sampling.samples if sampling is not None else 1
        searched = self.engine.searcher(call)
        results: list[list[Translation]] = [[] for _ in tokens]
        todo = sorted((i for i, t in enumerate(tokens) if t), key=lambda i: len(tokens[i]))
        for rows in _chunks(todo, GROUP * batch_size):
            ids = [self.source_ids(tokens[i], add_eos=True) for i in rows]
            wanted = None if constraints is None else [constraints[i] for i in rows]
            found = searched([row for row in ids for _ in range(draws)], wanted)
            if draws > 1:  # each draw is a sentence of its own: regroup them
                found = [[h for hyps in group for h in hyps] for group in _chunks(found, draws)]
            for i, sentence_hyps in zip(rows, found, strict=True):
                results[i] = [self._translation(tokens[i], h) for h in sentence_hyps]
        empty = Translation("", [], [EOS], 0.0, None, [])
        return [r or [empty] * (draws if sampling is not None else nbest) for r in results]

    def _call(
        self,
        nbest: int,
        width: int,
        sampling: Sampling | None,
        beam_size: int | None,
        check: Check | None,
        constraints: Sequence[Constraint | None] | None,
    ) -> Call:
        """One call's search, checked against what the engine can do. Sampling draws one
        output per sentence: a beam of one, without the coverage penalty."""
        search = self.search
        if sampling is not None:
            search, nbest = replace(search, beam_size=1, coverage_penalty=0.0), 1
        elif beam_size:
            search = replace(search, beam_size=beam_size)
        check_search_args(search.beam_size, nbest, width)
        asked: list[Feature] = []
        if sampling is not None:
            asked.append("sampling")
        if constraints is not None:  # even all None: the search keeps to (no) constraints
            if sampling is not None:
                raise ValueError("lexical constraints need beam search: they cannot be sampled")
            asked.append("constrained search")
        self.engine.require(asked)
        return Call(search=search, nbest=nbest, width=width, sampling=sampling, check=check)

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
        unk = self.tgt_vocab.unk_id  # a copied word is in no phrase of target ids
        return constraint.met([self.tgt_vocab.stoi.get(t, unk) for t in translation.tokens])

    def source_tokens(self, line: str) -> list[str]:
        """The source tokenizer's tokens of a raw sentence; none for a blank one."""
        return self.src_tokenizer.encode(line) if line.strip() else []

    def source_ids(self, src_tokens: Sequence[str], *, add_eos: bool = False) -> list[int]:
        """The ids the model reads: `Vocab.encode`'s, or a copying model's, whose unknown
        words have extended ids (alignmt.text.copy)."""
        if self.engine.copies:
            return copy.source_ids(src_tokens, self.src_vocab, add_eos=add_eos)
        return self.src_vocab.encode(src_tokens, add_eos=add_eos)

    def token_text(self, token: int, src_tokens: Sequence[str]) -> str:
        """An output id's token: the target vocabulary's, or a copied source word's."""
        return copy.output_tokens([token], src_tokens, self.tgt_vocab, strip_special=False)[0]

    def source_as_read(self, src_tokens: list[str]) -> list[str]:
        """The source tokens as the model reads them (see `words.source_as_read`)."""
        return source_as_read(src_tokens, self.src_vocab)

    def output_limit(self, src_tokens: list[str]) -> int:
        """The most output tokens (</s> included) a sentence of these tokens may get."""
        return sentence_limit(len(src_tokens), self.search)

    def target_ids(self, tokens: Sequence[str], src_tokens: Sequence[str] = ()) -> list[int]:
        """Ids of target tokens that a caller forces (see `words.prefix_ids`): a copying
        model's may name the words of `src_tokens` it copies."""
        copied = copy.copied_to(src_tokens, self.src_vocab, self.tgt_vocab)
        return prefix_ids(tokens, self.tgt_vocab, copied if self.engine.copies else None)

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
        step. See torch_engine/trace.py."""
        self.engine.require(["stepping through the decoder"])
        src_tokens = self._one_source(line)
        steps = self.engine.step_through(
            self.source_ids(src_tokens, add_eos=True),
            max_len=self.output_limit(src_tokens),
            prefix=self.target_ids(prefix, src_tokens),
            override=override,
            top_k=top_k,
            beam_size=beam_size,
            search=self.search,
            check=check,
        )
        log_probs = [s.log_prob for s in steps]
        attention = stack_rows([s.attention for s in steps])
        hyp = Hypothesis([s.token for s in steps], sum(log_probs), attention, log_probs)
        return Stepped(self._translation(src_tokens, hyp), steps)

    def beam_trace(
        self,
        line: str,
        *,
        beam_size: int,
        check: Check | None = None,
        constraint: Constraint | None = None,
    ) -> tuple[list[str], BeamTrace]:
        """Every candidate beam search weighs for one raw sentence (see
        torch_engine/trace.py), and the sentence's source tokens (for `hypothesis`); `check`
        runs before every decoder step; `constraint` constrains the search."""
        self.engine.require(["stepping through the decoder"])
        src_tokens = self._one_source(line)
        trace = self.engine.beam_trace(
            self.source_ids(src_tokens, add_eos=True),
            max_len=self.output_limit(src_tokens),
            beam_size=beam_size,
            search=self.search,
            check=check,
            constraint=constraint,
        )
        return src_tokens, trace

    def hypothesis(self, src_tokens: list[str], trace: BeamTrace, node: int) -> Translation:
        """The hypothesis that ends at `node` of a beam trace, as a translation."""
        return self._translation(src_tokens, trace.hypothesis(node))

    def snapshot(self, step: int) -> Translator:
        """The weights its run kept at training `step` (train.snapshot_every), searching as
        this translator does, on its engine, device and precision."""
        if self.origin is None or self.origin.reopen is None:
            opened = self.origin.folder if self.origin and self.origin.folder else "memory"
            raise ValueError(
                f"no snapshots open here ({self.engine.label}, from {opened}): a run's "
                "snapshots open on the torch engine of its one run folder"
            )
        return self.origin.reopen(step, self.search)

    def _one_source(self, line: str) -> list[str]:
        tokens = self.source_tokens(line)
        if not tokens:
            raise ValueError("the sentence is empty")
        return tokens

    def _translation(self, src_tokens: list[str], hyp: Hypothesis) -> Translation:
        out = copy.output_tokens(hyp.tokens, src_tokens, self.tgt_vocab, strip_special=False)
        words = copy.output_tokens(hyp.tokens, src_tokens, self.tgt_vocab)
        if self.search.replace_unk and hyp.attention is not None:
            words = replace_unknown(words, src_tokens, hyp.attention)
        text = self.tgt_tokenizer.decode(words)
        probabilities = [math.exp(score) for score in hyp.token_scores]
        src = self.source_as_read(src_tokens)
        return Translation(text, out, src, hyp.score, hyp.attention, probabilities)


def _chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
