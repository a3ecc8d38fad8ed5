#!/usr/bin/env bash
# tests/test_zero.sh — ZeRO-1 (`--zero 1`, model/zero.h) end to end under mpirun, on this machine:
#   - --zero 1 equals plain data parallelism bit for bit (every train loss and grad norm of the
#     JSON log, every eval loss, the model file) at 2, 3 and 4 ranks, dropout 0.1, the clip active,
#     the shards cut inside tensors of several norm blocks; and at 2, 3 and 4 ranks under
#     --precision bf16, where the fp32 masters of qkvw, attprojw, fcw and fcprojw are sharded too;
#   - the sums do not depend on MPI's algorithms: plain data parallelism on 4 ranks with two
#     different forced allreduce and broadcast algorithms gives the same bits (seedgpt adds in
#     rank order itself);
#   - 4 ranks x batch 1 under --zero 1 agree with one process x batch 4 to rounding;
#   - a --zero 1 run stopped by SIGTERM after step 3 and resumed, with --zero 1 and without it,
#     ends bit for bit as the straight run (the state holds the whole optimizer); a resume with
#     another rank count is refused in one line naming both counts;
#   - under bf16 (sharded masters) a --zero 1 run's state and model.bin equal plain data
#     parallelism's byte for byte (the masters gathered to rank 0 at a save), and a run stopped by
#     SIGTERM resumes bit for bit, with --zero 1 (the masters re-sharded) and without it;
#   - SIGKILL of rank 1 in the middle of a step loses no saved state: the newest state loads and
#     the resumed run ends bit for bit as the straight run;
#   - planned = counted: `./train plan --ranks N --zero 1` gives each rank's peak, equal to the byte
#     to the peak each rank of the run counts, at 2 and 4 ranks (at 1, the plan of ./train), each
#     below plain data parallelism's; --memory-budget between the two takes --zero 1 as its lever
#     and says so; under bf16 at 2 and 4 ranks too, each rank's planned weights below the whole
#     block's (the sharded masters counted);
#   - bad input, one line and exit 2 each: --zero 1 in one process (./train, and one rank of
#     ./train_mpi), --zero 2, --zero 1 with --context-parallel, --zero 1 --precision bf16 with
#     --init (the masters are sharded).
# Without mpirun or ./train_mpi the checks print SKIP. Each rank runs 1 OpenMP thread.
set -u
cd "$(dirname "$0")/.."
TRAIN=${SEEDGPT_TRAIN:-./train}
TRAIN_MPI=${SEEDGPT_TRAIN_MPI:-./train_mpi}
CHECKS=(equals_plain_bitwise_2_ranks equals_plain_bitwise_3_ranks
        equals_plain_bitwise_4_ranks equals_plain_bitwise_2_ranks_bf16
        equals_plain_bitwise_3_ranks_bf16 equals_plain_bitwise_4_ranks_bf16
        sums_do_not_depend_on_mpi_algorithms 4_ranks_agree_with_one_process_to_rounding
        resume_is_bit_exact_with_and_without_zero resume_with_another_rank_count_is_refused
        bf16_state_equals_plain_and_resumes_bit_exact
        sigkill_of_rank_1_loses_no_saved_state plan_equals_counted_1_rank
        plan_equals_counted_per_rank_2_ranks plan_equals_counted_per_rank_4_ranks
        plan_equals_counted_per_rank_2_ranks_bf16 plan_equals_counted_per_rank_4_ranks_bf16
        memory_budget_takes_zero_as_its_lever
        in_one_process_refused on_one_rank_refused value_2_refused
        with_context_parallel_refused bf16_with_init_refused)
