"""How well a trained model does a synthetic task, by source length.

Three numbers per length, on fresh strings of exactly that length:
- teacher-forced per-token accuracy: the decoder is fed the right previous token and we
  count how often its argmax is the right next one, over the string's characters (</s>
  excluded), which isolates "did it learn the alignment?";
- greedy exact match: free-running greedy decoding with real end-of-sequence handling; the
  output must equal the target and stop right after it;
- alignment: the share of those positions where the teacher-forced attention's argmax is
  the source position the character comes from (the anti-diagonal for reversal).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alignmt.decoding.search import decode
from alignmt.model.batch import Batch, make_batch
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.tasks import eval_set, source_positions
from alignmt.text.vocab import Vocab


@dataclass
class TaskScores:
    """How well a model does a task on strings of one length (see `score_task`)."""

    length: int  # source length of every string in the set
    token_accuracy: float  # teacher-forced, over the L characters
    exact_match: float  # greedy, the whole output including </s>
    alignment: float | None  # argmax alpha on the expected source position; None: vanilla


@torch.no_grad()
def score_task(
    model: Seq2Seq,
    vocab: Vocab,
    task: str,
    length: int,
    *,
    n: int = 500,
    seed: int = 1234,
    max_len_ratio: float = 2.0,
    max_len_offset: int = 10,
) -> TaskScores:
    """Score `model` on `n` fresh strings of exactly `length` characters.

    Args:
        model: the trained model (switched to eval mode here).
        vocab: its character vocabulary (source and target share it).
        task: "reverse", "copy" or "sort".
        length: source length.
        n: number of strings.
        seed: the evaluation seed (independent of the training seed's stream).
        max_len_ratio, max_len_offset: greedy decoding's length limit.
    """
    model.eval()
    pairs = eval_set(task, length, n, seed)
    device = next(model.parameters()).device
    batch = make_batch([(vocab.encode(s), vocab.encode(t)) for s, t in pairs], vocab, vocab)
    batch = batch.to(device)
    out = model(batch.src, batch.src_len, batch.tgt_in)
    predicted = out.logits[:, :length].argmax(dim=-1)  # (n, L)
    token_accuracy = (predicted == batch.tgt_out[:, :length]).float().mean().item()

    alignment = None
    if out.attention is not None:
        expected = torch.tensor([source_positions(task, s) for s, _ in pairs], device=device)
        attended = out.attention[:, :length].argmax(dim=-1)  # (n, L)
        alignment = (attended == expected).float().mean().item()

    return TaskScores(
        length, token_accuracy, exact_match(model, batch, max_len_ratio, max_len_offset), alignment
    )


def exact_match(model: Seq2Seq, batch: Batch, max_len_ratio: float, max_len_offset: int) -> float:
    """Share of greedy outputs equal to the reference y_1 .. y_n </s>."""
    hypotheses = decode(
        model, batch.src, batch.src_len, max_len_ratio=max_len_ratio, max_len_offset=max_len_offset
    )
    references = [
        row[:n].tolist() for row, n in zip(batch.tgt_out, batch.tgt_len.tolist(), strict=True)
    ]
    return sum(h.tokens == r for h, r in zip(hypotheses, references, strict=True)) / len(references)
