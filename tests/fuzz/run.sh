#!/usr/bin/env bash
# tests/fuzz/run.sh [SECONDS] — builds the libFuzzer targets of tests/fuzz/ with clang
# (-fsanitize=fuzzer,address,undefined; UBSan findings abort) into $BUILD/fuzz, seeds each with
# real files made by ./train, and runs each for SECONDS (default 60). Targets: shard, modelfile,
# state, hellaswag, safetensors (fuzz_*.c), tokenizer (names and text through prepare) and, where data/bpe.c exists, bpe
# (GPT-2's encoder.json + vocab.bpe). One line per target:
# "ok   fuzz_NAME_...: N executions in S s, corpus C inputs" or FAIL with the crashing input saved
# under $BUILD/fuzz/artifacts. Without clang's libFuzzer the targets report SKIP.
#   make fuzz               60 s per target (FUZZ_SECONDS=...)
#   make test               runs it with 10 s per target
# FUZZ_JOBS=N (default: the number of cores) objects compile and targets run N at a time; each
# target is one single-threaded process, so on N idle cores each gets its whole SECONDS of a core.
set -u
cd "$(dirname "$0")/../.."
SECONDS_PER=${1:-60}
B=${BUILD:-build}/fuzz
TRAIN=${SEEDGPT_TRAIN:-./train}
CLANG=${FUZZ_CC:-clang}
JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
TARGETS=(shard modelfile state hellaswag safetensors tokenizer)
LIBS=(-lm)
TOKENIZER_SRC="data/tokenizer.c data/prepare.c data/shards.c"
if [ -f data/bpe.c ]; then   # GPT-2's BPE: its files are a loader too
    TARGETS+=(bpe)
    TOKENIZER_SRC+=" data/bpe.c"
    LIBS+=(-lcjson -lpcre2-8)
fi
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1

probe=$(mktemp -d)
printf 'int LLVMFuzzerTestOneInput(const char* d, unsigned long n) { return 0; }\n' > "$probe/p.c"
if ! command -v "$CLANG" > /dev/null 2>&1 ||
   ! "$CLANG" -fsanitize=fuzzer,address,undefined -o "$probe/p" "$probe/p.c" > /dev/null 2>&1; then
    for t in "${TARGETS[@]}"; do
        echo "SKIP fuzz_${t}: no clang with libFuzzer (Debian: clang-14 and libclang-rt-14-dev)"
    done
    rm -rf "$probe"
    exit 0
fi
rm -rf "$probe"

# ---- build: project sources once, instrumented for coverage, ASan and UBSan (no OpenBLAS linked:
# the CPU backend's sgemm reference rate is left out, SEEDGPT_NO_CBLAS)
CFLAGS=(-std=c11 -g -O1 -fno-omit-frame-pointer -fopenmp -D_GNU_SOURCE -I. -DSEEDGPT_NO_CBLAS
        -fno-sanitize-recover=undefined -Wall -Wno-unused-parameter -Wno-pass-failed)
