#!/usr/bin/env bash
# scripts/gpu_check.sh — one command for a machine with a GPU, the CUDA toolkit and python3 (and
# maybe nothing else): prints the driver and nvcc versions, builds seedgpt there, then runs the
# most telling checks first, each under its own timeout, appending everything to $OUT/gpu_check.txt
# (when OUT is set) as it goes, so a run cut short still leaves what it saw:
#   1. the cuBLAS call conventions against a float64 host loop (tests/cuda/test_cublas.cu);
#   1b. the tensor-core wrapper (mma.sync m16n8k16 bf16) and the bf16 conversions, real vs float64,
#      and the tensor-core attention forward (attention/flash_tc.cu) against the CPU attention;
#   2. compute-sanitizer racecheck on a tiny attention case;
#   3. make test-cuda: every op against its CPU twin, the whole step, recompute policies, the
#      trainer on both backends;
#   4. a short benchmark: GPT-2 124M (B8 T1024) and a small model, ms/step, tokens/s and peak
#      device memory per recompute policy; attention fwd+bwd TFLOP/s at T = 1024 and 4096 with and
#      without dropout, and PyTorch's scaled_dot_product_attention beside it when torch imports.
# The short table comes last. About 5 minutes on one H100/H200 with 16 cores.
#   scripts/gpu_check.sh            (GPU_CHECK_JOBS=N parallel build jobs, default nproc)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-}
[ -n "$OUT" ] && mkdir -p "$OUT"
REPORT=${OUT:+$OUT/gpu_check.txt}
TABLE=$(mktemp)
say() { echo "$@"; [ -n "$REPORT" ] && echo "$@" >> "$REPORT"; }
row() { printf '%-44s %s\n' "$1" "$2" >> "$TABLE"; say "# $1: $2"; }
# step NAME SECONDS CMD...: runs CMD with a timeout, its output to the screen and the report
step() {
    local name=$1 secs=$2; shift 2
    say "== $name (timeout ${secs}s): $*"
    local t0=$(date +%s) rc
    if [ -n "$REPORT" ]; then
        timeout "$secs" "$@" 2>&1 | tee -a "$REPORT"; rc=${PIPESTATUS[0]}
    else
        timeout "$secs" "$@" 2>&1; rc=$?
    fi
    LAST_S=$(( $(date +%s) - t0 ))
    say "== $name: status $rc in ${LAST_S}s"
    return $rc
}

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
export PATH="$(dirname "$NVCC"):$PATH"
say "seedgpt gpu_check $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)') on $(hostname) at $(date -u +%FT%TZ)"
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -2)"
say "$("$NVCC" --version 2>&1 | tail -2 | tr '\n' ' ')"
say "cpu: $(nproc) cores; python3: $(python3 --version 2>&1)"
jobs=${GPU_CHECK_JOBS:-$(nproc)}

# ---- build: what the CPU reference needs may be missing here; say which and build what can be
for h in cblas.h cjson/cJSON.h pcre2.h zlib.h; do
    [ -f "/usr/include/$h" ] || [ -f "/usr/include/x86_64-linux-gnu/$h" ] || say "note: /usr/include/$h missing"
done
if ! step build 300 make -j"$jobs" --no-print-directory cuda cuda-test-bins; then
    row "build (make cuda cuda-test-bins)" "FAILED (see above)"
    cat "$TABLE"; exit 1
fi
row "build" "ok in ${LAST_S}s"

# ---- 1. cuBLAS conventions
if step cublas 60 build/cuda/tests/test_cublas; then row "cublas conventions" "ok"; else row "cublas conventions" "FAILED"; fi

# ---- 1b. the tensor-core wrapper (attention/mma.h): the real mma.sync against its float64 bound
# and the emulation's fragment layout (tests/cuda/test_cuda_mma.cu), then bf16 conversions, then
# the tensor-core attention forward with dropout against flash_cpu.c (tests/cuda/test_cuda_flash_tc.cu)
for t in test_cuda_mma test_cuda_bf16 test_cuda_flash_tc; do
    if step "$t" 60 "build/cuda/tests/$t"; then row "$t" "ok"; else row "$t" "FAILED"; fi
done

# ---- 2. racecheck on a tiny attention case
if command -v compute-sanitizer >/dev/null 2>&1 || [ -x "$(dirname "$NVCC")/compute-sanitizer" ]; then
    CS=$(command -v compute-sanitizer || echo "$(dirname "$NVCC")/compute-sanitizer")
    if step racecheck 120 env SEEDGPT_TINY=1 "$CS" --tool racecheck --error-exitcode 9 build/cuda/tests/test_cuda_attention; then
        row "racecheck (tiny attention)" "clean"
    else
        row "racecheck (tiny attention)" "REPORTED or failed"
    fi
