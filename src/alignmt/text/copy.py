"""The pointer-generator's ids (See et al. 2017), from words: what a copying model reads and
is trained to write.

A copying model reads a source word its vocabulary lacks as V_src + the position where the
word first occurs in the sentence (so repeats share an id), and copies it into V_tgt + that
position; a source word that both vocabularies have copies into its target id
(`copy_table`). A target word is the copy of a source word where that word's copy goes to an
extended id, and otherwise its vocabulary id, or <unk>. The model makes the same copy ids
from the same source ids (`attention/copy`), so training and decoding agree; a search's
output id V_tgt + j is the source word at position j (`output_tokens`).

    source   the  tiny  zorbs  eat  zorbs   </s>     (V_src = 100; "zorbs" unknown)
    src ids  4    57    102    31   102     2
    target   die  winzigen  zorbs  essen  zorbs      ("zorbs" unknown to the target too)
    tgt ids  9    3         202    44     202        (V_tgt = 200; "winzigen" is <unk>)
"""

from __future__ import annotations

from collections.abc import Sequence

from alignmt.text.vocab import Vocab


def copy_table(src_vocab: Vocab, tgt_vocab: Vocab) -> list[int]:
    """(V_src,) each source word's target id where the target vocabulary has the same
    string, else -1 (and -1 for <unk>, which names no word)."""
    table = [tgt_vocab.stoi.get(token, -1) for token in src_vocab.itos]
    table[src_vocab.unk_id] = -1
    return table


def source_ids(tokens: Sequence[str], vocab: Vocab, *, add_eos: bool = False) -> list[int]:
    """`Vocab.encode` for a copying model: a token the vocabulary lacks as len(vocab) + the
    position where it first occurs."""
    first: dict[str, int] = {}
    ids = []
    for j, token in enumerate(tokens):
        known = vocab.stoi.get(token)
        ids.append(known if known is not None else len(vocab) + first.setdefault(token, j))
    return ids + ([vocab.eos_id] if add_eos else [])


def copied_to(tokens: Sequence[str], src_vocab: Vocab, tgt_vocab: Vocab) -> dict[str, int]:
    """The source words that copy into an extended id, and that id (V_tgt + the first
    position): the words a target side spells by copying."""
    extended = {}
    for j, token in enumerate(tokens):
        known = token in src_vocab.stoi and token != src_vocab.itos[src_vocab.unk_id]
        if not (known and token in tgt_vocab.stoi) and token not in extended:
            extended[token] = len(tgt_vocab) + j
    return extended


def target_ids(
    src_tokens: Sequence[str], tgt_tokens: Sequence[str], src_vocab: Vocab, tgt_vocab: Vocab
) -> list[int]:
    """A copying model's target ids: a copy's extended id where the source spells the word
    by copying, else `Vocab.encode`'s."""
    extended = copied_to(src_tokens, src_vocab, tgt_vocab)
    return [
        extended.get(token, tgt_vocab.stoi.get(token, tgt_vocab.unk_id)) for token in tgt_tokens
    ]


def output_tokens(
    ids: Sequence[int], src_tokens: Sequence[str], vocab: Vocab, *, strip_special: bool = True
) -> list[str]:
    """`Vocab.decode` of an output, whose copies (V + j) are the source tokens at position j."""
    tokens = []
    for i in map(int, ids):
        if i >= len(vocab):
            tokens.append(src_tokens[i - len(vocab)])
        elif strip_special and i == vocab.eos_id:
            break
        else:
            tokens += vocab.decode([i], strip_special=strip_special)
    return tokens
