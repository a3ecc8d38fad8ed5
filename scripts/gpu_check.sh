#!/usr/bin/env bash
# scripts/gpu_check.sh — one command for a machine with a GPU, the CUDA toolkit and python3 (and
# maybe nothing else: every system library is optional, `make config` says what is left out).
# Inside a fixed budget (GPU_CHECK_BUDGET seconds, default 480) it builds seedgpt with one job per
# core, then runs the correctness rows, then the benchmark rows, most telling first. Every step
# has a timeout cut to what is left of the budget, and a step that no longer fits is skipped with
# a row that says so, so the table is always printed. Everything goes to $OUT/gpu_check.txt and
# each table row to $OUT/gpu_check_table.txt as it happens (when OUT is set), so a run cut short
# still leaves what it saw.
#   correctness: cuBLAS conventions; the device Philox draws; the tensor-core mma wrapper, bf16
#     conversions, the tensor-core attention and the cuBLASLt bf16 GEMMs against float64 and the
#     CPU; the trainer's parity (cpu, cuda fp32, cuda bf16: every loss within 1e-2) and bf16
#     recompute layer == none; bf16 memory (a small run in fp32 and bf16: device peaks and the
#     layers' kept bytes, at most 0.55x in bf16); compute-sanitizer racecheck on a tiny attention;
#     make test-cuda. The sm_75 (Turing) code on this GPU: a CUDA_ARCHS=75 build, run with
#     CUDA_FORCE_PTX_JIT=1 so that the driver JIT-compiles its compute_75 PTX (fp16 mma, fp16 and
#     fp32 attention rows).
#   benchmarks: GPT-2 124M B16 T1024 dropout 0.1 in bf16 beside torch.compile (bf16 autocast, the
#     same dropout), attention fwd+bwd TFLOP/s beside torch's SDPA, then fp32, recompute layer,
#     a small model, the other attention shapes, and dev/cuda's micro-benchmarks.
#
#   scripts/gpu_check.sh             on the GPU machine (docs/cuda.md, "Running the GPU check")
#   scripts/gpu_check.sh --dry-run   here, without a GPU: the same steps and the same table through
#                                    the CUDA emulation (build/emu/), at tiny shapes, so the script
#                                    itself is tested before a lent GPU's minutes are spent on it
# GPU_CHECK_JOBS=N parallel build jobs (default nproc); GPU_CHECK_BUDGET=S seconds.
set -u
cd "$(dirname "$0")/.."
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
# A GPU run builds for that GPU alone (CUDA_ARCHS from nvidia-smi; the default, every target of
# `make cuda`, takes minutes more), in the build folder of that target set
if [ $DRY = 0 ] && [ -z "${CUDA_ARCHS:-}" ]; then
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
    [ -n "$cc" ] && export CUDA_ARCHS=$cc
