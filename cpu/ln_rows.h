/* cpu/ln_rows.h — the per-row sums of the CPU LayerNorms (cpu/ops_cpu.c, cpu/ops_bf16_cpu.c),
 * sixteen rows at a time.
 *
 * Each of those sums is one sequential chain over c = 0, 1, ..., C-1 (llm.c's order: the mean, the
 * variance, and the backward's two means), so a row's sum waits on its own previous add: C adds
 * at the add's latency. Here sixteen rows are summed side by side, one row per AVX-512 lane: a
 * 16 x 16 block of the rows is transposed in registers, and each lane adds its row's elements in
 * the same order, with the same operations (no contraction, no reassociation). Every mean, rstd
 * and backward sum is therefore the scalar loop's, bit for bit; only 16 chains advance at once.
 *
 * ln_rows_x16() says whether the CPU can (AVX-512F); elsewhere, and for the last N % 16 rows, the
 * callers run the scalar loops (ln_row_stats, ln_row_bwd_sums below), which define the order.
 */
#ifndef SEEDGPT_LN_ROWS_H
#define SEEDGPT_LN_ROWS_H

#include <math.h>
#include <stddef.h>

#define LN_EPS 1e-5f

/* one row: mean and 1 / sqrt(var + eps), var the biased variance (llm.c's layernorm_forward) */
static inline void ln_row_stats(const float* x, int C, float* mean, float* rstd) {
    float m = 0.0f;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
    v /= C;
    *mean = m;
    *rstd = 1.0f / sqrtf(v + LN_EPS);
}

/* one row of the backward: the means of dnorm = w * dout and of dnorm * norm */
static inline void ln_row_bwd_sums(const float* x, const float* d, const float* w, int C, float m,
                                   float s, float* dnorm_mean, float* dnorm_norm_mean) {
    float a = 0.0f, b = 0.0f;
    for (int c = 0; c < C; c++) {
        float norm = (x[c] - m) * s;
        float dnorm = w[c] * d[c];
        a += dnorm;
        b += dnorm * norm;
    }
    *dnorm_mean = a / C;
    *dnorm_norm_mean = b / C;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define LN_ROWS_X16 1
#include <immintrin.h>
#include "util/transpose16.h"

static inline int ln_rows_x16(void) {
    static int known = -1;   /* asked from inside parallel regions: atomic, every thread the same */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (k < 0) {
        __builtin_cpu_init();
        k = __builtin_cpu_supports("avx512f") ? 1 : 0;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k;
}

/* columns c0 .. c0 + 15 of the 16 rows x + r * ld: col[c] lane r = x[r * ld + c0 + c] */
__attribute__((target("avx512f")))
static inline void ln_block16(__m512 col[16], const float* x, size_t ld, int c0) {
    __m512i v[16];
    for (int r = 0; r < 16; r++) v[r] = _mm512_loadu_si512(x + (size_t)r * ld + c0);
    transpose16(v);
    for (int c = 0; c < 16; c++) col[c] = _mm512_castsi512_ps(v[c]);
}

/* ln_row_stats of the 16 rows x + r * C */
__attribute__((target("avx512f")))
static inline void ln_stats16(const float* x, int C, float mean[16], float rstd[16]) {
    const int cw = C / 16 * 16;
    const __m512 fc = _mm512_set1_ps((float)C);
    __m512 acc = _mm512_setzero_ps(), col[16];
    for (int c0 = 0; c0 < cw; c0 += 16) {
        ln_block16(col, x, (size_t)C, c0);
        for (int c = 0; c < 16; c++) acc = _mm512_add_ps(acc, col[c]);
    }
    float t[16];
    _mm512_storeu_ps(t, acc);
    for (int r = 0; r < 16; r++)
        for (int c = cw; c < C; c++) t[r] += x[(size_t)r * C + c];
    const __m512 m = _mm512_div_ps(_mm512_loadu_ps(t), fc);
    _mm512_storeu_ps(mean, m);
    acc = _mm512_setzero_ps();
    for (int c0 = 0; c0 < cw; c0 += 16) {
        ln_block16(col, x, (size_t)C, c0);
        for (int c = 0; c < 16; c++) {
            const __m512 d = _mm512_sub_ps(col[c], m);
            acc = _mm512_add_ps(acc, _mm512_mul_ps(d, d));
        }
    }
    _mm512_storeu_ps(t, acc);
    for (int r = 0; r < 16; r++)
        for (int c = cw; c < C; c++) { float d = x[(size_t)r * C + c] - mean[r]; t[r] += d * d; }
    const __m512 var = _mm512_div_ps(_mm512_loadu_ps(t), fc);
    _mm512_storeu_ps(rstd, _mm512_div_ps(_mm512_set1_ps(1.0f),
                                         _mm512_sqrt_ps(_mm512_add_ps(var, _mm512_set1_ps(LN_EPS)))));
}

/* ln_row_bwd_sums of the 16 rows x + r * C, d + r * C with their mean m[r] and rstd s[r] */
__attribute__((target("avx512f")))
static inline void ln_bwd_sums16(const float* x, const float* d, const float* w, int C,
                                 const float m[16], const float s[16], float dnorm_mean[16],
                                 float dnorm_norm_mean[16]) {
    const int cw = C / 16 * 16;
    const __m512 vm = _mm512_loadu_ps(m), vs = _mm512_loadu_ps(s);
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps(), xc[16], dc[16];
    for (int c0 = 0; c0 < cw; c0 += 16) {
        ln_block16(xc, x, (size_t)C, c0);
        ln_block16(dc, d, (size_t)C, c0);
        for (int c = 0; c < 16; c++) {
            const __m512 norm = _mm512_mul_ps(_mm512_sub_ps(xc[c], vm), vs);
            const __m512 dnorm = _mm512_mul_ps(_mm512_set1_ps(w[c0 + c]), dc[c]);
            a = _mm512_add_ps(a, dnorm);
            b = _mm512_add_ps(b, _mm512_mul_ps(dnorm, norm));
        }
    }
    float ta[16], tb[16];
    _mm512_storeu_ps(ta, a);
    _mm512_storeu_ps(tb, b);
    for (int r = 0; r < 16; r++)
        for (int c = cw; c < C; c++) {
            float norm = (x[(size_t)r * C + c] - m[r]) * s[r];
            float dnorm = w[c] * d[(size_t)r * C + c];
            ta[r] += dnorm;
            tb[r] += dnorm * norm;
        }
    const __m512 fc = _mm512_set1_ps((float)C);
    _mm512_storeu_ps(dnorm_mean, _mm512_div_ps(_mm512_loadu_ps(ta), fc));
    _mm512_storeu_ps(dnorm_norm_mean, _mm512_div_ps(_mm512_loadu_ps(tb), fc));
}
#else
#define LN_ROWS_X16 0
static inline int ln_rows_x16(void) { return 0; }
#endif

/* mean[n], rstd[n] of the 16 rows (or fewer: the scalar loops) from row n0 of inp (N, C) */
static inline void ln_stats_rows(const float* inp, int n0, int rows, int C, float* mean, float* rstd) {
#if LN_ROWS_X16
    if (rows == 16 && ln_rows_x16()) {
        ln_stats16(inp + (size_t)n0 * C, C, mean + n0, rstd + n0);
        return;
    }
#endif
    for (int r = 0; r < rows; r++)
        ln_row_stats(inp + (size_t)(n0 + r) * C, C, &mean[n0 + r], &rstd[n0 + r]);
}

#endif
