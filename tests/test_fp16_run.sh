#!/usr/bin/env bash
# tests/test_fp16_run.sh — --precision fp16's dynamic loss scaling end to end through ./train, on a
# tiny model and a few KB of this repository's README (each run well under a second):
#   - an fp16 run starts at loss scale 2^16, every JSON row carries "loss_scale", the scale doubles
#     after --loss-scale-window good steps; its step-0 gradient norm (unscaled) and losses are
#     fp32's to fp16 rounding, not 2^16 times the norm;
#   - two runs give the same bits: every logged number and the model file;
#   - a planted overflow (SEEDGPT_FAULT=fp16_overflow:N, the test hook that multiplies step N's
#     loss gradient by a further 2^40 so that its fp16 operands round to infinity) skips exactly
#     step N ("skipped":true with the scale it overflowed at; the states before and after it hold
#     the same weights and moments, byte for byte), halves the scale for step N+1, does not count
#     toward --max-bad-steps, and the run goes on to the end;
#   - resuming twice, at a doubled scale and after the overflow, is bit for bit the straight run
#     (the scale and its count of good steps are in the state);
#   - with --log-attn-stats, every fp16 row has "attn_fp16_headroom", one value a layer: 65504
#     over that layer's largest score |s| of the same row; an fp32 row has none;
#   - states and precision: an fp16 state resumed under fp32 or bf16, and an fp32 state under
#     fp16, are refused in one line naming both; so is another --loss-scale-window on resume.
set -u
cd "$(dirname "$0")/.."
TRAIN=${SEEDGPT_TRAIN:-./train}
export OMP_WAIT_POLICY=passive
unset SEEDGPT_FAULT
W=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_fp16.XXXXXX")
failed=0
trap 'if [ $failed -eq 0 ]; then rm -rf "$W"; else echo "# work folder kept: $W"; fi' EXIT
ok()   { echo "ok   $1: $2"; }
fail() { echo "FAIL $1: $2"; failed=1; }
one_line() { [ "$(wc -l < "$1")" -eq 1 ]; }

if [ ! -x "$TRAIN" ]; then fail fp16_tests_have_a_trainer "$TRAIN is not built"; exit 1; fi
mkdir -p "$W/text"
head -c 3400 README.md > "$W/text/doc.txt"
"$TRAIN" prepare "$W/text/doc.txt" "$W/data" > /dev/null || { fail fp16_data "prepare failed"; exit 1; }
BASE=(--train "$W/data/train_*.bin" --layers 2 --heads 2 --embd 32 --seq-len 32 --batch 4
      --lr 3e-3 --lr-schedule constant --dropout 0.1 --log-every 0 --eval-every 0 --seed 42
      --threads 2)
F16=("${BASE[@]}" --precision fp16 --loss-scale-window 3)

# field F of the train rows of a JSON log, one per line ("-" where absent)
col() { grep '"type":"train"' "$1" | sed -e "s/.*\"$2\":\([^,}]*\).*/\1/" -e "/\"type\"/s/.*/-/"; }
# the train rows without their timing fields
rows() { grep '"type":"train"' "$1" | sed -e 's/,"step_ms":[^,}]*//'; }

# ---- the scale in the log, and the unscaled norm against fp32
"$TRAIN" "${BASE[@]}" --steps 8 --log-json "$W/f32.jsonl" > /dev/null 2>&1
"$TRAIN" "${F16[@]}" --steps 8 --log-json "$W/a.jsonl" --save "$W/a.bin" > "$W/a.out" 2>&1
rc=$?
scales=$(col "$W/a.jsonl" loss_scale | tr '\n' ' ')
n32=$(col "$W/f32.jsonl" grad_norm | head -1); n16=$(col "$W/a.jsonl" grad_norm | head -1)
l32=$(col "$W/f32.jsonl" loss | tail -1); l16=$(col "$W/a.jsonl" loss | tail -1)
if [ $rc -eq 0 ] && grep -q 'precision fp16' "$W/a.out" && grep -q '^fp16: products through gemm_f32' "$W/a.out" &&
   [ "$scales" = "65536 65536 65536 131072 131072 131072 262144 262144 " ] &&
   awk -v a="$n16" -v b="$n32" -v c="$l16" -v d="$l32" \
       'BEGIN {x = (a - b) / b; y = (c - d) / d; exit !(x < 1e-2 && x > -1e-2 && y < 1e-2 && y > -1e-2)}'; then
    ok fp16_scale_logged_doubles_after_window_and_unscales "scales $scales; step-0 norm $n16 (fp32 $n32), last loss $l16 (fp32 $l32)"
