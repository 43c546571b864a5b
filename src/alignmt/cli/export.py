"""`alignmt export RUN_DIR --out DIR`: the model as ONNX graphs (see
decoding/torch_engine/export.py); with --web, DIR is also a static site that runs them in the
browser (answers/site.py)."""

from __future__ import annotations

import argparse
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    # Imported here, so that `alignmt --help` loads no torch; and before any work, so that a
    # missing onnx (PyTorch's exporter writes with it) or, for --int8 and --web, ONNX Runtime
    # is said first, with the extra that installs it (cli.EXTRAS)
    import onnx  # noqa: F401

    from alignmt.checkpoint.torch_io import load_checkpoint
    from alignmt.decoding.torch_engine.export import export_onnx

    if args.int8 or args.web:
        from alignmt.decoding.onnx_engine.int8 import write_int8
    if args.float32 and not args.web:
        raise ValueError(
            "--float32: only with --web, whose graphs are otherwise int8 where they can be"
        )
    ckpt = load_checkpoint(args.run_dir)
    if args.web:
        from alignmt.answers.site import check_web_tokenizers

        check_web_tokenizers(ckpt, args.run_dir)  # before anything is written
    manifest = export_onnx(ckpt, args.out)
    fields = ", ".join(manifest.state)
    print(
        f"wrote {args.out}/encoder.onnx and step.onnx (decoder state: {fields}) and manifest.json"
    )
    if args.int8 or (args.web and not args.float32):
        print(f"wrote {', '.join(p.name for p in write_int8(args.out))}")
    if args.web:
        _web(Path(args.out), Path(args.run_dir).resolve().name, float32=args.float32)
    return 0


def _web(out: Path, name: str, float32: bool) -> None:
    """Keep one set of graphs (int8 where they stay within INT8_TOLERANCE of float32), then
    write the site around them."""
    from alignmt.answers.site import write_site
    from alignmt.decoding.exported import ENCODER, STEP, int8_name
    from alignmt.decoding.onnx_engine.int8 import INT8_TOLERANCE, int8_drift

    if not float32:
        drift = int8_drift(out)
        int8 = drift <= INT8_TOLERANCE
        kept = "int8" if int8 else "float32"
        print(
            f"int8 moves the next-token probabilities by at most {drift:.4f} "
            f"(tolerance {INT8_TOLERANCE}): the site runs the {kept} graphs"
        )
        for graph in (ENCODER, STEP):
            (out / (graph if int8 else int8_name(graph))).unlink()
    written = write_site(out, name)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(
        f"wrote {', '.join(p.name for p in written)}: a static site of {size / 2**20:.1f} MiB; "
        f"open it with `python -m http.server -d {out}` and http://localhost:8000"
    )
