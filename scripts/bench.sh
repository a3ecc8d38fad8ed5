#!/usr/bin/env bash
# scripts/bench.sh — `make bench`: speed and memory, not a test (nothing is asserted).
#
# Builds the trainer and build/bench_model, runs the whole-step benchmark (tests/bench_model.c:
# GPT-2 124M, a small L4 model, the recompute policies) and, when it has been built, the attention
# benchmark build/bench_attention. Tables go to the terminal; every JSON line of both goes to
# out/bench.jsonl (one object per row; "bench" names the benchmark).
#
#   scripts/bench.sh [bench_model args...]     e.g. scripts/bench.sh --steps 9 recompute
#   BENCH_THREADS=N   threads for both benchmarks (default 2)
#
# Timings are medians over a few steps; they are only comparable within one run on one machine,
# and anything else running on the same cores shows up in them (the load average is printed).
# About 2 to 3 minutes on 2 idle cores (124M alone: ~20 s; the attention benchmark: ~25 s).
set -euo pipefail
cd "$(dirname "$0")/.."

threads=${BENCH_THREADS:-2}
make --no-print-directory train build/bench_model
# the attention benchmark is optional: built when the Makefile has a rule for it
if make -n build/bench_attention >/dev/null 2>&1; then
    make --no-print-directory build/bench_attention || echo "bench: build/bench_attention failed to build"
fi

mkdir -p out
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "== build/bench_model --threads $threads $*"
build/bench_model --threads "$threads" "$@" | tee "$log"

if [ -x build/bench_attention ]; then
    echo
    echo "== build/bench_attention (OMP_NUM_THREADS=$threads)"
    OMP_NUM_THREADS=$threads build/bench_attention | tee -a "$log"
else
    echo
    echo "== build/bench_attention: not built, skipped"
fi

grep '^{' "$log" > out/bench.jsonl
echo
echo "bench: $(wc -l < out/bench.jsonl) JSON lines in out/bench.jsonl; load average now $(cut -d' ' -f1-3 /proc/loadavg)"
