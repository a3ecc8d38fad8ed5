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

/* The kernels' A/B switch: 1 when the environment says SEEDGPT_KERNELS=baseline, 0 when it is
 * unset, empty or "new"; any other value ends the run with one line. Read at every call (a getenv,
 * negligible beside a launch), so a benchmark or a test may flip it between calls. Under
 * "baseline" each op whose kernels were rewritten for speed runs the kernels it had before
 * (the same bits where the arithmetic was kept: test_cuda_ops, test_cuda_bf16_ops), so one build
 * times old against new on one GPU (scripts/gpu_perf.sh). */
int kernels_baseline_cuda(void);
/* how many times a kernel of the new side has been launched in this process */
unsigned long long kernels_new_launches_cuda(void);

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
/* the same bias gradient as bias_backward_cuda, and dout16 (N, OC) = dout rounded to bf16 once
 * (the backward products' operand), from one read of dout. Returns 0 without doing anything
 * where it does not apply (the switch at baseline, OC not a multiple of 4, a pointer not 16-byte
 * aligned): the caller then makes the two passes. */
int bias_backward_round_bf16_cuda(float* dbias, void* dout16, const float* dout, int N, int OC);
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
/* ZeRO-1's norm (model/backend.h): the partials of sum_squares_cuda's blocks of x, into out (host
 * memory, one a block); and n such partials (host memory) added by sum_squares_cuda's second pass
 * itself, on the device, so the sum has its bits */
void sum_squares_blocks_cuda(double* out, const float* x, size_t n);
double sum_partials_cuda(const double* partials, size_t n);
/* residual_dropout_forward_cuda, then layernorm_forward_cuda of its output (ln_out fp32), in one
 * pass; the bf16 and fp16 twins write ln_out in 16 bits (model/backend.h, residual_layernorm_forward) */
void residual_layernorm_forward_cuda(float* out, const float* x, const float* branch, int B,
                                     int T, int C, uint32_t g0, uint64_t seed, Dropout drop,
                                     void* ln_out, float* mean, float* rstd, const float* weight,
                                     const float* bias);
void residual_layernorm_forward_bf16_cuda(float* out, const float* x, const float* branch, int B,
                                          int T, int C, uint32_t g0, uint64_t seed, Dropout drop,
                                          void* ln_out, float* mean, float* rstd,
                                          const float* weight, const float* bias);
void residual_layernorm_forward_fp16_cuda(float* out, const float* x, const float* branch, int B,
                                          int T, int C, uint32_t g0, uint64_t seed, Dropout drop,
                                          void* ln_out, float* mean, float* rstd,
                                          const float* weight, const float* bias);
/* every parameter tensor at once (model/backend.h, adamw_update_tensors, sum_squares_tensors):
 * the same bits as adamw_update_cuda (then round_to_bf16_cuda into params_act, when not NULL) and
 * sum_squares_cuda, tensor by tensor */
void adamw_update_tensors_cuda(float* params, void* params_act, const float* grads,
                               float grad_scale, float* m, float* v, int ntensors,
                               const size_t* offset, const size_t* size, const float* wd, float lr,
                               float beta1, float beta2, float eps, int t);
void sum_squares_tensors_cuda(double* out, const float* x, int ntensors, const size_t* offset,
                              const size_t* size);

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