PREFIX=zero_
NEEDS=("$TRAIN_MPI:make mpi" "$TRAIN:make")
. tests/mpi_common.sh
# C = 64: wte is 384 x 64 = 24576 floats, two norm blocks of 16384, and the shards of 2, 3 and 4
# ranks start inside it and inside the layers' tensors; --clip 0.5 keeps the clip active
MODEL=(--train "$W/data/train_*.bin" --val "$W/data/val_*.bin" --eval-every 4 --eval-batches 2
       --layers 2 --heads 2 --embd 64 --seq-len 32 --lr 3e-3 --warmup 2 --dropout 0.1 --clip 0.5
       --log-every 1 --seed 7 --threads 1)

# the train rows' losses and grad norms, the eval rows' losses
rows() { grep -o '"type":"[a-z]*","step":[0-9]*,"[a-z_]*loss":[^,}]*\|"grad_norm":[^,}]*' "$1"; }
# same LOG_A BIN_A LOG_B BIN_B N: N rows at least, equal rows, equal model files
same() { local n; n=$(rows "$1" | wc -l); [ "$n" -ge "$5" ] && diff <(rows "$1") <(rows "$3") > /dev/null && cmp -s "$2" "$4"; }
yes_no() { [ "$1" -eq 0 ] && echo yes || echo no; }

# ---- --zero 1 = plain data parallelism, bit for bit ------------------------------------------
bitwise_row() {   # NAME RANKS [flags...]
    local name=$1 n=$2; shift 2
    mpin "$n" "$TRAIN_MPI" "${MODEL[@]}" --batch 2 --steps 8 "$@" --log-json "$W/$name.plain.jsonl" \
        --save "$W/$name.plain.bin" > "$W/$name.plain.out" 2>&1
    local rc1=$?
    mpin "$n" "$TRAIN_MPI" "${MODEL[@]}" --batch 2 --steps 8 "$@" --zero 1 \
        --log-json "$W/$name.zero.jsonl" --save "$W/$name.zero.bin" > "$W/$name.zero.out" 2>&1
    local rc2=$?
    local s; same "$W/$name.plain.jsonl" "$W/$name.plain.bin" "$W/$name.zero.jsonl" "$W/$name.zero.bin" 18; s=$?
    report "$name" "$([ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $s -eq 0 ] && grep -q "x $n ranks (mpi), ZeRO-1" "$W/$name.zero.out"; echo $?)" \
        "statuses $rc1 $rc2; $(rows "$W/$name.zero.jsonl" | wc -l) rows (8 losses, 8 grad norms, 2 eval losses) and the model files identical: $(yes_no $s); first loss $(rows "$W/$name.zero.jsonl" | head -1 | grep -o '[-0-9.e]*$')"
}
bitwise_row equals_plain_bitwise_2_ranks 2
bitwise_row equals_plain_bitwise_3_ranks 3
bitwise_row equals_plain_bitwise_4_ranks 4
bitwise_row equals_plain_bitwise_2_ranks_bf16 2 --precision bf16
bitwise_row equals_plain_bitwise_3_ranks_bf16 3 --precision bf16
bitwise_row equals_plain_bitwise_4_ranks_bf16 4 --precision bf16

# ---- MPI's algorithms do not move a bit ----------------------------------------------------------
# Open MPI's tuned collectives with forced algorithms: allreduce 1 (basic linear) and 4 (ring),
# broadcast 1 (basic linear) and 6 (binomial tree); were the gradients summed by MPI_Allreduce,
# 4 ranks would add them in two different orders
ALG_A=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 1
       --mca coll_tuned_bcast_algorithm 1)
ALG_B=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4
       --mca coll_tuned_bcast_algorithm 6)
mpin 4 "${ALG_A[@]}" "$TRAIN_MPI" "${MODEL[@]}" --batch 2 --steps 8 --log-json "$W/alg_a.jsonl" \
    --save "$W/alg_a.bin" > "$W/alg_a.out" 2>&1
rc1=$?
mpin 4 "${ALG_B[@]}" "$TRAIN_MPI" "${MODEL[@]}" --batch 2 --steps 8 --log-json "$W/alg_b.jsonl" \
    --save "$W/alg_b.bin" > "$W/alg_b.out" 2>&1
