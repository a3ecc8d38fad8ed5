# scripts/gpu_perf_attention.sh — the attention's section of scripts/gpu_perf.sh (sourced by it,
# not run alone): the bf16 tensor-core flash attention as the trainer's bf16 table calls it
# (tests/cuda/bench_attention_cuda --precision bf16act: qkv and o in bf16, dout fp32), forward and
# backward, new kernels against SEEDGPT_KERNELS=baseline, at B8 and C 768 (H = 768 / D), T 1024 and
# 4096, D 64 and 128, dropout 0 and 0.1.
#   checks:  on the GPU, the tests that hold the new kernels to the baseline and to the CPU
#            (test_cuda_mma: ldmatrix and cp.async; test_cuda_flash_tc: the pipelined kernels bit
#            for bit the baseline ones, the masks, the CPU tolerances); at every timed shape, the
#            hashes of o and dqkv of the new kernels against the baseline's (same bits)
#   timings: each shape old / new beside PyTorch's SDPA (forward + backward, bf16, the same
#            dropout; tools/torch_sdpa_bench.py); then, at T1024 D64 p0.1, each kernel's own time
#            as Nsight Compute reads it (where ncu runs), and the SASS of the head dim 64 kernels
#            saved to $OUT for counting
# "predicted" is the new kernels' time predicted before any GPU ran them (docs/cuda.md, "The
# attention kernels": PTX warp-instructions counted per tile over the shape's tiles, at the rate
# the baseline was measured at, B8 H12 T1024 D64 p0.1 = 1.08 ms and T4096 14.2 ms). The verdict
# reads new against old (x faster), against the prediction (within 25%: as predicted) and, for
# fwd+bwd rows, the share of SDPA's rate; BITS DIFFER when the hashes do not match.
if [ $DRY = 1 ]; then
    ATTN_BENCH=build/emu/bench_attention_cuda; ATTN_TESTS=build/emu/tests
    ATTN_B=1; ATTN_C=128; ATTN_WARM=0; ATTN_ITERS=1
    ATTN_SHAPES=("64 64 0.1" "64 128 0")   # (T D p): the two head dims' kernels, with and without dropout
else
    ATTN_BENCH=${SG_CUDA_BUILD:-build/cuda}/bench_attention_cuda; ATTN_TESTS=${SG_CUDA_BUILD:-build/cuda}/tests
    ATTN_B=8; ATTN_C=768; ATTN_WARM=3; ATTN_ITERS=${GPU_PERF_ITERS:-20}
    ATTN_SHAPES=()
    for T in 1024 4096; do for D in 64 128; do for p in 0.1 0; do ATTN_SHAPES+=("$T $D $p"); done; done; done
fi
ATTN_TEST_BINS=(test_cuda_mma test_cuda_flash_tc)
# predicted ms of the new kernels, "T D p": forward backward
declare -A ATTN_PRED=(
    ["1024 64 0.1"]="0.192 0.505"   ["1024 64 0"]="0.094 0.213"
    ["1024 128 0.1"]="0.114 0.293"  ["1024 128 0"]="0.056 0.134"
    ["4096 64 0.1"]="2.48 6.55"     ["4096 64 0"]="1.21 2.76"
    ["4096 128 0.1"]="1.48 3.81"    ["4096 128 0"]="0.73 1.75"
)
declare -A ATTN_KPRED=([forward]=0.192 [dkdv]=0.270 [dq]=0.235)
declare -A ATTN_SDPA=()

attention_targets() {
    echo "$ATTN_BENCH"
    [ $DRY = 1 ] || [ "${GPU_PERF_QUICK:-0}" = 1 ] && return
    for t in "${ATTN_TEST_BINS[@]}"; do echo "$ATTN_TESTS/$t"; done
}

# a field of a bench JSON line: attn_field JSON NAME
attn_field() { echo "$1" | grep -o "\"$2\":\"\\?[0-9a-f.]*" | sed 's/.*:"\?//'; }

attention_checks() {
    # on a GPU, the kernels first: wrong kernels make timings moot (the dry run: make test runs them)
    [ $DRY = 1 ] || [ "${GPU_PERF_QUICK:-0}" = 1 ] && return
    local t out rc counts
    for t in "${ATTN_TEST_BINS[@]}"; do
        out=$(step "$t" 240 "$ATTN_TESTS/$t"); rc=$?
        counts=$(echo "$out" | grep -o '^# [0-9]* passed, [0-9]* failed.*' | tail -1)
        if [ $rc -eq 0 ]; then check_row "$t" "ok ${counts#\# }"
        else check_row "$t" "$(verdict $rc) ${counts#\# }; first: $(echo "$out" | grep -m1 '^FAIL' | head -c 300)"; fi
    done
}

