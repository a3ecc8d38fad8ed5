#!/usr/bin/env bash
# tests/test_run_safety.sh — the ways a run could lose work or mislead, each tried through
# ./train as a new user would, on a tiny model and a few KB of this repository's README:
#   - invalid optimizer settings (--eps 0, a beta outside [0, 1)) are refused at start-up, and
#     non-finite weights never reach a file: --save and the run folder's states keep their
#     previous contents, exit 4 (SEEDGPT_FAULT=nan_weights makes a weight NaN after an update);
#   - --precision fp16's refusals: --loss-scale-window 0 or not an integer, without fp16, and fp16
#     with --context-parallel or --zero 1 (both named);
#   - two runs into one --out: the second is refused, naming the first one's pid;
#   - --seed is decimal: 010 is ten, 09 is nine, 0x1F is refused;
#   - ./train sample on a 50257-vocab model without --tokenizer takes gpt2 and says so;
#   - a second stop signal stops at once with exit 5, saying so and leaving no .tmp (the first one
#     says what happens); the run resumes from the last state;
#   - ./train plot into a folder it cannot write fails in one line and writes nothing to stdout,
#     and a " in the run folder's name does not break it;
#   - a training state given as --init is named as one, pointing to --resume;
#   - --resume with another --train of another window count is one refusal, not a note and then
#     a refusal; with the same count it continues, saying so;
#   - the summary after a stop labels a val loss from an earlier step with that step;
#   - a skipped step names the value that is non-finite;
#   - a model file holding a NaN is refused at load, naming the tensor and the element;
#   - an unwritable --save path is refused before the first step;
#   - too little data names the minimum;
#   - AdamW's bias correction counts applied updates only (the first update after a skipped step
#     moves every weight by lr, as a first update does), and a resume across a skipped step ends
#     with the uninterrupted run's model file;
#   - samples written to a terminal carry no raw control bytes;
#   - no file the run writes is one of its inputs, or anything but a regular file: --log-json onto
#     the training shard, onto --init's file, onto the resumed state, onto a text file that is not
#     a seedgpt log, --save and --log-json naming one file, a run folder whose model.bin is --init,
#     --save onto a FIFO or a device node: each refused in one line, the file byte-identical;
#   - a FIFO as --train or --init is refused in one line, not waited on;
#   - a full disk under the log stops the run after the step with exit 6 and its state saved:
#     through SEEDGPT_FAULT=log_full (always), and on a 16 KiB tmpfs (where mount works);
#   - the .tmp files an interrupted save left in the run folder are removed at the next start;
#   - the loss is exact at any scale of the logits: a model whose logits are all equal at ~1e18
#     logs ln 257 (5.54907608), not 0;
#   - the messages say what is true: --eps's interval, --recompute's choices (selective), a flag
#     with no value, sample's unknown last flag, hexadecimal in float flags, --eval-batches above
#     the split's windows, every:K above the layers, --version's precisions, ./train plot on an
#     empty, eval-only or foreign log, a resume whose state's relative --train is not found here,
#     --resume of a folder whose live run has not saved yet.
set -u
cd "$(dirname "$0")/.."
TRAIN=${SEEDGPT_TRAIN:-./train}
export OMP_WAIT_POLICY=passive
unset SEEDGPT_FAULT
W=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_safety.XXXXXX")
failed=0
bg=
mnt=
trap '[ -n "$bg" ] && kill -9 $bg 2>/dev/null; [ -n "$mnt" ] && umount "$mnt" 2>/dev/null; if [ $failed -eq 0 ]; then rm -rf "$W"; else echo "# work folder kept: $W"; fi' EXIT
ok()   { echo "ok   $1: $2"; }
fail() { echo "FAIL $1: $2"; failed=1; }
skip() { echo "SKIP $1: $2"; }
one_line() { [ "$(wc -l < "$1")" -eq 1 ]; }

mkdir -p "$W/text"
head -c 20000 README.md > "$W/text/doc.txt"
"$TRAIN" prepare "$W/text/doc.txt" "$W/data" > /dev/null || { fail safety_data "prepare failed"; exit 1; }
BASE=(--train "$W/data/train_*.bin" --layers 1 --heads 2 --embd 32 --seq-len 32 --batch 2
      --log-every 0 --threads 2)

# expect_refusal NAME STATUS PATTERN -- ARGS...: ./train ARGS exits STATUS with one stderr line
# matching PATTERN and prints no step
expect_refusal() {
    local name=$1 want=$2 pattern=$3; shift 4
    "$TRAIN" "$@" > "$W/ref.out" 2> "$W/ref.err"
    local rc=$?
    if [ $rc -eq "$want" ] && one_line "$W/ref.err" && grep -q -- "$pattern" "$W/ref.err" &&
       ! grep -q '^step\|^done' "$W/ref.out"; then
        ok "$name" "status $rc: $(cat "$W/ref.err")"
    else
        fail "$name" "status $rc ($want expected): $(head -c 300 "$W/ref.err" | tr '\n' ' ')"
    fi
}

