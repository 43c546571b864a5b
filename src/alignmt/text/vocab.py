"""The vocabulary: special tokens at fixed ids, then a corpus's tokens by frequency.

`Vocab` is stored inside every checkpoint as JSON. Cutting sentences into tokens is
`tokenize`'s; turning ids into tensors is `alignmt.model.batch`'s.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"


SPECIALS = (PAD, BOS, EOS, UNK)


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
