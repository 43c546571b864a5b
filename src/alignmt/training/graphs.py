"""CUDA graphs over the decoder's teacher-forced unroll (`train.cuda_graphs=true`).

On a GPU the decoder's time loop is launch-bound: each of its T_tgt steps runs a few dozen
small kernels forward and again backward, each issued from Python, while the arithmetic
of one step at batch 64 takes microseconds. A CUDA graph records the whole unroll's kernels,
forward and backward, once per batch shape and replays them with one launch each
(`torch.cuda.make_graphed_callables`).

A graph replays fixed shapes, so each batch is padded up to a bucket: lengths to a multiple
of `LENGTH_STEP`, rows to `padded_rows`. Padding changes no result: padded source positions
are masked out of attention, and padded target positions and rows (their targets all
<pad>) are left out of the loss, so they get no gradient. The encoder (cuDNN's RNN, a few
kernels), the fused loss and the optimizer step stay eager.

All graphs share one memory pool: they run one after another, each output read before
the next replay, so one graph's buffers may hold another's temporaries.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from alignmt.config import Config
from alignmt.model.decoder import DecoderState, Memory, flat_fields, from_flat
from alignmt.model.seq2seq import Seq2Seq

LENGTH_STEP = 8  # source and target lengths are padded up to a multiple of this


def padded_rows(rows: int) -> int:
    """`rows` rounded up to the next of four buckets per power of two (64, 80, 96, 112,
    128, 160, ...): under 25% padding, and few shapes to capture when batches are sized in
    tokens."""
    step = max(8, 2 ** (rows.bit_length() - 3))
    return step * math.ceil(rows / step)


def check_graphs(cfg: Config, device: torch.device, processes: int) -> None:
    """Refuse `train.cuda_graphs` where it cannot run, naming why.

    Raises:
        ValueError: not on a CUDA device, under DDP (its hooks run between the kernels a
            graph would record), or with guided alignment or scheduled sampling (their
            unrolls read more than the graph's inputs).
    """
    train = cfg.train
    if device.type != "cuda":
        raise ValueError(f"train.cuda_graphs=true needs a CUDA device; this run trains on {device}")
    if processes > 1:
        raise ValueError("train.cuda_graphs=true trains in one process; torchrun started several")
    if train.guided_alignment or train.scheduled_sampling != "none":
        raise ValueError(
            "train.cuda_graphs=true captures the plain teacher-forced unroll: turn off "
            "train.guided_alignment and train.scheduled_sampling"
        )


class _Unroll(nn.Module):
    """The decoder's teacher-forced unroll over flat tensors, as graph capture takes them:
    `tgt_in`, then the memory's and the initial state's fields that are not None, their
    slots included (`decoder.flat_fields`)."""

    def __init__(self, model: Seq2Seq, memory: Memory, state: DecoderState) -> None:
        super().__init__()
        self.decoder = model.decoder
        self.memory_fields = list(flat_fields(memory))
        self.state_fields = list(flat_fields(state))

    def forward(self, tgt_in: Tensor, *fields: Tensor) -> Tensor:
        """(B, T_tgt) decoder inputs and the fields -> features (B, T_tgt, R)."""
        count = len(self.memory_fields)
        memory = from_flat(Memory, dict(zip(self.memory_fields, fields[:count], strict=True)))
        given = dict(zip(self.state_fields, fields[count:], strict=True))
        return self.decoder.unroll(tgt_in, from_flat(DecoderState, given), memory).features


class GraphedObjective(nn.Module):
    """`Seq2Seq.loss` for plain teacher forcing, with the decoder's unroll replayed from a
    CUDA graph per padded batch shape (see the module's docstring)."""

    def __init__(self, model: Seq2Seq) -> None:
        super().__init__()
        self.model = model
        self.graphs: dict[tuple, nn.Module] = {}  # (B, T_src, T_tgt) -> graphed unroll
        self.pool = torch.cuda.graph_pool_handle()

    def forward(
        self,
        src: Tensor,
        src_len: Tensor,
        tgt_in: Tensor,
        tgt_out: Tensor,
        label_smoothing: float = 0.0,
        **unused: object,
    ) -> Tensor:
        """The mean loss over real target tokens, as `Seq2Seq.loss` computes it.

        Args:
            src, src_len, tgt_in, tgt_out: a batch as `Seq2Seq.loss` takes it, on the GPU.
            label_smoothing: as in `Seq2Seq.loss`.
            unused: `loss_of`'s guide and sampling options, off (see `check_graphs`).
        """
        src, src_len, tgt_in, tgt_out = self._pad(src, src_len, tgt_in, tgt_out)
        model = self.model
        # The graph's parameter gradients are its static buffers, and autograd gives a
        # parameter without a .grad the buffer itself: the next replay in this bucket (an
        # accumulated micro-batch) would overwrite it. Existing zeros are added into instead.
        for param in model.decoder.parameters():
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        memory, state = model.encode(src, src_len)
        fields = [*flat_fields(memory).values(), *flat_fields(state).values()]
        # Autocast's weight cache would keep casts made outside the graph; off, every cast
        # happens inside it.
        with torch.autocast(
            "cuda",
            dtype=torch.get_autocast_dtype("cuda"),
            enabled=torch.is_autocast_enabled("cuda"),
            cache_enabled=False,
        ):
            features = self._graph(tgt_in, memory, state, fields)(tgt_in, *fields)
        return model.output_loss(features, tgt_out, label_smoothing)

    def _graph(self, tgt_in: Tensor, memory: Memory, state: DecoderState, fields: list[Tensor]):
        """The graphed unroll for this batch's shape, captured the first time it is seen."""
        key = (*memory.states.shape[:2], tgt_in.size(1))
        if key not in self.graphs:
            sample = [tgt_in] + [f.detach().clone().requires_grad_(f.requires_grad) for f in fields]
            self.graphs[key] = torch.cuda.make_graphed_callables(
                _Unroll(self.model, memory, state),
                tuple(sample),
                allow_unused_input=True,  # e.g. the bridge's weights, used before the unroll
                pool=self.pool,
            )
        return self.graphs[key]

    def _pad(self, src: Tensor, src_len: Tensor, tgt_in: Tensor, tgt_out: Tensor):
        """The batch padded to its bucket's shape. Added rows repeat the first row's source
        and have no target tokens, so the loss and the gradients never see them."""
        rows, pad = padded_rows(src.size(0)), self.model.pad_id
        t_src = LENGTH_STEP * math.ceil(src.size(1) / LENGTH_STEP)
        t_tgt = LENGTH_STEP * math.ceil(tgt_in.size(1) / LENGTH_STEP)
        extra = rows - src.size(0)
        src = torch.cat([src, src[:1].expand(extra, -1)])
        src_len = torch.cat([src_len, src_len[:1].expand(extra)])
        return (
            nn.functional.pad(src, (0, t_src - src.size(1)), value=pad),
            src_len,
            _pad_rows(tgt_in, rows, t_tgt, pad),
            _pad_rows(tgt_out, rows, t_tgt, pad),
        )


def _pad_rows(ids: Tensor, rows: int, length: int, pad: int) -> Tensor:
    """(B, T) ids -> (rows, length), filled with `pad`."""
    return nn.functional.pad(ids, (0, length - ids.size(1), 0, rows - ids.size(0)), value=pad)
