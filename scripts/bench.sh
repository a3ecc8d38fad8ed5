#!/usr/bin/env bash
# scripts/bench.sh — `make bench`: speed and memory, side by side with PyTorch (not a test: nothing
# is asserted).
#
# Builds build/bench_model and build/bench_attention and runs:
#   1. the whole-step benchmark (tests/bench_model.c): GPT-2 124M (B4 T64), a small byte-level L4
#      model (B8 T256; dropout 0, 0.1, 0.1 with recompute=layer) and the recompute policies of an
#      L8 model, each row in fresh processes; when a python3 can import torch, every row also runs
#      through tools/torch_bench.py (the same model and step in PyTorch), its processes
#      alternating with seedgpt's, and the table gets PyTorch's ms/step, peak RSS and the ratio;
#   2. the attention benchmark (tests/bench_attention.c) over T;
#   3. scripts/bench_chart.sh: out/bench.json -> docs/img/bench.png.
# Tables go to the terminal; every JSON line goes to out/bench.json (one object per line; "bench"
# names the benchmark: peak, sgemm, model, profile, attention).
#
#   scripts/bench.sh [bench_model configs...]     e.g. scripts/bench.sh small
#   BENCH_QUICK=1     1 process per side per row, 3 steps, attention at T 256 and 1024 only
#                     (~4 min on 2 cores; the full run: 3 processes per side, 5 steps, 8-11 min)
#   BENCH_THREADS=N   threads for everything (default 2)
#   BENCH_TORCH=0     leave PyTorch out; BENCH_PYTHON=path picks the Python that has torch
#   BENCH_CHART=0     leave the chart alone
#
# A fair peer: the PyTorch side runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE removed from its
# own environment (env -u; tools/torch_bench.py would also drop them itself). Where they are set they
# pin OpenBLAS, and the PyTorch that calls it, to one kernel family (here: Haswell's AVX2 on an
# AVX-512 CPU, ~25% slower). seedgpt's side, its tests and CI keep the environment as it is. Each
# torch row reports the kernel family its OpenBLAS ran (TORCH_BLAS; "torch_blas_core" in the JSON).
# Where OpenBLAS does not know the CPU and falls back to an SSE-era family, tools/torch_bench.py
# chooses the widest family the CPU allows (checked by an exact product; "torch_blas_chosen").
# The header quotes this machine's measured fp32 FMA and bf16 peaks (cpu/peak.h, `./train peak`):
# the %peak column divides by the fp32 one; OpenBLAS's sgemm stays as a second reference (%sgemm).
# Every row also prints where its step's time goes, per op class (model/profile.h, as --profile).
#
# Threads: both seedgpt and PyTorch run with OMP_WAIT_POLICY=passive (idle OpenMP threads sleep
# instead of spinning; on shared cores a spinning thread steals the core its partner needs), unless
# OMP_WAIT_POLICY is set already. Timings are medians; compare ratios within one run (the load
# average is printed and recorded).
set -euo pipefail
cd "$(dirname "$0")/.."

threads=${BENCH_THREADS:-2}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    model_args=(--warmup 2 --steps 3 --reps 1); attn_T=(256 1024)
else
    model_args=(--warmup 2 --steps 5 --reps 3); attn_T=(256 1024 4096)
fi
torch_args=()
if [ "${BENCH_TORCH:-1}" != 0 ]; then
    for py in ${BENCH_PYTHON:-} /usr/bin/python3 python3; do
        if "$py" -c 'import torch' >/dev/null 2>&1; then
            torch_args=(--torch "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $py tools/torch_bench.py"); break
        fi
    done
    [ ${#torch_args[@]} -gt 0 ] || echo "bench: no python3 here imports torch; the PyTorch columns are left out"
fi

make --no-print-directory build/bench_model build/bench_attention

mkdir -p out
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "== build/bench_model --threads $threads ${model_args[*]} ${torch_args[*]} $*   (load average $(cut -d' ' -f1-3 /proc/loadavg))"
build/bench_model --threads "$threads" "${model_args[@]}" "${torch_args[@]}" "$@" | tee "$log"

echo
echo "== build/bench_attention ${attn_T[*]} (OMP_NUM_THREADS=$threads)"
OMP_NUM_THREADS=$threads build/bench_attention "${attn_T[@]}" | tee -a "$log"

grep '^{' "$log" > out/bench.json
echo
echo "bench: $(wc -l < out/bench.json) JSON lines in out/bench.json; load average now $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${BENCH_CHART:-1}" != 0 ]; then
    scripts/bench_chart.sh out/bench.json docs/img/bench.png || echo "bench: no chart (see above)"
fi
