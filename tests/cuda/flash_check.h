/* tests/cuda/flash_check.h — what the tensor-core attention tests (test_cuda_flash_tc.cu for
 * bf16, test_cuda_flash_f16.cu for the sm_75 fp16 kernels) share: the CPU's thread count, and
 * the sums of magnitudes that scale the backward's tolerance (test_cuda_flash_tc.cu says how the
 * bound is built from them). Included once, by each test's own translation unit. */
#ifndef SEEDGPT_TESTS_CUDA_FLASH_CHECK_H
#define SEEDGPT_TESTS_CUDA_FLASH_CHECK_H

#include <math.h>
#include <stddef.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static inline int cpu_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* mag (B, T, QKV), laid out as dqkv: for q, k and v, the sums over the causal pairs of the
 * magnitudes of each term of their gradients (float64; masks taken as 1, so they bound every
 * mask), from the operands qkv, dout, the forward's out and LSE, and the dropout scale */
static inline void backward_magnitudes(double* mag, const float* qkv, const float* dout, const float* out, const float* lse,
                                       int B, int T, int NH, int NKV, int HD, float scale) {
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const double sigma = 1.0 / sqrt((double)HD);
    memset(mag, 0, (size_t)B * T * QKV * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int kvh = h / (NH / NKV);
            for (int i = 0; i < T; i++) {
                const float* q = qkv + ((size_t)b * T + i) * QKV + (size_t)h * HD;
                const float* dO = dout + ((size_t)b * T + i) * C + (size_t)h * HD;
                const float* o = out + ((size_t)b * T + i) * C + (size_t)h * HD;
                const double L = lse[((size_t)b * NH + h) * T + i];
                double Di = 0;
                for (int d = 0; d < HD; d++) Di += (double)dO[d] * (double)o[d];
                double* mq = mag + ((size_t)b * T + i) * QKV + (size_t)h * HD;
                for (int j = 0; j <= i; j++) {
                    const float* k = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + kvh) * HD;
                    const float* v = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + NKV + kvh) * HD;
                    double* mk = mag + ((size_t)b * T + j) * QKV + (size_t)(NH + kvh) * HD;
                    double* mv = mag + ((size_t)b * T + j) * QKV + (size_t)(NH + NKV + kvh) * HD;
                    double dot = 0, A = 0;
                    for (int d = 0; d < HD; d++) {
                        dot += (double)q[d] * (double)k[d];
                        A += fabs((double)dO[d] * (double)v[d]);
                    }
                    const double p = exp(sigma * dot - L), a = p * (scale * A + fabs(Di));
                    for (int d = 0; d < HD; d++) {
                        mv[d] += scale * p * fabs((double)dO[d]);
                        mq[d] += sigma * a * fabs((double)k[d]);
                        mk[d] += sigma * a * fabs((double)q[d]);
                    }
                }
            }
        }
}

#endif
