"""Save and load trained models: one safetensors file per checkpoint.

The file holds the weights as tensors and, in its string metadata, everything needed to
rebuild and use the model on raw text without the training code: the resolved config (YAML),
the source and target tokenizers and vocabularies (JSON) and the step. A run directory keeps
`model.safetensors` (the best model by the validation metric, or the last where there is
none) and `last.safetensors`, which also holds the training state (optimizer moments as
tensors under `_train.`, the rest as JSON) so that a killed run can resume. With
`train.snapshot_every` it also keeps `snapshots/step_NNNNNN.safetensors`, model-only
checkpoints of the weights as they trained. Train, evaluate and serve all load through here,
so serving never imports training code.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save
from torch import Tensor

from alignmt import __version__
from alignmt.config import Config, ConfigError, config_from_dict, dump_config
from alignmt.data import Vocab
from alignmt.model import Seq2Seq
from alignmt.rundir import publish
from alignmt.tokenize import CharTokenizer, Tokenizer, tokenizer_from_json

log = logging.getLogger(__name__)

WEIGHTS = "model.safetensors"
LAST = "last.safetensors"
SNAPSHOTS = "snapshots"  # the folder of a run that holds its snapshots
_SNAPSHOT = re.compile(r"step_(\d+)\.safetensors")
_TRAIN = "_train."  # prefix of training-state tensors; no parameter name starts with "_"


@dataclass
class Header:
    """What a checkpoint says of itself, read without building the model."""

    config: Config
    src_vocab: Vocab
    tgt_vocab: Vocab
    step: int
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer


@dataclass
class Checkpoint(Header):
    """A checkpoint's header and the model it describes, with its weights."""

    model: Seq2Seq  # in eval mode, on the device it was loaded to (the CPU by default)


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
    path = _weights_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # clone: safetensors refuses tensors that share memory, as tied embeddings do
    tensors = {name: t.detach().cpu().clone() for name, t in model.state_dict().items()}
    metadata = {
        "alignmt": __version__,
        "config": dump_config(cfg),
        "src_vocab": src_vocab.to_json(),
        "tgt_vocab": tgt_vocab.to_json(),
        "step": str(step),
    }
    src_tok, tgt_tok = tokenizers or (CharTokenizer(), CharTokenizer())
    metadata |= {"src_tokenizer": src_tok.to_json(), "tgt_tokenizer": tgt_tok.to_json()}
    if train_state is not None:
        tensors |= {_TRAIN + name: t.detach().cpu().clone() for name, t in train_state[0].items()}
        metadata["train_state"] = json.dumps(train_state[1])
    # bytes written by Python, so that a full disk raises OSError, which `publish` reports
    data = save(tensors, metadata=metadata)
    return publish(path, lambda tmp: tmp.write_bytes(data))


def load_checkpoint(path: str | Path, *, device: torch.device | str = "cpu") -> Checkpoint:
    """Rebuild the model stored at `path` (a .safetensors file, or a run directory: its
    model.safetensors, or last.safetensors while training has written no model yet) on
    `device`."""
    path = _stored_path(path)
    with _readable(path), safe_open(str(path), framework="pt") as f:
        header = _header(path, f.metadata() or {})
        names = [name for name in f.keys() if not name.startswith(_TRAIN)]  # noqa: SIM118
        tensors = {name: f.get_tensor(name) for name in names}
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
    return Checkpoint(**vars(header), model=model)


def load_header(path: str | Path) -> Header:
    """The config, vocabularies, tokenizers and step stored at `path`, without the weights."""
    path = _stored_path(path)
    with _readable(path), safe_open(str(path), framework="pt") as f:
        return _header(path, f.metadata() or {})


def _header(path: Path, meta: dict[str, str]) -> Header:
    """The checkpoint's metadata parsed, or a ValueError naming the file and the field."""
    missing = {"config", "src_vocab", "tgt_vocab", "step"} - meta.keys()
    if missing:
        raise ValueError(f"{path}: not an alignmt checkpoint (metadata lacks {sorted(missing)})")
    written = meta.get("alignmt", "a version before 0.1.0")
    try:
        cfg = config_from_dict(yaml.safe_load(meta["config"]), source=f"{path} (stored config)")
    except (ConfigError, yaml.YAMLError) as err:
        raise ValueError(f"{err}; it was written by alignmt {written}, this is alignmt "
                         f"{__version__}: a newer alignmt may read it") from None  # fmt: skip
    char = CharTokenizer().to_json()
    fields = {}
    for name, parse, default in [
        ("src_vocab", Vocab.from_json, None), ("tgt_vocab", Vocab.from_json, None),
        ("step", int, None), ("src_tokenizer", tokenizer_from_json, char),
        ("tgt_tokenizer", tokenizer_from_json, char),
    ]:  # fmt: skip
        try:
            fields[name] = parse(meta.get(name, default))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: its {name} is unreadable ({err})") from None
    return Header(cfg, **fields)


