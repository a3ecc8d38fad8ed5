#!/usr/bin/env bash
# tests/check_mpi_cuda.sh — the NCCL path of data parallelism compiles and links (make
# mpi-cuda-check: dist/dist_nccl.cu with nvcc, dist/dist_mpi.c with mpicc, SEEDGPT_NCCL).
# It cannot run here on GPUs, which it needs one per rank; tests/cuda/test_nccl_emu.sh runs the
# same sources against the emulation (ranks as processes with emulated GPUs and NCCL).
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if ! command -v "$NVCC" >/dev/null 2>&1 && [ -x "$CUDA_HOME/bin/nvcc" ]; then NVCC=$CUDA_HOME/bin/nvcc; fi
name=nccl_data_parallel_path_compiles_and_links
command -v "$NVCC" >/dev/null 2>&1 || { echo "SKIP $name: nvcc not found"; echo "SKIP nccl_file_start_compiles_links_and_hands_the_id_over: nvcc not found"; exit 0; }
[ -f "$CUDA_HOME/include/nccl.h" ] || [ -f /usr/include/nccl.h ] || { echo "SKIP $name: no nccl.h"; echo "SKIP nccl_file_start_compiles_links_and_hands_the_id_over: no nccl.h"; exit 0; }
# ranks started without MPI (make cuda-nccl-check: dist/dist_nccl_file.c, dist/init_file.c): the
# link check run as two processes, rank 1 started first; rank 0 publishes the NCCL id in a
# file and rank 1 reads it, then both go on to NCCL, which needs a GPU each (without one, each
# says so: the file handshake was passed)
fname=nccl_file_start_compiles_links_and_hands_the_id_over
mkdir -p build
if MAKEFLAGS= make -s --no-print-directory cuda-nccl-check NVCC="$NVCC" > build/nccl_file_check.log 2>&1; then
    w=$(mktemp -d "${TMPDIR:-/tmp}/seedgpt_nccl_file.XXXXXX")
    bin=build/nccl_file/nccl_file_link_check
    timeout 60 "$bin" --rank 1 --world 2 --init-file "$w/id" --init-timeout 30 > "$w/r1.out" 2>&1 &
    r1=$!
    sleep 0.3
    timeout 60 "$bin" --rank 0 --world 2 --init-file "$w/id" > "$w/r0.out" 2>&1
    rc0=$?
    wait $r1
    rc1=$?
    if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]; then
        echo "ok   $fname: two ranks joined NCCL through the file: $(head -1 "$w/r0.out")"
    elif ! grep -q -- '--init-file' "$w/r0.out" "$w/r1.out" && grep -q 'rank 1: \(no CUDA device\|GPU\|ncclCommInitRank\)' "$w/r1.out"; then
        echo "ok   $fname: built; rank 1 read rank 0's id from the file and stopped at NCCL: \"$(head -1 "$w/r1.out")\" (compiled and the handshake run only: no GPU per rank here)"
    else
        echo "FAIL $fname: statuses $rc0 $rc1; rank 0: $(head -1 "$w/r0.out"); rank 1: $(head -1 "$w/r1.out")"
        rm -rf "$w"
        exit 1
    fi
    rm -rf "$w"
else
    echo "FAIL $fname: $(grep -m3 -i 'error' build/nccl_file_check.log | head -c 600)"
    exit 1
fi
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