else
    fail fp16_scale_logged_doubles_after_window_and_unscales "status $rc; scales $scales; step-0 norm $n16 (fp32 $n32), last loss $l16 (fp32 $l32); $(grep -c 'precision fp16' "$W/a.out") start-up lines"
fi

# ---- two runs, the same bits
"$TRAIN" "${F16[@]}" --steps 8 --log-json "$W/b.jsonl" --save "$W/b.bin" > /dev/null 2>&1
if diff <(rows "$W/a.jsonl") <(rows "$W/b.jsonl") > /dev/null && cmp -s "$W/a.bin" "$W/b.bin"; then
    ok fp16_two_runs_same_bits "8 rows (loss, grad_norm, loss_scale) and the model file identical"
else
    fail fp16_two_runs_same_bits "$(diff <(rows "$W/a.jsonl") <(rows "$W/b.jsonl") | head -2 | tr '\n' ' ') $(cmp "$W/a.bin" "$W/b.bin" 2>&1)"
fi

# ---- a planted overflow at step 5: skipped, the scale halved, nothing updated, the run goes on
SEEDGPT_FAULT=fp16_overflow:5 "$TRAIN" "${F16[@]}" --steps 12 --max-bad-steps 1 --out "$W/ov" \
    --save-every 1 --keep 0 --log-json "$W/ov.jsonl" > "$W/ov.out" 2>&1
rc=$?
scales=$(col "$W/ov.jsonl" loss_scale | tr '\n' ' ')
skipped=$(grep -n '"skipped":true' "$W/ov.jsonl" | grep -o '"step":[0-9]*' | tr '\n' ' ')
# the states after step 4 and after step 5: header aside, the same bytes (weights, m, v)
O=$(od -An -t u8 -j 128 -N 8 "$W/ov/state_00000005.bin" 2>/dev/null | tr -d ' ')
sz=$(stat -c %s "$W/ov/state_00000005.bin" 2>/dev/null || echo 0)
payload() { tail -c +$((256 + O + 1)) "$1" | head -c $((sz - 256 - O - 4)); }
same=no; moved=no
if [ -n "$O" ] && cmp -s <(payload "$W/ov/state_00000005.bin") <(payload "$W/ov/state_00000006.bin"); then same=yes; fi
if [ -n "$O" ] && ! cmp -s <(payload "$W/ov/state_00000006.bin") <(payload "$W/ov/state_00000007.bin"); then moved=yes; fi
if [ $rc -eq 0 ] && [ "$skipped" = '"step":5 ' ] &&
   [ "$scales" = "65536 65536 65536 131072 131072 131072 65536 65536 65536 131072 131072 131072 " ] &&
   [ $same = yes ] && [ $moved = yes ] && [ "$(col "$W/ov.jsonl" loss | wc -l)" -eq 12 ] &&
   grep -q '^step 5: fp16 gradient overflow at loss scale 131072 (first non-finite gradient in the backward: lnfw); update skipped, loss scale now 65536' "$W/ov.out"; then
    ok fp16_overflow_halves_the_scale_and_skips_exactly_that_step "status 0 under --max-bad-steps 1; skipped: $skipped; scales $scales; weights and moments after step 5 = after step 4, byte for byte, and step 6 updates them; $(grep '^step 5' "$W/ov.out")"
else
    fail fp16_overflow_halves_the_scale_and_skips_exactly_that_step "status $rc; skipped: $skipped; scales $scales; state 5 = state 6: $same, 6 != 7: $moved; $(grep '^step 5' "$W/ov.out")"
fi

# ---- resume twice, at a doubled scale (after step 3: 2^17, 1 good step) and across the overflow
# (after step 6: 2^16, 1 good step): the straight run's bits
export SEEDGPT_FAULT=fp16_overflow:5
"$TRAIN" "${F16[@]}" --steps 4 --out "$W/r" > /dev/null 2>&1
rc1=$?
"$TRAIN" --resume "$W/r" --steps 7 --precision fp16 --log-json "$W/r1.jsonl" > /dev/null 2>&1
rc2=$?
"$TRAIN" --resume "$W/r" --steps 12 --precision fp16 --log-json "$W/r2.jsonl" --save "$W/r.bin" > /dev/null 2>&1
rc3=$?
unset SEEDGPT_FAULT
nots() { sed 's/,"peak_bytes":[0-9]*//'; }
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] &&
   diff <(rows "$W/ov.jsonl" | tail -8 | nots) <(cat "$W/r1.jsonl" "$W/r2.jsonl" | rows /dev/stdin | nots) > /dev/null &&
   cmp -s "$W/ov/model.bin" "$W/r/model.bin"; then
    ok fp16_resume_is_bit_exact_with_the_scale "resumed after step 3 (scale 131072) and after step 6 (65536, past the overflow): steps 4..11 rows and the model file identical to the straight run's"
