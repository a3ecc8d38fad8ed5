#!/usr/bin/env bash
# tests/cuda/test_cross_backend.sh TRAIN — one trainer binary with both backends (./train_cuda, or
# its emulated build build/emu/train) end to end:
#   - the same run on --device cuda and --device cpu: the same number of steps, every loss within
#     fp32 agreement (the kernels sum in other orders, the masks are the same bits);
#   - a state saved on one backend resumes on the other (both directions), and the resumed run
#     ends where the straight run on the resuming backend ends, within the same tolerance;
#   - recompute layer vs none on --device cuda: identical losses and model files, byte for byte,
#     the layer run under --profile (so the cudaEvent timers change nothing either), which adds
#     one {"type":"profile"} row timed by cudaEvents, with recompute time;
#   - --precision bf16: within 1e-2 of the CPU's fp32 run, recompute bitwise, its state resumed
#     in fp32 on the CPU;
#   - --precision fp16: within 1e-4 of the CPU fp16 table's run with the same loss scales,
#     recompute bitwise, a planted overflow named and skipped as on the CPU, its state resumed in
#     fp16 on the CPU, and (emulated sm_70, no fp16 mma) within 1e-3;
#   - ./train plan's peak, for the policy, device and precision of each run above (and of a
#     selective run on --device cuda), is the peak the run logged, to the byte: peak_bytes on the
#     CPU, device_peak_bytes on CUDA (the arena and the ops' scratch, reserved at build).
# Tiny model, few steps: the emulated build runs every GPU thread as a CPU thread.
set -u
cd "$(dirname "$0")/../.."
TRAIN=${1:-./train_cuda}
unset SEEDGPT_FAULT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
W=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_xbackend.XXXXXX")
failed=0
trap 'if [ $failed -eq 0 ]; then rm -rf "$W"; else echo "# work folder kept: $W"; fi' EXIT
ok()   { echo "ok   $1: $2"; }
fail() { echo "FAIL $1: $2"; failed=1; }

if [ ! -x "$TRAIN" ]; then fail cross_backend_has_a_trainer "$TRAIN is not built"; exit 1; fi

mkdir -p "$W/text"
head -c 2400 README.md > "$W/text/doc.txt"
"$TRAIN" prepare "$W/text/doc.txt" "$W/data" > /dev/null || { fail cross_backend_data "prepare failed"; exit 1; }
BASE=(--train "$W/data/train_*.bin" --val "$W/data/val_*.bin" --layers 2 --heads 2 --embd 32
      --seq-len 16 --batch 2 --steps 8 --lr 3e-3 --dropout 0.1 --eval-every 4 --eval-batches 1
      --log-every 0 --seed 7)

run() {  # NAME ARGS...: a run into $W/NAME (log and model file)
    local name=$1; shift
    "$TRAIN" "${BASE[@]}" --log-json "$W/$name.jsonl" "$@" > "$W/$name.out" 2>&1
}
# the training loss of every step, one line per step in step order (a resumed log holds each once)
losses() { grep -o '"type":"train","step":[0-9]*,"loss":[^,}]*' "$1" | sed 's/.*"step":\([0-9]*\),"loss":/\1 /' | sort -n -k1,1 -u | cut -d' ' -f2; }
# worst relative difference of two loss lists
worst() { paste <(losses "$1") <(losses "$2") | awk 'BEGIN{w=0;n=0} {n++; d=($1-$2)/$2; if(d<0)d=-d; if(d>w)w=d} END{printf "%d losses, worst rel diff %.2e\n", n, w; exit (n==0)}'; }
close() { paste <(losses "$1") <(losses "$2") | awk -v tol="$3" 'BEGIN{bad=0;n=0} {n++; d=($1-$2)/$2; if(d<0)d=-d; if(d>tol)bad=1} END{exit (bad || n==0)}'; }

run cpu --device cpu --save "$W/cpu.bin" || { fail cross_backend_cpu_run "$(tail -1 "$W/cpu.out")"; exit 1; }
run cuda --device cuda --save "$W/cuda.bin" || { fail cross_backend_cuda_run "$(tail -1 "$W/cuda.out")"; exit 1; }
if [ "$(losses "$W/cpu.jsonl" | wc -l)" = "$(losses "$W/cuda.jsonl" | wc -l)" ] && close "$W/cpu.jsonl" "$W/cuda.jsonl" 1e-4; then
    ok cuda_run_matches_cpu_run "$(worst "$W/cuda.jsonl" "$W/cpu.jsonl") (dropout 0.1, 8 steps)"