mkdir -p "$B/obj" "$B/artifacts"
newest_header=$(ls -t model/*.h cpu/*.h dist/*.h data/*.h attention/*.h checkpoint/*.h random/*.h util/*.h tests/fuzz/*.h | head -1)
obj() {   # obj SRC -> prints the object, building it when out of date
    local o="$B/obj/$(echo "$1" | tr / _).o" inc
    # a source that includes another .c (cpu/ops_fp16_cpu.c, the attention twins) is out of date
    # when that one is newer too
    inc=$(sed -n 's/^#include "\(.*\.c\)"$/\1/p' "$1")
    if [ ! -f "$o" ] || [ "$1" -nt "$o" ] || [ "$newest_header" -nt "$o" ] ||
       { [ -n "$inc" ] && [ "$inc" -nt "$o" ]; }; then
        "$CLANG" "${CFLAGS[@]}" -fsanitize=fuzzer-no-link,address,undefined -c -o "$o" "$1" || return 1
    fi
    echo "$o"
}
MODEL=(model/gpt.c model/backend.c model/mem.c cpu/backend_cpu.c cpu/ops_cpu.c cpu/gemm_cpu.c
       cpu/ops_bf16_cpu.c cpu/ops_fp16_cpu.c cpu/gemm_bf16_cpu.c cpu/peak.c checkpoint/checkpoint.c
       attention/flash_cpu.c attention/flash_bf16_cpu.c attention/flash_fp16_cpu.c)
declare -A SRC=(
    [shard]="data/shards.c"
    [hellaswag]="data/hellaswag.c"
    [modelfile]="model/modelfile.c ${MODEL[*]}"
    [state]="model/state.c ${MODEL[*]}"
    [safetensors]="model/safetensors.c model/hf.c model/modelfile.c ${MODEL[*]}"
    [tokenizer]="$TOKENIZER_SRC"
    [bpe]="data/bpe.c"
)
# every object first, JOBS compiles at a time (each source once, however many targets link it)
pool_wait() {   # pool_wait: blocks while JOBS background jobs are running
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
}
build_failed=0
rm -f "$B/obj_failed"
declare -A seen=()
for t in "${TARGETS[@]}"; do
    for s in ${SRC[$t]} tests/fuzz/fuzz_$t.c; do
        [ -n "${seen[$s]:-}" ] && continue
        seen[$s]=1
        pool_wait
        { obj "$s" > /dev/null || echo "$s" >> "$B/obj_failed"; } &
    done
done
wait
[ -f "$B/obj_failed" ] && build_failed=1
for t in "${TARGETS[@]}"; do
    [ $build_failed -eq 0 ] || break
    objs=()
    for s in ${SRC[$t]} tests/fuzz/fuzz_$t.c; do objs+=("$(obj "$s")"); done
    bin="$B/fuzz_$t"
    if [ ! -x "$bin" ] || [ -n "$(find "${objs[@]}" -newer "$bin" 2> /dev/null)" ]; then
        "$CLANG" "${CFLAGS[@]}" -fsanitize=fuzzer,address,undefined -o "$bin" "${objs[@]}" \
            "${LIBS[@]}" || build_failed=1
    fi
done
if [ $build_failed -ne 0 ]; then echo "FAIL fuzz_targets_build: clang failed (see above)"; exit 1; fi

# ---- seeds: real files from ./train (a shard, both model formats, a state), and two texts
seeds=$B/seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{shard,modelfile,state,hellaswag,safetensors,tokenizer,bpe}
printf 'byte\000In the beginning was the word.\n' > "$seeds/tokenizer/text"
printf 'gpt2\000\000\001\377 binary' > "$seeds/tokenizer/other"
if [ -x "$TRAIN" ]; then
    w=$(mktemp -d)
    head -c 600 README.md > "$w/t.txt"
    "$TRAIN" prepare "$w/t.txt" "$w/d" > /dev/null 2>&1
    cp "$w/d/train_000000.bin" "$seeds/shard/" 2> /dev/null
    "$TRAIN" prepare --hellaswag tests/fixtures/hellaswag_val_20.jsonl "$w/hs.bin" --tokenizer byte \
        > /dev/null 2>&1 && cp "$w/hs.bin" "$seeds/hellaswag/val_20.bin"
    tiny=(--train "$w/d/train_*.bin" --layers 1 --embd 4 --seq-len 4 --batch 1 --threads 1
          --log-every 0)
    "$TRAIN" "${tiny[@]}" --heads 1 --steps 0 --save "$seeds/modelfile/llmc.bin" > /dev/null 2>&1
    "$TRAIN" "${tiny[@]}" --heads 2 --kv-heads 1 --steps 0 --save "$seeds/modelfile/seed.bin" \
        > /dev/null 2>&1
    "$TRAIN" "${tiny[@]}" --heads 1 --steps 2 --out "$w/run" > /dev/null 2>&1
    # llm.c's bf16 model file (version 5): the same header, each weight's top 16 bits
    python3 - "$seeds/modelfile/llmc.bin" "$seeds/modelfile/llmc_bf16.bin" << 'PY' 2> /dev/null
import struct, sys
raw = open(sys.argv[1], "rb").read()
head = bytearray(raw[:1024])
head[4:8] = struct.pack("<i", 5)
body = b"".join(raw[i + 2:i + 4] for i in range(1024, len(raw), 4))
open(sys.argv[2], "wb").write(bytes(head) + body)
PY
    "$TRAIN" export "$seeds/modelfile/llmc.bin" "$w/hf" > /dev/null 2>&1 &&
        cp "$w/hf/model.safetensors" "$seeds/safetensors/gpt2.safetensors"
    "$TRAIN" export --dtype bf16 "$seeds/modelfile/llmc.bin" "$w/hf16" > /dev/null 2>&1 &&
        cp "$w/hf16/model.safetensors" "$seeds/safetensors/gpt2_bf16.safetensors"
    for f in "$w"/run/state_*.bin; do
        [ -f "$f" ] || continue
        { printf '\001'; cat "$f"; } > "$seeds/state/fixcrc_$(basename "$f")"
        { printf '\000'; cat "$f"; } > "$seeds/state/$(basename "$f")"
    done
    rm -rf "$w"
fi

# a tiny GPT-2-style tokenizer: the 256 byte tokens in GPT-2's byte -> character spelling, a few
# merges, <|endoftext|>; as the bpe target reads it (2 bytes: length of encoder.json)
python3 - "$seeds/bpe/tiny" << 'PY' 2> /dev/null
import json, struct, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + n); n += 1
ch = {b: chr(c) for b, c in zip(bs, cs)}
vocab = [ch[b] for b in range(256)]
merges = [(ch[32], "t"), (ch[32] + "t", "h"), ("h", "e"), (ch[32] + "th", "e")]
vocab += [a + b for a, b in merges] + ["<|endoftext|>"]
enc = json.dumps({t: i for i, t in enumerate(vocab)}, ensure_ascii=False).encode()
bpe = ("#version: 0.2\n" + "".join(a + " " + b + "\n" for a, b in merges)).encode()
open(sys.argv[1], "wb").write(struct.pack("<H", len(enc)) + enc + bpe)
PY

# ---- run (temporary files in $B/tmp: a crashing target leaves its own there)
rm -rf "$B/tmp"
mkdir -p "$B/tmp"
export TMPDIR=$B/tmp
fuzz_one() {   # fuzz_one TARGET: runs it for SECONDS_PER; its status in $B/tmp/rc_TARGET
    local corpus=$B/corpus/$1
    mkdir -p "$corpus"
    # FUZZ_SEED fixes libFuzzer's random seed (make test does, so a CI run is reproducible)
    "$B/fuzz_$1" ${FUZZ_SEED:+-seed=$FUZZ_SEED} -max_total_time="$SECONDS_PER" -timeout=20 \
        -rss_limit_mb=4096 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$B/artifacts/${1}-" "$corpus" "$seeds/$1" \
        > "$B/fuzz_$1.log" 2>&1
    echo $? > "$B/tmp/rc_$1"
}
for t in "${TARGETS[@]}"; do
    pool_wait
    fuzz_one "$t" &
done
wait
failed=0
for t in "${TARGETS[@]}"; do
    log=$B/fuzz_$t.log
    rc=$(cat "$B/tmp/rc_$t" 2> /dev/null || echo "?")
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    ncorpus=$(ls "$B/corpus/$t" | wc -l)
    if [ "$rc" = 0 ]; then
        echo "ok   fuzz_${t}_loader_survives_${SECONDS_PER}s: ${execs:-?} executions, no crash, no" \
             "sanitizer report (corpus $ncorpus inputs, $(ls "$seeds/$t" | wc -l) seeds)"
    else
        art=$(ls -t "$B/artifacts/${t}-"* 2> /dev/null | head -1)
        echo "FAIL fuzz_${t}_loader_survives_${SECONDS_PER}s: status $rc after ${execs:-?}" \
             "executions; input saved as ${art:-?}; $(grep -m1 -E 'ERROR|runtime error|deadly' "$log")"
        failed=1
    fi
done
exit $failed