else
    fail fp16_resume_is_bit_exact_with_the_scale "status $rc1/$rc2/$rc3; $(diff <(rows "$W/ov.jsonl" | tail -8 | nots) <(cat "$W/r1.jsonl" "$W/r2.jsonl" | rows /dev/stdin | nots) | head -2 | tr '\n' ' ') $(cmp "$W/ov/model.bin" "$W/r/model.bin" 2>&1)"
fi

# ---- the attention statistics' headroom to fp16's largest value, a layer at a time
"$TRAIN" "${F16[@]}" --steps 3 --log-attn-stats --log-json "$W/as.jsonl" > /dev/null 2>&1
rc16=$?
"$TRAIN" "${BASE[@]}" --steps 1 --log-attn-stats --log-json "$W/as32.jsonl" > /dev/null 2>&1
rc32=$?
verdict=$(python3 - "$W/as.jsonl" "$W/as32.jsonl" << 'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"type":"train"' in l]
r32 = [json.loads(l) for l in open(sys.argv[2]) if '"type":"train"' in l]
bad = []
for r in rows:
    st, h = r.get("attn_stats"), r.get("attn_fp16_headroom")
    if st is None or h is None or len(h) != len(st) or len(st) != 2:
        bad.append("step %d: stats %s, headroom %s" % (r["step"], st, h)); continue
    for l, (s, hl) in enumerate(zip(st, h)):
        if not (s[0] > 0 and abs(hl - 65504.0 / s[0]) <= 1e-6 * hl):
            bad.append("step %d layer %d: max |s| %g, headroom %g" % (r["step"], l, s[0], hl))
if len(rows) != 3: bad.append("%d fp16 rows" % len(rows))
if not r32 or "attn_fp16_headroom" in r32[0] or "attn_stats" not in r32[0]: bad.append("fp32 row: %s" % r32[:1])
print("ok " + ", ".join("%.4g" % h for h in rows[-1]["attn_fp16_headroom"]) if not bad else "; ".join(bad))
PY
)
if [ $rc16 -eq 0 ] && [ $rc32 -eq 0 ] && [ "${verdict%% *}" = ok ]; then
    ok fp16_attn_stats_give_each_layers_headroom "3 fp16 rows, each layer's headroom 65504 / max |s| (last row: ${verdict#ok }); the fp32 row has none"
else
    fail fp16_attn_stats_give_each_layers_headroom "status $rc16/$rc32: $verdict"
fi

# ---- states and precisions
"$TRAIN" "${BASE[@]}" --steps 2 --out "$W/s32" > /dev/null 2>&1
bad=
for c in "$W/r|fp32|written by an fp16 run (loss scale [0-9]*): resume it with --precision fp16|--precision fp32," \
         "$W/r|bf16|written by an fp16 run|--precision bf16," \
         "$W/s32|fp16|--precision fp16, but .* written by a run in another precision|--precision fp16,"; do
    IFS='|' read -r dir prec pat pat2 <<< "$c"
    "$TRAIN" --resume "$dir" --steps 14 --precision "$prec" > "$W/p.out" 2> "$W/p.err"
    rc=$?
    if [ $rc -ne 2 ] || ! one_line "$W/p.err" || ! grep -q -- "$pat" "$W/p.err" || ! grep -q -- "$pat2" "$W/p.err" ||
       grep -q '^step' "$W/p.out"; then
        bad="$bad [$prec on $(basename "$dir"): status $rc: $(head -c 200 "$W/p.err")]"
    fi
done
"$TRAIN" --resume "$W/r" --steps 14 --precision fp16 --loss-scale-window 4 > /dev/null 2> "$W/p.err"
rc=$?
if [ $rc -ne 2 ] || ! one_line "$W/p.err" || ! grep -q 'loss-scale-window 4 contradicts the state' "$W/p.err"; then
    bad="$bad [window: status $rc: $(head -c 200 "$W/p.err")]"
fi
if [ -z "$bad" ]; then
    ok fp16_states_resume_in_fp16_only "fp16 state under fp32 and bf16, fp32 state under fp16, another --loss-scale-window: each status 2, one line naming both"
else
    fail fp16_states_resume_in_fp16_only "$bad"
fi

exit $failed
