#!/usr/bin/env bash
# tests/test_resume.sh — runs that survive, end to end through ./train:
#   - resume identity: N steps straight vs K steps + resume + N-K steps (and resuming twice), with
#     dropout 0.1, shuffling across epoch boundaries and activation recompute: the same losses
#     (every "loss" and "val_loss" of the JSON log, %.9g) and the same model file, byte for byte;
#   - crash safety: the trainer kills itself with SIGKILL at seeded fault points (SEEDGPT_FAULT,
#     model/state.h), inside the state write (temp file created, header written, weights written,
#     before fsync, before rename, after rename), around the model file and the pruning, and in the
#     middle of a step; plus kill -9 from outside at random instants. Every restart must resume
#     from the last complete state and the run must end exactly as the uninterrupted one;
#   - the non-finite guard: a NaN loss or gradient norm skips the update, is logged, advances the
#     step and the loader, and --max-bad-steps stops the run (status 4), also across a resume;
#   - refusals: a contradicting flag, a folder without states, a fresh run into another run's
#     folder, torn or corrupted states (skipped, or refused when none loads).
# Every ./train is a tiny model on a few KB of this repository's README: well under a second each.
set -u
cd "$(dirname "$0")/.."
TRAIN=${SEEDGPT_TRAIN:-./train}
export OMP_WAIT_POLICY=passive
unset SEEDGPT_FAULT
W=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_resume.XXXXXX")
failed=0
trap 'if [ $failed -eq 0 ]; then rm -rf "$W"; else echo "# work folder kept: $W"; fi' EXIT

ok()   { echo "ok   $1: $2"; }
fail() { echo "FAIL $1: $2"; failed=1; }
report() { if [ "$2" = 0 ]; then ok "$1" "$3"; else fail "$1" "$3"; fi; }

if [ ! -x "$TRAIN" ]; then fail resume_tests_have_a_trainer "$TRAIN is not built"; exit 1; fi

# ---- data: 3400 bytes -> 3060 training tokens = 23 windows of 4 x 32 (+1): 48 steps cross two
# epoch boundaries (after steps 22 and 45); 2 validation windows.
mkdir -p "$W/text"
head -c 3400 README.md > "$W/text/doc.txt"
"$TRAIN" prepare "$W/text/doc.txt" "$W/data" > /dev/null || { fail resume_data "prepare failed"; exit 1; }

BASE=(--train "$W/data/train_*.bin" --val "$W/data/val_*.bin" --layers 2 --heads 2 --embd 32
      --seq-len 32 --batch 4 --steps 48 --lr 3e-3 --warmup 4 --dropout 0.1 --shuffle 1
      --eval-every 8 --eval-batches 2 --log-every 0 --seed 42)

# every train "loss" and eval "val_loss" of a JSON log, with its step
losses() { grep -o '"type":"[a-z]*","step":[0-9]*,"[a-z_]*loss":[^,}]*' "$1"; }

# compare_to REF_LOG REF_MODEL LOG MODEL: 0 when identical; CMP says what was compared or differs
compare_to() {
    local n
    n=$(losses "$1" | wc -l)
    if [ ! -s "$3" ] || ! diff <(losses "$1") <(losses "$3") > /dev/null; then
        CMP="losses differ: $(diff <(losses "$1") <(losses "$3") 2>&1 | grep '^[<>]' | head -2 | tr '\n' ' ')"
        return 1
    fi
    if ! cmp -s "$2" "$4"; then
        CMP="$n losses identical, but the model files differ: $(cmp "$2" "$4" 2>&1 | head -1)"
        return 1
    fi
    CMP="$n losses (train + eval) identical, model files identical ($(stat -c %s "$4") bytes)"
    return 0
}

# ---- the reference: 48 steps straight, recompute layer, 2 threads
"$TRAIN" "${BASE[@]}" --recompute layer --threads 2 --log-json "$W/ref.jsonl" --save "$W/ref.bin" \
    > "$W/ref.out" 2>&1 || { fail resume_reference_run "status $?: $(tail -1 "$W/ref.out")"; exit 1; }
