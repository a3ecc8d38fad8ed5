/* cuda/device.h — the one doorway between seedgpt's CUDA sources and a device. Every .cu
 * file includes this header first and uses only what it names, so the same kernel sources build
 * two ways:
 *   - with nvcc, for a real GPU (this file maps the macros onto CUDA syntax);
 *   - with a C++ compiler and -DSG_EMU, against cuda/emu/cuda_emu.h, which runs each launch on
 *     the CPU with pooled real threads per block (`make test-cuda-emu`).
 *
 * The supported subset (what kernels may use):
 *   - launches only through SG_LAUNCH(kernel, grid, block, smem_bytes, args...), each followed by
 *     SG_CHECK_LAUNCH(); no <<<...>>> anywhere else;
 *   - dynamic shared memory only through SG_DYN_SHARED(type, name) (one per kernel, at its top);
 *     fixed-size shared arrays only through SG_SHARED(type, name, count) (a 1-D array); no bare
 *     __shared__ and no `extern __shared__`;
 *   - __syncthreads(), __syncwarp(mask), and the warp collectives __shfl_sync, __shfl_xor_sync,
 *     __shfl_down_sync, __shfl_up_sync, __ballot_sync, __all_sync, __any_sync with an explicit
 *     mask (float, int, unsigned; width 32); no __activemask, no lockstep assumptions (a warp's
 *     threads meet only at those calls), no cooperative groups, no grid-wide sync, no block
 *     waiting on another block;
 *   - bfloat16 as a storage type: __nv_bfloat16, __float2bfloat16_rn, __bfloat162float,
 *     __bfloat16_as_ushort, __ushort_as_bfloat16 (no bf16 arithmetic, no implicit conversions),
 *     and sg_pack_bf16x2 below; the host's twin conversions are in util/bf16.h; fp16 only as
 *     bits, rounded by sg_f16_bits_rn below (util/fp16.h is the host's twin);
 *   - tensor cores and their data movement only through the wrappers of cuda/mma.h
 *     (sg_mma_m16n8k16_bf16_f32, sg_mma_m16n8k8_f16_f32; ldmatrix x4, plain and .trans; cp.async of 16 and 4 bytes with
 *     its commit and wait_group), each mma and ldmatrix a warp collective: all 32 lanes of the
 *     warp call it together; a cp.async destination is read only after its wait;
 *   - integer atomics (atomicAdd/atomicMax/atomicCAS on int/unsigned); no float atomics (DESIGN §5);
 *   - threadIdx, blockIdx, blockDim, gridDim, warpSize; dim3;
 *   - math: expf, logf, sqrtf, rsqrtf, tanhf, fmaxf, fminf, fabsf, __expf, __logf, __fdividef, __fmul_rn,
 *     __float_as_uint, __uint_as_float, min/max on int;
 *   - host API: cudaMalloc, cudaFree, cudaMemcpy (H2D, D2H, D2D), cudaMemset, cudaDeviceSynchronize,
 *     cudaGetLastError, cudaGetErrorString, cudaFuncSetAttribute(kernel,
 *     cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), cudaMemGetInfo, cudaGetDeviceProperties
 *     (no clockRate: CUDA 13 removed it), cudaDeviceGetAttribute (the block and grid limits,
 *     cudaDevAttrClockRate, cudaDevAttrMultiProcessorCount, cudaDevAttrComputeCapabilityMajor /
 *     Minor, cudaDevAttrMaxSharedMemoryPerBlockOptin), cudaGetDeviceCount, cudaGetDevice, cudaSetDevice; events on the default stream
 *     (cudaEventCreate, cudaEventDestroy, cudaEventRecord, cudaEventSynchronize,
 *     cudaEventElapsedTime: the profiler's timer, cuda/profile_cuda.cu);
 *     cuBLAS: cublasCreate, cublasDestroy, cublasSgemm, cublasSgemmStridedBatched, cublasSetMathMode
 *     (the emulation runs them on the CPU, column-major as cuBLAS defines them); cuBLASLt for
 *     the bf16 matmuls (cuda/ops_bf16_cuda.cu): cublasLtCreate/Destroy, cublasLtMatmulDesc*,
 *     cublasLtMatrixLayout*, cublasLtMatmulPreference*, cublasLtMatmulAlgoGetHeuristic,
 *     cublasLtMatmul with bf16 A and B, fp32 or bf16 C and D, CUBLAS_COMPUTE_32F, the DEFAULT and BIAS
 *     epilogues (the emulation sums the exact products in ascending k in fp32 and refuses the
 *     rest; docs/cuda-emulation.md);
 *   - every CUDA / cuBLAS call wrapped in SG_CHECK / SG_CUBLAS_CHECK.
 * The emulation checks launches as a GPU would (at most 1024 threads a block, dynamic shared memory
 * above 48 KiB only after the opt-in attribute, grid limits), poisons shared memory at every block
 * start, and reports a divergent barrier (a thread that left the kernel or waits at another
 * __syncthreads while the rest wait) with the kernel's name instead of hanging.
 * It does not model registers, timing, the memory model or the real cuBLAS: a real GPU still has
 * the last word (`make test-cuda`, scripts/gpu_check.sh).
 */
#ifndef SEEDGPT_DEVICE_H
#define SEEDGPT_DEVICE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef SG_EMU
#include "cuda/emu/cuda_emu.h"
#include "util/fp16.h"
#else
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>

