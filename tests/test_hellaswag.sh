#!/usr/bin/env bash
# tests/test_hellaswag.sh — HellaSwag scoring (README "HellaSwag"), on a small byte-level model
# trained for a few steps and the hand-written 20 examples of tests/fixtures/hellaswag_val_20.jsonl:
#   - ./train prepare --hellaswag writes llm.c's eval file, which the float64 reference
#     (tests/hellaswag_ref.py, numpy only, its own readers) reads back;
#   - ./train eval --per-example matches the reference: every summed loss within 1e-5 relative,
#     both picks of every example exactly, and the acc / acc_norm counts; the reference's picks
#     differ somewhere between sum and mean (so a swap of the two rules is visible);
#   - the picks do not depend on how many examples share a forward (--batch 4 and 80);
#   - a training run with --hellaswag --hellaswag-every logs {"type":"hellaswag",...} rows at the
#     steps asked and at the end; the last one counts what ./train eval counts on the saved model;
#   - bad input is one line and exit 2: wrong magic, a token shard, wrong version, a truncated file,
#     a record whose size disagrees with its fields, a bad label, a wrong example index, bytes after
#     the last example, an example longer than the model's context, a token outside the vocabulary,
#     --batch below 4 in a training run, --hellaswag-every without --hellaswag, a bad jsonl line;
#   - where the emulated CUDA trainer is built (build/emu/train), ./train eval --device cuda on two
#     short examples picks what the CPU picks, its sums within 1e-5 relative.
set -u
cd "$(dirname "$0")/.."
TRAIN=${SEEDGPT_TRAIN:-./train}
PY=${SEEDGPT_PYTHON:-/usr/bin/python3}
EMU_TRAIN=${SEEDGPT_EMU_TRAIN:-build/emu/train}
FIXTURE=tests/fixtures/hellaswag_val_20.jsonl
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2
W=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_hellaswag.XXXXXX")
failed=0
trap 'if [ $failed -eq 0 ]; then rm -rf "$W"; else echo "# work folder kept: $W"; fi' EXIT
ok()   { echo "ok   $1: $2"; }
fail() { echo "FAIL $1: $2"; failed=1; }
skip() { echo "SKIP $1: $2"; }

if ! "$PY" -c 'import numpy' > /dev/null 2>&1; then
    skip hellaswag "no numpy for $PY (the float64 reference needs it)"
    exit 0
fi

# ---- the eval file and a small model ------------------------------------------------------------
if "$TRAIN" prepare --hellaswag "$FIXTURE" "$W/hs.bin" --tokenizer byte > "$W/prep.out" 2>&1 &&
   grep -q "20 examples" "$W/prep.out"; then
    ok prepare_hellaswag_writes_the_eval_file "$(cat "$W/prep.out")"
else
    fail prepare_hellaswag_writes_the_eval_file "$(tail -n 2 "$W/prep.out")"
    exit 1
fi
head -c 30000 README.md > "$W/doc.txt"
"$TRAIN" prepare "$W/doc.txt" "$W/data" > /dev/null || { fail hellaswag_data "prepare failed"; exit 1; }
RUN=(--train "$W/data/train_*.bin" --layers 2 --heads 2 --embd 32 --seq-len 128 --batch 4
     --lr 3e-3 --log-every 0 --threads 2 --seed 7)
"$TRAIN" "${RUN[@]}" --steps 30 --save "$W/model.bin" --hellaswag "$W/hs.bin" \
    --hellaswag-every 20 --log-json "$W/log.jsonl" > "$W/run.out" 2> "$W/run.err"
rc=$?
if [ $rc -ne 0 ]; then
    fail hellaswag_in_training_run "exit $rc: $(tail -n 2 "$W/run.err")"
    exit 1
fi

# ---- the scoring against the float64 reference ----------------------------------------------------
"$TRAIN" eval --hellaswag "$W/hs.bin" --init "$W/model.bin" --per-example --batch 8 \
    > "$W/eval.out" 2> "$W/eval.err"
rc=$?
[ $rc -eq 0 ] || { fail hellaswag_eval "exit $rc: $(tail -n 2 "$W/eval.err")"; exit 1; }
"$PY" tests/hellaswag_ref.py "$W/model.bin" "$W/hs.bin" > "$W/ref.out" ||
    { fail hellaswag_reference "the reference failed"; exit 1; }