fi
SG_CUDA_BUILD=$(make -s --no-print-directory cuda-build-dir 2>/dev/null || echo build/cuda)
T0=$(date +%s)
# (the emulation is slow: each step's own timeout is SCALE times longer in a dry run)
if [ $DRY = 1 ]; then BUDGET=${GPU_CHECK_BUDGET:-1500}; SCALE=3; else BUDGET=${GPU_CHECK_BUDGET:-480}; SCALE=1; fi
OUT=${OUT:-}
[ -n "$OUT" ] && mkdir -p "$OUT"
REPORT=${OUT:+$OUT/gpu_check.txt}
TABLE=${OUT:+$OUT/gpu_check_table.txt}
[ -z "$TABLE" ] && TABLE=$(mktemp)
: > "$TABLE"
[ -n "$REPORT" ] && : > "$REPORT"
say() { echo "$@"; [ -n "$REPORT" ] && echo "$@" >> "$REPORT"; }
row() { printf '%-48s %s\n' "$1" "$2" >> "$TABLE"; say "# $1: $2"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# step NAME SECONDS CMD...: CMD under a timeout of SECONDS, cut to the budget left (10 s kept for
# the table); status 124 when it timed out, 125 when it was skipped for want of time
step() {
    local name=$1 secs=$2; shift 2
    local l=$(( $(left) - 10 ))
    if [ "$l" -lt 5 ]; then
        say "== $name: skipped, the budget of ${BUDGET}s is spent"
        LAST_S=0; SKIPPED=1; return 125
    fi
    SKIPPED=0
    secs=$(( secs * SCALE ))
    [ "$secs" -gt "$l" ] && secs=$l
    say "== $name (timeout ${secs}s): $*"
    local t0=$(date +%s) rc
    if [ -n "$REPORT" ]; then
        timeout -k 5 "$secs" "$@" 2>&1 | tee -a "$REPORT"; rc=${PIPESTATUS[0]}
    else
        timeout -k 5 "$secs" "$@" 2>&1; rc=$?
    fi
    LAST_S=$(( $(date +%s) - t0 ))
    say "== $name: status $rc in ${LAST_S}s"
    return $rc
}
# verdict RC: the word a row gives a step's status
verdict() {
    case $1 in 0) echo ok ;; 124|137) echo "TIMED OUT" ;; 125) echo "skipped: budget spent" ;; *) echo "FAILED (status $1)" ;; esac
}
finish() {
    say ""
    say "==== seedgpt gpu_check summary ($( [ $DRY = 1 ] && echo 'DRY RUN in the CUDA emulation, tiny shapes: no GPU figure' || echo 'GPU' ), $(( $(date +%s) - T0 ))s of ${BUDGET}s)"
    while IFS= read -r l; do say "$l"; done < "$TABLE"
    [ -z "$OUT" ] && rm -f "$TABLE"
    exit 0
}

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
export PATH="$(dirname "$NVCC"):$PATH"
say "seedgpt gpu_check $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)') on $(hostname) at $(date -u +%FT%TZ), budget ${BUDGET}s$( [ $DRY = 1 ] && echo ', DRY RUN (emulation)')"
# what this build leaves out, first
make --no-print-directory config 2>&1 | while IFS= read -r l; do say "$l"; done
if [ $DRY = 1 ]; then
    say "gpu: none (dry run: kernels run on the CPU through cuda/emu/cuda_emu.h)"
else
    say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -2)"
fi
say "$("$NVCC" --version 2>&1 | tail -2 | tr '\n' ' ')"
# the python that imports torch, if any does (PyTorch's side of the benchmarks)
PY=python3
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import torch' >/dev/null 2>&1; then PY=$p; break; fi
done
HAVE_TORCH=0
"$PY" -c 'import torch' >/dev/null 2>&1 && HAVE_TORCH=1
say "cpu: $(nproc) cores; $PY: $($PY --version 2>&1), torch $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not importable')"
jobs=${GPU_CHECK_JOBS:-$(nproc)}
export OMP_WAIT_POLICY=passive

# ---- the two ways: a GPU, or the emulation standing in for it
if [ $DRY = 1 ]; then
    TRAINER=build/emu/train
    TESTS=build/emu/tests
    ATTN_BENCH=build/emu/bench_attention_cuda
    BUILD_TARGETS=(emu-test-bins build/emu/train build/emu/bench_attention_cuda)
    TEST_CUDA=test-cuda-emu-plain
    TORCH_DEV=cpu
    # tiny shapes: the emulation runs every GPU thread as a CPU thread
    GPT124=(--layers 2 --heads 2 --embd 64 --vocab 257 --seq-len 64 --batch 2 --steps 4 --dropout 0.1)
    TORCH124="L=2,H=2,C=64,V=257,maxT=64,B=2,T=64,p=0.1"; TOK124=$((2 * 64))
    SMALL=(--layers 2 --heads 2 --embd 64 --seq-len 64 --batch 2 --steps 4 --dropout 0.1); TOKS=$((2 * 64))
    ATT_B=1; ATT_C=128; ATT_T="128 256"; ATT_ITERS=1
    PARITY_SHAPE=(--embd 128 --seq-len 32 --batch 2 --steps 6)
    MEM_SHAPE=(--layers 2 --heads 1 --embd 64 --seq-len 32 --batch 2 --steps 2); MEM_DESC="L2 C64 B2 T32"
