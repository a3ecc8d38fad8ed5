/* tests/test_fp16.c — util/fp16.h, the host's fp16 conversions, as a specification:
 *   1. the edge cases, bit for bit: zeros, 1, the largest finite 65504 (0x7bff), 65519.99 (still
 *      65504), 65520 (the tie, to infinity), infinities, NaN (0x7fff), the smallest normal 2^-14,
 *      the largest and smallest denormals, 2^-25 (the tie with zero: zero), 1.5 and 3 x 2^-25,
 *      ties to even among normals (1 + 2^-11 down to 1, 1 + 3 x 2^-11 up), the rounding carry
 *      into the exponent (2047/1024 - 2^-12 and up), and negatives of each;
 *   2. every one of the 63 488 finite fp16 values and the infinities go to fp32 and back to the
 *      same bits, and every NaN pattern comes back as a NaN;
 *   3. to nearest, ties to even, against an oracle that does not round: for 2^20 random fp32
 *      (every exponent from denormal fp16 to past 65504) and every fp32 halfway between two
 *      neighbouring fp16, the result is the nearest fp16 found in float64, the even one of two
 *      at a tie;
 *   4. where the compiler has _Float16 (gcc on x86-64), the same fp32 values converted by the
 *      compiler, bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "util/fp16.h"
#include "tests/test.h"

static float f_of(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static void edge_cases(void) {
    static const struct { float x; uint16_t want; const char* what; } E[] = {
        {0.0f, 0x0000, "0"},
        {1.0f, 0x3c00, "1"},
        {-2.0f, 0xc000, "-2"},
        {65504.0f, 0x7bff, "65504, the largest finite"},
        {65519.99f, 0x7bff, "65519.99, under the tie"},
        {65520.0f, 0x7c00, "65520, the tie: to infinity"},
        {-65520.0f, 0xfc00, "-65520"},
        {1e6f, 0x7c00, "1e6"},
        {INFINITY, 0x7c00, "+inf"},
        {-INFINITY, 0xfc00, "-inf"},
        {0x1p-14f, 0x0400, "2^-14, the smallest normal"},
        {0x1p-14f - 0x1p-24f, 0x03ff, "the largest denormal"},
        {0x1p-24f, 0x0001, "2^-24, the smallest denormal"},
        {-0x1p-24f, 0x8001, "-2^-24"},
        {0x1p-25f, 0x0000, "2^-25, the tie with zero: to even (zero)"},
        {0x1.000002p-25f, 0x0001, "just above 2^-25"},
        {0x1.8p-24f, 0x0002, "1.5 x 2^-24: the tie, to even (2)"},
        {0x1.4p-24f, 0x0001, "1.25 x 2^-24"},
        {0x1p-26f, 0x0000, "2^-26"},
        {0x1p-14f - 0x1p-25f, 0x0400, "the tie between the largest denormal and 2^-14: to even (2^-14)"},
        {1.0f + 0x1p-11f, 0x3c00, "1 + 2^-11, the tie: down to even"},
        {1.0f + 0x3p-11f, 0x3c02, "1 + 3 x 2^-11, the tie: up to even"},
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01, "just above the tie"},
        {2.0f - 0x1p-12f, 0x4000, "2 - 2^-12: the carry into the exponent"},
        {-0.0f, 0x8000, "-0"},
    };
    int bad = 0;
    char first[256] = "";
    for (size_t i = 0; i < sizeof(E) / sizeof(E[0]); i++) {
        uint16_t h = sg_fp16_from_float(E[i].x);
        if (h != E[i].want) {
            if (!bad++)
                snprintf(first, sizeof(first), "%s (%a): 0x%04x, want 0x%04x", E[i].what, (double)E[i].x, h,
                         E[i].want);
        }
    }
    expect(bad == 0, "fp16_edge_cases_bit_for_bit", "%d of %zu wrong%s%s", bad, sizeof(E) / sizeof(E[0]),
           bad ? "; first: " : "", first);
    uint16_t n1 = sg_fp16_from_float(NAN), n2 = sg_fp16_from_float(-NAN), n3 = sg_fp16_from_float(f_of(0x7f800001u));
    expect(n1 == SG_FP16_NAN && n2 == SG_FP16_NAN && n3 == SG_FP16_NAN, "fp16_nan_is_0x7fff",
           "NaN 0x%04x, -NaN 0x%04x, signalling 0x%04x", n1, n2, n3);
    float back[4] = {sg_fp16_to_float(0x7bff), sg_fp16_to_float(0x0001), sg_fp16_to_float(0x03ff),
                     sg_fp16_to_float(0xfc00)};
    expect(back[0] == 65504.0f && back[1] == 0x1p-24f && back[2] == 1023 * 0x1p-24f && isinf(back[3]) && back[3] < 0 &&
           isnan(sg_fp16_to_float(0x7fff)), "fp16_to_float_edge_values",
           "0x7bff %g, 0x0001 %a, 0x03ff %a, 0xfc00 %g, 0x7fff %g", back[0], (double)back[1], (double)back[2],
           back[3], sg_fp16_to_float(0x7fff));
}

static void round_trip_every_fp16(void) {
    int bad = 0, nans = 0, first = -1;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float x = sg_fp16_to_float((uint16_t)h);
        int is_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
        if (is_nan) {
            nans += isnan(x) && sg_fp16_from_float(x) == SG_FP16_NAN;
            continue;
        }
        if (sg_fp16_from_float(x) != h) {
            if (first < 0) first = (int)h;
            bad++;
        }
    }
    expect(bad == 0 && nans == 2 * 1023, "fp16_round_trip_every_value", "%d of 63490 values (finite and inf) come "
           "back with other bits (first 0x%04x); %d of 2046 NaN patterns stay NaN", bad, first, nans);
}

/* the nearest fp16 to x by search in float64 (no rounding in the arithmetic: every fp16 and every
 * distance between an fp32 and an fp16 is exact in float64), the even one at a tie; x finite and
 * |x| below 65520 */
