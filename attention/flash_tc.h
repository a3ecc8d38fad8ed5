/* attention/flash_tc.h — the bf16 tensor-core fused causal attention with dropout
 * (attention/flash_tc.cu): forward and backward; the bf16 table's entries, on bf16 qkv and o as
 * the trainer's bf16 precision stores them; and fp32-interface wrappers with the signatures of
 * attention/attention_cuda.h (fp32 qkv rounded at each call: the kernel benchmarks' and tests'). Held to
 * attention/flash_cpu.c by tests/cuda/test_cuda_flash_tc.cu.
 *
 * The layouts of attention/attention.h, every pointer device memory:
 *   qkv  (B, T, (NH + 2*NKV) * HD): bf16 bits (uint16_t) for the _tc_ kernels, fp32 for the
 *        wrappers, which round it to bf16 (to nearest even) before use;
 *   out  (B, T, NH*HD) fp32;  lse (B, NH, T) fp32, the log-sum-exp of the scaled scores before
 *   dropout;  dout (B, T, NH*HD) fp32;  dqkv (B, T, (NH + 2*NKV) * HD) fp32, every element written.
 * The tensor-core kernels take head dims 16, 32, 64 and 128, and qkv_bf16 on a 16-byte boundary
 * (its tiles are loaded 16 bytes at a time); NKV must divide NH. Keep bits:
 * philox_attn_draw (DESIGN §3), bit-identical to the CPU's. Deterministic: no atomics, every sum
 * in a fixed order, so two runs give the same bits. */
#ifndef SEEDGPT_FLASH_TC_H
#define SEEDGPT_FLASH_TC_H

#include <stddef.h>
#include <stdint.h>
#include "random/philox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 for the head dims the tensor-core kernels take (16, 32, 64, 128), else 0 */
int attention_tc_supports_hd(int HD);

/* Which kernels the calls below run, as the environment says now: "new" (SEEDGPT_KERNELS unset,
 * empty or new: ldmatrix, cp.async, two-stage pipelines) or "baseline" (SEEDGPT_KERNELS=baseline:
 * the first version, the same bits). Another value is refused in one line by every call. */
const char* attention_tc_kernels(void);
/* Which backward attention_backward_tc_cuda runs at head dim HD now: "fused" (one kernel for dK,
 * dV and dQ's per-key-tile slices, then their sum in a fixed order: SEEDGPT_ATTN_BACKWARD=fused,
 * or unset at head dims up to 64), "split" (dK/dV, then dQ: SEEDGPT_ATTN_BACKWARD=split, unset at
 * head dim 128, or a device whose shared memory does not hold the fused kernel's) or "baseline"
 * (SEEDGPT_KERNELS=baseline). */
const char* attention_tc_backward_kernels(int HD);
/* The fused backward runs on a chunk of (b, h) heads at a time: as many as budget_floats of dQ
 * slices hold, but enough for min_blocks blocks (a head has ceil(T / 64)), at least one; the
 * scratch below counts one chunk. The defaults: 128 MiB of slices, 1024 blocks. For tests, which
 * set smaller chunks (0, 0: one head a chunk) and then the defaults again. */
#define ATTENTION_TC_DQ_BUDGET ((size_t)32 << 20)
#define ATTENTION_TC_DQ_MIN_BLOCKS 1024
void attention_tc_dq_chunking(size_t budget_floats, int min_blocks);

void attention_forward_tc_cuda(float* out, float* lse, const uint16_t* qkv_bf16,
                               int B, int T, int NH, int NKV, int HD,
                               uint32_t g0, uint64_t attn_seed, Dropout drop);

/* Floats of scratch attention_backward_tc_cuda needs: D (B, NH, T), with NKV < NH the
 * per-query-head partial sums of dK and dV, 2 (B, T, NH, HD), and the fused backward's dQ slices
 * of one chunk of heads (nqt (nqt + 1) / 2 tiles of 64 x HD a head, nqt = ceil(T / 64)). */
size_t attention_backward_tc_scratch_floats(int B, int T, int NH, int NKV, int HD);
/* out and lse: the forward's outputs (o after dropout); dout: the gradient of out. dqkv must start
 * on 16 bytes: until dQ's pass writes them, its dq columns hold dO rounded to bf16. */
void attention_backward_tc_cuda(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv_bf16,
                                const float* out, const float* lse, int B, int T, int NH, int NKV, int HD,
                                uint32_t g0, uint64_t attn_seed, Dropout drop);

/* ---- sm_75 (Turing): fp16 operands through mma.sync m16n8k8 -------------------------------
 * The same contract as attention_forward_tc_cuda / attention_backward_tc_cuda with fp16 in place
 * of bf16: qkv_f16 (B, T, (NH + 2 NKV) HD) holds fp16 bits (util/fp16.h, sg_fp16_from_float;
 * 16-byte aligned); out (fp32), lse (fp32: the softmax statistics never leave fp32), dout and
 * dqkv (fp32) as there; scratch: attention_backward_act_scratch_floats_fp16_cuda. P (after dropout), dO,
 * m p scale and ds are rounded to fp16 as they become mma operands, the rest is fp32. The keep
 * bits are philox_attn_draw's at (seed, g0 + b, h, i, j), the CPU's and every other kernel's.
 * Runs the baseline tensor-core kernels (plain shared-memory loads: Turing has no cp.async) on
 * sm_75 and newer; a head dim whose kernels do not fit the device's shared memory is refused in
 * one line (attention_tc_f16_supports_hd: 16, 32, 64 on sm_75; 128 too from sm_80).
 * The fp16 table reaches them through attention_forward_fp16_act_cuda below. fp16's largest value
 * is 65504: scores are fp32, but q, k, v, dO and ds must stay in range (the caller scales the loss). */
