"""The demo's figures under several float32 roundings, as different CPUs give them.

    python benchmarks/demo_spread.py                    # every rounding, the full demo
    python benchmarks/demo_spread.py --out runs/spread  # where the runs go (kept: a rounding
                                                        # whose results.json is there is not rerun)

The demo is deterministic on one machine, but its figures are sums of float32 products,
and CPUs round them differently: PyTorch picks its vectorised kernels by the instructions a CPU
has, and MKL its matrix products, and a different number of threads splits the sums
differently. A few ulps differ after a step, and two thousand steps of training carry the
difference into the figures. The roundings here are what one machine can show of that:

- as is: this CPU's kernels on its cores, as `alignmt demo` runs;
- one thread: `train.threads=1`, the sums in one order;
- no SIMD in ATen: ATEN_CPU_CAPABILITY=default, PyTorch's kernels without vector units;
- MKL without AVX: MKL_ENABLE_INSTRUCTIONS=SSE4_2, the matrix products of an older CPU.

Writes docs/results/demo.json (the machine, and each rounding's results.json), from which
docs/demo_numbers.py writes the figures the README and the getting-started page show, and
prints each rounding's wall time and greedy exact match by length. Run from the repository
root with nothing else using the CPU: about 25 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROUNDINGS = {
    "as is": ((), {}),
    "one thread": (("train.threads=1",), {}),
    "no SIMD in ATen": ((), {"ATEN_CPU_CAPABILITY": "default"}),
    "MKL without AVX": ((), {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}),
}
KNOBS = ("OMP_NUM_THREADS", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


def cpu_name() -> str:
    """The CPU's model name (Linux), else what Python's platform says."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def run_demo(folder: Path, overrides: tuple[str, ...], env: dict[str, str]) -> dict:
    """One full demo into `folder` (unless one is there already); its results.json."""
    results = folder / "results.json"
    if not results.exists():
        clean = {k: v for k, v in os.environ.items() if k not in KNOBS}
        command = [sys.executable, "-m", "alignmt", "demo", "--out", str(folder), *overrides]
        subprocess.run(command, cwd=ROOT, env={**clean, **env}, check=True)
    return json.loads(results.read_text())


def exact_match(results: dict, model: str) -> str:
    return " ".join(f"{100 * row['exact_match']:5.1f}" for row in results["scores"][model])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/spread"))
    parser.add_argument("--json", type=Path, default=ROOT / "docs/results/demo.json")
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d")
    roundings = {}
    for name, (overrides, env) in ROUNDINGS.items():
        folder = args.out / name.replace(" ", "_")
        print(f"{name}: alignmt demo {' '.join(overrides)} {env or ''}", flush=True)
        roundings[name] = {
            "overrides": list(overrides),
            "env": env,
            "results": run_demo(folder, overrides, env),
        }
    machine = {"cpu": cpu_name(), "cores": os.cpu_count(), "date": started}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": machine, "roundings": roundings}, indent=1) + "\n")
    lengths = [row["length"] for row in roundings["as is"]["results"]["scores"]["attention"]]
    print(
        f"\n{machine['cpu']}, {machine['cores']} cores; greedy exact match (%) at lengths "
        f"{', '.join(map(str, lengths))}"
    )
    print("| rounding | seconds | vanilla | attention |\n|---|---:|---|---|")
    for name, rounding in roundings.items():
        results = rounding["results"]
        print(
            f"| {name} | {results['seconds']:.1f} | {exact_match(results, 'vanilla')} | "
            f"{exact_match(results, 'attention')} |"
        )
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
