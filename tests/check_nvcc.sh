#!/usr/bin/env bash
# tests/check_nvcc.sh — the CUDA side of the randomness contract compiles: random/philox.h as
# device code (sm_90 and portable PTX). Runs the result only where a GPU answers.
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
if ! command -v "$NVCC" >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    NVCC=/usr/local/cuda/bin/nvcc
fi
if ! command -v "$NVCC" >/dev/null 2>&1; then
    echo "SKIP philox_compiles_as_device_code: nvcc not found"
    exit 0
fi
mkdir -p build/tests
if "$NVCC" -std=c++17 -O2 -I. -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
        -o build/tests/test_cuda_philox tests/cuda/test_cuda_philox.cu 2> build/tests/test_cuda_philox.log; then
    echo "built philox_compiles_as_device_code: nvcc built tests/cuda/test_cuda_philox.cu for sm_90 + PTX"
else
    echo "FAIL philox_compiles_as_device_code: $(head -c 400 build/tests/test_cuda_philox.log)"
    exit 1
fi
