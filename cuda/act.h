/* cuda/act.h — the element of an operand activation inside a kernel (model/backend.h's
 * act_dtype): fp32, or bf16 bits (uint16_t) under --precision bf16. A kernel templated on the
 * element type reads through act_load (bf16 -> fp32 is exact) and writes through act_store (the
 * one rounding of a bf16 activation, to nearest even: __float2bfloat16_rn, bit for bit util/bf16.h's
 * sg_bf16_from_float). With float the two are plain loads and stores, so the fp32 ops compiled
 * from the same template are unchanged. Device code only; include after cuda/device.h.
 */
#ifndef SEEDGPT_CUDA_ACT_H
#define SEEDGPT_CUDA_ACT_H

#include <stddef.h>
#include <stdint.h>

static __device__ inline float act_load(const float* p, size_t i) { return p[i]; }
static __device__ inline float act_load(const uint16_t* p, size_t i) {
    return __bfloat162float(__ushort_as_bfloat16(p[i]));
}
static __device__ inline void act_store(float* p, size_t i, float v) { p[i] = v; }
static __device__ inline void act_store(uint16_t* p, size_t i, float v) {
    p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

#endif
