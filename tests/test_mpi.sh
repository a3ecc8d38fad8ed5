#!/usr/bin/env bash
# tests/test_mpi.sh — data parallelism end to end: ./train_mpi under `mpirun -np 2` on this
# machine (loopback), against ./train in one process:
#   - mpirun -np 1 ./train_mpi is ./train, bit for bit (accumulation, shuffle, evaluation);
#   - 2 ranks x batch B equal one process with batch 2B (sequential order: the same rows), with
#     dropout 0.1: every loss and the final weights to rounding (the gradient sums are grouped
#     differently, so not bit for bit);
#   - 2 ranks x batch B x 2 micro-batches equal one process with batch B x 4 micro-batches,
#     shuffled, across an epoch boundary: rank r's micro-batch a is global micro-batch r*A + a;
#   - on 2 ranks, recompute layer and none give the same losses and model file, bit for bit;
#   - a 2-rank run stopped by SIGTERM (on every rank) and resumed on 2 ranks ends bit for bit as
#     the straight run; resuming with another rank count is refused with one line, both ways;
#   - SIGTERM sent to rank 1 alone stops both ranks after the same step: rank 0 saves the state
#     and says so, and the resumed run ends bit for bit as the straight one;
#   - SIGTERM to mpirun itself (Open MPI: SIGTERM to every rank, SIGKILL odls_base_sigkill_timeout
#     seconds later): with the timeout set, the state after the last step is saved, no .tmp is
#     left, and the resumed run ends bit for bit as a straight one: no step lost since the stop;
#     at the default timeout, a rank 0 that finished its step has saved it (no rank leaves first);
#   - MFU under 2 ranks reads every rank's FLOPs against both ranks' peak;
#   - only rank 0 writes: rank 1, started in an empty folder of its own, leaves it empty, and the
#     progress lines appear once.
# Without mpirun or ./train_mpi the checks print SKIP. Each rank runs 1 OpenMP thread.
set -u
cd "$(dirname "$0")/.."
TRAIN=${SEEDGPT_TRAIN:-./train}
TRAIN_MPI=${SEEDGPT_TRAIN_MPI:-./train_mpi}
CHECKS=(one_rank_equals_train_bitwise two_ranks_equal_one_process_with_twice_the_batch
        two_ranks_accumulating_equal_one_process_accumulating_shuffled
        two_ranks_recompute_layer_equals_none_bitwise two_ranks_resume_is_bit_exact
        resume_with_another_rank_count_is_refused sigterm_to_one_rank_stops_both_after_the_same_step
        sigterm_to_mpirun_saves_the_state_and_resumes_bit_exactly
        sigterm_to_mpirun_at_the_default_timeout_saves_what_rank_0_finished
        two_ranks_mfu_counts_the_peak_of_both
        only_rank_0_writes)
PREFIX=mpi_
NEEDS=("$TRAIN_MPI:make mpi" "$TRAIN:make")
. tests/mpi_common.sh
MODEL=(--train "$W/data/train_*.bin" --layers 2 --heads 2 --embd 32 --seq-len 32 --lr 3e-3
       --warmup 2 --dropout 0.1 --log-every 1 --seed 42 --threads 1)

# every train "loss" of a JSON log
losses() { grep -o '"type":"train","step":[0-9]*,"loss":[^,}]*' "$1"; }

# close LOG_A MODEL_A LOG_B MODEL_B -> "N dl dw" (tests/compare_runs.py)
close() { python3 tests/compare_runs.py "$@"; }
# within RESULT TOL: "N dl dw" with both below TOL
within() { awk -v r="$1" -v t="$2" 'BEGIN { split(r, f, " "); exit !(f[1] > 0 && f[2] <= t && f[3] <= t) }'; }
TOL=5e-6

# ---- 1 rank = ./train, bit for bit ------------------------------------------------------------
ONE=("${MODEL[@]}" --val "$W/data/val_*.bin" --eval-every 5 --shuffle 1 --batch 2 --total-batch 192
     --steps 15)
