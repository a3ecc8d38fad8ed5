#!/usr/bin/env bash
# scripts/gpu_check.sh — one command for a machine with a GPU, the CUDA toolkit and python3 (and
# maybe nothing else): prints the driver and nvcc versions, builds seedgpt there, then runs the
# most telling checks first, each under its own timeout, appending everything to $OUT/gpu_check.txt
# (when OUT is set) as it goes, so a run cut short still leaves what it saw:
#   1. the cuBLAS call conventions against a float64 host loop (tests/cuda/test_cublas.cu);
#   1b. the tensor-core wrapper (mma.sync m16n8k16 bf16) and the bf16 conversions, real vs float64,
#      the tensor-core attention (attention/flash_tc.cu) against the CPU attention, and the
#      cuBLASLt bf16 GEMMs (model/ops_bf16_cuda.cu) against float64;
#   1c. bf16 parity of the trainer: the same run on --device cpu, cuda fp32 and cuda bf16, every
#      loss within 1e-2 relative (masks are the same bits), and bf16 recompute layer == none;
#   2. compute-sanitizer racecheck on a tiny attention case;
#   3. make test-cuda: every op against its CPU twin, the whole step, recompute policies, the
#      trainer on both backends;
#   4. a short benchmark: GPT-2 124M (B16 T1024, dropout 0.1) in fp32 and bf16 and a small model,
#      ms/step, tokens/s and peak device memory per recompute policy, with PyTorch beside it
#      (torch.compile + scaled_dot_product_attention, bf16 autocast, the same dropout) when torch
#      imports; attention fwd+bwd TFLOP/s at T = 1024 and 4096, head dims 64 and 128, with and
#      without dropout, fp32 and bf16, and torch's SDPA at the same shapes; then the per-op
#      micro-benchmarks of dev/cuda (scripts/dev_cuda_bench.sh).
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
# the python that imports torch, if any does (PyTorch's side of the benchmarks)
PY=python3
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import torch' >/dev/null 2>&1; then PY=$p; break; fi
done
say "cpu: $(nproc) cores; $PY: $($PY --version 2>&1), torch $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not importable')"
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
# A failing check is a FAIL row with its count and the first failure's own message, and the script
# goes on. test_cuda_mma's bound assumes an fp32 accumulation order that NVIDIA does not document
# for the tensor cores, so its messages print the measured ratio and what it looks like.
mkdir -p build/gpu_check
# test_row NAME LOG STATUS: the table's row for a test binary that wrote LOG and exited with STATUS
test_row() {
    local name=$1 log=$2 rc=$3 np nf first
    np=$(grep -c '^ok ' "$log"); nf=$(grep -c '^FAIL ' "$log")
    if [ "$rc" -eq 0 ] && [ "$nf" -eq 0 ]; then
        row "$name" "ok: $np checks"
    elif [ "$nf" -gt 0 ]; then
        first=$(grep -m1 '^FAIL ' "$log" | cut -c6- | cut -c1-500)
        row "$name" "FAIL: $nf of $((np + nf)) checks; first: $first"
    else
        row "$name" "FAIL: exit $rc after $np passing checks and no failed one (crash or timeout; see the report)"
    fi
}
for t in test_cuda_mma test_cuda_bf16 test_cuda_flash_tc test_cuda_lt; do
    step "$t" 60 "build/cuda/tests/$t" | tee "build/gpu_check/$t.log"
    test_row "$t" "build/gpu_check/$t.log" "${PIPESTATUS[0]}"
done

