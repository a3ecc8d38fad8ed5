/* cuda/act.h — the element of an operand activation inside a kernel (model/backend.h's
 * act_dtype): fp32, or bf16 bits (uint16_t) under --precision bf16. A kernel templated on the
 * element type reads through act_load (bf16 -> fp32 is exact) and writes through act_store (the
 * one rounding of a bf16 activation, to nearest even: __float2bfloat16_rn, bit for bit util/bf16.h's
 * sg_bf16_from_float). Under --precision fp16 the element is sg_h16 (fp16 bits; util/fp16.h's
 * conversions, bit for bit __float2half_rn and __half2float). With float the two are plain loads and stores, so the fp32 ops compiled
 * from the same template are unchanged.
 *
 * Below them, 16-byte accesses: act_load16 / act_store16 move ACT_VEC(ActT) elements (4 fp32 or
 * 8 bf16 or fp16) in one 16-byte global load or store, and ld_f4 / st_f4 four floats. The pointer plus the
 * index must be 16-byte aligned (the host checks it before it picks a kernel that uses them).
 * Under nvcc they are CUDA's float4 / uint4 accesses (ld.global.v4 in the PTX, which
 * tests/check_kernels_ops.sh looks for); in the emulation, a 16-byte memcpy (no aliasing through
 * another type). The values are the elements' own: a wider access changes no arithmetic.
 * Device code only; include after cuda/device.h.
 */
#ifndef SEEDGPT_CUDA_ACT_H
#define SEEDGPT_CUDA_ACT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* An fp16 activation (--precision fp16): its 16 bits, as a type of their own so that a kernel
 * templated on the element takes fp16's conversions where uint16_t takes bf16's. Two bytes, as
 * uint16_t: the same layouts, the same 16-byte pieces. */
struct sg_h16 {
    uint16_t bits;
};

static __device__ inline float act_load(const float* p, size_t i) { return p[i]; }
static __device__ inline float act_load(const uint16_t* p, size_t i) {
    return __bfloat162float(__ushort_as_bfloat16(p[i]));
}
static __device__ inline float act_load(const sg_h16* p, size_t i) { return sg_f16_to_float(p[i].bits); }
static __device__ inline void act_store(float* p, size_t i, float v) { p[i] = v; }
static __device__ inline void act_store(uint16_t* p, size_t i, float v) {
    p[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
/* fp16's one rounding, to nearest even: past 65504 it is infinite (the loss scale's overflow) */
static __device__ inline void act_store(sg_h16* p, size_t i, float v) { p[i].bits = sg_f16_bits_rn(v); }

/* ---- 16-byte accesses ------------------------------------------------------------------------ */

#ifdef SG_EMU
struct __align__(16) sg_f4 { float x, y, z, w; };
struct __align__(16) sg_u4 { uint32_t x, y, z, w; };
struct __align__(8) sg_u2 { uint32_t x, y; };
template <typename V> static inline V sg_ld(const void* p) { V v; memcpy(&v, p, sizeof v); return v; }
template <typename V> static inline void sg_st(void* p, V v) { memcpy(p, &v, sizeof v); }
#else
typedef float4 sg_f4;
typedef uint4 sg_u4;
typedef uint2 sg_u2;
template <typename V> static __device__ __forceinline__ V sg_ld(const void* p) {
    return *reinterpret_cast<const V*>(p);
}
template <typename V> static __device__ __forceinline__ void sg_st(void* p, V v) {
    *reinterpret_cast<V*>(p) = v;
}
#endif

/* four floats p[0..3] (p 16-byte aligned) in one access, as an array */
static __device__ inline void ld_f4(const float* p, float v[4]) {
    sg_f4 q = sg_ld<sg_f4>(p);
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
}
static __device__ inline void st_f4(float* p, const float v[4]) {
    sg_f4 q;
    q.x = v[0]; q.y = v[1]; q.z = v[2]; q.w = v[3];
    sg_st<sg_f4>(p, q);
}

/* the elements of an operand activation one 16-byte access moves */
template <typename ActT> struct ActVec;
template <> struct ActVec<float> { enum { N = 4 }; };
template <> struct ActVec<uint16_t> { enum { N = 8 }; };
template <> struct ActVec<sg_h16> { enum { N = 8 }; };
#define ACT_VEC(ActT) ((int)ActVec<ActT>::N)

/* v[0 .. ACT_VEC - 1] = the elements p[i ..], widened to fp32 (exact) */
static __device__ inline void act_load16(const float* p, size_t i, float v[4]) { ld_f4(p + i, v); }
static __device__ inline void act_load16(const uint16_t* p, size_t i, float v[8]) {
    sg_u4 q = sg_ld<sg_u4>(p + i);
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
    #pragma unroll
    for (int k = 0; k < 4; k++) {   /* the element with the lower index in the low half */
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}
static __device__ inline void act_load16(const sg_h16* p, size_t i, float v[8]) {
    sg_u4 q = sg_ld<sg_u4>(p + i);
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
    #pragma unroll
    for (int k = 0; k < 4; k++) {
        v[2 * k] = sg_f16_to_float((uint16_t)(w[k] & 0xffffu));
        v[2 * k + 1] = sg_f16_to_float((uint16_t)(w[k] >> 16));
    }
}
/* p[i ..] = v[0 .. ACT_VEC - 1], each rounded once under bf16 or fp16 (act_store's rounding) */
static __device__ inline void act_store16(float* p, size_t i, const float v[4]) { st_f4(p + i, v); }
static __device__ inline uint32_t bf16_pair(float lo, float hi) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16;
}
static __device__ inline void act_store16(uint16_t* p, size_t i, const float v[8]) {
    sg_u4 q;
    q.x = bf16_pair(v[0], v[1]);
    q.y = bf16_pair(v[2], v[3]);
    q.z = bf16_pair(v[4], v[5]);
    q.w = bf16_pair(v[6], v[7]);
    sg_st<sg_u4>(p + i, q);
}
static __device__ inline void act_store16(sg_h16* p, size_t i, const float v[8]) {
    sg_u4 q;
    uint32_t w[4];
    #pragma unroll
    for (int k = 0; k < 4; k++)
        w[k] = (uint32_t)sg_f16_bits_rn(v[2 * k]) | (uint32_t)sg_f16_bits_rn(v[2 * k + 1]) << 16;
    q.x = w[0]; q.y = w[1]; q.z = w[2]; q.w = w[3];
    sg_st<sg_u4>(p + i, q);
}
/* four bf16 p[i .. i + 3] = v rounded, in one 8-byte store (p + i 8-byte aligned) */
static __device__ inline void bf16_store4(uint16_t* p, size_t i, const float v[4]) {
    sg_u2 q;
    q.x = bf16_pair(v[0], v[1]);
    q.y = bf16_pair(v[2], v[3]);
    sg_st<sg_u2>(p + i, q);
}

/* a pointer the 16-byte accesses may use */
static inline int aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

#endif