"$TRAIN" "${ONE[@]}" --log-json "$W/plain.jsonl" --save "$W/plain.bin" > /dev/null 2>&1
rc1=$?
timeout 300 "${MPIRUN[@]}" -np 1 "$TRAIN_MPI" "${ONE[@]}" --log-json "$W/np1.jsonl" \
    --save "$W/np1.bin" > /dev/null 2>&1
rc2=$?
n=$(grep -c loss "$W/np1.jsonl" 2> /dev/null)
same=$([ "${n:-0}" -eq 18 ] && diff <(grep -o '"step":[0-9]*,"[a-z_]*loss":[^,}]*' "$W/plain.jsonl") \
       <(grep -o '"step":[0-9]*,"[a-z_]*loss":[^,}]*' "$W/np1.jsonl") > /dev/null \
       && cmp -s "$W/plain.bin" "$W/np1.bin"; echo $?)
report one_rank_equals_train_bitwise "$([ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$same" -eq 0 ]; echo $?)" \
    "statuses $rc1 $rc2; ${n:-0} losses (15 train + 3 eval, 3 micro-batches, shuffled) and the model files identical: $([ "$same" -eq 0 ] && echo yes || echo no)"

# ---- 2 ranks x B = one process x 2B ----------------------------------------------------------
"$TRAIN" "${MODEL[@]}" --shuffle 0 --batch 8 --steps 12 --log-json "$W/one.jsonl" \
    --save "$W/one.bin" > "$W/one.out" 2>&1
rc1=$?
mpin 2 "$TRAIN_MPI" "${MODEL[@]}" --shuffle 0 --batch 4 --steps 12 --log-json "$W/two.jsonl" \
    --save "$W/two.bin" > "$W/two.out" 2>&1
rc2=$?
r=$(close "$W/one.jsonl" "$W/one.bin" "$W/two.jsonl" "$W/two.bin")
report two_ranks_equal_one_process_with_twice_the_batch \
    "$([ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && within "$r" $TOL; echo $?)" \
    "statuses $rc1 $rc2; steps, largest loss difference, weight difference (relative): $r (limit $TOL)"

# ---- 2 ranks x B x 2 micro-batches = one process x B x 4 micro-batches, shuffled -------------
# 42 windows, 4 per step: 14 steps cross the epoch boundary after step 10
"$TRAIN" "${MODEL[@]}" --shuffle 1 --batch 4 --total-batch 512 --steps 14 \
    --log-json "$W/acc1.jsonl" --save "$W/acc1.bin" > "$W/acc1.out" 2>&1
rc1=$?
mpin 2 "$TRAIN_MPI" "${MODEL[@]}" --shuffle 1 --batch 4 --total-batch 512 --steps 14 \
    --log-json "$W/acc2.jsonl" --save "$W/acc2.bin" > "$W/acc2.out" 2>&1
rc2=$?
r=$(close "$W/acc1.jsonl" "$W/acc1.bin" "$W/acc2.jsonl" "$W/acc2.bin")
report two_ranks_accumulating_equal_one_process_accumulating_shuffled \
    "$([ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && grep -q 'x 2 ranks (mpi) x 2 micro-batches' "$W/acc2.out" && within "$r" $TOL; echo $?)" \
    "statuses $rc1 $rc2, \"$(grep -o 'batch 4 x 32 x 2 ranks[^,]*' "$W/acc2.out")\"; steps, largest loss difference, weight difference: $r (limit $TOL)"

# ---- recompute layer = none on 2 ranks, bit for bit ------------------------------------------
mpin 2 "$TRAIN_MPI" "${MODEL[@]}" --batch 4 --steps 10 --recompute none \
    --log-json "$W/none.jsonl" --save "$W/none.bin" > "$W/none.out" 2>&1
rc1=$?
mpin 2 "$TRAIN_MPI" "${MODEL[@]}" --batch 4 --steps 10 --recompute layer --recompute-check stop \
    --log-json "$W/layer.jsonl" --save "$W/layer.bin" > "$W/layer.out" 2>&1
