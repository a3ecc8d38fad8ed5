/* tests/test_gemm_bf16.c — the CPU's bf16 product (cpu/gemm_bf16_cpu.c): its arithmetic against
 * the VDPBF16PS instruction itself, every output element against the chain written out here as
 * the specification (bitwise, both paths, three layouts, written and accumulated, odd K), within
 * the chain's error bound of float64, bitwise independent of the thread count and of cutting the
 * rows (or k, at an even boundary) into pieces, and no write outside C.
 *
 * Layouts as in test_gemm.c: "nt" out = x . W^T (B stored (N,K)), "nn" dx = dy . W (B stored
 * (K,N)), "tn" dW += dy^T . x (A stored (K,M)).
 */
#include <float.h>
#include <omp.h>
#include <stdint.h>
#include "tests/test.h"
#include "cpu/gemm_cpu.h"
#include "util/bf16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

typedef enum { NT, NN, TN } Layout;
static const char* layout_name[] = {"nt", "nn", "tn"};

typedef struct {
    Layout lay;
    int M, N, K;
    uint16_t *A, *B;       /* A: (M,K) or for TN (K,M); B: (N,K) for NT, else (K,N) */
} Prob;

static uint32_t rng = 777;
static uint32_t next_u32(void) {
    rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
    return rng;
}
static float frand(void) { return (float)(next_u32() >> 8) / 16777216.0f * 2.0f - 1.0f; }

