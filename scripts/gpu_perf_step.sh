# scripts/gpu_perf_step.sh — the training step's section of scripts/gpu_perf.sh (sourced by it,
# not run alone): the element-wise ops, the products and the whole step, old kernels
# (SEEDGPT_KERNELS=baseline) against new, at GPT-2 124M B16 T1024 bf16 with dropout 0.1.
#   checks:  the op tests on the device (test_cuda_ops, test_cuda_bf16_ops, test_cuda_lt: every
#            new kernel bit for bit its baseline, and both against the CPU); a small model's
#            training run new against baseline, fp32 bit for bit, bf16 within 1e-4 (the
#            cross-entropy's fp32 exponentials);
#            bf16 --recompute layer against none with the new kernels; the bf16 run against the
#            CPU's fp32 run; a wrong SEEDGPT_KERNELS refused in one line
#   timings: tests/cuda/bench_ops_cuda.cu (every rewritten op old/new, 5 warm-ups, the median of
#            20, buffers rotated past the L2; then the step's GEMM problems one by one), those
#            problems beside torch.matmul (scripts/gpu_perf_gemm.py), the whole step old/new with
#            --profile's classes, and torch.compile's step (tools/torch_bench.py)
# Predictions: an op's "predicted" is its floor at 85% of the copy rate bench_ops_cuda measures
# (bytes the new kernels must move) plus its products at 600 TFLOP/s; the step's is
# STEP_PREDICTED_MS, counted in docs/cuda.md ("The bf16 step's memory-bound ops") before any GPU
# ran the new kernels.
STEP_PREDICTED_MS=${STEP_PREDICTED_MS:-78}

if [ $DRY = 1 ]; then
    STEP_TRAINER=build/emu/train
    STEP_TESTS=build/emu/tests
    STEP_BENCH=build/emu/bench_ops_cuda
    STEP_BENCH_ARGS=(--B 2 --T 16 --C 64 --V 257 --L 2 --chunk 16 --warmup 0 --reps 1)
    STEP_SMALL=(--layers 2 --heads 2 --embd 64 --seq-len 32 --batch 2 --steps 2)
    STEP_124=(--layers 2 --heads 2 --embd 64 --vocab 257 --seq-len 32 --batch 2 --steps 3 --dropout 0.1)
    STEP_TORCH124="L=2,H=2,C=64,V=257,maxT=32,B=2,T=32,p=0.1"; STEP_TOK=$((2 * 32))
    STEP_TORCH_DEV=cpu
    STEP_GEMM_ARGS=(--device cpu --warmup 1 --reps 1)
else
    STEP_TRAINER=./train_cuda
    STEP_TESTS=${SG_CUDA_BUILD:-build/cuda}/tests
    STEP_BENCH=${SG_CUDA_BUILD:-build/cuda}/bench_ops_cuda
    STEP_BENCH_ARGS=()
    STEP_SMALL=(--layers 4 --heads 4 --embd 256 --seq-len 256 --batch 8 --steps 10)
    STEP_124=(--layers 12 --heads 12 --embd 768 --vocab 50257 --seq-len 1024 --batch 16 --steps 10 --dropout 0.1)
    STEP_TORCH124="L=12,H=12,C=768,V=50257,maxT=1024,B=16,T=1024,p=0.1"; STEP_TOK=$((16 * 1024))
    STEP_TORCH_DEV=cuda
    STEP_GEMM_ARGS=(--device cuda)
fi
STEP_TEST_BINS=(test_cuda_ops test_cuda_bf16_ops test_cuda_lt)

step_targets() {
    echo "$STEP_TRAINER" "$STEP_BENCH"
    [ "${GPU_PERF_QUICK:-0}" = 1 ] && return
    for t in "${STEP_TEST_BINS[@]}"; do echo "$STEP_TESTS/$t"; done
}

