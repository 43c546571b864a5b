"""`alignmt serve RUN_DIR ...`: the HTTP API and the explorer (`alignmt.serve`). A server of
exported folders (`alignmt export`) alone imports no torch."""

from __future__ import annotations

import argparse
import logging
from dataclasses import fields

from alignmt.answers.limits import Limits
from alignmt.answers.registry import load_models
from alignmt.serve.app import create_app
from alignmt.serve.server import run_server


def run(args: argparse.Namespace) -> int:
    limits = Limits(**{f.name: getattr(args, f.name) for f in fields(Limits)})
    models = load_models(
        args.run_dirs,
        device=args.device,
        precision=args.precision,
        weights=args.weights,
        shortlist=args.shortlist,
        engine=args.engine,
    )
    logging.getLogger("alignmt.serve").setLevel(logging.INFO)
    url = f"http://{args.host}:{args.port}"
    print(f"serving {', '.join(models)}: the explorer at {url}/, the API at {url}/docs", flush=True)
    run_server(create_app(models, limits), host=args.host, port=args.port, limits=limits)
    return 0
