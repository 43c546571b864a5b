"""Save and load checkpoints as PyTorch models (the format is `format`'s).

Train, evaluate and serve all load through here, so serving never imports training code.
Files are written beside their final name and renamed into place (`rundir.publish`), so a run
killed mid-write, or a write that fails, leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save
from torch import Tensor

from alignmt.checkpoint.format import (
    TRAIN_PREFIX,
    Header,
    as_tuples,
    header_metadata,
    parse_header,
    readable,
    snapshot_path,
    snapshot_steps,
    stored_path,
    weights_path,
)
from alignmt.checkpoint.rundir import publish
from alignmt.checkpoint.shortlist_io import load_shortlist
from alignmt.config import Config
from alignmt.model.attention.registry import compose, current_names
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.shortlist import Shortlist
from alignmt.text.tokenize import Tokenizer
from alignmt.text.vocab import Vocab


@dataclass
class Checkpoint(Header):
    """A checkpoint's header and the model it describes, with its weights."""

    model: Seq2Seq  # in eval mode, on the device it was loaded to (the CPU by default)
    shortlist: Shortlist | None = None  # the run folder's, when training built one


def save_checkpoint(
    path: str | Path,
    model: Seq2Seq,
    cfg: Config,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    step: int,
    *,
    tokenizers: tuple[Tokenizer, Tokenizer] | None = None,
    train_state: tuple[dict[str, Tensor], dict[str, Any]] | None = None,
) -> Path:
    """Write `path` (a run directory, or a .safetensors file) atomically; return the file.

    The file is written next to its final name and renamed into place (`rundir.publish`), so
    a run killed mid-write, or a write that fails, leaves the previous checkpoint intact.

    Args:
        tokenizers: (source, target); None: characters, as the synthetic tasks use.
        train_state: tensors and JSON-ready values to resume training from (see
            `load_train_state`); None for a model-only checkpoint.
    """
    path = weights_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # clone: safetensors refuses tensors that share memory, as tied embeddings do
    tensors = {name: t.detach().cpu().clone() for name, t in model.state_dict().items()}
    metadata = header_metadata(cfg, src_vocab, tgt_vocab, step, tokenizers)
    if train_state is not None:
        tensors |= {
            TRAIN_PREFIX + name: t.detach().cpu().clone() for name, t in train_state[0].items()
        }
        metadata["train_state"] = json.dumps(train_state[1])
    # bytes written by Python, so that a full disk raises OSError, which `publish` reports
    data = save(tensors, metadata=metadata)
    return publish(path, lambda tmp: tmp.write_bytes(data))


def load_checkpoint(
    path: str | Path, *, device: torch.device | str = "cpu", run_dir: Path | None = None
) -> Checkpoint:
    """Rebuild the model stored at `path` (a .safetensors file, or a run directory: its
    model.safetensors, or last.safetensors while training has written no model yet) on
    `device`, with the shortlist of `run_dir` (default: the folder of the file)."""
    path = stored_path(path)
    with readable(path), safe_open(str(path), framework="pt") as f:
        header = parse_header(path, f.metadata() or {})
        names = [name for name in f.keys() if not name.startswith(TRAIN_PREFIX)]  # noqa: SIM118
        tensors = {name: f.get_tensor(name) for name in names}
    tensors = current_names(tensors, compose(header.config.model))
    vocab = header.tgt_vocab
    model = Seq2Seq.from_config(
        header.config.model,
        src_vocab=len(header.src_vocab),
        tgt_vocab=len(vocab),
        pad_id=vocab.pad_id,
        bos_id=vocab.bos_id,
        eos_id=vocab.eos_id,
    )
    try:
        model.load_state_dict(tensors)
    except RuntimeError as err:  # missing, extra or misshapen tensors
        problem = str(err).splitlines()[1].strip() if "\n" in str(err) else str(err)
        raise ValueError(
            f"{path}: its weights do not fit the model its config and vocabularies describe "
            f"({problem}); the file was damaged or edited"
        ) from None
    model = model.to(device).eval()
    shortlist = load_shortlist(path.parent if run_dir is None else run_dir)
    return Checkpoint(**vars(header), model=model, shortlist=shortlist)


def load_snapshot(
    run_dir: str | Path, step: int, *, device: torch.device | str = "cpu"
) -> Checkpoint:
    """Rebuild the model as it was at training step `step` of the run in `run_dir`.

    Args:
        run_dir: a run directory trained with `train.snapshot_every` > 0.
        step: one of `snapshot_steps(run_dir)`.
        device: where to put the model.

    Returns:
        The snapshot as a Checkpoint (model in eval mode, config, vocabularies, `step`).

    Raises:
        FileNotFoundError: naming the path and the steps there are, when `step` has none.
    """
    path = snapshot_path(run_dir, step)
    if not path.is_file():
        steps = snapshot_steps(run_dir)
        have = f"steps {', '.join(map(str, steps))}" if steps else "none (train.snapshot_every=0)"
        raise FileNotFoundError(f"{path}: no snapshot of step {step}; this run kept {have}")
    return load_checkpoint(path, device=device, run_dir=Path(run_dir))