# ---- 1. invalid optimizer settings; non-finite weights never written
expect_refusal eps_zero_is_refused 2 'eps 0: expected a number in (0, 1]' -- "${BASE[@]}" --steps 2 --eps 0
expect_refusal eps_negative_is_refused 2 'eps -1e-8: expected a number in (0, 1]' -- "${BASE[@]}" --steps 2 --eps -1e-8
expect_refusal beta1_one_is_refused 2 'beta1 1: expected a number in \[0, 1)' -- "${BASE[@]}" --steps 2 --beta1 1
expect_refusal beta2_above_one_is_refused 2 'beta2 1.5' -- "${BASE[@]}" --steps 2 --beta2 1.5
"$TRAIN" "${BASE[@]}" --steps 3 --save "$W/good.bin" > /dev/null 2>&1
cp "$W/good.bin" "$W/good.copy"
SEEDGPT_FAULT=nan_weights:1 "$TRAIN" "${BASE[@]}" --steps 3 --save "$W/good.bin" > /dev/null 2> "$W/nan.err"
rc=$?
if [ $rc -eq 4 ] && cmp -s "$W/good.bin" "$W/good.copy" && [ ! -e "$W/good.bin.tmp" ] &&
   grep -q 'refusing to save: tensor wte element 0 is -\?nan' "$W/nan.err" && one_line "$W/nan.err"; then
    ok nan_weights_never_overwrite_a_save_file "status 4, good.bin byte-identical, no .tmp: $(cat "$W/nan.err")"
else
    fail nan_weights_never_overwrite_a_save_file "status $rc (4 expected), unchanged $(cmp -s "$W/good.bin" "$W/good.copy" && echo yes || echo NO): $(head -c 300 "$W/nan.err")"
fi
SEEDGPT_FAULT=nan_weights:3 "$TRAIN" "${BASE[@]}" --steps 5 --save-every 2 --out "$W/nanrun" > /dev/null 2> "$W/nanrun.err"
rc=$?
states=$(cd "$W/nanrun" && ls state_*.bin* 2>/dev/null | tr '\n' ' ')
if [ $rc -eq 4 ] && [ "$states" = "state_00000002.bin " ] && grep -q 'refusing to save' "$W/nanrun.err"; then
    ok nan_weights_never_reach_a_state "status 4; the folder keeps $states: $(head -c 200 "$W/nanrun.err")"
else
    fail nan_weights_never_reach_a_state "status $rc (4 expected), states: $states; $(head -c 300 "$W/nanrun.err")"
fi

# ---- 2. one run per --out
"$TRAIN" "${BASE[@]}" --steps 100000000 --out "$W/busy" > "$W/busy.out" 2>&1 &
bg=$!
for _ in $(seq 100); do [ -s "$W/busy/.lock" ] && break; sleep 0.1; done
"$TRAIN" "${BASE[@]}" --steps 3 --out "$W/busy" > "$W/second.out" 2> "$W/second.err"
rc=$?
kill -TERM $bg; wait $bg; rcbg=$?; bg=
if [ $rc -eq 2 ] && one_line "$W/second.err" && grep -q "in use by another run (pid $!)" "$W/second.err" &&
   [ $rcbg -eq 143 ]; then
    ok second_run_into_a_busy_out_is_refused_naming_the_pid "status 2: $(cat "$W/second.err"); the first ended with 143 after its save"
else
    fail second_run_into_a_busy_out_is_refused_naming_the_pid "status $rc (2 expected), first run $rcbg: $(head -c 300 "$W/second.err")"
fi
"$TRAIN" --resume "$W/busy" --steps 100000000 > /dev/null 2>&1 &
bg=$!
for _ in $(seq 100); do grep -q "^$bg\$" "$W/busy/.lock" 2>/dev/null && break; sleep 0.1; done
got=$(cat "$W/busy/.lock" 2>/dev/null)
kill -TERM $bg; wait $bg; rcbg=$?; bg=
if [ "$got" = "$!" ] && [ $rcbg -eq 143 ]; then
    ok out_lock_is_released_when_a_run_ends "the resumed run took the folder (lock holds its pid $got), stopped with 143"
else
    fail out_lock_is_released_when_a_run_ends "lock holds '$got', resumed run pid $!, status $rcbg"
fi

# ---- 3. --seed is decimal
"$TRAIN" "${BASE[@]}" --steps 2 --dropout 0.1 --seed 010 --log-json "$W/s010.jsonl" > "$W/s010.out" 2>&1
rc1=$?
"$TRAIN" "${BASE[@]}" --steps 2 --dropout 0.1 --seed 10 --log-json "$W/s10.jsonl" > /dev/null 2>&1
"$TRAIN" "${BASE[@]}" --steps 2 --seed 09 > "$W/s09.out" 2>&1
rc2=$?
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && grep -q 'seed 10$' "$W/s010.out" && grep -q 'seed 9$' "$W/s09.out" &&
   diff <(grep -o '"loss":[^,]*' "$W/s010.jsonl") <(grep -o '"loss":[^,]*' "$W/s10.jsonl") > /dev/null; then
    ok seed_with_leading_zero_is_decimal "--seed 010 runs as seed 10 (the same log), 09 as 9"
else
    fail seed_with_leading_zero_is_decimal "status $rc1 $rc2: $(grep -h 'seed' "$W/s010.out" "$W/s09.out" | tr '\n' ' ')"