else
    fail cuda_run_matches_cpu_run "$(worst "$W/cuda.jsonl" "$W/cpu.jsonl")"
fi

# recompute on CUDA: bitwise the same run
run cuda_layer --device cuda --recompute layer --profile --save "$W/cuda_layer.bin"
if diff <(losses "$W/cuda.jsonl") <(losses "$W/cuda_layer.jsonl") > /dev/null && cmp -s "$W/cuda.bin" "$W/cuda_layer.bin"; then
    ok cuda_recompute_layer_run_bitwise_equals_none "$(losses "$W/cuda.jsonl" | wc -l) losses and the model file identical"
else
    fail cuda_recompute_layer_run_bitwise_equals_none "$(diff <(losses "$W/cuda.jsonl") <(losses "$W/cuda_layer.jsonl") | head -2 | tr '\n' ' ') $(cmp "$W/cuda.bin" "$W/cuda_layer.bin" 2>&1)"
fi
prow=$(grep '"type":"profile"' "$W/cuda_layer.jsonl")
rms=$(echo "$prow" | sed -n 's/.*"recompute_ms":\([0-9.eE+-]*\).*/\1/p')
if [ "$(grep -c '"type":"profile"' "$W/cuda_layer.jsonl")" -eq 1 ] && echo "$prow" | grep -q '"timer":"cudaEvent"' &&
   [ -n "$rms" ] && awk -v v="$rms" 'BEGIN{exit !(v > 0)}' && grep -q '^  recompute ' "$W/cuda_layer.out"; then
    ok cuda_profile_row_timed_by_events "one profile row, timer cudaEvent, recompute $rms ms/step"
else
    fail cuda_profile_row_timed_by_events "$(grep -c '"type":"profile"' "$W/cuda_layer.jsonl") profile rows: $(echo "$prow" | cut -c1-200)"
fi

# a state saved on one backend resumes on the other
for dir in "cuda cpu" "cpu cuda"; do
    set -- $dir
    from=$1; to=$2
    rm -rf "$W/run_$from"
    # the first leg stops on SIGTERM after step 3 (4 steps done, the state saved, status 143), so
    # both legs run the 8-step schedule
    SEEDGPT_FAULT=sigterm:3 "$TRAIN" "${BASE[@]}" --device "$from" --out "$W/run_$from" > "$W/leg1_$from.out" 2>&1
    rc1=$?
    "$TRAIN" "${BASE[@]}" --device "$to" --resume "$W/run_$from" > "$W/leg2_$from.out" 2>&1
    rc=$?
    if [ $rc1 -eq 143 ] && [ $rc -eq 0 ] && grep -q 'resumed from .*state_00000004.bin' "$W/leg2_$from.out" && close "$W/$to.jsonl" "$W/run_$from/log.jsonl" 1e-4 && grep -q '"step":7' "$W/run_$from/log.jsonl"; then
        ok "state_saved_on_${from}_resumes_on_${to}" "4 steps on $from, 4 on $to: $(worst "$W/run_$from/log.jsonl" "$W/$to.jsonl") vs the straight $to run"
    else
        fail "state_saved_on_${from}_resumes_on_${to}" "statuses $rc1 $rc (expect 143 0): $(tail -1 "$W/leg2_$from.out") $(worst "$W/run_$from/log.jsonl" "$W/$to.jsonl")"
    fi
done

