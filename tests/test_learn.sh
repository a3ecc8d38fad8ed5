#!/usr/bin/env bash
# tests/test_learn.sh — `make demo` end to end in its shortened form: scripts/demo.sh with
# DEMO_STEPS=400 (prepare the King James Bible, train a small model with dropout 0.1 and
# --recompute layer, evaluate, sample, plot) must
#   - finish, write the plot, and print a sample that continues the prompt (text beyond it);
#   - reach a final validation loss (a number, from the last eval row of log.jsonl, at the last
#     step) below the bigram baseline that tests/bigram_baseline computes from the same shards,
#     on the same validation positions (batch 16 x 128, 16 windows: the demo's shape);
#   - write samples that look learned: of the words they generate (runs of two or more ASCII
#     letters after the prompt), a fraction at least 10 times what a uniform random byte model
#     gives (computed here from seeded random bytes) occurs in the training text. The same check
#     must reject the samples of the untrained model (the same configuration after 0 steps), so
#     it is known to tell the two apart.
set -u
cd "$(dirname "$0")/.."
out=build/learn
steps=${LEARN_STEPS:-400}
prompt="And God said"
mkdir -p "$out"
if ! command -v bible >/dev/null 2>&1; then
    echo "SKIP learns_kjv_below_bigram_baseline: the 'bible' command (Debian package bible-kjv) is not installed"
    exit 0
fi
is_number() { [[ "$1" =~ ^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$ ]]; }
fail=0

rm -f "$out/loss.png"
start=$(date +%s)
DEMO_STEPS=$steps DEMO_OUT="$out" scripts/demo.sh --threads 2 > "$out/demo.out" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    echo "FAIL demo_runs_end_to_end: scripts/demo.sh exited with status $rc:"; tail -5 "$out/demo.out"; exit 1
fi
wall=$(( $(date +%s) - start ))