fi
expect_refusal seed_in_hex_is_refused 2 'seed 0x1F: expected a decimal' -- "${BASE[@]}" --steps 2 --seed 0x1F

# ---- 4. (sample's choice of tokenizer for a 50257-id model: tests/test_train_cli.sh,
#         sample_without_tokenizer_uses_gpt2_for_a_50257_vocab_model)

# ---- 5. a second stop signal
SEEDGPT_FAULT=sigint:4,state_sigint:3 "$TRAIN" "${BASE[@]}" --steps 10 --save-every 2 --out "$W/abort" > /dev/null 2> "$W/abort.err"
rc=$?
tmps=$(ls -a "$W/abort" | grep -c '\.tmp')
if [ $rc -eq 5 ] && [ "$tmps" -eq 0 ] && grep -q 'stop signal: finishing this step, then saving the state in' "$W/abort.err" &&
   grep -q 'second stop signal: stopped at once' "$W/abort.err" && [ -e "$W/abort/state_00000004.bin" ] &&
   [ ! -e "$W/abort/state_00000005.bin" ]; then
    ok second_signal_stops_at_once_with_exit_5_and_no_tmp "status 5, 0 .tmp files, states: $(cd "$W/abort" && ls state_* | tr '\n' ' '); $(tail -1 "$W/abort.err")"
else
    fail second_signal_stops_at_once_with_exit_5_and_no_tmp "status $rc (5 expected), $tmps .tmp files: $(cat "$W/abort.err" | tr '\n' ' ')"
fi
"$TRAIN" --resume "$W/abort" > "$W/abort2.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q 'resumed from .*state_00000004.bin' "$W/abort2.out" && grep -q '^done: 10 steps' "$W/abort2.out"; then
    ok run_stopped_by_a_second_signal_resumes_from_its_last_state "status 0: $(grep resumed "$W/abort2.out")"
else
    fail run_stopped_by_a_second_signal_resumes_from_its_last_state "status $rc: $(tail -2 "$W/abort2.out" | tr '\n' ' ')"
fi

# ---- 6. ./train plot
if command -v gnuplot > /dev/null 2>&1; then
    q="$W/run \"quoted\""
    mkdir -p "$q" && cp "$W/abort/log.jsonl" "$q/log.jsonl"
    "$TRAIN" plot "$q" > "$W/plot.out" 2> "$W/plot.err"
    rc=$?
    if [ $rc -eq 0 ] && [ -s "$q/loss.png" ] && [ "$(head -c 4 "$q/loss.png" | od -An -tx1 | tr -d ' ')" = 89504e47 ]; then
        ok plot_survives_a_quote_in_the_folder_name "status 0, $(stat -c %s "$q/loss.png") bytes of PNG"
    else
        fail plot_survives_a_quote_in_the_folder_name "status $rc: $(head -c 300 "$W/plot.err")"
    fi
    "$TRAIN" plot "$q" /proc/loss.png > "$W/plot.out" 2> "$W/plot.err"
    rc=$?
    if [ $rc -eq 2 ] && [ ! -s "$W/plot.out" ] && one_line "$W/plot.err" && grep -q 'cannot write /proc/loss.png' "$W/plot.err"; then
        ok plot_into_an_unwritable_folder_fails_in_one_line "status 2, 0 bytes on stdout: $(cat "$W/plot.err")"
    else
        fail plot_into_an_unwritable_folder_fails_in_one_line "status $rc, $(stat -c %s "$W/plot.out") bytes on stdout: $(head -c 300 "$W/plot.err")"
    fi
else
    skip plot_survives_a_quote_in_the_folder_name "gnuplot is not installed"
    skip plot_into_an_unwritable_folder_fails_in_one_line "gnuplot is not installed"
fi

# ---- 7. a training state as --init
expect_refusal state_given_as_init_is_named_as_one 2 'is a training state, not a model file: continue its run with --resume' \
    -- --train "$W/data/train_*.bin" --init "$(ls "$W"/abort/state_*.bin | head -1)" --steps 1
# ---- 8. --resume with another --train
mkdir -p "$W/text2" && head -c 9000 README.md > "$W/text2/doc.txt"
"$TRAIN" prepare "$W/text2/doc.txt" "$W/data2" > /dev/null
cp -r "$W/data" "$W/data_copy"
cp -r "$W/abort" "$W/other"
"$TRAIN" --resume "$W/other" --train "$W/data2/train_*.bin" > "$W/other.out" 2> "$W/other.err"
rc=$?
if [ $rc -eq 2 ] && one_line "$W/other.err" && grep -q 'has [0-9]* windows of B=2, T=32; the state.s split .* had [0-9]*: resume with' "$W/other.err" &&
   ! grep -q 'continuing' "$W/other.out"; then
    ok resume_with_another_train_split_is_one_refusal "status 2, no continuing note: $(cat "$W/other.err")"
else
    fail resume_with_another_train_split_is_one_refusal "status $rc: $(cat "$W/other.out" "$W/other.err" | grep -v '^model\|^batch\|^dropout\|^recompute\|^memory' | head -c 400 | tr '\n' ' ')"
