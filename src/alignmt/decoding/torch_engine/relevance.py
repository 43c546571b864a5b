"""Teacher-forced relevance and the what-if, in PyTorch: what the torch engine answers for
`Engine.relevance` and `Engine.flips` (analysis/attribution.py and explanation.py ask them of
any engine; this engine alone answers every method). For each output token, how much each
source token moved it; the model's teacher-forced log-probability f_i = log p(y_i | y_<i, x)
of each output token, and each source token j, whose embedding x_j (E,) feeds the encoder:

- "attention": alpha_ij itself, the weight of source j at the step that wrote y_i.
- "shift": alpha_{i+1,j}, the attention of the step that reads y_i as its input (Chen et
  al. 2020, "shift-att"): the step after writing a word is often the one that looks at its
  source. The last token, </s>, keeps its own step's weights.
- "gradient": |x_j . df_i/dx_j|, gradient times input (Shrikumar et al. 2016; Denil et al.
  2014 for text).
- "integrated": |sum_e IG_je|, integrated gradients (Sundararajan et al. 2017) from a source
  whose embeddings are all zero, the path approximated with `steps` points.
- "erasure": f_i(x) - f_i(x with x_j = 0), the log-probability lost when one word's embedding
  is erased (Li, Monroe & Jurafsky 2016). Positive: the word helped; negative: it hindered.

Gradient times input and integrated gradients come from Captum (`LayerGradientXActivation`,
`LayerIntegratedGradients` on the encoder's embedding layer), the attribution library of the
PyTorch project: one forward function, f_i for a chosen i, serves both. Erasure is written
here: erasing word j changes every f_i at once, so one teacher-forced pass per erased word
gives a whole column of the matrix, where Captum's ablation would run one per (i, j).

`counterfactual_flips` is the explorer's what-if over a set of sentences: how often moving a
step's attention to its second-ranked word changes the word the step writes (Jain & Wallace
2019, §4.2, ask it of adversarial attention). Pairs go in sorted by length, a batch at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch
from captum.attr import LayerGradientXActivation, LayerIntegratedGradients
from torch import Tensor

from alignmt.decoding.engine import METHODS, Method, Pairs
from alignmt.model.batch import Batch, make_batch
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.vocab import Vocab


def pair_relevance(
    model: Seq2Seq,
    pairs: Pairs,
    vocabs: tuple[Vocab, Vocab],
    method: Method,
    *,
    batch_size: int = 64,
    steps: int = 16,
) -> list[np.ndarray]:
    """`relevance` of each (source ids, output ids) pair (without specials), in input order:
    (len(output) + 1, len(source) + 1) float32, </s> last on both sides."""
    found: list[np.ndarray] = [np.zeros(0)] * len(pairs)
    for rows, batch in sorted_batches(model, pairs, vocabs, batch_size):
        scores = relevance(model, batch, method, steps=steps).cpu().numpy()
        lengths = zip(rows, batch.tgt_len.tolist(), batch.src_len.tolist(), strict=True)
        for b, (k, m, n) in enumerate(lengths):
            found[k] = scores[b, :m, :n]
    return found


def pair_flips(model: Seq2Seq, pairs: Pairs, vocabs: tuple[Vocab, Vocab], batch_size: int):
    """`counterfactual_flips` summed over the pairs: (steps whose word changed, steps tried)."""
    flipped = tried = 0
    for _, batch in sorted_batches(model, pairs, vocabs, batch_size):
        changed, steps = counterfactual_flips(model, batch)
        flipped, tried = flipped + changed, tried + steps
    return flipped, tried


def sorted_batches(
    model: Seq2Seq, pairs: Pairs, vocabs: tuple[Vocab, Vocab], batch_size: int
) -> Iterator[tuple[list[int], Batch]]:
    """(the pairs' indices, their batch on the model's device), `batch_size` pairs at a time,
    in order of length: sorting first keeps padding, and so wasted work, small."""
    device = next(model.parameters()).device
    order = sorted(range(len(pairs)), key=lambda k: (len(pairs[k][0]), len(pairs[k][1])))
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batch = make_batch([pairs[k] for k in rows], *vocabs, copied=model.copies)
        yield rows, batch.to(device)


def relevance(model: Seq2Seq, batch: Batch, method: Method, *, steps: int = 16) -> Tensor:
    """How much each source token moved each target token of a teacher-forced batch.

    Args:
        model: an attention model for "attention" and "shift", any model for the others;
            put in eval mode here.
        batch: the sentence pairs; the targets are tgt_out's tokens.
        method: one of METHODS (see the module's docstring).
        steps: points on integrated gradients' path.

    Returns:
        (B, T_tgt, T_src) float32 on the batch's device, 0 where either side is padding.
    """
    if method not in METHODS:
        raise ValueError(f"unknown attribution {method!r}; choose one of {', '.join(METHODS)}")
    model.eval()
    if method in ("attention", "shift"):
        scores = _attention(model, batch, shift=method == "shift")
    elif method == "erasure":
        scores = _erasure(model, batch)
    else:
        scores = _captum(model, batch, integrated=method == "integrated", steps=steps)
    real_src = torch.arange(batch.src.size(1), device=batch.src.device) < batch.src_len[:, None]
    real_tgt = batch.tgt_out != model.pad_id  # (B, T_tgt)
    real = real_tgt[:, :, None] & real_src[:, None, :]
    return torch.where(real, scores.float(), 0.0)


@torch.no_grad()
def _attention(model: Seq2Seq, batch: Batch, *, shift: bool) -> Tensor:
    if not model.has_attention:
        raise ValueError("the model has no attention to read (model.attention=none)")
    attention = model(batch.src, batch.src_len, batch.tgt_in).attention  # (B, T_tgt, T_src)
    if not shift:
        return attention
    # row i from step i + 1; each sentence's last real row (</s>) keeps its own
    shifted = torch.cat([attention[:, 1:], attention[:, -1:]], dim=1)
    last = (batch.tgt_len - 1)[:, None, None].expand(-1, 1, attention.size(2))
    return shifted.scatter(1, last, attention.gather(1, last))


def _log_probs(model: Seq2Seq, src: Tensor, src_len: Tensor, tgt_in: Tensor, tgt_out: Tensor):
    """(B, T_tgt) teacher-forced log p(y_i | y_<i, x) of the target tokens tgt_out."""
    log_probs = model(src, src_len, tgt_in).log_probs.float().full()  # (B, T_tgt, V)
    return log_probs.gather(-1, tgt_out[..., None])[..., 0]


def _token_log_prob(model: Seq2Seq) -> Callable[..., Tensor]:
    """Captum's forward function: (src, src_len, tgt_in, tgt_out, i) -> (B,) f_i. Captum
    repeats the tensors along their first axis for integrated gradients' path; i stays."""
    return lambda src, src_len, tgt_in, tgt_out, i: _log_probs(
        model, src, src_len, tgt_in, tgt_out
    )[:, i]


def _captum(model: Seq2Seq, batch: Batch, *, integrated: bool, steps: int) -> Tensor:
    """|sum over the embedding of the attribution to x_j|, for each target position i."""
    layer = model.encoder.embed
    forward = _token_log_prob(model)
    kind = LayerIntegratedGradients if integrated else LayerGradientXActivation
    method = kind(forward, layer)
    rows = []
    with _rnn_backward_in_eval_mode(batch.src.device):
        for i in range(batch.tgt_out.size(1)):
            extra = (batch.src_len, batch.tgt_in, batch.tgt_out, i)
            if integrated:
                # the baseline source: padding ids, whose embedding is the zero vector
                baseline = torch.full_like(batch.src, model.pad_id)
                found = method.attribute(
                    batch.src,
                    baselines=baseline,
                    additional_forward_args=extra,
                    n_steps=steps,
                    internal_batch_size=len(batch.src) * steps,
                )
            else:
                found = method.attribute(batch.src, additional_forward_args=extra)
            rows.append(found.sum(-1).abs().detach())  # (B, T_src)
    return torch.stack(rows, dim=1)


@torch.no_grad()
def _erasure(model: Seq2Seq, batch: Batch) -> Tensor:
    """f_i(x) - f_i(x without word j), one pass per source position over the whole batch."""
    tensors = (batch.src, batch.src_len, batch.tgt_in, batch.tgt_out)
    full = _log_probs(model, *tensors)  # (B, T_tgt)
    columns = []
    for j in range(batch.src.size(1)):
        with _erased(model, j):
            columns.append(full - _log_probs(model, *tensors))
    return torch.stack(columns, dim=-1)  # (B, T_tgt, T_src)


@contextmanager
def _erased(model: Seq2Seq, j: int):
    """The encoder reads a zero embedding at source position j."""

    def hook(module, inputs, output: Tensor) -> Tensor:
        output = output.clone()
        output[:, j] = 0.0
        return output

    handle = model.encoder.embed.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def _rnn_backward_in_eval_mode(device: torch.device):
    """cuDNN's RNNs refuse a backward pass in eval mode; attribution needs one without
    dropout, so on CUDA the RNNs run on PyTorch's own kernels."""
    if device.type != "cuda":
        yield
        return
    with torch.backends.cudnn.flags(enabled=False):
        yield


@torch.no_grad()
def counterfactual_flips(model: Seq2Seq, batch: Batch) -> tuple[int, int]:
    """Teacher-force the batch's targets (the model's own output, for the explorer's
    question) and decode each step again with all of its attention on the source word its
    attention ranks second (</s> set aside): how many steps then pick another word than
    they did.

    Returns:
        (steps whose word changed, steps tried); a step is tried where its source has two
        words or more to move between.
    """
    if not model.has_attention:
        raise ValueError("the model has no attention to move (model.attention=none)")
    model.eval()
    memory, state = model.encode(batch.src, batch.src_len)
    columns = torch.arange(batch.src.size(1), device=batch.src.device)
    real = columns < (batch.src_len - 1)[:, None]  # (B, T_src) words, not </s>
    flipped = tried = 0
    for t in range(batch.tgt_in.size(1)):
        prev = batch.tgt_in[:, t]
        log_probs, after, alpha = model.decode_step(prev, state, memory)
        second = alpha.masked_fill(~real, float("-inf")).topk(2, dim=-1).indices[:, 1]  # (B,)
        steer = torch.nn.functional.one_hot(second, batch.src.size(1)).to(alpha.dtype)
        moved, _, _ = model.decode_step(prev, state, memory._replace(steer=steer))
        counted = (batch.tgt_out[:, t] != model.pad_id) & (real.sum(-1) >= 2)  # (B,)
        changed = moved.scores.argmax(-1) != log_probs.scores.argmax(-1)
        flipped += int((changed & counted).sum())
        tried += int(counted.sum())
        state = after
    return flipped, tried
