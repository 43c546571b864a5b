"""Teacher-forced attention and erasure on any engine: for sentence pairs (source ids, output
ids), the attention each output token's step gave the source while the decoder read the
given output, the explorer's what-if over them, and the log-probability each output token
loses when one source word's embedding is erased. Written once, in NumPy, over an engine's
`encode` and `step` (which takes the what-if's move as `steer`), so that the flax and
onnxruntime engines answer `Engine.relevance`'s "attention" and "shift" and `Engine.flips`
(and ONNX Runtime, which has no gradients, "erasure") as the torch engine does in its own
relevance.py (whose docstring says what each is, after Chen et al. 2020, Jain & Wallace 2019
and Li, Monroe & Jurafsky 2016). Nothing here imports a framework.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from alignmt.decoding.engine import Engine, Pairs


def pair_attention(
    engine: Engine, pairs: Pairs, *, shift: bool, batch_size: int = 64
) -> list[np.ndarray]:
    """Each pair's teacher-forced attention, in input order: (len(output) + 1,
    len(source) + 1) float32, </s> last on both sides. With `shift`, row i is the attention
    of the step that reads output token i (shift-att), and </s> keeps its own step's."""
    if not engine.has_attention:
        raise ValueError("the model has no attention to read (model.attention=none)")
    found: list[np.ndarray] = [np.zeros(0)] * len(pairs)
    for rows, srcs, outs in _batches(engine, pairs, batch_size):
        encoded = engine.encode(srcs)
        attention = np.stack(
            [alpha for _, alpha in _forced_steps(engine, encoded, outs)], axis=1
        )  # (B, T_out, T)
        for b, k in enumerate(rows):
            own = attention[b, : len(outs[b]), : len(srcs[b])]
            found[k] = (np.concatenate([own[1:], own[-1:]]) if shift else own).astype(np.float32)
    return found


def pair_flips(engine: Engine, pairs: Pairs, *, batch_size: int = 64) -> tuple[int, int]:
    """Teacher-force each pair's output (the model's own, for the explorer's question) and
    take each step again with all of its attention on the source word its attention ranks
    second (</s> set aside): how many steps then pick another word than they did, of how
    many steps tried (those whose source has two words or more to move between)."""
    if not engine.has_attention:
        raise ValueError("the model has no attention to move (model.attention=none)")
    flipped = tried = 0
    for _, srcs, outs in _batches(engine, pairs, batch_size):
        words = np.array([len(s) - 1 for s in srcs])  # (B,) without </s>
        width = max(len(s) for s in srcs)
        real = np.arange(width) < words[:, None]  # (B, T_src)
        for t, (log_probs, alpha, prev, state, memory) in enumerate(
            _forced_steps(engine, engine.encode(srcs), outs, keep=True)
        ):
            weights = np.where(real, alpha[:, :width], -np.inf)
            second = np.argsort(-weights, axis=1, kind="stable")[:, 1]  # (B,)
            moved, _, _ = engine.step(prev, state, memory, np.eye(width, dtype=np.float32)[second])
            counted = (t < np.array([len(o) for o in outs])) & (words >= 2)
            changed = moved.argmax(axis=1) != log_probs.argmax(axis=1)
            flipped += int((changed & counted).sum())
            tried += int(counted.sum())
    return flipped, tried


def _batches(
    engine: Engine, pairs: Pairs, batch_size: int
) -> Iterator[tuple[list[int], list[list[int]], list[list[int]]]]:
    """(the pairs' indices, their sources and outputs, each ending in </s>), `batch_size` at a
    time, in order of length: sorting first keeps padding, and so wasted work, small."""
    order = sorted(range(len(pairs)), key=lambda k: (len(pairs[k][0]), len(pairs[k][1])))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        srcs = [[*pairs[k][0], engine.eos_id] for k in rows]
        outs = [[*pairs[k][1], engine.eos_id] for k in rows]
        yield rows, srcs, outs


def pair_erasure(engine: Engine, pairs: Pairs, *, batch_size: int = 64) -> list[np.ndarray]:
    """Each pair's erasure, in input order: f_i(x) - f_i(x with x_j = 0), the teacher-forced
    log-probability of output token i lost when source token j's embedding is erased (Li,
    Monroe & Jurafsky 2016), (len(output) + 1, len(source) + 1) float32; one teacher-forced
    pass per source position, over the engine's `encode_erased` and `step`."""
    found: list[np.ndarray] = [np.zeros(0)] * len(pairs)
    for rows, srcs, outs in _batches(engine, pairs, batch_size):
        full = _forced_log_probs(engine, engine.encode(srcs), outs)  # (B, T_out)
        width = max(len(s) for s in srcs)
        columns = [
            full - _forced_log_probs(engine, engine.encode_erased(srcs, j), outs)
            for j in range(width)
        ]
        scores = np.stack(columns, axis=-1)  # (B, T_out, T_src)
        for b, k in enumerate(rows):
            found[k] = scores[b, : len(outs[b]), : len(srcs[b])].astype(np.float32)
    return found


def _forced_log_probs(engine: Engine, encoded: tuple, outs: list[list[int]]) -> np.ndarray:
    """(B, T_out) the teacher-forced log-probability of each output token (</s> after a
    finished output, ignored)."""
    columns = []
    for t, (log_probs, _) in enumerate(_forced_steps(engine, encoded, outs)):
        wanted = [o[t] if t < len(o) else engine.eos_id for o in outs]  # (B,)
        columns.append(log_probs[np.arange(len(outs)), wanted])
    return np.stack(columns, axis=1)


def _forced_steps(engine: Engine, encoded: tuple, outs: list[list[int]], keep: bool = False):
    """The decoder from the sources' `encoded` first state and memory, reading <s> and then
    each output's tokens: at each step, (log-probabilities (B, V), alpha (B, T)); with
    `keep`, also the step's input, state and memory, (log_probs, alpha, prev, state,
    memory). A finished output reads </s> on."""
    state, memory = encoded
    prev = np.full(len(outs), engine.bos_id, np.int64)
    for t in range(max(len(o) for o in outs)):
        log_probs, after, alpha = engine.step(prev, state, memory)
        yield (log_probs, alpha, prev, state, memory) if keep else (log_probs, alpha)
        state = after
        prev = np.array([o[t] if t < len(o) else engine.eos_id for o in outs], np.int64)
