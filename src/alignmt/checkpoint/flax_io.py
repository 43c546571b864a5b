"""Run folders as Flax models: the name and layout map between a checkpoint's tensors (PyTorch
`state_dict` names and layouts) and `FlaxSeq2Seq`'s parameters, and loading and saving
without torch.

The map is one rule per kind of tensor, so that it reads as a table:

| run folder (PyTorch)                          | Flax parameter                           |
| --------------------------------------------- | ---------------------------------------- |
| `X.weight` of an nn.Linear, (out, in)         | `X/kernel`, (in, out): transposed        |
| `X.bias`                                      | `X/bias`                                 |
| `X.embed.weight` of an nn.Embedding, (V, E)   | `X/embed/embedding`, (V, E)              |
| `encoder.rnn.weight_ih_lK[_reverse]`, (G, in) | `encoder/rnn_lK[_reverse]/ih/kernel`     |
| `encoder.rnn.weight_hh_lK[_reverse]`, (G, H)  | `encoder/rnn_lK[_reverse]/hh/kernel`     |
| `encoder.rnn.bias_ih_lK` / `bias_hh_lK`       | `encoder/rnn_lK/ih/bias` / `hh/bias`     |
| `decoder.rnn.layer_in.K.weight`               | `decoder/rnn/layer_in_K/kernel`          |
| `decoder.rnn.hidden_in.K.weight`              | `decoder/rnn/hidden_in_K/kernel`         |
| tied `...proj.weight` (= `decoder.embed.weight`) | none: Flax reads the embedding        |
| `X.g`, a bare parameter (a learned scale)     | `X/g`, the same                          |
| `decoder.copy.X` (the pointer-generator)      | `decoder/pointer/X` (Module.copy exists) |
| `copy_table`, a buffer                        | none: made from the vocabularies         |

Gates keep PyTorch's order in both (GRU r, z, n; LSTM i, f, g, o) and the LSTM's (c, h)
carry holds no weights, so nothing else is reordered; a round trip is bit-exact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save

from alignmt.checkpoint.format import (
    TRAIN_PREFIX,
    Header,
    header_metadata,
    parse_header,
    readable,
    stored_path,
    weights_path,
)
from alignmt.checkpoint.rundir import publish
from alignmt.config import Config, ModelConfig
from alignmt.model.attention.registry import compose, current_names
from alignmt.model.flax_seq2seq import FlaxSeq2Seq
from alignmt.text.copy import copy_table
from alignmt.text.tokenize import Tokenizer
from alignmt.text.vocab import Vocab

Params = dict[str, Any]  # Flax's nested {"encoder": {"embed": {"embedding": ...}}, ...}

_ENCODER_RNN = re.compile(r"encoder\.rnn\.(weight|bias)_(ih|hh)_(l\d+(?:_reverse)?)")
_TORCH_LIST = re.compile(r"(layer_in|hidden_in)\.(\d+)")
_FLAX_LIST = re.compile(r"(layer_in|hidden_in)_(\d+)")
# modules whose PyTorch name is a method of Flax's Module, and their Flax name
_FLAX_NAMES = {"copy": "pointer"}
_TORCH_NAMES = {flax: torch for torch, flax in _FLAX_NAMES.items()}
BUFFERS = ("copy_table",)  # run-folder tensors that are no parameters


def flax_path(name: str) -> tuple[str, ...]:
    """The Flax parameter path of the run-folder tensor `name`."""
    match = _ENCODER_RNN.fullmatch(name)
    if match:
        kind, which, layer = match.groups()
        return ("encoder", f"rnn_{layer}", which, "kernel" if kind == "weight" else "bias")
    *modules, leaf = _TORCH_LIST.sub(r"\1_\2", name).split(".")
    modules = [_FLAX_NAMES.get(module, module) for module in modules]
    if leaf == "weight":
        leaf = "embedding" if modules[-1] == "embed" else "kernel"
    return (*modules, leaf)


def torch_name(path: tuple[str, ...]) -> str:
    """The run-folder tensor name of the Flax parameter at `path` (inverse of `flax_path`)."""
    *modules, leaf = path
    if modules[0] == "encoder" and modules[1].startswith("rnn_"):
        kind = "weight" if leaf == "kernel" else "bias"
        return f"encoder.rnn.{kind}_{modules[2]}_{modules[1].removeprefix('rnn_')}"
    leaf = {"kernel": "weight", "embedding": "weight"}.get(leaf, leaf)
    modules = [_TORCH_NAMES.get(module, module) for module in modules]
    return _FLAX_LIST.sub(r"\1.\2", ".".join([*modules, leaf]))


def params_from_tensors(tensors: Mapping[str, np.ndarray], cfg: ModelConfig) -> Params:
    """Flax parameters from a run folder's model tensors (PyTorch layout), a folder of
    before the attention room's included."""
    params: Params = {}
    for name, value in current_names(tensors, compose(cfg)).items():
        if name in BUFFERS:
            continue
        path = flax_path(name)
        if cfg.tie_embeddings and path[-2] == "proj" and path[-1] == "kernel":
            continue  # the decoder's embedding, stored twice by PyTorch
        node = params
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value.T if path[-1] == "kernel" else value
    return params