static uint16_t* bbuf(size_t n) {
    uint16_t* p = malloc((n ? n : 1) * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) p[i] = sg_bf16_from_float(frand());
    return p;
}
static float* fbuf(size_t n) {
    float* p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

static Prob prob_new(Layout lay, int M, int N, int K) {
    Prob p = {lay, M, N, K, bbuf((size_t)M * K), bbuf((size_t)N * K)};
    return p;
}
static void prob_free(Prob* p) { free(p->A); free(p->B); }

static uint16_t a_at(const Prob* p, int i, int k) {
    return p->lay == TN ? p->A[(size_t)k * p->M + i] : p->A[(size_t)i * p->K + k];
}
static uint16_t b_at(const Prob* p, int k, int j) {
    return p->lay == NT ? p->B[(size_t)j * p->K + k] : p->B[(size_t)k * p->N + j];
}

static void run_rows(const Prob* p, int i0, int i1, int accumulate, float* C, size_t ldc) {
    int M = p->M, N = p->N, K = p->K;
    if (p->lay == NT)
        gemm_bf16(i1 - i0, N, K, p->A + (size_t)i0 * K, K, 1, p->B, 1, K, accumulate, C, ldc);
    else if (p->lay == NN)
        gemm_bf16(i1 - i0, N, K, p->A + (size_t)i0 * K, K, 1, p->B, N, 1, accumulate, C, ldc);
    else
        gemm_bf16(i1 - i0, N, K, p->A + i0, 1, M, p->B, N, 1, accumulate, C, ldc);
}
static void run_all(const Prob* p, int accumulate, float* C) {
    run_rows(p, 0, p->M, accumulate, C, (size_t)p->N);
}

static size_t count_differ(const float* a, const float* b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

/* ---- the specification, written out independently of cpu/gemm_bf16_cpu.c ---------------- */

static float ftz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }
static float operand(uint16_t b) { return ftz(sg_bf16_to_float(b)); }

/* element (i, j): the pairs in order, the odd element of each first, from 0 or the old value */
static float spec_chain(const Prob* p, int i, int j, int accumulate, float old) {
    float acc = accumulate ? ftz(old) : 0.0f;
    for (int k = 0; k < p->K; k += 2) {
        if (k + 1 < p->K)
            acc = ftz(fmaf(operand(a_at(p, i, k + 1)), operand(b_at(p, k + 1, j)), acc));
        else
            acc = ftz(fmaf(0.0f, 0.0f, acc));   /* an odd K's missing element: zero times zero */
        acc = ftz(fmaf(operand(a_at(p, i, k)), operand(b_at(p, k, j)), acc));
    }
    return acc;
}

static void set_path(GemmBf16Path g) { setenv("SEEDGPT_GEMM_BF16", gemm_bf16_path_name(g), 1); }

/* ---- the arithmetic against the instruction ------------------------------------------------ */

#if HAVE_X86
/* a bf16 anywhere in the exponent range: zeros, denormals, normals, infinities (no NaN) */
static uint16_t any_bf16(int narrow) {
    uint32_t s = next_u32() & 1, e = narrow ? 100 + next_u32() % 56 : next_u32() % 256;
    uint32_t m = next_u32() & 0x7f;
    if (e == 255) m = 0;
    return (uint16_t)(s << 15 | e << 7 | m);
}

__attribute__((target("avx512f,avx512bf16")))
static void vdpbf16ps16(float acc[16], const uint16_t a[32], const uint16_t b[32]) {
    __m512 c = _mm512_loadu_ps(acc);
    __m512bh va, vb;
    memcpy(&va, a, 64);
    memcpy(&vb, b, 64);
    _mm512_storeu_ps(acc, _mm512_dpbf16_ps(c, va, vb));
}
#endif

static void test_pair_step_is_the_instruction(void) {
    const char* name = "pair_step_gives_vdpbf16ps_bits_over_the_whole_exponent_range";
#if HAVE_X86
    if (!gemm_bf16_path_supported(GEMM_BF16_AVX512BF16)) {
        skip(name, "this CPU has no AVX512_BF16");
        return;
    }
    size_t n = 0, differ = 0;
    char first[300] = "";
    for (int t = 0; t < 60000; t++) {
        uint16_t a[32], b[32];
        float acc[16], hw[16];
        int narrow = t % 3 != 0;   /* two thirds near 1, one third anywhere */
        for (int i = 0; i < 32; i++) { a[i] = any_bf16(narrow); b[i] = any_bf16(t % 3 == 1); }
        for (int i = 0; i < 16; i++) {
            uint32_t e = t % 5 == 0 ? next_u32() % 3 : next_u32() % 254;
            uint32_t u = (next_u32() & 1) << 31 | e << 23 | (next_u32() & 0x7fffff);
            memcpy(&acc[i], &u, 4);
            hw[i] = acc[i];
        }
        vdpbf16ps16(hw, a, b);
        for (int i = 0; i < 16; i++) {
            uint32_t ap = (uint32_t)a[2 * i] | (uint32_t)a[2 * i + 1] << 16;
            uint32_t bp = (uint32_t)b[2 * i] | (uint32_t)b[2 * i + 1] << 16;
            float sw = gemm_bf16_pair_step(acc[i], ap, bp);
            n++;
            int bad = !(memcmp(&sw, &hw[i], 4) == 0 || (isnan(sw) && isnan(hw[i])));
            if (bad && differ == 0)
                snprintf(first, sizeof first, "; first: acc %a, pairs (%a, %a) (%a, %a): "
                         "instruction %a, pair_step %a", acc[i], sg_bf16_to_float(a[2 * i + 1]),
                         sg_bf16_to_float(b[2 * i + 1]), sg_bf16_to_float(a[2 * i]),
                         sg_bf16_to_float(b[2 * i]), hw[i], sw);
            differ += bad;
        }
    }
    expect(differ == 0, name, "%zu of %zu lanes differ (denormals, zeros, infinities included)%s",
           differ, n, first);
#else
    skip(name, "not an x86-64 build");
#endif
}

/* ---- the product --------------------------------------------------------------------------- */

static const int dims[] = {1, 4, 13, 33, 65};
static const int ks[] = {1, 2, 7, 64, 129};
#define NDIMS 5
#define NKS 5

static void test_reference(Layout lay, int accumulate, GemmBf16Path g) {
    double worst = 0.0;
    size_t differ = 0, n_total = 0;
    int bound_ok = 1;
    set_path(g);
    for (int mi = 0; mi < NDIMS; mi++)
        for (int ni = 0; ni < NDIMS; ni++)
            for (int ki = 0; ki < NKS; ki++) {
                int M = dims[mi], N = dims[ni], K = ks[ki];
                Prob p = prob_new(lay, M, N, K);
                float* C = fbuf((size_t)M * N);
                float* C0 = malloc(sizeof(float) * M * N);
                memcpy(C0, C, sizeof(float) * M * N);
                run_all(&p, accumulate, C);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        float want = spec_chain(&p, i, j, accumulate, C0[i * N + j]);
                        double ref = accumulate ? C0[i * N + j] : 0.0, mag = fabs(ref);
                        for (int k = 0; k < K; k++) {
                            double ab = (double)sg_bf16_to_float(a_at(&p, i, k)) *
                                        sg_bf16_to_float(b_at(&p, k, j));
                            ref += ab;
                            mag += fabs(ab);
                        }
                        double err = fabs(C[i * N + j] - ref);
                        if (err > (K + 1) * 0x1p-24 * mag + 1e-30) bound_ok = 0;
                        if (mag > 0 && err / mag > worst) worst = err / mag;
                        differ += memcmp(&want, &C[i * N + j], sizeof(float)) != 0;
                        n_total++;
                    }
                free(C); free(C0); prob_free(&p);
            }
    unsetenv("SEEDGPT_GEMM_BF16");
    char name[128];
    snprintf(name, sizeof name, "%s_%s_%s_equals_the_pair_chain_bitwise", gemm_bf16_path_name(g),
             layout_name[lay], accumulate ? "accumulate" : "write");
    expect(differ == 0, name, "%zu of %zu elements differ", differ, n_total);
    snprintf(name, sizeof name, "%s_%s_%s_within_chain_error_bound_of_float64",
             gemm_bf16_path_name(g), layout_name[lay], accumulate ? "accumulate" : "write");
    expect(bound_ok, name, "%zu elements, worst |err| / sum|ab| = %.3g (bound (K+1) 2^-24)",
           n_total, worst);
}

