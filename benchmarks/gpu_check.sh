#!/usr/bin/env bash
# Everything a lent GPU machine checks and measures, in one call (docs/benchmarks.md, "GPU"):
# the CUDA tests, benchmarks/gpu.py, the GPU recipe (configs/multi30k_en_de_gpu.yaml) with its
# training and evaluation processes timed from their start, and speed.py's decoding table on
# the model it trained. Logs go to $LOGS.
#
#   LOGS=/tmp/gpu bash benchmarks/gpu_check.sh
#
# Multi30k is copied from ../shared/data into a data folder under $LOGS, which the GPU
# recipe's config then reads by name.
set -u
LOGS=${LOGS:-/tmp/gpu_check}
mkdir -p "$LOGS"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
began=$(date +%s)
stage() { echo; echo "== $1 ($(($(date +%s) - began)) s in)"; }

export ALIGNMT_DATA="$LOGS/data"
python3 -m alignmt data get multi30k --from ../shared/data

stage "versions"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, sys; print(sys.version.split()[0], 'torch', torch.__version__)"

stage "CUDA tests"
timeout 240 python3 -m pytest tests/test_cuda.py tests/test_graphs.py -q -n 4 -p no:cacheprovider \
    2>&1 | tee "$LOGS/tests.txt" | tail -25

stage "benchmarks/gpu.py"
timeout 300 python3 benchmarks/gpu.py --budgets 0 4096 16384 --warmup 30 --steps 40 \
    --profiled 5 2>&1 | tee "$LOGS/gpu.txt" | grep -v -E "^[0-9]|Warning|warn"

stage "the GPU recipe"
seconds() { python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$@"; }
start=$(date +%s.%N)
python3 -m alignmt train configs/multi30k_en_de_gpu.yaml > "$LOGS/recipe.train.txt" 2>&1
trained=$(date +%s.%N)
python3 -m alignmt evaluate runs/multi30k_en_de_gpu --device cuda > "$LOGS/recipe.eval.txt" 2>&1
scored=$(date +%s.%N)
tail -3 "$LOGS/recipe.train.txt"
grep -A3 "BLEU lc |" "$LOGS/recipe.eval.txt" | head -3
echo "training process: $(seconds "$start" "$trained") s; evaluation process: $(seconds "$trained" "$scored") s"

stage "speed.py --run on it"
timeout 120 python3 benchmarks/speed.py --device cuda --run runs/multi30k_en_de_gpu 2>&1 \
    | tee "$LOGS/speed.txt" | tail -22
stage "done"
