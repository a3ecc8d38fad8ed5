#!/usr/bin/env bash
# tests/test_recipes.sh — the data recipes (scripts/data/*.sh) offline, each on its fixture under
# tests/fixtures/ (hand-written text), with a tiny GPT-2-style BPE (the 256 byte tokens in GPT-2's
# byte -> character spelling, a few merges, <|endoftext|>) so that no download is needed:
#   - tinyshakespeare.sh (plain text), tinystories.sh (the archive's JSON arrays), fineweb_edu.sh
#     (JSON lines): llm.c shards whose tokens, decoded, are EOT + each document in order (stories
#     stripped), split into train and val;
#   - hellaswag.sh: the eval file holds the 20 examples, their labels, contexts and " " + endings;
#   - a shard written as llm.c's data_common.py writes one (numpy, GPT-2 token ids) trains as it is;
#   - a recipe given a missing --input says so in one line, exit 2.
set -u
cd "$(dirname "$0")/.."
export SEEDGPT_TRAIN=${SEEDGPT_TRAIN:-$PWD/train}
TRAIN=$SEEDGPT_TRAIN
PY=${SEEDGPT_PYTHON:-/usr/bin/python3}
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2
W=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_recipes.XXXXXX")
failed=0
trap 'if [ $failed -eq 0 ]; then rm -rf "$W"; else echo "# work folder kept: $W"; fi' EXIT
ok()   { echo "ok   $1: $2"; }
fail() { echo "FAIL $1: $2"; failed=1; }
skip() { echo "SKIP $1: $2"; }
F=tests/fixtures/recipes

if ! "$PY" -c 'import numpy' > /dev/null 2>&1; then
    skip recipes "no numpy for $PY"
    exit 0
fi
if "$TRAIN" --version | grep -q "GPT-2 tokenizer"; then
    skip recipes "this build has no GPT-2 tokenizer ($("$TRAIN" --version | tail -n 1))"
    exit 0
fi

# the tiny BPE: encoder.json and vocab.bpe
"$PY" - "$W/bpe" << 'PY'
import json, os, sys
sys.path.insert(0, "tests")
from gpt2_bytes import byte_chars
os.makedirs(sys.argv[1])
ch = byte_chars()
vocab = [ch[b] for b in range(256)]
merges = [(ch[32], "t"), (ch[32] + "t", "h"), ("h", "e"), (ch[32] + "th", "e"), ("i", "n")]
vocab += [a + b for a, b in merges] + ["<|endoftext|>"]
json.dump({t: i for i, t in enumerate(vocab)},
          open(os.path.join(sys.argv[1], "encoder.json"), "w", encoding="utf-8"), ensure_ascii=False)
open(os.path.join(sys.argv[1], "vocab.bpe"), "w", encoding="utf-8").write(
    "#version: 0.2\n" + "".join(a + " " + b + "\n" for a, b in merges))
PY

# decode.py BPE_DIR OUT_DIR DOCS.json: the shards of OUT_DIR decoded against the documents
cat > "$W/check_shards.py" << 'PY'
import glob, json, os, sys
import numpy as np
sys.path.insert(0, os.environ["SEEDGPT_TESTS"])
from gpt2_bytes import token_bytes
bpe, out, docs = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
text_of, eot = token_bytes(os.path.join(bpe, "encoder.json"))
def shard(path):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    assert h[0] == 20240520 and h[1] == 1, f"{path}: header {h[:3]}"
    assert len(raw) == 1024 + 2 * int(h[2]), f"{path}: size {len(raw)} for {h[2]} tokens"
    return list(np.frombuffer(raw[1024:], dtype="<u2"))
train = [t for p in sorted(glob.glob(os.path.join(out, "train_*.bin"))) for t in shard(p)]
val = [t for p in sorted(glob.glob(os.path.join(out, "val_*.bin"))) for t in shard(p)]
assert train and val, f"train {len(train)} tokens, val {len(val)}"
assert val[0] == eot, "val does not start at a document boundary"
def split(stream):
    got = []
    for t in stream:
        if t == eot:
            got.append(bytearray())
        elif got:
            got[-1] += text_of[int(t)]
        else:
            return None   # tokens before the first EOT
    return [bytes(g) for g in got]
want = [d.encode("utf-8") for d in docs]
# val = EOT + the rest of the stream, that EOT added when the split fell inside a document
ways = [split(train + val), split(train + val[1:])]
assert want in ways, f"decoded {[len(w or []) for w in ways]} documents, expected {len(want)}: " \
    f"{[d[:40] for d in (ways[0] or [])]} vs {[w[:40] for w in want]}"
print(f"{len(docs)} documents, {len(train)} train + {len(val)} val tokens, decoded exactly")
PY

