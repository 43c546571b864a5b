"""The models a server holds: each folder given at start-up, loaded once, named by the
folder's name. Requests name a model, never a file. A run folder is served by PyTorch; the
weights it kept during training (its snapshots) are loaded when first asked for, on the
decoding thread, and kept. A folder that `alignmt export` wrote is served by ONNX Runtime
(decoding/onnx_runtime.py), and a server of such folders alone never loads torch. Every
model and snapshot of a server sits on one device and decodes at one precision."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from alignmt.checkpoint.format import snapshot_steps
from alignmt.decoding.onnx_format import is_exported
from alignmt.serve.limits import RequestError, cut, invalid
from alignmt.serve.schemas import ModelInfo

if TYPE_CHECKING:
    from alignmt.checkpoint.torch_io import Checkpoint
    from alignmt.config import Config, Precision, SearchConfig, Weights
    from alignmt.decoding.onnx_runtime import OnnxModel, OnnxTranslator
    from alignmt.decoding.translator import Translator
    from alignmt.text.vocab import Vocab


@dataclass
class ServedModel:
    name: str
    translator: Translator | OnnxTranslator
    info: ModelInfo
    folder: Path  # the run folder, where its snapshots are
    _snapshots: dict[int, Translator] = field(default_factory=dict, repr=False)

    @property
    def exported(self) -> bool:
        """Whether ONNX Runtime serves it (an `alignmt export` folder): it translates only."""
        return self.info.runtime == "onnxruntime"

    def snapshot(self, step: int) -> Translator:
        """The run's weights kept at training `step`, searching as the served model does, on
        its device and at its precision."""
        if step not in self._snapshots:
            self._snapshots[step] = self.translator.snapshot(self.folder, step)
        return self._snapshots[step]


def load_models(
    run_dirs: list[str | Path],
    *,
    device: str = "cpu",
    precision: Precision = "float32",
    weights: Weights | None = None,
    shortlist: int | None = None,
) -> dict[str, ServedModel]:
    """Load each run folder (or .safetensors file, or exported folder); the first is the
    default model. RUN_A+RUN_B serves the runs as one ensemble, named so, for /v1/translate.

    Args:
        run_dirs: the folders.
        device: where the models (and the snapshots asked for later) go: "auto", "cpu",
            "cuda" or "cuda:N" (see `model.device.pick_device`); exported models run on the
            CPU.
        precision: what they decode at (see `device.autocast`).
        weights, shortlist: replace each run's `search.weights` and `search.shortlist`
            (None: keep the run's). An exported model runs its int8 graphs for
            weights="int8".

    Raises:
        ValueError: two folders share a name, none is given, or an exported folder is asked
            for what it cannot do.
        FileNotFoundError: a folder holds no checkpoint.
    """
    if not run_dirs:
        raise ValueError("serve needs at least one run folder")
    models: dict[str, ServedModel] = {}
    for spec in map(str, run_dirs):
        # RUN_A+RUN_B: an ensemble, unless a folder is named so
        runs = [spec] if Path(spec).exists() else spec.split("+")
        name = "+".join(_name(Path(run)) for run in runs)
        if name in models:
            raise ValueError(f"two models would be named {name!r}: give folders distinct names")
        if any(map(is_exported, runs)):
            models[name] = _exported(runs, name, device, precision, weights, shortlist)
        else:
            models[name] = _run(runs, name, device, precision, weights, shortlist)
    return models


def _run(
    runs: list[str],
    name: str,
    device: str,
    precision: Precision,
    weights: Weights | None,
    shortlist: int | None,
) -> ServedModel:
    """A run folder, or an ensemble of them, served by PyTorch."""
    # imported here, so that a server of exported models alone loads no torch
    from alignmt.checkpoint.torch_io import load_checkpoint
    from alignmt.decoding.translator import Translator
    from alignmt.model.device import pick_device

    where = pick_device(device)
    ckpts = [load_checkpoint(run, device=where) for run in runs]
    search = ckpts[0].config.search
    if weights is not None:
        search = replace(search, weights=weights)
    if shortlist is not None:
        search = replace(search, shortlist=shortlist)
    folder = Path(runs[0]).parent if runs[0].endswith(".safetensors") else Path(runs[0])
    if len(runs) == 1:
        translator = Translator.from_checkpoint(ckpts[0], search, precision=precision)
        return ServedModel(name, translator, model_info(name, ckpts[0], folder, search), folder)
    translator = Translator.ensemble(ckpts, runs, search, precision=precision)
    info = model_info(name, ckpts[0], folder, search).model_copy(
        update={
            "parameters": sum(p.numel() for p in translator.model.parameters()),
            "validation_bleu": None,
            "snapshots": [],
            "ensemble": [_name(Path(run)) for run in runs],
        }
    )
    return ServedModel(name, translator, info, folder)


def _exported(
    runs: list[str],
    name: str,
    device: str,
    precision: Precision,
    weights: Weights | None,
    shortlist: int | None,
) -> ServedModel:
    """A folder `alignmt export` wrote, served by ONNX Runtime on the CPU."""
    refused = [
        flag
        for flag, given in (
            ("an ensemble", len(runs) > 1),
            ("--device", device not in ("auto", "cpu")),
            ("--precision", precision != "float32"),
            ("--shortlist", bool(shortlist)),
        )
        if given
    ]
    if refused:
        raise ValueError(
            f"{'+'.join(runs)}: an exported model is served alone on the CPU, float32 or "
            f"(--weights int8) int8; not as {', '.join(refused)}: serve the run folder for that"
        )
    # imported here: ONNX Runtime is an extra ([runtime]), which a run folder does not need
    from alignmt.decoding.onnx_runtime import OnnxModel, OnnxTranslator

    model = OnnxModel(runs[0], int8=weights == "int8")
    translator = OnnxTranslator(model)
    return ServedModel(name, translator, exported_info(name, model), Path(runs[0]))


def _name(run: Path) -> str:
    return run.stem if run.suffix == ".safetensors" else run.name


def model_info(
    name: str, ckpt: Checkpoint, folder: Path, search: SearchConfig | None = None
) -> ModelInfo:
    """What /v1/models says of a checkpoint in run folder `folder`, served with `search`
    (default: the run's)."""
    search = search or ckpt.config.search
    return ModelInfo(
        name=name,
        **_described(ckpt.config, ckpt.src_vocab, ckpt.tgt_vocab),
        parameters=sum(p.numel() for p in ckpt.model.parameters()),
        training_step=ckpt.step,
        validation_bleu=validation_bleu(folder / "metrics.jsonl", ckpt.step),
        beam_size=search.beam_size,
        weights=search.weights,
        shortlist=search.shortlist,
        snapshots=snapshot_steps(folder),
    )


def exported_info(name: str, model: OnnxModel) -> ModelInfo:
    """What /v1/models says of an exported model (`alignmt export`): its run's settings, as
    the manifest keeps them."""
    header = model.header
    return ModelInfo(
        name=name,
        **_described(header.config, header.src_vocab, header.tgt_vocab),
        parameters=model.manifest["parameters"],
        training_step=header.step,
        validation_bleu=None,
        beam_size=header.config.search.beam_size,
        weights="int8" if model.int8 else "float32",
        snapshots=[],
        runtime="onnxruntime",
    )


def _described(config: Config, src_vocab: Vocab, tgt_vocab: Vocab) -> dict:
    """The fields of ModelInfo that a model's config and vocabularies give."""
    m, data = config.model, config.data
    return dict(
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
        source_vocabulary=len(src_vocab),
        target_vocabulary=len(tgt_vocab),
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
    if model.exported:
        message = (
            f"model {model.name!r} is an exported model (ONNX Runtime), which translates "
            f"only; {path} follows the decoder of a run folder: serve the run folder for it"
        )
        raise invalid("model", message, model.name)
    if model.info.ensemble:
        message = (
            f"model {model.name!r} is an ensemble, which {path} cannot follow step by step; "
            f"ask one of its members ({', '.join(model.info.ensemble)})"
        )
        raise invalid("model", message, model.name)
    return model
