#!/usr/bin/env bash
# tests/test_learn.sh — `make demo` end to end in its shortened form: scripts/demo.sh with
# DEMO_STEPS=400 (prepare the King James Bible, train a small model with dropout 0.1 and
# --recompute layer, evaluate, sample, plot) must finish, print a sample, write the plot, and
# reach a validation loss below the bigram baseline that tests/bigram_baseline computes from the
# same shards, on the same validation positions (batch 16 x 128, 16 windows: the demo's shape).
set -u
cd "$(dirname "$0")/.."
out=build/learn
mkdir -p "$out"
if ! command -v bible >/dev/null 2>&1; then
    echo "SKIP learns_kjv_below_bigram_baseline: the 'bible' command (Debian package bible-kjv) is not installed"
    exit 0
fi
rm -f "$out/loss.png"
DEMO_STEPS=${LEARN_STEPS:-400} DEMO_OUT="$out" scripts/demo.sh --threads 2 > "$out/demo.out" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    echo "FAIL demo_runs_end_to_end: scripts/demo.sh exited with status $rc:"; tail -5 "$out/demo.out"; exit 1
fi
sample=$(sed -n '/^== sample/{n;p}' "$out/demo.out")
if [ -s "$out/loss.png" ] && [ "${sample#And God said}" != "$sample" ] && grep -q '^done: ' "$out/demo.out"; then
    echo "ok   demo_runs_end_to_end: $(grep '^done: ' "$out/demo.out" | cut -c1-160); sample \"$(echo "$sample" | cut -c1-60)...\"; plot $(stat -c %s "$out/loss.png") bytes"
else
    echo "FAIL demo_runs_end_to_end: plot $(ls -la "$out/loss.png" 2>&1), sample line \"$sample\""
fi
val=$(grep '"type":"eval"' "$out/log.jsonl" | tail -n 1 | sed 's/.*"val_loss":\([^,}]*\).*/\1/')
first=$(grep '"type":"train"' "$out/log.jsonl" | head -n 1 | sed 's/.*"loss":\([^,}]*\).*/\1/')
bigram=$(build/tests/bigram_baseline "$out/data/train_*.bin" "$out/data/val_*.bin" 257 16 128 16) \
    || { echo "FAIL learns_kjv_below_bigram_baseline: baseline failed"; exit 1; }
if awk -v v="$val" -v b="$bigram" 'BEGIN{exit !(v < b)}'; then
    echo "ok   learns_kjv_below_bigram_baseline: val loss $val < bigram $bigram (first train loss $first; dropout 0.1, recompute layer)"
else
    echo "FAIL learns_kjv_below_bigram_baseline: val loss $val >= bigram $bigram (first train loss $first)"
    exit 1
fi
