#!/usr/bin/env bash
# scripts/gpu_perf.sh — the timings that decide, in one GPU call: seedgpt's kernels against their
# baseline (the same binary under SEEDGPT_KERNELS=baseline) and against PyTorch, each row beside
# the time predicted for it from counted instructions. One section per kernel family:
#   attention   the bf16 tensor-core flash attention as the trainer's bf16 table calls it
#               (tests/cuda/bench_attention_cuda --precision bf16act: qkv and o in bf16, dout fp32),
#               forward and backward, new and baseline, at B8 and C 768 (H = 768 / D), T 1024 and
#               4096, D 64 and 128, dropout 0 and 0.1; both must give the same bits (the hashes of
#               o and dqkv are compared); PyTorch's SDPA (forward + backward, bf16, the same dropout)
#               beside them (tools/torch_sdpa_bench.py). Before the timings, the tests that hold
#               the new kernels to the baseline and to the CPU on this GPU (test_cuda_mma:
#               ldmatrix and cp.async; test_cuda_flash_tc: the pipelined kernels bit for bit the
#               baseline ones, the masks, the CPU tolerances). After them, at T1024 D64 p0.1, each
#               kernel's own time as Nsight Compute reads it (where ncu runs), and the SASS of the
#               head dim 64 kernels saved to $OUT for counting.
# Ends with one table:  row | predicted ms | old | new | verdict
#   predicted  the new kernels' time predicted before any GPU ran them (docs/cuda.md, "The attention
#              kernels": PTX warp-instructions counted per tile over the shape's tiles, at the
#              rate the baseline was measured at, B8 H12 T1024 D64 p0.1 = 1.08 ms and T4096 14.2 ms)
#   verdict    new against old (x faster), against the prediction (within 25%: as predicted), and
#              for fwd+bwd rows the share of SDPA's rate; BITS DIFFER when the hashes do not match
#
#   scripts/gpu_perf.sh [--dry-run]
#     --dry-run   here, without a GPU: the same steps through the CUDA emulation (build/emu/) at a
#                 tiny shape (B1 H2 T64), one timed call each; the figures mean nothing, the
#                 script, the table and the bit comparison of new and baseline are what it checks
#                 (make test runs it). It prints one ok / FAIL line per check.
# Env: GPU_PERF_BUDGET seconds (default 480; the steps' timeouts are cut to what is left), OUT (the
# report and the table are written there too), GPU_PERF_JOBS (make -j, default nproc).
# Another section (the whole training step, new against baseline) is added in the same form.
set -u
cd "$(dirname "$0")/.."
DRY=0
case "${1:-}" in
    --dry-run) DRY=1 ;;
    "") ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "scripts/gpu_perf.sh: unknown argument '$1' (--dry-run)" >&2; exit 2 ;;