# PyTorch's SDPA at the same shapes (forward + backward, bf16), where a python with torch and a GPU
attn_sdpa_times() {
    local specs=() spec out l t d pp ms
    if [ $DRY = 1 ] || [ $HAVE_TORCH = 0 ] || ! "$PY" -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
        say "torch sdpa: skipped ($( [ $DRY = 1 ] && echo 'dry run' || echo 'no python with torch and a GPU'))"
        return
    fi
    for spec in "${ATTN_SHAPES[@]}"; do set -- $spec; specs+=("$ATTN_B,$((ATTN_C / $2)),$1,$2,$3,bf16"); done
    out=$(step "torch sdpa" 150 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" tools/torch_sdpa_bench.py "${specs[@]}")
    while read -r l; do
        t=$(echo "$l" | grep -o '"T": [0-9]*' | grep -o '[0-9]*$'); d=$(echo "$l" | grep -o '"D": [0-9]*' | grep -o '[0-9]*$')
        pp=$(echo "$l" | grep -o '"p": [0-9.]*' | sed 's/.*: //'); ms=$(echo "$l" | grep -o '"ms": [0-9.]*' | sed 's/.*: //')
        [ "$pp" = "0.0" ] && pp=0
        ATTN_SDPA["$t $d $pp"]=$ms
    done < <(echo "$out" | grep '^{')
}

attn_shapes() {
    local T D p H spec k out shape same_o same_g pf pb sdpa pass o n pr bits v
    for spec in "${ATTN_SHAPES[@]}"; do
        set -- $spec; T=$1; D=$2; p=$3; H=$((ATTN_C / D))
        declare -A J=()
        for k in baseline new; do
            out=$(step "attention $k T$T D$D p$p" 120 env SEEDGPT_KERNELS=$k "$ATTN_BENCH" --precision bf16act \
                  --B "$ATTN_B" --H "$H" --T "$T" --D "$D" --p "$p" --warmup "$ATTN_WARM" --iters "$ATTN_ITERS")
            J[$k]=$(echo "$out" | grep '^{' | tail -1)
        done
        shape="T$T D$D p$p"
        if [ -z "${J[new]}" ] || [ -z "${J[baseline]}" ] || ! echo "${J[new]}" | grep -q '"kernels":"new"' ||
           ! echo "${J[baseline]}" | grep -q '"kernels":"baseline"'; then
            check_row "attention $shape ran" "FAILED: a run failed or ran other kernels (new: '${J[new]:-none}', baseline: '${J[baseline]:-none}')"
            perf_row "attn $shape" - - - "FAILED to run"
            continue
        fi
        same_o=0; same_g=0
        [ "$(attn_field "${J[new]}" out_hash)" = "$(attn_field "${J[baseline]}" out_hash)" ] || same_o=1
        [ "$(attn_field "${J[new]}" dqkv_hash)" = "$(attn_field "${J[baseline]}" dqkv_hash)" ] || same_g=1
        check_row "attention $shape new bits = baseline" \
            "$([ $(( same_o | same_g )) = 0 ] && echo ok || echo FAILED): o hash $(attn_field "${J[new]}" out_hash) vs $(attn_field "${J[baseline]}" out_hash), dqkv hash $(attn_field "${J[new]}" dqkv_hash) vs $(attn_field "${J[baseline]}" dqkv_hash)"
        set -- ${ATTN_PRED["$T $D $p"]:-- -}; pf=$1; pb=$2
        [ $DRY = 1 ] && { pf=-; pb=-; }
        sdpa=${ATTN_SDPA["$T $D $p"]:-}
        for pass in fwd bwd both; do
            case $pass in
                fwd) o=$(attn_field "${J[baseline]}" fwd_ms); n=$(attn_field "${J[new]}" fwd_ms); pr=$pf; bits=$same_o ;;
                bwd) o=$(attn_field "${J[baseline]}" bwd_ms); n=$(attn_field "${J[new]}" bwd_ms); pr=$pb; bits=$same_g ;;
                both) o=$(attn_field "${J[baseline]}" ms); n=$(attn_field "${J[new]}" ms); bits=$(( same_o | same_g ))
                      pr=$(awk -v a="$pf" -v b="$pb" 'BEGIN{ if (a == "-") print "-"; else printf "%.3f", a + b }') ;;
            esac
            v=$(awk -v o="$o" -v n="$n" -v pr="$pr" -v s="$sdpa" -v bits="$bits" -v both=$([ $pass = both ] && echo 1 || echo 0) 'BEGIN{
                v = (n > 0) ? sprintf("%.2fx old", o / n) : "no time"
                if (n > o) v = v " (SLOWER than old)"
                if (pr != "-" && pr > 0) { r = n / pr; v = v sprintf("; %.2fx predicted", r) (r > 1.25 ? " (slower than predicted)" : r < 0.8 ? " (faster than predicted)" : " (as predicted)") }
                if (both && s != "" && n > 0) v = v sprintf("; SDPA %.3f ms: new at %.2fx its rate", s, s / n)
                if (bits) v = "BITS DIFFER; " v
                print v }')
            perf_row "attn $shape $( [ $pass = both ] && echo fwd+bwd || echo $pass )" "$pr" "$o" "$n" "$v"
        done
    done
}

