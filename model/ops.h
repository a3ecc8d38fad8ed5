/* model/ops.h — the compute ops the orchestrator (model/gpt.c) calls. Each has a CPU
 * implementation in cpu/ops_cpu.c (plain C + OpenMP, dense products through seedgpt's own
 * GEMM, cpu/gemm_cpu.c) that is the reference for its CUDA twin. Attention lives in
 * attention/attention.h.
 *
 * Conventions: N = B*T rows; tensors are row-major; "written" outputs are overwritten,
 * "accumulated" outputs are added to (parameter gradients always accumulate, so micro-batches
 * sum). Dropout is described by (seed, Dropout{thr, scale}) and the global sequence index g0 of
 * row block 0: element (b, t, c) is kept iff philox_elem_draw(seed, g0 + b, t, c) >= thr. No op
 * keeps a mask: the backward regenerates it. Every reduction runs over a fixed partition in a
 * fixed order, so results do not depend on the number of threads.
 */
#ifndef SEEDGPT_OPS_H
#define SEEDGPT_OPS_H

#include <stddef.h>
#include <stdint.h>
#include "random/philox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (B,T,C) written = drop(wte[inp[b,t]] + wpe[t]). inp (B,T); wte (Vp,C); wpe (maxT,C), or
 * NULL for a model without learned positions (RoPE): out = drop(wte[inp[b,t]]). */
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe,
                     int B, int T, int C, uint32_t g0, uint64_t embd_seed, Dropout drop);
/* dwte, dwpe accumulated from dout (B,T,C), the gradient of the embedding sum (after the
 * dropout's backward). dwpe NULL: no learned positions. */
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp,
                      int B, int T, int C);

/* out (N,C), mean (N), rstd (N) written; eps 1e-5. */
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C);
/* dinp accumulated (it is the residual stream's gradient); dweight, dbias accumulated. */
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C);

/* out (N,OC) written = inp (N,C) . weight(OC,C)^T + bias(OC) (bias may be NULL). */
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC);
/* dinp (N,C) written (skipped if NULL); dweight (OC,C) and dbias (OC) accumulated (dbias may be
 * NULL). */
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC);

/* GELU, tanh approximation. out written; in place allowed. */
void gelu_forward(float* out, const float* inp, size_t n);
/* dinp written = gelu'(inp) * dout; in place (dinp == dout) allowed. */
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

/* out (B,T,C) written = x + drop(branch); out may alias branch. */
void residual_dropout_forward(float* out, const float* x, const float* branch,
                              int B, int T, int C, uint32_t g0, uint64_t seed, Dropout drop);
/* dy (B,T,C) written = the dropout's backward of dout: mask * scale * dout; may alias dout. */
void dropout_backward(float* dy, const float* dout, int B, int T, int C, uint32_t g0,
                      uint64_t seed, Dropout drop);

/* Context parallelism (DESIGN §9): the same ops on a block whose row t is global position t0 + t
 * (wpe row and keep-bit counter alike). The plain ops are these with t0 = 0. */
void encoder_forward_at(float* out, const int* inp, const float* wte, const float* wpe,
                        int B, int T, int t0, int C, uint32_t g0, uint64_t embd_seed, Dropout drop);
void residual_dropout_forward_at(float* out, const float* x, const float* branch,
                                 int B, int T, int t0, int C, uint32_t g0, uint64_t seed,
                                 Dropout drop);
void dropout_backward_at(float* dy, const float* dout, int B, int T, int t0, int C, uint32_t g0,
                         uint64_t seed, Dropout drop);

/* RoPE pair layouts (GPTConfig.rope_layout). */
enum { ROPE_NEOX = 0, ROPE_GPTJ = 1 };

/* Rotary position embedding, in place on the query and key heads of qkv (B, T, QKV), QKV =
 * (NH + 2 NKV) HD: every pair (x0, x1) of every q and k head of row (b, t) becomes
 * (x0 cos - x1 sin, x0 sin + x1 cos) at angle (pos0 + t) theta_d; the v heads are untouched.
 * Pairs: layout ROPE_NEOX (d, d + HD/2), ROPE_GPTJ (2d, 2d + 1), d < HD/2. cos, sin (maxT, HD/2)
 * from gpt_rope_table; pos0 + T <= maxT. */
void rope_forward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int HD, int layout, int pos0);
/* The backward of rope_forward, in place on dqkv: the rotation is orthogonal, so the gradient of
 * the input is the gradient of the output rotated back, (dy0 cos + dy1 sin, -dy0 sin + dy1 cos). */
void rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int HD, int layout, int pos0);

/* Stochastic depth of a residual branch: y (B,T,C) written = x * keep(g) * scale, one keep bit
 * per sequence g = g0 + b, philox_depth_draw(seed, g) >= thr. Its backward is the same op on the
 * gradient (the same bit redrawn). thr == 0: y = x * scale (scale 1 at p = 0). y may alias x. */
void drop_path(float* y, const float* x, int B, int T, int C, uint32_t g0, uint64_t seed,
               Dropout drop);

/* losses (N) written: -log softmax(logits[n, :V])[targets[n]]. logits (N, Vp). */
void crossentropy_forward(float* losses, const float* logits, const int* targets,
                          int N, int V, int Vp);
/* In place: logits (N, Vp) become dlogits = dloss * (softmax - onehot) over the real vocab,
 * 0 on the padded columns. */
void crossentropy_backward(float* logits, const int* targets, float dloss, int N, int V, int Vp);
/* crossentropy_forward then crossentropy_backward on the same logits, in one pass over each row
 * (its softmax evaluated once): the same bits as the two calls. */
void crossentropy_forward_backward(float* losses, float* logits, const int* targets, float dloss,
                                   int N, int V, int Vp);

/* Sum of squares in double over a fixed partition of blocks, added in block order. */
double sum_squares(const float* x, size_t n);
void scale_inplace(float* x, size_t n, float s);

/* AdamW on one tensor: decoupled weight decay p -= lr*wd*p, then the bias-corrected Adam step.
 * t = optimizer step + 1. The gradient is grads[i] * grad_scale, one float product (the clip's
 * coefficient, 1 where clipping did not bite): what scaling grads in place and then updating
 * would use, without that pass. */
void adamw_update(float* params, const float* grads, float grad_scale, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t);

#ifdef __cplusplus
}
#endif
#endif
