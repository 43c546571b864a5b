"""A trained model as two ONNX graphs, which ONNX Runtime runs without PyTorch: the encoder,
and one decoder step.

- `encoder.onnx`: (src (B, T_src) int64, src_len (B,) int64) -> the memory every step
  reads and the first decoder state, one output per field that the model has (see
  `Manifest.memory`, `Manifest.state`), the attention mechanisms' slots among them.
  Sentences are packed as in PyTorch, so padding changes nothing: ONNX's RNN operators take
  each sentence's length.
- `step.onnx`: (prev (N,) int64, the state's fields, the memory's fields) -> log_probs
  (N, V), the new state's fields and, where the model has attention, alpha (N, T_src). A
  copying model's (the pointer-generator) log_probs are (N, V + T_src), over the vocabulary
  extended by the source positions; its encoder reads a source word its vocabulary lacks by
  an extended id (alignmt.text.copy) and gives the copy ids as a memory field.

Both are traced from the model in float32 on the CPU with PyTorch's TorchScript-based
exporter, with every input's and output's rows axis free, and its source axis where it has
one: each field's axes are the model's declaration (`Decoder.axes`, the slots' from their
mechanisms), never a list kept here. `manifest.json` holds what the graphs cannot say: the
checkpoint's config, vocabularies and tokenizers (as `checkpoint.format.header_metadata`
writes them), the special ids, the names, order and axes of the state's and memory's
fields, what the explorer shows of them, and the number of parameters.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from alignmt.checkpoint.format import header_metadata
from alignmt.checkpoint.shortlist_io import save_shortlist
from alignmt.checkpoint.torch_io import Checkpoint
from alignmt.decoding.exported import ENCODER, FORMAT, MANIFEST, STEP, Manifest
from alignmt.model.cell import DecoderState
from alignmt.model.decoder import Memory, flat_fields, from_flat
from alignmt.model.seq2seq import Seq2Seq

OPSET = 17
# the axes a graph leaves free (a copying model's output is V + T_src wide); units are fixed
FREE = ("rows", "source", "extended")


def export_onnx(ckpt: Checkpoint, out: str | Path, steer: bool = True) -> Manifest:
    """Write `ckpt`'s model as `encoder.onnx` and `step.onnx` in `out`, with `manifest.json`
    (and the run's shortlist.safetensors, where it has one).
    The model is put in float32 on the CPU, in eval mode, where it is. With `steer` (a model
    with attention), the step also takes the attention override (`Manifest.steer`), so that
    every engine steps through the exported decoder as the explorer asks.

    Returns:
        What the graphs take and give.
    """
    model = ckpt.model.float().cpu().eval()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    src, src_len = _example_source(model)
    with torch.no_grad():
        memory, state = model.encode(src, src_len)
    state_fields, memory_fields = flat_fields(state), flat_fields(memory)
    axes = model.decoder.axes()
    composition = model.composition
    manifest = Manifest(
        state=tuple(state_fields),
        memory=tuple(memory_fields),
        attention=model.has_attention,
        steer=steer and model.has_attention,
        keep=True,
        axes={name: axes[name] for name in (*state_fields, *memory_fields)},
        shown=tuple(asdict(shown) for shown in composition.shown) if composition else (),
        copies=model.copies,
    )
    encoder = _Encoder(model, manifest)
    graph = manifest.encoder_inputs, manifest.encoder_outputs
    keep = torch.ones(src.shape)  # (B, T_src) every embedding read
    _export(encoder, (src, src_len, keep), *graph, manifest, out / ENCODER)
    prev = torch.full((len(src_len),), model.bos_id)
    fields = [*state_fields.values(), *memory_fields.values()]
    if manifest.steer:  # row 0 steered onto its </s>, the others not
        steer = torch.zeros(src.shape)  # (B, T_src)
        steer[0, src_len[0] - 1] = 1.0
        fields.append(steer)
    step = _Step(model, manifest)
    graph = manifest.step_inputs, manifest.step_outputs
    _export(step, (prev, *fields), *graph, manifest, out / STEP)
    _write_manifest(ckpt, manifest, out / MANIFEST)
    if ckpt.shortlist is not None:  # the folder decodes with it as the run does
        save_shortlist(out, ckpt.shortlist)
    return manifest


def _write_manifest(ckpt: Checkpoint, manifest: Manifest, path: Path) -> None:
    """The checkpoint's header (as a checkpoint stores it), the special ids, and the
    graphs' field names, as JSON."""
    tokenizers = (ckpt.src_tokenizer, ckpt.tgt_tokenizer)
    meta = header_metadata(ckpt.config, ckpt.src_vocab, ckpt.tgt_vocab, ckpt.step, tokenizers)
    model = ckpt.model
    ids = {"pad_id": model.pad_id, "bos_id": model.bos_id, "eos_id": model.eos_id}
    fields = {
        "state": list(manifest.state),
        "memory": list(manifest.memory),
        "axes": {name: list(axes) for name, axes in manifest.axes.items()},
        "shown": list(manifest.shown),
    }
    parameters = sum(p.numel() for p in model.parameters())
    body = {
        "format": FORMAT,
        **meta,
        **ids,
        **fields,
        "attention": manifest.attention,
        "steer": manifest.steer,
        "keep": manifest.keep,
        "copies": manifest.copies,
        "parameters": parameters,
    }
    path.write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n")


class _Encoder(nn.Module):
    """`Seq2Seq.encode` with its outputs as a flat tuple of tensors."""

    def __init__(self, model: Seq2Seq, manifest: Manifest) -> None:
        super().__init__()
        self.model, self.manifest = model, manifest

    def forward(self, src: Tensor, src_len: Tensor, keep: Tensor) -> tuple[Tensor, ...]:
        """src (B, T_src), src_len (B,), keep (B, T_src): each source embedding is read times
        its keep (0: erased, for erasure's attribution)."""

        def scaled(module: nn.Module, inputs: Any, embedded: Tensor) -> Tensor:
            return embedded * keep.unsqueeze(-1)  # (B, T_src, E)

        handle = self.model.encoder.embed.register_forward_hook(scaled)
        try:
            memory, state = self.model.encode(src, src_len)
        finally:
            handle.remove()
        memory, state = flat_fields(memory), flat_fields(state)
        return (
            *(memory[n] for n in self.manifest.memory),
            *(state[n] for n in self.manifest.state),
        )


class _Step(nn.Module):
    """`Seq2Seq.decode_step` on flat tensors."""

    def __init__(self, model: Seq2Seq, manifest: Manifest) -> None:
        super().__init__()
        self.model, self.manifest = model, manifest

    def forward(self, prev: Tensor, *flat: Tensor) -> tuple[Tensor, ...]:
        names = self.manifest
        count = len(names.state)
        state = from_flat(DecoderState, dict(zip(names.state, flat[:count], strict=True)))
        given = flat[count : count + len(names.memory)]
        memory = from_flat(Memory, dict(zip(names.memory, given, strict=True)))
        memory = memory._replace(steer=flat[-1] if names.steer else None)
        log_probs, state, alpha = self.model.decode_step(prev, state, memory)
        fields = flat_fields(state)
        outputs = [fields[n] for n in names.state]
        return (log_probs.full(), *outputs, *([alpha] if alpha is not None else []))


# What the exporter's C++ side prints on every model, straight to stderr: it has no shape
# rule for packed sequences, which its own pass then replaces by the RNN operators' per-row
# lengths (sequence_lens), and ONNX Runtime infers the shapes of the graph it is given.
HARMLESS = ("shape inference of prim::PackPadded", "shape inference of prim::PadPacked")


@contextmanager
def _stderr_without(*notes: str) -> Iterator[None]:
    """Run the block with the process's stderr (file descriptor 2, where C++ writes, out of
    Python's warning filters' reach) caught; then write out every line but those holding one
    of `notes`."""
    sys.stderr.flush()
    kept = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(kept, 2)
            os.close(kept)
            caught.seek(0)
            for line in caught.read().decode(errors="replace").splitlines(keepends=True):
                if not any(note in line for note in notes):
                    sys.stderr.write(line)


def _example_source(model: Seq2Seq) -> tuple[Tensor, Tensor]:
    """A padded batch to trace: three sentences ending in </s>, not sorted by length. (Traced
    on lengths already in order, the exporter fixes packing's sort as doing nothing, and
    batches in another order get other sentences' states.)"""
    lengths = [2, 4, 3]
    src = torch.full((len(lengths), max(lengths)), model.pad_id)
    for row, n in enumerate(lengths):
        src[row, : n - 1], src[row, n - 1] = model.eos_id + 1, model.eos_id
    return src, torch.tensor(lengths)


def _export(
    module: nn.Module,
    args: tuple,
    inputs: tuple[str, ...],
    outputs: tuple[str, ...],
    manifest: Manifest,
    path: Path,
) -> None:
    """Trace `module` on `args` to `path`, with every input's and output's rows axis free
    (the batch, or a beam's rows), and its source axis where it has one. The module is put in
    eval mode first: the exporter hands back the mode it found, to the model inside too, and
    a module is built in training mode."""
    module.eval()
    axes = {
        name: {i: axis for i, axis in enumerate(manifest.axes_of(name)) if axis in FREE}
        for name in (*inputs, *outputs)
    }
    with warnings.catch_warnings(), _stderr_without(*HARMLESS):
        # The exporter's Python notes: the deprecation of the TorchScript exporter, which is
        # the one chosen (dynamo=False), the tracer's reading of tensors as Python values, and
        # the GRU's batch size. None bites: the tests run every graph on other batch sizes
        # and source lengths than the trace's, against PyTorch.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            str(path),
            dynamo=False,
            input_names=list(inputs),
            output_names=list(outputs),
            dynamic_axes=axes,
            opset_version=OPSET,
        )
