"""The models a server holds: each run folder given at start-up, loaded once, named by the
folder's name. Requests name a model, never a file. The weights a run kept during training
(its snapshots) are loaded when first asked for, on the decoding thread, and kept. Every
model and snapshot of a server sits on one device and decodes at one precision."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from alignmt.checkpoint.format import snapshot_steps
from alignmt.checkpoint.torch_io import Checkpoint, load_checkpoint, load_snapshot
from alignmt.config import Precision, SearchConfig, Weights
from alignmt.decoding.translator import Translator
from alignmt.serve.limits import RequestError, cut, invalid
from alignmt.serve.schemas import ModelInfo


@dataclass
class ServedModel:
    name: str
    translator: Translator
    info: ModelInfo
    folder: Path  # the run folder, where its snapshots are
    _snapshots: dict[int, Translator] = field(default_factory=dict, repr=False)

    def snapshot(self, step: int) -> Translator:
        """The run's weights kept at training `step`, searching as the served model does, on
        its device and at its precision."""
        if step not in self._snapshots:
            served = self.translator
            ckpt = load_snapshot(self.folder, step, device=served.device)
            self._snapshots[step] = Translator.from_checkpoint(
                ckpt, served.search, precision=served.precision
            )
        return self._snapshots[step]


def load_models(
    run_dirs: list[str | Path],
    *,
    device: torch.device | str = "cpu",
    precision: Precision = "float32",
    weights: Weights | None = None,
    shortlist: int | None = None,
) -> dict[str, ServedModel]:
    """Load each run folder (or .safetensors file); the first is the default model. RUN_A+RUN_B
    serves the runs as one ensemble, named so, for /v1/translate.

    Args:
        run_dirs: the run folders.
        device: where the models (and the snapshots asked for later) go.
        precision: what they decode at (see `device.autocast`).
        weights, shortlist: replace each run's `search.weights` and `search.shortlist`
            (None: keep the run's).

    Raises:
        ValueError: two folders share a name, or none is given.
        FileNotFoundError: a folder holds no checkpoint.
    """
    if not run_dirs:
        raise ValueError("serve needs at least one run folder")
    models: dict[str, ServedModel] = {}
    for spec in map(str, run_dirs):
        # RUN_A+RUN_B: an ensemble, unless a folder is named so
        runs = [spec] if Path(spec).exists() else spec.split("+")
        names = [_name(Path(run)) for run in runs]
        name = "+".join(names)
        if name in models:
            raise ValueError(f"two models would be named {name!r}: give folders distinct names")
        ckpts = [load_checkpoint(run, device=device) for run in runs]
        search = ckpts[0].config.search
        if weights is not None:
            search = replace(search, weights=weights)
        if shortlist is not None:
            search = replace(search, shortlist=shortlist)
        folder = Path(runs[0]).parent if runs[0].endswith(".safetensors") else Path(runs[0])
        if len(runs) == 1:
            translator = Translator.from_checkpoint(ckpts[0], search, precision=precision)
            info = model_info(name, ckpts[0], folder, search)
        else:
            translator = Translator.ensemble(ckpts, runs, search, precision=precision)
            info = model_info(name, ckpts[0], folder, search).model_copy(
                update={
                    "parameters": sum(p.numel() for p in translator.model.parameters()),
                    "validation_bleu": None,
                    "snapshots": [],
                    "ensemble": names,
                }
            )
        models[name] = ServedModel(name, translator, info, folder)
    return models


def _name(run: Path) -> str:
    return run.stem if run.suffix == ".safetensors" else run.name


def model_info(
    name: str, ckpt: Checkpoint, folder: Path, search: SearchConfig | None = None
) -> ModelInfo:
    """What /v1/models says of a checkpoint in run folder `folder`, served with `search`
    (default: the run's)."""
    m, data = ckpt.config.model, ckpt.config.data
    search = search or ckpt.config.search
    return ModelInfo(
        name=name,
        source_language=data.src_lang,
        target_language=data.tgt_lang,
        tokenizer=data.tokenizer if data.task == "corpus" else "char",
        cell=m.rnn,
        bidirectional=m.bidirectional,
        encoder_layers=m.enc_layers,
        decoder_layers=m.dec_layers,
        attention=m.attention,
        order=m.order,
        coverage=m.coverage,
        embedding_size=m.emb_dim,
        encoder_hidden=m.enc_hidden,
        decoder_hidden=m.dec_hidden,
        attention_hidden=m.attn_dim,
        source_vocabulary=len(ckpt.src_vocab),
        target_vocabulary=len(ckpt.tgt_vocab),
        parameters=sum(p.numel() for p in ckpt.model.parameters()),
        training_step=ckpt.step,
        validation_bleu=validation_bleu(folder / "metrics.jsonl", ckpt.step),
        beam_size=search.beam_size,
        weights=search.weights,
        shortlist=search.shortlist,
        snapshots=snapshot_steps(folder),
    )


def validation_bleu(metrics: Path, step: int) -> float | None:
    """The greedy validation BLEU that training recorded at `step`, if it did."""
    if not metrics.is_file():
        return None
    bleu = None
    for line in metrics.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a run killed mid-write leaves a partial last line
            continue
        if record.get("step") == step and "bleu" in record:
            bleu = float(record["bleu"])
    return bleu


def served(models: dict[str, ServedModel], name: str | None) -> ServedModel:
    """The model named `name` (None: the default); a 404 for a name not served."""
    if name is None:
        return next(iter(models.values()))
    if name not in models:
        message = f"no model named {cut(name)!r}; served: {', '.join(models)}"
        raise RequestError(404, "not_found", message, value=cut(name))
    return models[name]


def one_model(models: dict[str, ServedModel], name: str | None, path: str) -> ServedModel:
    """A served model that follows one decoder: not an ensemble."""
    model = served(models, name)
    if model.info.ensemble:
        message = (
            f"model {model.name!r} is an ensemble, which {path} cannot follow step by step; "
            f"ask one of its members ({', '.join(model.info.ensemble)})"
        )
        raise invalid("model", message, model.name)
    return model