def tensors_from_params(params: Params, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """A run folder's model tensors (PyTorch names and layouts) from Flax parameters."""
    tensors = {}
    for path, value in _leaves(params):
        value = np.asarray(value)
        # np.array, not ascontiguousarray, which makes a 0-d parameter (a scale) 1-d
        tensors[torch_name(path)] = np.array(value.T if path[-1] == "kernel" else value, order="C")
    if cfg.tie_embeddings:
        proj = (
            "decoder.proj"
            if cfg.order == "luong" and cfg.attention != "none"
            else ("decoder.output.proj")
        )
        tensors[f"{proj}.weight"] = tensors["decoder.embed.weight"].copy()
    return tensors


def _leaves(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()):
    for key, value in tree.items():
        if isinstance(value, Mapping):
            yield from _leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


@dataclass
class FlaxCheckpoint(Header):
    """A checkpoint's header, its Flax model and the parameters it holds."""

    model: FlaxSeq2Seq
    params: Params


def build_model(cfg: ModelConfig, src_vocab: Vocab, tgt_vocab: Vocab) -> FlaxSeq2Seq:
    """The Flax model a config and its vocabularies describe; a copying model's table of
    where each source word copies to is made from them, as PyTorch's training makes it."""
    return FlaxSeq2Seq(
        cfg,
        len(src_vocab),
        len(tgt_vocab),
        pad_id=tgt_vocab.pad_id,
        bos_id=tgt_vocab.bos_id,
        eos_id=tgt_vocab.eos_id,
        unk_id=tgt_vocab.unk_id,
        copy_table=tuple(copy_table(src_vocab, tgt_vocab)) if cfg.copy else None,
    )


def load_flax(path: str | Path) -> FlaxCheckpoint:
    """The run folder (or .safetensors file) at `path` as a Flax model and parameters."""
    path = stored_path(path)
    with readable(path), safe_open(str(path), framework="numpy") as f:
        header = parse_header(path, f.metadata() or {})
        names = [name for name in f.keys() if not name.startswith(TRAIN_PREFIX)]  # noqa: SIM118
        tensors = {name: f.get_tensor(name) for name in names}
    cfg = header.config.model
    return FlaxCheckpoint(
        **vars(header),
        model=build_model(cfg, header.src_vocab, header.tgt_vocab),
        params=params_from_tensors(tensors, cfg),
    )


def save_flax(
    path: str | Path,
    params: Params,
    cfg: Config,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    step: int,
    *,
    tokenizers: tuple[Tokenizer, Tokenizer] | None = None,
    train_state: tuple[dict[str, np.ndarray], dict[str, Any]] | None = None,
) -> Path:
    """Write `path` (a run directory, or a .safetensors file) atomically, in the format the
    PyTorch side writes and reads; return the file.

    Args:
        train_state: tensors (stored under `TRAIN_PREFIX`) and JSON-ready values to resume
            from; None for a model-only checkpoint.
    """
    path = weights_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = tensors_from_params(params, cfg.model)
    if cfg.model.copy:  # the buffer PyTorch's model holds (Seq2Seq.copy_table)
        tensors["copy_table"] = np.array(copy_table(src_vocab, tgt_vocab), np.int64)
    metadata = header_metadata(cfg, src_vocab, tgt_vocab, step, tokenizers)
    if train_state is not None:
        tensors |= {TRAIN_PREFIX + k: np.ascontiguousarray(v) for k, v in train_state[0].items()}
        metadata["train_state"] = json.dumps(train_state[1])
    data = save(tensors, metadata=metadata)
    return publish(path, lambda tmp: tmp.write_bytes(data))


def load_flax_train_state(path: Path) -> tuple[Params, dict[str, np.ndarray], dict[str, Any]]:
    """The parameters, training-state tensors and JSON values stored at `path`."""
    with readable(path), safe_open(str(path), framework="numpy") as f:
        meta = f.metadata() or {}
        if "train_state" not in meta:
            raise ValueError(f"{path}: holds no training state to resume from")
        cfg = parse_header(path, meta).config.model
        model, state = {}, {}
        for name in f.keys():  # noqa: SIM118
            if name.startswith(TRAIN_PREFIX):
                state[name[len(TRAIN_PREFIX) :]] = f.get_tensor(name)
            else:
                model[name] = f.get_tensor(name)
    return (
        params_from_tensors(model, cfg),
        current_state_names(state, cfg),
        json.loads(meta["train_state"]),
    )


def current_state_names(state: Mapping[str, np.ndarray], cfg: ModelConfig) -> dict[str, Any]:
    """A Flax run's training state under today's parameter paths. optax's entries are named by
    their parameter's path (`opt...mu['decoder']['window']['W_p']['kernel']`), which moves
    as `registry.current_names` moves the parameter's own name in a run saved before the
    attention room."""
    paths = {}
    for name in state:
        head, mark, rest = name.partition("['")
        if mark:
            paths[name] = (head, ".".join(re.findall(r"\['([^']*)'\]", mark + rest)))
    dotted = {path for _, path in paths.values()}
    moved = {old: new for new, old in current_names({p: p for p in dotted}, compose(cfg)).items()}
    renamed = {}
    for name, value in state.items():
        if name in paths:
            head, path = paths[name]
            name = head + "".join(f"['{part}']" for part in moved[path].split("."))
        renamed[name] = value
    return renamed
