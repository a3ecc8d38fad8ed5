/* attention/flash_tc.h — the bf16 tensor-core forward of the fused causal attention with dropout
 * (attention/flash_tc.cu). Not used by the trainer yet: a step towards a tensor-core flash
 * attention, held to attention/flash_cpu.c by tests/cuda/test_cuda_flash_tc.cu.
 *
 * The layouts of attention/attention.h, with q, k, v in bf16:
 *   qkv  (B, T, (NH + 2*NKV) * HD) bf16, passed as its bits (uint16_t, device memory);
 *   out  (B, T, NH*HD) fp32;  lse (B, NH, T) fp32, the log-sum-exp of the scaled scores before
 *   dropout. Head dims 64 and 128; NKV must divide NH. Keep bits: philox_attn_draw (DESIGN §3). */
#ifndef SEEDGPT_FLASH_TC_H
#define SEEDGPT_FLASH_TC_H

#include <stdint.h>
#include "philox.h"

#ifdef __cplusplus
extern "C" {
#endif

void attention_forward_tc_cuda(float* out, float* lse, const uint16_t* qkv_bf16,
                               int B, int T, int NH, int NKV, int HD,
                               uint32_t g0, uint64_t attn_seed, Dropout drop);

#ifdef __cplusplus
}
#endif
#endif