def check_same_model(path: Path, cfg: Config, src_vocab: Vocab, tgt_vocab: Vocab) -> None:
    """Refuse to resume the checkpoint at `path` into a different model: another
    architecture, or vocabularies built from other data or settings, would load wrongly or
    not at all."""
    if not path.is_file():
        return  # restore_train_state says so
    header = load_header(path)
    stored, asked = asdict(header.config.model), asdict(cfg.model)
    changed = [f"model.{k}: {stored[k]!r} there, {asked[k]!r} now" for k in stored
               if stored[k] != asked[k]]  # fmt: skip
    for side, there, now in (("source", header.src_vocab, src_vocab),
                             ("target", header.tgt_vocab, tgt_vocab)):  # fmt: skip
        if there != now:
            changed.append(f"the {side} vocabulary: {len(there)} entries there, {len(now)} "
                           f"built now{_first_difference(there, now)}")  # fmt: skip
    if changed:
        raise ValueError(
            f"{path}: cannot resume this checkpoint under the config given, which differs "
            f"in {'; '.join(changed)}. Resume with the run's own config.yaml and data, or "
            "start a new run"
        )


def _first_difference(there: Vocab, now: Vocab) -> str:
    for i, (a, b) in enumerate(zip(there.itos, now.itos, strict=False)):
        if a != b:
            return f" (entry {i} is {a!r} there, {b!r} now)"
    return ""


def snapshot_path(run_dir: str | Path, step: int) -> Path:
    """Where the run in `run_dir` keeps its weights of training step `step`."""
    return Path(run_dir) / SNAPSHOTS / f"step_{step:06d}.safetensors"


def snapshot_steps(run_dir: str | Path) -> list[int]:
    """The training steps whose weights the run in `run_dir` kept, in increasing order.

    Args:
        run_dir: a run directory.

    Returns:
        The steps; [] when the run kept no snapshots (or `run_dir` does not exist).
    """
    folder = Path(run_dir) / SNAPSHOTS
    # fullmatch skips the .tmp file of a snapshot being written
    found = (_SNAPSHOT.fullmatch(path.name) for path in folder.glob("step_*"))
    return sorted(int(match[1]) for match in found if match)


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
    return load_checkpoint(path, device=device)


def load_train_state(path: str | Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The training state `save_checkpoint` stored at `path`: (tensors, JSON values)."""
    path = Path(path)
    with _readable(path), safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if "train_state" not in meta:
            raise ValueError(f"{path}: holds no training state to resume from")
        names = [name for name in f.keys() if name.startswith(_TRAIN)]  # noqa: SIM118
        tensors = {name[len(_TRAIN) :]: f.get_tensor(name) for name in names}
    return tensors, json.loads(meta["train_state"])


def _weights_path(path: str | Path) -> Path:
    """Where to save `path`: itself, or a run directory's model."""
    path = Path(path)
    return path if path.suffix == ".safetensors" else path / WEIGHTS


def _stored_path(path: str | Path) -> Path:
    """The checkpoint file to load for `path`: itself, or a run directory's model (or its
    last checkpoint while training has written no model yet, as after an early kill)."""
    found = _weights_path(path)
    if not found.is_file() and (found.parent / LAST).is_file() and found.name == WEIGHTS:
        found = found.parent / LAST
        log.warning("%s has no %s yet: using %s", path, WEIGHTS, LAST)
    if not found.is_file():
        raise FileNotFoundError(f"{found}: no checkpoint here (expected a file training wrote)")
    return found


def load_weights(path: str | Path) -> dict[str, Tensor]:
    """The model tensors of the checkpoint file `path`, without any training state."""
    with _readable(Path(path)):
        return {k: v for k, v in load_file(str(path)).items() if not k.startswith(_TRAIN)}


@contextmanager
def _readable(path: Path) -> Iterator[None]:
    """A truncated, empty or foreign file becomes an error that says so, not a traceback."""
    try:
        yield
    except SafetensorError as err:
        raise ValueError(
            f"{path}: not a readable checkpoint ({err}); the file is truncated or damaged, or "
            "was not written by alignmt"
        ) from None


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
    tensors = {f"rng.{rank}.{kind}": state for rank, states in enumerate(rngs)
               for kind, state in states.items()}  # fmt: skip
    for param, moments in opt["state"].items():
        tensors |= {f"optim.{param}.{name}": value for name, value in moments.items()}
    values = {"progress": progress, "param_groups": opt["param_groups"],
              "python_rng": random.getstate()}  # fmt: skip
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
    model.load_state_dict(load_weights(path))
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


def as_tuples(value: Any) -> Any:
    """JSON turns the tuples of `random.getstate()` into lists; setstate wants tuples."""
    return tuple(as_tuples(v) for v in value) if isinstance(value, list) else value
