#!/usr/bin/env bash
# tests/cuda/test_arch_choice.sh TRAIN — the CUDA backend chooses its kernels by the GPU's compute
# capability at start (cuda/arch.h), seen from the trainer (build/emu/train, whose emulated device
# reports the compute capability SG_EMU_CC gives):
#   - on sm_90, --precision bf16 runs and its start-up line names the bf16 tensor-core kernels;
#   - on sm_75 (a T4), --precision fp32 runs and its start-up line says sm_75, fp32 kernels and
#     64 KiB of shared memory a block; at head dim 64, whose fp32 attention takes 68-102 KiB in
#     its full layout, so the run shows the kernels bounded by the device's limit (the emulation
#     refuses a launch above it, as a T4 does); and the same on sm_70 (96 KiB) with the same loss;
#   - on sm_75, --precision fp16 runs with the fp16 tensor-core attention (mma.sync m16n8k8), and
#     gives the loss of the same run on sm_90;
#   - on sm_75, --precision bf16 is refused in one line naming sm_80 and sm_75, exit 2, before
#     any step;
#   - below sm_70 (sm_61) the CUDA backend is refused in one line, exit 2.
# Tiny model, two steps.
set -u
cd "$(dirname "$0")/../.."
TRAIN=${1:-build/emu/train}
unset SEEDGPT_FAULT SG_EMU_CC
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
W=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_arch.XXXXXX")
failed=0
trap 'if [ $failed -eq 0 ]; then rm -rf "$W"; else echo "# work folder kept: $W"; fi' EXIT
ok()   { echo "ok   $1: $2"; }
fail() { echo "FAIL $1: $2"; failed=1; }
if [ ! -x "$TRAIN" ]; then fail arch_choice_has_a_trainer "$TRAIN is not built"; exit 1; fi

mkdir -p "$W/text"
head -c 2400 README.md > "$W/text/doc.txt"
"$TRAIN" prepare "$W/text/doc.txt" "$W/data" > /dev/null || { fail arch_choice_data "prepare failed"; exit 1; }
BASE=(--device cuda --train "$W/data/train_*.bin" --layers 1 --heads 2 --embd 32 --seq-len 16 --batch 2
      --steps 2 --log-every 1 --seed 3)
run() {  # NAME CC ARGS...
    local name=$1 cc=$2; shift 2
    SG_EMU_CC=$cc "$TRAIN" "${BASE[@]}" --log-json "$W/$name.jsonl" "$@" > "$W/$name.out" 2> "$W/$name.err"
    echo $? > "$W/$name.rc"
}
rows() { grep -c '"type":"train"' "$W/$1.jsonl" 2>/dev/null || echo 0; }

run bf16_sm90 90 --precision bf16
line=$(grep -m1 '^cuda: ' "$W/bf16_sm90.out")
if [ "$(cat "$W/bf16_sm90.rc")" = 0 ] && [ "$(rows bf16_sm90)" = 2 ] && echo "$line" | grep -q 'sm_90' &&
   echo "$line" | grep -q 'bf16 tensor-core kernels'; then
    ok arch_sm90_bf16_takes_tensor_cores "$line"
else
    fail arch_sm90_bf16_takes_tensor_cores "rc $(cat "$W/bf16_sm90.rc"), $(rows bf16_sm90) rows, line: ${line:-none}; $(tail -2 "$W/bf16_sm90.err" | tr '\n' ' ')"
fi

run fp32_sm75 75 --precision fp32 --embd 128 --heads 2
line=$(grep -m1 '^cuda: ' "$W/fp32_sm75.out")
if [ "$(cat "$W/fp32_sm75.rc")" = 0 ] && [ "$(rows fp32_sm75)" = 2 ] && echo "$line" | grep -q 'sm_75' &&
   echo "$line" | grep -q 'fp32 kernels' && echo "$line" | grep -q 'no bf16 tensor cores' &&
   echo "$line" | grep -q '64 KiB shared memory a block'; then
    ok arch_sm75_fp32_runs_and_says_so "$line"
else
    fail arch_sm75_fp32_runs_and_says_so "rc $(cat "$W/fp32_sm75.rc"), $(rows fp32_sm75) rows, line: ${line:-none}; $(tail -2 "$W/fp32_sm75.err" | tr '\n' ' ')"
