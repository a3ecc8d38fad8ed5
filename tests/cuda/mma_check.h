/* tests/cuda/mma_check.h — what the tensor-core wrapper tests (test_cuda_mma.cu for m16n8k16 bf16,
 * test_cuda_mma_f16.cu for m16n8k8 fp16) share: the C/D fragment's loads and stores, written out
 * from the PTX ISA's table (the same for both shapes), device buffers made from host arrays or
 * filled with NaN, and the worst error against a float64 reference as a fraction of a bound.
 * Included once, by each test's own translation unit; built by nvcc and against the emulation. */
#ifndef SEEDGPT_TESTS_CUDA_MMA_CHECK_H
#define SEEDGPT_TESTS_CUDA_MMA_CHECK_H

#include "cuda/device.h"
#include <math.h>
#include <stdint.h>
#include "tests/test.h"

#ifdef SG_EMU
#define EMU_ONLY 1
#else
#define EMU_ONLY 0
#endif

/* C/D (16 x 8, ldc), lane = 4 g + t: c[0..1] = row g, cols 2t..2t+1; c[2..3] = row g+8 */
static __device__ void frag_load_c(float c[4], const float* C, int ldc, int lane) {
    int g = lane / 4, t = lane % 4;
    c[0] = C[g * ldc + 2 * t];
    c[1] = C[g * ldc + 2 * t + 1];
    c[2] = C[(g + 8) * ldc + 2 * t];
    c[3] = C[(g + 8) * ldc + 2 * t + 1];
}
static __device__ void frag_store_d(float* D, int ldc, const float d[4], int lane) {
    int g = lane / 4, t = lane % 4;
    D[g * ldc + 2 * t] = d[0];
    D[g * ldc + 2 * t + 1] = d[1];
    D[(g + 8) * ldc + 2 * t] = d[2];
    D[(g + 8) * ldc + 2 * t + 1] = d[3];
}

static inline float rand_c(void) { return (float)(8.0 * test_uniform() - 4.0); }

static inline void* dev_copy(const void* h, size_t bytes) {
    void* d;
    SG_CHECK(cudaMalloc(&d, bytes));
    SG_CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
static inline float* dev_nan(size_t n) {
    float* d;
    SG_CHECK(cudaMalloc((void**)&d, n * sizeof(float)));
    SG_CHECK(cudaMemset(d, 0xff, n * sizeof(float)));   /* NaN: an element not written fails */
    return d;
}

/* D against float64: worst |d - ref| / tolerance over the elements (<= 1 passes), NaN counted */
typedef struct {
    double worst_ratio, worst_abs;
    int nonfinite;
} Err;
static inline void err_add(Err* e, float d, double ref, double tol) {
    if (!isfinite(d)) { e->nonfinite++; return; }
    double diff = fabs((double)d - ref);
    if (diff > e->worst_abs) e->worst_abs = diff;
    double r = tol > 0 ? diff / tol : (diff > 0 ? INFINITY : 0.0);
    if (r > e->worst_ratio) e->worst_ratio = r;
}
static inline int err_ok(const Err* e) { return e->nonfinite == 0 && e->worst_ratio <= 1.0; }

#endif
