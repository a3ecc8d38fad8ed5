/* attention/attention_cuda.h — the CUDA twin of attention/attention.h (attention/flash_cuda.cu):
 * the same signatures, layouts and keep bits; every pointer is device memory. */
#ifndef SEEDGPT_ATTENTION_CUDA_H
#define SEEDGPT_ATTENTION_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include "philox.h"

#ifdef __cplusplus
extern "C" {
#endif

void attention_forward_cuda(float* out, float* lse, const float* qkv,
                            int B, int T, int NH, int NKV, int HD,
                            uint32_t g0, uint64_t attn_seed, Dropout drop);
/* nthreads is ignored (the CPU kernel's per-thread tiles have no CUDA counterpart) */
size_t attention_backward_scratch_floats_cuda(int B, int T, int NH, int NKV, int HD, int nthreads);
void attention_backward_cuda(float* dqkv, float* scratch, const float* dout, const float* qkv,
                             const float* out, const float* lse,
                             int B, int T, int NH, int NKV, int HD,
                             uint32_t g0, uint64_t attn_seed, Dropout drop);

#ifdef __cplusplus
}
#endif
#endif
