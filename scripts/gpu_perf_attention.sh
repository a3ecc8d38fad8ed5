# scripts/gpu_perf_attention.sh — the attention's section of scripts/gpu_perf.sh (sourced by it,
# not run alone): the bf16 tensor-core flash attention as the trainer's bf16 table calls it
# (tests/cuda/bench_attention_cuda --precision bf16act: qkv and o in bf16, dout fp32), forward and
# backward, new kernels against SEEDGPT_KERNELS=baseline, and the fused backward against the split
# one (SEEDGPT_ATTN_BACKWARD), at B8 and C 768 (H = 768 / D), T 1024 and 4096, D 64 and 128, dropout
# 0 and 0.1.
#   checks:  on the GPU, the tests that hold the new kernels to the baseline and to the CPU
#            (test_cuda_mma: ldmatrix and cp.async; test_cuda_flash_tc: the pipelined kernels bit
#            for bit the baseline ones, the masks, the CPU tolerances); at every timed shape, the
#            hashes of o and dqkv of the new kernels (split backward) against the baseline's (same
#            bits), and the fused side's o (its dq is summed in another order: the tests hold it)
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
# predicted ms of the fused backward (SEEDGPT_ATTN_BACKWARD=fused), "T D p": the split backward's
# prediction times 0.55 (dK/dV's share of its PTX warp-instructions, 125 M of 234 M at T1024 D64
# p0.1, times 1627 / 1582, the fused main loop's instructions over dK/dV's), plus the dQ slices'
# bytes at 4.3 TB/s, written and read back with no overlap, and dq written: 2 x 1.57 MB a tile
# pair (8 x 768 x 256 B whatever D) + 8 T 768 4 B: 0.105 ms at T 1024, 1.545 ms at T 4096
declare -A ATTN_PRED_FUSED=(
    ["1024 64 0.1"]=0.383   ["1024 64 0"]=0.222   ["1024 128 0.1"]=0.266  ["1024 128 0"]=0.179
    ["4096 64 0.1"]=5.15    ["4096 64 0"]=3.06    ["4096 128 0.1"]=3.64   ["4096 128 0"]=2.51
)
declare -A ATTN_KPRED=([forward]=0.192 [dkdv]=0.270 [dq]=0.235 [bwd]=0.278 [dq_sum]=0.056)
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

# the sides a shape runs: the baseline kernels; the new ones with the split backward (dK/dV, then
# dQ: the same bits as the baseline); the new ones with the fused backward (one kernel, dQ summed
# from per-key-tile slices: dq's bits move, the forward's do not)
attn_side_env() {
    case $1 in
        baseline) echo "SEEDGPT_KERNELS=baseline SEEDGPT_ATTN_BACKWARD=split" ;;
        split) echo "SEEDGPT_KERNELS=new SEEDGPT_ATTN_BACKWARD=split" ;;
        fused) echo "SEEDGPT_KERNELS=new SEEDGPT_ATTN_BACKWARD=fused" ;;
    esac
}

