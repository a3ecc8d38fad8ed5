#!/usr/bin/env bash
# tests/check_mpi_cuda.sh — the NCCL path of data parallelism compiles and links (make
# mpi-cuda-check: dist/dist_nccl.cu with nvcc, dist/dist_mpi.c with mpicc, SEEDGPT_NCCL).
# It cannot run here: summing gradients across GPUs needs a machine with several of them.
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if ! command -v "$NVCC" >/dev/null 2>&1 && [ -x "$CUDA_HOME/bin/nvcc" ]; then NVCC=$CUDA_HOME/bin/nvcc; fi
name=nccl_data_parallel_path_compiles_and_links
command -v "$NVCC" >/dev/null 2>&1 || { echo "SKIP $name: nvcc not found"; exit 0; }
command -v "${MPICC:-mpicc}" >/dev/null 2>&1 || { echo "SKIP $name: mpicc not found (libopenmpi-dev)"; exit 0; }
[ -f "$CUDA_HOME/include/nccl.h" ] || [ -f /usr/include/nccl.h ] || { echo "SKIP $name: no nccl.h"; exit 0; }
mkdir -p build
start=$(date +%s)
# (a plain build in build/, also when called from make test-asan: MAKEFLAGS cleared)
if MAKEFLAGS= make -s --no-print-directory mpi-cuda-check NVCC="$NVCC" > build/mpi_cuda_check.log 2>&1; then
    echo "built $name: nvcc + mpicc built and linked build/mpi_cuda/dist_link_check against NCCL $(grep -m1 -o 'NCCL_MAJOR [0-9]*' "$CUDA_HOME/include/nccl.h" | cut -d' ' -f2).$(grep -m1 -o 'NCCL_MINOR [0-9]*' "$CUDA_HOME/include/nccl.h" | cut -d' ' -f2) in $(( $(date +%s) - start )) s (not run: needs several GPUs)"
else
    echo "FAIL $name: $(grep -m3 -i 'error' build/mpi_cuda_check.log | head -c 600)"
    exit 1
fi