static void test_threads_and_pieces(Layout lay) {
    const int shapes[][4] = {{200, 300, 520, 37}, {65, 1000, 33, 64}, {517, 45, 777, 100},
                             {13, 70, 1, 5}};
    size_t differ = 0, n = 0;
    for (int s = 0; s < 4; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], M1 = shapes[s][3];
        Prob p = prob_new(lay, M, N, K);
        float* init = fbuf((size_t)M * N);
        float* ref = malloc(sizeof(float) * M * N);
        float* got = malloc(sizeof(float) * M * N);
        int accumulate = lay == TN;
        memcpy(ref, init, sizeof(float) * M * N);
        omp_set_num_threads(1);
        run_all(&p, accumulate, ref);
        for (int t = 2; t <= 3; t++) {
            memcpy(got, init, sizeof(float) * M * N);
            omp_set_num_threads(t);
            run_all(&p, accumulate, got);
            differ += count_differ(ref, got, (size_t)M * N);
            n += (size_t)M * N;
        }
        /* rows in two calls */
        memcpy(got, init, sizeof(float) * M * N);
        run_rows(&p, 0, M1, accumulate, got, (size_t)N);
        run_rows(&p, M1, M, accumulate, got + (size_t)M1 * N, (size_t)N);
        differ += count_differ(ref, got, (size_t)M * N);
        n += (size_t)M * N;
        if (lay == TN && K > 2) {   /* k in two calls, cut at an even k: the pairs stay whole */
            int K1 = (K / 3) & ~1;
            memcpy(got, init, sizeof(float) * M * N);
            gemm_bf16(M, N, K1, p.A, 1, M, p.B, N, 1, 1, got, N);
            gemm_bf16(M, N, K - K1, p.A + (size_t)K1 * M, 1, M, p.B + (size_t)K1 * N, N, 1, 1, got, N);
            differ += count_differ(ref, got, (size_t)M * N);
            n += (size_t)M * N;
        }
        free(init); free(ref); free(got); prob_free(&p);
    }
    omp_set_num_threads(2);
    char name[128];
    snprintf(name, sizeof name, "%s_bitwise_identical_at_1_2_3_threads_and_in_pieces", layout_name[lay]);
    expect(differ == 0, name, "%zu of %zu elements differ", differ, n);
}