# ---- 1c. bf16 parity of the whole trainer (head dim 64: the tensor-core attention's shape)
if [ ! -f build/gpu_check/data/train_000000.bin ]; then
    cat README.md docs/*.md model/*.c attention/*.c train.c > build/gpu_check/text.txt
    ./train_cuda prepare build/gpu_check/text.txt build/gpu_check/data > /dev/null 2>&1
fi
PARITY=(--train 'build/gpu_check/data/train_*.bin' --layers 2 --heads 2 --embd 128 --seq-len 128
        --batch 4 --steps 20 --lr 1e-3 --dropout 0.1 --log-every 0 --seed 11)
plosses() { grep -o '"type":"train","step":[0-9]*,"loss":[^,}]*' "$1" | sed 's/.*"loss"://'; }
pworst() { paste <(plosses "$1") <(plosses "$2") | awk 'BEGIN{w=0;n=0} {n++; d=($1-$2)/$2; if(d<0)d=-d; if(d>w)w=d} END{printf "%d losses, worst rel diff %.2e", n, w; exit !(n > 0 && w <= 1e-2)}'; }
for v in "cpu --device cpu" "fp32 --device cuda" "bf16 --device cuda --precision bf16" \
         "bf16_layer --device cuda --precision bf16 --recompute layer"; do
    set -- $v; name=$1; shift
    step "parity $name" 60 ./train_cuda "${PARITY[@]}" "$@" --log-json "build/gpu_check/parity_$name.jsonl" > /dev/null
done
if w=$(pworst build/gpu_check/parity_bf16.jsonl build/gpu_check/parity_cpu.jsonl); then
    row "bf16 parity: cuda bf16 vs cpu" "ok: $w"
else
    row "bf16 parity: cuda bf16 vs cpu" "FAILED: $w"
fi
if w=$(pworst build/gpu_check/parity_fp32.jsonl build/gpu_check/parity_cpu.jsonl); then
    row "fp32 parity: cuda fp32 vs cpu" "ok: $w"
else
    row "fp32 parity: cuda fp32 vs cpu" "FAILED: $w"
fi
if [ -s build/gpu_check/parity_bf16.jsonl ] && diff <(plosses build/gpu_check/parity_bf16.jsonl) <(plosses build/gpu_check/parity_bf16_layer.jsonl) > /dev/null; then
    row "bf16 recompute layer == none" "ok: $(plosses build/gpu_check/parity_bf16.jsonl | wc -l) losses identical"
else
    row "bf16 recompute layer == none" "DIFFERS (or a run failed)"
fi

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
        ms_last=$ms
    else
        row "train $label" "FAILED or timed out"
        ms_last=""
    fi
}
GPT124=(--layers 12 --heads 12 --embd 768 --vocab 50257 --seq-len 1024 --batch 16 --steps 8 --dropout 0.1)
TOK=$((16 * 1024))
for prec in bf16 fp32; do
    for pol in none layer; do
        bench_train "124M_B16_T1024_p0.1_${prec}_$pol" "${GPT124[@]}" --precision "$prec" --recompute "$pol"
        eval "MS_${prec}_$pol=\$ms_last"
    done
done
# PyTorch on the same GPU: the same model and step (tools/torch_bench.py), torch.compile + SDPA
torch_row() {  # LABEL ROWSPEC ARGS...
    local label=$1 spec=$2; shift 2
    local out
    out=$(step "torch $label" 240 "$PY" tools/torch_bench.py --device cuda --warmup 3 --steps 5 --row "$spec" "$@")
    local l=$(echo "$out" | grep '^TORCH_ROW' | tail -1)
    if [ -n "$l" ]; then
        set -- $l
        ms_last=$2
        row "torch $label" "$(awk -v ms="$2" -v mem="$8" -v tok="$TOK" 'BEGIN{printf "%.1f ms/step, %.0f tok/s, peak device %.0f MiB", ms, tok/(ms/1e3), mem/1048576}')"
    else
        ms_last=""
        row "torch $label" "$(echo "$out" | grep -m1 'TORCH_SKIP\|Error' || echo 'FAILED or timed out')"
    fi
}
if "$PY" -c 'import torch' 2>/dev/null; then
    for pol in none layer; do
        torch_row "124M_B16_T1024_p0.1_bf16_compile_$pol" "L=12,H=12,C=768,V=50257,maxT=1024,B=16,T=1024,p=0.1,recompute=$pol" --precision bf16 --compile
        t=$ms_last
        eval "s=\$MS_bf16_$pol"
        if [ -n "$t" ] && [ -n "$s" ]; then
            row "seedgpt bf16 vs torch.compile bf16, $pol" "$(awk -v a="$s" -v b="$t" 'BEGIN{printf "%.2fx the tokens/s (target 1.1x)", b/a}')"
        fi
    done
else
    row "torch 124M" "skipped: no python here imports torch"
fi
SMALL=(--layers 4 --heads 4 --embd 256 --seq-len 256 --batch 8 --steps 20 --dropout 0.1)
TOK=$((8 * 256))
for pol in none layer; do bench_train "L4_C256_B8_T256_p0.1_$pol" "${SMALL[@]}" --recompute "$pol"; done
bench_train "L4_C256_B8_T256_p0.1_bf16_none" "${SMALL[@]}" --precision bf16

make --no-print-directory build/cuda/bench_attention_cuda > /dev/null 2>&1
if [ -x build/cuda/bench_attention_cuda ]; then
    for prec in bf16 fp32; do
        for D in 64 128; do
            H=$((768 / D))
            for T in 1024 4096; do
                for p in 0 0.1; do
                    [ "$prec" = fp32 ] && [ "$D" = 128 ] && continue
                    line=$(step "attention $prec T$T D$D p$p" 60 build/cuda/bench_attention_cuda --precision "$prec" --B 8 --H "$H" --T "$T" --D "$D" --p "$p" | grep '^{' | tail -1)
                    res=$(echo "$line" | grep -o '"ms":[0-9.]*\|"tflops":[0-9.]*' | tr '\n' ' ')
                    row "seedgpt attention $prec B8 H$H T$T D$D p$p" "${res:-FAILED (see the report)}"
                done
            done
        done
    done
else
    row "seedgpt attention bench" "not built (build/cuda/bench_attention_cuda)"
fi
if "$PY" -c 'import torch' 2>/dev/null; then
    shapes=""
    for D in 64 128; do for T in 1024 4096; do for p in 0 0.1; do
        shapes="$shapes 8,$((768 / D)),$T,$D,$p,bf16"
    done; done; done
    out=$(step "torch sdpa" 120 "$PY" tools/torch_sdpa_bench.py $shapes 8,12,1024,64,0.1,fp32 8,12,4096,64,0.1,fp32)
    echo "$out" | grep '^{' | while read -r l; do
        row "torch sdpa $(echo "$l" | grep -o '"dtype": "[a-z0-9]*"\|"T": [0-9]*\|"D": [0-9]*\|"p": [0-9.]*' | tr -d '" ' | tr '\n' ' ')" \
            "$(echo "$l" | grep -o '"ms": [0-9.]*\|"tflops": [0-9.]*' | tr -d '"' | tr '\n' ' ')"
    done
else
    row "torch sdpa" "skipped: no python here imports torch"
fi

if [ -x scripts/dev_cuda_bench.sh ]; then
    if step "dev/cuda micro-benchmarks" 120 scripts/dev_cuda_bench.sh; then
        row "dev/cuda micro-benchmarks" "ok (tables above, in the report)"
    else
        row "dev/cuda micro-benchmarks" "FAILED or timed out"
    fi
fi

say ""
say "==== seedgpt gpu_check summary"
while read -r l; do say "$l"; done < "$TABLE"
rm -f "$TABLE"