recipe() {   # recipe NAME FIXTURE DOCS_PY: runs scripts/data/NAME.sh, checks its shards
    local name=$1 fixture=$2
    "$PY" -c "$3" > "$W/$name.docs.json"
    scripts/data/$name.sh --input "$fixture" --out "$W/$name" --bpe-dir "$W/bpe" --val-frac 0.2 \
        > "$W/$name.out" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
        fail "recipe_${name}_offline" "exit $rc: $(tail -n 2 "$W/$name.out")"
        return
    fi
    local res
    if res=$(SEEDGPT_TESTS=$PWD/tests "$PY" "$W/check_shards.py" "$W/bpe" "$W/$name" "$W/$name.docs.json" 2>&1); then
        ok "recipe_${name}_offline" "$res"
    else
        fail "recipe_${name}_offline" "$(printf '%s' "$res" | tail -n 1)"
    fi
}
recipe tinyshakespeare $F/shakespeare.txt \
    "import json; print(json.dumps([open('$F/shakespeare.txt', encoding='utf-8').read()]))"
recipe tinystories $F/tinystories.json \
    "import json; print(json.dumps([s['story'].strip() for s in json.load(open('$F/tinystories.json'))]))"
recipe fineweb_edu $F/fineweb_edu.jsonl \
    "import json; print(json.dumps([json.loads(l)['text'] for l in open('$F/fineweb_edu.jsonl')]))"

# the HellaSwag recipe: the eval file against the jsonl, decoded
if scripts/data/hellaswag.sh --input tests/fixtures/hellaswag_val_20.jsonl --out "$W/hs" \
        --bpe-dir "$W/bpe" > "$W/hs.out" 2>&1; then
    res=$("$PY" - "$W/bpe" "$W/hs/hellaswag_val.bin" tests/fixtures/hellaswag_val_20.jsonl << 'PY' 2>&1
import json, os, sys
sys.path.insert(0, "tests")
from hellaswag_ref import read_eval
from gpt2_bytes import token_bytes
text_of, _ = token_bytes(os.path.join(sys.argv[1], "encoder.json"))
dec = lambda ids: b"".join(text_of[t] for t in ids).decode("utf-8")
got = read_eval(sys.argv[2])
want = [json.loads(l) for l in open(sys.argv[3])]
assert len(got) == len(want) == 20, f"{len(got)} examples"
for i, ((label, ctx, ends), w) in enumerate(zip(got, want)):
    assert label == w["label"], f"example {i}: label {label}, jsonl {w['label']}"
    assert dec(ctx) == w["ctx"], f"example {i}: context {dec(ctx)!r}"
    assert [dec(e) for e in ends] == [" " + e for e in w["endings"]], f"example {i}: endings"
print("20 examples: labels, contexts and ' ' + endings decode as in the jsonl")
PY
)
    if [ $? -eq 0 ]; then ok recipe_hellaswag_offline "$res"
    else fail recipe_hellaswag_offline "$(printf '%s' "$res" | tail -n 1)"; fi
else
    fail recipe_hellaswag_offline "$(tail -n 2 "$W/hs.out")"
fi

# a missing --input: one line, exit 2
scripts/data/tinystories.sh --input "$W/none.json" --out "$W/none" --bpe-dir "$W/bpe" \
    > "$W/none.out" 2> "$W/none.err"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l < "$W/none.err")" -eq 1 ] && grep -q "none.json" "$W/none.err"; then
    ok recipe_refuses_missing_input "$(cat "$W/none.err")"
else
    fail recipe_refuses_missing_input "exit $rc: $(head -c 300 "$W/none.err")"
fi

# llm.c's own shards load unchanged: one written the way dev/data/data_common.py writes them
"$PY" - "$W/llmc.bin" << 'PY'
import sys
import numpy as np
toks = np.random.default_rng(5).integers(0, 50257, size=5000).astype(np.uint16)
toks[::97] = 50256   # some EOTs
header = np.zeros(256, dtype=np.int32)
header[0], header[1], header[2] = 20240520, 1, len(toks)
with open(sys.argv[1], "wb") as f:
    f.write(header.tobytes())
    f.write(toks.tobytes())
PY
if "$TRAIN" --train "$W/llmc.bin" --tokenizer byte --vocab 50257 --layers 1 --heads 1 --embd 8 \
        --seq-len 16 --batch 2 --steps 2 --log-every 1 --threads 2 > "$W/llmc.out" 2>&1 &&
   grep -q "156 training windows" "$W/llmc.out"; then
    ok llmc_shard_trains_unchanged "5000 GPT-2 ids, 156 windows of 2 x 16: $(grep -m1 '^step' "$W/llmc.out")"
else
    fail llmc_shard_trains_unchanged "$(tail -n 2 "$W/llmc.out")"
fi
exit $failed