int attention_tc_f16_supports_hd(int HD);
void attention_forward_tc_f16_cuda(float* out, float* lse, const uint16_t* qkv_f16, int B, int T, int NH, int NKV,
                                   int HD, uint32_t g0, uint64_t attn_seed, Dropout drop);
void attention_backward_tc_f16_cuda(float* dqkv, float* scratch, const float* dout, const uint16_t* qkv_f16,
                                    const float* out, const float* lse, int B, int T, int NH, int NKV, int HD,
                                    uint32_t g0, uint64_t attn_seed, Dropout drop);

/* The fp32 interface, drop-in for attention_forward_cuda / attention_backward_cuda: q, k, v are
 * rounded to bf16 (a kernel, into scratch) and the tensor-core kernels run on them. For a head
 * dim they do not take (any other HD up to 128), the rounded values, as fp32, go through the fp32
 * kernels of attention/flash_cuda.cu instead: the same bf16 inputs, fp32 products. The forward's
 * copy lives in a grow-only block of device_alloc_cuda (counted in the peak); the backward's in
 * `scratch`, sized by attention_backward_scratch_floats_bf16_cuda (nthreads is ignored). */
void attention_forward_bf16_cuda(float* out, float* lse, const float* qkv,
                                 int B, int T, int NH, int NKV, int HD,
                                 uint32_t g0, uint64_t attn_seed, Dropout drop);
size_t attention_backward_scratch_floats_bf16_cuda(int B, int T, int NH, int NKV, int HD, int nthreads);
/* The forward's block at the size a call of this shape asks for, and its allocation now (a
 * model's build reserves it, so the forward allocates nothing afterwards). */
size_t attention_forward_scratch_bytes_bf16_cuda(int B, int T, int NH, int NKV, int HD);
void attention_reserve_forward_scratch_bf16_cuda(int B, int T, int NH, int NKV, int HD);
void attention_backward_bf16_cuda(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                  const float* out, const float* lse,
                                  int B, int T, int NH, int NKV, int HD,
                                  uint32_t g0, uint64_t attn_seed, Dropout drop);

/* The bf16 table's attention (model/backend.c): qkv (bf16 bits) and out (bf16 bits) as the
 * activations store them, lse fp32; the signatures of model/backend.h's attention entries. The
 * tensor-core kernels read qkv in place (it must start on 16 bytes) and the forward writes o
 * rounded once to bf16; the backward reads that o for D. Any other head dim up to 128: the fp32
 * kernels on the bf16 values widened into scratch, the forward's o rounded into out. */
void attention_forward_bf16_act_cuda(void* out, float* lse, const void* qkv,
                                     int B, int T, int NH, int NKV, int HD,
                                     uint32_t g0, uint64_t attn_seed, Dropout drop);
/* The forward's scratch (0 on the tensor-core path) and its allocation now, at build. */
size_t attention_forward_act_scratch_bytes_bf16_cuda(int B, int T, int NH, int NKV, int HD);
void attention_reserve_forward_act_scratch_bf16_cuda(int B, int T, int NH, int NKV, int HD);
size_t attention_backward_act_scratch_floats_bf16_cuda(int B, int T, int NH, int NKV, int HD, int nthreads);
void attention_backward_bf16_act_cuda(float* dqkv, float* scratch, const float* dout, const void* qkv,
                                      const void* out, const float* lse,
                                      int B, int T, int NH, int NKV, int HD,
                                      uint32_t g0, uint64_t attn_seed, Dropout drop);

/* The fp16 table's attention (model/backend.c): qkv and out fp16 bits as the activations store
 * them, lse fp32. tensor_cores: the device runs the sm_75 kernels (cuda/arch.h's
 * fp16_tensor_cores); with it, and a head dim attention_tc_f16_supports_hd takes, those kernels
 * read qkv in place (16-byte aligned) and write o rounded once to fp16; otherwise the fp32 kernels
 * on the fp16 values widened into scratch, o rounded into out. The scratch functions answer for the
 * same choice. */
void attention_forward_fp16_act_cuda(int tensor_cores, void* out, float* lse, const void* qkv, int B, int T,
                                     int NH, int NKV, int HD, uint32_t g0, uint64_t attn_seed, Dropout drop);
size_t attention_forward_act_scratch_bytes_fp16_cuda(int tensor_cores, int B, int T, int NH, int NKV, int HD);
void attention_reserve_forward_act_scratch_fp16_cuda(int tensor_cores, int B, int T, int NH, int NKV, int HD);
size_t attention_backward_act_scratch_floats_fp16_cuda(int tensor_cores, int B, int T, int NH, int NKV, int HD,
                                                       int nthreads);
void attention_backward_fp16_act_cuda(int tensor_cores, float* dqkv, float* scratch, const float* dout,
                                      const void* qkv, const void* out, const float* lse, int B, int T, int NH,
                                      int NKV, int HD, uint32_t g0, uint64_t attn_seed, Dropout drop);

#ifdef __cplusplus
}
#endif
#endif
