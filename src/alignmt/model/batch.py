"""Batches as tensors: padded id tensors of sentence pairs, as the model and the loss read them.

The special tokens are added here (</s> after the source, <s> before the decoder inputs), so
the ids that come in are plain `Vocab.encode` output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from alignmt.text.vocab import Vocab


@dataclass
class Batch:
    """Padded id tensors of a batch of sentence pairs (see the drawing above)."""

    src: Tensor  # (B, T_src) int64, source ids + </s>, padded with pad_id
    src_len: Tensor  # (B,) int64, real lengths including </s>
    tgt_in: Tensor  # (B, T_tgt) int64, <s> y_1 .. y_n   (decoder inputs)
    tgt_out: Tensor  # (B, T_tgt) int64, y_1 .. y_n </s>  (loss targets)
    tgt_len: Tensor  # (B,) int64, n + 1
    # (B, T_tgt, T_src) float32, each target token's word links as a distribution over the
    # source tokens (guided alignment); None without
    guide: Tensor | None = None

    @property
    def num_tgt_tokens(self) -> int:
        """Real target tokens in the batch, `</s>` included: the loss's denominator."""
        return int(self.tgt_len.sum())

    def to(self, device: torch.device | str) -> Batch:
        """The same batch with every tensor on `device`."""
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        return Batch(**{k: None if v is None else v.to(device) for k, v in moved.items()})

    def select(self, index: int | Sequence[int]) -> Batch:
        """The sub-batch of rows `index`, trimmed to its own longest source and target.

        Args:
            index: one row, or rows in the order wanted.

        Returns:
            A batch of `len(index)` rows (1 for an int); a row selected alone has no padding.
        """
        picked = [index] if isinstance(index, int) else list(index)
        if not picked:
            raise ValueError("index: selects no rows")
        rows = torch.tensor(picked, dtype=torch.int64, device=self.src.device)
        src_len, tgt_len = self.src_len[rows], self.tgt_len[rows]
        t_src, t_tgt = int(src_len.max()), int(tgt_len.max())
        return Batch(
            src=self.src[rows, :t_src],
            src_len=src_len,
            tgt_in=self.tgt_in[rows, :t_tgt],
            tgt_out=self.tgt_out[rows, :t_tgt],
            tgt_len=tgt_len,
            guide=None if self.guide is None else self.guide[rows, :t_tgt, :t_src],
        )


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int) -> Tensor:
    """Right-pad id sequences to the longest one.

    Args:
        seqs: B sequences of token ids.
        pad_id: the id that fills the gaps.

    Returns:
        (B, T_max) int64 tensor; (0, 0) for no sequences.
    """
    t_max = max((len(seq) for seq in seqs), default=0)
    # One torch.tensor call on nested lists: far cheaper than B small tensors copied in.
    # The reshape only matters for B == 0, where torch.tensor([]) would be (0,), not (0, 0).
    rows = [[*seq, *[pad_id] * (t_max - len(seq))] for seq in seqs]
    return torch.tensor(rows, dtype=torch.int64).reshape(len(seqs), t_max)


def source_batch(sentences: Sequence[Sequence[str]], vocab: Vocab) -> tuple[Tensor, Tensor]:
    """Tokenised source sentences as the model reads them, on the CPU: src (B, T_src), each
    row ending in </s> and right-padded, and src_len (B,) int64."""
    ids = [vocab.encode(sentence, add_eos=True) for sentence in sentences]
    return pad_sequences(ids, vocab.pad_id), torch.tensor([len(row) for row in ids])


def make_batch(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    vocab_src: Vocab,
    vocab_tgt: Vocab,
    *,
    copied: bool = False,
) -> Batch:
    """Add the specials to encoded sentence pairs and pad them into a `Batch`.

    Args:
        pairs: B (source ids, target ids) pairs, encoded without specials (`<unk>` is fine).
            An empty source is allowed: it becomes just `</s>`.
        vocab_src: the source vocabulary, for its specials and range of ids.
        vocab_tgt: the target vocabulary, likewise.
        copied: the ids are a copying model's (alignmt.text.copy): each side's may go past
            its vocabulary by less than the source's length.

    Returns:
        The batch, on the CPU.
    """
    if not pairs:
        raise ValueError("pairs: empty; a batch needs at least one sentence pair")
    for row, (src, tgt) in enumerate(pairs):
        extended = len(src) if copied else 0
        _check_ids(src, vocab_src, f"pairs[{row}] source", extended)
        _check_ids(tgt, vocab_tgt, f"pairs[{row}] target", extended)
    src = [[*s, vocab_src.eos_id] for s, _ in pairs]
    tgt_in = [[vocab_tgt.bos_id, *t] for _, t in pairs]
    tgt_out = [[*t, vocab_tgt.eos_id] for _, t in pairs]
    return Batch(
        src=pad_sequences(src, vocab_src.pad_id),
        src_len=torch.tensor([len(s) for s in src], dtype=torch.int64),
        tgt_in=pad_sequences(tgt_in, vocab_tgt.pad_id),
        tgt_out=pad_sequences(tgt_out, vocab_tgt.pad_id),
        tgt_len=torch.tensor([len(t) for t in tgt_out], dtype=torch.int64),
    )


def _check_ids(ids: Sequence[int], vocab: Vocab, what: str, extended: int = 0) -> None:
    # A <pad>, <s> or </s> already present is the usual bug of encoding with add_eos=True
    # and then batching; an id past the vocabulary would fail much later, in the embedding.
    reserved = (vocab.pad_id, vocab.bos_id, vocab.eos_id)
    bad = [i for i in ids if i in reserved or not 0 <= i < len(vocab) + extended]
    if bad:
        raise ValueError(f"{what}: ids {bad} are specials or outside the vocabulary")


def guide_matrix(links: Sequence[Sequence[tuple[int, int]]], batch: Batch) -> Tensor:
    """Each target token's links as a distribution over the source tokens, for guided
    alignment's loss.

    Args:
        links: each pair's (source token, target token) links, 0-based, specials not
            counted: target token t is y_{t+1}, the output of decoder step t.
        batch: the pairs' batch, for its shape.

    Returns:
        (B, T_tgt, T_src) float32: 1 / |links of t| at each source token linked to t; rows
        of tokens without links (and of </s> and padding) all zeros.
    """
    index = [(b, t, s) for b, pairs in enumerate(links) for s, t in pairs]
    guide = torch.zeros(*batch.tgt_out.shape, batch.src.size(1))  # (B, T_tgt, T_src)
    if index:
        guide[tuple(torch.tensor(index).T)] = 1.0
    return guide / guide.sum(dim=-1, keepdim=True).clamp_min(1.0)
