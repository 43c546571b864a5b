"""`alignmt export RUN_DIR --out DIR`: the model as ONNX graphs (see
decoding/torch_engine/export.py)."""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    # Imported here, so that `alignmt --help` loads no torch; and before any work, so that a
    # missing onnx (PyTorch's exporter writes with it) or, for --int8, ONNX Runtime is said
    # first, with the extra that installs it (cli.EXTRAS)
    import onnx  # noqa: F401

    from alignmt.checkpoint.torch_io import load_checkpoint
    from alignmt.decoding.torch_engine.export import export_onnx

    if args.int8:
        from alignmt.decoding.onnx_engine.int8 import write_int8
    manifest = export_onnx(load_checkpoint(args.run_dir), args.out)
    fields = ", ".join(manifest.state)
    print(
        f"wrote {args.out}/encoder.onnx and step.onnx (decoder state: {fields}) and manifest.json"
    )
    if args.int8:
        print(f"wrote {', '.join(p.name for p in write_int8(args.out))}")
    return 0