# the losses of a run's JSON log, one per line
step_losses() { grep -o '"type":"train","step":[0-9]*,"loss":[^,}]*' "$1" 2>/dev/null | sed 's/.*"loss"://'; }
# median step_ms of the train rows after the first two (the warm-up)
step_median_ms() {
    grep '"type":"train"' "$1" 2>/dev/null | tail -n +3 | grep -o '"step_ms":[0-9.]*' | cut -d: -f2 | sort -n |
        awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]}'
}

# step_run NAME SIDE ARGS...: the trainer under SEEDGPT_KERNELS=SIDE ("new": unset), its JSON log in
# $WORK/NAME.jsonl and its model file in $WORK/NAME.bin; the status
step_run() {
    local name=$1 side=$2; shift 2
    rm -f "$WORK/$name.jsonl" "$WORK/$name.bin"
    local env_side=(env -u SEEDGPT_KERNELS) save=(--save "$WORK/$name.bin")
    [ "$side" = baseline ] && env_side=(env SEEDGPT_KERNELS=baseline)
    [ "${STEP_SAVE:-1}" = 0 ] && save=()
    step "run $name ($side kernels)" 120 "${env_side[@]}" "$STEP_TRAINER" --train "$WORK/data/train_*.bin" \
        --log-every 1 --eval-every 0 --seed 11 --log-json "$WORK/$name.jsonl" "${save[@]}" "$@" > "$WORK/$name.out"
}

