/* attention/attention.h — causal multi-head attention with grouped-query heads and in-kernel
 * dropout on the attention probabilities. The model calls only these functions; the CPU
 * implementation is attention/flash_cpu.c (its CUDA twin will sit beside it).
 *
 * Layout (as the model lays it out, no transposed copies):
 *   qkv  (B, T, QKV) with QKV = (NH + 2*NKV) * HD; for each (b, t) the row holds the NH query
 *        heads, then the NKV key heads, then the NKV value heads, each HD contiguous floats.
 *   out  (B, T, NH*HD): head h of (b, t) at out[(b*T + t)*NH*HD + h*HD].
 *   lse  (B, NH, T): the log-sum-exp of row i's scaled scores (before dropout).
 * Query head h reads kv head h / (NH / NKV). Causal: key j <= query i. Scale 1/sqrt(HD).
 * Dropout (DESIGN §3, site 1): row b of the batch is global sequence g = g0 + b; the keep bit of
 * (g, h, i, j) comes from philox_attn_draw(attn_seed, g, h, i, j); thr = 0 skips the generator.
 */
#ifndef SEEDGPT_ATTENTION_H
#define SEEDGPT_ATTENTION_H

#include <stddef.h>
#include <stdint.h>
#include "random/philox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out, lse: written. */
void attention_forward(float* out, float* lse, const float* qkv,
                       int B, int T, int NH, int NKV, int HD,
                       uint32_t g0, uint64_t attn_seed, Dropout drop);

/* attention_forward that also returns, from the same pass (no second one), the statistics of
 * --log-attn-stats: stats[0] = the largest |s_ij| = |sigma q_i.k_j| over the scores the causal
 * mask lets through, stats[1] and stats[2] = the smallest and largest LSE_i. The outputs are
 * attention_forward's, bit for bit. */
void attention_forward_stats(float* out, float* lse, const float* qkv,
                             int B, int T, int NH, int NKV, int HD,
                             uint32_t g0, uint64_t attn_seed, Dropout drop, float stats[3]);

/* Floats of scratch attention_backward needs for these shapes when run with up to nthreads
 * OpenMP threads. Independent of T*T: B*NH*T for D_i = do_i.o_i, plus per-thread tiles.
 * attention_backward indexes the per-thread part by omp_get_thread_num() and cannot check the
 * size: the caller must size it with nthreads >= omp_get_max_threads() at the time of the call. */
size_t attention_backward_scratch_floats(int B, int T, int NH, int NKV, int HD, int nthreads);

/* dqkv: written (every element, including the parts no gradient reaches). out and lse are the
 * forward's saved outputs; dout the gradient of out. */
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* out, const float* lse,
                        int B, int T, int NH, int NKV, int HD,
                        uint32_t g0, uint64_t attn_seed, Dropout drop);

/* The bf16 twin (attention/flash_bf16_cpu.c, --precision bf16 on the CPU): qkv and out hold bf16
 * bits (uint16_t), lse, dout and dqkv fp32; the contracts above, with the roundings of
 * attention/flash_tc.cu: P rounded to bf16 after the dropout and before P.V, and in the backward
 * dO, m p scale and ds rounded as they become operands of the tile products. */
void attention_forward_bf16(void* out, float* lse, const void* qkv, int B, int T, int NH,
                            int NKV, int HD, uint32_t g0, uint64_t attn_seed, Dropout drop);
void attention_forward_stats_bf16(void* out, float* lse, const void* qkv, int B, int T, int NH,
                                  int NKV, int HD, uint32_t g0, uint64_t attn_seed, Dropout drop,
                                  float stats[3]);
size_t attention_backward_scratch_floats_bf16(int B, int T, int NH, int NKV, int HD,
                                              int nthreads);
void attention_backward_bf16(float* dqkv, float* scratch, const float* dout, const void* qkv,
                             const void* out, const float* lse, int B, int T, int NH, int NKV,
                             int HD, uint32_t g0, uint64_t attn_seed, Dropout drop);

#ifdef __cplusplus
}
#endif
#endif
