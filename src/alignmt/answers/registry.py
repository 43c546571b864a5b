"""The models an answerer holds: each folder given at start-up, opened once through the door
(`decoding.door.open_translator`) and named by the folder's name. Requests name a model,
never a file. A run folder runs on the torch engine, or the flax one; the weights it kept
during training (its snapshots) are opened when first asked for, on the decoding thread,
and kept. A folder that `alignmt export` wrote runs on ONNX Runtime, and a server of such
folders alone never loads torch. Every model and snapshot of a server sits on one device
and decodes at one precision."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from alignmt.answers.limits import RequestError, cut, invalid
from alignmt.answers.schemas import ModelInfo
from alignmt.checkpoint.format import snapshot_steps
from alignmt.decoding.door import open_translator
from alignmt.decoding.engine import Unavailable
from alignmt.decoding.exported import is_exported
from alignmt.model.attention.registry import compose

if TYPE_CHECKING:
    from alignmt.config import Config, Precision, Weights
    from alignmt.decoding.translator import Translator
    from alignmt.text.vocab import Vocab


@dataclass
class ServedModel:
    name: str
    translator: Translator
    info: ModelInfo
    _snapshots: dict[int, Translator] = field(default_factory=dict, repr=False)

    def snapshot(self, step: int) -> Translator:
        """The run's weights kept at training `step`, searching as the served model does, on
        its device and at its precision."""
        if step not in self._snapshots:
            self._snapshots[step] = self.translator.snapshot(step)
        return self._snapshots[step]


def load_models(
    run_dirs: list[str | Path],
    *,
    device: str = "cpu",
    precision: Precision = "float32",
    weights: Weights | None = None,
    shortlist: int | None = None,
    engine: str = "torch",
) -> dict[str, ServedModel]:
    """Open each run folder (or .safetensors file, or exported folder); the first is the
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
        engine: what run folders decode on, "torch" or "flax"; an exported folder runs on
            ONNX Runtime whatever this says.

    Raises:
        ValueError: two folders share a name, none is given, or a model is asked for what
            its engine cannot do (`engine.Unavailable`).
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
        on = "auto" if engine == "torch" or any(is_exported(run) for run in runs) else engine
        translator = open_translator(
            runs, engine=on, device=device, precision=precision, weights=weights,
            shortlist=shortlist,
        )  # fmt: skip
        members = [_name(Path(run)) for run in runs] if len(runs) > 1 else None
        models[name] = ServedModel(name, translator, model_info(name, translator, members))
    return models


def _name(run: Path) -> str:
    return run.stem if run.suffix == ".safetensors" else run.name


def model_info(name: str, translator: Translator, members: list[str] | None = None) -> ModelInfo:
    """What /v1/models says of a model, served as `translator` searches; `members` names
    an ensemble's runs. An exported model or an ensemble records no validation BLEU and
    keeps no snapshots."""
    origin, search, engine = translator.origin, translator.search, translator.engine
    header, folder = origin.header, origin.folder
    own_run = origin.reopen is not None  # a run folder of its own, whose snapshots open
    return ModelInfo(
        name=name,
        **_described(header.config, header.src_vocab, header.tgt_vocab),
        parameters=engine.parameters,
        training_step=header.step,
        validation_bleu=validation_bleu(folder / "metrics.jsonl", header.step) if own_run else None,
        beam_size=search.beam_size,
        weights=search.weights,
        shortlist=search.shortlist,
        snapshots=snapshot_steps(folder) if own_run else [],
        ensemble=members,
        engine=engine.name,
    )


def _described(config: Config, src_vocab: Vocab, tgt_vocab: Vocab) -> dict:
    """The fields of ModelInfo that a model's config and vocabularies give."""
    m, data = config.model, config.data
    composition = compose(m)
    return dict(
        source_language=data.src_lang,
        target_language=data.tgt_lang,
        tokenizer=data.tokenizer if data.task == "corpus" else "char",
        cell=m.rnn,
        bidirectional=m.bidirectional,
        encoder_layers=m.enc_layers,
        decoder_layers=m.dec_layers,
        attention=m.attention,
        mechanisms=[] if composition is None else composition.about,
        shown=[] if composition is None else [asdict(s) for s in composition.shown],
        order=m.order,
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
    """A served model whose engine steps through its decoder (not an exported model or an
    ensemble), or the request's 422 saying why not."""
    model = served(models, name)
    try:
        model.translator.engine.require(["stepping through the decoder"])
    except Unavailable as refusal:
        members = f" ({', '.join(model.info.ensemble)})" if model.info.ensemble else ""
        message = f"model {model.name!r}: {path} follows the decoder step by step; {refusal}"
        raise invalid("model", message + members, model.name) from None
    return model
