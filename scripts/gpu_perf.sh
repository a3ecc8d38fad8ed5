#!/usr/bin/env bash
# scripts/gpu_perf.sh — old kernels against new on one GPU, in one call of at most 9 minutes
# (GPU_PERF_BUDGET seconds, default 540): the build, the correctness rows, the timings, and a table
# last, `predicted ms | old | new | verdict`. "old" is the same build under SEEDGPT_KERNELS=baseline
# (the kernels before the rewrite), "new" with the switch unset; "predicted" is what the change was
# expected to reach, written down before any GPU ran it (docs/cuda.md says how each was counted).
#
# The work comes in sections, one file each, sourced in name order: scripts/gpu_perf_<name>.sh
# (their timings run with the step's first)
# defines <name>_targets (prints the make targets it needs), <name>_checks (correctness rows) and
# <name>_timings (timed rows). Every section's targets are built first, then every section's checks,
# then every section's timings, so a correctness failure shows before any figure. A section adds
# rows with check_row (correctness) and perf_row (the last table); helpers below.
#   scripts/gpu_perf_attention.sh   the flash attention, forward and backward, old/new at T 1024
#                              and 4096, head dims 64 and 128, dropout 0 and 0.1, beside SDPA;
#                              each kernel's time under Nsight Compute, the SASS saved
#   scripts/gpu_perf_step.sh   the training step's ops and products: per-op old/new at GPT-2 124M,
#                              the GEMM problems beside torch.matmul, the whole step old/new and
#                              beside torch.compile
#
#   scripts/gpu_perf.sh            on a machine with a GPU, the CUDA toolkit and python3 (+ torch)
#   scripts/gpu_perf.sh --dry-run  without a GPU: the same steps through the CUDA emulation (build/emu/)
#                                  at tiny shapes, so the script itself is tested (tests/test_gpu_perf.sh)
# Everything goes to $OUT/gpu_perf.txt (when OUT is set) and each row to $OUT/gpu_perf_rows.txt as
# it happens, so a run cut short still leaves what it saw. GPU_PERF_JOBS=N build jobs (default
# nproc); GPU_PERF_QUICK=1 (the dry run's test) leaves out the test binaries, which make test runs
# in the emulation anyway, and torch.compile's step (tools/torch_bench.py has its own test).
set -u
cd "$(dirname "$0")/.."
DRY=0
case "${1:-}" in
    --dry-run) DRY=1 ;;
    "") ;;
    *) echo "usage: scripts/gpu_perf.sh [--dry-run]" >&2; exit 2 ;;
esac
# A GPU run builds for that GPU alone (CUDA_ARCHS from nvidia-smi; the default, every target of
# `make cuda`, takes minutes more), in the build folder of that target set
if [ $DRY = 0 ] && [ -z "${CUDA_ARCHS:-}" ]; then
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
    [ -n "$cc" ] && export CUDA_ARCHS=$cc