nref=$(losses "$W/ref.jsonl" | wc -l)
[ "$nref" -eq 54 ] || fail resume_reference_run "expected 48 train + 6 eval losses, log has $nref"

# ---- resume identity ------------------------------------------------------------------------
# K = 16: the sigterm hook raises SIGTERM during step 16; the step finishes, the state is saved
# (17 steps done), status 143. The resumed half runs with other threads and another recompute
# policy (both allowed to change, neither changes a bit).
d=$W/once
SEEDGPT_FAULT=sigterm:16 "$TRAIN" "${BASE[@]}" --recompute layer --threads 2 --out "$d" \
    > "$d.out1" 2>&1
rc1=$?
"$TRAIN" --resume "$d" --threads 1 --recompute none > "$d.out2" 2>&1
rc2=$?
compare_to "$W/ref.jsonl" "$W/ref.bin" "$d/log.jsonl" "$d/model.bin"
cmp_rc=$?
report resume_after_17_steps_matches_straight_run_bitwise \
    "$([ $rc1 -eq 143 ] && [ $rc2 -eq 0 ] && [ $cmp_rc -eq 0 ] && grep -q 'resumed from .*state_00000017.bin' "$d.out2"; echo $?)" \
    "first leg status $rc1 (expect 143), resumed leg status $rc2 at 1 thread, recompute none: $CMP"
report sigterm_finishes_the_step_saves_and_exits_143 \
    "$([ $rc1 -eq 143 ] && grep -q 'stopped by SIGTERM after step 16' "$d.out1"; echo $?)" \
    "status $rc1, \"$(grep -h 'stopped by' "$d.out1")\""

# twice in a row: K1 = 9, K2 = 29 (the second inside the second epoch)
d=$W/twice
SEEDGPT_FAULT=sigterm:9 "$TRAIN" "${BASE[@]}" --recompute every:2 --out "$d" > "$d.out1" 2>&1
rc1=$?
SEEDGPT_FAULT=sigterm:29 "$TRAIN" --resume "$d" > "$d.out2" 2>&1
rc2=$?
"$TRAIN" --resume "$d" > "$d.out3" 2>&1
rc3=$?
compare_to "$W/ref.jsonl" "$W/ref.bin" "$d/log.jsonl" "$d/model.bin"
cmp_rc=$?
report resume_twice_matches_straight_run_bitwise \
    "$([ $rc1 -eq 143 ] && [ $rc2 -eq 143 ] && [ $rc3 -eq 0 ] && [ $cmp_rc -eq 0 ]; echo $?)" \
    "statuses $rc1 $rc2 $rc3 (expect 143 143 0), resumed at $(grep -ho 'step [0-9]*, epoch [0-9]*' "$d.out2" "$d.out3" | tr '\n' ' '): $CMP"

# the model options travel in the state: RoPE (GPT-J pairs, base 500), the parallel block and
# drop-path; a straight run against one stopped after 11 steps and resumed without those flags.
# Giving one of them differently on resume is refused.
OPTS=(--kv-heads 1 --pos rope --rope-base 500 --rope-layout gptj --block parallel --drop-path 0.2)
d=$W/opts
"$TRAIN" "${BASE[@]}" "${OPTS[@]}" --steps 20 --log-json "$d.ref.jsonl" --save "$d.ref.bin" \
    > "$d.ref.out" 2>&1
rc0=$?
SEEDGPT_FAULT=sigterm:10 "$TRAIN" "${BASE[@]}" "${OPTS[@]}" --steps 20 --recompute layer \
    --out "$d" > "$d.out1" 2>&1
rc1=$?
"$TRAIN" --resume "$d" > "$d.out2" 2>&1
rc2=$?
compare_to "$d.ref.jsonl" "$d.ref.bin" "$d/log.jsonl" "$d/model.bin"
cmp_rc=$?
report resume_with_model_options_matches_straight_run_bitwise \
    "$([ $rc0 -eq 0 ] && [ $rc1 -eq 143 ] && [ $rc2 -eq 0 ] && [ $cmp_rc -eq 0 ] && grep -q 'positions rope (base 500, gptj pairs), parallel block, drop-path 0.2' "$d.out2"; echo $?)" \
    "statuses $rc0 $rc1 $rc2 (expect 0 143 0): $CMP"