else
    row "racecheck" "skipped: compute-sanitizer not found"
fi

# ---- 3. make test-cuda
summary=$( { step test-cuda 240 make --no-print-directory test-cuda; } | tee /dev/stderr | tail -3 | grep -E '^[0-9]+ passed' )
row "make test-cuda" "${summary:-FAILED or timed out}"

# ---- 4. benchmarks
mkdir -p build/gpu_check
if [ ! -f build/gpu_check/train_000000.bin ] && [ ! -f build/gpu_check/data/train_000000.bin ]; then
    cat README.md docs/*.md model/*.c attention/*.c train.c > build/gpu_check/text.txt
    ./train_cuda prepare build/gpu_check/text.txt build/gpu_check/data > /dev/null 2>&1
fi
bench_train() {  # LABEL ARGS...
    local label=$1; shift
    local log=build/gpu_check/$label.jsonl
    rm -f "$log"
    if step "bench $label" 90 ./train_cuda --device cuda --train 'build/gpu_check/data/train_*.bin' \
            --val 'build/gpu_check/data/val_*.bin' --log-every 5 --eval-batches 1 --log-json "$log" "$@"; then
        # median step time of the steps after the first two
        local ms mem
        ms=$(grep '"type":"train"' "$log" | tail -n +3 | grep -o '"step_ms":[0-9.]*' | cut -d: -f2 | sort -n | awk '{a[NR]=$1} END{if(NR) print a[int((NR+1)/2)]}')
        mem=$(grep -o '"device_peak_bytes":[0-9]*' "$log" | tail -1 | cut -d: -f2)
        row "train $label" "$(awk -v ms="$ms" -v mem="$mem" -v tok="$TOK" 'BEGIN{printf "%.1f ms/step, %.0f tok/s, peak device %.0f MiB", ms, tok/(ms/1e3), mem/1048576}')"
    else
        row "train $label" "FAILED or timed out"
    fi
}
GPT124=(--layers 12 --heads 12 --embd 768 --vocab 50257 --seq-len 1024 --batch 8 --steps 8 --dropout 0.1)
TOK=$((8 * 1024))
for pol in none layer; do bench_train "124M_B8_T1024_p0.1_$pol" "${GPT124[@]}" --recompute "$pol"; done
SMALL=(--layers 4 --heads 4 --embd 256 --seq-len 256 --batch 8 --steps 20 --dropout 0.1)
TOK=$((8 * 256))
for pol in none layer; do bench_train "L4_C256_B8_T256_p0.1_$pol" "${SMALL[@]}" --recompute "$pol"; done

make --no-print-directory build/cuda/bench_attention_cuda > /dev/null 2>&1
if [ -x build/cuda/bench_attention_cuda ]; then
    for T in 1024 4096; do
        for p in 0 0.1; do
            line=$(step "attention T$T p$p" 60 build/cuda/bench_attention_cuda --B 8 --H 12 --T "$T" --D 64 --p "$p" | grep '^{' | tail -1)
            row "seedgpt attention B8 H12 T$T D64 p$p" "$(echo "$line" | grep -o '"ms":[0-9.]*\|"tflops":[0-9.]*' | tr '\n' ' ')"
        done
    done
else
    row "seedgpt attention bench" "not built (build/cuda/bench_attention_cuda)"
fi
if python3 -c 'import torch' 2>/dev/null; then
    out=$(step "torch sdpa" 120 python3 tools/torch_sdpa_bench.py 8,12,1024,64,0 8,12,1024,64,0.1 8,12,4096,64,0 8,12,4096,64,0.1)
    echo "$out" | grep '^{' | while read -r l; do
        row "torch sdpa $(echo "$l" | grep -o '"T": [0-9]*\|"p": [0-9.]*' | tr -d '" ' | tr '\n' ' ')" \
            "$(echo "$l" | grep -o '"ms": [0-9.]*\|"tflops": [0-9.]*' | tr -d '"' | tr '\n' ' ')"
    done
else
    row "torch sdpa" "skipped: python3 cannot import torch"
fi

say ""
say "==== seedgpt gpu_check summary"
while read -r l; do say "$l"; done < "$TABLE"
rm -f "$TABLE"