step_checks() {
    if [ "${GPU_PERF_QUICK:-0}" != 1 ]; then
        for t in "${STEP_TEST_BINS[@]}"; do
            out=$(step "$t" 120 "$STEP_TESTS/$t"); rc=$?
            counts=$(echo "$out" | grep -o '^# [0-9]* passed, [0-9]* failed.*' | tail -1)
            if [ $rc -eq 0 ]; then check_row "$t" "ok ${counts#\# }"
            else check_row "$t" "$(verdict $rc) ${counts#\# }; first: $(echo "$out" | grep -m1 '^FAIL' | head -c 300)"; fi
        done
    fi
    if [ ! -f "$WORK/data/train_000000.bin" ]; then
        cat README.md docs/*.md model/*.c cpu/*.c train.c > "$WORK/text.txt"
        "$STEP_TRAINER" prepare "$WORK/text.txt" "$WORK/data" > /dev/null 2>&1
    fi
    # a wrong value of the switch: one line, a non-zero status, before any step
    local msg rc
    msg=$(SEEDGPT_KERNELS=fastest "$STEP_TRAINER" --train "$WORK/data/train_*.bin" "${STEP_SMALL[@]}" --steps 1 2>&1 >/dev/null); rc=$?
    if [ $rc -ne 0 ] && echo "$msg" | grep -q 'SEEDGPT_KERNELS=fastest: expected baseline or new'; then
        check_row "SEEDGPT_KERNELS=fastest refused" "ok: status $rc, \"$(echo "$msg" | grep -m1 SEEDGPT_KERNELS)\""
    else
        check_row "SEEDGPT_KERNELS=fastest refused" "FAILED: status $rc, stderr: $(echo "$msg" | head -c 200)"
    fi
    # the whole training run, new kernels against baseline: fp32 bit for bit (every fp32 change keeps
    # the arithmetic); bf16 within 1e-4 (the classifier's one-pass cross-entropy computes its
    # exponentials in fp32, the baseline in double, the fused attention backward sums dq a key
    # tile at a time, and the scarce backward products are split in k: docs/cuda.md), every other
    # bf16 kernel being held to its baseline bit for bit by the op tests
    local prec
    for prec in fp32 bf16; do
        step_run "ab_${prec}_base" baseline "${STEP_SMALL[@]}" --precision $prec --dropout 0.1; local r1=$?
        step_run "ab_${prec}_new" new "${STEP_SMALL[@]}" --precision $prec --dropout 0.1; local r2=$?
        local nb=$(step_losses "$WORK/ab_${prec}_base.jsonl" | wc -l) same=0 w
        diff <(step_losses "$WORK/ab_${prec}_base.jsonl") <(step_losses "$WORK/ab_${prec}_new.jsonl") > /dev/null &&
            cmp -s "$WORK/ab_${prec}_base.bin" "$WORK/ab_${prec}_new.bin" && same=1
        w=$(paste <(step_losses "$WORK/ab_${prec}_new.jsonl") <(step_losses "$WORK/ab_${prec}_base.jsonl") |
            awk 'BEGIN{w=0} {d=($1-$2)/$2; if(d<0)d=-d; if(d>w)w=d} END{printf "%.2e", w}')
        if [ $r1 -ne 0 ] || [ $r2 -ne 0 ] || [ "$nb" -eq 0 ]; then
            check_row "$prec run: new kernels vs baseline" "FAILED: status $r1/$r2, $nb losses"
        elif [ $same = 1 ]; then
            check_row "$prec run: new kernels vs baseline" "ok: $nb losses and the model file bit for bit (dropout 0.1)"
        elif [ $prec = bf16 ] && awk -v w="$w" 'BEGIN{exit !(w <= 1e-4)}'; then
            check_row "$prec run: new kernels vs baseline" "ok: $nb losses, worst rel diff $w (<= 1e-4: fp32 exponentials in the cross-entropy, dq summed by key tile, products split in k)"
        else
            check_row "$prec run: new kernels vs baseline" "FAILED: worst rel loss diff $w; $(diff <(step_losses "$WORK/ab_${prec}_base.jsonl") <(step_losses "$WORK/ab_${prec}_new.jsonl") | head -2 | tr '\n' ' ') $(cmp "$WORK/ab_${prec}_base.bin" "$WORK/ab_${prec}_new.bin" 2>&1 | head -c 120)"
        fi
    done
    step_run ab_bf16_layer new "${STEP_SMALL[@]}" --precision bf16 --dropout 0.1 --recompute layer; rc=$?
    if [ $rc -eq 0 ] && diff <(step_losses "$WORK/ab_bf16_new.jsonl") <(step_losses "$WORK/ab_bf16_layer.jsonl") > /dev/null &&
       cmp -s "$WORK/ab_bf16_new.bin" "$WORK/ab_bf16_layer.bin"; then
        check_row "bf16 recompute layer == none (new kernels)" "ok: losses and model file bit for bit"
    else
        check_row "bf16 recompute layer == none (new kernels)" "FAILED: status $rc; $(diff <(step_losses "$WORK/ab_bf16_new.jsonl") <(step_losses "$WORK/ab_bf16_layer.jsonl") | head -2 | tr '\n' ' ')"
    fi
    step_run ab_cpu new "${STEP_SMALL[@]}" --device cpu --precision fp32 --dropout 0.1; rc=$?
    local w wrc
    w=$(paste <(step_losses "$WORK/ab_bf16_new.jsonl") <(step_losses "$WORK/ab_cpu.jsonl") |
        awk 'BEGIN{w=0;n=0} {n++; d=($1-$2)/$2; if(d<0)d=-d; if(d>w)w=d} END{printf "%d losses, worst rel diff %.2e", n, w; exit !(n > 0 && w <= 1e-2)}')
    wrc=$?
    if [ $rc -eq 0 ] && [ $wrc -eq 0 ]; then check_row "bf16 (new kernels) vs cpu fp32" "ok: $w (bound 1e-2)"
    else check_row "bf16 (new kernels) vs cpu fp32" "FAILED: status $rc; $w"; fi
}

# the op rows of the benchmark's output: one perf row each, predicted = bytes at 85% of the copy
# rate + FLOPs at 600 TFLOP/s
step_op_rows() {
    local gbps=$1 f=$2
    grep '^{"bench":"op"' "$f" | while IFS= read -r l; do
        local name calls bytes flops old new
        name=$(echo "$l" | sed 's/.*"name":"\([^"]*\)".*/\1/')
        calls=$(echo "$l" | grep -o '"calls":[0-9]*' | cut -d: -f2)
        bytes=$(echo "$l" | grep -o '"bytes":[0-9.e+]*' | cut -d: -f2)
        flops=$(echo "$l" | grep -o '"flops":[0-9.e+]*' | cut -d: -f2)
        old=$(echo "$l" | grep -o '"old_ms":[0-9.e+]*' | cut -d: -f2)
        new=$(echo "$l" | grep -o '"new_ms":[0-9.e+]*' | cut -d: -f2)
        awk -v n="$name ($calls/step)" -v b="$bytes" -v fl="$flops" -v g="$gbps" -v o="$old" -v w="$new" 'BEGIN{
            p = b / (0.85 * g * 1e6) + fl / 600e9;
            v = (w <= 1.2 * p) ? "as predicted" : (w < o ? sprintf("faster, %.0f%% above the prediction", 100 * (w / p - 1)) : "NOT FASTER");
            printf "%s\t%.4f\t%.4f\t%.4f\t%s (%.2fx)\n", n, p, o, w, v, o / w }' | {
            IFS=$'\t' read -r n p o w v
            perf_row "$n" "$p" "$o" "$w" "$v"
        }
    done
}