# --precision bf16 (head dim 64: the tensor-core attention): the same run within 1e-2 of the CPU's
# fp32 one (bf16 operands, fp32 accumulation, the same masks), recompute bitwise equal to none,
# and a state written by a bf16 run resumes in fp32 on the CPU
BF=(--heads 1 --embd 64 --steps 4 --eval-every 0)
run cpu64 --device cpu "${BF[@]}" || { fail cross_backend_cpu64_run "$(tail -1 "$W/cpu64.out")"; exit 1; }
if run bf16 --device cuda --precision bf16 "${BF[@]}" --save "$W/bf16.bin" && grep -q 'precision bf16' "$W/bf16.out" &&
   [ "$(losses "$W/bf16.jsonl" | wc -l)" = 4 ] && close "$W/cpu64.jsonl" "$W/bf16.jsonl" 1e-2; then
    ok cuda_bf16_run_within_1e-2_of_cpu_fp32 "$(worst "$W/bf16.jsonl" "$W/cpu64.jsonl") (head dim 64, dropout 0.1)"
else
    fail cuda_bf16_run_within_1e-2_of_cpu_fp32 "$(tail -1 "$W/bf16.out") $(worst "$W/bf16.jsonl" "$W/cpu64.jsonl")"
fi
run bf16_layer --device cuda --precision bf16 --recompute layer "${BF[@]}" --save "$W/bf16_layer.bin"
if [ -s "$W/bf16.bin" ] && diff <(losses "$W/bf16.jsonl") <(losses "$W/bf16_layer.jsonl") > /dev/null && cmp -s "$W/bf16.bin" "$W/bf16_layer.bin"; then
    ok cuda_bf16_recompute_layer_bitwise_equals_none "$(losses "$W/bf16.jsonl" | wc -l) losses and the model file identical"
else
    fail cuda_bf16_recompute_layer_bitwise_equals_none "$(diff <(losses "$W/bf16.jsonl") <(losses "$W/bf16_layer.jsonl") | head -2 | tr '\n' ' ') $(cmp "$W/bf16.bin" "$W/bf16_layer.bin" 2>&1)"
fi
rm -rf "$W/run_bf16"
SEEDGPT_FAULT=sigterm:1 "$TRAIN" "${BASE[@]}" "${BF[@]}" --device cuda --precision bf16 --out "$W/run_bf16" > "$W/leg1_bf16.out" 2>&1
rc1=$?
"$TRAIN" "${BASE[@]}" "${BF[@]}" --device cpu --resume "$W/run_bf16" > "$W/leg2_bf16.out" 2>&1
rc=$?
if [ $rc1 -eq 143 ] && [ $rc -eq 0 ] && grep -q 'resumed from .*state_00000002.bin' "$W/leg2_bf16.out" &&
   grep -q '"step":3' "$W/run_bf16/log.jsonl" && close "$W/cpu64.jsonl" "$W/run_bf16/log.jsonl" 1e-2; then
    ok state_saved_by_bf16_resumes_in_fp32_on_cpu "2 steps bf16 on cuda, 2 fp32 on cpu: $(worst "$W/run_bf16/log.jsonl" "$W/cpu64.jsonl") vs the straight cpu run"
else
    fail state_saved_by_bf16_resumes_in_fp32_on_cpu "statuses $rc1 $rc (expect 143 0): $(tail -1 "$W/leg2_bf16.out") $(worst "$W/run_bf16/log.jsonl" "$W/cpu64.jsonl")"
fi
# --precision fp16 (the same shape): the CUDA fp16 table against the CPU fp16 table, its twin
# (the same roundings; sums in other orders, so within 1e-4, not bitwise), the loss scale of every
# row equal; recompute bitwise equal to none; a planted overflow named and skipped as on the CPU;
# an fp16 state from CUDA resumed in fp16 on the CPU; and on sm_70 (no fp16 mma: the attention's
# fp32 kernels on fp16 values, P unrounded) within 1e-3
scales() { grep -o '"type":"train","step":[0-9]*,.*"loss_scale":[0-9.e+]*' "$1" | sed 's/.*"step":\([0-9]*\),.*"loss_scale":/\1 /' | sort -n -k1,1 -u; }
run cpu_fp16 --device cpu --precision fp16 "${BF[@]}" || { fail cross_backend_cpu_fp16_run "$(tail -1 "$W/cpu_fp16.out")"; exit 1; }
if run fp16 --device cuda --precision fp16 "${BF[@]}" --save "$W/fp16.bin" && grep -q 'precision fp16' "$W/fp16.out" &&
   grep -q 'fp16 tensor-core attention' "$W/fp16.out" && [ "$(losses "$W/fp16.jsonl" | wc -l)" = 4 ] &&
   [ "$(scales "$W/fp16.jsonl" | wc -l)" = 4 ] && diff <(scales "$W/fp16.jsonl") <(scales "$W/cpu_fp16.jsonl") > /dev/null &&
   close "$W/cpu_fp16.jsonl" "$W/fp16.jsonl" 1e-4; then
    ok cuda_fp16_run_within_1e-4_of_cpu_fp16 "$(worst "$W/fp16.jsonl" "$W/cpu_fp16.jsonl"), loss scales equal ($(scales "$W/fp16.jsonl" | cut -d' ' -f2 | sort -u | paste -sd' ')) (head dim 64, dropout 0.1, the fp16 tensor-core attention)"
