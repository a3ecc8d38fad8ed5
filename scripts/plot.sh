#!/usr/bin/env bash
# scripts/plot.sh RUNDIR [OUT.png] — train and validation loss, and the learning rate, from a run's
# JSON log (RUNDIR/log.jsonl, or RUNDIR itself when it is a .jsonl file) to RUNDIR/loss.png (or
# OUT.png), with gnuplot. `./train plot RUNDIR` and `make plot RUN=RUNDIR` call this script.
set -euo pipefail
if [ $# -lt 1 ] || [ "$1" = "--help" ] || [ "$1" = "-h" ]; then
    echo "usage: scripts/plot.sh RUNDIR [OUT.png]   (RUNDIR/log.jsonl -> RUNDIR/loss.png)"
    [ $# -ge 1 ] && exit 0 || exit 2
fi
if [ -d "$1" ]; then log="$1/log.jsonl"; png="${2:-$1/loss.png}"; else log="$1"; png="${2:-${1%.jsonl}.png}"; fi
[ -e "$log" ] || { echo "seedgpt: plot: $log: no such log (train with --out DIR or --log-json PATH)" >&2; exit 2; }
[ -f "$log" ] || { echo "seedgpt: plot: $log is not a regular file" >&2; exit 2; }
[ -s "$log" ] || { echo "seedgpt: plot: $log is empty: the run wrote no row yet" >&2; exit 2; }
command -v gnuplot >/dev/null 2>&1 || { echo "seedgpt: plot: gnuplot is not installed (scripts/setup.sh installs gnuplot-nox)" >&2; exit 2; }
# the PNG's folder must take a file before gnuplot runs (gnuplot, refused its output file, would
# write the image to the terminal)
pngdir=$(dirname -- "$png")
[ -d "$pngdir" ] || { echo "seedgpt: plot: $pngdir: no such folder for $png" >&2; exit 2; }
[ -d "$png" ] && { echo "seedgpt: plot: $png is a folder; expected a .png path" >&2; exit 2; }
probe="$png.tmp.$$"
( : > "$probe" ) 2>/dev/null || { echo "seedgpt: plot: cannot write $png (folder $pngdir is not writable)" >&2; exit 2; }
rm -f -- "$probe"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_plot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# "step value" rows; skipped steps (null loss) are left out. grep finds nothing in a log without
# such rows: that is said below, not an error of the pipe (set -o pipefail)
{ grep -a '"type":"train"' "$log" || true; } | sed -n 's/.*"step":\([0-9]*\),"loss":\([-0-9.eE+]*\),.*/\1 \2/p' > "$tmp/train.dat"
{ grep -a '"type":"train"' "$log" || true; } | sed -n 's/.*"step":\([0-9]*\),.*"lr":\([-0-9.eE+]*\).*/\1 \2/p' > "$tmp/lr.dat"
{ grep -a '"type":"eval"' "$log" || true; } | sed -n 's/.*"step":\([0-9]*\),"val_loss":\([-0-9.eE+]*\).*/\1 \2/p' > "$tmp/val.dat"
if [ ! -s "$tmp/train.dat" ]; then
    if grep -a -q '"type":"train"' "$log"; then
        echo "seedgpt: plot: $log: every training row has a null loss (every step skipped): nothing to plot" >&2
    elif grep -a -q '"type":"\(eval\|run\)"' "$log"; then
        echo "seedgpt: plot: $log holds no training rows yet (only $(grep -a -c '"type":"eval"' "$log") eval row(s)): nothing to plot" >&2
    else
        echo "seedgpt: plot: $log is not a seedgpt log (no {\"type\":\"train\",...} rows)" >&2
    fi
    exit 2
fi
valplot=""
[ -s "$tmp/val.dat" ] && valplot=", \"val.dat\" using 1:2 with linespoints lw 2 pt 7 lc rgb \"#d62728\" title \"validation loss\""
# No path is spliced into the gnuplot script: it runs inside $tmp on fixed file names, and the
# title shows the log's path with quotes, backslashes and control characters replaced.
title=$(printf '%s' "$log" | tr '"\\`$' "'/'_" | tr -d '\000-\037')
(cd "$tmp" && gnuplot > gnuplot.out 2> gnuplot.err) <<GP || { echo "seedgpt: plot: gnuplot failed: $(head -c 300 "$tmp/gnuplot.err" | tr '\n' ' ')" >&2; exit 2; }
set terminal pngcairo size 1000,720 font "DejaVu Sans,11"
set output "out.png"
set multiplot layout 2,1 title "seedgpt: $title"
set grid
set lmargin 12
set ylabel "loss (nats/token)"
plot "train.dat" using 1:2 with lines lw 1.5 lc rgb "#1f77b4" title "training loss"$valplot
set ylabel "learning rate"
set xlabel "step"
set format y "%.1e"
plot "lr.dat" using 1:2 with lines lw 2 lc rgb "#2ca02c" notitle
unset multiplot
GP
[ -s "$tmp/out.png" ] || { echo "seedgpt: plot: gnuplot wrote no image: $(head -c 300 "$tmp/gnuplot.err" | tr '\n' ' ')" >&2; exit 2; }
# copied beside the target, then renamed: an existing PNG is replaced whole or not at all
cp -- "$tmp/out.png" "$png.tmp.$$" 2>/dev/null && mv -f -- "$png.tmp.$$" "$png" ||
    { rm -f -- "$png.tmp.$$"; echo "seedgpt: plot: cannot write $png" >&2; exit 2; }
echo "wrote $png"