"$TRAIN" --resume "$d" --steps 24 --block sequential > "$d.out3" 2>&1
rc3=$?
"$TRAIN" --resume "$d" --steps 24 --drop-path 0.3 > "$d.out4" 2>&1
rc4=$?
report resume_refuses_other_model_options \
    "$([ $rc3 -eq 2 ] && [ $rc4 -eq 2 ] && grep -q -- '--block sequential contradicts' "$d.out3" && grep -q -- '--drop-path 0.3 contradicts' "$d.out4"; echo $?)" \
    "statuses $rc3 $rc4 (expect 2 2): $(tail -1 "$d.out3" | cut -c1-100)"

# a clean run through a run folder: the same as without one
d=$W/clean
"$TRAIN" "${BASE[@]}" --out "$d" --save-every 4 --keep 3 > "$d.out" 2>&1
rc=$?
compare_to "$W/ref.jsonl" "$W/ref.bin" "$d/log.jsonl" "$d/model.bin"
cmp_rc=$?
nstates=$(ls "$d"/state_*.bin 2>/dev/null | wc -l)
report run_folder_changes_nothing_and_keeps_newest_states \
    "$([ $rc -eq 0 ] && [ $cmp_rc -eq 0 ] && [ "$nstates" -eq 3 ] && [ -f "$d/state_00000048.bin" ] && [ -f "$d/state_00000040.bin" ]; echo $?)" \
    "status $rc, --keep 3 left $nstates states ($(cd "$d" && ls state_*.bin | tr '\n' ' ')): $CMP"

# extending a run: --steps may grow on resume; with a constant schedule 48 + 12 = 60 straight
CONST=("${BASE[@]}" --lr-schedule constant)
"$TRAIN" "${CONST[@]}" --steps 60 --log-json "$W/ref60.jsonl" --save "$W/ref60.bin" > /dev/null 2>&1
d=$W/extend
"$TRAIN" "${CONST[@]}" --out "$d" > "$d.out1" 2>&1
rc1=$?
"$TRAIN" --resume "$d" --steps 60 > "$d.out2" 2>&1
rc2=$?
compare_to "$W/ref60.jsonl" "$W/ref60.bin" "$d/log.jsonl" "$d/model.bin"
cmp_rc=$?
report extending_steps_on_resume_matches_the_longer_run \
    "$([ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $cmp_rc -eq 0 ]; echo $?)" \
    "statuses $rc1 $rc2, constant schedule: $CMP"

# ---- crash safety: SIGKILL at fault points -------------------------------------------------
# launch DIR FAULT: resumes DIR if it holds a state, else starts the run into it (a state every
# 4 steps, the newest 2 kept). RESUMED = the step it resumed from, or "fresh".
launch() {
    local d=$1 fault=$2
    local cmd
    if ls "$d"/state_*.bin > /dev/null 2>&1; then cmd=("$TRAIN" --resume "$d")
    else cmd=("$TRAIN" "${BASE[@]}" --out "$d" --save-every 4 --keep 2); fi
    # (in a subshell that waits: the shell's own "Killed" notice goes nowhere)
    ( SEEDGPT_FAULT=$fault "${cmd[@]}" > "$d.out" 2> "$d.err"; exit $? ) 2> /dev/null
    local rc=$?
    RESUMED=$(sed -n 's/^resumed from .*: step \([0-9]*\),.*/\1/p' "$d.out")
    [ -n "$RESUMED" ] || RESUMED=fresh
    return $rc
}