cmp_out=$("$PY" - "$W/eval.out" "$W/ref.out" << 'PY'
import json, sys
ours = [l.split() for l in open(sys.argv[1]) if l.startswith("hellaswag example")]
ref = [l.split() for l in open(sys.argv[2]) if l.startswith("example")]
tot = open(sys.argv[2]).read().split("total")[1].split()
summary = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][0]
def fields(w, off):   # label, pick, pick_norm, sums, lens
    return (int(w[off + 3]), int(w[off + 5]), int(w[off + 7]),
            [float(x) for x in w[off + 9:off + 13]], [int(x) for x in w[off + 14:off + 18]])
bad, worst, margin, differ = [], 0.0, 1e9, 0
if len(ours) != len(ref) or len(ref) != 20:
    bad.append(f"{len(ours)} examples scored, the reference has {len(ref)} (expected 20)")
for i, (a, b) in enumerate(zip(ours, ref)):
    la, pa, na, sa, ma = fields(a, 1)
    lb, pb, nb, sb, mb = fields(b, 0)
    worst = max([worst] + [abs(x - y) / abs(y) for x, y in zip(sa, sb)])
    if (la, pa, na, ma) != (lb, pb, nb, mb):
        bad.append(f"example {i}: label/pick/pick_norm/lens {la} {pa} {na} {ma}, reference {lb} {pb} {nb} {mb}")
    differ += pb != nb
    for v in (sb, [s / m for s, m in zip(sb, mb)]):
        s = sorted(v)
        margin = min(margin, (s[1] - s[0]) / abs(s[0]))
if worst > 1e-5:
    bad.append(f"summed losses differ by {worst:.3g} relative (at most 1e-5)")
counts = (summary["n"], summary["correct"], summary["correct_norm"])
if counts != tuple(int(tot[k]) for k in (0, 2, 4)):
    bad.append(f"n/correct/correct_norm {counts}, reference {tot[0]} {tot[2]} {tot[4]}")
if differ == 0:
    bad.append("the reference's sum and mean picks agree on every example: a swap would not show")
print("FAIL " + "; ".join(bad) if bad else
      f"ok 20 examples, picks equal, sums within {worst:.2g} relative, acc {counts[1]}/20, "
      f"acc_norm {counts[2]}/20, {differ} examples where sum and mean pick differently, the "
      f"closest pick margin {margin:.2g} relative")
PY
)
case "$cmp_out" in
    ok*) ok hellaswag_matches_float64_reference "${cmp_out#ok }" ;;
    *) fail hellaswag_matches_float64_reference "${cmp_out#FAIL }" ;;
esac
if grep -q "^hellaswag: 20 examples scored" "$W/eval.err" && grep -q "^hellaswag: .*hs.bin, 20 examples" "$W/eval.err"; then
    ok hellaswag_eval_says_progress "$(tail -n 1 "$W/eval.err")"
else
    fail hellaswag_eval_says_progress "stderr: $(head -c 300 "$W/eval.err")"
fi

# the same counts whatever the batch (1 example or all 20 per forward)
row_of() { grep '^{' "$1"; }
"$TRAIN" eval --hellaswag "$W/hs.bin" --init "$W/model.bin" --batch 4 > "$W/b4.out" 2> /dev/null
"$TRAIN" eval --hellaswag "$W/hs.bin" --init "$W/model.bin" --batch 80 > "$W/b80.out" 2> /dev/null
if [ -n "$(row_of "$W/b4.out")" ] && [ "$(row_of "$W/b4.out")" = "$(row_of "$W/b80.out")" ] &&
   [ "$(row_of "$W/b4.out")" = "$(row_of "$W/eval.out")" ]; then
    ok hellaswag_counts_do_not_depend_on_the_batch "$(row_of "$W/b4.out")"
else
    fail hellaswag_counts_do_not_depend_on_the_batch "batch 4: $(row_of "$W/b4.out"); 80: $(row_of "$W/b80.out"); 8: $(row_of "$W/eval.out")"
fi