# the profile row's class ms of a run's JSON log
step_class_ms() { grep '"type":"profile"' "$1" 2>/dev/null | grep -o "\"$2_ms\":[0-9.]*" | head -1 | cut -d: -f2; }

step_timings() {
    local rc bench=$WORK/bench_ops.txt
    step "bench_ops_cuda" 150 "$STEP_BENCH" "${STEP_BENCH_ARGS[@]}" > "$bench"; rc=$?
    grep -v '^== ' "$bench" | tee -a "${REPORT:-/dev/null}"
    local gbps
    gbps=$(grep -o '"bench":"copy","gbps":[0-9.]*' "$bench" | cut -d: -f3)
    if [ $rc -eq 0 ] && [ -n "$gbps" ]; then
        step_op_rows "$gbps" "$bench"
    else
        perf_row "ops (bench_ops_cuda)" - - - "$(verdict $rc)"
    fi
    # the GEMM problems beside torch.matmul
    if [ $HAVE_TORCH = 1 ] && grep -q '^{"bench":"gemm"' "$bench"; then
        local g=$WORK/gemm_torch.txt
        step "torch.matmul on the step's GEMM problems" 90 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" \
            scripts/gpu_perf_gemm.py "$bench" "${STEP_GEMM_ARGS[@]}" > "$g"; rc=$?
        grep -v '^== ' "$g" | tee -a "${REPORT:-/dev/null}"
        local tot=$(grep '"bench": "gemm_torch_step"' "$g" | tail -1)
        if [ -n "$tot" ]; then
            local s t
            s=$(echo "$tot" | grep -o '"seedgpt_ms": [0-9.]*' | cut -d' ' -f2)
            t=$(echo "$tot" | grep -o '"torch_ms": [0-9.]*' | cut -d' ' -f2)
            perf_row "GEMMs of a step, torch.matmul's as predicted" "$t" - "$s" \
                "$(awk -v s="$s" -v t="$t" 'BEGIN{printf "%.2fx torch.matmul%s", s / t, (s <= 1.1 * t ? "" : ": the products lag")}')"
        else
            perf_row "GEMMs of a step vs torch.matmul" - - - "$(grep -m1 TORCH_SKIP "$g" || verdict $rc)"
        fi
    else
        perf_row "GEMMs of a step vs torch.matmul" - - - "skipped: no torch, or no GEMM rows"
    fi
    # the whole step, old and new, with --profile's classes
    local side
    for side in baseline new; do
        STEP_SAVE=0 step_run "step124_$side" $side "${STEP_124[@]}" --precision bf16 --recompute none --profile
    done
    local o n
    o=$(step_median_ms "$WORK/step124_baseline.jsonl"); n=$(step_median_ms "$WORK/step124_new.jsonl")
    # the step the op rows predict: the old step less what each op row saves, times its calls
    local from_ops
    from_ops=$(awk -v o="${o:-0}" 'BEGIN{s=0} /^\{"bench":"op"/ {
        match($0, /"calls":[0-9]+/); c = substr($0, RSTART + 8, RLENGTH - 8);
        match($0, /"old_ms":[0-9.e+]+/); a = substr($0, RSTART + 9, RLENGTH - 9);
        match($0, /"new_ms":[0-9.e+]+/); b = substr($0, RSTART + 9, RLENGTH - 9);
        s += c * (a - b) } END{printf "%.2f", o - s}' "$bench")
    if [ -n "$o" ] && [ -n "$n" ]; then
        perf_row "step 124M B16 T1024 bf16 p0.1 (ms)" "$STEP_PREDICTED_MS" "$o" "$n" \
            "$(awk -v o="$o" -v n="$n" -v p="$STEP_PREDICTED_MS" -v f="$from_ops" 'BEGIN{printf "%s; %.2fx the old step; the op rows add up to %.1f ms", (n <= 1.05 * p ? "as predicted" : (n < o ? "faster, above the prediction" : "NOT FASTER")), o / n, f}')"
        local c
        for c in matmul_fwd matmul_bwd attn_fwd attn_bwd layernorm gelu residual_dropout crossentropy optimizer other_ops; do
            local co cn
            co=$(step_class_ms "$WORK/step124_baseline.jsonl" $c); cn=$(step_class_ms "$WORK/step124_new.jsonl" $c)
            [ -n "$co" ] && [ -n "$cn" ] && perf_row "  profile: $c (ms/step)" - "$co" "$cn" \
                "$(awk -v o="$co" -v n="$cn" 'BEGIN{printf "%+.2f ms", n - o}')"
        done
    else
        perf_row "step 124M B16 T1024 bf16 p0.1 (ms)" "$STEP_PREDICTED_MS" "${o:--}" "${n:--}" "a run failed (see the report)"
    fi
    # torch.compile's step, the same model and dropout (not in the quick dry run: tools/torch_bench.py
    # has its own test)
    if [ "${GPU_PERF_QUICK:-0}" = 1 ]; then
        perf_row "torch.compile step" - - - "skipped: GPU_PERF_QUICK"
    elif [ $HAVE_TORCH = 1 ]; then
        local out l tms torch_flags=(--precision bf16 --compile)
        [ $DRY = 1 ] && torch_flags=()   # the CPU's torch, fp32, not compiled: the row, not the figure
        out=$(step "torch.compile step" 150 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" tools/torch_bench.py \
              --device "$STEP_TORCH_DEV" --warmup 2 --steps 4 --row "$STEP_TORCH124,recompute=none" "${torch_flags[@]}"); rc=$?
        l=$(echo "$out" | grep '^TORCH_ROW' | tail -1)
        if [ -n "$l" ]; then
            tms=$(echo "$l" | awk '{print $2}')
            perf_row "torch.compile step, the same model (ms)" - - "$tms" \
                "$(awk -v t="$tms" -v n="${n:-0}" -v tok="$STEP_TOK" 'BEGIN{if (n > 0) printf "seedgpt new: %.3gx its tokens/s (%.0f vs %.0f tok/s; goal 1.1x)", t / n, tok / (n / 1e3), tok / (t / 1e3); else print "reference"}')$( [ $DRY = 1 ] && echo ' (dry run: torch fp32 on the CPU)')"
        else
            perf_row "torch.compile step" - - - "$(echo "$out" | grep -m1 TORCH_SKIP || verdict $rc)"
        fi
    else
        perf_row "torch.compile step" - - - "skipped: no python here imports torch"
    fi
}
