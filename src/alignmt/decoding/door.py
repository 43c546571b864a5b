"""The one door to a model: `open_translator(path)` gives the `Translator` of a run folder, a
checkpoint file, several of them as an ensemble, or a folder `alignmt export` wrote, on
whichever engine runs it (decoding/engine.py). The command line, the server, the notebook,
evaluation and the benchmarks all open models here.

What the model must do is checked against its engine's table before anything is loaded:
an exported folder runs on ONNX Runtime, on the CPU, in float32 or int8; every engine
ensembles (run folders on PyTorch or Flax, exported ones on ONNX Runtime) and decodes over a
shortlist, and bfloat16 is PyTorch's and Flax's. Each engine's framework is imported only
when a model needs it, so that opening an exported folder loads neither torch nor JAX.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from alignmt.checkpoint.format import Header
from alignmt.config import Precision, SearchConfig
from alignmt.decoding.engine import FEATURES, EngineName, Feature, Unavailable
from alignmt.decoding.exported import STEP, has_int8, is_exported
from alignmt.decoding.translator import Origin, Translator

if TYPE_CHECKING:
    from alignmt.checkpoint.torch_io import Checkpoint
    from alignmt.text.shortlist import Shortlist

log = logging.getLogger(__name__)
Asked = Literal["auto", "torch", "flax", "onnxruntime"]


def open_translator(
    path: str | Path | Checkpoint | Sequence[str | Path | Checkpoint],
    *,
    engine: Asked = "auto",
    device: str = "auto",
    precision: Precision = "float32",
    search: SearchConfig | None = None,
    needs: Iterable[Feature] = (),
    threads: int = 0,
    **changes: Any,
) -> Translator:
    """The translator of the model at `path`.

    Args:
        path: a run folder, a .safetensors checkpoint or an exported folder, or a
            checkpoint already loaded (`load_checkpoint`: it decodes where its model is); a
            list of run folders or checkpoints decodes as one ensemble (the torch engine's),
            and a list of exported folders as one on ONNX Runtime.
        engine: "auto" runs an exported folder on ONNX Runtime and the rest on PyTorch;
            "flax" runs a run folder on JAX/Flax.
        device: "auto", "cpu", "cuda" or "cuda:N" (auto: a GPU when the framework sees one;
            ONNX Runtime runs on the CPU).
        precision: "float32", or "bfloat16" (PyTorch's autocast; Flax's weights in it).
        search: the search to use instead of the model's stored one.
        needs: what the caller will ask of the translator (sampling, constrained search,
            ...), refused with the rest before anything is loaded.
        threads: the CPU threads the engine computes with; 0: its framework's default.
            PyTorch's are the process's (`torch.set_num_threads`); ONNX Runtime's are its
            sessions'; JAX fixes its own when it starts, so the flax engine refuses any.
        **changes: `SearchConfig` fields to change (beam_size, weights, shortlist,
            coverage_penalty, replace_unk, ...); None leaves a field as stored.

    Raises:
        Unavailable: the engine cannot do what is asked (int8 weights on Flax, a GPU or
            bfloat16 for ONNX Runtime, ...).
        ValueError, FileNotFoundError: naming the folder that holds no model, or a broken one.
    """
    paths = list(path) if isinstance(path, list | tuple) else [path]
    if not paths:
        raise ValueError("open_translator needs at least one folder")
    name = _engine_for(paths, engine)
    changes = {key: value for key, value in changes.items() if value is not None}
    asked = _asked(device, precision, len(paths)) + _searches(search, changes) + list(needs)
    _check(name, asked)
    if threads < 0:
        raise ValueError(f"threads must be 0 (the framework's default) or more, got {threads}")
    if name == "onnxruntime":  # on the CPU, in float32 or int8: the checks said so
        return _onnx(paths, search, changes, threads)
    if name == "flax":
        if threads:
            raise ValueError(
                f"threads={threads}: JAX fixes its CPU threads when it starts, and the flax "
                "engine cannot change them: leave threads at 0"
            )
        return _flax(paths, device, precision, search, changes)
    if threads:
        import torch

        torch.set_num_threads(threads)
    return _torch(paths, device=device, precision=precision, changes=changes, search=search)


def _engine_for(paths: list[str | Path], asked: Asked) -> EngineName:
    """The engine that runs these folders, as asked; an exported folder is ONNX Runtime's."""
    exported = [p for p in paths if isinstance(p, str | Path) and is_exported(p)]
    loaded = [p for p in paths if not isinstance(p, str | Path)]
    if loaded and asked not in ("auto", "torch"):
        raise ValueError(f"a checkpoint loaded in memory runs on the torch engine, not {asked}")
    if exported and asked not in ("auto", "onnxruntime"):
        raise ValueError(f"{exported[0]}: an exported model runs on ONNX Runtime, not {asked}")
    if exported and len(exported) < len(paths):
        raise ValueError(
            f"{exported[0]}: an exported model ensembles with exported models only, on ONNX "
            "Runtime; export the other members too, or ensemble their run folders"
        )
    if asked == "onnxruntime" and not exported:
        raise ValueError(f"{paths[0]}: not an exported folder; `alignmt export` writes one")
    if exported:
        return "onnxruntime"
    return "torch" if asked == "auto" else asked


def _asked(device: str, precision: str, models: int) -> list[Feature]:
    """What opening a model this way asks of its engine."""
    asked: list[Feature] = []
    if models > 1:
        asked.append("an ensemble")
    if device not in ("auto", "cpu"):
        asked.append("a GPU")
    if precision != "float32":
        asked.append("bfloat16")
    return asked


def _check(name: EngineName, asked: list[Feature]) -> None:
    """Refuse, as the engine's table says, what the engine cannot do; before any loading."""
    for feature in asked:
        if feature not in FEATURES[name]:
            raise Unavailable.of(feature, name)


# What a search may ask that not every engine does: (feature, field, its value for "off").
_SEARCH_FEATURES: list[tuple[Feature, str, Any]] = [
    ("int8", "weights", "float32"),
    ("a shortlist", "shortlist", 0),
    ("the coverage penalty", "coverage_penalty", 0.0),
]


def _searches(search: SearchConfig | None, changes: dict) -> list[Feature]:
    """What the caller's own search settings ask (not the model's stored ones)."""
    given = vars(search) if search is not None else {}
    given = {**given, **changes}
    return [f for f, field, off in _SEARCH_FEATURES if given.get(field, off) != off]


def _search_of(
    name: EngineName, stored: SearchConfig, search: SearchConfig | None, changes: dict
) -> SearchConfig:
    """The search to run: `search` (or the stored one) with `changes`. What the engine cannot
    do was refused where the caller asked for it (`open_translator`); where only the
    model's stored search has it (a run that searched with a shortlist, exported), it is
    turned off, with a warning."""
    out = replace(search or stored, **changes)
    for feature, field, off in _SEARCH_FEATURES:
        if getattr(out, field) == off or feature in FEATURES[name]:
            continue
        log.warning(
            "the model searches with search.%s=%s, which the %s engine does not do: "
            "decoding without it",
            field,
            getattr(out, field),
            name,
        )
        out = replace(out, **{field: off})
    return out


def _torch(
    paths: list[str | Path | Checkpoint],
    *,
    device: str,
    precision: Precision,
    changes: dict,
    search: SearchConfig | None,
    run_dir: Path | None = None,
) -> Translator:
    """Run folders or checkpoints on PyTorch; several as one ensemble."""
    from alignmt.decoding.torch_engine.engine import TorchEngine
    from alignmt.decoding.torch_engine.ensemble import Ensemble
    from alignmt.model.device import pick_device

    where = pick_device(device)
    ckpts = [_loaded(p, where, run_dir) for p in paths]
    if len(ckpts) > 1:
        check_shared(ckpts, [_named(p, i) for i, p in enumerate(paths)])
    first = ckpts[0]
    search = _search_of("torch", first.config.search, search, changes)
    model = first.model if len(ckpts) == 1 else Ensemble([c.model for c in ckpts])
    vocabs = (first.src_vocab, first.tgt_vocab)
    engine = TorchEngine(
        model, search=search, vocabs=vocabs, precision=precision, shortlist=first.shortlist
    )
    folder = run_dir or _folder(paths[0])  # None for a checkpoint given loaded

    def reopen(step: int, search: SearchConfig) -> Translator:
        from alignmt.checkpoint.format import snapshot_path

        snapshot = _existing_snapshot(folder, step, snapshot_path(folder, step))
        return _torch(
            [snapshot], device=str(where), precision=precision, changes={}, search=search,
            run_dir=folder,
        )  # fmt: skip

    return _translator(
        engine, search, Origin(folder, first, reopen if len(ckpts) == 1 and folder else None)
    )


def check_shared(ckpts: Sequence[Header], names: Sequence[str]) -> None:
    """Refuse an ensemble's members (checkpoints, or exported folders' headers) that do not
    share tokenizers and vocabularies (so that they read the same source ids and write the
    same target ones), naming the one that differs by `names`."""
    first = ckpts[0]
    for name, ckpt in zip(names[1:], ckpts[1:], strict=True):
        for side, ours, theirs in (
            ("target vocabulary", first.tgt_vocab, ckpt.tgt_vocab),
            ("source vocabulary", first.src_vocab, ckpt.src_vocab),
            ("target tokenizer", first.tgt_tokenizer.to_json(), ckpt.tgt_tokenizer.to_json()),
            ("source tokenizer", first.src_tokenizer.to_json(), ckpt.src_tokenizer.to_json()),
        ):
            if ours != theirs:
                raise ValueError(
                    f"{name}: its {side} differs from that of {names[0]}; an ensemble's "
                    "models must be trained on the same data with the same tokenizer and "
                    "vocabulary settings"
                )


def _existing_snapshot(folder: Path, step: int, path: Path) -> Path:
    """`path`, the snapshot of `step`; a FileNotFoundError naming the steps kept if none."""
    from alignmt.checkpoint.format import snapshot_steps

    if not path.is_file():
        steps = snapshot_steps(folder)
        have = f"steps {', '.join(map(str, steps))}" if steps else "none (train.snapshot_every=0)"
        raise FileNotFoundError(f"{path}: no snapshot of step {step}; this run kept {have}")
    return path


def _flax(
    paths: list[str | Path],
    device: str,
    precision: Precision,
    search: SearchConfig | None,
    changes: dict,
) -> Translator:
    """A run folder or checkpoint on JAX/Flax, in float32 or bfloat16; several as one
    ensemble."""
    try:
        import jax

        from alignmt.checkpoint.flax_io import load_flax
        from alignmt.checkpoint.shortlist_io import load_shortlist
        from alignmt.decoding.flax_engine.engine import FlaxEngine
        from alignmt.decoding.flax_engine.ensemble import FlaxEnsemble
        from alignmt.model.flax_device import jax_device
    except ImportError as missing:
        raise ValueError(f"the flax engine needs the [flax] extra ({missing})") from None
    where = jax_device(device)  # a bad --device is said before the weights are read
    ckpts = [load_flax(path) for path in paths]
    ckpt = ckpts[0]
    search = _search_of("flax", ckpt.config.search, search, changes)
    if len(ckpts) == 1:
        model, params = ckpt.model, ckpt.params
    else:
        check_shared(ckpts, [_named(p, i) for i, p in enumerate(paths)])
        model = FlaxEnsemble(tuple(c.model for c in ckpts))
        params = {f"members_{i}": c.params for i, c in enumerate(ckpts)}
    header = Header(**{f.name: getattr(ckpt, f.name) for f in fields(Header)})  # no weights
    listed = _shortlist(search, load_shortlist(_folder(paths[0])), header)
    engine = FlaxEngine(model, jax.device_put(params, where), listed, precision)
    return _translator(engine, search, Origin(_folder(paths[0]), header))


def _onnx(
    paths: list[str | Path], search: SearchConfig | None, changes: dict, threads: int = 0
) -> Translator:
    """A folder `alignmt export` wrote, on ONNX Runtime and NumPy: float32, or its int8
    graphs where the search asks for int8 weights; several as one ensemble."""
    from alignmt.checkpoint.shortlist_io import load_shortlist
    from alignmt.decoding.onnx_engine.engine import OnnxEngine
    from alignmt.decoding.onnx_engine.ensemble import OnnxEnsemble
    from alignmt.decoding.onnx_engine.model import OnnxModel

    path = paths[0]
    header = OnnxModel.read_header(path)
    asked_int8 = "int8" in _searches(search, changes)
    search = _search_of("onnxruntime", header.config.search, search, changes)
    if not (Path(path) / STEP).is_file() and has_int8(path):  # `alignmt export --web` chose int8
        search = replace(search, weights="int8")
    if search.weights == "int8" and not asked_int8 and not has_int8(path):
        log.warning(
            "the model searches with search.weights=int8, but %s has no int8 graphs "
            "(`alignmt export --int8` writes them): decoding in float32",
            path,
        )
        search = replace(search, weights="float32")
    int8 = search.weights == "int8"
    listed = _shortlist(search, load_shortlist(path), header)
    if len(paths) > 1:
        names = [_named(p, i) for i, p in enumerate(paths)]
        check_shared([OnnxModel.read_header(p) for p in paths], names)
        models = [OnnxModel(p, threads=threads, int8=int8) for p in paths]
        engine = OnnxEngine(OnnxEnsemble(models, names), listed)
    else:
        engine = OnnxEngine(OnnxModel(path, threads=threads, int8=int8), listed)
    return _translator(engine, search, Origin(Path(path), header))


def _shortlist(
    search: SearchConfig, shortlist: Shortlist | None, header: Header
) -> Shortlist | None:
    """The words each sentence may output, as `search.shortlist` asks of the model's
    shortlist (the first member's, for an ensemble: they share vocabularies); None: all."""
    from alignmt.decoding.shortlisted import fitting

    if not search.shortlist:
        return None
    vocabs = (header.src_vocab, header.tgt_vocab)
    return fitting(search.shortlist, shortlist, vocabs, header.config.model)


def _translator(engine: Any, search: SearchConfig, origin: Origin) -> Translator:
    """The translator of `engine`, with the tokenizers and vocabularies of its origin."""
    header = origin.header
    return Translator(
        engine,
        tokenizers=(header.src_tokenizer, header.tgt_tokenizer),
        vocabs=(header.src_vocab, header.tgt_vocab),
        search=search,
        origin=origin,
    )


def _loaded(given: str | Path | Checkpoint, where: Any, run_dir: Path | None) -> Checkpoint:
    from alignmt.checkpoint.torch_io import Checkpoint, load_checkpoint

    if isinstance(given, Checkpoint):
        return given
    return load_checkpoint(given, device=where, run_dir=run_dir)


def _named(given: str | Path | Checkpoint, index: int) -> str:
    """How an ensemble's refusal names a member."""
    return str(given) if isinstance(given, str | Path) else f"checkpoint {index + 1}"


def _folder(given: str | Path | Checkpoint) -> Path | None:
    """The run folder of a folder or a checkpoint file in it; None for a loaded checkpoint."""
    if not isinstance(given, str | Path):
        return None
    path = Path(given)
    return path.parent if path.suffix == ".safetensors" else path