# crash_case NAME FAULT1 EXPECT1 [FAULT2 EXPECT2 ...]: run i is killed at FAULTi; run i+1 must
# resume from EXPECTi (the last complete state) and find no torn state; the last run goes to the
# end. The log and model.bin must then equal the reference.
points=0
crash_case() {
    local name=$1; shift
    local d=$W/crash_$name why="" expect="" n=0 path=""
    rm -rf "$d"
    while :; do
        local fault=""
        [ $# -ge 2 ] && fault=$1
        launch "$d" "$fault"
        local rc=$?
        n=$((n + 1))
        if [ -n "$expect" ] && [ "$RESUMED" != "$expect" ]; then
            why+="run $n resumed from $RESUMED, expected $expect; "
        fi
        if grep -q 'skipping' "$d.err"; then why+="run $n met a torn state: $(grep -m1 skipping "$d.err"); "; fi
        path+="$RESUMED"
        if [ -n "$fault" ]; then
            [ $rc -eq 137 ] || why+="SEEDGPT_FAULT=$fault: status $rc, expected 137 (SIGKILL); "
            path+=" -($fault)-> "
            expect=$2
            shift 2
            points=$((points + 1))
        else
            [ $rc -eq 0 ] || why+="last run: status $rc: $(tail -1 "$d.err"); "
            break
        fi
    done
    if [ -z "$why" ] && compare_to "$W/ref.jsonl" "$W/ref.bin" "$d/log.jsonl" "$d/model.bin"; then
        ok "crash_${name}_resumes_last_complete_state_and_ends_identical" "$path -> end: $CMP"
    else
        [ -z "$why" ] && why=$CMP
        fail "crash_${name}_resumes_last_complete_state_and_ends_identical" "$path: $why"
    fi
}

# states are written after steps 4, 8, 12, ... (write #k holds 4k steps); the final one, #12,
# after step 48. A fault index counts the process's own writes, or is the step number.
crash_case before_first_state        step_mid:2        fresh
crash_case first_state_tmp_created   state_open:1      fresh
crash_case tmp_created               state_open:3      8
crash_case header_written            state_header:3    8
crash_case weights_written           state_payload:3   8
crash_case written_before_fsync      state_written:3   8
crash_case fsynced_before_rename     state_fsynced:3   8
crash_case renamed_before_dir_fsync  state_renamed:3   12
crash_case before_model_file         model_before:3    12
crash_case after_model_file          model_saved:3     12
crash_case while_pruning             state_prune:1     12
crash_case mid_step_before_update    step_mid:13       12
crash_case after_update_before_log   step_updated:13   12
crash_case logged_steps_past_state   step_logged:15    12
crash_case across_epoch_boundary     step_mid:25       24
crash_case final_state_write         state_fsynced:12  44
crash_case final_state_before_model  model_before:12   48
crash_case during_log_rewrite        step_mid:13       12   log_truncate:1   12
crash_case twice                     state_payload:3   8    state_written:2  12

# kill -9 from outside at random instants (a state after every step: many kills land inside a
# state write). A run is killed at a random 0-40 ms after it has written its first new state, so
# that the kill lands in the middle of the run whatever the start-up costs on a busy machine; ten
# runs are killed (fewer if one gets to the end first), then one resumes to the end. At least one
# kill must have landed in the middle of the run.
d=$W/random_kills
newest_state() { local f; f=$(ls "$d"/state_*.bin 2> /dev/null | tail -n 1); f=${f##*state_}; f=${f%.bin}
                 echo $((10#${f:-0})); }
kills=0
kill_path=""
rc=1
for i in 1 2 3 4 5 6 7 8 9 10; do
    if ls "$d"/state_*.bin > /dev/null 2>&1; then cmd=("$TRAIN" --resume "$d")
    else cmd=("$TRAIN" "${BASE[@]}" --out "$d" --save-every 1 --keep 2); fi
    before=$(newest_state)
    "${cmd[@]}" > "$d.out" 2>> "$d.err" &
    pid=$!
    for t in $(seq 3000); do   # up to ~30 s for the run's first new state
        [ "$(newest_state)" -gt "$before" ] && break
        kill -0 $pid 2> /dev/null || break
        sleep 0.01
    done
    sleep "$(printf '0.%03d' $(( RANDOM % 41 )))"   # 0 .. 0.040 s
    kill -9 $pid 2> /dev/null
    wait $pid 2> /dev/null
    rc=$?
    [ $rc -eq 137 ] || break
    kills=$((kills + 1))
    kill_path+="$(newest_state) "
done
if [ $rc -eq 137 ]; then "$TRAIN" --resume "$d" > "$d.out" 2>> "$d.err"; rc=$?; fi
compare_to "$W/ref.jsonl" "$W/ref.bin" "$d/log.jsonl" "$d/model.bin"
cmp_rc=$?
report random_kill_9_then_resume_ends_identical \
    "$([ $kills -ge 1 ] && [ $rc -eq 0 ] && [ $cmp_rc -eq 0 ] && ! grep -q skipping "$d.err"; echo $?)" \
    "$kills runs killed by kill -9 (at least 1 expected; the newest state after each kill: ${kill_path:-none}), last run status $rc, torn states met: $(grep -c skipping "$d.err"): $CMP"
echo "# crash points covered: $points seeded SIGKILLs + $kills external kill -9"

# ---- the non-finite guard ---------------------------------------------------------------------
d=$W/nan_loss
SEEDGPT_FAULT=nan_loss:5 "$TRAIN" "${BASE[@]}" --out "$d" > "$d.out" 2>&1
rc=$?
row5=$(grep '"type":"train","step":5,' "$d/log.jsonl")
same_before=$(diff <(losses "$W/ref.jsonl" | head -5) <(losses "$d/log.jsonl" | head -5) > /dev/null; echo $?)
report nonfinite_loss_skips_update_and_is_logged \
    "$([ $rc -eq 0 ] && [ "$same_before" -eq 0 ] && echo "$row5" | grep -q '"loss":null' && echo "$row5" | grep -q '"skipped":true' && grep -q 'step 5: non-finite loss' "$d.out" && [ -f "$d/state_00000048.bin" ]; echo $?)" \
    "status $rc, steps 0-4 as the reference: $([ "$same_before" -eq 0 ] && echo yes || echo no), row 5: $row5"

# a skipped step advances the step and the loader: the final state's step, seed, loader position
# and shuffle state (header bytes 56..115) equal the clean run's; from step 6 on the losses differ
d=$W/nan_grad
SEEDGPT_FAULT=nan_grad:5-6 "$TRAIN" "${BASE[@]}" --out "$d" > "$d.out" 2>&1
rc=$?
hdr_same=$(cmp -s <(head -c 116 "$d/state_00000048.bin" | tail -c 60) \
                  <(head -c 116 "$W/clean/state_00000048.bin" | tail -c 60); echo $?)
l6=$(losses "$d/log.jsonl" | grep '"step":7,' | head -1)
r6=$(losses "$W/ref.jsonl" | grep '"step":7,' | head -1)
report skipped_steps_still_advance_step_and_loader \
    "$([ $rc -eq 0 ] && [ "$hdr_same" -eq 0 ] && [ "$l6" != "$r6" ] && [ "$(grep -c '"skipped":true' "$d/log.jsonl")" -eq 2 ]; echo $?)" \
    "status $rc, 2 skipped steps; final state's step/loader fields equal the clean run's: $([ "$hdr_same" -eq 0 ] && echo yes || echo no); step 7 loss now ${l6##*:} vs ${r6##*:}"

# --max-bad-steps 3: steps 10, 11, 12 non-finite -> stop at step 12 with status 4; the state
# written after step 11 (12 steps done) carries the streak, so a resume that meets one more bad
# step stops at once
d=$W/bad_streak
SEEDGPT_FAULT=nan_loss:10-40 "$TRAIN" "${BASE[@]}" --out "$d" --save-every 4 --max-bad-steps 3 \
    > "$d.out" 2> "$d.err"
rc=$?
newest=$(cd "$d" && ls state_*.bin | tail -1)
report max_bad_steps_stops_with_status_4 \
    "$([ $rc -eq 4 ] && grep -q 'stopping at step 12: 3 consecutive' "$d.err" && [ "$newest" = state_00000012.bin ]; echo $?)" \
    "status $rc, newest state $newest, \"$(head -1 "$d.err")\""
SEEDGPT_FAULT=nan_loss:12 "$TRAIN" --resume "$d" > "$d.out2" 2> "$d.err2"
rc=$?
report bad_step_streak_survives_resume \
    "$([ $rc -eq 4 ] && grep -q 'stopping at step 12: 3 consecutive' "$d.err2"; echo $?)" \
    "status $rc, \"$(head -1 "$d.err2")\""

# a real non-finite loss, no hook: a model file whose embedding is all FLT_MAX overflows the
# forward; every step is skipped, the default --max-bad-steps 10 stops the run, no state is made
# non-finite (the weights never change: the states written hold the finite start)
d=$W/overflow
"$TRAIN" "${BASE[@]}" --steps 0 --save "$W/m0.bin" > /dev/null 2>&1
cp "$W/m0.bin" "$W/huge.bin"
yes $'\xff\xff\x7f\x7f' | tr -d '\n' | head -c $((4 * 384 * 32)) |
    dd of="$W/huge.bin" bs=4096 seek=1024 oflag=seek_bytes conv=notrunc status=none
"$TRAIN" --train "$W/data/train_*.bin" --batch 4 --seq 32 --init "$W/huge.bin" --steps 48 \
    --out "$d" --save-every 4 --log-every 0 > "$d.out" 2> "$d.err"
rc=$?
skipped=$(grep -c '"skipped":true' "$d/log.jsonl")
"$TRAIN" --resume "$d" --steps 8 > "$d.out2" 2> "$d.err2"
rc2=$?
report nonfinite_from_overflow_stops_after_max_bad_steps \
    "$([ $rc -eq 4 ] && [ "$skipped" -eq 10 ] && [ $rc2 -eq 0 ] && grep -q 'nothing to train' "$d.out2"; echo $?)" \
    "status $rc after $skipped skipped steps; the newest state still loads (status $rc2): \"$(head -1 "$d.err")\""

# ---- refusals -----------------------------------------------------------------------------
# one_line_refusal NAME WORDS... -- CMD...: status 2, exactly one line on stderr holding every word
one_line_refusal() {
    local name=$1; shift
    local words=()
    while [ "$1" != "--" ]; do words+=("$1"); shift; done
    shift
    "$@" > "$W/refusal.out" 2> "$W/refusal.err"
    local rc=$? lines good=0
    lines=$(wc -l < "$W/refusal.err")
    for w in "${words[@]}"; do grep -qF -- "$w" "$W/refusal.err" || good=1; done
    report "$name" "$([ $rc -eq 2 ] && [ "$lines" -eq 1 ] && [ $good -eq 0 ]; echo $?)" \
        "status $rc, $lines line(s): \"$(head -1 "$W/refusal.err")\""
}
snap() { (cd "$1" && md5sum * 2> /dev/null | sort); }
before=$(snap "$W/clean")
one_line_refusal resume_refuses_contradicting_lr "--lr 0.002" "0.003" "state_00000048.bin" -- \
    "$TRAIN" --resume "$W/clean" --lr 0.002
one_line_refusal resume_refuses_contradicting_dropout "--attn-dropout 0.2 (from --dropout)" "0.1" -- \
    "$TRAIN" --resume "$W/clean" --dropout 0.2
one_line_refusal resume_refuses_contradicting_model_shape "--layers 3" "--layers 2" -- \
    "$TRAIN" --resume "$W/clean" --layers 3
one_line_refusal resume_refuses_contradicting_batch "--batch 8" "--batch 4" -- \
    "$TRAIN" --resume "$W/clean" --batch 8
one_line_refusal resume_refuses_contradicting_seed "--seed 43" "--seed 42" -- \
    "$TRAIN" --resume "$W/clean" --seed 43
one_line_refusal resume_refuses_steps_below_the_state "--steps 10" "48" -- \
    "$TRAIN" --resume "$W/clean" --steps 10
one_line_refusal resume_refuses_init_with_resume "--init" "--resume" -- \
    "$TRAIN" --resume "$W/clean" --init "$W/ref.bin"
one_line_refusal fresh_run_refuses_a_folder_holding_states "--out $W/clean" "--resume" -- \
    "$TRAIN" "${BASE[@]}" --out "$W/clean"
mkdir -p "$W/empty"
one_line_refusal resume_refuses_a_folder_without_states "$W/empty" "no training state" -- \
    "$TRAIN" --resume "$W/empty"
one_line_refusal resume_refuses_a_missing_folder "$W/missing" -- "$TRAIN" --resume "$W/missing"
one_line_refusal fault_variable_with_bad_syntax_is_refused "SEEDGPT_FAULT" -- \
    env SEEDGPT_FAULT=state_open "$TRAIN" "${BASE[@]}"
after=$(snap "$W/clean")
report refused_resumes_leave_the_folder_untouched "$([ "$before" = "$after" ]; echo $?)" \
    "$(echo "$before" | wc -l) files, md5 before and after $([ "$before" = "$after" ] && echo equal || echo DIFFER)"

# a corrupted newest state (one payload byte) and a truncated one: skipped with a message; the
# run resumes from the newest good one and still ends identical
d=$W/corrupt
SEEDGPT_FAULT=sigterm:23 "$TRAIN" "${BASE[@]}" --out "$d" --save-every 4 --keep 3 > /dev/null 2>&1
printf '\x5a' | dd of="$d/state_00000024.bin" bs=1 seek=5000 conv=notrunc status=none
truncate -s -1 "$d/state_00000020.bin"
"$TRAIN" --resume "$d" > "$d.out" 2> "$d.err"
rc=$?
compare_to "$W/ref.jsonl" "$W/ref.bin" "$d/log.jsonl" "$d/model.bin"
cmp_rc=$?
report resume_skips_corrupted_and_truncated_states \
    "$([ $rc -eq 0 ] && [ $cmp_rc -eq 0 ] && grep -q 'state_00000024.bin: checksum mismatch' "$d.err" && grep -q 'state_00000020.bin: truncated' "$d.err" && grep -q 'resumed from .*state_00000016.bin' "$d.out"; echo $?)" \
    "status $rc, $(grep -c skipping "$d.err") skipped, $(grep -o 'resumed from [^:]*' "$d.out"): $CMP"
d=$W/all_corrupt
mkdir -p "$d"
cp "$W/clean/state_00000048.bin" "$d/"
printf '\x00' | dd of="$d/state_00000048.bin" bs=1 seek=0 conv=notrunc status=none
"$TRAIN" --resume "$d" > /dev/null 2> "$d.err"
rc=$?
report resume_refuses_when_no_state_loads \
    "$([ $rc -eq 2 ] && tail -1 "$d.err" | grep -q 'none of its 1 state file(s) loads'; echo $?)" \
    "status $rc: \"$(tail -1 "$d.err")\""

# SIGINT from outside: the step finishes, a state is saved, status 130; that state loads
d=$W/sigint
"$TRAIN" "${BASE[@]}" --steps 1000000 --out "$d" > "$d.out" 2>&1 &
pid=$!
for _ in $(seq 50); do [ -s "$d/log.jsonl" ] && break; sleep 0.1; done
sleep 0.3
kill -INT $pid
wait $pid
rc=$?
st=$(cd "$d" 2> /dev/null && ls state_*.bin 2> /dev/null | tail -1)
n=$(echo "$st" | sed 's/state_0*\([0-9][0-9]*\)\.bin/\1/')
"$TRAIN" --resume "$d" --steps "${n:-0}" > "$d.out2" 2>&1
rc2=$?
report sigint_saves_a_loadable_state_and_exits_130 \
    "$([ $rc -eq 130 ] && [ -n "$st" ] && [ $rc2 -eq 0 ] && grep -q 'nothing to train' "$d.out2"; echo $?)" \
    "status $rc, saved $st, which resumes cleanly (status $rc2)"

exit $failed
