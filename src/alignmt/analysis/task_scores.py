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
from torch import Tensor

from alignmt.analysis.align import AlignmentScore, alignment_error_rate
from alignmt.decoding.torch_engine.search import decode
from alignmt.model.batch import Batch, make_batch
from alignmt.model.decoder import DecoderOutput
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.links import Link
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
    pairs = eval_set(task, length, n, seed)
    batch, out = _teacher_forced(model, vocab, pairs)
    predicted = out.log_probs.scores[:, :length].argmax(dim=-1)  # (n, L)
    token_accuracy = (predicted == batch.tgt_out[:, :length]).float().mean().item()
    alignment = None
    if out.attention is not None:  # one link each side per character: recall is the share
        score = alignment_error_rate(argmax_links(out.attention, length), gold_links(task, pairs))
        alignment = score.recall
    return TaskScores(
        length, token_accuracy, exact_match(model, batch, max_len_ratio, max_len_offset), alignment
    )


@torch.no_grad()
def alignment_score(
    model: Seq2Seq, vocab: Vocab, task: str, lengths: tuple[int, ...], n: int, seed: int
) -> AlignmentScore:
    """Precision, recall and AER (Och & Ney 2003) of the teacher-forced argmax α against the
    gold alignment: each output character's one sure link to the source position it comes
    from (`</s>` left out on both sides). With one link per character on both sides,
    precision = recall = 1 - AER = the share of positions whose argmax is the right one.

    Args:
        model: a model with attention.
        vocab: its character vocabulary (source and target share it).
        task: "reverse", "copy" or "sort".
        lengths: source lengths; `n` evaluation strings of each.
        n: strings per length.
        seed: the evaluation seed.
    """
    hyps: list[set[Link]] = []
    sures: list[set[Link]] = []
    for length in lengths:
        pairs = eval_set(task, length, n, seed)
        hyps += argmax_links(_teacher_forced(model, vocab, pairs)[1].attention, length)
        sures += gold_links(task, pairs)
    return alignment_error_rate(hyps, sures)


def argmax_links(attention: Tensor, length: int) -> list[set[Link]]:
    """Each sentence's links (source, output) from the argmax α of its first `length` outputs.

    Args:
        attention: (n, T_tgt, T_src) teacher-forced attention weights.
        length: output characters to link (the target's </s> is left out).
    """
    attended = attention[:, :length].argmax(dim=-1).tolist()  # (n, L)
    # α_ij: output i attends to source j; a link is (source, output), as Pharaoh's
    return [{(j, i) for i, j in enumerate(row)} for row in attended]


def gold_links(task: str, pairs: list[tuple[str, str]]) -> list[set[Link]]:
    """Each pair's exact alignment: output character i comes from `source_positions`[i]."""
    return [{(j, i) for i, j in enumerate(source_positions(task, src))} for src, _ in pairs]


def _teacher_forced(
    model: Seq2Seq, vocab: Vocab, pairs: list[tuple[str, str]]
) -> tuple[Batch, DecoderOutput]:
    model.eval()
    device = next(model.parameters()).device
    batch = make_batch([(vocab.encode(s), vocab.encode(t)) for s, t in pairs], vocab, vocab)
    batch = batch.to(device)
    return batch, model(batch.src, batch.src_len, batch.tgt_in)


def exact_match(model: Seq2Seq, batch: Batch, max_len_ratio: float, max_len_offset: int) -> float:
    """Share of greedy outputs equal to the reference y_1 .. y_n </s>."""
    hypotheses = decode(
        model, batch.src, batch.src_len, max_len_ratio=max_len_ratio, max_len_offset=max_len_offset
    )
    references = [
        row[:n].tolist() for row, n in zip(batch.tgt_out, batch.tgt_len.tolist(), strict=True)
    ]
    return sum(h.tokens == r for h, r in zip(hypotheses, references, strict=True)) / len(references)