rc2=$?
n=$(losses "$W/none.jsonl" | wc -l)
same=$([ "$n" -eq 10 ] && diff <(losses "$W/none.jsonl") <(losses "$W/layer.jsonl") > /dev/null \
       && cmp -s "$W/none.bin" "$W/layer.bin"; echo $?)
report two_ranks_recompute_layer_equals_none_bitwise \
    "$([ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$same" -eq 0 ]; echo $?)" \
    "statuses $rc1 $rc2; $n losses (%.9g) and the model files ($(stat -c %s "$W/none.bin" 2>/dev/null) bytes) identical: $([ "$same" -eq 0 ] && echo yes || echo no)"

# ---- resume on 2 ranks -----------------------------------------------------------------------
RUN=("${MODEL[@]}" --shuffle 1 --batch 4 --steps 24 --val "$W/data/val_*.bin" --eval-every 6
     --eval-batches 3)
mpin 2 "$TRAIN_MPI" "${RUN[@]}" --out "$W/straight" > "$W/straight.out" 2>&1
rc0=$?
# the sigterm hook raises SIGTERM on every rank during step 9: both finish it, rank 0 saves
SEEDGPT_FAULT=sigterm:9 mpin 2 -x SEEDGPT_FAULT "$TRAIN_MPI" "${RUN[@]}" --out "$W/halves" \
    > "$W/half1.out" 2>&1
rc1=$?
mpin 2 "$TRAIN_MPI" --resume "$W/halves" --recompute layer > "$W/half2.out" 2>&1
rc2=$?
all() { grep -o '"type":"[a-z]*","step":[0-9]*,"[a-z_]*loss":[^,}]*' "$1"; }
n=$(all "$W/straight/log.jsonl" | wc -l)
same=$([ "$n" -eq 28 ] && diff <(all "$W/straight/log.jsonl") <(all "$W/halves/log.jsonl") > /dev/null \
       && cmp -s "$W/straight/model.bin" "$W/halves/model.bin"; echo $?)
report two_ranks_resume_is_bit_exact \
    "$([ $rc0 -eq 0 ] && [ $rc1 -eq 143 ] && [ $rc2 -eq 0 ] && [ "$same" -eq 0 ] && grep -q 'resumed from .*state_00000010.bin' "$W/half2.out"; echo $?)" \
    "statuses $rc0, $rc1 (SIGTERM at step 9: expect 143), $rc2; $n losses (24 train + 4 eval) and model.bin identical to the straight run: $([ "$same" -eq 0 ] && echo yes || echo no)"

# ---- another rank count on resume ------------------------------------------------------------
"$TRAIN" --resume "$W/halves" --steps 30 > "$W/wrong1.out" 2> "$W/wrong1.err"
rc1=$?
"$TRAIN" "${MODEL[@]}" --batch 4 --steps 3 --out "$W/single" > /dev/null 2>&1
mpin 2 "$TRAIN_MPI" --resume "$W/single" --steps 6 > "$W/wrong2.out" 2> "$W/wrong2.err"
rc2=$?
lines1=$(grep -c '^seedgpt:' "$W/wrong1.err")
lines2=$(grep -c '^seedgpt:' "$W/wrong2.err")
report resume_with_another_rank_count_is_refused \
    "$([ $rc1 -eq 2 ] && [ $rc2 -eq 2 ] && [ "$lines1" -eq 1 ] && [ "$lines2" -eq 1 ] && grep -q 'written by a run of 2 process(es); this run has 1' "$W/wrong1.err" && grep -q 'written by a run of 1 process(es); this run has 2' "$W/wrong2.err" && [ ! -f "$W/halves/state_00000030.bin" ]; echo $?)" \
    "2-rank state in 1 process: status $rc1, $lines1 line \"$(grep -m1 '^seedgpt:' "$W/wrong1.err")\"; 1-process state on 2 ranks: status $rc2, $lines2 line"

