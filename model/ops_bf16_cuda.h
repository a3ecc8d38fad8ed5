/* model/ops_bf16_cuda.h — the matmuls of model/ops.h with bf16 operands, through cuBLASLt
 * (model/ops_bf16_cuda.cu), for the trainer's bf16 precision. Drop-in twins of
 * matmul_forward_cuda / matmul_backward_cuda (model/ops_cuda.h): the same signatures and the same
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

#include "model/backend.h"   /* OpCalls */

#ifdef __cplusplus
extern "C" {
#endif

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