def load_train_state(path: str | Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The training state `save_checkpoint` stored at `path`: (tensors, JSON values)."""
    path = Path(path)
    with readable(path), safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if "train_state" not in meta:
            raise ValueError(f"{path}: holds no training state to resume from")
        names = [name for name in f.keys() if name.startswith(TRAIN_PREFIX)]  # noqa: SIM118
        tensors = {name[len(TRAIN_PREFIX) :]: f.get_tensor(name) for name in names}
    return tensors, json.loads(meta["train_state"])


def load_weights(path: str | Path) -> dict[str, Tensor]:
    """The model tensors of the checkpoint file `path`, without any training state."""
    with readable(Path(path)):
        return {k: v for k, v in load_file(str(path)).items() if not k.startswith(TRAIN_PREFIX)}


def rng_states(device: torch.device) -> dict[str, Tensor]:
    """This process's torch generator states: the CPU's, and its GPU's when it trains on one
    (dropout masks are drawn there)."""
    states = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def set_rng_states(states: dict[str, Tensor], device: torch.device) -> None:
    """Inverse of `rng_states`; a CUDA state is restored only onto a CUDA device."""
    torch.set_rng_state(states["torch"])
    if "cuda" in states and device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"], device)


def capture_train_state(
    optimizer: torch.optim.Optimizer, progress: dict[str, Any], rngs: list[dict[str, Tensor]]
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """What resuming needs besides the weights, as (tensors, JSON values) for
    `save_checkpoint`: Adam's moments, the generator states of every process (`rngs`, in
    rank order, from `rng_states`), Python's, and the loop's `progress`."""
    opt = optimizer.state_dict()
    tensors = {
        f"rng.{rank}.{kind}": state
        for rank, states in enumerate(rngs)
        for kind, state in states.items()
    }
    for param, moments in opt["state"].items():
        tensors |= {f"optim.{param}.{name}": value for name, value in moments.items()}
    values = {
        "progress": progress,
        "param_groups": opt["param_groups"],
        "python_rng": random.getstate(),
    }
    return tensors, values


def restore_train_state(
    path: Path, model: Seq2Seq, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, Any], list[dict[str, Tensor]]]:
    """Load weights, optimizer and Python's RNG state from `path`.

    Returns:
        The stored progress, and the torch generator states of each process in rank order
        (for `set_rng_states`; a run saved before they were kept per process has rank 0's).
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path}: nothing to resume (no last checkpoint in this run)")
    tensors, values = load_train_state(path)
    if values.get("backend", "torch") != "torch":
        raise ValueError(
            f"{path}: was trained with train.engine={values['backend']}, whose optimiser state "
            "train.engine=torch cannot resume; resume it with "
            f"train.engine={values['backend']}, or start a new run"
        )
    weights = load_weights(path)
    current = current_names(weights, model.composition)
    _check_moments_line_up(path, current.keys() != weights.keys(), model)
    model.load_state_dict(current)
    moments: dict[int, dict[str, Tensor]] = {}
    rngs: dict[int, dict[str, Tensor]] = {}
    for name, value in tensors.items():
        if name.startswith("optim."):
            _, param, key = name.split(".")
            moments.setdefault(int(param), {})[key] = value
        elif name == "rng.torch":
            rngs[0] = {"torch": value}
        elif name.startswith("rng."):
            _, rank, kind = name.split(".")
            rngs.setdefault(int(rank), {})[kind] = value
    optimizer.load_state_dict({"state": moments, "param_groups": values["param_groups"]})
    random.setstate(as_tuples(values["python_rng"]))
    return values["progress"], [rngs[rank] for rank in sorted(rngs)]


def _check_moments_line_up(path: Path, before_the_room: bool, model: Seq2Seq) -> None:
    """Refuse a run saved before the attention room whose parameters have moved in order
    since: its optimiser moments, stored by position, would be given to other weights."""
    moved = [spec.about for spec in model.composition or () if spec.reordered]
    if before_the_room and moved:
        raise ValueError(
            f"{path}: was saved by an alignmt that stored the {moved[0]} weights elsewhere, "
            "and its optimiser state no longer lines up with this model's parameters, so it "
            "cannot be resumed; its weights still load to translate, evaluate and explore, "
            "or start a new run"
        )