# ---- SIGTERM to rank 1 alone --------------------------------------------------------------------
LONG=("${MODEL[@]}" --shuffle 1 --batch 4 --steps 200 --log-every 0)
mpin 2 "$TRAIN_MPI" "${LONG[@]}" --out "$W/long" > "$W/long.out" 2>&1
rc0=$?
mpin 2 "$TRAIN_MPI" "${LONG[@]}" --out "$W/sig" > "$W/sig.out" 2>&1 &
job=$!
# rank 1: the process of this run (its --out is unique) whose MPI rank is 1
rank1=""
for _ in $(seq 1 600); do
    if [ -z "$rank1" ]; then
        for p in $(ps -eo pid=,args= | grep -E -- "--out $W/sig( |\$)" | grep -v -e mpirun -e grep | awk '{print $1}'); do
            { tr '\0' '\n' < "/proc/$p/environ"; } 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && rank1=$p
        done
    fi
    [ -n "$rank1" ] && [ "$({ wc -l < "$W/sig/log.jsonl"; } 2> /dev/null || echo 0)" -ge 5 ] && break
    sleep 0.1
done
[ -n "$rank1" ] && kill -TERM "$rank1" 2> /dev/null
wait "$job"
rc1=$?
stopped=$(grep -o 'stopped by SIGTERM after step [0-9]*' "$W/sig.out")
k=${stopped##* }
mpin 2 "$TRAIN_MPI" --resume "$W/sig" > "$W/sig2.out" 2>&1
rc2=$?
same=$(diff <(losses "$W/long/log.jsonl") <(losses "$W/sig/log.jsonl") > /dev/null \
       && cmp -s "$W/long/model.bin" "$W/sig/model.bin"; echo $?)
report sigterm_to_one_rank_stops_both_after_the_same_step \
    "$([ $rc0 -eq 0 ] && [ -n "$rank1" ] && [ $rc1 -eq 143 ] && [ -n "$k" ] && grep -q "resumed from .*state_$(printf %08d $((k + 1))).bin" "$W/sig2.out" && [ $rc2 -eq 0 ] && [ "$same" -eq 0 ]; echo $?)" \
    "rank 1 (pid ${rank1:-not found}) got SIGTERM; status $rc1 (expect 143), rank 0: \"$stopped\" (it got no signal itself); resumed from step ${k:-?}+1: status $rc2, 200 losses and model.bin identical to the straight run: $([ "$same" -eq 0 ] && echo yes || echo no)"

# ---- SIGTERM to mpirun itself --------------------------------------------------------------------
# Open MPI's mpirun (4.1), stopped, sends every rank SIGCONT, waits odls_base_sigkill_timeout
# seconds (default 1), sends SIGTERM, waits as long again, then SIGKILL: the ranks finish their
# step and rank 0 saves in that second wait. And once one rank has exited non-zero, mpirun kills
# the others about a timeout minus 1 s later: at the default, at once, so no rank may leave before
# rank 0 has saved. mpirun is started without `timeout`, which would signal the whole process
# group (the ranks too); a watchdog kills it if it hangs. stop_mpirun OUT TIMEOUT ARGS...: starts
# the run, sends SIGTERM to mpirun after 5 logged steps, sets rc and k (the last step rank 0
# finished, from its "done:" line; empty when it was killed before).
stop_mpirun() {
    local out=$1 t=$2; shift 2
    local mca=(); [ "$t" != default ] && mca=(--mca odls_base_sigkill_timeout "$t")
    "${MPIRUN[@]}" "${mca[@]}" -np 2 "$TRAIN_MPI" "$@" --out "$out" > "$out.out" 2>&1 &
    local job=$! rows
    # (its output to /dev/null: the sleep outlives the kill below, and a sleep holding the test's
    # stdout would keep whoever reads it waiting the 300 s out)
    ( sleep 300; kill -9 $job 2> /dev/null ) > /dev/null 2>&1 &
    local watchdog=$!
    for _ in $(seq 1 600); do
        rows=$(grep -c '"type":"train"' "$out/log.jsonl" 2> /dev/null)
        [ "${rows:-0}" -ge 5 ] && break
        kill -0 $job 2> /dev/null || break
        sleep 0.1
    done
    kill -TERM $job 2> /dev/null
    wait $job
    rc=$?
    kill $watchdog 2> /dev/null; wait $watchdog 2> /dev/null
    k=$(grep -o '^done: [0-9]* steps (stopped early)' "$out.out" | grep -o '[0-9][0-9]*')
    [ -n "$k" ] && k=$((k - 1))
}
# a) with the timeout set, as the README's mpirun line does (4 s: a step on a loaded machine fits):
#    constant learning rate, so that the resumed run can end at any step count: it ends at the
#    step it was stopped at + 20, bit for bit as a straight run of as many steps
STOP=("${MODEL[@]}" --shuffle 1 --batch 4 --log-every 0 --lr-schedule constant)
stop_mpirun "$W/mstop" 4 "${STOP[@]}" --steps 100000
rc1=$rc
lastrow=$(grep -o '"type":"train","step":[0-9]*' "$W/mstop/log.jsonl" | tail -1 | grep -o '[0-9]*$')
tmps=$(ls -a "$W/mstop" | grep -c '\.tmp')
end=$(( ${k:-0} + 21 ))
mpin 2 "$TRAIN_MPI" --resume "$W/mstop" --steps $end > "$W/mstop2.out" 2>&1
rc2=$?
mpin 2 "$TRAIN_MPI" "${STOP[@]}" --steps $end --out "$W/mstraight" > /dev/null 2>&1
rc0=$?
n=$(losses "$W/mstraight/log.jsonl" | wc -l)
same=$([ "$n" -eq $end ] && diff <(losses "$W/mstraight/log.jsonl") <(losses "$W/mstop/log.jsonl") > /dev/null \
       && cmp -s "$W/mstraight/model.bin" "$W/mstop/model.bin"; echo $?)
next=state_$(printf %08d $(( ${k:-0} + 1 ))).bin
report sigterm_to_mpirun_saves_the_state_and_resumes_bit_exactly \
    "$([ $rc1 -ne 0 ] && [ -n "$k" ] && [ "$lastrow" = "$k" ] && [ "$tmps" -eq 0 ] && [ -f "$W/mstop/$next" ] && grep -q "stopped by SIGTERM after step $k (state saved)" "$W/mstop.out" && grep -q "resumed from .*$next" "$W/mstop2.out" && [ $rc2 -eq 0 ] && [ $rc0 -eq 0 ] && [ "$same" -eq 0 ]; echo $?)" \
    "odls_base_sigkill_timeout 4: mpirun status $rc1 (non-zero); rank 0 finished step ${k:-?} (last logged ${lastrow:-?}), $next $([ -f "$W/mstop/$next" ] && echo saved || echo MISSING), $tmps .tmp; resumed to $end steps: status $rc2, $n losses and model.bin identical to a straight run of $end steps: $([ "$same" -eq 0 ] && echo yes || echo no)"
# b) at mpirun's default timeout (1 s), the plain `mpirun -np 2` a user types: a rank 0 that
#    finished its step (its "done:" line) must also have saved the state and --save, although
#    rank 1 has nothing to save (before, rank 1 left at once and mpirun killed rank 0 in the
#    middle of its save: 2 stops of 3 on this machine). A step slower than the 1 s leaves no
#    "done:" line: then there is nothing to judge (said, not failed)
stop_mpirun "$W/mdef" default "${STOP[@]}" --steps 100000 --save "$W/mdef.bin"
if [ -z "$k" ]; then
    ok sigterm_to_mpirun_at_the_default_timeout_saves_what_rank_0_finished "status $rc; rank 0 did not finish its step within mpirun's 1 s: nothing to judge"
else
    next=state_$(printf %08d $((k + 1))).bin
    report sigterm_to_mpirun_at_the_default_timeout_saves_what_rank_0_finished \
        "$([ $rc -ne 0 ] && [ -f "$W/mdef/$next" ] && [ -f "$W/mdef.bin" ] && grep -q "stopped by SIGTERM after step $k (state saved)" "$W/mdef.out"; echo $?)" \
        "mpirun status $rc; rank 0 finished step $k: $next $([ -f "$W/mdef/$next" ] && echo saved || echo MISSING), --save $([ -f "$W/mdef.bin" ] && echo written || echo MISSING), stop line $(grep -q 'stopped by SIGTERM' "$W/mdef.out" && echo said || echo MISSING)"
fi

# ---- MFU reads all ranks' FLOPs against all ranks' peak -------------------------------------------
# --peak-gflops 1 per process: the summary's MFU must be tok/s x FLOPs per token / (2 x 1 GFLOP/s),
# FLOPs per token 6 P + 12 L C T (train.c, flops_per_token); one rank's peak would double it
mpin 2 "$TRAIN_MPI" "${MODEL[@]}" --batch 4 --steps 6 --peak-gflops 1 > "$W/mfu.out" 2>&1
rc=$?
r=$(awk '/^model:/ { for (i = 1; i <= NF; i++) if ($(i + 1) ~ /^parameters/) P = $i }
         /^done:/ { for (i = 1; i <= NF; i++) { if ($(i + 1) == "tok/s,") tok = $i; if ($i == "MFU") mfu = $(i + 1); if ($(i + 1) == "GFLOP/s,") peak = $i } }
         END { sub(/%/, "", mfu); want = 100 * tok * (6 * P + 12 * 2 * 32 * 32) / 2e9;
               printf "%s %s %s %.4f", peak, mfu, want, (want > 0 ? mfu / want : 0) }' "$W/mfu.out")
read -r peak mfu want ratio <<< "$r"
report two_ranks_mfu_counts_the_peak_of_both \
    "$([ $rc -eq 0 ] && [ "$peak" = 2.0 ] && awk -v q="$ratio" 'BEGIN { exit !(q > 0.99 && q < 1.01) }'; echo $?)" \
    "status $rc; MFU ${mfu}% of $peak GFLOP/s (2.0 expected: 2 ranks x --peak-gflops 1); tok/s x FLOPs/token over 2 GFLOP/s: ${want}% (ratio $ratio, 1 expected; 2 when one rank's peak is counted)"

# ---- only rank 0 writes ----------------------------------------------------------------------
# two working folders (MPMD launch): rank 0 in r0, rank 1 in r1, the same relative paths
mkdir -p "$W/r0" "$W/r1"
ABS=$(cd "$(dirname "$TRAIN_MPI")" && pwd)/$(basename "$TRAIN_MPI")
ARGS=("${MODEL[@]}" --batch 4 --steps 4 --out run --save final.bin --log-json log.jsonl
      --sample-every 2 --sample-tokens 8)
timeout 300 "${MPIRUN[@]}" -np 1 -wdir "$W/r0" "$ABS" "${ARGS[@]}" : -np 1 -wdir "$W/r1" "$ABS" \
    "${ARGS[@]}" > "$W/writers.out" 2>&1
rc=$?
r0=$(cd "$W/r0" && find . -type f | sort | tr '\n' ' ')
r1=$(cd "$W/r1" && find . | sed 1d | wc -l)
steps=$(grep -c '^step .*/4 | loss' "$W/writers.out")
samples=$(grep -c 'sample:' "$W/writers.out")
report only_rank_0_writes \
    "$([ $rc -eq 0 ] && [ "$r1" -eq 0 ] && [ -f "$W/r0/run/state_00000004.bin" ] && [ -f "$W/r0/final.bin" ] && [ -f "$W/r0/log.jsonl" ] && [ "$steps" -eq 4 ] && [ "$samples" -eq 2 ]; echo $?)" \
    "status $rc; rank 0 wrote $r0; rank 1 wrote $r1 files; $steps progress lines and $samples samples for 4 steps"
exit $failed
