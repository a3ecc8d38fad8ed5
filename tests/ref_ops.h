/* tests/ref_ops.h — float64 naive references of every op in model/ops.h.
 *
 * Each ref_ function mirrors its model/ops.h twin argument for argument, with double tensors in
 * place of float, and the same write-vs-accumulate contract:
 *   written      the output is overwritten (its previous contents are never read);
 *   accumulated  the result is added to what the output holds (parameter gradients, and
 *                layernorm's dinp, which is the residual stream's gradient).
 * The code is the plainest loop that states the formula — no blocking, no threads, sums in index
 * order — so a reader can check it against the math, and the fp32 ops and the whole-model float64
 * reference can be tested against it.
 *
 * Dropout: element (b, t, c) of a (B, T, C) tensor is kept iff
 * philox_elem_draw(seed, g0 + b, t, c) >= drop.thr, drawn one element at a time; a kept element
 * is multiplied by (double)drop.scale — the same float scale the kernels receive — so the
 * reference and the fp32 op keep the same elements and scale them by the same number.
 * drop.thr == 0 (dropout_make(0.0)) keeps every element and scale is 1.
 */
#ifndef SEEDGPT_REF_OPS_H
#define SEEDGPT_REF_OPS_H

#include <stddef.h>
#include <stdint.h>
#include "random/philox.h"

/* 1 iff element (g, t, c) of a residual / embedding dropout with this seed is kept. */
int ref_dropout_keep(uint64_t seed, uint32_t g, uint32_t t, uint32_t c, Dropout drop);

/* out (B,T,C) written = drop(wte[inp[b,t]] + wpe[t]). inp (B,T); wte (Vp,C); wpe (maxT,C);
 * row b is global sequence g0 + b. */
void ref_encoder_forward(double* out, const int* inp, const double* wte, const double* wpe,
                         int B, int T, int C, uint32_t g0, uint64_t embd_seed, Dropout drop);
/* dwte (Vp,C), dwpe (maxT,C) accumulated from dout (B,T,C), the gradient of the embedding sum
 * (already through the dropout's backward: chain ref_dropout_backward first). */
void ref_encoder_backward(double* dwte, double* dwpe, const double* dout, const int* inp,
                          int B, int T, int C);

/* out (N,C), mean (N), rstd (N) written; out = (x - mean) * rstd * weight + bias with
 * rstd = 1 / sqrt(var + 1e-5), var the biased variance over the C channels. */
void ref_layernorm_forward(double* out, double* mean, double* rstd, const double* inp,
                           const double* weight, const double* bias, int N, int C);
/* dinp (N,C), dweight (C), dbias (C) accumulated. mean, rstd as written by the forward. */
void ref_layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                            const double* inp, const double* weight, const double* mean,
                            const double* rstd, int N, int C);

/* out (N,OC) written = inp (N,C) . weight (OC,C)^T + bias (OC); bias may be NULL. */
void ref_matmul_forward(double* out, const double* inp, const double* weight, const double* bias,
                        int N, int C, int OC);
/* dinp (N,C) written (skipped if NULL); dweight (OC,C), dbias (OC) accumulated (dbias may be
 * NULL). */
void ref_matmul_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                         const double* inp, const double* weight, int N, int C, int OC);

/* GELU, tanh approximation: out = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). out written;
 * in place allowed. */
void ref_gelu_forward(double* out, const double* inp, size_t n);
/* dinp written = gelu'(inp) * dout; in place (dinp == dout) allowed. */
void ref_gelu_backward(double* dinp, const double* inp, const double* dout, size_t n);

/* out (B,T,C) written = x + drop(branch); out may alias branch. */
void ref_residual_dropout_forward(double* out, const double* x, const double* branch,
                                  int B, int T, int C, uint32_t g0, uint64_t seed, Dropout drop);
/* dy (B,T,C) written = keep * scale * dout; may alias dout. */
void ref_dropout_backward(double* dy, const double* dout, int B, int T, int C, uint32_t g0,
                          uint64_t seed, Dropout drop);

/* losses (N) written: -log softmax(logits[n, :V])[targets[n]]; logits (N, Vp), the padded
 * columns V..Vp-1 are never read. */
void ref_crossentropy_forward(double* losses, const double* logits, const int* targets,
                              int N, int V, int Vp);
/* In place: logits (N, Vp) become dloss * (softmax(logits[n, :V]) - onehot(targets[n])) on the
 * real columns and exactly 0 on the padded ones. This is the gradient of dloss * sum_n losses[n]. */
void ref_crossentropy_backward(double* logits, const int* targets, double dloss,
                               int N, int V, int Vp);

/* Sum of x[i]^2, in index order. */
double ref_sum_squares(const double* x, size_t n);
/* x *= s. */
void ref_scale_inplace(double* x, size_t n, double s);

/* AdamW on one tensor, t = optimizer step + 1:
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *   p = p (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps). */
void ref_adamw_update(double* params, const double* grads, double* m, double* v, size_t n,
                      double lr, double beta1, double beta2, double eps, double weight_decay, int t);

/* RoPE in float64, in place on the q and k heads of qkv (B, T, (NH + 2 NKV) HD): pair d of a
 * head, at (d, d + HD/2) (layout 0, NeoX) or (2d, 2d + 1) (layout 1, GPT-J), turns by the angle
 * (pos0 + t) base^(-2d/HD), computed here in double. */
void ref_rope_forward(double* qkv, int B, int T, int NH, int NKV, int HD, int base, int layout,
                      int pos0);

#endif