else
    TRAINER=./train_cuda
    TESTS=$SG_CUDA_BUILD/tests
    ATTN_BENCH=$SG_CUDA_BUILD/bench_attention_cuda
    BUILD_TARGETS=(cuda cuda-test-bins dev-cuda)
    TEST_CUDA=test-cuda
    TORCH_DEV=cuda
    GPT124=(--layers 12 --heads 12 --embd 768 --vocab 50257 --seq-len 1024 --batch 16 --steps 8 --dropout 0.1)
    TORCH124="L=12,H=12,C=768,V=50257,maxT=1024,B=16,T=1024,p=0.1"; TOK124=$((16 * 1024))
    SMALL=(--layers 4 --heads 4 --embd 256 --seq-len 256 --batch 8 --steps 20 --dropout 0.1); TOKS=$((8 * 256))
    ATT_B=8; ATT_C=768; ATT_T="1024 4096"; ATT_ITERS=
    PARITY_SHAPE=(--embd 128 --seq-len 128 --batch 4 --steps 20)
    MEM_SHAPE=(--layers 4 --heads 4 --embd 256 --seq-len 256 --batch 8 --steps 3); MEM_DESC="L4 C256 B8 T256"
fi

# ---- build
step build 300 make -j"$jobs" --no-print-directory "${BUILD_TARGETS[@]}"
rc=$?
if [ $rc -ne 0 ]; then row "build (make ${BUILD_TARGETS[*]})" "$(verdict $rc) (see the report)"; finish; fi
row "build" "ok in ${LAST_S}s"
say "trainer: $($TRAINER --version 2>&1 | tr '\n' ' ')"

# ---- correctness: each test binary, a row each; a failure is a row, never the end of the check
TBIN_ENV=()   # a prefix for the binary (env VAR=...), empty but for the compute_75 PTX rows
tbin() {  # LABEL BINARY SECONDS [NOTE]: a FAILED row carries the count and the first failure
    local out rc
    out=$(step "$1" "$3" "${TBIN_ENV[@]}" "$TESTS/$2"); rc=$?
    echo "$out"
    local counts=$(echo "$out" | grep -o '^# [0-9]* passed, [0-9]* failed.*' | tail -1)
    if [ $rc -eq 0 ]; then
        row "$1" "ok ${counts#\# }"
    else
        row "$1" "$(verdict $rc) ${counts#\# } ${4:-}; first: $(echo "$out" | grep -m1 '^FAIL' | head -c 300)"
    fi
}
tbin "cublas conventions" test_cublas 60
tbin "philox on the device == host" test_cuda_philox 30
tbin "mma.sync bf16 wrapper" test_cuda_mma 60 "(the bound assumes an accumulation order Hopper does not document: read the measured error above)"
tbin "bf16 conversions" test_cuda_bf16 60
tbin "tensor-core attention vs CPU" test_cuda_flash_tc 120
tbin "cuBLASLt bf16 GEMMs" test_cuda_lt 60
tbin "bf16 storage ops vs CPU bf16" test_cuda_bf16_ops 60
tbin "fp16 storage ops vs CPU fp16" test_cuda_fp16_ops 60
tbin "fp16 tensor-core attention (sm_75 kernels)" test_cuda_flash_f16 120
tbin "shared memory bounds (LEAN attention)" test_cuda_smem 120

# The Turing code on this GPU: CUDA_ARCHS=75 builds sm_75 SASS, which a newer GPU cannot run, and
# compute_75 PTX, which its driver compiles at load; CUDA_FORCE_PTX_JIT=1 makes the driver take the
# PTX even where SASS would run. So the sm_75 kernels (the fp16 mma, the fp16 attention, the fp32
# attention) run on this GPU's hardware: their correctness on a real chip, not a T4's speed.
if [ $DRY = 1 ]; then
    row "compute_75 PTX on this GPU" "skipped: dry run (the emulation runs the sm_75 tests at SG_EMU_CC=75)"
