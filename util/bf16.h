/* util/bf16.h — bfloat16 on the host: the conversions the CPU references use, bit for bit
 * what CUDA's __float2bfloat16_rn and __bfloat162float give.
 *
 * bf16 is the top half of an IEEE fp32: 1 sign bit, the same 8 exponent bits, 7 stored mantissa
 * bits. So bf16 -> fp32 is exact (append 16 zero bits), and fp32 -> bf16 rounds away the low 16
 * bits: to nearest, ties to the even result (the low bit of the kept half 0). Infinities stay
 * infinities, values past the largest bf16 round to infinity, denormals round like any other
 * value (no flush to zero), and every NaN becomes the one NaN 0x7fff (sign cleared, all mantissa
 * bits set), as CUDA's cuda_bf16.h does off the device.
 *
 * The emulation's __float2bfloat16_rn (cuda/emu/cuda_emu.h) is this function, so kernels run
 * through the emulation convert exactly as the host reference does; tests/cuda/test_cuda_bf16.cu
 * holds both to an independent oracle and, on a GPU, holds the hardware's cvt.rn.bf16.f32 to them.
 *
 * Plain C99, also valid C++; bits travel as uint16_t (a bf16) and uint32_t (two of them).
 */
#ifndef SEEDGPT_BF16_H
#define SEEDGPT_BF16_H

#include <stdint.h>
#include <string.h>

#define SG_BF16_NAN 0x7fffu

/* fp32 -> bf16 bits, round to nearest, ties to even */
static inline uint16_t sg_bf16_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return SG_BF16_NAN;
    /* adding 0x7fff rounds a remainder above half up and one below down; the kept half's low bit
     * breaks the tie at exactly half. A carry out of the mantissa bumps the exponent, which is
     * the correctly rounded result (up to infinity past the largest finite bf16). */
    uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

/* bf16 bits -> fp32, exact */
static inline float sg_bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* x rounded to bf16 and back: the value a bf16 tensor holds for x */
static inline float sg_bf16_round(float x) { return sg_bf16_to_float(sg_bf16_from_float(x)); }

/* two bf16 in one 32-bit register, as tensor-core fragments hold them: lo in bits 0..15 (the
 * element with the lower index), hi in bits 16..31 */
static inline uint32_t sg_bf16x2_bits(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

#endif