# the demo's sample: the lines between its "== sample" header and the sampler's "sample: N tokens"
sample=$(sed -n '/^== sample/,/^sample: [0-9]* tokens/p' "$out/demo.out" | sed '1d;$d')
ntok=$(sed -n 's/^sample: \([0-9]*\) tokens.*/\1/p' "$out/demo.out")
generated=${sample#"$prompt"}
shown=$(echo "$sample" | head -n 1 | LC_ALL=C tr -c '[:print:]' '.' | cut -c1-60)
if [ -s "$out/loss.png" ] && grep -q '^done: ' "$out/demo.out" && [ "$generated" != "$sample" ] &&
   [ "${#generated}" -ge 50 ]; then
    echo "ok   demo_runs_end_to_end: $(grep '^done: ' "$out/demo.out" | cut -c1-160); sample \"$shown...\" ($ntok tokens, ${#generated} bytes after the prompt); plot $(stat -c %s "$out/loss.png") bytes; test wall ${wall} s"
else
    echo "FAIL demo_runs_end_to_end: plot $(ls -la "$out/loss.png" 2>&1); done line: $(grep -c '^done: ' "$out/demo.out"); sample \"$shown\": prompt printed $([ "$generated" != "$sample" ] && echo yes || echo NO), ${#generated} bytes after it (at least 50 expected), sampler said ${ntok:-nothing} tokens"
    fail=1
fi

# the final validation loss: the last eval row, which must be the last step's
last_eval=$(grep '"type":"eval"' "$out/log.jsonl" | tail -n 1)
val=$(echo "$last_eval" | sed -n 's/.*"val_loss":\([^,}]*\).*/\1/p')
val_step=$(echo "$last_eval" | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
first=$(grep '"type":"train"' "$out/log.jsonl" | head -n 1 | sed -n 's/.*"loss":\([^,}]*\).*/\1/p')
bigram=$(build/tests/bigram_baseline "$out/data/train_*.bin" "$out/data/val_*.bin" 257 16 128 16) \
    || { echo "FAIL learns_kjv_below_bigram_baseline: baseline failed"; exit 1; }
if ! is_number "$val" || ! is_number "$bigram" || [ "$val_step" != "$((steps - 1))" ]; then
    echo "FAIL learns_kjv_below_bigram_baseline: no final validation loss to compare: val loss \"$val\" at step \"$val_step\" (expected a number at step $((steps - 1))), bigram \"$bigram\""
    fail=1
elif awk -v v="$val" -v b="$bigram" 'BEGIN{exit !(v < b)}'; then
    echo "ok   learns_kjv_below_bigram_baseline: val loss $val < bigram $bigram at step $val_step (first train loss $first; dropout 0.1, recompute layer, $steps steps)"
else
    echo "FAIL learns_kjv_below_bigram_baseline: val loss $val >= bigram $bigram at step $val_step (first train loss $first)"
    fail=1
fi

# Do the samples look learned? The training text is the first 90% of the bytes (prepare's split);
# its words are the runs of two or more ASCII letters.
size=$(stat -c %s "$out/kjv.txt")
head -c $((size * 9 / 10)) "$out/kjv.txt" | LC_ALL=C tr -cs 'A-Za-z' '\n' | awk 'length($0) >= 2' |
    LC_ALL=C sort -u > "$out/vocab.txt"
# "IN N FRACTION": words of stdin in the vocabulary, words, their fraction
word_fraction() {
    LC_ALL=C tr -cs 'A-Za-z' '\n' | LC_ALL=C awk -v V="$out/vocab.txt" '
        BEGIN { while ((getline w < V) > 0) voc[w] = 1 }
        length($0) >= 2 { n++; k += ($0 in voc) }
        END { printf "%d %d %.4f\n", k, n, n ? k / n : 0 }'
}
# a uniform random byte model: 200000 bytes of a seeded generator
read -r u_in u_n u_frac < <(LC_ALL=C awk 'BEGIN { srand(1); for (i = 0; i < 200000; i++) printf "%c", int(rand() * 256) }' |
                            word_fraction)
need=$(awk -v f="$u_frac" 'BEGIN { printf "%.4f", 10 * f }')
# eight samples of the demo's kind (seeds 1..8), the bytes after the prompt (one thread: a
# sample is 0.1 s, and an OpenMP team waiting at every token is slow on a busy machine)
samples_of() {
    for seed in 1 2 3 4 5 6 7 8; do
        ./train sample --init "$1" --prompt "$prompt" --tokens 110 --temperature 0.8 --top-k 40 \
            --seed $seed --threads 1 2>/dev/null > "$out/one_sample.txt"
        tail -c +$((${#prompt} + 1)) "$out/one_sample.txt"
    done
}
read -r t_in t_n t_frac < <(samples_of "$out/model.bin" | word_fraction)
# the untrained model: the demo's configuration after 0 steps
./train --train "$out/data/train_*.bin" --layers 4 --heads 4 --embd 128 --seq-len 128 --batch 16 \
    --steps 0 --seed 7 --threads 1 --save "$out/untrained.bin" > "$out/untrained.out" 2>&1 \
    || { echo "FAIL samples_look_learned: could not write the untrained model:"; tail -2 "$out/untrained.out"; exit 1; }
read -r r_in r_n r_frac < <(samples_of "$out/untrained.bin" | word_fraction)
learned=$(awk -v f="$t_frac" -v n="$t_n" -v need="$need" 'BEGIN { print (n >= 50 && f >= need) }')
rejected=$(awk -v f="$r_frac" -v need="$need" 'BEGIN { print (f < need) }')
msg="of the words after the prompt in 8 samples, in the training text: trained $t_in / $t_n = $t_frac, untrained $r_in / $r_n = $r_frac; a uniform random byte model $u_in / $u_n = $u_frac, so at least $need (and 50 words) is asked"
if [ "$learned" = 1 ] && [ "$rejected" = 1 ]; then
    echo "ok   samples_look_learned: $msg"
else
    echo "FAIL samples_look_learned: $msg; trained passes: $learned, untrained rejected: $rejected"
    fail=1
fi
exit $fail