static uint16_t nearest_fp16(float x) {
    double ax = fabs((double)x);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    /* the positive fp16 are ordered as their bits: bisect for the last at or below ax */
    uint32_t lo = 0, hi = 0x7bff;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if ((double)sg_fp16_to_float((uint16_t)mid) <= ax) lo = mid;
        else hi = mid - 1;
    }
    if (lo == 0x7bff) {   /* above 65504: the next step would be 65536 */
        double d0 = ax - 65504.0, d1 = 65536.0 - ax;
        return (uint16_t)(sign | (d0 < d1 ? 0x7bff : 0x7c00));
    }
    double d0 = ax - (double)sg_fp16_to_float((uint16_t)lo);
    double d1 = (double)sg_fp16_to_float((uint16_t)(lo + 1)) - ax;
    uint32_t pick = d0 < d1 ? lo : d1 < d0 ? lo + 1 : ((lo & 1u) ? lo + 1 : lo);
    return (uint16_t)(sign | pick);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static void nearest_even_against_search(void) {
    int bad = 0, n = 0;
    char first[200] = "";
    for (int i = 0; i < (1 << 20); i++) {
        /* exponents from 2^-26 to 2^16 (fp32 biased 101 .. 143), any mantissa, either sign */
        uint32_t e = 101 + next32() % 43, u = (next32() & 0x807fffffu) | (e << 23);
        float x = f_of(u);
        if (fabsf(x) >= 65520.0f) continue;
        n++;
        uint16_t got = sg_fp16_from_float(x), want = nearest_fp16(x);
        if (got != want && !bad++)
            snprintf(first, sizeof(first), "%a: 0x%04x, nearest 0x%04x", (double)x, got, want);
    }
    /* every tie: the fp32 halfway between two neighbouring positive fp16 (exact in fp32) */
    int ties = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        float mid = (float)(((double)sg_fp16_to_float((uint16_t)h) + (double)sg_fp16_to_float((uint16_t)(h + 1))) / 2);
        uint16_t got = sg_fp16_from_float(mid), want = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
        ties++;
        if (got != want && !bad++)
            snprintf(first, sizeof(first), "tie between 0x%04x and 0x%04x (%a): 0x%04x", h, h + 1, (double)mid, got);
    }
    expect(bad == 0, "fp16_rounds_to_nearest_even", "%d wrong of %d random fp32 and %d ties%s%s", bad, n, ties,
           bad ? "; first: " : "", first);
}

static void against_compiler_float16(void) {
#if defined(__FLT16_MAX__)
    int bad = 0, n = 0;
    char first[160] = "";
    for (int i = 0; i < (1 << 20); i++) {
        uint32_t u = next32();   /* any fp32 at all: NaN aside, the compiler's conversion is IEEE's */
        float x = f_of(u);
        if (isnan(x)) continue;
        n++;
        _Float16 c = (_Float16)x;
        uint16_t want;
        memcpy(&want, &c, 2);
        uint16_t got = sg_fp16_from_float(x);
        if (got != want && !bad++) snprintf(first, sizeof(first), "%a: 0x%04x, _Float16 0x%04x", (double)x, got, want);
    }
    expect(bad == 0, "fp16_matches_compiler_float16", "%d of %d random fp32 differ%s%s", bad, n, bad ? "; first: " : "",
           first);
#else
    skip("fp16_matches_compiler_float16", "this compiler has no _Float16");
#endif
}

int main(void) {
    edge_cases();
    round_trip_every_fp16();
    nearest_even_against_search();
    against_compiler_float16();
    return test_finish();
}