esac
T0=$(date +%s)
BUDGET=${GPU_PERF_BUDGET:-480}
case "$BUDGET" in ''|*[!0-9]*) echo "scripts/gpu_perf.sh: GPU_PERF_BUDGET must be a number of seconds, got '$BUDGET'" >&2; exit 2 ;; esac
OUT=${OUT:-}
[ -n "$OUT" ] && mkdir -p "$OUT"
REPORT=${OUT:+$OUT/gpu_perf.txt}
[ -n "$REPORT" ] && : > "$REPORT"
ROWS=$(mktemp)
CHECKS=$(mktemp)
trap 'rm -f "$ROWS" "$CHECKS"' EXIT
say() { echo "$@"; [ -n "$REPORT" ] && echo "$@" >> "$REPORT"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# step NAME SECONDS CMD...: CMD under a timeout cut to the budget left; 125 when skipped
step() {
    local name=$1 secs=$2; shift 2
    local l=$(( $(left) - 5 ))
    if [ "$l" -lt 5 ]; then say "== $name: skipped, the budget of ${BUDGET}s is spent"; return 125; fi
    [ "$secs" -gt "$l" ] && secs=$l
    say "== $name (timeout ${secs}s): $*"
    local rc
    if [ -n "$REPORT" ]; then timeout -k 5 "$secs" "$@" 2>&1 | tee -a "$REPORT"; rc=${PIPESTATUS[0]}
    else timeout -k 5 "$secs" "$@" 2>&1; rc=$?; fi
    say "== $name: status $rc"
    return $rc
}
# a check of the dry run (and of a GPU run): one ok / FAIL line
check() { if [ "$1" = 0 ]; then echo "ok   $2: $3" | tee -a "$CHECKS"; else echo "FAIL $2: $3" | tee -a "$CHECKS"; fi; }
row() { printf '%s|%s|%s|%s|%s\n' "$1" "$2" "$3" "$4" "$5" >> "$ROWS"; }

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
export PATH="$(dirname "$NVCC"):$PATH"
jobs=${GPU_PERF_JOBS:-$(nproc)}
say "seedgpt gpu_perf $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)') at $(date -u +%FT%TZ), budget ${BUDGET}s$( [ $DRY = 1 ] && echo ', DRY RUN (emulation: no figure means anything)')"
if [ $DRY = 1 ]; then
    say "gpu: none (dry run)"
    BENCH=build/emu/bench_attention_cuda; TESTS=build/emu/tests
    TARGETS=(build/emu/bench_attention_cuda)
    B=1; C=128; WARM=0; ITERS=1
    SHAPES=("64 64 0.1" "64 128 0")   # (T D p) the two head dims' kernels, with and without dropout
else
    say "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
    BENCH=build/cuda/bench_attention_cuda; TESTS=build/cuda/tests
    TARGETS=(build/cuda/bench_attention_cuda build/cuda/tests/test_cuda_mma build/cuda/tests/test_cuda_flash_tc)
    B=8; C=768; WARM=3; ITERS=${GPU_PERF_ITERS:-20}
    SHAPES=()
    for T in 1024 4096; do for D in 64 128; do for p in 0.1 0; do SHAPES+=("$T $D $p"); done; done; done
fi
step build 300 make -j"$jobs" --no-print-directory "${TARGETS[@]}" > /dev/null || {
    check 1 gpu_perf_builds "make ${TARGETS[*]} failed (see the report)"; exit 1; }

# ---- section: attention ---------------------------------------------------------------------
# predicted ms of the new kernels, "T D p": forward backward (docs/cuda.md, "The attention kernels")
declare -A PRED=(
    ["1024 64 0.1"]="0.192 0.505"   ["1024 64 0"]="0.094 0.213"
    ["1024 128 0.1"]="0.114 0.293"  ["1024 128 0"]="0.056 0.134"
    ["4096 64 0.1"]="2.48 6.55"     ["4096 64 0"]="1.21 2.76"
    ["4096 128 0.1"]="1.48 3.81"    ["4096 128 0"]="0.73 1.75"
)
# a field of a bench JSON line: field JSON NAME
field() { echo "$1" | grep -o "\"$2\":\"\\?[0-9a-f.]*" | sed 's/.*:"\?//'; }
attention_section() {
    if [ $DRY = 0 ]; then   # on this GPU, the kernels first: wrong kernels make timings moot
        for t in test_cuda_mma test_cuda_flash_tc; do
            local out rc
            out=$(step "$t" 240 "$TESTS/$t"); rc=$?
            echo "$out" | grep -E '^(FAIL|#)' | head -5
            check $rc "${t}_on_this_gpu" "$(echo "$out" | grep -o '^# [0-9]* passed, [0-9]* failed.*' | tail -1)"
        done
    fi
    local T D p H spec
    for spec in "${SHAPES[@]}"; do
        set -- $spec; T=$1; D=$2; p=$3; H=$((C / D))
        declare -A J=()
        local k
        for k in baseline new; do
            local out
            out=$(step "attention $k T$T D$D p$p" 120 env SEEDGPT_KERNELS=$k "$BENCH" --precision bf16act \
                  --B "$B" --H "$H" --T "$T" --D "$D" --p "$p" --warmup "$WARM" --iters "$ITERS")
            J[$k]=$(echo "$out" | grep '^{' | tail -1)
        done
        local ok_k=0
        echo "${J[new]}" | grep -q '"kernels":"new"' && echo "${J[baseline]}" | grep -q '"kernels":"baseline"' && ok_k=1
        local shape="T$T D$D p$p"
        if [ -z "${J[new]}" ] || [ -z "${J[baseline]}" ] || [ $ok_k = 0 ]; then
            check 1 "attention_${T}_${D}_${p}_ran" "a run failed or ran other kernels (new: '${J[new]:-none}', baseline: '${J[baseline]:-none}')"
            row "attn $shape" "-" "-" "-" "FAILED to run"
            continue
        fi
        local same_o=0 same_g=0
        [ "$(field "${J[new]}" out_hash)" = "$(field "${J[baseline]}" out_hash)" ] || same_o=1
        [ "$(field "${J[new]}" dqkv_hash)" = "$(field "${J[baseline]}" dqkv_hash)" ] || same_g=1
        check $(( same_o | same_g )) "attention_new_bits_equal_baseline_T${T}_D${D}_p${p}" \
            "o hash $(field "${J[new]}" out_hash) vs $(field "${J[baseline]}" out_hash), dqkv hash $(field "${J[new]}" dqkv_hash) vs $(field "${J[baseline]}" dqkv_hash)"
        local pf pb
        set -- ${PRED["$T $D $p"]:-- -}; pf=$1; pb=$2
        [ $DRY = 1 ] && { pf=-; pb=-; }
        local sdpa=${SDPA["$T $D $p"]:-}
        local pass
        for pass in fwd bwd both; do
            local o n pr bits
            case $pass in
                fwd) o=$(field "${J[baseline]}" fwd_ms); n=$(field "${J[new]}" fwd_ms); pr=$pf; bits=$same_o ;;
                bwd) o=$(field "${J[baseline]}" bwd_ms); n=$(field "${J[new]}" bwd_ms); pr=$pb; bits=$same_g ;;
                both) o=$(field "${J[baseline]}" ms); n=$(field "${J[new]}" ms); bits=$(( same_o | same_g ))
                      pr=$(awk -v a="$pf" -v b="$pb" 'BEGIN{ if (a == "-") print "-"; else printf "%.3f", a + b }') ;;
            esac
            local v
            v=$(awk -v o="$o" -v n="$n" -v pr="$pr" -v s="$sdpa" -v bits="$bits" -v both=$([ $pass = both ] && echo 1 || echo 0) 'BEGIN{
                v = sprintf("%.2fx old", o / n)
                if (n > o) v = v " (SLOWER than old)"
                if (pr != "-") { r = n / pr; v = v sprintf("; %.2fx predicted", r) (r > 1.25 ? " (slower than predicted)" : r < 0.8 ? " (faster than predicted)" : " (as predicted)") }
                if (both && s != "") v = v sprintf("; SDPA %.3f ms: new at %.2fx its rate", s, s / n)
                if (bits) v = "BITS DIFFER; " v
                print v }')
            row "attn $shape $( [ $pass = both ] && echo fwd+bwd || echo $pass )" "$pr" "$o" "$n" "$v"
        done
    done
}

