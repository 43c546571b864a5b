"""The torch engine: a `Seq2Seq` (or an `Ensemble` of them) as the translator drives it.

It searches with search.py (continuous batching, packed or int8 matmuls, a shortlist, the
coverage penalty, sampling and lexical constraints), steps through one sentence and traces
its beam with trace.py, on its model's device and at its precision (`model.device`), and
hands back NumPy arrays on the CPU. It can do everything the engine table lists; an
ensemble, whose members attend each their own way, is not stepped through.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from alignmt.config import Precision, SearchConfig
from alignmt.decoding.constraint import Constraint
from alignmt.decoding.engine import Call, Check, Engine, Method, Pairs, Searcher
from alignmt.decoding.results import BeamTrace, DecoderStep, Hypothesis
from alignmt.decoding.torch_engine.constraints import Table
from alignmt.decoding.torch_engine.ensemble import Ensemble
from alignmt.decoding.torch_engine.packed import int8_linears
from alignmt.decoding.torch_engine.plan import SearchPlan
from alignmt.decoding.torch_engine.rows import select_rows
from alignmt.decoding.torch_engine.sample import sampler
from alignmt.decoding.torch_engine.search import search
from alignmt.decoding.torch_engine.speed import check_speed
from alignmt.decoding.torch_engine.steps import full_precision
from alignmt.decoding.torch_engine.trace import beam_trace, step_through
from alignmt.model.batch import pad_sequences
from alignmt.model.device import autocast, check_precision
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.shortlist import Shortlist
from alignmt.text.vocab import Vocab


class TorchEngine(Engine):
    """A PyTorch model decoding where it is, under `autocast(device, precision)`: put the
    model on the device first. `search.weights` and `search.shortlist` choose int8 matmuls
    and the run's shortlist (see speed.py)."""

    name = "torch"

    def __init__(
        self,
        model: Seq2Seq | Ensemble,
        *,
        search: SearchConfig,
        vocabs: tuple[Vocab, Vocab],
        precision: Precision = "float32",
        shortlist: Shortlist | None = None,
    ) -> None:
        self.model = model.eval()
        check_precision(self.device, precision)
        self.precision = precision
        self.speed = check_speed(search, shortlist, vocabs, self.device, precision, model)
        self.pad_id = vocabs[0].pad_id
        self.vocabs = vocabs
        self.has_attention = model.has_attention
        self.copies = model.copies
        self.parameters = sum(p.numel() for p in model.parameters())
        self.bos_id, self.eos_id = model.bos_id, model.eos_id

    @property
    def ensemble(self) -> bool:
        return isinstance(self.model, Ensemble)

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

    def searcher(self, call: Call) -> Searcher:
        pick = None
        if call.sampling is not None:  # one generator for the call: its seed fixes every draw
            generator = torch.Generator(self.device).manual_seed(call.sampling.seed)
            pick = sampler(call.sampling, generator)
        how = SearchPlan.from_config(
            call.search,
            nbest=call.nbest,
            width=call.width,
            beam_size=call.search.beam_size,
            pick=pick,
            speed=self.speed,
            check=call.check,
        )

        @torch.no_grad()
        def searched(
            sentences: list[list[int]], constraints: Sequence[Constraint | None] | None
        ) -> list[list[Hypothesis]]:
            batches = [
                self._batch(sentences[i : i + call.width])
                for i in range(0, len(sentences), call.width)
            ]
            group = (
                how
                if constraints is None
                else replace(how, constraints=Table.of(constraints, self.device))
            )
            # Not numerics(): search puts int8 in place itself, the shortlist's projection too.
            with autocast(self.device, self.precision):
                return search(self.model, batches, group)

        return searched

    def _batch(self, sentences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """A padded id batch on the device: src (B, T_src) ending in </s>, src_len (B,)."""
        src = pad_sequences(sentences, self.pad_id)
        src_len = torch.tensor([len(row) for row in sentences])
        return src.to(self.device), src_len.to(self.device)

    @torch.no_grad()
    def encode(self, sentences: list[list[int]]) -> tuple[Any, Any]:
        memory, state = self.model.encode(*self._batch(sentences))
        return state, memory

    @torch.no_grad()
    def step(
        self, prev: np.ndarray, state: Any, memory: Any, steer: np.ndarray | None = None
    ) -> tuple[np.ndarray, Any, Any]:
        prev = torch.as_tensor(prev, dtype=torch.int64, device=self.device)
        if steer is not None:
            steer = torch.as_tensor(steer, dtype=memory.states.dtype, device=self.device)
            memory = memory._replace(steer=steer)
        dist, state, alpha = self.model.decode_step(prev, state, memory)
        log_probs = dist.float().full().cpu().numpy()
        alpha = None if alpha is None else full_precision(alpha).cpu().numpy()
        return log_probs, state, alpha

    def select(self, fields: Any, rows: np.ndarray) -> Any:
        return select_rows(fields, torch.as_tensor(rows, device=self.device))

    @torch.no_grad()
    def step_through(
        self,
        src: list[int],
        *,
        max_len: int,
        prefix: Sequence[int],
        override: dict[int, int] | None,
        top_k: int,
        beam_size: int,
        search: SearchConfig,
        check: Check | None,
    ) -> list[DecoderStep]:
        with self.numerics():
            return step_through(
                self.model,
                torch.tensor(src, device=self.device),
                max_len=max_len,
                prefix=prefix,
                override=override,
                top_k=top_k,
                beam_size=beam_size,
                alpha=search.length_penalty,
                beta=search.coverage_penalty,
                check=check,
            )

    def relevance(self, pairs: Pairs, method: Method, *, batch_size: int = 64) -> list[np.ndarray]:
        self.check_method(method)
        from alignmt.decoding.torch_engine.relevance import pair_relevance  # loads Captum

        with self.numerics():
            return pair_relevance(self.model, pairs, self.vocabs, method, batch_size=batch_size)

    def flips(self, pairs: Pairs, *, batch_size: int = 64) -> tuple[int, int]:
        self.require(["teacher-forced attention"])
        from alignmt.decoding.torch_engine.relevance import pair_flips

        with self.numerics():
            return pair_flips(self.model, pairs, self.vocabs, batch_size)

    @torch.no_grad()
    def beam_trace(
        self,
        src: list[int],
        *,
        max_len: int,
        beam_size: int,
        search: SearchConfig,
        check: Check | None,
        constraint: Constraint | None,
    ) -> BeamTrace:
        with self.numerics():
            return beam_trace(
                self.model,
                torch.tensor(src, device=self.device),
                max_len=max_len,
                beam_size=beam_size,
                alpha=search.length_penalty,
                beta=search.coverage_penalty,
                check=check,
                constraint=constraint,
            )
