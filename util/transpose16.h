/* util/transpose16.h — a 16 x 16 transpose of 32-bit words in AVX-512 registers, shared by the
 * packing of the fp32 and the bf16 GEMMs (cpu/gemm_cpu.c, cpu/gemm_bf16_cpu.c) and the
 * attention's keep-bit tiles (attention/flash_cpu.c). Include it only where <immintrin.h> is
 * available (x86-64 with GCC or Clang). */
#ifndef SEEDGPT_TRANSPOSE16_H
#define SEEDGPT_TRANSPOSE16_H

#include <immintrin.h>

/* r[i] lane j -> r[j] lane i, for 16 vectors of 16 words */
__attribute__((target("avx512f"))) static inline void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* u[4g + c], lane L: rows 4g..4g+3 at column 4L + c */
    for (int g = 0; g < 4; g++) {
        u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g + 0], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g + 0], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i v01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
        __m512i v23 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
        __m512i w01 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
        __m512i w23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
        r[c] = _mm512_shuffle_i32x4(v01, w01, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(v01, w01, 0xdd);
        r[8 + c] = _mm512_shuffle_i32x4(v23, w23, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(v23, w23, 0xdd);
    }
}

#endif
