#!/usr/bin/env bash
# tests/cuda/test_nccl_emu.sh EMU_BUILD — GPU ranks without GPUs: each rank a process of this
# machine with an emulated GPU (cuda/emu/cuda_emu.h), NCCL emulated between them
# (cuda/emu/nccl_emu.h), the binaries of `make emu-nccl-bins` in EMU_BUILD (default build/emu):
#   - nccl_ranks at 2 and 3 ranks: dist/dist_nccl.cu's device sums are the rank-order sums, bit
#     for bit (the reduce-scatter over several rounds and uneven shards, one of them empty; the
#     all-gather; the host sums; the context-parallel ring);
#   - ./train_cuda_nccl, 2 ranks started with --rank/--world/--init-file, dropout 0.1: every loss
#     and the final weights equal one process accumulating the same 2 micro-batches, to rounding
#     (as ./train_mpi's ranks do: the gradient sums are grouped differently);
#   - on those ranks, recompute layer and none: the same losses and model file, bit for bit;
#   - ./train_mpi_cuda under mpirun (the NCCL id over MPI): the same losses and model file as
#     the --init-file start, bit for bit (SKIP without mpirun and the MPI build);
#   - ./train_mpi_cuda --context-parallel 2: each sequence split over the 2 ranks' GPUs, the ring
#     over NCCL: the losses within 1e-6 and the weights within 1e-5 of one process (the limits of
#     tests/test_cp.sh: the attention's sums are grouped by chunk);
#   - --zero 1 on GPU ranks (AdamW's moments, and under bf16 the operand-only masters, sharded;
#     the gradients reduce-scattered and the weights all-gathered on the device; the norm from the
#     shards' partials added as the CUDA backend adds them): bit for bit plain data parallelism's
#     rows (losses, gradient norms, evaluations) and model file at 2 and 3 ranks, fp32 and bf16;
#     a --zero 1 state stopped by SIGTERM and resumed with --zero 1 and without it, bit for bit the
#     straight run, and one whose rank 1 is killed (SIGKILL) mid-step loses no saved state;
#     ./train plan --device cuda --ranks 2 --zero 1 equal to each rank's counted
#     device peak; --memory-budget taking --zero 1 as its lever; under mpirun, the file start's
#     bits.
set -u
cd "$(dirname "$0")/../.."
EMU=${1:-build/emu}
RANKS=$EMU/nccl_ranks TRAIN=$EMU/train TRAIN_NCCL=$EMU/train_cuda_nccl TRAIN_MPI=$EMU/train_mpi_cuda
unset SEEDGPT_FAULT
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 SG_EMU_NCCL_TIMEOUT=${SG_EMU_NCCL_TIMEOUT:-30}
W=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_nccl_emu.XXXXXX")
failed=0
trap 'if [ $failed -eq 0 ]; then rm -rf "$W"; else echo "# work folder kept: $W"; fi' EXIT
ok()   { echo "ok   nccl_emu_$1: $2"; }
fail() { echo "FAIL nccl_emu_$1: $2"; failed=1; }
skip() { echo "SKIP nccl_emu_$1: $2"; }

for b in "$RANKS" "$TRAIN" "$TRAIN_NCCL"; do
    [ -x "$b" ] || { fail binaries "$b is not built (make emu-nccl-bins)"; exit 1; }
done

# start N ranks of CMD... with --rank/--world/--init-file; rank r's output in $W/PREFIX.r<r>
ranks() {
    local n=$1 prefix=$2; shift 2
    local id="$W/$prefix.id" pids=() rc=0
    rm -f "$id"
    for ((r = n - 1; r >= 0; r--)); do   # the others first: they wait for rank 0's file
        timeout 300 "$@" --rank $r --world "$n" --init-file "$id" > "$W/$prefix.r$r" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    return $rc
}

