#!/usr/bin/env bash
# scripts/dev_cuda_bench.sh — on a machine with a GPU: builds dev/cuda (make dev-cuda) and runs
# every program at GPT-2 124M's shapes, each variant validated against its CPU reference and then
# timed (dev/cuda/README.md). Prints each program's output, then one compact table of every timed
# variant and the count of validation lines. Sized for a few minutes after the build on one
# H100/H200 with 16 cores (the CPU references run there too); not yet timed on one.
#   scripts/dev_cuda_bench.sh           (DEV_CUDA_JOBS=N parallel build jobs, default nproc;
#                                        DEV_CUDA_REPS=N timed launches per variant, default 20)
# Exit status: 0 when everything built, ran and validated; 1 otherwise.
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
jobs=${DEV_CUDA_JOBS:-$(nproc)}
reps=${DEV_CUDA_REPS:-20}
bin=build/dev_cuda
mkdir -p build
log=build/dev_cuda_bench.log
: > "$log"

start=$(date +%s)
if ! make -j"$jobs" --no-print-directory NVCC="$NVCC" dev-cuda > build/dev_cuda_build.log 2>&1; then
    echo "FAIL dev_cuda_build: $(grep -m3 -E 'error|Error' build/dev_cuda_build.log | tr '\n' ' ' | head -c 600)"
    exit 1
fi
echo "dev/cuda built in $(( $(date +%s) - start )) s"

status=0
# run SECONDS PROGRAM ARGS...: one program, its output to the screen and the log
run() {
    local secs=$1; shift
    echo "== $* (timeout ${secs}s)"
    timeout "$secs" "$bin/$@" --reps "$reps" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "== $1: status $rc"; status=1; }
}

start=$(date +%s)
# B16 T1024 C768: the residual stream of GPT-2 124M at batch 16; C 3072 its MLP's hidden width
run 30 layernorm_forward --B 16 --T 1024 --C 768
run 30 residual_dropout_forward --B 16 --T 1024 --C 768
run 30 gelu_forward --B 16 --T 1024 --C 3072
# the loss over GPT-2's vocabulary (padded to 50304) at batch 8
run 60 crossentropy_forward --B 8 --T 1024 --V 50257 --Vp 50304
# the qkv projection (768 -> 2304), the attention's output projection (768 -> 768) and the MLP's
# first linear (768 -> 3072); every variant at the first, fp32 / TF32 / bf16 cuBLAS at the others
run 60 matmul_forward --B 16 --T 1024 --C 768 --OC 2304
for oc in 768 3072; do
    for v in 3 4 5; do run 60 matmul_forward $v --B 16 --T 1024 --C 768 --OC $oc; done
done
# 12 heads of 64; the same tokens at T 4096; 6 heads of 128
run 60 attention_forward --B 16 --T 1024 --NH 12 --HD 64
run 90 attention_forward --B 4 --T 4096 --NH 12 --HD 64
run 60 attention_forward --B 16 --T 1024 --NH 6 --HD 128
# the backward at the same three shapes (its CPU reference and tolerance sums are the slow part)
run 120 attention_backward --B 16 --T 1024 --NH 12 --HD 64
run 180 attention_backward --B 4 --T 4096 --NH 12 --HD 64
run 120 attention_backward --B 16 --T 1024 --NH 6 --HD 128
secs=$(( $(date +%s) - start ))

echo
echo "dev/cuda on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $reps reps, ${secs} s"
printf '%-26s %-26s %-3s %-42s %10s %10s\n' op shape v variant ms rate
# the JSON lines: {"bench":"dev_cuda","op":..,"variant":..,"name":..,"shape":..,"ms":..,"gbps"|"tflops":..}
grep '^{"bench":"dev_cuda"' "$log" | sed -E \
    's/.*"op":"([^"]*)","variant":([0-9]+),"name":"([^"]*)","shape":"([^"]*)","ms":([0-9.]+),"(gbps|tflops)":([0-9.]+).*/\1\t\4\t\2\t\3\t\5\t\7\t\6/' |
    awk -F'\t' '{ printf "%-26s %-26s v%-2s %-42s %10.4f %7.2f %s\n", $1, $2, $3, $4, $5, $6, ($7 == "gbps" ? "GB/s" : "TFLOP/s") }'
ok=$(grep -c '^ok ' "$log"); fail=$(grep -c '^FAIL ' "$log")
echo "validation: $ok ok, $fail FAIL"
[ "$fail" -eq 0 ] || status=1
exit $status