# ---- in a training run: the rows, at steps 19 and 29 (the last) -----------------------------------
rows=$(grep '"type":"hellaswag"' "$W/log.jsonl")
steps=$(printf '%s\n' "$rows" | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | tr '\n' ' ')
last=$(printf '%s\n' "$rows" | tail -n 1)
want=$(row_of "$W/eval.out" | sed 's/^{"type":"hellaswag"/{"type":"hellaswag","step":29/')
if [ "$steps" = "19 29 " ] && printf '%s' "$last" | grep -q '"acc":.*"acc_norm":.*"n":20' &&
   [ "$last" = "$want" ] && grep -q "step    29 | hellaswag acc" "$W/run.out"; then
    ok hellaswag_rows_in_training_log "steps $steps; the last equals ./train eval on the saved model: $last"
else
    fail hellaswag_rows_in_training_log "steps '$steps'; last $last; ./train eval: $want"
fi

# ---- bad input: one line, exit 2 ------------------------------------------------------------------
"$PY" - "$W/hs.bin" "$W/bad" << 'PY'
import os, struct, sys
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
b = open(src, "rb").read()
head, body = bytearray(b[:1024]), bytearray(b[1024:])
def put(name, data): open(os.path.join(out, name), "wb").write(bytes(data))
def hdr(k, v):
    h = bytearray(head); h[4 * k:4 * k + 4] = struct.pack("<i", v); return h
put("magic.bin", hdr(0, 20240521) + body)
put("shard.bin", hdr(0, 20240520) + body)
put("version.bin", hdr(1, 2) + body)
put("truncated.bin", b[:-3])
put("truncated_even.bin", b[:-4])
put("count.bin", hdr(2, 21) + body)
put("trailing.bin", b + b"\x00\x00")
n0 = struct.unpack("<H", body[2:4])[0]
r = bytearray(body); r[2:4] = struct.pack("<H", n0 + 2); put("size.bin", head + r)
r = bytearray(body); r[6:8] = struct.pack("<H", 4); put("label.bin", head + r)
r = bytearray(body); r[4:6] = struct.pack("<H", 3); put("index.bin", head + r)
r = bytearray(body); r[12:14] = struct.pack("<H", 300); put("vocab.bin", head + r)   # ctx token 0
# one example whose context is 200 tokens (the model's context is 128)
rec = [65535, 0, 0, 1, 4, 200] + [65] * 200
for e in range(4): rec += [3, 66, 67, 68]
rec[1] = 2 * len(rec)
h = bytearray(1024); h[0:16] = struct.pack("<iiii", 20240522, 1, 1, rec[1])
put("long.bin", h + struct.pack(f"<{len(rec)}H", *rec))
PY
for case in magic:"magic 20240521" shard:"token shard" version:"version 2" truncated:"odd number" \
            truncated_even:"truncated" count:"truncated" trailing:"follow the last" size:"example 0" \
            label:"label 4" index:"carries the index 3" vocab:"token id 300" long:"needs 202 positions"; do
    name=${case%%:*}
    "$TRAIN" eval --hellaswag "$W/bad/$name.bin" --init "$W/model.bin" > "$W/bad.out" 2> "$W/bad.err"
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l < "$W/bad.err")" -eq 1 ] && grep -q -- "${case#*:}" "$W/bad.err" &&
       grep -q "$name.bin" "$W/bad.err" && [ ! -s "$W/bad.out" ]; then
        ok "hellaswag_refuses_${name}" "$(cat "$W/bad.err")"
    else
        fail "hellaswag_refuses_${name}" "exit $rc, stderr: $(head -c 300 "$W/bad.err")"
    fi
done
"$TRAIN" "${RUN[@]}" --batch 2 --steps 1 --hellaswag "$W/hs.bin" > /dev/null 2> "$W/bad.err"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l < "$W/bad.err")" -eq 1 ] && grep -q "the batch is 2" "$W/bad.err"; then
    ok hellaswag_refuses_batch_below_4 "$(cat "$W/bad.err")"
else
    fail hellaswag_refuses_batch_below_4 "exit $rc, stderr: $(head -c 300 "$W/bad.err")"
fi
"$TRAIN" "${RUN[@]}" --steps 1 --hellaswag-every 5 > /dev/null 2> "$W/bad.err"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l < "$W/bad.err")" -eq 1 ] && grep -q "needs --hellaswag" "$W/bad.err"; then
    ok hellaswag_every_needs_a_file "$(cat "$W/bad.err")"
else
    fail hellaswag_every_needs_a_file "exit $rc, stderr: $(head -c 300 "$W/bad.err")"