/* The widened path's FMAs under DAZ and FTZ against the specification's chain, with operands and
 * starting values over the whole exponent range (zeros, denormals, infinities): K = 2 and 4 (one
 * and two pairs), accumulated onto the starting values, 16 x 16 outputs at a time. */
static void test_widened_over_the_exponent_range(void) {
    const char* name = "avx512f_path_gives_the_chain_bits_over_the_whole_exponent_range";
#if HAVE_X86
    if (!gemm_bf16_path_supported(GEMM_BF16_AVX512F)) {
        skip(name, "this CPU has no AVX-512");
        return;
    }
    set_path(GEMM_BF16_AVX512F);
    size_t n = 0, differ = 0;
    char first[300] = "";
    for (int t = 0; t < 3000; t++) {
        enum { M = 16, N = 16 };
        const int K = t % 2 ? 4 : 2;
        uint16_t A[M * 4], B[4 * N];
        float C[M * N], C0[M * N];
        int narrow = t % 3 != 0;
        for (int i = 0; i < M * K; i++) A[i] = any_bf16(narrow);
        for (int i = 0; i < K * N; i++) B[i] = any_bf16(t % 3 == 1);
        for (int i = 0; i < M * N; i++) {
            uint32_t e = t % 5 == 0 ? next_u32() % 3 : next_u32() % 254;
            uint32_t u = (next_u32() & 1) << 31 | e << 23 | (next_u32() & 0x7fffff);
            memcpy(&C0[i], &u, 4);
            C[i] = C0[i];
        }
        gemm_bf16(M, N, K, A, K, 1, B, N, 1, 1, C, N);
        Prob p = {NN, M, N, K, A, B};
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float want = spec_chain(&p, i, j, 1, C0[i * N + j]), got = C[i * N + j];
                int bad = !(memcmp(&want, &got, 4) == 0 || (isnan(want) && isnan(got)));
                if (bad && differ == 0)
                    snprintf(first, sizeof first, "; first: K %d, start %a: chain %a, path %a", K,
                             C0[i * N + j], want, got);
                differ += bad;
                n++;
            }
    }
    unsetenv("SEEDGPT_GEMM_BF16");
    expect(differ == 0, name, "%zu of %zu elements differ (denormals, zeros, infinities included)%s",
           differ, n, first);
#else
    skip(name, "not an x86-64 build");
#endif
}

static void test_paths_agree_one(GemmBf16Path g) {
    char name[96];
    snprintf(name, sizeof name, "%s_path_bitwise_identical_to_portable", gemm_bf16_path_name(g));
    if (!gemm_bf16_path_supported(g)) {
        skip(name, g == GEMM_BF16_AVX512BF16 ? "this CPU has no AVX512_BF16" : "this CPU has no AVX-512");
        return;
    }
    const int shapes[][3] = {{200, 300, 520}, {7, 33, 65}, {65, 1, 300}, {1, 100, 1001}};
    size_t differ = 0, n = 0;
    for (Layout lay = NT; lay <= TN; lay++)
        for (int s = 0; s < 4; s++) {
            int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            Prob p = prob_new(lay, M, N, K);
            float* a = fbuf((size_t)M * N);
            float* b = malloc(sizeof(float) * M * N);
            a[0] = 1e-39f;   /* a denormal to accumulate onto: both paths start from zero */
            memcpy(b, a, sizeof(float) * M * N);
            set_path(GEMM_BF16_PORTABLE);
            run_all(&p, lay == TN, a);
            set_path(g);
            run_all(&p, lay == TN, b);
            differ += count_differ(a, b, (size_t)M * N);
            n += (size_t)M * N;
            free(a); free(b); prob_free(&p);
        }
    unsetenv("SEEDGPT_GEMM_BF16");
    expect(differ == 0, name, "%zu of %zu elements differ (nt, nn, tn)", differ, n);
}

