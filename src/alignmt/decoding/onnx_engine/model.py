"""An exported model (`alignmt export`) opened for ONNX Runtime: its manifest, and its two
graphs (the encoder, one decoder step) as sessions on the CPU, float32 or int8. A broken
folder is named, not traced. Nothing here imports PyTorch or JAX.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

from alignmt.checkpoint.format import Header, parse_header
from alignmt.decoding.exported import (
    ENCODER,
    FOLD_STORED_INT8,
    FORMAT,
    MANIFEST,
    STEP,
    Manifest,
    int8_name,
)


class OnnxModel:
    """An exported model's graphs, run by ONNX Runtime on the CPU: float32, or the int8
    copies that `alignmt export --int8` wrote beside them (`int8=True`)."""

    def __init__(self, folder: str | Path, threads: int = 0, int8: bool = False) -> None:
        self.folder = folder = Path(folder)
        self.manifest = _read_manifest(folder / MANIFEST)
        self.header: Header = parse_header(folder / MANIFEST, self.manifest)
        self.pad_id = self.manifest["pad_id"]
        self.eos_id, self.bos_id = self.manifest["eos_id"], self.manifest["bos_id"]
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.add_session_config_entry(*FOLD_STORED_INT8)  # a web export's int8-stored weights
        encoder, step = (int8_name(ENCODER), int8_name(STEP)) if int8 else (ENCODER, STEP)
        if int8 and not (folder / step).is_file():
            raise ValueError(f"{folder / step}: not found; export with --int8 to write it")
        self.int8 = int8
        self.encoder = _session(folder / encoder, options)
        self.step_graph = _session(folder / step, options)
        self.copies = bool(self.manifest.get("copies", False))
        self.parameters = int(self.manifest["parameters"])
        width, words = self.step_graph.get_outputs()[0].shape[-1], len(self.header.tgt_vocab)
        if width != words and not self.copies:  # a graph copied in from another export
            raise ValueError(
                f"{folder / step}: scores {width} target tokens, but the vocabulary of "
                f"{folder / MANIFEST} has {words}; export the run again"
            )
        self.names = Manifest(
            tuple(self.manifest["state"]),
            tuple(self.manifest["memory"]),
            self.manifest["attention"],
            axes={name: tuple(axes) for name, axes in self.manifest.get("axes", {}).items()},
            shown=tuple(self.manifest.get("shown", ())),
            copies=self.copies,
        )
        self.takes = [i.name for i in self.step_graph.get_inputs()]
        self.steers = "steer" in self.takes
        self.erases = "keep" in [i.name for i in self.encoder.get_inputs()]

    @staticmethod
    def read_header(folder: str | Path) -> Header:
        """The exported run's config, vocabularies, tokenizers and step, read from its
        manifest without opening the graphs."""
        path = Path(folder) / MANIFEST
        return parse_header(path, _read_manifest(path))

    @property
    def has_attention(self) -> bool:
        return self.names.attention

    def encode(
        self, src: np.ndarray, src_len: np.ndarray, erased: int | None = None
    ) -> tuple[dict, dict]:
        """(B, T_src) ids ending in </s>, (B,) lengths -> the first state and the memory,
        each a dict of (B, ...) arrays by field name. `erased`: a source position whose
        embedding every sentence reads as zero (erasure's attribution)."""
        given = {"src": src, "src_len": src_len}
        if self.erases:
            given["keep"] = np.ones(src.shape, np.float32)
            if erased is not None:
                given["keep"][:, erased] = 0.0
        elif erased is not None:
            raise ValueError(
                f"{self.folder}: its encoder graph cannot erase a source word (exported by "
                "an older alignmt); export the run again"
            )
        outputs = self.encoder.run(list(self.names.encoder_outputs), given)
        memory = dict(zip(self.names.memory, outputs, strict=False))
        state = dict(zip(self.names.state, outputs[len(self.names.memory) :], strict=True))
        return state, memory

    def encode_ids(
        self, sentences: list[list[int]], erased: int | None = None
    ) -> tuple[dict, dict]:
        """`encode` of source ids (each ending in </s>), padded into one batch."""
        lengths = np.array([len(ids) for ids in sentences], np.int64)
        src = np.full((len(sentences), int(lengths.max())), self.pad_id, np.int64)
        for b, ids in enumerate(sentences):
            src[b, : len(ids)] = ids
        return self.encode(src, lengths, erased)

    def step(
        self, prev: np.ndarray, state: dict, memory: dict, steer: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict, np.ndarray | None]:
        """One decoder step over N rows: log-probabilities (N, V) (a copying model's
        (N, V + T_src)), the new state, and alpha (N, T_src) or None. `steer` (N, T_src)
        replaces alpha in the rows where it is not all zero (the explorer's override). The
        graph reads only the fields it needs."""
        given = {"prev": prev, **state, **memory}
        if self.steers:  # all zero where no row is steered
            zero = np.zeros(memory["mask"].shape, np.float32)
            given["steer"] = zero if steer is None else steer.astype(np.float32)
        elif steer is not None:
            raise ValueError(
                f"{self.folder}: its step graph takes no attention override (exported "
                "by an older alignmt, or a model without attention); export the run again"
            )
        names = self.names
        out = self.step_graph.run(list(names.step_outputs), {n: given[n] for n in self.takes})
        alpha = out[-1] if names.attention else None
        return out[0], dict(zip(names.state, out[1 : 1 + len(names.state)], strict=True)), alpha


def _read_manifest(path: Path) -> dict:
    """The manifest as a dict, or a ValueError naming the file: missing, not JSON, or of
    another export format."""
    if not path.is_file():
        raise ValueError(f"{path}: not found; `alignmt export RUN_DIR --out DIR` writes it")
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as bad:
        raise ValueError(f"{path}: not a readable manifest ({bad})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        found = body.get("format") if isinstance(body, dict) else None
        raise ValueError(
            f"{path}: export format {found!r}, but this alignmt reads format {FORMAT}; "
            "export the run again with this alignmt"
        )
    return body


def _session(path: Path, options: ort.SessionOptions) -> ort.InferenceSession:
    if not path.is_file():
        raise ValueError(f"{path}: not found; export the run again")
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as bad:  # ONNX Runtime raises its own types for a corrupt graph
        raise ValueError(f"{path}: not a readable ONNX graph ({str(bad)[:200]})") from None
