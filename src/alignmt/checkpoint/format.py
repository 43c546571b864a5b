"""The run-folder format, read without torch: file names, the checkpoint header, snapshots.

A checkpoint is one safetensors file. Its string metadata holds everything needed to use the
model on raw text without the training code: the resolved config (YAML), the source and
target tokenizers and vocabularies (JSON), the step and the alignmt version that wrote it.
Its tensors are the model's weights under their `state_dict` names and, in `last.safetensors`
only, the training state under the prefix `TRAIN_PREFIX`. A run folder keeps

    model.safetensors                  the best model by the validation metric, or the last
    last.safetensors                   the newest weights and the state to resume from
    snapshots/step_NNNNNN.safetensors  model-only copies of the weights as they trained

This module reads headers and lists snapshots; building a model from the weights is
`torch_io`'s, and writing files atomically is `rundir`'s.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import yaml
from safetensors import SafetensorError, safe_open

from alignmt.config import Config, ConfigError, config_from_dict, dump_config
from alignmt.text.tokenize import CharTokenizer, Tokenizer, tokenizer_from_json
from alignmt.text.vocab import Vocab

log = logging.getLogger(__name__)


WEIGHTS = "model.safetensors"


LAST = "last.safetensors"


SNAPSHOTS = "snapshots"  # the folder of a run that holds its snapshots


_SNAPSHOT = re.compile(r"step_(\d+)\.safetensors")


TRAIN_PREFIX = "_train."  # prefix of training-state tensors; no parameter name starts with "_"


@cache
def alignmt_version() -> str:
    """The version of the alignmt installed, as its package metadata has it, which a
    checkpoint records; read there, not from the package face, which sits above this layer."""
    try:
        return version("alignmt")
    except PackageNotFoundError:
        # A source tree on PYTHONPATH, never installed: no version can be known, and a
        # made-up release number would claim one. "0+unknown" is a valid version (PEP 440)
        # that sorts below every release, so a reader that compares versions takes it as old.
        return "0+unknown"


@dataclass
class Header:
    """What a checkpoint says of itself, read without building the model."""

    config: Config
    src_vocab: Vocab
    tgt_vocab: Vocab
    step: int
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer


def load_header(path: str | Path) -> Header:
    """The config, vocabularies, tokenizers and step stored at `path`, without the weights."""
    path = stored_path(path)
    with readable(path), safe_open(str(path), framework="pt") as f:
        return parse_header(path, f.metadata() or {})


def header_metadata(
    cfg: Config,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    step: int,
    tokenizers: tuple[Tokenizer, Tokenizer] | None = None,
) -> dict[str, str]:
    """The string metadata every checkpoint carries, whichever framework writes it.

    Args:
        tokenizers: (source, target); None: characters, as the synthetic tasks use.
    """
    src_tok, tgt_tok = tokenizers or (CharTokenizer(), CharTokenizer())
    return {
        "alignmt": alignmt_version(),
        "config": dump_config(cfg),
        "src_vocab": src_vocab.to_json(),
        "tgt_vocab": tgt_vocab.to_json(),
        "step": str(step),
        "src_tokenizer": src_tok.to_json(),
        "tgt_tokenizer": tgt_tok.to_json(),
    }


def parse_header(path: Path, meta: dict[str, str]) -> Header:
    """The checkpoint's metadata parsed, or a ValueError naming the file and the field."""
    missing = {"config", "src_vocab", "tgt_vocab", "step"} - meta.keys()
    if missing:
        raise ValueError(f"{path}: not an alignmt checkpoint (metadata lacks {sorted(missing)})")
    written = meta.get("alignmt", "a version before 0.1.0")
    try:
        cfg = config_from_dict(yaml.safe_load(meta["config"]), source=f"{path} (stored config)")
    except (ConfigError, yaml.YAMLError) as err:
        raise ValueError(
            f"{err}; it was written by alignmt {written}, this is alignmt "
            f"{alignmt_version()}: a newer alignmt may read it"
        ) from None
    char = CharTokenizer().to_json()
    fields = {}
    for name, parse, default in [
        ("src_vocab", Vocab.from_json, None),
        ("tgt_vocab", Vocab.from_json, None),
        ("step", int, None),
        ("src_tokenizer", tokenizer_from_json, char),
        ("tgt_tokenizer", tokenizer_from_json, char),
    ]:
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
    changed = [
        f"model.{k}: {stored[k]!r} there, {asked[k]!r} now" for k in stored if stored[k] != asked[k]
    ]
    for side, there, now in (
        ("source", header.src_vocab, src_vocab),
        ("target", header.tgt_vocab, tgt_vocab),
    ):
        if there != now:
            changed.append(
                f"the {side} vocabulary: {len(there)} entries there, {len(now)} "
                f"built now{_first_difference(there, now)}"
            )
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


def weights_path(path: str | Path) -> Path:
    """Where to save `path`: itself, or a run directory's model."""
    path = Path(path)
    return path if path.suffix == ".safetensors" else path / WEIGHTS


def stored_path(path: str | Path) -> Path:
    """The checkpoint file to load for `path`: itself, or a run directory's model (or its
    last checkpoint while training has written no model yet, as after an early kill)."""
    found = weights_path(path)
    if not found.is_file() and (found.parent / LAST).is_file() and found.name == WEIGHTS:
        found = found.parent / LAST
        log.warning("%s has no %s yet: using %s", path, WEIGHTS, LAST)
    if not found.is_file():
        raise FileNotFoundError(f"{found}: no checkpoint here (expected a file training wrote)")
    return found


@contextmanager
def readable(path: Path) -> Iterator[None]:
    """A truncated, empty or foreign file becomes an error that says so, not a traceback."""
    try:
        yield
    except SafetensorError as err:
        raise ValueError(
            f"{path}: not a readable checkpoint ({err}); the file is truncated or damaged, or "
            "was not written by alignmt"
        ) from None


def as_tuples(value: Any) -> Any:
    """JSON turns the tuples of `random.getstate()` into lists; setstate wants tuples."""
    return tuple(as_tuples(v) for v in value) if isinstance(value, list) else value
