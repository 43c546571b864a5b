"""`alignmt export RUN_DIR --out DIR`: the model as ONNX graphs (see decoding/export.py)."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    try:
        import onnx  # noqa: F401  (PyTorch's exporter writes with it)
    except ImportError:
        raise ValueError(
            "alignmt export needs the [export] extra: pip install 'alignmt[export]'"
        ) from None
    # imported here, so that `alignmt --help` loads no torch
    from alignmt.checkpoint.torch_io import load_checkpoint
    from alignmt.decoding.export import export_onnx

    manifest = export_onnx(load_checkpoint(args.run_dir), args.out)
    fields = ", ".join(manifest.state)
    print(
        f"wrote {args.out}/encoder.onnx and step.onnx (decoder state: {fields}) and manifest.json"
    )
    return 0
