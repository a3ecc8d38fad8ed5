#!/usr/bin/env bash
# tests/test_learn.sh — a small model trained on the King James Bible (Debian's bible-kjv) for a
# few hundred steps (600) must reach a validation loss below the bigram baseline that
# tests/bigram_baseline computes from the same shards, on the same validation positions.
set -u
cd "$(dirname "$0")/.."
out=build/learn
mkdir -p "$out"
if ! command -v bible >/dev/null 2>&1; then
    echo "SKIP learns_kjv_below_bigram_baseline: the 'bible' command (Debian package bible-kjv) is not installed"
    exit 0
fi
if [ ! -s "$out/kjv.txt" ]; then bible gen1:1-rev22:21 > "$out/kjv.txt.tmp" && mv "$out/kjv.txt.tmp" "$out/kjv.txt"; fi
./train prepare "$out/kjv.txt" "$out/kjv" > /dev/null || { echo "FAIL learns_kjv_below_bigram_baseline: prepare failed"; exit 1; }

B=16; T=128; EVAL=16
./train --train "$out/kjv/train_*.bin" --val "$out/kjv/val_*.bin" \
    --layers 4 --heads 4 --embd 128 --seq-len $T --batch $B --steps ${LEARN_STEPS:-600} \
    --lr 3e-3 --warmup 20 --dropout 0.0 --eval-batches $EVAL --log-every 100 --threads 2 \
    --seed 7 --log-json "$out/log.jsonl" --save "$out/model.bin" \
    || { echo "FAIL learns_kjv_below_bigram_baseline: training failed"; exit 1; }
val=$(grep '"type":"eval"' "$out/log.jsonl" | tail -n 1 | sed 's/.*"val_loss":\([^,}]*\).*/\1/')
first=$(grep '"type":"train"' "$out/log.jsonl" | head -n 1 | sed 's/.*"loss":\([^,}]*\).*/\1/')
bigram=$(build/tests/bigram_baseline "$out/kjv/train_*.bin" "$out/kjv/val_*.bin" 257 $B $T $EVAL) \
    || { echo "FAIL learns_kjv_below_bigram_baseline: baseline failed"; exit 1; }
if awk -v v="$val" -v b="$bigram" 'BEGIN{exit !(v < b)}'; then
    echo "ok   learns_kjv_below_bigram_baseline: val loss $val < bigram $bigram (first train loss $first)"
else
    echo "FAIL learns_kjv_below_bigram_baseline: val loss $val >= bigram $bigram (first train loss $first)"
    exit 1
fi