for n in 2 3; do
    ranks $n sums$n "$RANKS"
    rc=$?
    lines=$(cat "$W"/sums$n.r* | grep -c '^rank [0-9]*: ok ')
    if [ $rc -eq 0 ] && [ "$lines" -eq $((5 * n)) ]; then
        ok "device_sums_in_rank_order_at_${n}_ranks" "5 checks on each of $n ranks; rank 0: $(grep -h 'ok   allreduce' "$W/sums$n.r0" | sed 's/.*allreduce: //')"
    else
        fail "device_sums_in_rank_order_at_${n}_ranks" "status $rc, $lines of $((5 * n)) ok: $(cat "$W"/sums$n.r* | grep -v ': ok ' | head -3 | tr '\n' ' ')"
    fi
done

mkdir -p "$W/text"
head -c 2400 README.md > "$W/text/doc.txt"
"$TRAIN" prepare "$W/text/doc.txt" "$W/data" > /dev/null || { fail data "prepare failed"; exit 1; }
# 2 sequences of 16 tokens a step: 2 ranks x 1, or one process accumulating 2 micro-batches
BASE0=(--train "$W/data/train_*.bin" --val "$W/data/val_*.bin" --layers 2 --heads 2 --embd 32
       --seq-len 16 --batch 1 --steps 6 --lr 3e-3 --dropout 0.1 --eval-every 3 --eval-batches 1
       --log-every 0 --seed 7 --device cuda)
BASE=("${BASE0[@]}" --total-batch 32)

# close LOG_A MODEL_A LOG_B MODEL_B -> "N dl dw" (tests/compare_runs.py)
close() { python3 tests/compare_runs.py "$@"; }
# within RESULT TOL [WEIGHT_TOL]: "N dl dw" with dl below TOL and dw below WEIGHT_TOL (or TOL)
within() { awk -v r="$1" -v t="$2" -v u="${3:-$2}" 'BEGIN { split(r, f, " "); exit !(f[1] > 0 && f[2] <= t && f[3] <= u) }'; }
losses() { grep -o '"type":"train","step":[0-9]*,"loss":[^,}]*' "$1"; }
TOL=5e-6

"$TRAIN" "${BASE[@]}" --log-json "$W/one.jsonl" --save "$W/one.bin" > "$W/one.out" 2>&1
rc1=$?
ranks 2 file "$TRAIN_NCCL" "${BASE[@]}" --log-json "$W/file.jsonl" --save "$W/file.bin"
rc2=$?
r=$(close "$W/one.jsonl" "$W/one.bin" "$W/file.jsonl" "$W/file.bin")
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && within "$r" $TOL && grep -q '2 ranks (nccl, --init-file)' "$W/file.r0"; then
    ok two_gpu_ranks_equal_one_process_accumulating "steps, largest loss difference, weight difference (relative): $r (limit $TOL)"
else
    fail two_gpu_ranks_equal_one_process_accumulating "statuses $rc1 $rc2; $r; $(tail -n 1 "$W/file.r0") $(tail -n 1 "$W/file.r1")"
fi

ranks 2 layer "$TRAIN_NCCL" "${BASE[@]}" --recompute layer --log-json "$W/layer.jsonl" --save "$W/layer.bin"
rc=$?
if [ $rc -eq 0 ] && [ "$(losses "$W/layer.jsonl" | wc -l)" -eq 6 ] &&
   diff <(losses "$W/file.jsonl") <(losses "$W/layer.jsonl") > /dev/null && cmp -s "$W/file.bin" "$W/layer.bin"; then
    ok two_gpu_ranks_recompute_layer_equals_none_bitwise "6 losses and the model file identical"
else
    fail two_gpu_ranks_recompute_layer_equals_none_bitwise "status $rc; $(diff <(losses "$W/file.jsonl") <(losses "$W/layer.jsonl") | head -2 | tr '\n' ' ') $(cmp "$W/file.bin" "$W/layer.bin" 2>&1)"
fi

