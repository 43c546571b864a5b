"""Text to tensors: the vocabulary, corpus splits as token ids, bucketing and padding.

Owns the special tokens and their ids, `Vocab` (stored inside checkpoints as JSON), finding
a corpus split on disk (`read_split`, `stream_split`), length-bucketed batch order, and
`Batch`, the padded id tensors the model and the loss consume. Reading files line by line is
`corpus`'s and cutting sentences into tokens is `tokenize`'s; the synthetic tasks are
`tasks`', building the training split's id arrays is `prepare`'s, and the loss is `train`'s.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from alignmt.corpus import CorpusError, Pair, PairStream, read_stream, stream_parallel, stream_tsv

log = logging.getLogger(__name__)

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)

# --- Tokenisation -------------------------------------------------------------------------


def char_tokenize(text: str) -> list[str]:
    """The characters of `text`, the tokens of the synthetic tasks."""
    return list(text)


def char_detokenize(tokens: Iterable[str]) -> str:
    """Inverse of `char_tokenize`."""
    return "".join(tokens)


# --- Vocabulary ---------------------------------------------------------------------------


class Vocab:
    """Maps tokens to ids: the specials at fixed ids 0-3, then the given tokens in order.

    `itos` (list) and `stoi` (dict) are the two directions; treat them as read-only.
    """

    pad_id, bos_id, eos_id, unk_id = range(len(SPECIALS))

    def __init__(self, tokens: Iterable[str]) -> None:
        self.itos = [*SPECIALS, *tokens]
        self.stoi = {token: i for i, token in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            repeated = sorted(t for t, c in Counter(self.itos).items() if c > 1)
            raise ValueError(f"tokens: duplicates or special tokens {repeated}")

    @classmethod
    def build(
        cls, sequences: Iterable[Sequence[str]], min_freq: int = 1, max_size: int | None = None
    ) -> Vocab:
        """The vocabulary of a corpus, most frequent tokens first.

        Args:
            sequences: tokenised sentences. Special tokens in them are skipped: they already
                have their ids.
            min_freq: tokens seen fewer times are left out (they encode as `<unk>`).
            max_size: at most this many tokens besides the four specials; None: no limit.

        Returns:
            The vocabulary, ordered by frequency descending, then token, so that the same
            corpus always gives the same ids.
        """
        return cls.from_counts(
            Counter(token for seq in sequences for token in seq), min_freq, max_size
        )

    @classmethod
    def from_counts(
        cls, counts: Mapping[str, int], min_freq: int = 1, max_size: int | None = None
    ) -> Vocab:
        """The vocabulary of tokens counted in a corpus: `build` for counts made elsewhere.

        Args:
            counts: occurrences of each token; special tokens among them are skipped.
            min_freq, max_size: as for `build`.

        Returns:
            The vocabulary, ordered by count descending, then token.
        """
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        ranked = sorted(
            (t for t, c in counts.items() if c >= min_freq and t not in SPECIALS),
            key=lambda t: (-counts[t], t),
        )
        return cls(ranked[:max_size])

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocab):
            return NotImplemented
        return self.itos == other.itos

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)})"

    def encode(self, tokens: Sequence[str], *, add_eos: bool = False) -> list[int]:
        """Ids of `tokens`, unknown tokens as `unk_id`, optionally followed by `eos_id`."""
        ids = [self.stoi.get(token, self.unk_id) for token in tokens]
        return [*ids, self.eos_id] if add_eos else ids

    def decode(self, ids: Iterable[int], *, strip_special: bool = True) -> list[str]:
        """Tokens of `ids`.

        Args:
            ids: token ids (ints, or the elements of a 1-D tensor).
            strip_special: stop at the first `</s>` and drop `<pad>` and `<s>`; `<unk>` is
                kept, since it stands for a real token. False: every id, as is.

        Returns:
            The tokens.
        """
        tokens = []
        for i in map(int, ids):
            # Checked because a negative id would silently index from the end.
            if not 0 <= i < len(self.itos):
                raise ValueError(f"ids: {i} is outside the vocabulary of size {len(self)}")
            if strip_special and i == self.eos_id:
                break
            if not (strip_special and i in (self.pad_id, self.bos_id)):
                tokens.append(self.itos[i])
        return tokens

    def to_json(self) -> str:
        """The vocabulary as JSON, specials included so a reader sees every id."""
        return json.dumps({"itos": self.itos}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Vocab:
        """Inverse of `to_json`."""
        itos = json.loads(text)["itos"]
        if tuple(itos[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(
                f"vocab JSON: expected {list(SPECIALS)} first, got {itos[: len(SPECIALS)]}"
            )
        return cls(itos[len(SPECIALS) :])


# --- Corpus splits ------------------------------------------------------------------------


def read_split(spec: str, *, src_lang: str, tgt_lang: str, swap: bool, what: str) -> list[Pair]:
    """The sentence pairs of one corpus split.

    Args:
        spec: a `.tsv` file (source<TAB>target[<TAB>...]), or a PREFIX naming the line-aligned
            files PREFIX.{src_lang} and PREFIX.{tgt_lang}, each possibly gzipped (`.gz`).
        src_lang, tgt_lang: the file suffixes.
        swap: TSV only; take the second column as the source.
        what: the config key that named `spec`, for messages.

    Returns:
        The pairs; empty ones are dropped and reported by `corpus`.
    """
    pairs, report = read_stream(
        stream_split(spec, src_lang=src_lang, tgt_lang=tgt_lang, swap=swap, what=what)
    )
    log.info("%s", report.summary())
    return pairs


def stream_split(spec: str, *, src_lang: str, tgt_lang: str, swap: bool, what: str) -> PairStream:
    """The sentence pairs of one corpus split, streamed: `read_split` for corpora too big
    to hold in memory (same arguments). The files must exist; they are read as the stream
    is iterated over."""
    if spec.endswith((".tsv", ".tsv.gz")):
        if not Path(spec).is_file():
            raise CorpusError(f"{what}: {spec} does not exist{_DATA_HINT}")
        return stream_tsv(spec, src_column=int(swap), tgt_column=int(not swap))
    return stream_parallel(*(_find(spec, lang, what) for lang in (src_lang, tgt_lang)))


_DATA_HINT = (
    " (the configs read ../shared/data by default: run from the repository root with the"
    " shared folder beside it, or point data.train/valid/test at your files)"
)


def _find(prefix: str, lang: str, what: str) -> Path:
    for path in (Path(f"{prefix}.{lang}"), Path(f"{prefix}.{lang}.gz")):
        if path.is_file():
            return path
    raise CorpusError(f"{what}: neither {prefix}.{lang} nor {prefix}.{lang}.gz exists{_DATA_HINT}")


def bucket_batches(
    lengths: Sequence[tuple[int, int]] | np.ndarray,
    *,
    batch_size: int,
    batch_tokens: int = 0,
    rng: random.Random,
    pool: int = 100,
) -> list[np.ndarray]:
    """One epoch's batches of pair indices, grouped by length to waste little on padding.

    The pairs are shuffled, cut into pools of `pool` batches' worth, sorted by (target,
    source) length within each pool and cut into batches; then the batches are shuffled.
    Sorting only within pools keeps some randomness in what shares a batch.

    Args:
        lengths: (N, 2) (source, target) token counts of each pair, a sequence of pairs or
            an integer array.
        batch_size: sentences per batch when `batch_tokens` is 0.
        batch_tokens: > 0: fill each batch while its padded target tokens (rows x longest
            target) stay within this budget; a longer pair still gets a batch of its own.
        rng: the shuffling generator (seeded per epoch by the caller, for resuming).
        pool: batches per sorting pool.

    Returns:
        (B_i,) int64 arrays of indices; every pair appears exactly once.
    """
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)  # (N, 2)
    # Python's shuffle, not numpy's: the same rng gives the same batches as it always has.
    order = list(range(len(lengths)))
    rng.shuffle(order)
    order = np.fromiter(order, dtype=np.int64, count=len(lengths))
    # With a token budget, size pools as if sentences were ~16 tokens (Multi30k averages 13).
    per_pool = pool * (batch_size if not batch_tokens else max(1, batch_tokens // 16))
    # One stable sort by the key (pool, target, source), packed into one integer, sorts each
    # pool by (target, source) with ties left in shuffled order, as sorting each pool would.
    src, tgt = lengths[order, 0], lengths[order, 1]
    pools = np.arange(len(order)) // per_pool
    key = (pools * (tgt.max(initial=0) + 1) + tgt) * (src.max(initial=0) + 1) + src
    order = order[np.argsort(key, kind="stable")]
    if batch_tokens:
        cuts = _token_cuts((lengths[order, 1] + 1).tolist(), per_pool, batch_tokens)
    else:  # pools hold whole batches, so every batch_size-th position starts one
        cuts = range(batch_size, len(order), batch_size)
    batches = np.split(order, cuts) if len(order) else []
    rng.shuffle(batches)
    return batches


def _token_cuts(targets: list[int], per_pool: int, batch_tokens: int) -> list[int]:
    """Where batches start (the first excepted) in pools of sorted target lengths (+ </s>)."""
    cuts, rows, longest = [], 0, 0
    for position, target in enumerate(targets):
        if position % per_pool == 0:  # a new pool starts a new batch
            if position:
                cuts.append(position)
            rows, longest = 0, 0
        longest_with = max(longest, target)
        if rows and longest_with * (rows + 1) > batch_tokens:
            cuts.append(position)
            rows, longest_with = 0, target
        rows += 1
        longest = longest_with
    return cuts


# --- Batching -----------------------------------------------------------------------------

# Teacher forcing shifts the target by one step:
#   tgt      <s>  a  b  c  </s>
#   tgt_in   <s>  a  b  c          decoder inputs  (B, T_tgt)
#   tgt_out        a  b  c  </s>   loss targets    (B, T_tgt)
# Both are padded with pad_id on the right; tgt_len counts the real positions of either.


@dataclass
class Batch:
    """Padded id tensors of a batch of sentence pairs (see the drawing above)."""

    src: Tensor  # (B, T_src) int64, source ids + </s>, padded with pad_id
    src_len: Tensor  # (B,) int64, real lengths including </s>
    tgt_in: Tensor  # (B, T_tgt) int64, <s> y_1 .. y_n   (decoder inputs)
    tgt_out: Tensor  # (B, T_tgt) int64, y_1 .. y_n </s>  (loss targets)
    tgt_len: Tensor  # (B,) int64, n + 1

    @property
    def num_tgt_tokens(self) -> int:
        """Real target tokens in the batch, `</s>` included: the loss's denominator."""
        return int(self.tgt_len.sum())

    def to(self, device: torch.device | str) -> Batch:
        """The same batch with every tensor on `device`."""
        return Batch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

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
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]], vocab_src: Vocab, vocab_tgt: Vocab
) -> Batch:
    """Add the specials to encoded sentence pairs and pad them into a `Batch`.

    Args:
        pairs: B (source ids, target ids) pairs, encoded without specials (`<unk>` is fine).
            An empty source is allowed: it becomes just `</s>`.
        vocab_src: the source vocabulary, for its specials and range of ids.
        vocab_tgt: the target vocabulary, likewise.

    Returns:
        The batch, on the CPU.
    """
    if not pairs:
        raise ValueError("pairs: empty; a batch needs at least one sentence pair")
    for row, (src, tgt) in enumerate(pairs):
        _check_ids(src, vocab_src, f"pairs[{row}] source")
        _check_ids(tgt, vocab_tgt, f"pairs[{row}] target")
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


def _check_ids(ids: Sequence[int], vocab: Vocab, what: str) -> None:
    # A <pad>, <s> or </s> already present is the usual bug of encoding with add_eos=True
    # and then batching; an id past the vocabulary would fail much later, in the embedding.
    reserved = (vocab.pad_id, vocab.bos_id, vocab.eos_id)
    bad = [i for i in ids if i in reserved or not 0 <= i < len(vocab)]
    if bad:
        raise ValueError(f"{what}: ids {bad} are specials or outside the vocabulary")