static void test_no_write_outside_and_edges(void) {
    const int shapes[][3] = {{7, 33, 65}, {65, 7, 1}, {1, 1, 300}, {37, 50, 260}};
    size_t touched = 0;
    for (Layout lay = NT; lay <= TN; lay++)
        for (int s = 0; s < 4; s++) {
            int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            size_t ldc = (size_t)N + 5, guard = 3 * ldc, total = 2 * guard + (size_t)M * ldc;
            Prob p = prob_new(lay, M, N, K);
            float* buf = malloc(sizeof(float) * total);
            for (size_t i = 0; i < total; i++) buf[i] = 1234.5f;
            run_rows(&p, 0, M, 0, buf + guard, ldc);
            for (size_t i = 0; i < total; i++) {
                int in = i >= guard && i < guard + (size_t)M * ldc && (i - guard) % ldc < (size_t)N;
                if (!in) touched += buf[i] != 1234.5f;
            }
            free(buf); prob_free(&p);
        }
    expect(touched == 0, "never_writes_outside_the_output_block", "%zu elements outside changed",
           touched);
    float C[6] = {1, 2, 3, 4, 1e-39f, 6};
    uint16_t A[1] = {0}, B[1] = {0};
    gemm_bf16(2, 3, 0, A, 0, 1, B, 3, 1, 1, C, 3);
    int kept = C[0] == 1 && C[5] == 6 && C[4] == 0.0f;
    gemm_bf16(2, 3, 0, A, 0, 1, B, 3, 1, 0, C, 3);
    int zero = 1;
    for (int i = 0; i < 6; i++) zero &= C[i] == 0.0f;
    expect(kept && zero, "empty_k_writes_zero_and_accumulates_nothing",
           "accumulate kept C (its denormal read as zero): %d, write zeroed C: %d", kept, zero);
}

/* K long enough that the shared operand is packed in several pair chunks, on every path: 4 x 1
 * (B has as many panels as A: A is the shared one; 2 chunks on the portable path, 4 and 7 on the
 * AVX-512 ones) and 13 x 1 (A has more: B is shared; 2 and 3 chunks), each written with A by rows
 * and accumulated with A stored transposed (the dW product's layout, packed by pairs of lines).
 * Every element equals its chain. */
static void test_long_k(void) {
    const int shapes[][4] = {{4, 1, 4200001, NN}, {4, 1, 4200001, TN}, {13, 1, 1100001, NN},
                             {13, 1, 1100001, TN}};   /* M, N, K, layout */
    size_t differ = 0, n = 0;
    for (int s = 0; s < 4; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], acc = shapes[s][3] == TN;
        Prob p = prob_new((Layout)shapes[s][3], M, N, K);
        float* init = fbuf((size_t)M * N);
        float* want = malloc(sizeof(float) * M * N);
        float* c = malloc(sizeof(float) * M * N);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) want[i * N + j] = spec_chain(&p, i, j, acc, init[i * N + j]);
        for (GemmBf16Path g = GEMM_BF16_PORTABLE; g <= GEMM_BF16_LAST; g++) {
            if (!gemm_bf16_path_supported(g)) continue;
            set_path(g);
            memcpy(c, init, sizeof(float) * M * N);
            run_all(&p, acc, c);
            differ += count_differ(want, c, (size_t)M * N);
            n += (size_t)M * N;
        }
        free(init); free(want); free(c); prob_free(&p);
    }
    unsetenv("SEEDGPT_GEMM_BF16");
    expect(differ == 0, "long_k_packed_in_chunks_equals_the_chain",
           "%zu of %zu elements x paths differ (A shared and B shared, written and accumulated)",
           differ, n);
}

