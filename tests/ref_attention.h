/* tests/ref_attention.h — the float64 naive attention every attention test trusts.
 *
 * O(T^2) per head, one Philox call per keep bit, no tiles, no online softmax: the simplest code
 * that states DESIGN §5. Same layouts as attention/attention.h, in double:
 *   qkv (B, T, (NH + 2*NKV) * HD), out (B, T, NH*HD), lse (B, NH, T), dqkv like qkv.
 * Row b of the batch is global sequence g0 + b; keep bit of (g, h, i, j) = philox_attn_draw(seed,
 * g, h, i, j) >= drop.thr (thr = 0 keeps everything); kept probabilities are multiplied by
 * (double)drop.scale, the very factor the fp32 kernel uses. Used by tests/test_attention*.c and by
 * the whole-model float64 reference. No main, no state.
 */
#ifndef SEEDGPT_REF_ATTENTION_H
#define SEEDGPT_REF_ATTENTION_H

#include <stdint.h>
#include "random/philox.h"

/* 1 if the probability (g, h, i, j) is kept, 0 if dropped. */
int ref_attention_keep(uint64_t seed, uint32_t g, uint32_t h, uint32_t i, uint32_t j, Dropout drop);

/* out (B, T, NH*HD), lse (B, NH, T): written. */
void ref_attention_forward(double* out, double* lse, const double* qkv,
                           int B, int T, int NH, int NKV, int HD,
                           uint32_t g0, uint64_t seed, Dropout drop);

/* dqkv (B, T, (NH + 2*NKV) * HD): written (zero where no gradient reaches); dout (B, T, NH*HD). */
void ref_attention_backward(double* dqkv, const double* dout, const double* qkv,
                            int B, int T, int NH, int NKV, int HD,
                            uint32_t g0, uint64_t seed, Dropout drop);

#endif
