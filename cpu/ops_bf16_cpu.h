/* cpu/ops_bf16_cpu.h — the CPU ops of --precision bf16 (cpu/ops_bf16_cpu.c and
 * attention/flash_bf16_cpu.c), with the contracts of model/ops.h and attention/attention.h and the
 * table's types (model/backend.h): the arguments typed void* are bf16 (uint16_t bits), every
 * other tensor fp32. A bf16 output is rounded once, to nearest even, by the op that produces it.
 */
#ifndef SEEDGPT_OPS_BF16_CPU_H
#define SEEDGPT_OPS_BF16_CPU_H

#include <stddef.h>
#include <stdint.h>
#include "random/philox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst (n) = src (n) rounded to bf16 (the weights' operand copy) */
void round_to_bf16_cpu(void* dst, const float* src, size_t n);
/* adamw_update (model/ops.h) that also writes params_act (n, bf16) = the updated params rounded:
 * the weights' operand copy made in the optimizer's pass, not in a second one */
void adamw_update_bf16(float* params, void* params_act, const float* grads, float grad_scale,
                       float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t);

/* layernorm_forward with a bf16 out: the fp32 arithmetic of cpu/ops_cpu.c, each output rounded */
void layernorm_forward_bf16(void* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C);
/* out (N, OC) = inp (N, C) . weight (OC, C)^T + bias through gemm_bf16; out_dtype DT_FP32 (out is
 * float*) or DT_BF16 (out rounded once, the bias added first) */
void matmul_forward_bf16(void* out, int out_dtype, const void* inp, const void* weight,
                         const float* bias, int N, int C, int OC);
/* dinp = dout . weight and dweight += dout^T . inp through gemm_bf16, dout rounded to bf16 as
 * the product packs it (it stays fp32 in memory); dbias += the column sums of the fp32 dout */
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const void* inp, const void* weight, int N, int C, int OC);
/* GELU of bf16 inputs: fp32 arithmetic (cpu/ops_cpu.c's), the forward's output rounded */
void gelu_forward_bf16(void* out, const void* inp, size_t n);
void gelu_backward_bf16(float* dinp, const void* inp, const float* dout, size_t n);
/* RoPE on bf16 q and k heads: each pair read, rotated in fp32, rounded again (the one activation
 * rounded twice: after the QKV product and after the rotation) */
void rope_forward_bf16(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
                       int NKV, int HD, int layout, int pos0);

/* the bf16 attention (attention/flash_bf16_cpu.c) is declared in attention/attention.h */

#ifdef __cplusplus
}
#endif
#endif
