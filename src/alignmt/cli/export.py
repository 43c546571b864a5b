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
            "--float32: only with --web, whose graphs otherwise store their weights in int8 "
            "where the site would be too big"
        )
    ckpt = load_checkpoint(args.run_dir)
    if args.web:
        from alignmt.answers.web_tokenizers import check_web_tokenizers

        check_web_tokenizers(ckpt, args.run_dir)  # before anything is written
    manifest = export_onnx(ckpt, args.out)
    fields = ", ".join(manifest.state)
    print(
        f"wrote {args.out}/encoder.onnx and step.onnx (decoder state: {fields}) and manifest.json"
    )
    if args.int8:
        print(f"wrote {', '.join(p.name for p in write_int8(args.out))}")
    if args.web:
        _web(Path(args.out), Path(args.run_dir).resolve().name, float32=args.float32)
    return 0


def _web(out: Path, name: str, float32: bool) -> None:
    """Write the site around the float32 graphs; where it weighs over SITE_BUDGET, store
    their weights in int8 if that stays within INT8_TOLERANCE of float32."""
    from alignmt.answers.site import SITE_BUDGET, write_site
    from alignmt.checkpoint.shortlist_io import SHORTLIST
    from alignmt.decoding.onnx_engine.int8 import INT8_TOLERANCE
    from alignmt.decoding.onnx_engine.stored_int8 import write_stored_int8

    shortlist = out / SHORTLIST
    if shortlist.exists():  # the page's search reads none; a site is sent whole
        shortlist.unlink()
        print(f"left out {SHORTLIST}: the page searches the whole vocabulary")
    written = write_site(out, name)
    if _megabytes(out) > SITE_BUDGET and not float32:
        moved = write_stored_int8(out, INT8_TOLERANCE)
        kept = "int8, computing in float32" if moved <= INT8_TOLERANCE else "float32"
        print(
            f"the site weighs over {SITE_BUDGET} MB with float32 weights; int8 weights move "
            f"the next-token probabilities by at most {moved:.4f} (tolerance "
            f"{INT8_TOLERANCE}): its graphs keep their weights in {kept}"
        )
    print(
        f"wrote {', '.join(p.name for p in written)}: a static site of "
        f"{_megabytes(out):.1f} MB; open it with `python -m http.server -d {out}` and "
        "http://localhost:8000"
    )


def _megabytes(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6