attn_shapes() {
    local T D p H spec k out shape same_o same_g same_fo pf pb pbf sdpa pass o n pr bits v want
    for spec in "${ATTN_SHAPES[@]}"; do
        set -- $spec; T=$1; D=$2; p=$3; H=$((ATTN_C / D))
        declare -A J=()
        for k in baseline split fused; do
            out=$(step "attention $k T$T D$D p$p" 120 env $(attn_side_env $k) "$ATTN_BENCH" --precision bf16act \
                  --B "$ATTN_B" --H "$H" --T "$T" --D "$D" --p "$p" --warmup "$ATTN_WARM" --iters "$ATTN_ITERS")
            J[$k]=$(echo "$out" | grep '^{' | tail -1)
        done
        shape="T$T D$D p$p"
        want=1
        for k in baseline split fused; do
            case $k in baseline) v='"kernels":"baseline","backward":"baseline"' ;;
                       *) v="\"kernels\":\"new\",\"backward\":\"$k\"" ;; esac
            echo "${J[$k]}" | grep -qF "$v" || want=0
        done
        if [ $want = 0 ]; then
            check_row "attention $shape ran" "FAILED: a run failed or ran other kernels (baseline: '${J[baseline]:-none}', split: '${J[split]:-none}', fused: '${J[fused]:-none}')"
            perf_row "attn $shape" - - - "FAILED to run"
            continue
        fi
        same_o=0; same_g=0; same_fo=0
        [ "$(attn_field "${J[split]}" out_hash)" = "$(attn_field "${J[baseline]}" out_hash)" ] || same_o=1
        [ "$(attn_field "${J[split]}" dqkv_hash)" = "$(attn_field "${J[baseline]}" dqkv_hash)" ] || same_g=1
        [ "$(attn_field "${J[fused]}" out_hash)" = "$(attn_field "${J[baseline]}" out_hash)" ] || same_fo=1
        check_row "attention $shape new bits = baseline" \
            "$([ $(( same_o | same_g | same_fo )) = 0 ] && echo ok || echo FAILED): o hash $(attn_field "${J[split]}" out_hash) (fused run $(attn_field "${J[fused]}" out_hash)) vs $(attn_field "${J[baseline]}" out_hash), split dqkv hash $(attn_field "${J[split]}" dqkv_hash) vs $(attn_field "${J[baseline]}" dqkv_hash)"
        set -- ${ATTN_PRED["$T $D $p"]:-- -}; pf=$1; pb=$2
        pbf=${ATTN_PRED_FUSED["$T $D $p"]:--}
        [ $DRY = 1 ] && { pf=-; pb=-; pbf=-; }
        sdpa=${ATTN_SDPA["$T $D $p"]:-}
        # rows: the forward and the split backward against the baseline (the same bits); the fused
        # backward against the split one; fwd+bwd of the fused side against the baseline and SDPA
        for pass in fwd bwd bwd_fused both; do
            case $pass in
                fwd) o=$(attn_field "${J[baseline]}" fwd_ms); n=$(attn_field "${J[fused]}" fwd_ms); pr=$pf; bits=$same_fo ;;
                bwd) o=$(attn_field "${J[baseline]}" bwd_ms); n=$(attn_field "${J[split]}" bwd_ms); pr=$pb; bits=$same_g ;;
                bwd_fused) o=$(attn_field "${J[split]}" bwd_ms); n=$(attn_field "${J[fused]}" bwd_ms); pr=$pbf; bits=0 ;;
                both) o=$(attn_field "${J[baseline]}" ms); n=$(attn_field "${J[fused]}" ms); bits=$same_fo
                      pr=$(awk -v a="$pf" -v b="$pbf" 'BEGIN{ if (a == "-" || b == "-") print "-"; else printf "%.3f", a + b }') ;;
            esac
            v=$(awk -v o="$o" -v n="$n" -v pr="$pr" -v s="$sdpa" -v bits="$bits" -v both=$([ $pass = both ] && echo 1 || echo 0) \
                    -v ref=$([ $pass = bwd_fused ] && echo split || echo old) 'BEGIN{
                v = (n > 0) ? sprintf("%.2fx %s", o / n, ref) : "no time"
                if (n > o) v = v " (SLOWER than " ref ")"
                if (pr != "-" && pr > 0) { r = n / pr; v = v sprintf("; %.2fx predicted", r) (r > 1.25 ? " (slower than predicted)" : r < 0.8 ? " (faster than predicted)" : " (as predicted)") }
                if (both && s != "" && n > 0) v = v sprintf("; SDPA %.3f ms: new at %.2fx its rate", s, s / n)
                if (bits) v = "BITS DIFFER; " v
                print v }')
            case $pass in
                both) perf_row "attn $shape fwd+bwd (fused)" "$pr" "$o" "$n" "$v" ;;
                bwd_fused) perf_row "attn $shape bwd fused (old: split)" "$pr" "$o" "$n" "$v" ;;
                bwd) perf_row "attn $shape bwd split" "$pr" "$o" "$n" "$v" ;;
                *) perf_row "attn $shape $pass" "$pr" "$o" "$n" "$v" ;;
            esac
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
        "$CUOBJ" --dump-sass "$ATTN_BENCH" 2>/dev/null | awk '/Function : /{keep = ($0 ~ /flash_tc_(forward|dkdv|dq|dot|bwd|dq_sum)_kernel.*ILi64E|flash_dot_kernel/)} keep' > "$OUT/flash_tc_hd64.sass"
        say "SASS of the head dim 64 attention kernels: $OUT/flash_tc_hd64.sass ($(grep -c 'Function : ' "$OUT/flash_tc_hd64.sass") functions, $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$OUT/flash_tc_hd64.sass") instructions)"
    fi
    if [ -z "$NCU" ]; then say "attention per-kernel times: skipped (no ncu)"; return; fi
    declare -A KT=()
    for k in baseline split fused; do
        tmp=$(mktemp)
        step "ncu $k" 120 env $(attn_side_env $k) "$NCU" --clock-control none --csv --print-units base \
             --metrics gpu__time_duration.sum -k regex:flash "$ATTN_BENCH" --precision bf16act --B 8 --H 12 --T 1024 \
             --D 64 --p 0.1 --warmup 1 --iters 1 > "$tmp"
        # "Kernel Name" and "Metric Value" columns; a kernel's time is the mean of its calls
        while IFS='|' read -r role n; do KT["$k $role"]=$n; done < <(awk -F'","' '
            /^"ID","/ { for (i = 1; i <= NF; i++) { if ($i ~ /Kernel Name/) kn = i; if ($i ~ /Metric Value/) mv = i }; next }
            kn && mv && /^"/ && /gpu__time_duration/ { n = $kn; v = $mv; gsub(/[",]/, "", v)
                r = n ~ /forward_kernel/ ? "forward" : n ~ /dkdv_kernel/ ? "dkdv" : n ~ /dq_sum_kernel/ ? "dq_sum" : n ~ /dq_kernel/ ? "dq" : n ~ /bwd_kernel/ ? "bwd" : n ~ /dot_kernel/ ? "dpass" : n ~ /group_sum/ ? "group_sum" : "other"
                s[r] += v; c[r]++ }
            END { for (r in s) printf "%s|%.4f\n", r, s[r] / c[r] / 1e6 }' "$tmp")
        [ -n "$OUT" ] && cp "$tmp" "$OUT/ncu_$k.csv"
        rm -f "$tmp"
    done
    # forward, D pass, dK/dV and dQ: baseline against the split side; the fused side's two kernels
    # (old: the split side's dK/dV and dQ together)
    KT["split bwd"]=$(awk -v a="${KT["split dkdv"]:-}" -v b="${KT["split dq"]:-}" 'BEGIN{ if (a != "" && b != "") printf "%.4f", a + b }')
    for role in forward dpass dkdv dq bwd dq_sum; do
        case $role in
            bwd|dq_sum) o=${KT["split bwd"]:-}; n=${KT["fused $role"]:-} ;;
            *) o=${KT["baseline $role"]:-}; n=${KT["split $role"]:-} ;;
        esac
        [ $role = dq_sum ] && o=-
        pr=${ATTN_KPRED[$role]:--}
        if [ -z "$o" ] || [ -z "$n" ]; then perf_row "attn kernel $role T1024 D64 p0.1" "$pr" "${o:--}" "${n:--}" "ncu gave no time"; continue; fi
        perf_row "attn kernel $role T1024 D64 p0.1" "$pr" "$o" "$n" "$(awk -v o="$o" -v n="$n" -v pr="$pr" 'BEGIN{ v = (o == "-") ? "" : sprintf("%.2fx old", o / n); if (pr != "-") v = v (v == "" ? "" : "; ") sprintf("%.2fx predicted", n / pr); print v }')"
    done
}

attention_timings() {
    attn_sdpa_times
    attn_shapes
    attn_kernels
}