fi
"$TRAIN" --resume "$W/other" --train "$W/data_copy/train_*.bin" > "$W/other.out" 2> "$W/other.err"
rc=$?
if [ $rc -eq 0 ] && grep -q 'note: --train .* differs from the state.s .* (both [0-9]* windows); continuing at epoch 0, window' "$W/other.out"; then
    ok resume_with_a_train_split_of_the_same_windows_continues "status 0: $(grep 'note: --train' "$W/other.out")"
else
    fail resume_with_a_train_split_of_the_same_windows_continues "status $rc: $(head -c 300 "$W/other.err")"
fi

# ---- 9. the summary's val loss names its step when it is older than the last step
SEEDGPT_FAULT=sigterm:4 "$TRAIN" "${BASE[@]}" --val "$W/data/val_*.bin" --eval-every 3 --eval-batches 1 --steps 20 > "$W/val.out" 2>&1
rc=$?
if [ $rc -eq 143 ] && grep -q '^done: 5 steps (stopped early), final loss [0-9.]*, val loss [0-9.]* at step 2,' "$W/val.out"; then
    ok stale_val_loss_is_labelled_with_its_step "status 143: $(grep '^done' "$W/val.out" | cut -c1-90)"
else
    fail stale_val_loss_is_labelled_with_its_step "status $rc: $(grep '^done' "$W/val.out")"
fi

# ---- 10. the skipped step names what is non-finite
SEEDGPT_FAULT=nan_loss:1 "$TRAIN" "${BASE[@]}" --steps 3 > "$W/nl.out" 2>&1
SEEDGPT_FAULT=nan_grad:1 "$TRAIN" "${BASE[@]}" --steps 3 > "$W/ng.out" 2>&1
l=$(grep 'update skipped' "$W/nl.out"); g=$(grep 'update skipped' "$W/ng.out")
if echo "$l" | grep -q '^step 1: non-finite loss -\?nan (grad norm [0-9.]*); update skipped' &&
   echo "$g" | grep -q '^step 1: non-finite grad norm -\?nan (loss [0-9.]*); update skipped'; then
    ok skipped_step_names_the_non_finite_value "\"$l\" / \"$g\""
else
    fail skipped_step_names_the_non_finite_value "\"$l\" / \"$g\""
fi

# ---- 11. a NaN in a model file
cp "$W/good.bin" "$W/nanfile.bin"
printf '\000\000\300\177' | dd of="$W/nanfile.bin" bs=1 seek=$((1024 + 4 * 7)) conv=notrunc 2>/dev/null
expect_refusal model_file_with_a_nan_is_refused_at_load 2 'nanfile.bin: tensor wte element 7 is nan' \
    -- --train "$W/data/train_*.bin" --init "$W/nanfile.bin" --steps 1 --log-every 0
# ---- 12. an unwritable --save
expect_refusal unwritable_save_is_refused_before_training 2 'save .*/no/such/m.bin: cannot write there' \
    -- "${BASE[@]}" --steps 2 --save "$W/no/such/m.bin"
expect_refusal save_onto_a_folder_is_refused_before_training 2 'is a folder; expected a file path' \
    -- "${BASE[@]}" --steps 2 --save "$W"
# ---- 13. too little data
head -c 3000 README.md > "$W/text/small.txt"
"$TRAIN" prepare "$W/text/small.txt" "$W/small" > /dev/null
expect_refusal too_little_data_names_the_minimum 2 'val_\*.bin: too little data: a window needs B\*T+1 = 2049 tokens (B=8, T=256) in one shard' \
    -- --train "$W/small/train_*.bin" --val "$W/small/val_*.bin" --steps 2

# ---- 14. AdamW's bias correction counts applied updates
# After one applied update from zero moments, m^ = g and v^ = g^2, so every weight with a gradient
# moves by lr * |g| / (|g| + eps) = lr (weight decay 0, constant lr, no clipping). Counting the
# skipped step 0 as an update would move them by 0.1/0.19 / sqrt(0.05/0.0975) = 0.73 lr.
A=("${BASE[@]}" --lr 1e-3 --lr-schedule constant --weight-decay 0 --clip 0 --shuffle 0)
"$TRAIN" "${A[@]}" --steps 0 --save "$W/w0.bin" > /dev/null 2>&1
SEEDGPT_FAULT=nan_loss:0 "$TRAIN" "${A[@]}" --steps 2 --save "$W/w2.bin" > "$W/bc.out" 2>&1
moved() {   # the share of changed weights (of those that changed) that moved by lr to 1%
    paste <(od -An -v -f -w4 -j1024 "$1") <(od -An -v -f -w4 -j1024 "$2") |
        awk '{d = $2 - $1; if (d < 0) d = -d; if (d > 0) {n++; r = d / 1e-3; if (r > 0.99 && r < 1.01) k++; s += r}}
             END {printf "%d %.4f %.4f", n, (n ? k / n : 0), (n ? s / n : 0)}'
}
read -r n share mean <<< "$(moved "$W/w0.bin" "$W/w2.bin")"
if grep -q 'step 0: non-finite loss' "$W/bc.out" && [ "$n" -gt 1000 ] && awk -v s="$share" 'BEGIN{exit !(s > 0.95)}'; then
    ok bias_correction_counts_applied_updates_only "after a skipped step 0, $n weights moved; $share of them by lr +-1% (mean |dw|/lr $mean)"