rc2=$?
same "$W/alg_a.jsonl" "$W/alg_a.bin" "$W/alg_b.jsonl" "$W/alg_b.bin" 18; s=$?
report sums_do_not_depend_on_mpi_algorithms "$([ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $s -eq 0 ]; echo $?)" \
    "4 ranks, allreduce algorithm 1 vs 4 and bcast 1 vs 6: statuses $rc1 $rc2; losses, norms and model files identical: $(yes_no $s)"

# ---- against one process, to rounding ----------------------------------------------------------
"$TRAIN" "${MODEL[@]}" --shuffle 0 --batch 4 --steps 8 --log-json "$W/one.jsonl" \
    --save "$W/one.bin" > /dev/null 2>&1
rc1=$?
mpin 4 "$TRAIN_MPI" "${MODEL[@]}" --shuffle 0 --batch 1 --steps 8 --zero 1 \
    --log-json "$W/four.jsonl" --save "$W/four.bin" > /dev/null 2>&1
rc2=$?
r=$(python3 tests/compare_runs.py "$W/one.jsonl" "$W/one.bin" "$W/four.jsonl" "$W/four.bin")
TOL=5e-6
report 4_ranks_agree_with_one_process_to_rounding \
    "$([ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && awk -v r="$r" -v t=$TOL 'BEGIN { split(r, f, " "); exit !(f[1] == 8 && f[2] <= t && f[3] <= t) }'; echo $?)" \
    "statuses $rc1 $rc2; steps, largest loss difference, weight difference (relative): $r (limit $TOL)"

# ---- resume ------------------------------------------------------------------------------------
RUN=("${MODEL[@]}" --batch 2 --steps 10 --save-every 2 --zero 1)
mpin 2 "$TRAIN_MPI" "${RUN[@]}" --out "$W/straight" > "$W/straight.out" 2>&1
rc0=$?
# the sigterm hook raises SIGTERM on every rank during step 4: both finish it, rank 0 saves
SEEDGPT_FAULT=sigterm:4 mpin 2 -x SEEDGPT_FAULT "$TRAIN_MPI" "${RUN[@]}" --out "$W/halves" \
    > "$W/half1.out" 2>&1
rc1=$?
cp -r "$W/halves" "$W/halves_plain"
mpin 2 "$TRAIN_MPI" --resume "$W/halves" --zero 1 > "$W/half2.out" 2>&1
rc2=$?
mpin 2 "$TRAIN_MPI" --resume "$W/halves_plain" > "$W/half2p.out" 2>&1
rc3=$?
same "$W/straight/log.jsonl" "$W/straight/model.bin" "$W/halves/log.jsonl" "$W/halves/model.bin" 22; s1=$?
same "$W/straight/log.jsonl" "$W/straight/model.bin" "$W/halves_plain/log.jsonl" "$W/halves_plain/model.bin" 22; s2=$?
report resume_is_bit_exact_with_and_without_zero \
    "$([ $rc0 -eq 0 ] && [ $rc1 -eq 143 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ $s1 -eq 0 ] && [ $s2 -eq 0 ] && grep -q 'resumed from .*state_00000005.bin' "$W/half2.out" && grep -q 'ZeRO-1' "$W/half2.out" && ! grep -q 'ZeRO-1' "$W/half2p.out"; echo $?)" \
    "statuses $rc0, $rc1 (SIGTERM at step 4: expect 143), $rc2, $rc3; resumed from state 5 with --zero 1: rows and model.bin identical to the straight run: $(yes_no $s1); without --zero: $(yes_no $s2)"

mpin 3 "$TRAIN_MPI" --resume "$W/straight" --steps 12 --zero 1 > "$W/wrong.out" 2> "$W/wrong.err"
rc=$?
lines=$(grep -c '^seedgpt:' "$W/wrong.err")
report resume_with_another_rank_count_is_refused \
    "$([ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -q 'written by a run of 2 process(es); this run has 3' "$W/wrong.err" && [ ! -f "$W/straight/state_00000012.bin" ]; echo $?)" \
    "a 2-rank --zero 1 state on 3 ranks: status $rc, $lines line \"$(grep -m1 '^seedgpt:' "$W/wrong.err")\""

