#!/usr/bin/env bash
# Multi30k English→German quality benchmark: train the attention and the vanilla config, each
# timed from process start, then score both on test_2016_flickr (beam 5, sacreBLEU on
# detokenised output against the raw references, lowercased and cased, by length bucket) and
# draw heatmaps of five test sentences.
#
#   bash benchmarks/multi30k_bleu.sh                 # the 15-minute recipe (~30 min for both)
#   MINUTES=59 OVERRIDES="model.dropout=0.3 data.tokenizer=sentencepiece" ONLY=multi30k_en_de \
#     bash benchmarks/multi30k_bleu.sh               # the 60-minute run
#   ONLY=multi30k_en_de bash benchmarks/multi30k_bleu.sh   # one config
#
# Run from the repository root with nothing else using the CPU. Multi30k is copied from
# ../shared/data where that mirror is beside the repository, else downloaded.
set -euo pipefail
alignmt=${ALIGNMT:-.venv/bin/alignmt}
if [ -d ../shared/data ]; then "$alignmt" data get multi30k --from ../shared/data
else "$alignmt" data get multi30k; fi
out=${OUT:-runs/bench${MINUTES:+_${MINUTES}min}}
configs=${ONLY:-"multi30k_en_de multi30k_en_de_vanilla"}
runs=()
for cfg in $configs; do
  SECONDS=0
  "$alignmt" train "configs/$cfg.yaml" out_dir="$out/$cfg" \
    ${MINUTES:+train.minutes=$MINUTES train.steps=100000} ${OVERRIDES:-}
  echo "$cfg: $SECONDS s from process start"
  runs+=("$out/$cfg")
done
"$alignmt" compare "${runs[@]}" --out "$out/compare"
if [[ " $configs " == *" multi30k_en_de "* ]]; then
  # Test lines of 9 to 27 words: monotonic, reordered (German verb-final), many-to-one cases.
  "$alignmt" evaluate "$out/multi30k_en_de" --out "$out/eval" --heatmaps 1,8,24,105,411 \
    --attention "$out/eval/attention.json" > "$out/eval.txt"
  echo "heatmaps and attention: $out/eval"
fi