# ---- ZeRO-1 on GPU ranks: AdamW's moments (and under bf16 the operand-only masters) sharded -----
# C = 64: wte is 320 x 64 floats, two norm blocks, and the shards start inside tensors; --clip 0.5
# keeps the clip (the norm from the shards' partials) active
ZBASE=("${BASE0[@]}" --embd 64 --clip 0.5)
rows() { grep -o '"type":"[a-z]*","step":[0-9]*,"[a-z_]*loss":[^,}]*\|"grad_norm":[^,}]*' "$1"; }
# same LOG_A BIN_A LOG_B BIN_B N: N rows at least, equal rows, equal model files
same() { local n; n=$(rows "$1" | wc -l); [ "$n" -ge "$5" ] && diff <(rows "$1") <(rows "$3") > /dev/null && cmp -s "$2" "$4"; }
for row in "2 fp32" "3 fp32" "2 bf16" "3 bf16"; do
    set -- $row
    n=$1 prec=$2 name=zero_1_equals_plain_bitwise_$1_ranks_$2
    ranks $n zp$n$prec "$TRAIN_NCCL" "${ZBASE[@]}" --precision $prec --log-json "$W/zp$n$prec.jsonl" --save "$W/zp$n$prec.bin"
    rc1=$?
    ranks $n zz$n$prec "$TRAIN_NCCL" "${ZBASE[@]}" --precision $prec --zero 1 --log-json "$W/zz$n$prec.jsonl" --save "$W/zz$n$prec.bin"
    rc2=$?
    if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && same "$W/zp$n$prec.jsonl" "$W/zp$n$prec.bin" "$W/zz$n$prec.jsonl" "$W/zz$n$prec.bin" 14 &&
       grep -q 'ZeRO-1' "$W/zz$n$prec.r0"; then
        ok $name "$(rows "$W/zz$n$prec.jsonl" | wc -l) rows (losses, grad norms, evals) and the model file identical; $(grep -m1 '^ZeRO-1 peak' "$W/zz$n$prec.r0")"
    else
        fail $name "statuses $rc1 $rc2; $(diff <(rows "$W/zp$n$prec.jsonl") <(rows "$W/zz$n$prec.jsonl") | head -2 | tr '\n' ' ') $(tail -n 1 "$W/zz$n$prec.r0")"
    fi
done

# a state written under --zero 1 holds the whole optimizer: stopped by SIGTERM during step 4 on
# every rank (rank 0 saves the state after 5 steps) and resumed, with --zero 1 and without it
RUN=("${ZBASE[@]}" --steps 8 --save-every 2 --zero 1)
ranks 2 straight "$TRAIN_NCCL" "${RUN[@]}" --out "$W/straight"
rc0=$?
SEEDGPT_FAULT=sigterm:4 ranks 2 half1 "$TRAIN_NCCL" "${RUN[@]}" --out "$W/halves"
rc1=$?
cp -r "$W/halves" "$W/halves_plain"
ranks 2 half2 "$TRAIN_NCCL" --resume "$W/halves" --zero 1
rc2=$?
ranks 2 half2p "$TRAIN_NCCL" --resume "$W/halves_plain"
rc3=$?
same "$W/straight/log.jsonl" "$W/straight/model.bin" "$W/halves/log.jsonl" "$W/halves/model.bin" 18; s1=$?
same "$W/straight/log.jsonl" "$W/straight/model.bin" "$W/halves_plain/log.jsonl" "$W/halves_plain/model.bin" 18; s2=$?
if [ $rc0 -eq 0 ] && [ $rc1 -eq 143 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ $s1 -eq 0 ] && [ $s2 -eq 0 ] &&
   grep -q 'resumed from .*state_00000005.bin' "$W/half2.r0" && grep -q 'ZeRO-1' "$W/half2.r0" && ! grep -q 'ZeRO-1' "$W/half2p.r0"; then
    ok zero_1_resume_is_bit_exact_with_and_without_zero "stopped after step 4 (status 143), resumed from state 5 on 2 GPU ranks: rows and model.bin identical to the straight run, with --zero 1 and without"
else
    fail zero_1_resume_is_bit_exact_with_and_without_zero "statuses $rc0, $rc1 (expect 143), $rc2, $rc3; with --zero 1: $s1, without: $s2; $(tail -n 1 "$W/half2.r0")"
fi

