#!/usr/bin/env bash
# scripts/fp16_kjv.sh — --precision fp16 against fp32 on the King James Bible at the demo's shape
# (scripts/demo.sh's flags: L4 C128 T128 B16, dropout 0.1, --recompute layer, seed 7): the two
# runs side by side, then both validation losses and their difference. Not part of make test (a
# few minutes a run); README "Precision" quotes its figure.
#   FP16_STEPS  optimizer steps (default 600)
#   FP16_OUT    the work folder (default out/fp16_kjv)
# Flags after the script's name go to both runs (e.g. scripts/fp16_kjv.sh --threads 1).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${FP16_STEPS:-600}
out=${FP16_OUT:-out/fp16_kjv}
mkdir -p "$out"
[ -s "$out/kjv.txt" ] || { bible gen1:1-rev22:21 > "$out/kjv.txt.tmp" && mv "$out/kjv.txt.tmp" "$out/kjv.txt"; }
[ -d "$out/data" ] || ./train prepare "$out/kjv.txt" "$out/data" > /dev/null
for p in fp32 fp16; do
    rm -f "$out/$p.jsonl"
    ./train --train "$out/data/train_*.bin" --val "$out/data/val_*.bin" \
        --layers 4 --heads 4 --embd 128 --seq-len 128 --batch 16 --steps "$STEPS" \
        --lr 3e-3 --warmup 20 --dropout 0.1 --recompute layer --eval-every "$STEPS" \
        --eval-batches 16 --log-every 50 --seed 7 --precision "$p" --log-json "$out/$p.jsonl" \
        "$@" > "$out/$p.out" 2>&1 &
done
wait
val() { grep '"type":"eval"' "$1" | tail -1 | sed 's/.*"val_loss":\([^,}]*\).*/\1/'; }
v32=$(val "$out/fp32.jsonl"); v16=$(val "$out/fp16.jsonl")
skipped=$(grep -c '"skipped":true' "$out/fp16.jsonl" || true)
awk -v a="$v32" -v b="$v16" -v n="$STEPS" -v k="$skipped" 'BEGIN {
    d = b - a; printf "fp16 vs fp32, %d steps: val loss %.5f vs %.5f, difference %+.5f (%s 0.03); %d fp16 steps skipped\n",
    n, b, a, d, (d < 0.03 && d > -0.03) ? "within" : "NOT within", k }'
