#!/usr/bin/env bash
# tests/test_gpu_perf.sh — scripts/gpu_perf.sh --dry-run, the script of the GPU's timing lease,
# runs through the CUDA emulation at tiny shapes and prints what a GPU run prints: every correctness
# row "ok" (among them a wrong SEEDGPT_KERNELS refused in one line, and whole training runs with
# the new kernels bit for bit the baseline's), a table row per benchmarked op and for the step, the
# fused attention backward's rows against the split one, and
# the table `predicted | old | new | verdict` last. GPU_PERF_QUICK=1: the op test binaries, which
# make test runs in the emulation anyway, and torch.compile's step are left out. The emulated build needs no CUDA toolkit;
# without PyTorch the torch rows say "skipped" and the rest is checked the same.
set -u
cd "$(dirname "$0")/.."
W=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_gpu_perf.XXXXXX")
trap 'rm -rf "$W"' EXIT
t0=$(date +%s)
GPU_PERF_QUICK=1 OUT="$W" scripts/gpu_perf.sh --dry-run > "$W/log" 2>&1
rc=$?
secs=$(( $(date +%s) - t0 ))
rows=$W/gpu_perf_rows.txt
checks=$(grep -c '^check |' "$rows" 2>/dev/null)
not_ok=$(grep '^check |' "$rows" 2>/dev/null | grep -v '| ok' | head -3 | tr '\n' ' ')
ops=$(grep -c '^perf | .*/step)' "$rows" 2>/dev/null)
stepline=$(grep -c '^perf | step 124M' "$rows" 2>/dev/null)
fused=$(grep -c '^perf | attn .* bwd fused (old: split)' "$rows" 2>/dev/null)
last_header=$(grep -n 'row .*| *predicted | *old | *new | verdict' "$W/log" | tail -1 | cut -d: -f1)
lines=$(wc -l < "$W/log")
table_rows=$(( lines - ${last_header:-$lines} ))
if [ $rc -eq 0 ] && [ "$checks" -ge 6 ] && [ -z "$not_ok" ] && [ "$ops" -ge 16 ] && [ "$stepline" -eq 1 ] && [ "$fused" -ge 2 ] &&
   [ -n "$last_header" ] && [ "$table_rows" -ge 18 ]; then
    echo "ok   gpu_perf_dry_run_prints_every_row: status 0 in ${secs}s; $checks correctness rows all ok, $ops op rows, $fused of the fused attention backward against the split one, and the step's in the table, which comes last ($table_rows rows after its header)"
else
    echo "FAIL gpu_perf_dry_run_prints_every_row: status $rc in ${secs}s; $checks correctness rows (want >= 6), not ok: ${not_ok:-none}; $ops op rows (want >= 16), step rows $stepline (want 1), fused attention backward rows $fused (want >= 2), table rows after the last header ${table_rows} (want >= 18); log tail: $(tail -3 "$W/log" | tr '\n' ' ' | head -c 300)"
    exit 1
fi
