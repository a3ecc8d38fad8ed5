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
#   3. ZeRO-1 against plain data parallelism (where mpirun and ./train_mpi exist; `make mpi`): the
#      L8 model of the recompute rows under mpirun -np 2 ./train_mpi, B8 per rank, --recompute
#      layer, fp32 and bf16, with and without --zero 1; each rank's counted peak and the median
#      ms/step of its JSON log ({"bench":"zero",..}). Each rank runs 1 thread (2 ranks on 2 cores),
#      so its step time is not the one-process rows' at 2 threads: compare the pairs;
#   4. scripts/bench_chart.sh: out/bench.json -> docs/img/bench.png.
# Tables go to the terminal; every JSON line goes to out/bench.json (one object per line; "bench"
# names the benchmark: peak, sgemm, model, profile, attention).
#
#   scripts/bench.sh [bench_model configs...]     e.g. scripts/bench.sh small
#   BENCH_QUICK=1     1 process per side per row, 3 steps, attention at T 256 and 1024 only
#                     (~4 min on 2 cores; the full run: 3 processes per side, 5 steps, 8-11 min)
#   BENCH_THREADS=N   threads for everything (default 2)
#   BENCH_TORCH=0     leave PyTorch out; BENCH_PYTHON=path picks the Python that has torch
#   BENCH_CHART=0     leave the chart alone
#   BENCH_ZERO=0      leave the ZeRO-1 rows out
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

if [ "${BENCH_ZERO:-1}" != 0 ]; then
    echo
    if ! command -v mpirun > /dev/null 2>&1 || ! { [ -x ./train_mpi ] || make --no-print-directory mpi > /dev/null 2>&1; }; then
        echo "== ZeRO-1: no mpirun or no ./train_mpi (make mpi needs mpicc); the rows are left out"
    else
        zsteps=$(( ${BENCH_QUICK:-0} == 1 ? 5 : 7 ))
        echo "== ZeRO-1: mpirun -np 2 ./train_mpi, L8 H4 C256 B8 T256 per rank, recompute layer, $zsteps steps, 1 thread per rank"
        zw=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_bench_zero.XXXXXX")
        ./train prepare README.md "$zw/data" > /dev/null
        printf '%-6s %-6s %12s %14s\n' precision zero "ms/step" "peak MiB/rank"
        for prec in fp32 bf16; do
            for z in 0 1; do
                zflag=(); [ "$z" = 1 ] && zflag=(--zero 1)
                OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS \
                    -x OMP_WAIT_POLICY -np 2 ./train_mpi --train "$zw/data/train_*.bin" \
                    --layers 8 --heads 4 --embd 256 --seq-len 256 --batch 8 --dropout 0.1 \
                    --recompute layer --precision "$prec" --steps "$zsteps" --log-every 1 --threads 1 \
                    --seed 1 "${zflag[@]}" --log-json "$zw/z.jsonl" > "$zw/z.out" 2>&1 ||
                    { echo "bench: the ZeRO-1 row failed:"; tail -3 "$zw/z.out"; continue; }
                python3 - "$zw/z.jsonl" "$prec" "$z" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY' | tee -a "$log"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"type":"train"' in l]
ms = statistics.median(r["step_ms"] for r in rows if r["step"] >= 2)
peak = max(r["peak_bytes"] for r in rows)
print("%-6s %-6s %12.1f %14.1f" % (sys.argv[2], sys.argv[3], ms, peak / 1048576.0))
print(json.dumps({"bench": "zero", "ranks": 2, "zero": int(sys.argv[3]), "precision": sys.argv[2],
                  "recompute": "layer", "threads_per_rank": 1, "batch_per_rank": 8, "median_ms": ms,
                  "peak_bytes": peak, "loadavg1": float(sys.argv[4])}, separators=(",", ":")))
PY
                rm -f "$zw/z.jsonl"
            done
        done
        rm -rf "$zw"
    fi
fi

grep '^{' "$log" > out/bench.json
echo
echo "bench: $(wc -l < out/bench.json) JSON lines in out/bench.json; load average now $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${BENCH_CHART:-1}" != 0 ]; then
    scripts/bench_chart.sh out/bench.json docs/img/bench.png || echo "bench: no chart (see above)"
fi