/* An (M,K) A of fp32 values with the rounding's edge cases among them (ties to even both ways, a
 * carry into the exponent, past the largest bf16, denormals, signed zero, infinities, NaNs), its
 * bf16 rounding, and both stored transposed (K,M) too (the dW product's layout). */
typedef struct { float *a32, *a32t; uint16_t *a16, *a16t; } RoundedA;

static RoundedA rounded_a(int M, int K) {
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3fffffffu,
                                       0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x807fffffu,
                                       0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                       0xffc00001u, 0x7f800001u};
    const size_t nspecial = sizeof(special) / sizeof(special[0]), n = (size_t)M * K;
    RoundedA r = {malloc(sizeof(float) * n), malloc(sizeof(float) * n),
                  malloc(sizeof(uint16_t) * n), malloc(sizeof(uint16_t) * n)};
    for (size_t i = 0; i < n; i++) {
        r.a32[i] = frand();
        if (i % 97 == 5) memcpy(&r.a32[i], &special[(i / 97) % nspecial], sizeof(float));
        r.a16[i] = sg_bf16_from_float(r.a32[i]);
    }
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            r.a32t[(size_t)k * M + i] = r.a32[(size_t)i * K + k];
            r.a16t[(size_t)k * M + i] = r.a16[(size_t)i * K + k];
        }
    return r;
}
static void rounded_a_free(RoundedA* r) { free(r->a32); free(r->a32t); free(r->a16); free(r->a16t); }

/* a bf16 result (rows ldc apart; A (M,K) given, or random) against the fp32 result plus the bias
 * rounded once: the elements that differ; *outside counts the changed elements of Cb beyond the
 * M x N block */
static size_t bf16_result_differs(int M, int N, int K, const uint16_t* A_given, size_t ldc,
                                  const float* bias, size_t* outside) {
    uint16_t* A = A_given != NULL ? (uint16_t*)A_given : bbuf((size_t)M * K);
    uint16_t *B = bbuf((size_t)K * N), *cb = malloc(sizeof(uint16_t) * M * ldc);
    float* c = malloc(sizeof(float) * M * ldc);
    for (size_t i = 0; i < (size_t)M * ldc; i++) cb[i] = 0xabcd;
    gemm_bf16(M, N, K, A, K, 1, B, N, 1, 0, c, ldc);
    gemm_bf16_ex(M, N, K, A, 0, K, 1, B, N, 1, 0, NULL, ldc, cb, bias);
    size_t d = 0;
    for (size_t i = 0; i < (size_t)M; i++)
        for (size_t j = 0; j < ldc; j++) {
            if (j >= (size_t)N) { *outside += cb[i * ldc + j] != 0xabcd; continue; }
            d += cb[i * ldc + j] != sg_bf16_from_float(c[i * ldc + j] + bias[j]);
        }
    if (A_given == NULL) free(A);
    free(B); free(cb); free(c);
    return d;
}

/* gemm_bf16_ex's options, on every path, at 1 and 3 threads, at a shape where A has the more
 * panels (A blocked: 37 x 45) and one where B has (B blocked: 29 x 300, two slices of pairs, an
 * odd K): an fp32 A rounded as it is packed, by rows and transposed, equals gemm_bf16 on A rounded
 * beforehand; a bf16 result with a bias equals the fp32 result plus the bias, rounded once (bit
 * for bit); nothing of Cb outside the M x N block (rows ldc apart) is written. */
