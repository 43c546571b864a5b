"""The pointer-generator in PyTorch (See et al. 2017; reference.py has the equations and the
choices where the paper is silent): p_gen, the copy ids made once per sentence, and the
extended distribution, in log space.

Ids that nothing reaches (the extended ids no source word copies into, and the vocabulary
where p_gen underflows) have log-probability `IMPOSSIBLE` rather than -inf: its exp is
exactly 0 beside any real term, and no gradient meets inf - inf."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from alignmt.model.attention.spec import Spec
from alignmt.model.attention.torch import IMPOSSIBLE, log_of


class Copy(nn.Module):
    """p_gen = sigma(w . features + b) and P(w) over the extended vocabulary."""

    def __init__(self, *, features: int, vocab_size: int) -> None:
        super().__init__()
        self.gate = nn.Linear(features, 1)
        self.vocab_size = vocab_size

    def prepare(self, src: Tensor, table: Tensor) -> Tensor:
        """(B, T_src) where each source position copies into (reference.copy_ids), from the
        source ids (unknown words as V_src + their first position) and `table` (V_src,),
        each source word's target id or -1."""
        src_vocab_size = table.size(0)
        known = src < src_vocab_size
        target = table[src.clamp(max=src_vocab_size - 1)]  # (B, T_src)
        same = src.unsqueeze(2) == src.unsqueeze(1)  # (B, j, k)
        first = same.to(torch.uint8).argmax(-1)  # argmax takes the first of equals
        return torch.where(known & (target >= 0), target, self.vocab_size + first)

    def forward(
        self, logits: Tensor, alpha: Tensor, features: Tensor, ids: Tensor
    ) -> tuple[Tensor, Tensor]:
        """log P (..., V + T_src) and p_gen (...,).

        Args:
            logits: (..., V) the vocabulary's logits.
            alpha: (..., T_src) the step's attention.
            features: (..., F) what p_gen reads.
            ids: (B, T_src) the copy ids; the leading axes of the others start with B.
        """
        gate = self.gate(features)  # (..., 1)
        generated = F.log_softmax(logits, dim=-1) + _log_sigmoid(gate)  # (..., V)
        extension = generated.new_full((*alpha.shape[:-1], alpha.size(-1)), IMPOSSIBLE)
        generated = torch.cat([generated, extension], dim=-1)  # (..., V + T_src)
        index = ids.view(ids.size(0), *[1] * (alpha.dim() - 2), ids.size(1)).expand_as(alpha)
        mass = alpha.new_zeros(generated.shape).scatter_add(-1, index, alpha)  # sum_j alpha_ij
        copied = log_of(mass) + _log_sigmoid(-gate)
        # logsumexp of the pair, not logaddexp: the ONNX exporter has no rule for logaddexp
        log_p = torch.stack([generated, copied]).logsumexp(0)
        return log_p, torch.sigmoid(gate).squeeze(-1)


def _log_sigmoid(x: Tensor) -> Tensor:
    """log sigma(x) = min(x, 0) - log(1 + exp(-|x|)), as F.logsigmoid computes it, in ops the
    ONNX exporter writes as they are: it writes F.logsigmoid as log(sigmoid(x)), whose small
    values lose their digits to the runtimes' approximate sigmoid (1e-3 in a log-probability
    of -11 on ONNX Runtime)."""
    return x.clamp(max=0) - torch.log1p(torch.exp(-x.abs()))


def build(spec: Spec, *, features: int, vocab_size: int) -> Copy:
    return Copy(features=features, vocab_size=vocab_size)