# rank 1 alone kills itself (SIGKILL) in the middle of step 7, after its backward; rank 0 saved the
# states of steps 2, 4 and 6, then waits for it in NCCL until the emulation's timeout (5 s here;
# on GPUs the launcher ends it). Nothing saved is lost, and the resume ends as the straight run.
rm -f "$W/killed.id"
SEEDGPT_FAULT=step_mid:7 timeout 300 "$TRAIN_NCCL" "${RUN[@]}" --out "$W/killed" --rank 1 --world 2 \
    --init-file "$W/killed.id" > "$W/killed.r1" 2>&1 &
k1=$!
SG_EMU_NCCL_TIMEOUT=5 timeout 300 "$TRAIN_NCCL" "${RUN[@]}" --out "$W/killed" --rank 0 --world 2 \
    --init-file "$W/killed.id" > "$W/killed.r0" 2>&1
rc0=$?
wait $k1
rc1=$?
newest=$(ls "$W/killed" | grep -o 'state_[0-9]*\.bin$' | sort | tail -1)
tmps=$(ls -a "$W/killed" | grep -c '\.tmp')
ranks 2 killed2 "$TRAIN_NCCL" --resume "$W/killed" --zero 1
rc2=$?
same "$W/straight/log.jsonl" "$W/straight/model.bin" "$W/killed/log.jsonl" "$W/killed/model.bin" 18; s=$?
if [ $rc1 -eq 137 ] && [ $rc0 -ne 0 ] && [ "$newest" = state_00000006.bin ] && [ "$tmps" -eq 0 ] && [ $rc2 -eq 0 ] &&
   grep -q "resumed from .*$newest" "$W/killed2.r0" && [ $s -eq 0 ]; then
    ok zero_1_sigkill_of_rank_1_loses_no_saved_state "rank 1 status 137, rank 0 status $rc0 (\"$(grep -m1 '^seedgpt: rank' "$W/killed.r0" | cut -c1-120)\"); newest state $newest, no .tmp; resumed: rows and model.bin identical to the straight run"
else
    fail zero_1_sigkill_of_rank_1_loses_no_saved_state "statuses rank 1 $rc1 (expect 137), rank 0 $rc0; newest ${newest:-none} (state_00000006.bin expected), $tmps .tmp; resumed $rc2, same $s"
fi