# ---- bf16: the sharded masters saved whole and resumed -------------------------------------------
# a resume names --precision bf16 (a state resumes across precisions: without it, fp32)
BRUN=("${MODEL[@]}" --batch 2 --steps 10 --save-every 2 --precision bf16)
mpin 2 "$TRAIN_MPI" "${BRUN[@]}" --out "$W/bplain" > "$W/bplain.out" 2>&1
rc0=$?
mpin 2 "$TRAIN_MPI" "${BRUN[@]}" --zero 1 --out "$W/bstraight" > "$W/bstraight.out" 2>&1
rc1=$?
cmp -s "$W/bplain/state_00000010.bin" "$W/bstraight/state_00000010.bin" && cmp -s "$W/bplain/model.bin" "$W/bstraight/model.bin"; s0=$?
SEEDGPT_FAULT=sigterm:4 mpin 2 -x SEEDGPT_FAULT "$TRAIN_MPI" "${BRUN[@]}" --zero 1 --out "$W/bhalves" \
    > "$W/bhalf1.out" 2>&1
rc2=$?
cp -r "$W/bhalves" "$W/bhalves_plain"
mpin 2 "$TRAIN_MPI" --resume "$W/bhalves" --zero 1 --precision bf16 > "$W/bhalf2.out" 2>&1
rc3=$?
mpin 2 "$TRAIN_MPI" --resume "$W/bhalves_plain" --precision bf16 > "$W/bhalf2p.out" 2>&1
rc4=$?
same "$W/bstraight/log.jsonl" "$W/bstraight/model.bin" "$W/bhalves/log.jsonl" "$W/bhalves/model.bin" 22; s1=$?
same "$W/bstraight/log.jsonl" "$W/bstraight/model.bin" "$W/bhalves_plain/log.jsonl" "$W/bhalves_plain/model.bin" 22; s2=$?
report bf16_state_equals_plain_and_resumes_bit_exact \
    "$([ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ $s0 -eq 0 ] && [ $rc2 -eq 143 ] && [ $rc3 -eq 0 ] && [ $rc4 -eq 0 ] && [ $s1 -eq 0 ] && [ $s2 -eq 0 ] && grep -q 'resumed from .*state_00000005.bin' "$W/bhalf2.out" && grep -q 'ZeRO-1.*precision bf16' "$W/bhalf2.out"; echo $?)" \
    "statuses $rc0 $rc1; state 10 and model.bin equal plain data parallelism's: $(yes_no $s0); SIGTERM at step 4: $rc2 (expect 143); resumed $rc3 $rc4: rows and model.bin identical to the straight run with --zero 1: $(yes_no $s1), without: $(yes_no $s2)"

# ---- SIGKILL of one rank ------------------------------------------------------------------------
# rank 1 alone kills itself in the middle of step 7 (after its backward, before the update); the
# states of steps 2, 4 and 6 were saved by rank 0; mpirun then ends rank 0
ABS=$(cd "$(dirname "$TRAIN_MPI")" && pwd)/$(basename "$TRAIN_MPI")
timeout 300 "${MPIRUN[@]}" -np 1 "$ABS" "${RUN[@]}" --out "$W/killed" : \
    -np 1 env SEEDGPT_FAULT=step_mid:7 "$ABS" "${RUN[@]}" --out "$W/killed" > "$W/killed.out" 2>&1