else
    fail cuda_fp16_run_within_1e-4_of_cpu_fp16 "$(tail -1 "$W/fp16.out") $(worst "$W/fp16.jsonl" "$W/cpu_fp16.jsonl"); scales $(scales "$W/fp16.jsonl" | tr '\n' ' ') vs $(scales "$W/cpu_fp16.jsonl" | tr '\n' ' ')"
fi
run fp16_layer --device cuda --precision fp16 --recompute layer "${BF[@]}" --save "$W/fp16_layer.bin"
if [ -s "$W/fp16.bin" ] && diff <(losses "$W/fp16.jsonl") <(losses "$W/fp16_layer.jsonl") > /dev/null && cmp -s "$W/fp16.bin" "$W/fp16_layer.bin"; then
    ok cuda_fp16_recompute_layer_bitwise_equals_none "$(losses "$W/fp16.jsonl" | wc -l) losses and the model file identical"
else
    fail cuda_fp16_recompute_layer_bitwise_equals_none "$(diff <(losses "$W/fp16.jsonl") <(losses "$W/fp16_layer.jsonl") | head -2 | tr '\n' ' ') $(cmp "$W/fp16.bin" "$W/fp16_layer.bin" 2>&1)"
fi
for dev in cpu cuda; do
    SEEDGPT_FAULT=fp16_overflow:2 "$TRAIN" "${BASE[@]}" "${BF[@]}" --device $dev --precision fp16 --log-json "$W/ov_$dev.jsonl" > "$W/ov_$dev.out" 2>&1
done
ovline=$(grep '^step 2: fp16 gradient overflow' "$W/ov_cuda.out")
if [ -n "$ovline" ] && [ "$ovline" = "$(grep '^step 2: fp16 gradient overflow' "$W/ov_cpu.out")" ] &&
   echo "$ovline" | grep -q 'first non-finite gradient in the backward: lnfw' &&
   grep -q '"step":2,.*"skipped":true' "$W/ov_cuda.jsonl" && [ "$(grep -c '"skipped":true' "$W/ov_cuda.jsonl")" = 1 ] &&
   diff <(scales "$W/ov_cuda.jsonl") <(scales "$W/ov_cpu.jsonl") > /dev/null; then
    ok cuda_fp16_planted_overflow_skips_that_step_as_the_cpu "$ovline; one skipped row, the scales of the CPU run"
else
    fail cuda_fp16_planted_overflow_skips_that_step_as_the_cpu "cuda: '$ovline' cpu: '$(grep '^step 2: fp16' "$W/ov_cpu.out")'; skipped rows $(grep -c '"skipped":true' "$W/ov_cuda.jsonl"); $(tail -1 "$W/ov_cuda.out")"
fi
rm -rf "$W/run_fp16"
SEEDGPT_FAULT=sigterm:1 "$TRAIN" "${BASE[@]}" "${BF[@]}" --device cuda --precision fp16 --out "$W/run_fp16" > "$W/leg1_fp16.out" 2>&1
rc1=$?
"$TRAIN" "${BASE[@]}" "${BF[@]}" --device cpu --precision fp16 --resume "$W/run_fp16" > "$W/leg2_fp16.out" 2>&1
rc=$?
if [ $rc1 -eq 143 ] && [ $rc -eq 0 ] && grep -q 'resumed from .*state_00000002.bin' "$W/leg2_fp16.out" &&
   grep -q '"step":3' "$W/run_fp16/log.jsonl" && close "$W/cpu_fp16.jsonl" "$W/run_fp16/log.jsonl" 1e-4 &&
   diff <(scales "$W/run_fp16/log.jsonl") <(scales "$W/cpu_fp16.jsonl") > /dev/null; then
    ok state_saved_by_cuda_fp16_resumes_in_fp16_on_cpu "2 steps on cuda, 2 on cpu: $(worst "$W/run_fp16/log.jsonl" "$W/cpu_fp16.jsonl") vs the straight cpu fp16 run, the same scales"
