/* tests/test_gemm_bf16.c — the CPU's bf16 product (model/gemm_bf16_cpu.c): its arithmetic against
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
#include "model/gemm_cpu.h"
#include "cuda/bf16.h"

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

/* ---- the specification, written out independently of model/gemm_bf16_cpu.c ---------------- */

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

/* K long enough that the pairs are packed in several chunks (5 x 1 output, K = 900001). */
static void test_long_k(void) {
    int K = 900001, M = 5;
    Prob p = prob_new(NN, M, 1, K);
    size_t differ = 0, runs = 0;
    for (GemmBf16Path g = GEMM_BF16_PORTABLE; g <= GEMM_BF16_LAST; g++) {
        if (!gemm_bf16_path_supported(g)) continue;
        set_path(g);
        float c[5] = {0.5f, -1, 2, 0, 3};
        run_all(&p, 1, c);
        for (int i = 0; i < M; i++) {
            float old[5] = {0.5f, -1, 2, 0, 3};
            float want = spec_chain(&p, i, 0, 1, old[i]);
            differ += memcmp(&c[i], &want, sizeof want) != 0;
        }
        runs++;
    }
    unsetenv("SEEDGPT_GEMM_BF16");
    prob_free(&p);
    expect(differ == 0, "long_k_packed_in_chunks_equals_the_chain",
           "%zu of %zu elements (5 per path) differ", differ, 5 * runs);
}

/* gemm_bf16_ex's options, on every path: an fp32 A rounded as it is packed equals gemm_bf16 on
 * A rounded beforehand; a bf16 result with a bias equals the fp32 result plus the bias, rounded
 * once (bit for bit), at shapes with edge tiles and at 1 and 3 threads; nothing of Cb outside
 * the M x N block (rows ldc apart) is written. */
static void test_ex_options(void) {
    const int M = 37, N = 45, K = 131;
    const size_t ldc = N + 3;
    float* A32 = fbuf((size_t)M * K);
    uint16_t *A16 = bbuf((size_t)M * K), *B16 = bbuf((size_t)K * N);
    float* bias = fbuf(N);
    /* A among random values: the rounding's edge cases (ties to even both ways, a carry into the
     * exponent, past the largest bf16, denormals, signed zero, infinities, NaNs) */
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3fffffffu,
                                       0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x807fffffu,
                                       0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                       0xffc00001u, 0x7f800001u};
    const int nspecial = (int)(sizeof(special) / sizeof(special[0]));
    for (size_t i = 0; i < (size_t)M * K; i++) {
        A32[i] = frand();
        if (i % 97 == 5) memcpy(&A32[i], &special[(i / 97) % (size_t)nspecial], sizeof(float));
        A16[i] = sg_bf16_from_float(A32[i]);
    }
    /* the same A stored transposed (K, M): the dW product's layout */
    float* A32t = fbuf((size_t)M * K);
    uint16_t* A16t = bbuf((size_t)M * K);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            A32t[(size_t)k * M + i] = A32[(size_t)i * K + k];
            A16t[(size_t)k * M + i] = A16[(size_t)i * K + k];
        }
    for (size_t i = 0; i < (size_t)K * N; i++) B16[i] = sg_bf16_from_float(frand());
    for (int j = 0; j < N; j++) bias[j] = frand();
    float *c_ref = fbuf((size_t)M * ldc), *c_f32 = fbuf((size_t)M * ldc);
    uint16_t* cb = bbuf((size_t)M * ldc);
    size_t d_a = 0, d_b = 0, outside = 0;
    for (GemmBf16Path g = GEMM_BF16_PORTABLE; g <= GEMM_BF16_LAST; g++) {
        if (!gemm_bf16_path_supported(g)) continue;
        set_path(g);
        for (int th = 1; th <= 3; th += 2) {
            omp_set_num_threads(th);
            gemm_bf16(M, N, K, A16, K, 1, B16, N, 1, 0, c_ref, ldc);
            gemm_bf16_ex(M, N, K, A32, 1, K, 1, B16, N, 1, 0, c_f32, ldc, NULL, NULL);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++)
                    d_a += memcmp(&c_ref[i * ldc + j], &c_f32[i * ldc + j], sizeof(float)) != 0;
            gemm_bf16(M, N, K, A16t, 1, M, B16, N, 1, 0, c_ref, ldc);
            gemm_bf16_ex(M, N, K, A32t, 1, 1, M, B16, N, 1, 0, c_f32, ldc, NULL, NULL);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++)
                    d_a += memcmp(&c_ref[i * ldc + j], &c_f32[i * ldc + j], sizeof(float)) != 0;
            gemm_bf16(M, N, K, A16, K, 1, B16, N, 1, 0, c_ref, ldc);
            for (size_t i = 0; i < (size_t)M * ldc; i++) cb[i] = 0xabcd;
            gemm_bf16_ex(M, N, K, A16, 0, K, 1, B16, N, 1, 0, NULL, ldc, cb, bias);
            for (int i = 0; i < M; i++)
                for (size_t j = 0; j < ldc; j++) {
                    if ((int)j >= N) { outside += cb[i * ldc + j] != 0xabcd; continue; }
                    d_b += cb[i * ldc + j] != sg_bf16_from_float(c_ref[i * ldc + j] + bias[j]);
                }
        }
    }
    unsetenv("SEEDGPT_GEMM_BF16");
    omp_set_num_threads(2);
    /* a bf16 result whose whole-K panels exceed the packing buffer (8 Mi words): rows in
     * blocks, the same bits */
    {
        const int M2 = 8300, N2 = 16, K2 = 2048;
        uint16_t *A2 = bbuf((size_t)M2 * K2), *B2 = bbuf((size_t)K2 * N2), *cb2 = bbuf((size_t)M2 * N2);
        float* c2 = fbuf((size_t)M2 * N2);
        gemm_bf16(M2, N2, K2, A2, K2, 1, B2, N2, 1, 0, c2, N2);
        gemm_bf16_ex(M2, N2, K2, A2, 0, K2, 1, B2, N2, 1, 0, NULL, N2, cb2, bias);
        for (int i = 0; i < M2; i++)
            for (int j = 0; j < N2; j++)
                d_b += cb2[(size_t)i * N2 + j] != sg_bf16_from_float(c2[(size_t)i * N2 + j] + bias[j]);
        free(A2); free(B2); free(cb2); free(c2);
    }
    expect(d_a == 0, "fp32_a_rounded_in_packing_equals_the_rounded_operand",
           "%zu elements differ (M %d N %d K %d, A by rows and transposed, with rounding edge "
           "cases and NaNs, both paths, 1 and 3 threads)", d_a, M, N, K);
    expect(d_b == 0 && outside == 0, "bf16_result_is_the_fp32_result_plus_bias_rounded_once",
           "%zu elements differ, %zu written outside the block (also at M 8300 K 2048, in row "
           "blocks)", d_b, outside);
    free(A32); free(A16); free(A32t); free(A16t); free(B16); free(bias); free(c_ref); free(c_f32);
    free(cb);
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