else
    fail bias_correction_counts_applied_updates_only "$n weights moved; $share by lr +-1% (0.95 expected; mean |dw|/lr $mean, 0.73 if the skipped step counts)"
fi
SEEDGPT_FAULT=nan_loss:1 "$TRAIN" "${BASE[@]}" --steps 6 --dropout 0.1 --save "$W/straight.bin" > /dev/null 2>&1
SEEDGPT_FAULT=nan_loss:1,sigterm:2 "$TRAIN" "${BASE[@]}" --steps 6 --dropout 0.1 --out "$W/bcres" > /dev/null 2>&1
rc1=$?
"$TRAIN" --resume "$W/bcres" --save "$W/resumed.bin" > /dev/null 2>&1
rc2=$?
if [ $rc1 -eq 143 ] && [ $rc2 -eq 0 ] && cmp -s "$W/straight.bin" "$W/resumed.bin"; then
    ok resume_across_a_skipped_step_is_bit_exact "stopped after step 2 (step 1 skipped), resumed: the model file equals the uninterrupted run's"
else
    fail resume_across_a_skipped_step_is_bit_exact "statuses $rc1 $rc2; files $(cmp "$W/straight.bin" "$W/resumed.bin" 2>&1 | head -1)"
fi

# ---- 15. no raw control bytes to a terminal
S=(sample --init "$W/good.bin" --tokens 16 --threads 2 --prompt "$(printf 'a\033[2Jb\007c')")
"$TRAIN" "${S[@]}" > "$W/pipe.out" 2>/dev/null
if command -v script > /dev/null 2>&1; then
    # script(1) runs its command with $SHELL, which may be a shell without
    # $'...' quoting (dash): hand it a bash file that holds the command.
    { echo '#!/usr/bin/env bash'; printf 'exec '; printf '%q ' "$TRAIN" "${S[@]}"; echo; } > "$W/tty_sample.sh"
    chmod +x "$W/tty_sample.sh"
    printf -v cmd '%q' "$W/tty_sample.sh"
    SHELL=/bin/sh script -qec "$cmd" /dev/null < /dev/null > "$W/tty.out" 2>/dev/null
    raw_pipe=$(tr -d '\n\t' < "$W/pipe.out" | tr -dc '\000-\037\177' | wc -c)
    raw_tty=$(tr -d '\r\n\t' < "$W/tty.out" | tr -dc '\000-\037\177' | wc -c)
    if [ "$raw_pipe" -ge 2 ] && [ "$raw_tty" -eq 0 ] && grep -q 'a\\x1b\[2Jb\\x07c' "$W/tty.out"; then
        ok sample_to_a_terminal_escapes_control_bytes "a pipe gets $raw_pipe raw control bytes, a terminal 0 (the prompt shows as $(grep -o 'a\\x1b\[2Jb\\x07c' "$W/tty.out" | head -1))"
    else
        fail sample_to_a_terminal_escapes_control_bytes "raw control bytes: pipe $raw_pipe, terminal $raw_tty; terminal got $(head -c 80 "$W/tty.out" | od -c | head -2 | tr '\n' ' ')"
    fi
else
    skip sample_to_a_terminal_escapes_control_bytes "no script(1) to give the sampler a terminal"
fi

# ---- 16. no output over an input, no output onto a non-regular file
SHARD="$W/data/train_000000.bin"
cp "$SHARD" "$W/shard.copy"
# same_after NAME FILE COPY PATTERN -- ARGS: refused (status 2, one line matching PATTERN) and FILE
# byte-identical to COPY afterwards
same_after() {
    local name=$1 file=$2 copy=$3 pattern=$4; shift 5
    timeout 60 "$TRAIN" "$@" > "$W/sa.out" 2> "$W/sa.err"
    local rc=$?
    if [ $rc -eq 2 ] && one_line "$W/sa.err" && grep -q -- "$pattern" "$W/sa.err" && cmp -s "$file" "$copy" &&
       ! grep -q '^step\|^done' "$W/sa.out"; then
        ok "$name" "status 2, $(basename "$file") byte-identical: $(cat "$W/sa.err")"
    else
        fail "$name" "status $rc (2 expected), $(basename "$file") $(cmp -s "$file" "$copy" && echo kept || echo "CHANGED, now $(stat -c %s "$file") bytes"): $(head -c 300 "$W/sa.err" | tr '\n' ' ')"
    fi
}
same_after log_json_onto_the_training_shard_is_refused "$SHARD" "$W/shard.copy" 'is the training shard' -- \
    "${BASE[@]}" --steps 2 --log-json "$SHARD"
cp "$W/shard.copy" "$SHARD"   # whatever happened to it, the cases below start from the shard
cp "$W/good.bin" "$W/init.bin"; cp "$W/good.bin" "$W/init.copy"
same_after log_json_onto_init_is_refused "$W/init.bin" "$W/init.copy" "is --init's model file" -- \
    --train "$W/data/train_*.bin" --init "$W/init.bin" --steps 2 --log-every 0 --threads 2 --log-json "$W/init.bin"
"$TRAIN" "${BASE[@]}" --steps 3 --out "$W/lj" > /dev/null 2>&1
cp "$W/lj/state_00000003.bin" "$W/lj_state.copy"
same_after log_json_onto_the_resumed_state_is_refused "$W/lj/state_00000003.bin" "$W/lj_state.copy" \
    'is the resumed state' -- --resume "$W/lj" --steps 5 --log-json "$W/lj/state_00000003.bin"
