"""Save and load trained models: one safetensors file per checkpoint.

The file holds the weights as tensors and, in its string metadata, everything needed to
rebuild and use the model without the training code: the resolved config (YAML), the source
and target vocabularies (JSON) and the step. Train, evaluate and serve all load through here,
so serving never imports training code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from safetensors import safe_open
from safetensors.torch import save_file

from alignmt.config import Config, config_from_dict, dump_config
from alignmt.data import Vocab
from alignmt.model import Seq2Seq

WEIGHTS = "model.safetensors"


@dataclass
class Checkpoint:
    model: Seq2Seq  # in eval mode, on the CPU
    config: Config
    src_vocab: Vocab
    tgt_vocab: Vocab
    step: int


def save_checkpoint(
    path: str | Path, model: Seq2Seq, cfg: Config, src_vocab: Vocab, tgt_vocab: Vocab, step: int
) -> Path:
    """Write `path` (a run directory, or a .safetensors file) atomically; return the file.

    The file is written next to its final name and renamed into place, so a run killed
    mid-write leaves the previous checkpoint intact.
    """
    path = _weights_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().cpu().contiguous() for name, t in model.state_dict().items()}
    metadata = {
        "config": dump_config(cfg),
        "src_vocab": src_vocab.to_json(),
        "tgt_vocab": tgt_vocab.to_json(),
        "step": str(step),
    }
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=metadata)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Rebuild the model stored at `path` (a run directory or a .safetensors file)."""
    path = _weights_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no checkpoint here (expected a file written by training)")
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (not a dict)
    missing = {"config", "src_vocab", "tgt_vocab", "step"} - meta.keys()
    if missing:
        raise ValueError(f"{path}: not an alignmt checkpoint (metadata lacks {sorted(missing)})")
    cfg = config_from_dict(yaml.safe_load(meta["config"]), source=f"{path} (stored config)")
    src_vocab, tgt_vocab = Vocab.from_json(meta["src_vocab"]), Vocab.from_json(meta["tgt_vocab"])
    model = Seq2Seq.from_config(
        cfg.model,
        src_vocab=len(src_vocab),
        tgt_vocab=len(tgt_vocab),
        pad_id=tgt_vocab.pad_id,
        bos_id=tgt_vocab.bos_id,
        eos_id=tgt_vocab.eos_id,
    )
    model.load_state_dict(tensors)
    return Checkpoint(model.eval(), cfg, src_vocab, tgt_vocab, int(meta["step"]))


def _weights_path(path: str | Path) -> Path:
    path = Path(path)
    return path if path.suffix == ".safetensors" else path / WEIGHTS
