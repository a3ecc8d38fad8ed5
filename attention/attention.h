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

/* ---- context parallelism (DESIGN §9) --------------------------------------------------------
 * A sequence's positions are spread over ranks, so a rank's attention runs blocks: Tq of its
 * queries, at global positions iq0 .. iq0+Tq-1, against Tk keys at global positions jk0 ..
 * jk0+Tk-1 (received from another rank or its own). The causal mask and the keep bits use the
 * global (g, h, i, j), so they are the single-process run's bits.
 *   q: (B, Tq) rows of q_stride floats, query head h at h*HD (the rows of qkv);
 *   k, v: (B, Tk) rows of kv_stride floats, kv head at kvh*HD from each pointer.
 * Forward: out (B, Tq, NH*HD) and lse (B, NH, Tq) written: the block's own normalised output and
 * log-sum-exp (-inf and a zero row for a query that sees none of the block's keys).
 * attention_merge folds a block into the running result by the two log-sum-exps, in fp32.
 * Backward: lse and out are the merged (whole-row) ones; dq (rows of dq_stride) and dk, dv (rows
 * of dkv_stride) are accumulated (+=). scratch as attention_backward_scratch_floats(B, Tq, ...). */
void attention_block_forward(float* out, float* lse, const float* q, size_t q_stride, int Tq,
                             int iq0, const float* k, const float* v, size_t kv_stride, int Tk,
                             int jk0, int B, int NH, int NKV, int HD, uint32_t g0,
                             uint64_t attn_seed, Dropout drop);
void attention_merge(float* acc, float* lse_acc, const float* blk, const float* lse_blk,
                     int B, int T, int NH, int HD);
void attention_block_backward(float* dq, size_t dq_stride, float* dk, float* dv,
                              size_t dkv_stride, float* scratch, const float* dout,
                              const float* out, const float* lse, const float* q, size_t q_stride,
                              int Tq, int iq0, const float* k, const float* v, size_t kv_stride,
                              int Tk, int jk0, int B, int NH, int NKV, int HD, uint32_t g0,
                              uint64_t attn_seed, Dropout drop);

#ifdef SEEDGPT_TEST_BUILD
/* Test builds: when set, every forward (whole or block) reports each keep bit it used, at the
 * global (g, h, i, j), from its worker threads (one call per (i, j): no two calls share a cell). */
extern void (*attention_keep_hook)(uint32_t g, int h, int i, int j, int kept);
#endif

/* The 16-bit twins (attention/flash_bf16_cpu.c for --precision bf16 on the CPU,
 * attention/flash_fp16_cpu.c for fp16): qkv and out hold bf16 (fp16) bits (uint16_t), lse, dout
 * and dqkv fp32; the contracts above, with the roundings of attention/flash_tc.cu: P rounded to
 * the 16-bit type after the dropout and before P.V, and in the backward dO, m p scale and ds
 * rounded as they become operands of the tile products. S is _bf16 or _fp16. */
#define ATTENTION_ACT16_DECLS(S)                                                                  \
    void attention_forward##S(void* out, float* lse, const void* qkv, int B, int T, int NH,      \
                              int NKV, int HD, uint32_t g0, uint64_t attn_seed, Dropout drop);   \
    void attention_forward_stats##S(void* out, float* lse, const void* qkv, int B, int T, int NH, \
                                    int NKV, int HD, uint32_t g0, uint64_t attn_seed,            \
                                    Dropout drop, float stats[3]);                               \
    size_t attention_backward_scratch_floats##S(int B, int T, int NH, int NKV, int HD,           \
                                                int nthreads);                                   \
    void attention_backward##S(float* dqkv, float* scratch, const float* dout, const void* qkv,  \
                               const void* out, const float* lse, int B, int T, int NH, int NKV, \
                               int HD, uint32_t g0, uint64_t attn_seed, Dropout drop);           \
    /* x[0..n) rounded in place (the twin's operand rounding): each element the bits of    */   \
    /* util/bf16.h's sg_bf16_round (vectorised where it can be) or util/fp16.h's sg_fp16_round */ \
    void attention_round_operands##S(float* x, size_t n);
ATTENTION_ACT16_DECLS(_bf16)
ATTENTION_ACT16_DECLS(_fp16)

#ifdef __cplusplus
}
#endif
#endif
