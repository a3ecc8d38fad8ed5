#!/usr/bin/env bash
# scripts/kjv.sh — the README's first run: prepare the King James Bible (Debian's bible-kjv) as
# byte-level shards and train a small GPT on it for a few minutes. Flags after the script's name
# are passed to ./train (e.g. scripts/kjv.sh --steps 2000).
set -euo pipefail
cd "$(dirname "$0")/.."
out=out/kjv
mkdir -p "$out"
[ -s "$out/kjv.txt" ] || { bible gen1:1-rev22:21 > "$out/kjv.txt.tmp" && mv "$out/kjv.txt.tmp" "$out/kjv.txt"; }
./train prepare "$out/kjv.txt" "$out/data"
./train --train "$out/data/train_*.bin" --val "$out/data/val_*.bin" \
    --layers 4 --heads 4 --embd 128 --seq-len 256 --batch 16 --steps 600 \
    --lr 2e-3 --warmup 30 --dropout 0.1 --eval-every 100 --eval-batches 16 --log-every 20 \
    --log-json "$out/log.jsonl" --save "$out/model.bin" "$@"
