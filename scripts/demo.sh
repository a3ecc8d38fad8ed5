#!/usr/bin/env bash
# scripts/demo.sh — the README's first run (`make demo`, which installs what is missing and builds
# ./train first): the King James Bible (Debian's bible-kjv) as byte-level shards, a small GPT
# trained on 2 cores with dropout 0.1 and activation recompute (--recompute layer), the
# validation loss along the way, a sample from the trained model, and the loss curves as a PNG.
#   DEMO_STEPS  optimizer steps (default 1500: a few minutes on 2 cores; CI runs 400)
#   DEMO_OUT    the run folder (default out/demo): states, model.bin, log.jsonl, loss.png
# Flags after the script's name go to ./train (e.g. scripts/demo.sh --threads 4).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${DEMO_STEPS:-1500}
out=${DEMO_OUT:-out/demo}
mkdir -p "$out"
command -v bible >/dev/null 2>&1 || { echo "demo: the 'bible' command (Debian package bible-kjv) is missing: run scripts/setup.sh" >&2; exit 2; }
[ -s "$out/kjv.txt" ] || { bible gen1:1-rev22:21 > "$out/kjv.txt.tmp" && mv "$out/kjv.txt.tmp" "$out/kjv.txt"; }
echo "== prepare: $(wc -c < "$out/kjv.txt") bytes of the King James Bible -> byte-level shards"
./train prepare "$out/kjv.txt" "$out/data"
# a new run each time: the previous demo's states would otherwise refuse the folder
rm -f "$out"/state_*.bin "$out/log.jsonl" "$out/model.bin" "$out/loss.png"
echo "== train: $STEPS steps, dropout 0.1, recompute layer"
./train --train "$out/data/train_*.bin" --val "$out/data/val_*.bin" \
    --layers 4 --heads 4 --embd 128 --seq-len 128 --batch 16 --steps "$STEPS" \
    --lr 3e-3 --warmup 20 --dropout 0.1 --recompute layer \
    --eval-every $(( STEPS >= 5 ? STEPS / 5 : 1 )) --eval-batches 16 --log-every $(( STEPS >= 20 ? STEPS / 20 : 1 )) \
    --seed 7 --out "$out" "$@"
echo "== sample: ./train sample --init $out/model.bin --prompt 'And God said' --tokens 110 --temperature 0.8 --top-k 40"
./train sample --init "$out/model.bin" --prompt "And God said" --tokens 110 --temperature 0.8 \
    --top-k 40 --seed 1
echo "== plot"
if command -v gnuplot >/dev/null 2>&1; then ./train plot "$out"; else echo "demo: gnuplot missing, no plot (scripts/setup.sh installs gnuplot-nox)"; fi