# ./train plan --device cuda --ranks 2 --zero 1: each rank's planned device peak is the counted one
field() { echo "$1" | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }
for prec in fp32 bf16; do
    "$TRAIN" plan "${ZBASE[@]}" --precision $prec --ranks 2 --zero 1 --format json > "$W/plan$prec.jsonl" 2>&1
    read -r -a counted <<< "$(sed -n 's/^ZeRO-1 peak bytes by rank: //p' "$W/zz2$prec.r0")"
    good=$([ ${#counted[@]} -eq 2 ]; echo $?) detail=
    for q in 0 1; do
        planned=$(field "$(grep '"policy":"none"' "$W/plan$prec.jsonl" | grep "\"rank\":$q}")" peak_bytes)
        detail="$detail rank $q planned ${planned:-none} counted ${counted[$q]:-none};"
        [ -n "$planned" ] && [ "$planned" = "${counted[$q]:-}" ] || good=1
    done
    if [ $good -eq 0 ]; then ok plan_equals_counted_device_peak_per_rank_$prec "bytes:$detail"
    else fail plan_equals_counted_device_peak_per_rank_$prec "bytes:$detail"; fi
done

# --memory-budget at ZeRO-1's larger rank peak (policy none) takes --zero 1 as its lever
budget=$(grep '"policy":"none"' "$W/planfp32.jsonl" | grep -o '"peak_bytes":[0-9]*' | cut -d: -f2 | sort -n | tail -1)
ranks 2 budget "$TRAIN_NCCL" "${ZBASE[@]}" --steps 2 --memory-budget "${budget}B"
rc=$?
if [ $rc -eq 0 ] && [ -n "$budget" ] && grep -q 'memory budget .*: --zero 1, AdamW.s moments sharded over the 2 ranks' "$W/budget.r0" &&
   grep -q '^recompute: none,' "$W/budget.r0" && grep -q 'ZeRO-1' "$W/budget.r0"; then
    ok memory_budget_takes_zero_1_on_gpu_ranks "budget $budget B: \"$(grep -m1 '^memory budget' "$W/budget.r0")\""
else
    fail memory_budget_takes_zero_1_on_gpu_ranks "status $rc; budget ${budget:-none} B: $(grep -m1 'memory budget' "$W/budget.r0") $(tail -n 1 "$W/budget.r0")"
fi

MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader
        --mca btl_vader_single_copy_mechanism none -x OMP_NUM_THREADS -x OMP_WAIT_POLICY
        -x SG_EMU_NCCL_TIMEOUT)
if ! command -v mpirun > /dev/null 2>&1 || [ ! -x "$TRAIN_MPI" ]; then
    why="no mpirun or no $TRAIN_MPI (needs mpicc from libopenmpi-dev)"
    skip gpu_ranks_under_mpirun_equal_the_file_start_bitwise "$why"
    skip zero_1_under_mpirun_equals_the_file_start_bitwise "$why"
    skip context_parallel_2_on_gpu_ranks_equals_one_process "$why"
    exit $failed
fi
timeout 300 "${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${BASE[@]}" --log-json "$W/mpi.jsonl" --save "$W/mpi.bin" > "$W/mpi.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q '2 ranks (mpi+nccl)' "$W/mpi.out" && [ "$(losses "$W/mpi.jsonl" | wc -l)" -eq 6 ] &&
   diff <(losses "$W/file.jsonl") <(losses "$W/mpi.jsonl") > /dev/null && cmp -s "$W/file.bin" "$W/mpi.bin"; then
    ok gpu_ranks_under_mpirun_equal_the_file_start_bitwise "6 losses and the model file identical"
else
    fail gpu_ranks_under_mpirun_equal_the_file_start_bitwise "status $rc: $(tail -n 2 "$W/mpi.out" | tr '\n' ' ') $(cmp "$W/file.bin" "$W/mpi.bin" 2>&1)"
fi

timeout 300 "${MPIRUN[@]}" -np 3 "$TRAIN_MPI" "${ZBASE[@]}" --precision bf16 --zero 1 --log-json "$W/mpiz.jsonl" --save "$W/mpiz.bin" > "$W/mpiz.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && same "$W/zz3bf16.jsonl" "$W/zz3bf16.bin" "$W/mpiz.jsonl" "$W/mpiz.bin" 14; then
    ok zero_1_under_mpirun_equals_the_file_start_bitwise "3 ranks, bf16: rows and model file identical"
else
    fail zero_1_under_mpirun_equals_the_file_start_bitwise "status $rc: $(tail -n 2 "$W/mpiz.out" | tr '\n' ' ')"
fi

# context parallelism: one sequence a step, split over the 2 GPU ranks
CP=("${BASE0[@]}" --total-batch 16)
"$TRAIN" "${CP[@]}" --log-json "$W/cp1.jsonl" --save "$W/cp1.bin" > "$W/cp1.out" 2>&1
rc1=$?
timeout 300 "${MPIRUN[@]}" -np 2 "$TRAIN_MPI" "${CP[@]}" --context-parallel 2 --log-json "$W/cp2.jsonl" --save "$W/cp2.bin" > "$W/cp2.out" 2>&1
rc2=$?
r=$(close "$W/cp1.jsonl" "$W/cp1.bin" "$W/cp2.jsonl" "$W/cp2.bin")
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && within "$r" 1e-6 1e-5; then
    ok context_parallel_2_on_gpu_ranks_equals_one_process "steps, largest loss difference, weight difference (relative): $r (limits 1e-6, 1e-5, as tests/test_cp.sh's)"
else
    fail context_parallel_2_on_gpu_ranks_equals_one_process "statuses $rc1 $rc2; $r; $(tail -n 1 "$W/cp2.out")"
fi
exit $failed