printf 'my notes\nline two\n' > "$W/notes.txt"; cp "$W/notes.txt" "$W/notes.copy"
same_after log_json_onto_a_file_that_is_not_a_log_is_refused "$W/notes.txt" "$W/notes.copy" \
    'is not a seedgpt log' -- "${BASE[@]}" --steps 2 --log-json "$W/notes.txt"
expect_refusal save_and_log_json_naming_one_file_are_refused 2 'name one file' -- \
    "${BASE[@]}" --steps 2 --save "$W/both.bin" --log-json "$W/both.bin"
[ -e "$W/both.bin" ] && fail save_and_log_json_naming_one_file_write_nothing "both.bin was written"
mkdir -p "$W/initdir"; cp "$W/good.bin" "$W/initdir/model.bin"
same_after out_folder_whose_model_bin_is_init_is_refused "$W/initdir/model.bin" "$W/good.copy" \
    "model.bin is --init's model file" -- --train "$W/data/train_*.bin" --init "$W/initdir/model.bin" \
    --steps 2 --log-every 0 --threads 2 --out "$W/initdir"
mkfifo "$W/fifo"
timeout 20 "$TRAIN" "${BASE[@]}" --steps 2 --save "$W/fifo" > /dev/null 2> "$W/ff.err"
rc=$?
if [ $rc -eq 2 ] && [ -p "$W/fifo" ] && one_line "$W/ff.err" && grep -q 'fifo is a FIFO; expected a file path' "$W/ff.err"; then
    ok save_onto_a_fifo_is_refused "status 2, still a FIFO: $(cat "$W/ff.err")"
else
    fail save_onto_a_fifo_is_refused "status $rc, $([ -p "$W/fifo" ] && echo 'still a FIFO' || echo REPLACED): $(head -c 300 "$W/ff.err")"
    [ -p "$W/fifo" ] || { rm -f "$W/fifo"; mkfifo "$W/fifo"; }
fi
if mknod "$W/nulldev" c 1 3 2> /dev/null; then
    timeout 20 "$TRAIN" "${BASE[@]}" --steps 2 --save "$W/nulldev" > /dev/null 2> "$W/nd.err"
    rc=$?
    if [ $rc -eq 2 ] && [ -c "$W/nulldev" ] && grep -q 'nulldev is a character device; expected a file path' "$W/nd.err"; then
        ok save_onto_a_device_node_is_refused "status 2, still a device: $(cat "$W/nd.err")"
    else
        fail save_onto_a_device_node_is_refused "status $rc, $([ -c "$W/nulldev" ] && echo 'still a device' || echo REPLACED): $(head -c 300 "$W/nd.err")"
    fi
else
    skip save_onto_a_device_node_is_refused "mknod is not allowed here (not root?)"
fi

# ---- 17. a FIFO as an input is refused, not waited on
for what in train init; do
    if [ $what = train ]; then args=(--train "$W/fifo" --steps 1)
    else args=(--train "$W/data/train_*.bin" --init "$W/fifo" --steps 1); fi
    timeout 20 "$TRAIN" "${args[@]}" > /dev/null 2> "$W/fi.err"
    rc=$?
    if [ $rc -eq 2 ] && one_line "$W/fi.err" && grep -q 'not a regular file (a FIFO)' "$W/fi.err"; then
        ok "fifo_as_${what}_is_refused_not_waited_on" "status 2: $(cat "$W/fi.err")"
    else
        fail "fifo_as_${what}_is_refused_not_waited_on" "status $rc$([ $rc -eq 124 ] && echo ': still blocked after 20 s'): $(head -c 300 "$W/fi.err")"
    fi
done

# ---- 18. a full disk under the log
SEEDGPT_FAULT=log_full:5 "$TRAIN" "${BASE[@]}" --steps 20 --out "$W/full" > "$W/full.out" 2> "$W/full.err"
rc=$?
last=$(grep -o '"step":[0-9]*' "$W/full/log.jsonl" 2> /dev/null | tail -1)
if [ $rc -eq 6 ] && [ -f "$W/full/state_00000006.bin" ] && [ "$last" = '"step":4' ] &&
   grep -q 'writing the row of step 5 failed (No space left on device): the run stops after this step and saves its state' "$W/full.err" &&
   grep -q 'stopped after step 5: the log could not be written (state saved)' "$W/full.out"; then
    ok full_disk_under_the_log_stops_with_exit_6_state_saved "SEEDGPT_FAULT=log_full:5: status 6, state_00000006.bin, the log ends at step 4: $(cat "$W/full.err")"
else
    fail full_disk_under_the_log_stops_with_exit_6_state_saved "status $rc (6 expected), files: $(ls "$W/full" | tr '\n' ' '), last row $last: $(head -c 300 "$W/full.err")"