else
    fail state_saved_by_cuda_fp16_resumes_in_fp16_on_cpu "statuses $rc1 $rc (expect 143 0): $(tail -1 "$W/leg2_fp16.out") $(worst "$W/run_fp16/log.jsonl" "$W/cpu_fp16.jsonl")"
fi
if [ "$TRAIN" = "${TRAIN%emu/train}" ]; then
    echo "SKIP cuda_fp16_on_sm70_within_1e-3_of_cpu_fp16: the compute capability is chosen only in the emulation (SG_EMU_CC)"
elif SG_EMU_CC=70 run fp16_sm70 --device cuda --precision fp16 "${BF[@]}" && grep -q 'no mma.sync m16n8k8 below sm_75' "$W/fp16_sm70.out" &&
     close "$W/cpu_fp16.jsonl" "$W/fp16_sm70.jsonl" 1e-3; then
    ok cuda_fp16_on_sm70_within_1e-3_of_cpu_fp16 "$(worst "$W/fp16_sm70.jsonl" "$W/cpu_fp16.jsonl") (the fp32 attention kernels on fp16 values)"
else
    fail cuda_fp16_on_sm70_within_1e-3_of_cpu_fp16 "$(grep 'cuda:' "$W/fp16_sm70.out" | head -1) $(tail -1 "$W/fp16_sm70.out") $(worst "$W/fp16_sm70.jsonl" "$W/cpu_fp16.jsonl")"
fi
# the plan's peak is the run's counted peak, to the byte, on each backend and precision
run cuda_sel --device cuda --recompute selective
wrong=0; detail=; detail_ok=
for spec in "cpu|--device cpu --precision fp32|none|peak_bytes" "cuda|--device cuda --precision fp32|none|device_peak_bytes" \
            "cuda_layer|--device cuda --precision fp32 --recompute layer|layer|device_peak_bytes" \
            "cuda_sel|--device cuda --precision fp32 --recompute selective|selective|device_peak_bytes" \
            "cpu64|--device cpu --precision fp32 ${BF[*]}|none|peak_bytes" \
            "bf16|--device cuda --precision bf16 ${BF[*]}|none|device_peak_bytes" \
            "bf16_layer|--device cuda --precision bf16 --recompute layer ${BF[*]}|layer|device_peak_bytes" \
            "cpu_fp16|--device cpu --precision fp16 ${BF[*]}|none|peak_bytes" \
            "fp16|--device cuda --precision fp16 ${BF[*]}|none|device_peak_bytes" \
            "fp16_layer|--device cuda --precision fp16 --recompute layer ${BF[*]}|layer|device_peak_bytes"; do
    IFS='|' read -r name flags pol key <<< "$spec"
    # shellcheck disable=SC2086
    want=$("$TRAIN" plan "${BASE[@]}" $flags --format json 2>/dev/null | grep "\"policy\":\"$pol\"" | grep -o '"peak_bytes":[0-9]*' | cut -d: -f2)
    got=$(grep '"type":"train"' "$W/$name.jsonl" | tail -1 | grep -o "\"$key\":[0-9]*" | cut -d: -f2)
    [ -n "$want" ] && [ "$got" = "$want" ] || { wrong=$((wrong + 1)); detail="$detail $name: planned '$want', counted '$got';"; }
    detail_ok="$detail_ok $name $got;"
done
if [ $wrong -eq 0 ]; then
    ok plan_peak_equals_the_counted_peak_on_each_backend "10 runs, planned = counted bytes:$detail_ok"
else
    fail plan_peak_equals_the_counted_peak_on_each_backend "$wrong of 10 differ:$detail"
fi
[ $failed -eq 0 ]