fi

# a T4 in fp16: the fp16 table with the sm_75 attention (head dim 64, whose kernels fit 64 KiB),
# the same run on sm_90 (the same kernels, the same bits)
run fp16_sm75 75 --precision fp16 --embd 128 --heads 2
run fp16_sm90 90 --precision fp16 --embd 128 --heads 2
line=$(grep -m1 '^cuda: ' "$W/fp16_sm75.out")
f75=$(grep '"type":"train"' "$W/fp16_sm75.jsonl" 2>/dev/null | tail -1 | grep -o '"loss":[^,]*')
f90=$(grep '"type":"train"' "$W/fp16_sm90.jsonl" 2>/dev/null | tail -1 | grep -o '"loss":[^,]*')
if [ "$(cat "$W/fp16_sm75.rc")" = 0 ] && [ "$(rows fp16_sm75)" = 2 ] && echo "$line" | grep -q 'sm_75' &&
   echo "$line" | grep -q 'fp16 tensor-core attention, mma.sync m16n8k8' && [ -n "$f75" ] && [ "$f75" = "$f90" ]; then
    ok arch_sm75_fp16_takes_the_fp16_tensor_cores "$line; last $f75 on sm_75 and sm_90"
else
    fail arch_sm75_fp16_takes_the_fp16_tensor_cores "rc $(cat "$W/fp16_sm75.rc"), $(rows fp16_sm75) rows, ${f75:-none} vs ${f90:-none}, line: ${line:-none}; $(tail -2 "$W/fp16_sm75.err" | tr '\n' ' ')"
fi

run fp32_sm90 90 --precision fp32 --embd 128 --heads 2
run fp32_sm70 70 --precision fp32 --embd 128 --heads 2
loss() { grep '"type":"train"' "$W/$1.jsonl" 2>/dev/null | tail -1 | grep -o '"loss":[^,]*'; }
l90=$(loss fp32_sm90); l75=$(loss fp32_sm75); l70=$(loss fp32_sm70)
if [ "$(cat "$W/fp32_sm70.rc")" = 0 ] && [ "$(rows fp32_sm70)" = 2 ] && [ -n "$l90" ] && [ "$l75" = "$l90" ] &&
   [ "$l70" = "$l90" ]; then
    ok arch_hd64_same_loss_on_sm90_sm75_sm70 "$l90 on each"
else
    fail arch_hd64_same_loss_on_sm90_sm75_sm70 "sm_90 ${l90:-none}, sm_75 ${l75:-none}, sm_70 ${l70:-none} (rc $(cat "$W/fp32_sm70.rc")); $(tail -2 "$W/fp32_sm70.err" | tr '\n' ' ')"
fi

run bf16_sm75 75 --precision bf16
rc=$(cat "$W/bf16_sm75.rc"); n=$(wc -l < "$W/bf16_sm75.err")
if [ "$rc" = 2 ] && [ "$n" = 1 ] && grep -q 'precision bf16' "$W/bf16_sm75.err" && grep -q 'sm_80' "$W/bf16_sm75.err" &&
   grep -q 'sm_75' "$W/bf16_sm75.err" && [ "$(rows bf16_sm75)" = 0 ]; then
    ok arch_sm75_refuses_bf16_in_one_line "exit 2: $(cat "$W/bf16_sm75.err")"
else
    fail arch_sm75_refuses_bf16_in_one_line "exit $rc, $n lines on stderr, $(rows bf16_sm75) steps: $(head -3 "$W/bf16_sm75.err" | tr '\n' ' ')"
fi

run fp32_sm61 61 --precision fp32
rc=$(cat "$W/fp32_sm61.rc"); n=$(wc -l < "$W/fp32_sm61.err")
if [ "$rc" = 2 ] && [ "$n" = 1 ] && grep -q 'sm_61' "$W/fp32_sm61.err" && grep -q 'sm_70' "$W/fp32_sm61.err"; then
    ok arch_below_sm70_refused_in_one_line "exit 2: $(cat "$W/fp32_sm61.err")"
else
    fail arch_below_sm70_refused_in_one_line "exit $rc, $n lines on stderr: $(head -3 "$W/fp32_sm61.err" | tr '\n' ' ')"
fi
[ $failed -eq 0 ]
