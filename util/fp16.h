/* util/fp16.h — IEEE half precision (fp16, binary16) on the host: the conversions the CPU
 * references and the emulated fp16 tensor-core instruction use, bit for bit what CUDA's
 * __float2half_rn and __half2float give.
 *
 * fp16: 1 sign bit, 5 exponent bits (bias 15), 10 stored mantissa bits. The largest finite value
 * is 65504 (0x7bff); the smallest normal 2^-14 (0x0400); the smallest denormal 2^-24 (0x0001).
 * fp32 -> fp16 rounds to nearest, ties to even, at every magnitude: a value of 65520 or more (the
 * tie between 65504 and the next step, 65536, which is even) becomes infinity; values below 2^-14
 * round to the denormal grid of 2^-24 (no flush to zero), and 2^-25 (the tie between 0 and 2^-24)
 * to zero. Every NaN becomes the one NaN 0x7fff, as CUDA's cuda_fp16.h does off the device.
 * fp16 -> fp32 is exact (every fp16 is an fp32).
 *
 * Plain C99, also valid C++; bits travel as uint16_t (an fp16) and uint32_t (two of them).
 */
#ifndef SEEDGPT_FP16_H
#define SEEDGPT_FP16_H

#include <stdint.h>
#include <string.h>

#define SG_FP16_NAN 0x7fffu
#define SG_FP16_MAX 65504.0f

/* fp32 -> fp16 bits, round to nearest, ties to even */
static inline uint16_t sg_fp16_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return SG_FP16_NAN;
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);   /* 65520 and up, infinity too */
    uint32_t e = a >> 23;                                        /* fp32's biased exponent */
    if (e >= 113) {                                              /* 2^-14 and up: a normal fp16 */
        uint32_t h = ((e - 112) << 10) | ((a >> 13) & 0x3ffu);
        uint32_t rem = a & 0x1fffu;                              /* the 13 bits rounded away */
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;  /* a carry moves the exponent up */
        return (uint16_t)(sign | h);
    }
    if (e < 102) return sign;                                    /* below 2^-25: zero */
    /* a denormal: the count of 2^-24 steps, m 2^(e - 150) / 2^-24 = m >> (126 - e), rounded */
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t s = 126 - e;                                        /* 14 .. 24 */
    uint32_t q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;            /* 0x3ff + 1 is 2^-14, a normal */
    return (uint16_t)(sign | q);
}

/* fp16 bits -> fp32, exact (a NaN stays a NaN, its payload kept) */
static inline float sg_fp16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0) {                                                /* zero or a denormal: m 2^-24 */
        float v = (float)m * 0x1p-24f;
        memcpy(&u, &v, 4);
        u |= sign;
    } else if (e == 31) {
        u = sign | 0x7f800000u | (m << 13);                      /* infinity, or a NaN */
    } else {
        u = sign | ((e + 112) << 23) | (m << 13);
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* x rounded to fp16 and back: the value an fp16 tensor holds for x */
static inline float sg_fp16_round(float x) { return sg_fp16_to_float(sg_fp16_from_float(x)); }

/* two fp16 in one 32-bit register, as tensor-core fragments hold them: lo in bits 0..15 (the
 * element with the lower index), hi in bits 16..31 */
static inline uint32_t sg_fp16x2_bits(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

#endif
