/* random/philox_x16.h — sixteen Philox4x32-10 calls at once, one per lane of AVX-512 registers,
 * for the CPU kernels that draw keep bits (attention/flash_cpu.c, cpu/ops_cpu.c).
 *
 * Lane l of out[w] is word w of philox4x32_10(counter lane l, key): random/philox.h's generator,
 * lane for lane, the same bits (tests/test_philox.c holds every lane of many calls to it). A
 * scalar call spends ~40 cycles on its chain of ten dependent 32 x 32 -> 64-bit multiplies;
 * here one instruction does eight of them, and the 16 lanes are independent.
 *
 * x86-64 with GCC or Clang only (PHILOX_X16 is 1 there); a caller checks philox_x16_supported()
 * at run time and otherwise makes philox.h's scalar calls (SEEDGPT_PHILOX=scalar forces those).
 */
#ifndef SEEDGPT_PHILOX_X16_H
#define SEEDGPT_PHILOX_X16_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "random/philox.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__)
#define PHILOX_X16 1
#include <immintrin.h>

/* 1 where the CPU runs AVX-512F, unless SEEDGPT_PHILOX=scalar asks for the scalar calls (the
 * tests' way to hold the two to the same masks); asked once per process */
static inline int philox_x16_supported(void) {
    static int known = -1;   /* asked from inside parallel regions: atomic, every thread the same */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (k < 0) {
        const char* s = getenv("SEEDGPT_PHILOX");
        __builtin_cpu_init();
        k = __builtin_cpu_supports("avx512f") && !(s != NULL && strcmp(s, "scalar") == 0);
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k;
}

/* hi and lo 32 bits of m * c in every lane: the even lanes' products from one unsigned multiply,
 * the odd lanes' from another of c shifted down, put back together lane by lane */
__attribute__((target("avx512f")))
static inline void philox_x16_mul(__m512i c, __m512i m, __m512i* hi, __m512i* lo) {
    const __m512i pe = _mm512_mul_epu32(c, m);                        /* lanes 2e: 64-bit products */
    const __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m); /* lanes 2e + 1 */
    *lo = _mm512_mask_blend_epi32((__mmask16)0xAAAA, pe, _mm512_slli_epi64(po, 32));
    *hi = _mm512_mask_blend_epi32((__mmask16)0xAAAA, _mm512_srli_epi64(pe, 32), po);
}

/* c[0..3]: the counters' four words, lane l the l-th call; replaced by the outputs */
__attribute__((target("avx512f")))
static inline void philox4x32_10_x16(__m512i c[4], uint32_t k0, uint32_t k1) {
    const __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0), m1 = _mm512_set1_epi32((int)PHILOX_M1);
    __m512i key0 = _mm512_set1_epi32((int)k0), key1 = _mm512_set1_epi32((int)k1);
    const __m512i w0 = _mm512_set1_epi32((int)PHILOX_W0), w1 = _mm512_set1_epi32((int)PHILOX_W1);
    __m512i c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
    for (int round = 0; round < 10; round++) {
        __m512i hi0, lo0, hi1, lo1;
        philox_x16_mul(c0, m0, &hi0, &lo0);
        philox_x16_mul(c2, m1, &hi1, &lo1);
        c0 = _mm512_ternarylogic_epi32(hi1, c1, key0, 0x96);   /* hi1 ^ c1 ^ k0 */
        c1 = lo1;
        c2 = _mm512_ternarylogic_epi32(hi0, c3, key1, 0x96);   /* hi0 ^ c3 ^ k1 */
        c3 = lo0;
        key0 = _mm512_add_epi32(key0, w0);
        key1 = _mm512_add_epi32(key1, w1);
    }
    c[0] = c0; c[1] = c1; c[2] = c2; c[3] = c3;
}

/* The attention draws of keys 32 blk .. 32 blk + 63 (two aligned blocks of 32) of query i, head h,
 * sequence g: dr[w][8 * half + lo] = philox_attn_draw(seed, g, h, i, 32 (blk + half) + 8 w + lo),
 * as sixteen philox_attn_draw4 calls would give them. */
__attribute__((target("avx512f")))
static inline void philox_attn_draw64_x16(uint64_t seed, uint32_t g, uint32_t h, uint32_t i,
                                          uint32_t blk, uint32_t dr[4][16]) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    /* counter (i, ((blk + (k >> 3)) << 3) | (k & 7), h, g) = (i, 8 blk + k, h, g), k = 0..15 */
    __m512i c[4] = {_mm512_set1_epi32((int)i),
                    _mm512_add_epi32(_mm512_set1_epi32((int)(blk << 3)), iota),
                    _mm512_set1_epi32((int)h), _mm512_set1_epi32((int)g)};
    philox4x32_10_x16(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    for (int w = 0; w < 4; w++) _mm512_storeu_si512(dr[w], c[w]);
}

/* The element draws of channels 4 q0 .. 4 q0 + 63 of (g, t): r[q][w] = philox_elem_draw(seed, g,
 * t, 4 (q0 + q) + w), as sixteen philox_elem_draw4 calls would give them (the lanes hold one word
 * of sixteen calls; a 4 x 16 transpose puts them in channel order). */
__attribute__((target("avx512f")))
static inline void philox_elem_draw64_x16(uint64_t seed, uint32_t g, uint32_t t, uint32_t q0,
                                          uint32_t r[16][4]) {
    uint32_t* out = &r[0][0];
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i c[4] = {_mm512_set1_epi32((int)t), _mm512_add_epi32(_mm512_set1_epi32((int)q0), iota),
                    _mm512_setzero_si512(), _mm512_set1_epi32((int)g)};
    philox4x32_10_x16(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    /* in each 128-bit block m (calls 4m .. 4m + 3): e holds call 4m's words 0..3, f 4m + 1's, ... */
    const __m512i a = _mm512_unpacklo_epi32(c[0], c[1]), b = _mm512_unpackhi_epi32(c[0], c[1]);
    const __m512i d = _mm512_unpacklo_epi32(c[2], c[3]), e2 = _mm512_unpackhi_epi32(c[2], c[3]);
    const __m512i e = _mm512_unpacklo_epi64(a, d), f = _mm512_unpackhi_epi64(a, d);
    const __m512i gg = _mm512_unpacklo_epi64(b, e2), hh = _mm512_unpackhi_epi64(b, e2);
    /* channels 16 m .. 16 m + 15 are blocks m of e, f, gg, hh */
    const __m512i v01 = _mm512_shuffle_i32x4(e, f, 0x44), v23 = _mm512_shuffle_i32x4(e, f, 0xee);
    const __m512i w01 = _mm512_shuffle_i32x4(gg, hh, 0x44), w23 = _mm512_shuffle_i32x4(gg, hh, 0xee);
    _mm512_storeu_si512(out, _mm512_shuffle_i32x4(v01, w01, 0x88));
    _mm512_storeu_si512(out + 16, _mm512_shuffle_i32x4(v01, w01, 0xdd));
    _mm512_storeu_si512(out + 32, _mm512_shuffle_i32x4(v23, w23, 0x88));
    _mm512_storeu_si512(out + 48, _mm512_shuffle_i32x4(v23, w23, 0xdd));
}
#else
#define PHILOX_X16 0
static inline int philox_x16_supported(void) { return 0; }
#endif

#endif
