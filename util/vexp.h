/* util/vexp.h — e^x in float that gcc vectorises: the softmax of the flash attention and
 * the model's GELU evaluate one exponential per element, and libm's expf is a scalar call.
 * Deterministic (plain float arithmetic, no FMA contraction in ISO C mode), so results do not
 * depend on threads; they may differ from libm's expf in the last bits. */
#ifndef SEEDGPT_VEXP_H
#define SEEDGPT_VEXP_H

#include <stdint.h>
#include <string.h>

/* n = round(x / ln2) by adding 1.5 * 2^23; r = x - n ln2 with ln2 in two parts (Cody-Waite) so r
 * is exact to float precision; e^r on |r| <= ln2/2 by the degree-7 Taylor-like polynomial of
 * Cephes' expf; 2^n placed in the exponent bits. Relative error under 2e-7 for x in [-87, 88]
 * (measured in tests/test_attention_tiles.c). Below -87 (and at -inf) it returns 0: e^-87 < 2^-125
 * cannot change a sum that holds e^0 = 1, and the softmax always has one. NaN stays NaN. */
static inline float vexpf(float x) {
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    float t = xc * 1.44269504088896341f + 12582912.0f;  /* 1.5 * 2^23: rounds to an integer */
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;                     /* ln2 high part: n * it is exact */
    r = r - n * -2.12194440e-4f;                         /* ln2 low part */
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * (r * r) + r + 1.0f;
    /* 2^n: t's low mantissa bits hold n + 2^22; unsigned arithmetic, so NaN is no UB */
    uint32_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4b400000u + 127u) << 23;           /* 0x4b400000 = bits of 1.5 * 2^23 */
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    y = y * two_n;
    return x < -87.0f ? 0.0f : y;
}

/* e^x in double that gcc vectorises: the cross-entropy's softmax over the vocabulary
 * (cpu/ops_cpu.c), where libm's exp was a scalar call per logit, three per logit a step. The
 * same construction as vexpf in double: n = round(x / ln2) by adding 1.5 * 2^52; r = x - n ln2
 * with fdlibm's two-part ln2 (n * the high part is exact); e^r on |r| <= ln2/2 by its Taylor
 * series to r^13 (truncation under 5e-18 relative); 2^n in the exponent bits. Relative error
 * within a few ulp of double (tests/test_ops.c: under 4e-16 over [-708, 1]), far below the float
 * the cross-entropy rounds its probabilities to. For softmax inputs (x <= 0): below -708 (and at
 * -inf) it returns 0, as e^-708 cannot move a sum that holds e^0 = 1; NaN stays NaN; x above
 * 709 is not an input it takes. */
static inline double vexpd(double x) {
    double xc = x < -708.0 ? -708.0 : x;
    xc = xc > 709.0 ? 709.0 : xc;
    double t = xc * 1.4426950408889634 + 6755399441055744.0;   /* 1.5 * 2^52 */
    double n = t - 6755399441055744.0;
    double r = xc - n * 6.93147180369123816490e-01;           /* ln2 high part */
    r = r - n * 1.90821492927058770002e-10;                   /* ln2 low part */
    double y = 1.0 / 6227020800.0;                            /* 1/13! */
    y = y * r + 1.0 / 479001600.0;
    y = y * r + 1.0 / 39916800.0;
    y = y * r + 1.0 / 3628800.0;
    y = y * r + 1.0 / 362880.0;
    y = y * r + 1.0 / 40320.0;
    y = y * r + 1.0 / 5040.0;
    y = y * r + 1.0 / 720.0;
    y = y * r + 1.0 / 120.0;
    y = y * r + 1.0 / 24.0;
    y = y * r + 1.0 / 6.0;
    y = y * r + 0.5;
    y = y * r + 1.0;
    y = y * r + 1.0;
    uint64_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4338000000000000ull + 1023u) << 52;      /* bits of 1.5 * 2^52 */
    double two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    y = y * two_n;
    return x < -708.0 ? 0.0 : y;
}

#endif
