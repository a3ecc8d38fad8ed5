/* cuda/ops_bf16_cuda.h — the CUDA ops of --precision bf16, and their fp16 twins.
 *
 * The backend table's ops (model/backend.c's CUDA bf16 table): the contracts of model/ops.h with
 * the table's types (model/backend.h), the arguments typed void* bf16 bits in device memory, every
 * other tensor fp32; the twins of the CPU bf16 table's (cpu/ops_bf16_cpu.h), rounding where they
 * round: a bf16 output is rounded once, to nearest even, by the op that produces it. The
 * element-wise ones live in cuda/ops_cuda.cu beside their fp32 kernels (one template each), the
 * products in cuda/ops_bf16_cuda.cu, the attention in attention/flash_tc.h.
 *
 * Below them, the fp32-interface matmuls (fp32 tensors in memory, the operands rounded at each
 * call), which the kernel benchmarks of dev/cuda and the tests call. Drop-in twins of
 * matmul_forward_cuda / matmul_backward_cuda (cuda/ops_cuda.h): the same signatures and the same
 * contracts (model/ops.h: what is written, what is accumulated, which pointers may be NULL), every
 * pointer device memory, every tensor fp32 in memory. What changes is the arithmetic of the
 * products: each GEMM operand (input, weight, output gradient) is rounded to bf16 (to nearest,
 * ties to even) into a counted scratch, the products of two bf16 are exact, and they are summed in
 * fp32 on the tensor cores; outputs and gradients are fp32. Biases and the bias gradient stay fp32
 * (the bias gradient is the same two-pass column sum as matmul_backward_cuda's, bit for bit).
 *
 * Deterministic: the same call with the same shapes (and pointers of the same alignment, up to
 * 16 bytes) gives the same bits every time, so a recomputed forward equals the stored one.
 * A product cuBLASLt has no algorithm for (or refuses with NOT_SUPPORTED) is computed by the fp32
 * op's cuBLAS call instead, with one line on stderr the first time that problem is seen.
 * Only model/backend.c and the CUDA tests include this.
 */
#ifndef SEEDGPT_OPS_BF16_CUDA_H
#define SEEDGPT_OPS_BF16_CUDA_H

#include <stddef.h>
#include "model/backend.h"   /* OpCalls, DT_BF16 */

