/* cuda/ops_cuda.h — the CUDA twins of model/ops.h (cuda/ops_cuda.cu) and the CUDA backend's
 * memory functions (cuda/device_memory.h). Same signatures and contracts as the CPU ops; every
 * pointer is device memory. Only model/backend.c and the CUDA tests include this.
 */
#ifndef SEEDGPT_OPS_CUDA_H
#define SEEDGPT_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include "random/philox.h"
#include "model/backend.h"        /* OpCalls */
#include "cuda/device_memory.h"   /* the backend's memory: device_alloc_cuda, ... */

#ifdef __cplusplus
extern "C" {
#endif

void encoder_forward_cuda(float* out, const int* inp, const float* wte, const float* wpe,
                          int B, int T, int C, uint32_t g0, uint64_t embd_seed, Dropout drop);
/* the same at global positions t0 .. t0+T-1 (context parallelism: model/ops.h's _at twins) */
void encoder_forward_at_cuda(float* out, const int* inp, const float* wte, const float* wpe,
                             int B, int T, int t0, int C, uint32_t g0, uint64_t embd_seed,
                             Dropout drop);
void encoder_backward_cuda(float* dwte, float* dwpe, const float* dout, const int* inp,
                           int B, int T, int C);
void layernorm_forward_cuda(float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C);
void layernorm_backward_cuda(float* dinp, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* weight, const float* mean,
                             const float* rstd, int N, int C);
void matmul_forward_cuda(float* out, const float* inp, const float* weight, const float* bias,
                         int N, int C, int OC);
void matmul_backward_cuda(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int N, int C, int OC);
/* matmul_backward_cuda's two products, one at a time (the bf16 matmuls fall back to them, product
 * by product, where cuBLASLt refuses one): dinp (N,C) written = dout . weight; dweight (OC,C)
 * accumulated += dout^T . inp; fp32 cuBLAS, the same calls as matmul_backward_cuda's */
void matmul_backward_dinp_cuda(float* dinp, const float* dout, const float* weight, int N, int C, int OC);
void matmul_backward_dweight_cuda(float* dweight, const float* dout, const float* inp, int N, int C, int OC);
/* dbias (OC) += the column sums of dout (N, OC), in two fixed passes (matmul_backward_cuda's
 * bias gradient; the bf16 matmuls share it, so their dbias has the same bits) */
void bias_backward_cuda(float* dbias, const float* dout, int N, int OC);
void gelu_forward_cuda(float* out, const float* inp, size_t n);
void gelu_backward_cuda(float* dinp, const float* inp, const float* dout, size_t n);
void residual_dropout_forward_cuda(float* out, const float* x, const float* branch,
                                   int B, int T, int C, uint32_t g0, uint64_t seed, Dropout drop);
void dropout_backward_cuda(float* dy, const float* dout, int B, int T, int C, uint32_t g0,
                           uint64_t seed, Dropout drop);
void residual_dropout_forward_at_cuda(float* out, const float* x, const float* branch, int B,
                                      int T, int t0, int C, uint32_t g0, uint64_t seed,
                                      Dropout drop);
void dropout_backward_at_cuda(float* dy, const float* dout, int B, int T, int t0, int C,
                              uint32_t g0, uint64_t seed, Dropout drop);
/* rows x width floats from src (row stride src_stride) to dst (row stride dst_stride) */
void copy_rows_cuda(float* dst, size_t dst_stride, const float* src, size_t src_stride,
                    size_t rows, size_t width);
void rope_forward_cuda(float* qkv, const float* cos, const float* sin, int B, int T, int NH,
                       int NKV, int HD, int layout, int pos0);
void rope_backward_cuda(float* dqkv, const float* cos, const float* sin, int B, int T, int NH,
                        int NKV, int HD, int layout, int pos0);
void drop_path_cuda(float* y, const float* x, int B, int T, int C, uint32_t g0, uint64_t seed,
                    Dropout drop);
void crossentropy_forward_cuda(float* losses, const float* logits, const int* targets,
                               int N, int V, int Vp);
void crossentropy_backward_cuda(float* logits, const int* targets, float dloss, int N, int V,
                                int Vp);
double sum_squares_cuda(const float* x, size_t n);

/* The ops' one device scratch (column-sum partials, the encoder backward's token buckets, the
 * norm's partials): the most bytes a model's calls ask of it, and its allocation at that size
 * now (it only grows, so a reserved scratch is never allocated again by those calls). */
size_t ops_scratch_bytes_cuda(const OpCalls* calls);
void ops_reserve_scratch_cuda(const OpCalls* calls);
void scale_inplace_cuda(float* x, size_t n, float s);
void adamw_update_cuda(float* params, const float* grads, float grad_scale, float* m, float* v, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay, int t);

#ifdef __cplusplus
}
#endif
#endif