else
    P75=$(make -s --no-print-directory CUDA_ARCHS=75 cuda-build-dir 2>/dev/null || echo build/cuda-sm75)
    step "build compute_75 PTX" 240 make -j"$jobs" --no-print-directory CUDA_ARCHS=75 \
        "$P75/tests/test_cuda_mma_f16" "$P75/tests/test_cuda_flash_f16" "$P75/tests/test_cuda_attention"
    rc=$?
    if [ $rc -ne 0 ]; then
        row "compute_75 PTX on this GPU" "$(verdict $rc): the CUDA_ARCHS=75 build (see the report)"
    else
        TESTS_GPU=$TESTS; TESTS=$P75/tests; TBIN_ENV=(env CUDA_FORCE_PTX_JIT=1)
        tbin "compute_75 PTX: fp16 mma m16n8k8" test_cuda_mma_f16 60
        tbin "compute_75 PTX: fp16 tensor-core attention" test_cuda_flash_f16 180
        tbin "compute_75 PTX: fp32 attention" test_cuda_attention 180
        TESTS=$TESTS_GPU; TBIN_ENV=()
    fi
fi

# the trainer's parity: the same run on the CPU, CUDA fp32 and CUDA bf16 (head dim 64), and CUDA
# fp16 against the CPU fp16 table
mkdir -p build/gpu_check
if [ ! -f build/gpu_check/data/train_000000.bin ]; then
    cat README.md docs/*.md model/*.c cpu/*.c attention/*.c train.c > build/gpu_check/text.txt
    $TRAINER prepare build/gpu_check/text.txt build/gpu_check/data > /dev/null 2>&1
fi
PARITY=(--train 'build/gpu_check/data/train_*.bin' --layers 2 --heads 2 "${PARITY_SHAPE[@]}"
        --lr 1e-3 --dropout 0.1 --log-every 0 --seed 11)
plosses() { grep -o '"type":"train","step":[0-9]*,"loss":[^,}]*' "$1" 2>/dev/null | sed 's/.*"loss"://'; }
# worst relative difference of two runs' losses; fails unless both have every step
pworst() { paste <(plosses "$1") <(plosses "$2") | awk -v want="$3" 'BEGIN{w=0;n=0;bad=0} {n++; if ($1 == "" || $2 == "") {bad=1; next} d=($1-$2)/$2; if(d<0)d=-d; if(d>w)w=d} END{printf "%d losses, worst rel diff %.2e", n, w; exit !(n == want && !bad && w <= 1e-2)}'; }
declare -A PRC
for v in "cpu --device cpu" "fp32 --device cuda" "bf16 --device cuda --precision bf16" \
         "bf16_layer --device cuda --precision bf16 --recompute layer" \
         "cpu_fp16 --device cpu --precision fp16" "fp16 --device cuda --precision fp16"; do
    set -- $v; name=$1; shift
    rm -f "build/gpu_check/parity_$name.jsonl"
    step "parity $name" 90 $TRAINER "${PARITY[@]}" "$@" --log-json "build/gpu_check/parity_$name.jsonl" > /dev/null
    PRC[$name]=$?
done
NSTEPS=${PARITY_SHAPE[7]}
parity_row() {  # LABEL RUN REF
    local w
    if [ "${PRC[$2]}" -ne 0 ] || [ "${PRC[$3]}" -ne 0 ]; then
        row "$1" "FAILED: the $2 run $(verdict "${PRC[$2]}"), the $3 run $(verdict "${PRC[$3]}")"
    elif w=$(pworst "build/gpu_check/parity_$2.jsonl" "build/gpu_check/parity_$3.jsonl" "$NSTEPS"); then
        row "$1" "ok: $w"
    else
        row "$1" "FAILED: $w"
    fi
}
parity_row "bf16 parity: cuda bf16 vs cpu" bf16 cpu
parity_row "fp32 parity: cuda fp32 vs cpu" fp32 cpu
parity_row "fp16 parity: cuda fp16 vs cpu fp16" fp16 cpu_fp16
if [ "${PRC[bf16]}" -ne 0 ] || [ "${PRC[bf16_layer]}" -ne 0 ]; then
    row "bf16 recompute layer == none" "FAILED: the runs $(verdict "${PRC[bf16]}"), $(verdict "${PRC[bf16_layer]}")"
elif [ "$(plosses build/gpu_check/parity_bf16.jsonl | wc -l)" = "$NSTEPS" ] && \
     diff <(plosses build/gpu_check/parity_bf16.jsonl) <(plosses build/gpu_check/parity_bf16_layer.jsonl) > /dev/null; then
    row "bf16 recompute layer == none" "ok: $NSTEPS losses identical"
else
    row "bf16 recompute layer == none" "DIFFERS: $(diff <(plosses build/gpu_check/parity_bf16.jsonl) <(plosses build/gpu_check/parity_bf16_layer.jsonl) | head -2 | tr '\n' ' ')"
fi

# bf16 memory: the same small run in fp32 and in bf16 on the device; each run's counted device
# peak (its last step row) and the layers' kept activation bytes of its plan (./train plan, which
# test_cross_backend holds to the counted peak), and the bf16/fp32 ratios. bf16 stores the operand
# activations in bf16: the layers' bytes must come to at most 0.55x; the peak also holds the
# weights' bf16 copy and cuBLASLt's 32 MiB workspace, so at a small shape it may not shrink.
declare -A MRC MPEAK MLAYER MPLAN
for prec in fp32 bf16; do
    log=build/gpu_check/memory_$prec.jsonl
    rm -f "$log"
    step "memory $prec" 60 $TRAINER --device cuda --precision "$prec" --train 'build/gpu_check/data/train_*.bin' \
        "${MEM_SHAPE[@]}" --dropout 0.1 --eval-every 0 --log-every 0 --seed 11 --log-json "$log" > /dev/null
    MRC[$prec]=$?
    MPEAK[$prec]=$(grep '"type":"train"' "$log" 2>/dev/null | tail -1 | grep -o '"device_peak_bytes":[0-9]*' | cut -d: -f2)
    pl=$($TRAINER plan --device cuda --precision "$prec" --train 'build/gpu_check/data/train_*.bin' "${MEM_SHAPE[@]}" \
         --dropout 0.1 --eval-every 0 --format json 2>/dev/null | grep '"policy":"none"')
    MLAYER[$prec]=$(echo "$pl" | grep -o '"layer_activation_bytes":[0-9]*' | cut -d: -f2)
    MPLAN[$prec]=$(echo "$pl" | grep -o '"peak_bytes":[0-9]*' | cut -d: -f2)
done
if [ "${MRC[fp32]}" -ne 0 ] || [ "${MRC[bf16]}" -ne 0 ] || [ -z "${MPEAK[fp32]}" ] || [ -z "${MPEAK[bf16]}" ] ||
   [ -z "${MLAYER[fp32]}" ] || [ -z "${MLAYER[bf16]}" ]; then
    row "bf16 memory ($MEM_DESC)" "FAILED: the fp32 run $(verdict "${MRC[fp32]}"), the bf16 run $(verdict "${MRC[bf16]}"); peaks '${MPEAK[fp32]}' '${MPEAK[bf16]}', layers '${MLAYER[fp32]}' '${MLAYER[bf16]}'"
else
    mrow=$(awk -v lf="${MLAYER[fp32]}" -v lb="${MLAYER[bf16]}" -v pf="${MPEAK[fp32]}" -v pb="${MPEAK[bf16]}" \
        'BEGIN{printf "layers kept fp32 %d B, bf16 %d B: %.3fx; device peak fp32 %d B, bf16 %d B: %.3fx", lf, lb, lb/lf, pf, pb, pb/pf}')
    same="planned peaks = counted"
    [ "${MPLAN[fp32]}" = "${MPEAK[fp32]}" ] && [ "${MPLAN[bf16]}" = "${MPEAK[bf16]}" ] || same="planned peaks ${MPLAN[fp32]}, ${MPLAN[bf16]} B DIFFER from the counted"
    if awk -v lf="${MLAYER[fp32]}" -v lb="${MLAYER[bf16]}" 'BEGIN{exit !(lb <= 0.55 * lf)}'; then
        row "bf16 memory ($MEM_DESC)" "ok: $mrow; $same"
    else
        row "bf16 memory ($MEM_DESC)" "FAILED (layers above 0.55x): $mrow; $same"
    fi
fi

# racecheck on a tiny attention case
CS=$(command -v compute-sanitizer || echo "$(dirname "$NVCC")/compute-sanitizer")
if [ $DRY = 1 ]; then
    row "racecheck (tiny attention)" "skipped: dry run (make test-cuda-emu-tsan is the emulation's race check)"
elif [ -x "$CS" ]; then
    step racecheck 90 env SEEDGPT_TINY=1 "$CS" --tool racecheck --error-exitcode 9 "$TESTS/test_cuda_attention"
    rc=$?; [ $rc -eq 0 ] && row "racecheck (tiny attention)" "clean" || row "racecheck (tiny attention)" "$(verdict $rc)"
else
    row "racecheck (tiny attention)" "skipped: compute-sanitizer not found"
fi

# every CUDA test against its CPU twin
step "make $TEST_CUDA" 150 make --no-print-directory "$TEST_CUDA"
rc=$?
summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "${REPORT:-/dev/null}" 2>/dev/null | tail -1)
[ $rc -eq 0 ] && row "make $TEST_CUDA" "${summary:-ok}" || row "make $TEST_CUDA" "$(verdict $rc) ${summary}"

# ---- benchmarks
bench_train() {  # LABEL TOKENS ARGS...
    local label=$1 tok=$2; shift 2
    local log=build/gpu_check/$label.jsonl
    rm -f "$log"
    ms_last=""
    step "bench $label" 90 $TRAINER --device cuda --train 'build/gpu_check/data/train_*.bin' \
        --val 'build/gpu_check/data/val_*.bin' --log-every 1 --eval-batches 1 --log-json "$log" "$@"
    local rc=$?
    if [ $rc -eq 0 ]; then
        # median step time of the steps after the first two
        local ms mem
        ms=$(grep '"type":"train"' "$log" | tail -n +3 | grep -o '"step_ms":[0-9.]*' | cut -d: -f2 | sort -n | awk '{a[NR]=$1} END{if(NR) print a[int((NR+1)/2)]}')
        mem=$(grep -o '"device_peak_bytes":[0-9]*' "$log" | tail -1 | cut -d: -f2)
        row "train $label" "$(awk -v ms="$ms" -v mem="$mem" -v tok="$tok" 'BEGIN{if (ms > 0) printf "%.1f ms/step, %.0f tok/s, peak device %.0f MiB", ms, tok/(ms/1e3), mem/1048576; else print "no step time in the log"}')"
        ms_last=$ms
    else
        row "train $label" "$(verdict $rc)"
    fi
}
torch_row() {  # LABEL TOKENS ROWSPEC ARGS...
    local label=$1 tok=$2 spec=$3; shift 3
    ms_last=""
    if [ $HAVE_TORCH = 0 ]; then row "torch $label" "skipped: no python here imports torch"; return; fi
    local out note=""
    # (the dry run's PyTorch is the CPU's: fp32, not compiled; it checks the row, not the figure)
    if [ $DRY = 1 ]; then set --; note=" (dry run: torch on the CPU, fp32)"; fi
    out=$(step "torch $label" 150 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" tools/torch_bench.py --device "$TORCH_DEV" --warmup 2 --steps 4 --row "$spec" "$@")
    local rc=$? l=$(echo "$out" | grep '^TORCH_ROW' | tail -1)
    if [ -n "$l" ]; then
        set -- $l
        ms_last=$2
        row "torch $label" "$(awk -v ms="$2" -v mem="$8" -v tok="$tok" 'BEGIN{printf "%.1f ms/step, %.0f tok/s, peak %.0f MiB", ms, tok/(ms/1e3), mem/1048576}')$note"
    else
        row "torch $label" "$(echo "$out" | grep -m1 'TORCH_SKIP' || verdict $rc)"
    fi
}
ratio_row() {  # LABEL SEEDGPT_MS TORCH_MS
    if [ -n "$2" ] && [ -n "$3" ]; then
        local note=""
        [ $DRY = 1 ] && note=" (dry run: the emulation against torch on the CPU, not a figure)"
        row "$1" "$(awk -v a="$2" -v b="$3" 'BEGIN{printf "%.3gx the tokens/s (target 1.1x)", b/a}')$note"
    else
        row "$1" "no ratio: a side did not run"
    fi
}
attn_row() {  # PREC D T P
    local prec=$1 D=$2 T=$3 p=$4 H=$((ATT_C / $2))
    local out line res
    out=$(step "attention $prec T$T D$D p$p" 60 "$ATTN_BENCH" --precision "$prec" --B "$ATT_B" --H "$H" --T "$T" --D "$D" --p "$p" ${ATT_ITERS:+--iters $ATT_ITERS})
    local rc=$?
    line=$(echo "$out" | grep '^{' | tail -1)
    res=$(echo "$line" | grep -o '"ms":[0-9.]*\|"tflops":[0-9.]*' | tr '\n' ' ')
    row "seedgpt attention $prec B$ATT_B H$H T$T D$D p$p" "${res:-$(verdict $rc)}"
}
sdpa_rows() {  # SHAPE...: torch's SDPA (fused flash) at the same shapes, B,H,T,D,p,dtype
    if [ $HAVE_TORCH = 0 ]; then row "torch sdpa" "skipped: no python here imports torch"; return; fi
    local out
    out=$(step "torch sdpa" 90 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" tools/torch_sdpa_bench.py "$@")
    local rc=$? n=0
    while read -r l; do
        n=$((n + 1))
        row "torch sdpa $(echo "$l" | grep -o '"dtype": "[a-z0-9]*"\|"T": [0-9]*\|"D": [0-9]*\|"p": [0-9.]*' | tr -d '" ' | tr '\n' ' ')" \
            "$(echo "$l" | grep -o '"ms": [0-9.]*\|"tflops": [0-9.]*' | tr -d '"' | tr '\n' ' ')"
    done < <(echo "$out" | grep '^{')
    [ $n -eq 0 ] && row "torch sdpa" "$(echo "$out" | grep -m1 'skipped' || verdict $rc)"
}

# the headline first: 124M bf16 beside torch.compile bf16
bench_train "124M_B16_T1024_p0.1_bf16_none" $TOK124 "${GPT124[@]}" --precision bf16 --recompute none
S_NONE=$ms_last
torch_row "124M_B16_T1024_p0.1_bf16_compile_none" $TOK124 "$TORCH124,recompute=none" --precision bf16 --compile
ratio_row "seedgpt bf16 vs torch.compile bf16, none" "$S_NONE" "$ms_last"
# attention at the trainer's head dim with dropout, beside SDPA
set -- $ATT_T; TA=$1; TB=${2:-$1}
attn_row bf16 64 "$TA" 0.1
attn_row bf16 64 "$TB" 0.1
sdpa_rows "$ATT_B,$((ATT_C / 64)),$TA,64,0.1,bf16" "$ATT_B,$((ATT_C / 64)),$TB,64,0.1,bf16" \
          "$ATT_B,$((ATT_C / 64)),$TA,64,0,bf16" "$ATT_B,$((ATT_C / 128)),$TA,128,0.1,bf16"
# then the rest
bench_train "124M_B16_T1024_p0.1_bf16_layer" $TOK124 "${GPT124[@]}" --precision bf16 --recompute layer
S_LAYER=$ms_last
torch_row "124M_B16_T1024_p0.1_bf16_compile_layer" $TOK124 "$TORCH124,recompute=layer" --precision bf16 --compile
ratio_row "seedgpt bf16 vs torch.compile bf16, layer" "$S_LAYER" "$ms_last"
bench_train "124M_B16_T1024_p0.1_fp32_none" $TOK124 "${GPT124[@]}" --precision fp32 --recompute none
attn_row bf16 64 "$TA" 0
attn_row bf16 128 "$TA" 0.1
attn_row fp32 64 "$TA" 0.1
for pol in none layer; do bench_train "L4_C256_B8_T256_p0.1_$pol" $TOKS "${SMALL[@]}" --recompute "$pol"; done
bench_train "L4_C256_B8_T256_p0.1_bf16_none" $TOKS "${SMALL[@]}" --precision bf16

# dev/cuda: per-op kernel variants (validated and timed on a GPU; validated only in the dry run)
if [ $DRY = 1 ]; then
    step "dev/cuda validation (emulated)" 120 make --no-print-directory dev-cuda-emu
    rc=$?; row "dev/cuda variants" "$(verdict $rc) (validated in the emulation; timing needs a GPU)"
else
    step "dev/cuda micro-benchmarks" 120 scripts/dev_cuda_bench.sh
    rc=$?; row "dev/cuda micro-benchmarks" "$(verdict $rc) (tables above, in the report)"
fi
finish
