/* attention/attention_cuda.h — the CUDA twin of attention/attention.h (attention/flash_cuda.cu):
 * the same signatures, layouts and keep bits; every pointer is device memory. */
#ifndef SEEDGPT_ATTENTION_CUDA_H
#define SEEDGPT_ATTENTION_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include "random/philox.h"

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

/* Context parallelism (DESIGN §9): the twins of attention/attention.h's block functions, with the
 * same contracts (global positions iq0, jk0; keep bits of the global (g, h, i, j); lse -inf and a
 * zero row for a query that sees no key of the block; dq, dk, dv accumulated). The backward's
 * scratch: attention_backward_scratch_floats_cuda(B, T, ...) with T >= Tq and T >= Tk. */
void attention_block_forward_cuda(float* out, float* lse, const float* q, size_t q_stride, int Tq,
                                  int iq0, const float* k, const float* v, size_t kv_stride, int Tk,
                                  int jk0, int B, int NH, int NKV, int HD, uint32_t g0,
                                  uint64_t attn_seed, Dropout drop);
void attention_merge_cuda(float* acc, float* lse_acc, const float* blk, const float* lse_blk,
                          int B, int T, int NH, int HD);
void attention_block_backward_cuda(float* dq, size_t dq_stride, float* dk, float* dv,
                                   size_t dkv_stride, float* scratch, const float* dout,
                                   const float* out, const float* lse, const float* q,
                                   size_t q_stride, int Tq, int iq0, const float* k, const float* v,
                                   size_t kv_stride, int Tk, int jk0, int B, int NH, int NKV, int HD,
                                   uint32_t g0, uint64_t attn_seed, Dropout drop);

/* The backward's pass 0, D (B, NH, T) written: D[b,h,i] = dout_i . out_i over the head's HD
 * channels, one warp a row in a fixed order; and the grouped-query sum: dk, dv of each kv head
 * written into dqkv from the per-query-head partials dKp, dVp (B, T, NH, HD), added in ascending
 * head order, dk times sigma. Shared by the fp32 and the tensor-core backward. */
void attention_backward_dot_cuda(float* D, const float* dout, const float* out, int B, int T, int NH,
                                 int HD);
/* the same with the bf16 o (bits) of the bf16 table's activations, each read exactly */
void attention_backward_dot_bf16_cuda(float* D, const float* dout, const void* out, int B, int T,
                                      int NH, int HD);
/* and with the fp16 o of the fp16 table */
void attention_backward_dot_fp16_cuda(float* D, const float* dout, const void* out, int B, int T,
                                      int NH, int HD);
void attention_group_sum_cuda(float* dqkv, const float* dKp, const float* dVp, int B, int T, int NH,
                              int NKV, int HD, float sigma);

/* The longest sequence the attention kernels take, fp32 and tensor-core alike: their grids put
 * tiles of 64 queries (or keys) along y, which the device limits to 65535 blocks, so T at most
 * 64 x 65535 = 4,194,240. A longer T is refused with one line before anything runs. */
int attention_cuda_max_T(void);
/* one line naming fn and exit when T is above attention_cuda_max_T() */
void attention_cuda_check_T(const char* fn, int T);

#ifdef __cplusplus
}
#endif
#endif