# one kernel at a time (a GPU with ncu only): T1024 D64 p0.1, each kernel's duration as Nsight
# Compute reads it (gpu__time_duration.sum, the clocks left alone), baseline and new, beside the
# per-kernel predictions; and the SASS of the head dim 64 kernels (written to $OUT when set)
attn_kernels() {
    if [ $DRY = 1 ]; then say "attention per-kernel times and SASS: skipped (dry run)"; return; fi
    local NCU CUOBJ k tmp role o n pr
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    CUOBJ=$(command -v cuobjdump || echo "$(dirname "$NVCC")/cuobjdump")
    if [ -n "$OUT" ] && [ -x "$CUOBJ" ]; then
        "$CUOBJ" --dump-sass "$ATTN_BENCH" 2>/dev/null | awk '/Function : /{keep = ($0 ~ /flash_tc_(forward|dkdv|dq|dot)_kernel.*ILi64E|flash_dot_kernel/)} keep' > "$OUT/flash_tc_hd64.sass"
        say "SASS of the head dim 64 attention kernels: $OUT/flash_tc_hd64.sass ($(grep -c 'Function : ' "$OUT/flash_tc_hd64.sass") functions, $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$OUT/flash_tc_hd64.sass") instructions)"
    fi
    if [ -z "$NCU" ]; then say "attention per-kernel times: skipped (no ncu)"; return; fi
    declare -A KT=()
    for k in baseline new; do
        tmp=$(mktemp)
        step "ncu $k" 120 env SEEDGPT_KERNELS=$k "$NCU" --clock-control none --csv --print-units base \
             --metrics gpu__time_duration.sum -k regex:flash "$ATTN_BENCH" --precision bf16act --B 8 --H 12 --T 1024 \
             --D 64 --p 0.1 --warmup 1 --iters 1 > "$tmp"
        # "Kernel Name" and "Metric Value" columns; a kernel's time is the mean of its calls
        while IFS='|' read -r role n; do KT["$k $role"]=$n; done < <(awk -F'","' '
            /^"ID","/ { for (i = 1; i <= NF; i++) { if ($i ~ /Kernel Name/) kn = i; if ($i ~ /Metric Value/) mv = i }; next }
            kn && mv && /^"/ && /gpu__time_duration/ { n = $kn; v = $mv; gsub(/[",]/, "", v)
                r = n ~ /forward_kernel/ ? "forward" : n ~ /dkdv_kernel/ ? "dkdv" : n ~ /dq_kernel/ ? "dq" : n ~ /dot_kernel/ ? "dpass" : n ~ /group_sum/ ? "group_sum" : "other"
                s[r] += v; c[r]++ }
            END { for (r in s) printf "%s|%.4f\n", r, s[r] / c[r] / 1e6 }' "$tmp")
        [ -n "$OUT" ] && cp "$tmp" "$OUT/ncu_$k.csv"
        rm -f "$tmp"
    done
    for role in forward dpass dkdv dq; do
        o=${KT["baseline $role"]:-}; n=${KT["new $role"]:-}; pr=${ATTN_KPRED[$role]:--}
        if [ -z "$o" ] || [ -z "$n" ]; then perf_row "attn kernel $role T1024 D64 p0.1" "$pr" "${o:--}" "${n:--}" "ncu gave no time"; continue; fi
        perf_row "attn kernel $role T1024 D64 p0.1" "$pr" "$o" "$n" "$(awk -v o="$o" -v n="$n" -v pr="$pr" 'BEGIN{ v = sprintf("%.2fx old", o / n); if (pr != "-") v = v sprintf("; %.2fx predicted", n / pr); print v }')"
    done
}

attention_timings() {
    attn_sdpa_times
    attn_shapes
    attn_kernels
}