fi
{ head -n 3 "$FIXTURE"; echo '{"ctx": "A cat", "label": 7, "endings": ["a", "b", "c", "d"]}'; } > "$W/bad.jsonl"
"$TRAIN" prepare --hellaswag "$W/bad.jsonl" "$W/bad_out.bin" --tokenizer byte > /dev/null 2> "$W/bad.err"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l < "$W/bad.err")" -eq 1 ] && grep -q "bad.jsonl:4: \"label\"" "$W/bad.err" &&
   [ ! -e "$W/bad_out.bin" ] && [ ! -e "$W/bad_out.bin.tmp" ]; then
    ok prepare_hellaswag_refuses_bad_line "$(cat "$W/bad.err")"
else
    fail prepare_hellaswag_refuses_bad_line "exit $rc, stderr: $(head -c 300 "$W/bad.err")"
fi
printf 'not an eval file\n' > "$W/keep.txt"
cp "$W/keep.txt" "$W/keep.orig"
"$TRAIN" prepare --hellaswag "$FIXTURE" "$W/keep.txt" --tokenizer byte > /dev/null 2> "$W/bad.err"
rc=$?
if [ $rc -eq 2 ] && cmp -s "$W/keep.txt" "$W/keep.orig" && [ "$(wc -l < "$W/bad.err")" -eq 1 ]; then
    ok prepare_hellaswag_never_overwrites_another_file "$(cat "$W/bad.err")"
else
    fail prepare_hellaswag_never_overwrites_another_file "exit $rc, stderr: $(head -c 300 "$W/bad.err")"
fi

# ---- the CUDA backend, emulated on the CPU ----------------------------------------------------------
# (two examples of rows of at most 6 positions: the emulation takes ~30 s for one step of B4 T64)
if [ -x "$EMU_TRAIN" ]; then
    "$PY" - "$W/tiny.bin" << 'PY'
import struct, sys
recs = []
for i, (label, ctx, ends) in enumerate([(1, [84, 104, 101], [[32, 99], [32, 100, 111], [32, 101], [32, 102, 103]]),
                                        (2, [65, 32, 98], [[111, 120], [105, 114, 100], [97, 116], [117]])]):
    r = [65535, 0, i, label, 4, len(ctx)] + ctx
    for e in ends:
        r += [len(e)] + e
    r[1] = 2 * len(r)
    recs.append(r)
h = struct.pack("<iiii", 20240522, 1, len(recs), max(r[1] for r in recs)) + bytes(1008)
open(sys.argv[1], "wb").write(h + b"".join(struct.pack(f"<{len(r)}H", *r) for r in recs))
PY
    "$TRAIN" eval --hellaswag "$W/tiny.bin" --init "$W/model.bin" --per-example > "$W/tiny_cpu.out" 2> /dev/null
    "$EMU_TRAIN" eval --device cuda --hellaswag "$W/tiny.bin" --init "$W/model.bin" --per-example \
        > "$W/tiny_cuda.out" 2> "$W/tiny_cuda.err"
    rc=$?
    res=$("$PY" - "$W/tiny_cpu.out" "$W/tiny_cuda.out" << 'PY'
import sys
a, b = ([l.split() for l in open(p) if l.startswith("hellaswag example")] for p in sys.argv[1:3])
if len(a) != 2 or len(b) != 2:
    print(f"FAIL {len(a)} and {len(b)} examples scored, expected 2"); sys.exit()
worst = max(abs(float(x) - float(y)) / abs(float(x)) for u, v in zip(a, b) for x, y in zip(u[10:14], v[10:14]))
same = all(u[:9] == v[:9] and u[14:] == v[14:] for u, v in zip(a, b))
print(("ok " if same and worst <= 1e-5 else "FAIL ") +
      f"labels and picks {'equal' if same else 'differ'}, sums within {worst:.2g} relative")
PY
)
    if [ $rc -eq 0 ] && [ "${res#ok}" != "$res" ] && grep -q "device cuda" "$W/tiny_cuda.err"; then
        ok hellaswag_cuda_emulated_matches_cpu "${res#ok }"
    else
        fail hellaswag_cuda_emulated_matches_cpu "exit $rc: ${res#FAIL }; $(tail -n 1 "$W/tiny_cuda.err")"
    fi
else
    skip hellaswag_cuda_emulated_matches_cpu "$EMU_TRAIN is not built (make test-cuda-emu builds it)"
fi
exit $failed