fi
mkdir -p "$W/tmpfs"
if mount -t tmpfs -o size=16k tmpfs "$W/tmpfs" 2> "$W/mount.err"; then
    mnt=$W/tmpfs
    "$TRAIN" "${BASE[@]}" --steps 400 --out "$W/tfull" --log-json "$W/tmpfs/log.jsonl" > "$W/tfull.out" 2> "$W/tfull.err"
    rc=$?
    st=$(cd "$W/tfull" && ls state_*.bin 2> /dev/null | tail -1)
    mount -o remount,size=1m "$W/tmpfs"
    "$TRAIN" --resume "$W/tfull" > "$W/tfull2.out" 2>&1
    rc2=$?
    torn=$(grep -c -v '}$' "$W/tmpfs/log.jsonl")
    rows=$(grep -c '"type":"train"' "$W/tmpfs/log.jsonl")
    if [ $rc -eq 6 ] && [ -n "$st" ] && grep -q 'failed (No space left on device)' "$W/tfull.err" && [ $rc2 -eq 0 ] &&
       [ "$torn" -eq 0 ] && [ "$rows" -eq 399 ]; then
        ok full_tmpfs_under_the_log_stops_with_exit_6_and_resumes "16 KiB tmpfs: status 6, $st saved; grown, the resume cuts the torn row and ends with $rows of 400 rows (the failed step's is missing): $(head -1 "$W/tfull.err")"
    else
        fail full_tmpfs_under_the_log_stops_with_exit_6_and_resumes "status $rc (6 expected), state '$st', resume $rc2, $torn torn rows, $rows rows: $(head -c 300 "$W/tfull.err")"
    fi
    umount "$W/tmpfs"; mnt=
else
    skip full_tmpfs_under_the_log_stops_with_exit_6_and_resumes "cannot mount a tmpfs here ($(head -1 "$W/mount.err")); log_full covers the path"
fi

# ---- 19. leftover .tmp of an interrupted save
touch "$W/lj/state_00000009.bin.tmp" "$W/lj/model.bin.tmp"
"$TRAIN" --resume "$W/lj" > "$W/left.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ ! -e "$W/lj/state_00000009.bin.tmp" ] && [ ! -e "$W/lj/model.bin.tmp" ] &&
   grep -q 'note: removed .*state_00000009.bin.tmp, left by an interrupted save' "$W/left.out"; then
    ok leftover_tmp_files_are_removed_at_the_next_start "status 0, $(grep -c 'note: removed' "$W/left.out") notes, no .tmp left"
else
    fail leftover_tmp_files_are_removed_at_the_next_start "status $rc; left: $(ls "$W/lj" | grep tmp | tr '\n' ' ')"
fi

# ---- 20. the loss at any scale: every logit equal at ~1e18 (wte rows all e_0, lnf weight 1e18)
if command -v python3 > /dev/null 2>&1; then
    "$TRAIN" "${BASE[@]}" --steps 0 --save "$W/scale0.bin" > /dev/null 2>&1
    python3 - "$W/scale0.bin" "$W/scale.bin" << 'PYEOF'
import struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
maxT, V, L, NH, C, Vp = struct.unpack_from("<8i", raw, 0)[2:8]
sizes = [Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
         L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C]
off = [1024]
for n in sizes:
    off.append(off[-1] + 4 * n)
for v in range(V):                       # every real row of wte: (1, 0, 0, ...)
    for c in range(C):
        struct.pack_into("<f", raw, off[0] + 4 * (v * C + c), 1.0 if c == 0 else 0.0)
for c in range(C):                       # lnf: weight 1e18, bias 0 -> logit_v = 1e18 xhat_0, all v
    struct.pack_into("<f", raw, off[14] + 4 * c, 1e18)
    struct.pack_into("<f", raw, off[15] + 4 * c, 0.0)
open(sys.argv[2], "wb").write(raw)
PYEOF
    "$TRAIN" --train "$W/data/train_*.bin" --init "$W/scale.bin" --steps 1 --log-every 0 --threads 2 \
        --log-json "$W/scale.jsonl" > /dev/null 2>&1
    got=$(grep -o '"step":0,"loss":[^,]*' "$W/scale.jsonl" 2> /dev/null | cut -d: -f3)
    if [ "$got" = 5.54907608 ]; then
        ok loss_is_exact_at_any_scale_of_the_logits "every logit equal at ~1e18: step 0 loss $got = ln 257"
    else
        fail loss_is_exact_at_any_scale_of_the_logits "every logit equal at ~1e18: step 0 loss '$got', ln 257 = 5.54907608 expected"
    fi
else
    skip loss_is_exact_at_any_scale_of_the_logits "no python3 to write the model file"
fi

# ---- 21. messages that say what is true
expect_refusal eps_above_one_names_its_interval 2 'eps 1.5: expected a number in (0, 1]' -- "${BASE[@]}" --steps 2 --eps 1.5
expect_refusal recompute_error_lists_selective 2 'none, layer, every:K, selective, selective+layer or selective+every:K' \
    -- "${BASE[@]}" --steps 2 --recompute bogus
expect_refusal loss_scale_window_zero_is_refused 2 'loss-scale-window 0: expected an integer in \[1, ' \
    -- "${BASE[@]}" --steps 2 --precision fp16 --loss-scale-window 0
expect_refusal loss_scale_window_not_a_number_is_refused 2 'loss-scale-window 1e3: expected an integer' \
    -- "${BASE[@]}" --steps 2 --precision fp16 --loss-scale-window 1e3
