"""Translating with an exported model (`alignmt export`) on ONNX Runtime and NumPy, without
PyTorch or JAX.

`OnnxModel` opens the folder's two graphs and its manifest; `onnx_search` runs greedy and
beam search over them, a batch of sentences at a time, with the rules every search
follows (rules.py: the length limit, GNMT's length penalty, when a beam can stop); and
`OnnxTranslator` goes from raw text to translations as `Translator` does, with the same
tokenizers, vocabularies and output text. Beam search here keeps K rows per sentence, as
search.py does, and drops a sentence's rows once it has stopped; it does not hand them to
the next sentence (continuous batching), so its outputs are PyTorch's while its batches
thin out as they end.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnxruntime as ort

from alignmt.checkpoint.format import Header, parse_header
from alignmt.config import SearchConfig
from alignmt.decoding.onnx_format import ENCODER, FORMAT, MANIFEST, STEP, Manifest, int8_name
from alignmt.decoding.rules import (
    cannot_improve,
    length_penalty,
    max_output_len,
    sentence_limit,
)
from alignmt.decoding.words import hard_alignment, replace_unknown, source_as_read, warn_unknown
from alignmt.text.vocab import EOS

log = logging.getLogger(__name__)


class OnnxModel:
    """An exported model's graphs, run by ONNX Runtime on the CPU: float32, or the int8
    copies that `alignmt export --int8` wrote beside them (`int8=True`)."""

    def __init__(self, folder: str | Path, threads: int = 0, int8: bool = False) -> None:
        folder = Path(folder)
        self.manifest = _read_manifest(folder / MANIFEST)
        self.header: Header = parse_header(folder / MANIFEST, self.manifest)
        self.eos_id, self.bos_id = self.manifest["eos_id"], self.manifest["bos_id"]
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        encoder, step = (int8_name(ENCODER), int8_name(STEP)) if int8 else (ENCODER, STEP)
        if int8 and not (folder / step).is_file():
            raise ValueError(f"{folder / step}: not found; export with --int8 to write it")
        self.int8 = int8
        self.encoder = _session(folder / encoder, options)
        self.step_graph = _session(folder / step, options)
        width, words = self.step_graph.get_outputs()[0].shape[-1], len(self.header.tgt_vocab)
        if width != words:  # a graph copied in from another export
            raise ValueError(
                f"{folder / step}: scores {width} target tokens, but the vocabulary of "
                f"{folder / MANIFEST} has {words}; export the run again"
            )
        self.names = Manifest(
            tuple(self.manifest["state"]),
            tuple(self.manifest["memory"]),
            self.manifest["attention"],
        )
        self.takes = [i.name for i in self.step_graph.get_inputs()]

    @property
    def has_attention(self) -> bool:
        return self.names.attention

    def encode(self, src: np.ndarray, src_len: np.ndarray) -> tuple[dict, dict]:
        """(B, T_src) ids ending in </s>, (B,) lengths -> the first state and the memory,
        each a dict of (B, ...) arrays by field name."""
        outputs = self.encoder.run(
            list(self.names.encoder_outputs), {"src": src, "src_len": src_len}
        )
        memory = dict(zip(self.names.memory, outputs, strict=False))
        state = dict(zip(self.names.state, outputs[len(self.names.memory) :], strict=True))
        return state, memory

    def step(
        self, prev: np.ndarray, state: dict, memory: dict
    ) -> tuple[np.ndarray, dict, np.ndarray | None]:
        """One decoder step over N rows: log-probabilities (N, V), the new state, and alpha
        (N, T_src) or None. The graph reads only the fields it needs."""
        given = {"prev": prev, **state, **memory}
        names = self.names
        out = self.step_graph.run(list(names.step_outputs), {n: given[n] for n in self.takes})
        alpha = out[-1] if names.attention else None
        return out[0], dict(zip(names.state, out[1 : 1 + len(names.state)], strict=True)), alpha


def _read_manifest(path: Path) -> dict:
    """The manifest as a dict, or a ValueError naming the file: missing, not JSON, or of
    another export format."""
    if not path.is_file():
        raise ValueError(f"{path}: not found; `alignmt export RUN_DIR --out DIR` writes it")
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as bad:
        raise ValueError(f"{path}: not a readable manifest ({bad})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        found = body.get("format") if isinstance(body, dict) else None
        raise ValueError(
            f"{path}: export format {found!r}, but this alignmt reads format {FORMAT}; "
            "export the run again with this alignmt"
        )
    return body


def _session(path: Path, options: ort.SessionOptions) -> ort.InferenceSession:
    if not path.is_file():
        raise ValueError(f"{path}: not found; export the run again")
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as bad:  # ONNX Runtime raises its own types for a corrupt graph
        raise ValueError(f"{path}: not a readable ONNX graph ({str(bad)[:200]})") from None


@dataclass
class ArrayHypothesis:
    tokens: list[int]  # output ids; ends with </s> unless the length limit stopped it
    score: float  # summed log-probability
    token_scores: list[float]  # each token's log-probability
    attention: np.ndarray | None  # (len(tokens), src_len); None for vanilla


def onnx_search(
    model: OnnxModel,
    sentences: list[list[int]],
    search: SearchConfig,
    nbest: int = 1,
    check: Callable[[], None] | None = None,
) -> list[list[ArrayHypothesis]]:
    """Beam search (greedy for a beam of one) over one batch of id sequences ending in </s>,
    with `search`'s beam size, length penalty and length limit: each sentence's `nbest`
    best hypotheses, best first, ranked by score / lp as `search.beam_search` ranks them.
    `check` is called before every decoder step and stops the search by raising (a
    server's deadline)."""
    K, alpha = search.beam_size, search.length_penalty
    B = len(sentences)
    lengths = np.array([len(s) for s in sentences], dtype=np.int64)
    src = np.full((B, int(lengths.max())), model.manifest["pad_id"], dtype=np.int64)
    for b, ids in enumerate(sentences):
        src[b, : len(ids)] = ids
    state, memory = model.encode(src, lengths)
    rows = np.repeat(np.arange(B), K)  # sentence-major, K rows each
    state, memory = _rows(state, rows), _rows(memory, rows)
    beams = _Beams.start(B, K, model.bos_id, src.shape[1], model.names.attention)
    limit = max_output_len(lengths, search.max_len_ratio, search.max_len_offset)
    finished: list[list[tuple[float, ArrayHypothesis]]] = [[] for _ in range(B)]
    alive = np.arange(B)  # the sentences still searched, in the order of the rows
    for t in range(int(limit.max())):
        if check is not None:
            check()
        log_probs, state, weights = model.step(beams.last.reshape(-1), state, memory)
        ended, live = beams.extend(log_probs, weights, model.eos_id, t + 1 >= limit[alive])
        rank = ended.score / length_penalty(t + 1, alpha)
        for i, k in zip(*np.nonzero(ended.mask), strict=True):
            finished[alive[i]].append(
                (float(rank[i, k]), ended.hypothesis(i, k, lengths[alive[i]]))
            )
        state = _rows(state, live)
        done = np.array(
            [
                _stops(finished[b], beams.scores[i], t + 1, limit[b], K, nbest, alpha)
                for i, b in enumerate(alive)
            ]
        )
        if done.all():
            break
        keep = np.nonzero(~done)[0]
        alive = alive[keep]
        kept_rows = (keep[:, None] * K + np.arange(K)).reshape(-1)
        state, memory = _rows(state, kept_rows), _rows(memory, kept_rows)
        beams = beams.select(keep)
    return [[h for _, h in sorted(f, key=lambda x: -x[0])[:nbest]] for f in finished]


def _stops(finished, live_scores, length, limit, K, nbest, alpha) -> bool:
    """search.beam_search's stopping rule for one sentence."""
    if length >= limit or len(finished) >= K:
        return True
    if len(finished) < nbest:
        return False
    nth = sorted((r for r, _ in finished), reverse=True)[nbest - 1]
    return bool(cannot_improve(nth, float(live_scores.max()), length, limit, alpha))


def _rows(fields: dict, index: np.ndarray) -> dict:
    return {name: value[index] for name, value in fields.items()}


@dataclass
class _Ended:
    """The candidates of one step that end a hypothesis, and what tracing them back needs."""

    mask: np.ndarray  # (B_a, 2K) bool
    score: np.ndarray  # (B_a, 2K) summed log-probability
    tokens: np.ndarray  # (B_a, 2K, t) the whole output
    token_scores: np.ndarray  # (B_a, 2K, t)
    attention: np.ndarray | None  # (B_a, 2K, t, T_src)

    def hypothesis(self, i: int, k: int, src_len: int) -> ArrayHypothesis:
        attention = None if self.attention is None else self.attention[i, k, :, :src_len]
        token_scores = self.token_scores[i, k].tolist()
        return ArrayHypothesis(
            self.tokens[i, k].tolist(), float(self.score[i, k]), token_scores, attention
        )


@dataclass
class _Beams:
    """The K live beams of each searched sentence: (B_a, K, ...) arrays."""

    scores: np.ndarray  # (B_a, K) summed log-probabilities; -inf: not live yet
    last: np.ndarray  # (B_a, K) the last token (<s> before the first)
    tokens: np.ndarray  # (B_a, K, t) the outputs so far
    token_scores: np.ndarray  # (B_a, K, t)
    attention: np.ndarray | None  # (B_a, K, t, T_src)

    @classmethod
    def start(cls, B: int, K: int, bos_id: int, src_len: int, attends: bool) -> _Beams:
        scores = np.full((B, K), -np.inf, dtype=np.float32)
        scores[:, 0] = 0.0  # only beam 0 is live at first, or all K would extend <s> alike
        attention = np.zeros((B, K, 0, src_len), np.float32) if attends else None
        empty = np.zeros((B, K, 0), np.int64)
        return cls(scores, np.full((B, K), bos_id), empty, empty.astype(np.float32), attention)

    def extend(self, log_probs, weights, eos_id: int, at_limit) -> tuple[_Ended, np.ndarray]:
        """Each sentence's 2K best one-token extensions, best first: those among the K best
        that end (</s>, or any at the length limit), and the K best others live on.

        Args:
            log_probs: (B_a * K, V) the step's; weights: (B_a * K, T_src) or None.
            at_limit: (B_a,) bool, the sentences whose candidates reach their limit.

        Returns:
            The ended candidates, and the rows (B_a * K,) of the live beams' parents.
        """
        B, K = self.scores.shape
        V = log_probs.shape[1]
        total = (self.scores[:, :, None] + log_probs.reshape(B, K, V)).reshape(B, K * V)
        width = min(2 * K, K * V)
        best = np.argpartition(-total, width - 1, axis=1)[:, :width]
        scores = np.take_along_axis(total, best, 1)
        by_score = np.argsort(-scores, axis=1, kind="stable")
        best, scores = (
            np.take_along_axis(best, by_score, 1),
            np.take_along_axis(scores, by_score, 1),
        )
        parents, tokens = best // V, best % V  # (B, 2K), best first
        is_eos = tokens == eos_id
        among_best = np.arange(width)[None] < K
        ends = among_best & np.isfinite(scores) & (is_eos | at_limit[:, None])
        paths = self._paths(parents, tokens, log_probs.reshape(B, K, V), weights)
        live = np.argsort(is_eos, axis=1, kind="stable")[:, :K]  # the K best not </s>
        b = np.arange(B)[:, None]
        self.scores, self.last = scores[b, live], tokens[b, live]
        self.tokens, self.token_scores = paths[0][b, live], paths[1][b, live]
        self.attention = None if paths[2] is None else paths[2][b, live]
        rows = (b * K + parents[b, live]).reshape(-1)
        return _Ended(ends, scores, *paths), rows

    def _paths(self, parents, tokens, log_probs, weights):
        """Each candidate's whole output, token scores and attention: its parent's, then
        its own last token's."""
        B, K = self.scores.shape
        b = np.arange(B)[:, None]
        out = np.concatenate([self.tokens[b, parents], tokens[:, :, None]], axis=2)
        own = log_probs[b, parents, tokens]  # (B, 2K)
        token_scores = np.concatenate([self.token_scores[b, parents], own[:, :, None]], axis=2)
        attention = None
        if self.attention is not None:
            step = weights.reshape(B, K, -1)[b, parents]  # (B, 2K, T_src)
            attention = np.concatenate([self.attention[b, parents], step[:, :, None]], axis=2)
        return out, token_scores, attention

    def select(self, keep: np.ndarray) -> _Beams:
        attention = None if self.attention is None else self.attention[keep]
        kept = (self.scores, self.last, self.tokens, self.token_scores)
        return _Beams(*(x[keep] for x in kept), attention)


@dataclass
class RuntimeTranslation:
    """translator.Translation, with its attention in NumPy."""

    text: str
    tokens: list[str]
    src_tokens: list[str]
    score: float
    attention: np.ndarray | None
    probabilities: list[float]

    @property
    def alignment(self) -> str | None:
        return None if self.attention is None else hard_alignment(self.attention, self.tokens)


class OnnxTranslator:
    """An exported model with its tokenizers and vocabularies, translating raw text."""

    def __init__(self, model: OnnxModel, search: SearchConfig | None = None) -> None:
        self.model = model
        header = model.header
        self.src_tokenizer, self.tgt_tokenizer = header.src_tokenizer, header.tgt_tokenizer
        self.src_vocab, self.tgt_vocab = header.src_vocab, header.tgt_vocab
        self.search = search or header.config.search

    def source_tokens(self, line: str) -> list[str]:
        return self.src_tokenizer.encode(line) if line.strip() else []

    def translate(
        self, lines: Sequence[str], *, nbest: int = 1, batch_size: int = 64
    ) -> list[list[RuntimeTranslation]]:
        return self.translate_tokens(
            [self.source_tokens(line) for line in lines], nbest=nbest, batch_size=batch_size
        )

    def translate_tokens(
        self,
        tokens: list[list[str]],
        *,
        nbest: int = 1,
        batch_size: int = 64,
        warn: bool = True,
        beam_size: int | None = None,
        check: Callable[[], None] | None = None,
    ) -> list[list[RuntimeTranslation]]:
        """Translate tokenised sentences in batches sorted by length, with a beam of
        `beam_size` (None: the search's); a blank one gets one empty translation. `check`
        is called before every decoder step and stops the search by raising."""
        if warn:
            warn_unknown(tokens, self.src_vocab)
        search = self.search if beam_size is None else replace(self.search, beam_size=beam_size)
        todo = sorted((i for i, t in enumerate(tokens) if t), key=lambda i: len(tokens[i]))
        results: list[list[RuntimeTranslation]] = [[] for _ in tokens]
        for start in range(0, len(todo), batch_size):
            chunk = todo[start : start + batch_size]
            ids = [self.src_vocab.encode(tokens[i], add_eos=True) for i in chunk]
            found = onnx_search(self.model, ids, search, nbest, check)
            for i, hyps in zip(chunk, found, strict=True):
                results[i] = [self._translation(tokens[i], h) for h in hyps]
        empty = RuntimeTranslation("", [], [EOS], 0.0, None, [])
        return [r or [empty] * nbest for r in results]

    def output_limit(self, src_tokens: list[str]) -> int:
        """The most output tokens (</s> included) a sentence of these tokens may get."""
        return sentence_limit(len(src_tokens), self.search)

    def _translation(self, src_tokens: list[str], hyp: ArrayHypothesis) -> RuntimeTranslation:
        out = self.tgt_vocab.decode(hyp.tokens, strip_special=False)
        words = self.tgt_vocab.decode(hyp.tokens)
        if self.search.replace_unk and hyp.attention is not None:
            words = replace_unknown(words, src_tokens, hyp.attention)
        src = source_as_read(src_tokens, self.src_vocab)
        probabilities = [float(np.exp(s)) for s in hyp.token_scores]
        text = self.tgt_tokenizer.decode(words)
        return RuntimeTranslation(text, out, src, hyp.score, hyp.attention, probabilities)
