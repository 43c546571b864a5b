"""The d2l.ai book's "Bahdanau attention" run on our Tatoeba file: train
configs/d2l_fra_eng.yaml, then print the book's four sentences as the book prints them.

    python benchmarks/d2l_fra_eng.py                    # PyTorch (under 3 minutes on 2 CPUs)
    python benchmarks/d2l_fra_eng.py --backend flax     # the same model in JAX/Flax
    python benchmarks/d2l_fra_eng.py train.steps=240    # any key.path=value override

Zhang et al., "Dive into Deep Learning", §11.4. Reads Tatoeba from the data folder
(`alignmt data get tatoeba` first); the run folder (runs/d2l_fra_eng, or out_dir=...) is
overwritten.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from alignmt.config import load_config
from alignmt.experiments.d2l import book_translations
from alignmt.training.run import train

CONFIG = Path(__file__).resolve().parents[1] / "configs/d2l_fra_eng.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["torch", "flax"], default="torch")
    parser.add_argument("--config", default=str(CONFIG), help="default: %(default)s")
    parser.add_argument("overrides", nargs="*", help="key.path=value, after the config's")
    args = parser.parse_args()
    cfg = load_config(args.config, [f"train.engine={args.backend}", *args.overrides])
    start = time.perf_counter()
    result = train(cfg, progress=False, overwrite=True)
    seconds = time.perf_counter() - start
    for translation in book_translations(result.run_dir):
        print(translation.line)
    valid = result.evals[-1] if result.evals else {}
    print(
        f"\n{cfg.train.engine}: {result.step} steps in {seconds:.1f} s ({result.seconds:.1f} s "
        f"in the loop); last loss {result.losses[-1]:.3f}; validation loss "
        f"{valid.get('valid_loss', float('nan')):.3f}, greedy BLEU {valid.get('bleu', 0):.1f}"
    )


if __name__ == "__main__":  # tokenising processes import this file: train only when run
    main()
