"""The training loss: cross-entropy over real target tokens, and the same loss fused with the
vocabulary projection so that the (B, T_tgt, V) logits never exist; and guided alignment's
loss between attention and word links (Chen et al. 2016).

`sequence_loss(logits, ...)` is the plain definition. `linear_cross_entropy(x, W, b, ...)`
equals `sequence_loss(x @ W^T + b, ...)` (and its gradients equal autograd's) but walks the
tokens in chunks. For each chunk it makes the logits, the loss and, right away, the gradient
of the loss with respect to them, softmax - target, which it pushes through the projection
into the gradients of x, W and b. Backward then only scales those by the incoming gradient.
Compared with the plain path it skips padding rows and holds one chunk of logits instead of
four full (N, V) tensors (logits, log-probabilities and both their gradients): the output
layer is half of a training step's FLOPs and, before this, most of its peak memory.

Under autocast (`--precision bfloat16`) the products run in bfloat16 and everything else in
the weights' dtype: each chunk's logits are cast up before the softmax, the loss and the
gradients of W and b accumulate in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

# Logit elements per chunk: 2^22 float32 are 16 MiB, about 530 tokens at V = 7,865; large
# enough for efficient matmuls, small enough to stay near the cache.
CHUNK_ELEMENTS = 1 << 22


def sequence_loss(
    logits: Tensor,
    targets: Tensor,
    pad_id: int,
    label_smoothing: float = 0.0,
    smooth_over: int | None = None,
) -> Tensor:
    """Mean cross-entropy over real target tokens (</s> included, padding excluded).

    Args:
        logits: (B, T_tgt, V) scores whose softmax is the distribution: logits, or
            log-probabilities (`LogProbs.scores`).
        targets: (B, T_tgt) int64 y_1 .. y_n </s>, padded with pad_id.
        label_smoothing: share of each target's probability mass spread uniformly over the
            vocabulary (Szegedy et al. 2016), as in `F.cross_entropy`.
        smooth_over: spread it over the first `smooth_over` ids only (a copying model's
            vocabulary, not its extended ids); None: over all V.
    """
    if smooth_over is not None and label_smoothing:
        log_p = logits.log_softmax(-1)  # (B, T_tgt, V)
        nll = F.nll_loss(log_p.flatten(0, 1), targets.flatten(), ignore_index=pad_id)
        uniform = -log_p[..., :smooth_over].mean(-1)[targets != pad_id].mean()
        return (1 - label_smoothing) * nll + label_smoothing * uniform
    return F.cross_entropy(
        logits.flatten(0, 1),
        targets.flatten(),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )


def linear_cross_entropy(
    features: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    pad_id: int,
    label_smoothing: float = 0.0,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> Tensor:
    """`sequence_loss(features @ weight.T + bias, targets, ...)` without the full logits.

    Args:
        features: (B, T_tgt, R) what the vocabulary projection reads.
        weight: (V, R) and bias (V,) or None: the projection.
        targets: (B, T_tgt) int64, padded with pad_id.
        label_smoothing: as in `sequence_loss`.
        chunk_elements: logits computed at once, in elements; rows per chunk = this // V.

    Returns:
        The mean loss over real tokens, a scalar; differentiable once (not twice).
    """
    real = targets != pad_id  # (B, T_tgt)
    x, y = features[real], targets[real]  # (n, R), (n,): padding costs nothing below
    rows = max(1, chunk_elements // weight.size(0))
    if not torch.is_grad_enabled():
        return _loss_only(x, weight, bias, y, label_smoothing, rows)
    return _LinearCrossEntropy.apply(x, weight, bias, y, label_smoothing, rows)


def _chunk_loss(logits: Tensor, y: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
    """Summed smoothed cross-entropy of one chunk of (c, V) logits, and their logsumexp (c,).

    F.cross_entropy's smoothing: (1 - eps) (-log p_y) + eps mean_v(-log p_v), where
    -log p_v = lse - logit_v."""
    lse = logits.logsumexp(dim=-1)  # (c,)
    nll = lse - logits.gather(1, y[:, None]).squeeze(1)
    if smoothing:
        nll = (1 - smoothing) * nll + smoothing * (lse - logits.mean(dim=-1))
    return nll.sum(), lse


def _loss_only(x, weight, bias, y, smoothing, rows) -> Tensor:
    total = weight.new_zeros(())
    for start in range(0, len(y), rows):
        logits = F.linear(x[start : start + rows], weight, bias).to(weight.dtype)  # (c, V)
        total += _chunk_loss(logits, y[start : start + rows], smoothing)[0]
    return total / max(1, len(y))


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, y, smoothing, rows):
        n, vocab = len(y), weight.size(0)
        autocasting = torch.is_autocast_enabled(x.device.type)
        total = weight.new_zeros(())
        grad_x = torch.empty_like(x)  # (n, R)
        grad_w = torch.zeros_like(weight)  # (V, R)
        grad_b = None if bias is None else torch.zeros_like(bias)  # (V,)
        for start in range(0, n, rows):
            xc, yc = x[start : start + rows], y[start : start + rows]
            logits = F.linear(xc, weight, bias).to(weight.dtype)  # (c, V)
            loss, lse = _chunk_loss(logits, yc, smoothing)
            total += loss
            # d loss / d logits = softmax - (1 - eps) onehot(y) - eps / V, made in place
            grad = logits.sub_(lse[:, None]).exp_()
            grad[torch.arange(len(yc), device=y.device), yc] -= 1 - smoothing
            if smoothing:
                grad -= smoothing / vocab
            if autocasting:  # its casts apply to neither out= nor in-place products
                grad_x[start : start + rows] = grad @ weight
                grad_w += grad.T @ xc
            else:  # the products straight into their destinations
                torch.mm(grad, weight, out=grad_x[start : start + rows])
                grad_w.addmm_(grad.T, xc)
            if grad_b is not None:
                grad_b += grad.sum(dim=0)
        scale = 1 / max(1, n)
        ctx.save_for_backward(grad_x, grad_w, grad_b)
        ctx.scale = scale
        return total * scale

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss):
        grad_x, grad_w, grad_b = ctx.saved_tensors
        scale = grad_loss * ctx.scale
        grad_b = None if grad_b is None else grad_b * scale
        return grad_x * scale, grad_w * scale, grad_b, None, None, None


def alignment_loss(attention: Tensor, guide: Tensor, cost: str = "ce") -> Tensor:
    """Guided alignment's loss (Chen et al. 2016, §3): how far each target token's attention
    lies from its word links, averaged over the target tokens that have links.

    Args:
        attention: (B, T_tgt, T_src) alpha_i of the step that emits each target token.
        guide: (B, T_tgt, T_src) each linked token's links as a distribution (1 / |links|
            on each linked source token); all zeros for a token without links, padding and
            </s>, which add nothing.
        cost: "ce", the cross-entropy -sum_j guide_ij log alpha_ij, or "mse", the squared
            error sum_j (alpha_ij - guide_ij)^2.

    Returns:
        A scalar; 0 for a batch without links.
    """
    linked = guide.sum(dim=-1) > 0  # (B, T_tgt)
    attention = attention.float()
    if cost == "ce":
        # clamped: padding's attention is exactly 0, and 0 * log 0 must be 0, not nan
        per_token = -(guide * attention.clamp_min(1e-12).log()).sum(dim=-1)
    elif cost == "mse":
        per_token = (attention - guide).square().sum(dim=-1)
    else:
        raise ValueError(f"guided alignment cost {cost!r}: choose ce or mse")
    return per_token.where(linked, 0.0).sum() / linked.sum().clamp_min(1)