fi
SG_CUDA_BUILD=$(make -s --no-print-directory cuda-build-dir 2>/dev/null || echo build/cuda)
T0=$(date +%s)
if [ $DRY = 1 ]; then BUDGET=${GPU_PERF_BUDGET:-1200}; else BUDGET=${GPU_PERF_BUDGET:-540}; fi
OUT=${OUT:-}
[ -n "$OUT" ] && mkdir -p "$OUT"
WORK=build/gpu_perf
mkdir -p "$WORK"
REPORT=${OUT:+$OUT/gpu_perf.txt}
ROWS=${OUT:+$OUT/gpu_perf_rows.txt}
[ -z "$ROWS" ] && ROWS=$WORK/rows.txt
CHECKS=$WORK/checks.txt
TABLE=$WORK/table.txt
: > "$ROWS"; : > "$CHECKS"; : > "$TABLE"
[ -n "$REPORT" ] && : > "$REPORT"
say() { echo "$@"; [ -n "$REPORT" ] && echo "$@" >> "$REPORT"; return 0; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# check_row NAME RESULT: a correctness row ("ok ...", "FAILED ...", "skipped ...")
check_row() { printf '%-46s %s\n' "$1" "$2" >> "$CHECKS"; echo "check | $1 | $2" >> "$ROWS"; say "# $1: $2"; }
# perf_row NAME PREDICTED OLD NEW VERDICT: a row of the last table (ms, or - where none)
perf_row() {
    printf '%-44s | %10s | %10s | %10s | %s\n' "$1" "$2" "$3" "$4" "$5" >> "$TABLE"
    echo "perf | $1 | $2 | $3 | $4 | $5" >> "$ROWS"
    say "# $1: predicted $2, old $3, new $4: $5"
}
# step NAME SECONDS CMD...: CMD under a timeout of SECONDS (times SCALE in a dry run), cut to what
# is left of the budget (20 s kept for the table); status 124 when it timed out, 125 when skipped
step() {
    local name=$1 secs=$2; shift 2
    local l=$(( $(left) - 20 ))
    if [ "$l" -lt 5 ]; then say "== $name: skipped, the budget of ${BUDGET}s is spent"; return 125; fi
    secs=$(( secs * SCALE ))
    [ "$secs" -gt "$l" ] && secs=$l
    say "== $name (timeout ${secs}s): $*"
    local t0=$(date +%s) rc
    if [ -n "$REPORT" ]; then
        timeout -k 5 "$secs" "$@" 2>&1 | tee -a "$REPORT"; rc=${PIPESTATUS[0]}
    else
        timeout -k 5 "$secs" "$@" 2>&1; rc=$?
    fi
    say "== $name: status $rc in $(( $(date +%s) - t0 ))s"
    return $rc
}
verdict() {
    case $1 in 0) echo ok ;; 124|137) echo "TIMED OUT" ;; 125) echo "skipped: budget spent" ;; *) echo "FAILED (status $1)" ;; esac
}
finish() {
    say ""
    say "==== seedgpt gpu_perf ($( [ $DRY = 1 ] && echo 'DRY RUN in the CUDA emulation, tiny shapes: no figure is a GPU figure' || echo GPU ), $(( $(date +%s) - T0 ))s of ${BUDGET}s)"
    while IFS= read -r l; do say "$l"; done < "$CHECKS"
    say ""
    say "$(printf '%-44s | %10s | %10s | %10s | %s' 'row' 'predicted' 'old' 'new' 'verdict')"
    while IFS= read -r l; do say "$l"; done < "$TABLE"
    exit 0
}

SCALE=1
[ $DRY = 1 ] && SCALE=3
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
export PATH="$(dirname "$NVCC"):$PATH"
export OMP_WAIT_POLICY=passive
say "seedgpt gpu_perf $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)') at $(date -u +%FT%TZ), budget ${BUDGET}s$( [ $DRY = 1 ] && echo ', DRY RUN (emulation)')"
if [ $DRY = 1 ]; then
    say "gpu: none (dry run: kernels run on the CPU through cuda/emu/cuda_emu.h)"
else
    say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -2)"
fi
say "$("$NVCC" --version 2>&1 | tail -2 | tr '\n' ' ')"
PY=python3
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import torch' >/dev/null 2>&1; then PY=$p; break; fi
done
HAVE_TORCH=0
"$PY" -c 'import torch' >/dev/null 2>&1 && HAVE_TORCH=1
say "cpu: $(nproc) cores; $PY: torch $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not importable')"
JOBS=${GPU_PERF_JOBS:-$(nproc)}

# ---- the sections
SECTIONS=()
for f in scripts/gpu_perf_*.sh; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .sh); name=${name#gpu_perf_}
    # shellcheck source=/dev/null
    . "$f"
    SECTIONS+=("$name")
done
say "sections: ${SECTIONS[*]:-none}"

# ---- build what every section needs
targets=()
for s in "${SECTIONS[@]}"; do targets+=($("${s}_targets")); done
step build 300 make -j"$JOBS" --no-print-directory "${targets[@]}"
rc=$?
if [ $rc -ne 0 ]; then check_row "build (make ${targets[*]})" "$(verdict $rc) (see the report)"; finish; fi
check_row "build" "ok: ${targets[*]}"

for s in "${SECTIONS[@]}"; do "${s}_checks"; done
# the timings: the step's first (the whole step old against new is the table's headline, and a
# budget that runs short skips what comes last), then the others in name order
for s in step "${SECTIONS[@]}"; do
    case " ${SECTIONS[*]} " in *" $s "*) ;; *) continue ;; esac
    [ "$s" = step ] && [ -n "${STEP_TIMED:-}" ] && continue
    "${s}_timings"
    [ "$s" = step ] && STEP_TIMED=1
done
finish