rc1=$?
newest=$(ls "$W/killed" | grep -o 'state_[0-9]*\.bin$' | sort | tail -1)
tmps=$(ls -a "$W/killed" | grep -c '\.tmp')
mpin 2 "$TRAIN_MPI" --resume "$W/killed" --zero 1 > "$W/killed2.out" 2>&1
rc2=$?
same "$W/straight/log.jsonl" "$W/straight/model.bin" "$W/killed/log.jsonl" "$W/killed/model.bin" 22; s=$?
report sigkill_of_rank_1_loses_no_saved_state \
    "$([ $rc1 -ne 0 ] && [ "$newest" = state_00000006.bin ] && [ $rc2 -eq 0 ] && grep -q "resumed from .*$newest" "$W/killed2.out" && [ $s -eq 0 ]; echo $?)" \
    "mpirun status $rc1 (non-zero); newest state $newest (state_00000006.bin expected), $tmps .tmp left; resumed: status $rc2, rows and model.bin identical to the straight run: $(yes_no $s)"

# ---- planned = counted, per rank -----------------------------------------------------------------
# the plan of the run's flags (--out: rank 0 holds the buffer a save gathers into), policy layer
PLAN=("${MODEL[@]}" --batch 2 --steps 3 --recompute layer)
field() { grep -o "\"$2\":[0-9]*" <<< "$1" | head -1 | cut -d: -f2; }
"$TRAIN" plan "${PLAN[@]}" --out "$W/p1" --precision fp32 --device cpu --format json > "$W/plan1.jsonl" 2>&1
planned=$(field "$(grep '"policy":"layer"' "$W/plan1.jsonl")" peak_bytes)
"$TRAIN" "${PLAN[@]}" --out "$W/p1" > /dev/null 2>&1
rc=$?
counted=$(grep '"type":"train"' "$W/p1/log.jsonl" 2> /dev/null | tail -1 | grep -o '"peak_bytes":[0-9]*' | cut -d: -f2)
report plan_equals_counted_1_rank "$([ $rc -eq 0 ] && [ -n "$planned" ] && [ "$planned" = "$counted" ]; echo $?)" \
    "./train plan: ${planned:-none} B, ./train counted ${counted:-none} B (status $rc)"