#ifdef __cplusplus
extern "C" {
#endif

/* dst (n) = src (n) rounded to bf16: the weights' operand copy, made once per update */
void round_to_bf16_cuda(void* dst, const float* src, size_t n);
/* layernorm_forward_cuda's arithmetic, each output rounded (mean, rstd fp32) */
void layernorm_forward_bf16_cuda(void* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C);
/* GELU of bf16 inputs, gelu_forward_cuda's arithmetic, the forward's output rounded */
void gelu_forward_bf16_cuda(void* out, const void* inp, size_t n);
void gelu_backward_bf16_cuda(float* dinp, const void* inp, const float* dout, size_t n);
/* the bf16 MLP's pre-activation and GELU from its GEMM's fp32 result src (n): pre = src rounded
 * once, act = GELU(pre) rounded, both from one read of src (what round_to_bf16_cuda, then
 * gelu_forward_bf16_cuda give). Returns 0 without doing anything where it does not apply (the
 * switch at baseline, n not a multiple of 8, a pointer not 16-byte aligned). */
int round_gelu_bf16_cuda(void* pre, void* act, const float* src, size_t n);
/* RoPE on bf16 q and k heads: each pair read, rotated in fp32, rounded again */
void rope_forward_bf16_cuda(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
                            int NKV, int HD, int layout, int pos0);
/* out (N, OC) = inp (N, C) . weight (OC, C)^T + bias, inp and weight bf16 as stored, fp32 sums,
 * the bias in the GEMM's epilogue; out in out_dtype: DT_FP32 (float*) or DT_BF16 (the sum plus
 * the bias rounded once) */
void matmul_forward_bf16_act_cuda(void* out, int out_dtype, const void* inp, const void* weight,
                                  const float* bias, int N, int C, int OC);
/* matmul_forward_bf16_act_cuda with a bf16 out, then gelu_forward_bf16_cuda(out_gelu, out),
 * in one call (model/backend.h, matmul_forward_gelu): the same bits, the fp32 result read once */
void matmul_forward_gelu_bf16_act_cuda(void* out, void* out_gelu, const void* inp,
                                       const void* weight, const float* bias, int N, int C, int OC);
/* dinp = bf16(dout) . weight (skipped if NULL) and dweight += bf16(dout)^T . inp, inp and weight
 * bf16 as stored; dout stays fp32 in memory and is rounded into the products' scratch; dbias +=
 * the column sums of the fp32 dout (bias_backward_cuda's, may be NULL) */
void matmul_backward_bf16_act_cuda(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const void* inp, const void* weight, int N, int C, int OC);
/* the classifier chunk's loss and gradient in one pass under bf16 operands (model/backend.h,
 * crossentropy_forward_backward_act): losses (N) = (max - l[target]) + log(sum exp(l - max)) in
 * fp32; dlogits = dloss (softmax - onehot) on [0, V), +0 on [V, Vp), rounded once to bf16 and
 * written over the logits: row n's Vp bf16 values at the start of fp32 row n (rows 2 Vp bf16
 * elements apart). fp32 exponentials: within docs/cuda.md's bound of the fp32 op. Under
 * SEEDGPT_KERNELS=baseline: the fp32 kernels, then the rounding into that form. */
void crossentropy_forward_backward_bf16_cuda(float* losses, float* logits, const int* targets,
                                             float dloss, int N, int V, int Vp);
/* matmul_backward_bf16_act_cuda with dout already bf16 (N rows, ld_dout elements apart, a multiple
 * of 8, 16-byte aligned), as the op above leaves it; dbias must be NULL */
void matmul_backward_dout_bf16_act_cuda(float* dinp, float* dweight, float* dbias, const void* dout,
                                        int ld_dout, const void* inp, const void* weight, int N, int C,
                                        int OC);
/* --precision fp16's twins of the ops above (util/fp16.h's rounding, __float2half_rn, where those
 * round to bf16; the products through cuBLASLt on CUDA_R_16F operands, fp32 sums): the CPU fp16
 * table's (cpu/ops_fp16_cpu.c) twins. No cross-entropy twin: the fp16 table takes the fp32
 * cross-entropy and rounds dlogits as its product reads them. */
void round_to_fp16_cuda(void* dst, const float* src, size_t n);
void layernorm_forward_fp16_cuda(void* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C);
void gelu_forward_fp16_cuda(void* out, const void* inp, size_t n);
void gelu_backward_fp16_cuda(float* dinp, const void* inp, const float* dout, size_t n);
void rope_forward_fp16_cuda(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
                            int NKV, int HD, int layout, int pos0);
void matmul_forward_fp16_act_cuda(void* out, int out_dtype, const void* inp, const void* weight,
                                  const float* bias, int N, int C, int OC);
void matmul_forward_gelu_fp16_act_cuda(void* out, void* out_gelu, const void* inp,
                                       const void* weight, const float* bias, int N, int C, int OC);
void matmul_backward_fp16_act_cuda(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const void* inp, const void* weight, int N, int C, int OC);

/* The device memory those keep (the padded operand copies they need, cuBLASLt's workspace)
 * for a model's calls, and its allocation now. */
size_t matmul_act_scratch_bytes_bf16_cuda(const OpCalls* calls);
void matmul_act_reserve_scratch_bf16_cuda(const OpCalls* calls);

/* One GEMM problem as the products above run it (the per-problem table of
 * tests/cuda/bench_ops_cuda.cu): D (m, n) column-major = op(A) (m, k) . op(B) (k, n) + beta D
 * [+ bias (m)], A and B bf16 column-major (ld lda, ldb) before their transposes (transa, transb:
 * 0 none, 1 transposed), D fp32 or, with d_bf16, bf16 (ld ldd); the same cached cuBLASLt plan, or
 * seedgpt's own kernel where cuBLASLt refuses. An fp32 D without bias is split in k where the
 * backward's products are (cuda/ops_bf16_cuda.cu, lt_split; not under SEEDGPT_KERNELS=baseline),
 * its partials in the products' scratch. */
void gemm_bf16_cuda(int transa, int transb, int m, int n, int k, const void* A, long long lda,
                    const void* B, long long ldb, float beta, void* D, int d_bf16, long long ldd,
                    const float* bias);

/* The last GEMM problem's plan in one line: cuBLASLt's algorithm configuration (cublasLt.h's
 * CUBLASLT_ALGO_CONFIG_* ids: algorithm, tile, stages, cluster shape, swizzle, split-K count and
 * reduction scheme) and the heuristic's waves (tiles over what the SMs hold at once), and the
 * slices seedgpt split it into, if any, for the benchmarks' per-problem table */
void gemm_bf16_describe_last_cuda(char* line, size_t cap);

/* cuBLASLt's workspace, allocated once through device_alloc_cuda (counted in the peak) */
#define SG_LT_WORKSPACE_BYTES ((size_t)32 << 20)

/* out (N,OC) written = bf16(inp) (N,C) . bf16(weight)(OC,C)^T + bias(OC) (bias fp32, may be NULL) */
void matmul_forward_bf16_cuda(float* out, const float* inp, const float* weight, const float* bias,
                              int N, int C, int OC);
/* dinp (N,C) written = bf16(dout) . bf16(weight) (skipped if NULL); dweight (OC,C) accumulated
 * += bf16(dout)^T . bf16(inp); dbias (OC) accumulated += the column sums of dout in fp32 (may be
 * NULL) */
void matmul_backward_bf16_cuda(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int N, int C, int OC);

/* The device memory these products keep: the operand copies' scratch at the most a model's
 * calls ask of it, and cuBLASLt's workspace; and their allocation now (the build reserves them,
 * so no product allocates afterwards). */
size_t matmul_scratch_bytes_bf16_cuda(const OpCalls* calls);
void matmul_reserve_scratch_bf16_cuda(const OpCalls* calls);

#ifdef __cplusplus
}
#endif
#endif