# PyTorch's SDPA at the same shapes (forward + backward, bf16), where a python with torch and a GPU
declare -A SDPA=()
sdpa_times() {
    local PY=python3 specs=() spec
    for py in python3 /usr/bin/python3; do if "$py" -c 'import torch' >/dev/null 2>&1; then PY=$py; break; fi; done
    if [ $DRY = 1 ] || ! "$PY" -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
        say "torch sdpa: skipped ($( [ $DRY = 1 ] && echo 'dry run' || echo 'no python with torch and a GPU'))"
        return
    fi
    for spec in "${SHAPES[@]}"; do set -- $spec; specs+=("$B,$((C / $2)),$1,$2,$3,bf16"); done
    local out
    out=$(step "torch sdpa" 150 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" tools/torch_sdpa_bench.py "${specs[@]}")
    while read -r l; do
        local t d pp ms
        t=$(echo "$l" | grep -o '"T": [0-9]*' | grep -o '[0-9]*$'); d=$(echo "$l" | grep -o '"D": [0-9]*' | grep -o '[0-9]*$')
        pp=$(echo "$l" | grep -o '"p": [0-9.]*' | sed 's/.*: //'); ms=$(echo "$l" | grep -o '"ms": [0-9.]*' | sed 's/.*: //')
        [ "$pp" = "0.0" ] && pp=0
        SDPA["$t $d $pp"]=$ms
    done < <(echo "$out" | grep '^{')
}

# one kernel at a time (a GPU with ncu only): T1024 D64 p0.1, each kernel's duration as Nsight
# Compute reads it (gpu__time_duration.sum, the clocks left alone), baseline and new, beside the
# per-kernel predictions; and the SASS of the head dim 64 kernels, for counting instructions the
# way the PTX figures were counted (written to $OUT when set)
declare -A KPRED=([forward]=0.192 [dkdv]=0.270 [dq]=0.235)
kernel_section() {
    if [ $DRY = 1 ]; then say "per-kernel times and SASS: skipped (dry run)"; return; fi
    local NCU CUOBJ
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    CUOBJ=$(command -v cuobjdump || echo "$(dirname "$NVCC")/cuobjdump")
    if [ -n "$OUT" ] && [ -x "$CUOBJ" ]; then
        "$CUOBJ" --dump-sass "$BENCH" 2>/dev/null | awk '/Function : /{keep = ($0 ~ /flash_tc_(forward|dkdv|dq|dot)_kernel.*ILi64E|flash_dot_kernel/)} keep' > "$OUT/flash_tc_hd64.sass"
        say "SASS of the head dim 64 attention kernels: $OUT/flash_tc_hd64.sass ($(grep -c 'Function : ' "$OUT/flash_tc_hd64.sass") functions, $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$OUT/flash_tc_hd64.sass") instructions)"
    fi
    if [ -z "$NCU" ]; then say "per-kernel times: skipped (no ncu)"; return; fi
    local k tmp
    declare -A KT=()
    for k in baseline new; do
        tmp=$(mktemp)
        step "ncu $k" 120 env SEEDGPT_KERNELS=$k "$NCU" --clock-control none --csv --print-units base \
             --metrics gpu__time_duration.sum -k regex:flash "$BENCH" --precision bf16act --B 8 --H 12 --T 1024 \
             --D 64 --p 0.1 --warmup 1 --iters 1 > "$tmp"
        # "Kernel Name" and "Metric Value" columns; a kernel's time is the mean of its calls
        while IFS='|' read -r role ns; do KT["$k $role"]=$ns; done < <(awk -F'","' '
            /^"ID","/ { for (i = 1; i <= NF; i++) { if ($i ~ /Kernel Name/) kn = i; if ($i ~ /Metric Value/) mv = i }; next }
            kn && mv && /^"/ && /gpu__time_duration/ { n = $kn; v = $mv; gsub(/[",]/, "", v)
                r = n ~ /forward_kernel/ ? "forward" : n ~ /dkdv_kernel/ ? "dkdv" : n ~ /dq_kernel/ ? "dq" : n ~ /dot_kernel/ ? "dpass" : n ~ /group_sum/ ? "group_sum" : "other"
                s[r] += v; c[r]++ }
            END { for (r in s) printf "%s|%.4f\n", r, s[r] / c[r] / 1e6 }' "$tmp")
        [ -n "$OUT" ] && cp "$tmp" "$OUT/ncu_$k.csv"
        rm -f "$tmp"
    done
    local role
    for role in forward dpass dkdv dq; do
        local o=${KT["baseline $role"]:-} n=${KT["new $role"]:-} pr=${KPRED[$role]:--}
        if [ -z "$o" ] || [ -z "$n" ]; then row "kernel $role T1024 D64 p0.1" "$pr" "${o:--}" "${n:--}" "ncu gave no time"; continue; fi
        row "kernel $role T1024 D64 p0.1" "$pr" "$o" "$n" "$(awk -v o="$o" -v n="$n" -v pr="$pr" 'BEGIN{ v = sprintf("%.2fx old", o / n); if (pr != "-") v = v sprintf("; %.2fx predicted", n / pr); print v }')"
    done
}

sdpa_times
attention_section
kernel_section

# ---- the table --------------------------------------------------------------------------------
say ""
say "==== seedgpt gpu_perf ($( [ $DRY = 1 ] && echo 'DRY RUN in the CUDA emulation: no figure means anything' || echo GPU), $(( $(date +%s) - T0 ))s of ${BUDGET}s)"
while IFS= read -r l; do say "  $l"; done < "$CHECKS"   # (indented: counted once, above)
say "$(printf '%-28s | %12s | %9s | %9s | %s' row 'predicted ms' 'old ms' 'new ms' verdict)"
while IFS='|' read -r a b c d e; do say "$(printf '%-28s | %12s | %9s | %9s | %s' "$a" "$b" "$c" "$d" "$e")"; done < "$ROWS"
[ -n "$OUT" ] && cp "$ROWS" "$OUT/gpu_perf_rows.txt"
! grep -q '^FAIL' "$CHECKS"
