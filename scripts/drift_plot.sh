#!/usr/bin/env bash
# scripts/drift_plot.sh — the picture of docs/recompute-and-dropout.md: what "fresh" dropout seeds
# at recompute do to training. Three runs of ./train on the same KJV shards, same master seed, same
# flags, dropout 0.1 at every site:
#   none      every activation kept (the reference)
#   captured  --recompute layer, the recompute reads the seeds each layer drew in the forward
#   fresh     --recompute layer --recompute-seeds fresh: the recompute draws new masks (the bug
#             class of compiled checkpoints with fused dropout; here the deliberate negative control)
# It checks that captured logs the same losses as none, bit for bit, and plots the loss of captured
# and fresh against the step, with their difference, into docs/img/recompute-drift.png (gnuplot).
#   scripts/drift_plot.sh    STEPS=150 by default; TRAIN=path uses another ./train binary;
#                            REPLOT=1 redraws the picture from the logs in out/drift
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh                      # bible-kjv, gnuplot-nox, the build's packages
TRAIN=${TRAIN:-./train}
if [ "$TRAIN" = ./train ]; then make --no-print-directory train >/dev/null; fi
STEPS=${STEPS:-150}
out=out/drift
png=docs/img/recompute-drift.png
mkdir -p "$out" "$(dirname "$png")"

[ -s "$out/kjv.txt" ] || { bible gen1:1-rev22:21 > "$out/kjv.txt.tmp" && mv "$out/kjv.txt.tmp" "$out/kjv.txt"; }
[ -s "$out/data/train_000000.bin" ] || "$TRAIN" prepare "$out/kjv.txt" "$out/data" >/dev/null

# a small model, a few seconds of training per run on 2 cores
common=(--train "$out/data/train_*.bin" --val "$out/data/val_*.bin"
        --layers 4 --heads 4 --embd 64 --seq-len 64 --batch 16 --steps "$STEPS"
        --lr 1e-3 --warmup 20 --dropout 0.1 --seed 1337 --eval-batches 32 --log-every 50)
run() {   # name, extra flags...
    local name=$1; shift
    echo "== $name: ./train ... $*"
    "$TRAIN" "${common[@]}" "$@" --log-json "$out/$name.jsonl" 2> "$out/$name.stderr" \
        | grep -E '^(recompute|memory|done|step .*val)'
}
if [ "${REPLOT:-0}" != 1 ]; then    # REPLOT=1: only redraw from the logs of the last runs
    run none     --recompute none
    run captured --recompute layer --recompute-seeds captured
    run fresh    --recompute layer --recompute-seeds fresh
fi

# "step loss" per training step, and the fresh - captured difference
for name in none captured fresh; do
    grep '"type":"train"' "$out/$name.jsonl" \
        | sed 's/.*"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/' > "$out/$name.dat"
done
paste "$out/captured.dat" "$out/fresh.dat" \
    | awk '$1 != $3 { print "step mismatch" > "/dev/stderr"; exit 1 } { print $1, $4 - $2 }' \
    > "$out/diff.dat"

val() { grep '"type":"eval"' "$out/$1.jsonl" | tail -n 1 | sed 's/.*"val_loss":\([^,}]*\).*/\1/'; }
same=$(cmp -s "$out/none.dat" "$out/captured.dat" && echo "identical" || echo "DIFFERENT")
flagged=$(grep -c 'recompute check' "$out/fresh.stderr" || true)
flagged_captured=$(grep -c 'recompute check' "$out/captured.stderr" || true)
first_diff=$(awk '$2 != 0 { print $1; exit }' "$out/diff.dat")
echo "captured vs none: the $STEPS logged losses are $same (bit for bit, as %.9g)"
echo "value check: $flagged_captured warnings in the captured run, $flagged in the fresh run"
echo "fresh vs captured: first differing loss at step ${first_diff:-none}; final train loss" \
     "$(tail -n 1 "$out/captured.dat" | cut -d' ' -f2) vs $(tail -n 1 "$out/fresh.dat" | cut -d' ' -f2);" \
     "final val loss $(val captured) vs $(val fresh)"
awk '{ a = $2 < 0 ? -$2 : $2; if (a > m) m = a; if (NR > n - 50) s += $2 } END {
         printf "fresh - captured: max |diff| %.4f, mean diff over the last 50 steps %+.4f\n", m, s / 50 }' \
    n="$(wc -l < "$out/diff.dat")" "$out/diff.dat"

gnuplot <<EOF
set terminal pngcairo size 1000,720 font "DejaVu Sans,11"
set output "$png.tmp"
set multiplot layout 2,1 title "Recompute with captured vs fresh dropout seeds (KJV bytes, L4 H4 C64, batch 16x64, dropout 0.1, lr 1e-3, seed 1337)"
set grid
set key top right
set ylabel "training loss"
set xrange [0:$STEPS]
set lmargin 12
plot "$out/captured.dat" using 1:2 with lines lw 2 lc rgb "#1f77b4" title "captured seeds (= none, bit for bit)", \
     "$out/fresh.dat" using 1:2 with lines lw 1.5 lc rgb "#d62728" dt 2 title "fresh seeds (value check fails every step)"
set ylabel "loss: fresh - captured"
set xlabel "step"
set key bottom right
plot 0 with lines lc rgb "#888888" notitle, \
     "$out/diff.dat" using 1:2 with lines lw 1.5 lc rgb "#d62728" title "fresh-seed run minus correct run"
unset multiplot
EOF
mv "$png.tmp" "$png"
echo "wrote $png"