PLAIN_PEAK=$planned
for n in 2 4; do
    "$TRAIN" plan "${PLAN[@]}" --out "$W/p$n" --precision fp32 --device cpu --ranks $n --zero 1 \
        --format json > "$W/plan$n.jsonl" 2>&1
    mpin $n "$TRAIN_MPI" "${PLAN[@]}" --out "$W/p$n" --zero 1 > "$W/p$n.out" 2>&1
    rc=$?
    read -r -a counted <<< "$(sed -n 's/^ZeRO-1 peak bytes by rank: //p' "$W/p$n.out")"
    good=$([ $rc -eq 0 ] && [ ${#counted[@]} -eq $n ]; echo $?); detail=
    for ((q = 0; q < n; q++)); do
        planned=$(field "$(grep '"policy":"layer"' "$W/plan$n.jsonl" | grep "\"rank\":$q}")" peak_bytes)
        detail="$detail rank $q planned ${planned:-none} counted ${counted[$q]:-none};"
        [ -n "$planned" ] && [ "$planned" = "${counted[$q]:-}" ] && [ "$planned" -lt "$PLAIN_PEAK" ] || good=1
    done
    report plan_equals_counted_per_rank_${n}_ranks "$good" \
        "status $rc; bytes:$detail plain data parallelism's peak $PLAIN_PEAK B"
done
# bf16: the masters of the operand-only tensors sharded too; each rank's planned weights (the fp32
# it holds) below the whole block's, which plain data parallelism holds
"$TRAIN" plan "${PLAN[@]}" --precision bf16 --device cpu --format json > "$W/planb1.jsonl" 2>&1
WHOLE=$(field "$(grep '"policy":"layer"' "$W/planb1.jsonl")" params_bytes)
for n in 2 4; do
    "$TRAIN" plan "${PLAN[@]}" --out "$W/pb$n" --precision bf16 --device cpu --ranks $n --zero 1 \
        --format json > "$W/planb$n.jsonl" 2>&1
    mpin $n "$TRAIN_MPI" "${PLAN[@]}" --precision bf16 --out "$W/pb$n" --zero 1 > "$W/pb$n.out" 2>&1
    rc=$?
    read -r -a counted <<< "$(sed -n 's/^ZeRO-1 peak bytes by rank: //p' "$W/pb$n.out")"
    good=$([ $rc -eq 0 ] && [ ${#counted[@]} -eq $n ] && [ -n "$WHOLE" ]; echo $?); detail=
    for ((q = 0; q < n; q++)); do
        row=$(grep '"policy":"layer"' "$W/planb$n.jsonl" | grep "\"rank\":$q}")
        planned=$(field "$row" peak_bytes); held=$(field "$row" params_bytes)
        detail="$detail rank $q planned ${planned:-none} counted ${counted[$q]:-none} weights ${held:-none};"
        [ -n "$planned" ] && [ "$planned" = "${counted[$q]:-}" ] && [ -n "$held" ] && [ "$held" -lt "${WHOLE:-0}" ] || good=1
    done
    report plan_equals_counted_per_rank_${n}_ranks_bf16 "$good" \
        "status $rc; bytes:$detail the whole block's weights ${WHOLE:-none}"
done
# a budget the largest rank's ZeRO-1 peak fits, plain data parallelism's not (policy none)
"$TRAIN" plan "${MODEL[@]}" --batch 2 --precision fp32 --device cpu --ranks 2 --zero 1 \
    --format json > "$W/planb.jsonl" 2>&1
budget=$(grep '"policy":"none"' "$W/planb.jsonl" | grep -o '"peak_bytes":[0-9]*' | cut -d: -f2 | sort -n | tail -1)
mpin 2 "$TRAIN_MPI" "${MODEL[@]}" --batch 2 --steps 2 --memory-budget "${budget}B" > "$W/budget.out" 2>&1
rc=$?
report memory_budget_takes_zero_as_its_lever \
    "$([ $rc -eq 0 ] && [ -n "$budget" ] && grep -q 'memory budget .*: --zero 1, AdamW.s moments sharded over the 2 ranks' "$W/budget.out" && grep -q '^recompute: none,' "$W/budget.out" && grep -q 'ZeRO-1' "$W/budget.out"; echo $?)" \
    "status $rc; budget ${budget:-none} B: \"$(grep -m1 '^memory budget' "$W/budget.out")\""

# ---- bad input ---------------------------------------------------------------------------------
refused() {   # NAME WANT_TEXT command...: exit 2 and one line on stderr containing WANT_TEXT
    local name=$1 want=$2; shift 2
    "$@" > "$W/$name.out" 2> "$W/$name.err"
    local rc=$? lines
    lines=$(grep -c '^seedgpt:' "$W/$name.err")
    report "$name" "$([ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$want" "$W/$name.err"; echo $?)" \
        "status $rc, $lines line: \"$(grep -m1 '^seedgpt:' "$W/$name.err")\""
}
refused in_one_process_refused "this run has one process" \
    "$TRAIN" "${MODEL[@]}" --batch 2 --steps 2 --zero 1
refused on_one_rank_refused "this run has one process" \
    mpin 1 "$TRAIN_MPI" "${MODEL[@]}" --batch 2 --steps 2 --zero 1
refused value_2_refused "--zero 2: expected 0 (off) or 1" \
    "$TRAIN" "${MODEL[@]}" --batch 2 --steps 2 --zero 2
refused with_context_parallel_refused "--zero 1 with --context-parallel 2" \
    mpin 2 "$TRAIN_MPI" "${MODEL[@]}" --batch 2 --steps 2 --zero 1 --context-parallel 2
"$TRAIN" "${MODEL[@]}" --batch 2 --steps 1 --save "$W/init.bin" > /dev/null 2>&1
refused bf16_with_init_refused "--zero 1 --precision bf16: --init needs the whole fp32" \
    mpin 2 "$TRAIN_MPI" --train "$W/data/train_*.bin" --threads 1 --batch 2 --steps 2 --zero 1 \
    --precision bf16 --init "$W/init.bin"
exit $failed
