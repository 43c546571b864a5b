"""The search contract, as data: golden cases that the float64 reference search
(`alignmt.reference.search`) writes, and that every search must reproduce, whatever its
language: the torch engine's, the Flax engine's, the ONNX Runtime engine's NumPy search and
the browser worker's JavaScript (tests/test_search_cases.py runs all four).

    python -m tests.search_cases        # writes tests/data/search_cases.json

A model is a table here: a trie of output prefixes, one node per prefix the reference
search asked about, holding the next token's log-probabilities (V,) and the step's attention
(T_src,). A step maps a row's node and its previous token to the next node (`children`);
the first step, whose previous token is <s>, reads the sentence's root. A prefix the table
lacks (a row that runs on past its sentence's stop, as Flax's do) reads node 0, whose
children are itself.

Values are multiples of 2^-16 of at most a few hundred, so that float32 holds them and every
sum of them exactly: the n-best, their scores and their token log-probabilities are the
same bits in every language. Each case names its search (beam size, n-best, length penalty,
the length limit's ratio and offset, the sentences searched at once), and for each sentence
its source (its first id names it; its length sets its limit) and what the search finds:
the n-best (tokens, summed log-probability, token log-probabilities, attention rows) and the
step it stopped at.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from alignmt import reference as ref
from alignmt.decoding.rules import max_output_len

PATH = Path(__file__).parent / "data" / "search_cases.json"
PAD, BOS, EOS, VOCAB = 0, 1, 2, 10  # ids 3..9 are words
FIRST = 100  # sentence i's source starts with id FIRST + i
IMPOSSIBLE = -1e4  # the log-probability of <pad> and <s>, never chosen
QUANTUM = 2.0**-16


@dataclass(frozen=True)
class Case:
    """One golden case's search settings and sentence lengths."""

    name: str
    beam_size: int
    nbest: int
    length_penalty: float
    width: int  # sentences searched at once
    sources: tuple[int, ...]  # each sentence's source length, </s> included
    max_len_ratio: float = 1.0
    max_len_offset: int = 2
    eos_bias: float = 0.0  # added to </s>: > 0 ends outputs early


SEARCHES = [
    Case("greedy", 1, 1, 0.0, width=2, sources=(4, 2, 6, 3, 5)),
    Case("greedy-ended-rows", 1, 1, 0.0, width=3, sources=(3, 5, 2, 6, 4, 3, 2), eos_bias=1.0),
    Case("beam-3", 3, 1, 0.0, width=2, sources=(4, 3, 5, 2, 6)),
    Case("beam-4-length-penalty-nbest-3", 4, 3, 0.6, width=2, sources=(5, 3, 6, 4, 2)),
    Case("beam-5-nbest-5", 5, 5, 1.0, width=3, sources=(4, 6, 3, 5)),
    Case("beam-4-ended-rows", 4, 2, 0.6, width=2, sources=(3, 6, 2, 5, 4, 3), eos_bias=0.8),
    Case("beam-3-max-length", 3, 2, 0.0, width=2, sources=(2, 4, 3), max_len_offset=0),
    Case("beam-2-limit-of-one", 2, 2, 0.0, width=2, sources=(2, 3), max_len_ratio=0.4,
         max_len_offset=0),
]  # fmt: skip


@dataclass
class Table:
    """The trie the reference search grew, node 0 being the default node."""

    t_src: int
    log_probs: list[list[float]] = field(default_factory=lambda: [[IMPOSSIBLE] * VOCAB])
    attention: list[list[float]] = field(default_factory=list)
    children: list[list[int]] = field(default_factory=lambda: [[0] * VOCAB])

    def __post_init__(self) -> None:
        self.attention.append([0.0] * self.t_src)

    def add(self, log_probs: list[float], attention: list[float]) -> int:
        self.log_probs.append(log_probs)
        self.attention.append(attention + [0.0] * (self.t_src - len(attention)))
        self.children.append([0] * VOCAB)
        return len(self.log_probs) - 1


def quantised(x: float) -> float:
    return round(x / QUANTUM) * QUANTUM


def sentence_model(table: Table, draw: random.Random, length: int, eos_bias: float):
    """A lazily grown node per prefix for one sentence: (log_probs(prefix), node(prefix))."""
    nodes: dict[tuple[int, ...], int] = {}

    def node(prefix: tuple[int, ...]) -> int:
        if prefix not in nodes:
            # </s> likelier as the output nears the source's length
            eos = -abs(len(prefix) + 1 - length) * 0.8 + eos_bias - draw.uniform(0, 1.5)
            words = [-draw.uniform(0.2, 4.0) for _ in range(3, VOCAB)]
            log_probs = [IMPOSSIBLE, IMPOSSIBLE, quantised(min(eos, -0.05))]
            log_probs += [quantised(w) for w in words]
            weights = [draw.random() for _ in range(length)]
            attention = [quantised(w / sum(weights)) for w in weights]
            nodes[prefix] = table.add(log_probs, attention)
            if prefix:
                table.children[nodes[prefix[:-1]]][prefix[-1]] = nodes[prefix]
        return nodes[prefix]

    return (lambda prefix: np.array(table.log_probs[node(prefix)])), node


def hypothesis(table: Table, node, tokens: list[int], score: float) -> dict:
    path = [node(tuple(tokens[:i])) for i in range(len(tokens))]
    return {
        "tokens": tokens,
        "score": score,
        "token_scores": [table.log_probs[n][t] for n, t in zip(path, tokens, strict=True)],
        "attention": [table.attention[n] for n in path],
    }


def written(search: Case, seed: int) -> dict:
    """One search's case: its settings, table, sentences and what the reference finds."""
    draw = random.Random(seed)
    table = Table(t_src=max(search.sources))
    sentences, roots, expected = [], [], []
    limits = max_output_len(search.sources, search.max_len_ratio, search.max_len_offset)
    for i, (length, limit) in enumerate(zip(search.sources, limits.tolist(), strict=True)):
        log_probs, node = sentence_model(table, draw, length, search.eos_bias)
        roots.append(node(()))
        found = ref.search(
            log_probs,
            eos=EOS,
            beam_size=search.beam_size,
            max_len=limit,
            nbest=search.nbest,
            alpha=search.length_penalty,
        )
        sentences.append([FIRST + i] + [3] * (length - 2) + [EOS])
        outputs = [hypothesis(table, node, tokens, score) for tokens, score in found.outputs]
        expected.append({"limit": limit, "steps": found.steps, "hypotheses": outputs})
    return {
        "name": search.name,
        "beam_size": search.beam_size,
        "nbest": search.nbest,
        "length_penalty": search.length_penalty,
        "max_len_ratio": search.max_len_ratio,
        "max_len_offset": search.max_len_offset,
        "width": search.width,
        "sources": sentences,
        "roots": roots,
        "log_probs": table.log_probs,
        "attention": table.attention,
        "children": table.children,
        "expected": expected,
    }


def cases() -> dict:
    return {
        "pad": PAD,
        "bos": BOS,
        "eos": EOS,
        "vocab": VOCAB,
        "first": FIRST,
        "cases": [written(search, seed) for seed, search in enumerate(SEARCHES)],
    }


def text() -> str:
    return json.dumps(cases(), separators=(",", ":")) + "\n"


if __name__ == "__main__":
    PATH.write_text(text())
    print(f"wrote {PATH}: {len(SEARCHES)} searches")
