/* tests/cuda/test_cuda_bf16.cu — bfloat16 conversions, on the device and on the host:
 *   1. the host's fp32 -> bf16 (util/bf16.h) on hand-worked cases (ties to even, the largest
 *      finite values, infinities, signed zeros, denormals, NaNs whose truncation would be inf) and
 *      against an independent oracle, the nearest bf16 found by comparing the two neighbours in
 *      float64, over every bf16 bucket with the low halves that decide rounding;
 *   2. the device's __float2bfloat16_rn on the same inputs, bit for bit equal to the host's (NaN
 *      to NaN; in the emulation also the payload 0x7fff);
 *   3. every one of the 65536 bf16 values to fp32 on the device, exactly the host's, and back to
 *      the same bf16 (the round trip is exact);
 *   4. sg_pack_bf16x2 puts lo in bits 0..15 and hi in bits 16..31, as the host's sg_bf16x2_bits.
 * Builds two ways: nvcc (make test-cuda: the GPU's cvt.rn.bf16.f32 against the host) and C++
 * against the emulation (make test-cuda-emu).
 */
#include "cuda/device.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "util/bf16.h"
#include "tests/test.h"

#ifdef SG_EMU
#define EMU_ONLY 1
#else
#define EMU_ONLY 0
#endif

/* ---- kernels (grid-stride loops: a few blocks cover any n) ----------------------------------- */
__global__ void float_to_bf16(uint16_t* out, const float* x, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

/* each bf16 to fp32 and back to bf16 */
__global__ void bf16_round_trip(float* f, uint16_t* back, const __nv_bfloat16* h, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float v = __bfloat162float(h[i]);
        f[i] = v;
        back[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
}

__global__ void pack_pairs(uint32_t* out, const uint16_t* lo, const uint16_t* hi, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = sg_pack_bf16x2(__ushort_as_bfloat16(lo[i]), __ushort_as_bfloat16(hi[i]));
}

/* ---- host helpers -------------------------------------------------------------------------- */
static float f_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static uint32_t u_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static int bf16_is_nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

/* The oracle: the value of bf16 bits b by the format's definition (an exponent field of 255 read
 * as 2^128 with no special meaning: the "unbounded exponent" IEEE rounds against), then the
 * nearer of the two bf16 neighbours of |x| in float64, ties to the even one. */
static double bf16_magnitude(uint32_t b) {
    int e = (b >> 7) & 0xff, m = b & 0x7f;
    return e == 0 ? ldexp((double)m, -133) : ldexp(1.0 + m / 128.0, e - 127);
}
static uint16_t oracle_bf16(float x) {
    uint32_t u = u_of(x);
    if (isnan(x)) return SG_BF16_NAN;
    uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
    if (mag == 0x7f800000u) return (uint16_t)((sign | mag) >> 16);   /* inf stays inf */
    uint32_t lo = mag >> 16, hi = lo + 1;   /* |x| lies in [value(lo), value(hi)) */
    double ax = fabs((double)x);
    double dlo = ax - bf16_magnitude(lo), dhi = bf16_magnitude(hi) - ax;
    uint32_t r = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
    return (uint16_t)((sign >> 16) | r);
}

static void* dev_alloc(size_t bytes) {
    void* d;
    SG_CHECK(cudaMalloc(&d, bytes));
    return d;
}
static void* dev_copy(const void* h, size_t bytes) {
    void* d = dev_alloc(bytes);
    SG_CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* ---- 1. the host conversion on hand-worked cases -------------------------------------------- */
typedef struct {
    uint32_t in;
    uint16_t want;
    const char* what;
} Case;
static const Case CASES[] = {
    {0x3f800000u, 0x3f80, "1.0 exact"},
    {0x3f808000u, 0x3f80, "1 + 2^-8: tie between 0x3f80 and 0x3f81, to the even 0x3f80"},
    {0x3f818000u, 0x3f82, "tie between 0x3f81 and 0x3f82, to the even 0x3f82"},
    {0x3f808001u, 0x3f81, "just above the tie: up"},
    {0x3f807fffu, 0x3f80, "just below the tie: down"},
    {0xbf808000u, 0xbf80, "-(1 + 2^-8): tie to the even magnitude"},
    {0xbf818000u, 0xbf82, "negative tie to the even magnitude, away from zero"},
    {0x3fffffffu, 0x4000, "carry out of the mantissa into the exponent"},
    {0x00000000u, 0x0000, "+0"},
    {0x80000000u, 0x8000, "-0"},
    {0x7f800000u, 0x7f80, "+inf"},
    {0xff800000u, 0xff80, "-inf"},
    {0x7f7f0000u, 0x7f7f, "the largest finite bf16, exact"},
    {0x7f7f7fffu, 0x7f7f, "just below the midpoint to 2^128: stays finite"},
    {0x7f7f8000u, 0x7f80, "the midpoint above the largest finite: ties to even, which is +inf"},
    {0x7f7fffffu, 0x7f80, "FLT_MAX: rounds up to +inf"},
    {0xff7fffffu, 0xff80, "-FLT_MAX: rounds to -inf"},
    {0x00010000u, 0x0001, "the smallest bf16 denormal, exact"},
    {0x00000001u, 0x0000, "the smallest fp32 denormal: down to +0 (no flush, ordinary rounding)"},
    {0x00008000u, 0x0000, "denormal tie between 0 and 0x0001: to the even 0"},
    {0x00018000u, 0x0002, "denormal tie between 0x0001 and 0x0002: to the even 0x0002"},
    {0x80008001u, 0x8001, "negative denormal just above a tie: up in magnitude"},
    {0x007fffffu, 0x0080, "the largest fp32 denormal: up to the smallest normal"},
    {0x00800000u, 0x0080, "the smallest fp32 normal, exact"},
};

static void test_host_cases(void) {
    int bad = 0, n = (int)(sizeof(CASES) / sizeof(CASES[0]));
    for (int i = 0; i < n; i++) {
        uint16_t got = sg_bf16_from_float(f_of(CASES[i].in)), orc = oracle_bf16(f_of(CASES[i].in));
        if (got != CASES[i].want || orc != CASES[i].want) {
            if (bad++ < 4)
                printf("# 0x%08x (%s): want 0x%04x, host 0x%04x, oracle 0x%04x\n", CASES[i].in, CASES[i].what,
                       CASES[i].want, got, orc);
        }
    }
    expect(bad == 0, "host_bf16_rounding_hand_cases", "%d of %d worked cases wrong (host and oracle both checked)",
           bad, n);
    /* NaNs: any payload, either sign, quiet or signalling, becomes 0x7fff; 0x7f800001 truncated
     * would be +inf, 0xff800001 -inf */
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu};
    int nbad = 0;
    for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++)
        if (sg_bf16_from_float(f_of(nans[i])) != SG_BF16_NAN) nbad++;
    expect(nbad == 0, "host_bf16_nan_is_7fff", "%d of 6 NaN inputs (quiet, signalling, both signs, payloads "
           "that truncate to inf) not 0x7fff", nbad);
}

/* every bf16 bucket (the top 16 bits) with the low halves that decide rounding, and a few
 * random ones: 65536 x 8 inputs */
static const uint32_t LOWS[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};
#define NLOW 8
static float* sweep_inputs(int* n_out) {
    int n = 65536 * NLOW;
    float* x = (float*)malloc((size_t)n * sizeof(float));
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (int j = 0; j < NLOW; j++) {
            uint32_t low = j < 6 ? LOWS[j] : (uint32_t)(test_uniform() * 65536.0) & 0xffffu;
            x[hi * NLOW + j] = f_of(hi << 16 | low);
        }
    *n_out = n;
    return x;
}

static void test_host_against_oracle(const float* x, int n) {
    int bad = 0, first = -1;
    for (int i = 0; i < n; i++) {
        uint16_t got = sg_bf16_from_float(x[i]), orc = oracle_bf16(x[i]);
        if (got != orc) { if (first < 0) first = i; bad++; }
    }
    if (first >= 0)
        printf("# first: 0x%08x -> host 0x%04x, oracle 0x%04x\n", u_of(x[first]), sg_bf16_from_float(x[first]),
               oracle_bf16(x[first]));
    expect(bad == 0, "host_bf16_matches_nearest_even_oracle", "%d of %d inputs differ (every bf16 bucket, "
           "low halves 0, 1, 0x7fff, 0x8000, 0x8001, 0xffff and 2 random)", bad, n);
}

/* ---- 2. the device conversion ----------------------------------------------------------------- */
static void test_device_float_to_bf16(const float* x, int n) {
    float* dx = (float*)dev_copy(x, (size_t)n * sizeof(float));
    uint16_t* dout = (uint16_t*)dev_alloc((size_t)n * 2);
    SG_LAUNCH(float_to_bf16, 8, 256, 0, dout, dx, n);
    SG_CHECK_LAUNCH();
    uint16_t* out = (uint16_t*)malloc((size_t)n * 2);
    SG_CHECK(cudaMemcpy(out, dout, (size_t)n * 2, cudaMemcpyDeviceToHost));
    int bad = 0, nan_inputs = 0, nan_bad = 0, nan_7fff = 0, first = -1;
    for (int i = 0; i < n; i++) {
        uint16_t want = sg_bf16_from_float(x[i]);
        if (isnan(x[i])) {
            nan_inputs++;
            if (!bf16_is_nan(out[i])) nan_bad++;
            if (out[i] == SG_BF16_NAN) nan_7fff++;
        } else if (out[i] != want) {
            if (first < 0) first = i;
            bad++;
        }
    }
    if (first >= 0)
        printf("# first: 0x%08x -> device 0x%04x, host 0x%04x\n", u_of(x[first]), out[first],
               sg_bf16_from_float(x[first]));
    expect(bad == 0, "device_float2bfloat16_rn_matches_host", "%d of %d non-NaN inputs differ", bad,
           n - nan_inputs);
    expect(nan_bad == 0, "device_float2bfloat16_rn_nan_stays_nan", "%d of %d NaN inputs did not give a NaN; "
           "%d of them gave 0x7fff", nan_bad, nan_inputs, nan_7fff);
    if (EMU_ONLY)
        expect(nan_7fff == nan_inputs, "emulated_nan_is_7fff", "%d of %d NaN inputs gave 0x7fff", nan_7fff,
               nan_inputs);
    else
        printf("# the GPU gave 0x7fff for %d of %d NaN inputs (CUDA's host conversion gives 0x7fff)\n",
               nan_7fff, nan_inputs);
    free(out);
    SG_CHECK(cudaFree(dx));
    SG_CHECK(cudaFree(dout));
}

/* ---- 3. every bf16 to fp32 and back ----------------------------------------------------------- */
static void test_round_trip_all(void) {
    int n = 65536;
    uint16_t* h = (uint16_t*)malloc((size_t)n * 2);
    for (int i = 0; i < n; i++) h[i] = (uint16_t)i;
    __nv_bfloat16* dh = (__nv_bfloat16*)dev_copy(h, (size_t)n * 2);
    float* df = (float*)dev_alloc((size_t)n * sizeof(float));
    uint16_t* dback = (uint16_t*)dev_alloc((size_t)n * 2);
    SG_LAUNCH(bf16_round_trip, 8, 256, 0, df, dback, dh, n);
    SG_CHECK_LAUNCH();
    float* f = (float*)malloc((size_t)n * sizeof(float));
    uint16_t* back = (uint16_t*)malloc((size_t)n * 2);
    SG_CHECK(cudaMemcpy(f, df, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
    SG_CHECK(cudaMemcpy(back, dback, (size_t)n * 2, cudaMemcpyDeviceToHost));
    int exact_bad = 0, oracle_bad = 0, trip_bad = 0, nan_bad = 0;
    for (int i = 0; i < n; i++) {
        float want = sg_bf16_to_float((uint16_t)i);
        if (u_of(f[i]) != u_of(want)) exact_bad++;   /* NaN payloads too: the conversion is a shift */
        if (!bf16_is_nan((uint16_t)i)) {
            double v = bf16_magnitude((uint32_t)i & 0x7fff) * ((i & 0x8000) ? -1.0 : 1.0);
            int is_inf = (i & 0x7fff) == 0x7f80;
            if (!(is_inf ? isinf(want) && (want < 0) == ((i & 0x8000) != 0) : (double)want == v)) oracle_bad++;
            if (back[i] != (uint16_t)i) trip_bad++;
        } else if (!bf16_is_nan(back[i])) {
            nan_bad++;
        }
    }
    expect(exact_bad == 0 && oracle_bad == 0, "device_bfloat162float_exact_all_65536",
           "%d values differ from the host's bits, %d host values from the format's definition", exact_bad,
           oracle_bad);
    expect(trip_bad == 0 && nan_bad == 0, "device_bf16_round_trip_exact_all_65536",
           "%d of the non-NaN bf16 did not come back to themselves, %d NaNs not NaN", trip_bad, nan_bad);
    free(h); free(f); free(back);
    SG_CHECK(cudaFree(dh)); SG_CHECK(cudaFree(df)); SG_CHECK(cudaFree(dback));
}

/* ---- 4. packing two bf16 into a register ------------------------------------------------------ */
static void test_pack(void) {
    int n = 4096;
    uint16_t* lo = (uint16_t*)malloc((size_t)n * 2);
    uint16_t* hi = (uint16_t*)malloc((size_t)n * 2);
    for (int i = 0; i < n; i++) {
        lo[i] = (uint16_t)(test_uniform() * 65536.0);
        hi[i] = (uint16_t)(test_uniform() * 65536.0);
    }
    lo[0] = 0x3f80; hi[0] = 0xc000;   /* (1.0, -2.0) -> 0xc0003f80 */
    uint16_t* dlo = (uint16_t*)dev_copy(lo, (size_t)n * 2);
    uint16_t* dhi = (uint16_t*)dev_copy(hi, (size_t)n * 2);
    uint32_t* dout = (uint32_t*)dev_alloc((size_t)n * 4);
    SG_LAUNCH(pack_pairs, 4, 128, 0, dout, dlo, dhi, n);
    SG_CHECK_LAUNCH();
    uint32_t* out = (uint32_t*)malloc((size_t)n * 4);
    SG_CHECK(cudaMemcpy(out, dout, (size_t)n * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (out[i] != sg_bf16x2_bits(lo[i], hi[i])) bad++;
    expect(bad == 0 && out[0] == 0xc0003f80u && sg_bf16x2_bits(0x3f80, 0xc000) == 0xc0003f80u,
           "pack_bf16x2_lo_in_low_half", "%d of %d pairs differ from the host's; (1.0, -2.0) packs to 0x%08x "
           "(want 0xc0003f80)", bad, n, out[0]);
    free(lo); free(hi); free(out);
    SG_CHECK(cudaFree(dlo)); SG_CHECK(cudaFree(dhi)); SG_CHECK(cudaFree(dout));
}

int main(void) {
    test_host_cases();
    int n;
    float* x = sweep_inputs(&n);
    test_host_against_oracle(x, n);
    test_device_float_to_bf16(x, n);
    free(x);
    test_round_trip_all();
    test_pack();
    return test_finish();
}
