/* cpu/ops_bf16_cpu.h — the CPU ops of --precision bf16 and fp16 (cpu/ops_bf16_cpu.c, compiled
 * once per type, and the attention twins of attention/flash_cpu.c), with the contracts of
 * model/ops.h and attention/attention.h and the table's types (model/backend.h): the arguments
 * typed void* are 16-bit (uint16_t bits of a bf16, or of an fp16), every other tensor fp32. A
 * 16-bit output is rounded once, to nearest even, by the op that produces it.
 */
#ifndef SEEDGPT_OPS_BF16_CPU_H
#define SEEDGPT_OPS_BF16_CPU_H

#include <stddef.h>
#include <stdint.h>
#include "random/philox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ops, declared once per 16-bit type: S is _bf16 or _fp16, R the rounding's name.
 * round_to_X_cpu: dst (n) = src (n) rounded (the weights' operand copy).
 * adamw_update: adamw_update (model/ops.h) that also writes params_act (n, 16-bit) = the updated
 *   params rounded: the weights' operand copy made in the optimizer's pass, not in a second one.
 * layernorm_forward with a 16-bit out: the fp32 arithmetic of cpu/ops_cpu.c, each output rounded.
 * matmul_forward: out (N, OC) = inp (N, C) . weight (OC, C)^T + bias; out_dtype DT_FP32 (out is
 *   float*) or the table's act_dtype (out rounded once, the bias added first).
 * matmul_backward: dinp = dout . weight and dweight += dout^T . inp, dout rounded to the 16-bit
 *   type as the product reads it (it stays fp32 in memory); dbias += the column sums of the fp32
 *   dout.
 * gelu: fp32 arithmetic (cpu/ops_cpu.c's) on 16-bit inputs, the forward's output rounded.
 * rope_forward on 16-bit q and k heads: each pair read, rotated in fp32, rounded again (the one
 *   activation rounded twice: after the QKV product and after the rotation). */
#define OPS_ACT16_DECLS(S, R)                                                                     \
    void R(void* dst, const float* src, size_t n);                                               \
    void adamw_update##S(float* params, void* params_act, const float* grads, float grad_scale,  \
                         float* m, float* v, size_t n, float lr, float beta1, float beta2,       \
                         float eps, float weight_decay, int t);                                  \
    void layernorm_forward##S(void* out, float* mean, float* rstd, const float* inp,             \
                              const float* weight, const float* bias, int N, int C);             \
    void matmul_forward##S(void* out, int out_dtype, const void* inp, const void* weight,        \
                           const float* bias, int N, int C, int OC);                             \
    void matmul_backward##S(float* dinp, float* dweight, float* dbias, const float* dout,        \
                            const void* inp, const void* weight, int N, int C, int OC);          \
    void gelu_forward##S(void* out, const void* inp, size_t n);                                  \
    void gelu_backward##S(float* dinp, const void* inp, const float* dout, size_t n);            \
    void rope_forward##S(void* qkv, const float* cos, const float* sin, int B, int T, int NH,    \
                         int NKV, int HD, int layout, int pos0);
OPS_ACT16_DECLS(_bf16, round_to_bf16_cpu)
OPS_ACT16_DECLS(_fp16, round_to_fp16_cpu)

/* the 16-bit attention (attention/flash_bf16_cpu.c, flash_fp16_cpu.c) is declared in
 * attention/attention.h */

#ifdef __cplusplus
}
#endif
#endif
