"""The flax engine: a `FlaxSeq2Seq` and its parameters as the translator drives it, with no
torch.

It searches with search.py (greedy or beam search compiled by XLA, once per padded batch
shape, and sampling in greedy search's loop, sample.py), keeps each call's compiled search
for the next call with the same settings, and hands back NumPy arrays; it steps through one
sentence and traces its beam over its step (decoding/walk.py). It decodes in float32 over
the whole vocabulary, on a CPU or a GPU; the engine table (decoding/engine.py) says what it
leaves to the torch engine.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from alignmt.checkpoint.flax_io import Params
from alignmt.config import Precision
from alignmt.decoding.constraint import Constraint
from alignmt.decoding.engine import Call, Engine, Method, Pairs, Searcher, Unavailable, needs
from alignmt.decoding.flax_engine.batch import pad_batch
from alignmt.decoding.flax_engine.ensemble import FlaxEnsemble
from alignmt.decoding.flax_engine.relevance import pair_relevance
from alignmt.decoding.flax_engine.search import FlaxSearch, apply_method
from alignmt.decoding.flax_engine.shortlisted import FlaxShortlisted, Listed
from alignmt.decoding.results import Hypothesis, shown_value
from alignmt.decoding.walk import sentence_search
from alignmt.model.attention.registry import compose
from alignmt.model.flax_decoder import Memory
from alignmt.model.flax_seq2seq import FlaxSeq2Seq
from alignmt.text.shortlist import Shortlist

log = logging.getLogger(__name__)


class FlaxEngine(Engine):
    """A Flax model with its parameters, on the device they were put on."""

    name = "flax"

    def __init__(
        self,
        model: FlaxSeq2Seq | FlaxEnsemble,
        params: Params,
        shortlist: Shortlist | None = None,
        precision: Precision = "float32",
    ) -> None:
        """`shortlist`: the words each sentence may output (already cut to search.shortlist).
        `precision`: "bfloat16" holds the weights in bfloat16, so that every matmul runs in
        it, and reads each step's scores in float32 (flax_distribution.py), as PyTorch's
        autocast does."""
        self._ensemble = isinstance(model, FlaxEnsemble)
        self.precision = precision
        if precision == "bfloat16":
            params = jax.tree_util.tree_map(lambda w: w.astype(jnp.bfloat16), params)
        if shortlist is not None:
            model = FlaxShortlisted(model, shortlist.table, shortlist.frequent)
            params = {"inner": params}
        self.model, self.params = model, params
        self.has_attention = model.has_attention
        self.copies = model.cfg.copy
        self.parameters = sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(params))
        self.bos_id, self.eos_id = model.bos_id, model.eos_id
        self._searches: dict[tuple, FlaxSearch] = {}  # a call's settings -> its search
        # compiled once per shape, not run op by op; the parameters are an argument, not
        # constants baked into the program
        self._step = jax.jit(partial(_log_prob_step, model))
        self._encode = jax.jit(partial(_encode, model))
        self._select = jax.jit(_rows_of)

    def searcher(self, call: Call) -> Searcher:
        s = call.search
        # sampling's settings but its seed: one compiled program for every seed
        sampling = call.sampling
        drawing = None if sampling is None else replace(sampling, seed=0, samples=1)
        key = (
            call.nbest,
            call.width,
            s.beam_size,
            s.length_penalty,
            s.coverage_penalty,
            s.max_len_ratio,
            s.max_len_offset,
            drawing,
        )
        if key not in self._searches:  # made once, so that it compiles once per shape
            options = dict(nbest=call.nbest, batch_size=call.width, sampling=drawing)
            self._searches[key] = FlaxSearch(self.model, self.params, s, **options)
        search = self._searches[key]
        # one generator for the call, as every engine samples (decoding/sample.py)
        rng = None if sampling is None else np.random.default_rng(sampling.seed)

        def searched(
            sentences: list[list[int]], constraints: Sequence[Constraint | None] | None
        ) -> list[list[Hypothesis]]:
            if constraints is not None:  # beam search over the jitted step, from Python
                return sentence_search(self, sentences, constraints, call)
            before = search.compilations
            found = search(sentences, check=call.check, rng=rng)
            log.info("flax search: %d jit compilations", search.compilations - before)
            return found

        return searched

    def encode(self, sentences: list[list[int]]) -> tuple[Any, Any]:
        src, src_len = pad_batch(sentences, len(sentences), self.model)
        memory, state = self._encode(self.params, src, src_len)
        return state, memory

    @property
    def ensemble(self) -> bool:
        return self._ensemble

    def step(
        self, prev: np.ndarray, state: Any, memory: Any, steer: np.ndarray | None = None
    ) -> tuple[np.ndarray, Any, Any]:
        prev = np.asarray(prev, np.int32)
        if steer is not None:
            memory = _steered(memory, steer)
        log_probs, state, alpha = self._step(self.params, prev, state, memory)
        alpha = None if alpha is None else np.asarray(alpha, np.float32)
        return np.asarray(log_probs, np.float32), state, alpha

    def relevance(self, pairs: Pairs, method: Method, *, batch_size: int = 64) -> list[np.ndarray]:
        if method in ("attention", "shift"):  # read over the step, as every engine does
            return super().relevance(pairs, method, batch_size=batch_size)
        self.check_method(method)
        if self.ensemble:
            raise Unavailable(needs(method), self.label, self.instead)
        model, params = self.model, self.params
        if isinstance(model, FlaxShortlisted):  # attribution reads the whole vocabulary
            model, params = model.inner, params["inner"]
        return pair_relevance(model, params, pairs, method, batch_size=batch_size)

    def select(self, fields: Any, rows: np.ndarray) -> Any:
        return self._select(fields, jnp.asarray(rows))

    def shown(self, state: Any) -> dict[str, float | list[list[float]]]:
        if self.ensemble or not self.has_attention:
            return {}
        declared = compose(self.model.cfg).shown
        return {s.slot: shown_value(np.asarray(state.slots[s.slot][0]), s.kind) for s in declared}


def _log_prob_step(
    model: FlaxSeq2Seq, params: Params, prev: Any, state: Any, memory: Any
) -> tuple[Any, Any, Any]:
    """`Engine.step`'s program: (N,) tokens -> (N, V) log-probabilities, the new state and
    alpha (N, T_src) or None."""
    with jax.default_matmul_precision("highest"):
        log_probs, state, alpha = apply_method(model, params, "decode_step", prev, state, memory)
    return log_probs.full(), state, alpha


def _rows_of(fields: Any, rows: Any) -> Any:
    """`Engine.select`'s program: every array of `fields` at the rows `rows`."""
    return jax.tree_util.tree_map(lambda x: x[rows], fields)


def _encode(model: FlaxSeq2Seq, params: Params, src: Any, src_len: Any) -> tuple[Any, Any]:
    """`Engine.encode`'s program: (B, T_src) padded ids and (B,) lengths -> (memory, state)."""
    return apply_method(model, params, "encode", src, src_len)


def _steered(memory: Any, steer: np.ndarray) -> Any:
    """The memory with `steer` (N, T_src), zero-padded to the bucket the source was padded to,
    in every model's: a model's own, an ensemble's tuple of its members', a shortlist's."""
    if isinstance(memory, Listed):
        return memory._replace(inner=_steered(memory.inner, steer))
    if not isinstance(memory, Memory):  # an ensemble's
        return tuple(_steered(member, steer) for member in memory)
    width = memory.mask.shape[1]
    padded = np.pad(steer, ((0, 0), (0, width - steer.shape[1])))
    return memory._replace(steer=jnp.asarray(padded, jnp.float32))