static void test_ex_options(void) {
    const int shapes[][3] = {{37, 45, 131}, {29, 300, 301}};
    float* bias = fbuf(8192);
    size_t d_a = 0, d_b = 0, outside = 0;
    for (int s = 0; s < 2; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        const size_t ldc = N + 3;
        RoundedA a = rounded_a(M, K);
        uint16_t* B16 = bbuf((size_t)K * N);
        float *c_ref = fbuf((size_t)M * ldc), *c_f32 = fbuf((size_t)M * ldc);
        for (GemmBf16Path g = GEMM_BF16_PORTABLE; g <= GEMM_BF16_LAST; g++) {
            if (!gemm_bf16_path_supported(g)) continue;
            set_path(g);
            for (int th = 1; th <= 3; th += 2) {
                omp_set_num_threads(th);
                gemm_bf16(M, N, K, a.a16, K, 1, B16, N, 1, 0, c_ref, ldc);
                gemm_bf16_ex(M, N, K, a.a32, 1, K, 1, B16, N, 1, 0, c_f32, ldc, NULL, NULL);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++)
                        d_a += memcmp(&c_ref[i * ldc + j], &c_f32[i * ldc + j], sizeof(float)) != 0;
                gemm_bf16(M, N, K, a.a16t, 1, M, B16, N, 1, 0, c_ref, ldc);
                gemm_bf16_ex(M, N, K, a.a32t, 1, 1, M, B16, N, 1, 0, c_f32, ldc, NULL, NULL);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++)
                        d_a += memcmp(&c_ref[i * ldc + j], &c_f32[i * ldc + j], sizeof(float)) != 0;
                d_b += bf16_result_differs(M, N, K, a.a16, ldc, bias, &outside);
            }
        }
        unsetenv("SEEDGPT_GEMM_BF16");
        rounded_a_free(&a); free(B16); free(c_ref); free(c_f32);
    }
    omp_set_num_threads(2);
    /* at 2 threads on the default path: a bf16 result in many blocks of A's panels, each over
     * several slices of pairs (8300 x 16, K 2048); and one whose shared A over the whole K exceeds
     * the packing buffer (8 Mi words) on the widened path: rows in blocks (100 x 257, K 80001) */
    d_b += bf16_result_differs(8300, 16, 2048, NULL, 16, bias, &outside);
    d_b += bf16_result_differs(100, 257, 80001, NULL, 260, bias, &outside);
    expect(d_a == 0, "fp32_a_rounded_in_packing_equals_the_rounded_operand",
           "%zu elements differ (37 x 45 K 131 and 29 x 300 K 301, A by rows and transposed, with "
           "rounding edge cases and NaNs, every path, 1 and 3 threads)", d_a);
    expect(d_b == 0 && outside == 0, "bf16_result_is_the_fp32_result_plus_bias_rounded_once",
           "%zu elements differ, %zu written outside the block (also at 8300 x 16 K 2048 and "
           "100 x 257 K 80001)", d_b, outside);
    free(bias);
}

int main(void) {
    printf("# bf16 gemm path by default: %s\n", gemm_bf16_path_name(gemm_bf16_path_selected()));
    omp_set_num_threads(2);
    test_pair_step_is_the_instruction();
    for (GemmBf16Path g = GEMM_BF16_PORTABLE; g <= GEMM_BF16_LAST; g++) {
        if (!gemm_bf16_path_supported(g)) {
            char sname[64];
            snprintf(sname, sizeof sname, "%s_equals_the_pair_chain", gemm_bf16_path_name(g));
            skip(sname, g == GEMM_BF16_AVX512BF16 ? "this CPU has no AVX512_BF16" : "this CPU has no AVX-512");
            continue;
        }
        for (Layout lay = NT; lay <= TN; lay++) {
            test_reference(lay, 0, g);
            test_reference(lay, 1, g);
        }
    }
    for (Layout lay = NT; lay <= TN; lay++) test_threads_and_pieces(lay);
    test_paths_agree_one(GEMM_BF16_AVX512BF16);
    test_paths_agree_one(GEMM_BF16_AVX512F);
    test_widened_over_the_exponent_range();
    test_no_write_outside_and_edges();
    test_long_k();
    test_ex_options();
    return test_finish();
}
