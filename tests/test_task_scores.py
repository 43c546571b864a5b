"""Tests for alignmt.analysis.task_scores: attention scored against the task's exact
alignment, on stand-in models whose attention is chosen by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from alignmt.analysis.task_scores import alignment_score, argmax_links, gold_links
from alignmt.model.decoder import DecoderOutput
from alignmt.text.tasks import ALPHABET
from alignmt.text.vocab import Vocab


class LooksAt(nn.Module):
    """A model whose output i attends to source position `where(i, L)` with weight 1."""

    def __init__(self, where) -> None:
        super().__init__()
        self.where = where
        self.unused = nn.Parameter(torch.zeros(1))  # so that it has a device

    def forward(self, src, src_len, tgt_in) -> DecoderOutput:
        attention = torch.zeros(src.shape[0], tgt_in.shape[1], src.shape[1])
        for row, n in enumerate(src_len.tolist()):
            for i in range(min(tgt_in.shape[1], n - 1)):
                attention[row, i, self.where(i, n - 1)] = 1.0  # n - 1: </s> left out
        return DecoderOutput(torch.zeros(*tgt_in.shape, 5), attention, None)


def test_the_anti_diagonal_aligns_reversal_perfectly():
    score = alignment_score(
        LooksAt(lambda i, n: n - 1 - i), Vocab(ALPHABET), "reverse", (3, 5), 4, 0
    )
    assert (score.precision, score.recall, score.aer) == (1.0, 1.0, 0.0)


def test_the_diagonal_aligns_reversal_only_at_the_middle_character():
    # lengths 3 and 5: 1 of 3 and 1 of 5 links right, over 4 strings each: 8 of 32
    score = alignment_score(LooksAt(lambda i, n: i), Vocab(ALPHABET), "reverse", (3, 5), 4, 0)
    assert score.recall == pytest.approx(8 / 32) and score.aer == pytest.approx(1 - 8 / 32)


def test_links_are_source_then_output_and_leave_out_the_end_of_sentence():
    attention = torch.tensor([[[0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.0, 0.0, 1.0]]])
    assert argmax_links(attention, 2) == [{(1, 0), (0, 1)}]
    assert gold_links("reverse", [("ab", "ba")]) == [{(1, 0), (0, 1)}]
    assert gold_links("copy", [("ab", "ab")]) == [{(0, 0), (1, 1)}]
