#!/usr/bin/env bash
# tests/check_cuda_build.sh — the CUDA build compiles and links: `make cuda` (./train_cuda: every
# .cu of cuda/ and attention/ through nvcc, linked with cuBLAS and the runtime),
# the CUDA tests of `make test-cuda`, and the kernel-variant programs of dev/cuda (`make dev-cuda`). Nothing here runs on a GPU; the kernels themselves run
# in CI through the emulation (make test-cuda-emu). SKIP where nvcc is absent.
# One target, sm_90 + PTX (CUDA_ARCHS=90, or the caller's CUDA_ARCHS): what is checked here is that
# the sources compile and link, which one target shows; the full list of `make cuda` is checked
# once, on one small object, by tests/check_cuda_archs.sh (every target: about 5x the nvcc time).
set -u
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
if ! command -v "$NVCC" >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    NVCC=/usr/local/cuda/bin/nvcc
fi
if ! command -v "$NVCC" >/dev/null 2>&1; then
    echo "SKIP cuda_trainer_builds: nvcc not found"
    echo "SKIP cuda_tests_build: nvcc not found"
    echo "SKIP dev_cuda_builds: nvcc not found"
    exit 0
fi
# Where tests/check_bare_build.sh runs (root, a private mount namespace), it builds all three in a
# fresh copy with the libraries hidden: the .cu objects take the same nvcc flags either way, and the
# C side of this configuration is compiled by ./train and the emulated trainer. So they are built
# there, once, not twice (CUDA_BUILD_ALL=1 builds them here too).
if [ -z "${CUDA_BUILD_ALL:-}" ] && [ "$(id -u)" -eq 0 ] && unshare -m true 2>/dev/null; then
    for c in cuda_trainer_builds cuda_tests_build dev_cuda_builds; do
        echo "SKIP $c: tests/check_bare_build.sh compiles it (CUDA_BUILD_ALL=1 here too)"
    done
    exit 0
fi
log=build/check_cuda_build.log
# nvcc compiles one file on one core: build as many at once as there are cores
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
export CUDA_ARCHS=${CUDA_ARCHS:-90}
mkdir -p build
start=$(date +%s)
if make -j"$JOBS" --no-print-directory NVCC="$NVCC" cuda > "$log" 2>&1; then
    kernels=$(grep -c "Compiling entry function" "$log")
    echo "built cuda_trainer_builds: make cuda CUDA_ARCHS=$CUDA_ARCHS built ./train_cuda with $("$NVCC" --version | grep -o 'release [0-9.]*'), ptxas reported $kernels kernels, $(( $(date +%s) - start )) s"
    grep -A2 "Compiling entry function" "$log" | grep -E "spill|registers" | grep -v " 0 bytes spill stores, 0 bytes spill loads" | \
        grep -i "spill" | head -3 | sed 's/^/# ptxas: /'
else
    echo "FAIL cuda_trainer_builds: $(grep -m3 -E 'error|Error' "$log" | tr '\n' ' ' | head -c 600)"
    exit 1
fi
if make -j"$JOBS" --no-print-directory NVCC="$NVCC" cuda-test-bins >> "$log" 2>&1; then
    echo "built cuda_tests_build: the tests of make test-cuda compiled with nvcc"
else
    echo "FAIL cuda_tests_build: $(grep -m3 -E 'error|Error' "$log" | tr '\n' ' ' | head -c 600)"
    exit 1
fi
start=$(date +%s)
if make -j"$JOBS" --no-print-directory NVCC="$NVCC" dev-cuda >> "$log" 2>&1; then
    echo "built dev_cuda_builds: make dev-cuda built the $(ls dev/cuda/*.cu | wc -l) programs of dev/cuda with nvcc, $(( $(date +%s) - start )) s"
else
    echo "FAIL dev_cuda_builds: $(grep -m3 -E 'error|Error' "$log" | tr '\n' ' ' | head -c 600)"
    exit 1
fi