#define SG_LAUNCH(kernel, grid, block, smem, ...) kernel<<<(grid), (block), (smem)>>>(__VA_ARGS__)
/* one raw dynamic buffer per translation unit, viewed with the kernel's type */
#define SG_DYN_SHARED(type, name) \
    extern __shared__ __align__(16) unsigned char sg_dyn_smem_[]; \
    type* name = reinterpret_cast<type*>(sg_dyn_smem_)
#define SG_SHARED(type, name, count) __shared__ __align__(16) type name[count]
#endif

/* Every CUDA runtime call: one line naming the call, the file and line, then exit. */
#define SG_CHECK(call) do { \
    cudaError_t sg_err_ = (call); \
    if (sg_err_ != cudaSuccess) { \
        fprintf(stderr, "seedgpt: CUDA error at %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                cudaGetErrorString(sg_err_)); \
        exit(1); \
    } \
} while (0)
#define SG_CHECK_LAUNCH() SG_CHECK(cudaGetLastError())
#define SG_CUBLAS_CHECK(call) do { \
    cublasStatus_t sg_st_ = (call); \
    if (sg_st_ != CUBLAS_STATUS_SUCCESS) { \
        fprintf(stderr, "seedgpt: cuBLAS error %d at %s:%d: %s\n", (int)sg_st_, __FILE__, \
                __LINE__, #call); \
        exit(1); \
    } \
} while (0)

/* two bf16 in one 32-bit register, lo in bits 0..15: a tensor-core fragment register holds the
 * element with the lower index in its low half */
static inline __host__ __device__ uint32_t sg_pack_bf16x2(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) | (uint32_t)__bfloat16_as_ushort(hi) << 16;
}

/* x rounded to fp16 (nearest even) as its 16 bits: the operands of the sm_75 tensor-core
 * attention (attention/flash_tc.cu, TcF16); util/fp16.h is the host's twin, bit for bit */
#ifdef SG_EMU
static inline uint16_t sg_f16_bits_rn(float x) { return sg_fp16_from_float(x); }
static inline float sg_f16_to_float(uint16_t h) { return sg_fp16_to_float(h); }
#else
static inline __host__ __device__ uint16_t sg_f16_bits_rn(float x) { return __half_as_ushort(__float2half_rn(x)); }
/* the value of fp16 bits as fp32: exact (--precision fp16's loads, cuda/act.h) */
static inline __host__ __device__ float sg_f16_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }
#endif

static inline unsigned sg_ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

/* The dynamic shared memory one block may take on the current device with the opt-in
 * (cudaFuncSetAttribute): 96 KiB on sm_70, 64 KiB on sm_75, 163 KiB on sm_80, 99 KiB on sm_86/89,
 * 227 KiB on sm_90. A kernel that would take more chooses a smaller layout (attention/flash_cuda.cu,
 * layernorm_backward_cuda) instead of failing to launch. Asked at every call (a host-side lookup,
 * negligible beside a launch), so the emulation's SG_EMU_CC may change between calls. */
static inline size_t sg_smem_optin(void) {
    int dev = 0, v = 0;
    SG_CHECK(cudaGetDevice(&dev));
    SG_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return v > 48 * 1024 ? (size_t)v : 48 * 1024;
}

/* The kernels' A/B switch, one reading for every .cu file (the ops of cuda/ and the attention of
 * attention/): 1 when SEEDGPT_KERNELS=baseline (every op and the attention run the kernels they
 * had before their speed rewrite: the same bits where the arithmetic was kept), 0 when it is unset,
 * empty or "new"; any other value ends the run with one line. Read at every call (a getenv,
 * negligible beside a launch), so a test or a benchmark may flip it between calls, and one build
 * times old against new on one GPU (scripts/gpu_perf.sh). */
static inline int sg_kernels_baseline(void) {
    const char* v = getenv("SEEDGPT_KERNELS");
    if (v == NULL || v[0] == '\0' || strcmp(v, "new") == 0) return 0;
    if (strcmp(v, "baseline") == 0) return 1;
    fprintf(stderr, "seedgpt: SEEDGPT_KERNELS=%s: expected baseline or new (or unset: new)\n", v);
    exit(1);
}

/* SEEDGPT_ATTN_BACKWARD, read at every call like SEEDGPT_KERNELS: how the new tensor-core
 * attention backward runs (attention/flash_tc.cu). "fused": one kernel for dK, dV and dQ's
 * per-key-tile slices, then their sum in a fixed order; "split": the two kernels before it, dK/dV
 * then dQ, kept so that one GPU run times both; unset or empty: fused where its kernel compiles
 * without spills (head dims up to 64), split at 128. Anything else is refused in one line. */
enum { SG_ATTN_BWD_AUTO = 0, SG_ATTN_BWD_FUSED = 1, SG_ATTN_BWD_SPLIT = 2 };
static inline int sg_attn_backward_mode(void) {
    const char* v = getenv("SEEDGPT_ATTN_BACKWARD");
    if (v == NULL || v[0] == '\0') return SG_ATTN_BWD_AUTO;
    if (strcmp(v, "fused") == 0) return SG_ATTN_BWD_FUSED;
    if (strcmp(v, "split") == 0) return SG_ATTN_BWD_SPLIT;
    fprintf(stderr, "seedgpt: SEEDGPT_ATTN_BACKWARD=%s: expected fused or split (or unset: fused up to head dim 64, "
            "split at 128)\n", v);
    exit(1);
}

#endif