expect_refusal loss_scale_window_without_fp16_is_refused 2 'loss-scale-window needs --precision fp16.*is bf16' \
    -- "${BASE[@]}" --steps 2 --precision bf16 --loss-scale-window 8
expect_refusal fp16_with_context_parallel_names_both 2 'precision fp16 --context-parallel 2:' \
    -- "${BASE[@]}" --steps 2 --precision fp16 --context-parallel 2
expect_refusal fp16_with_zero_names_both 2 'precision fp16 --zero 1:' \
    -- "${BASE[@]}" --steps 2 --precision fp16 --zero 1
expect_refusal flag_without_a_value_says_so 2 '^seedgpt: --steps needs a value after it' -- "${BASE[@]}" --steps
expect_refusal sample_unknown_last_flag_is_unknown 2 'sample: unknown flag --bogus' -- sample --init "$W/good.bin" --bogus
expect_refusal hex_in_a_float_flag_is_refused 2 'lr 0x1p-10: expected a number' -- "${BASE[@]}" --steps 2 --lr 0x1p-10
expect_refusal hex_in_memory_budget_is_refused 2 'memory-budget 0x100000: expected a positive size' \
    -- "${BASE[@]}" --steps 2 --memory-budget 0x100000
"$TRAIN" "${BASE[@]}" --layers 2 --steps 1 --val "$W/data/val_*.bin" --eval-batches 1000 --recompute every:99 > "$W/notes.out" 2>&1
if grep -q 'note: --eval-batches 1000: the validation split has [0-9]* windows of 2 x 32; each evaluation uses those' "$W/notes.out" &&
   grep -q '^recompute: every:99 (K = 99 > 2 layers: one segment of all 2, as every:2)' "$W/notes.out"; then
    ok eval_batches_and_every_k_beyond_the_model_are_said "$(grep 'eval-batches' "$W/notes.out"); $(grep '^recompute' "$W/notes.out")"
else
    fail eval_batches_and_every_k_beyond_the_model_are_said "$(grep 'eval-batches\|^recompute' "$W/notes.out" | tr '\n' ' ')"
fi
if "$TRAIN" --version | grep -q 'devices cpu (fp32, bf16, fp16)'; then
    ok version_names_the_cpu_precisions "$("$TRAIN" --version | head -1)"
else
    fail version_names_the_cpu_precisions "$("$TRAIN" --version | head -1)"
fi
if command -v gnuplot > /dev/null 2>&1; then
    : > "$W/empty.jsonl"; printf 'not json\001\n' > "$W/junk.jsonl"; echo '{"type":"eval","step":3,"val_loss":2.5}' > "$W/evalonly.jsonl"
    bad=""
    for c in "empty:is empty" "junk:is not a seedgpt log" "evalonly:holds no training rows yet"; do
        f=${c%%:*}; want=${c#*:}
        "$TRAIN" plot "$W/$f.jsonl" > /dev/null 2> "$W/p.err"; rc=$?
        { [ $rc -eq 2 ] && one_line "$W/p.err" && grep -q "$want" "$W/p.err"; } || bad+="$f: status $rc '$(cat "$W/p.err")'; "
    done
    if [ -z "$bad" ]; then ok plot_says_why_a_log_has_nothing_to_plot "empty, foreign and eval-only logs: status 2, one line each"
    else fail plot_says_why_a_log_has_nothing_to_plot "$bad"; fi
else
    skip plot_says_why_a_log_has_nothing_to_plot "gnuplot is not installed"
fi
mkdir -p "$W/elsewhere"
ABS=$(cd "$(dirname "$TRAIN")" && pwd)/$(basename "$TRAIN")
(cd "$W" && "$ABS" --train 'data/train_*.bin' --layers 1 --heads 2 --embd 32 --seq-len 32 --batch 2 --steps 2 \
    --log-every 0 --threads 2 --out rel > /dev/null 2>&1)
(cd "$W/elsewhere" && "$ABS" --resume ../rel --steps 4 > /dev/null 2> "$W/rel.err")
rc=$?
if [ $rc -eq 2 ] && one_line "$W/rel.err" && grep -q "is the state .*'s, a path relative to the folder that run started in; give --train PATH" "$W/rel.err"; then
    ok resume_elsewhere_names_the_states_relative_train "status 2: $(cat "$W/rel.err")"
else
    fail resume_elsewhere_names_the_states_relative_train "status $rc: $(head -c 300 "$W/rel.err")"
fi
"$TRAIN" "${BASE[@]}" --steps 100000000 --out "$W/live" > /dev/null 2>&1 &
bg=$!
for _ in $(seq 100); do [ -s "$W/live/.lock" ] && break; sleep 0.1; done
"$TRAIN" --resume "$W/live" > /dev/null 2> "$W/live.err"
rc=$?
holder=$bg
kill -9 $bg; wait $bg 2> /dev/null; bg=
if [ $rc -eq 2 ] && one_line "$W/live.err" && grep -q "no training state yet: the run in this folder (pid $holder) is still going" "$W/live.err"; then
    ok resume_of_a_live_run_without_a_state_names_it "status 2: $(cat "$W/live.err")"
else
    fail resume_of_a_live_run_without_a_state_names_it "status $rc: $(head -c 300 "$W/live.err")"
fi
exit $failed
