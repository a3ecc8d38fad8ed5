/* tests/test_gemm_bf16.c — the CPU's bf16 product (cpu/gemm_bf16_cpu.c): its arithmetic against
 * the VDPBF16PS instruction itself, every output element against the chain written out here as
 * the specification (bitwise, both paths, three layouts, written and accumulated, odd K), within
 * the chain's error bound of float64, bitwise independent of the thread count and of cutting the
 * rows (or k, at an even boundary) into pieces, and no write outside C.
 *
 * Layouts as in test_gemm.c: "nt" out = x . W^T (B stored (N,K)), "nn" dx = dy . W (B stored
 * (K,N)), "tn" dW += dy^T . x (A stored (K,M)).
 *
 * Every path this CPU runs is forced in turn (SEEDGPT_GEMM_BF16) and swept over the remainders
 * (M mod 12, N mod 32, K around the slices of 128 pairs, odd K) through both drivers, written,
 * accumulated and with a bf16 result, with the pair chunks cut small and a bf16 result cut into
 * row blocks (the test build's pack limit); a path the CPU lacks is a SKIP.
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

/* ---- every path, every remainder, every driver -------------------------------------------- */

#define GUARD_COLS 3   /* C's rows are N + 3 apart; the 3 columns past N must stay as set */
static const float guard_f32 = 1234.5f;
static const uint16_t guard_bf16 = 0xabcd;
enum { WRITE = 1, ACCUMULATE = 2, BF16_OUT = 4 };   /* the modes of a product */

/* What a path's sweep reached: per driver and mode (written, accumulated, bf16 result), products
 * whose K spans several slices of pairs in one chunk, and several chunks; bf16 results cut into
 * row blocks; the fewer-row kernels that ran. */
typedef struct {
    int one_chunk[3][3], chunks[3][3], row_blocks;
    unsigned rows_kernels;
} Reach;

/* One product in each of `modes` at `threads` threads, at the default pack limit and at the
 * smallest, where every 128 pairs are a chunk of their own and a B-blocked bf16 result of more
 * than 8 panels of rows is cut into row blocks. A is bf16, or (on odd M + N) fp32 holding the
 * same values, rounded as it is packed (the backward's gradients). The bf16 result adds a bias.
 * Returns the elements (guard columns included) that differ from the chains. */
static size_t sweep_one(Layout lay, int M, int N, int K, int threads, int modes, Reach* r,
                        size_t* n) {
    Prob p = prob_new(lay, M, N, K);
    const size_t ldc = (size_t)N + GUARD_COLS;
    const int a_f32 = (M + N) % 2;
    float* a32 = malloc(sizeof(float) * ((size_t)M * K + 1));
    for (size_t i = 0; i < (size_t)M * K; i++) a32[i] = sg_bf16_to_float(p.A[i]);
    const void* A = a_f32 ? (const void*)a32 : (const void*)p.A;
    const size_t rsa = lay == TN ? 1 : (size_t)K, csa = lay == TN ? (size_t)M : 1;
    const size_t rsb = lay == NT ? 1 : (size_t)N, csb = lay == NT ? (size_t)K : 1;
    float* bias = fbuf((size_t)N);
    float *init = fbuf((size_t)M * ldc), *want = malloc(sizeof(float) * M * ldc);
    float* c = malloc(sizeof(float) * M * ldc);
    uint16_t *want16 = malloc(sizeof(uint16_t) * M * ldc), *c16 = malloc(sizeof(uint16_t) * M * ldc);
    size_t differ = 0;
    for (int i = 0; i < M; i++)
        for (size_t j = N; j < ldc; j++) init[i * ldc + j] = guard_f32;
    omp_set_num_threads(threads);
    for (int mode = 0; mode < 3; mode++) {
        if (!(modes >> mode & 1)) continue;
        const int acc = mode == 1, out16 = mode == 2;
        memcpy(want, init, sizeof(float) * M * ldc);
        for (int i = 0; i < M; i++)
            for (size_t j = 0; j < ldc; j++) {
                if (j < (size_t)N) want[i * ldc + j] = spec_chain(&p, i, (int)j, acc, init[i * ldc + j]);
                want16[i * ldc + j] = j < (size_t)N ? sg_bf16_from_float(want[i * ldc + j] + bias[j])
                                                    : guard_bf16;
            }
        for (int small = 0; small <= 1; small++) {
            gemm_bf16_test_pack_limit(small ? 1 : 0);
            memcpy(c, init, sizeof(float) * M * ldc);
            for (size_t i = 0; i < (size_t)M * ldc; i++) c16[i] = guard_bf16;
            gemm_bf16_ex(M, N, K, A, a_f32, rsa, csa, p.B, rsb, csb, acc, out16 ? NULL : c, ldc,
                         out16 ? c16 : NULL, out16 ? bias : NULL);
            if (out16)
                for (size_t i = 0; i < (size_t)M * ldc; i++) differ += c16[i] != want16[i];
            else
                differ += count_differ(want, c, (size_t)M * ldc);
            *n += (size_t)M * ldc;
            GemmPacking g = gemm_bf16_last_packing();
            if (g.chunks > 1) r->chunks[g.driver][mode] = 1;
            else if (K > 256) r->one_chunk[g.driver][mode] = 1;
            r->row_blocks |= g.row_blocks > 1;
        }
    }
    gemm_bf16_test_pack_limit(0);
    omp_set_num_threads(2);
    free(a32); free(bias); free(init); free(want); free(c); free(want16); free(c16); prob_free(&p);
    return differ;
}

static const char* lacks(GemmBf16Path g) {
    return g == GEMM_BF16_AVX512BF16 ? "this CPU lacks AVX512_BF16" : "this CPU lacks AVX-512 (F, BW, VL)";
}

/* Each path against the chains over the remainders:
 *   rows, in every layout: M = 36..47 x N 40 (A has the more panels on every path: A-blocked)
 *         and M = 12..23 x N 100 (B-blocked), K 259 (128 pairs and 2, the last one half), so
 *         each M mod 12 (mod 4) ends a panel beside a whole column panel, the fewer-row kernel's
 *         case; M = 1..4; each written, accumulated and as a bf16 result;
 *   columns: N = 32..63 at M 5 (B-blocked) and M 61 (A-blocked), K 37, the layouts and the
 *         modes in turn;
 *   k: K = 1, 2, 3, 31, 32, 33, 255, 256, 257, 258, 511, 513, 514 at 13 x 70 (B) and 50 x 20
 *         (A), the layouts in turn, every mode;
 *   row blocks: bf16 results of 100 and 119 x 500, K 37 (B-blocked, 9 or more panels of rows:
 *         at the smallest limit, blocks of 32 rows on the portable path, 96 on the AVX-512 ones,
 *         the last one short), at 1, 2 and 3 threads.
 * Each at two pack limits. And the sweep must reach what it means to: both drivers in each mode
 * over several slices, written and accumulated in several chunks, the row blocks, and on AVX-512
 * each kernel over 1 to 11 rows. */
static void test_every_path_and_remainder(GemmBf16Path g) {
    char name[128], reach_name[128];
    snprintf(name, sizeof name, "%s_every_remainder_and_driver_equals_the_pair_chain",
             gemm_bf16_path_name(g));
    snprintf(reach_name, sizeof reach_name,
             "%s_sweep_reaches_each_driver_chunk_restart_row_block_and_fewer_row_kernel",
             gemm_bf16_path_name(g));
    if (!gemm_bf16_path_supported(g)) {
        skip(name, lacks(g));
        skip(reach_name, lacks(g));
        return;
    }
    set_path(g);
    (void)gemm_bf16_test_rows_kernels_run();
    Reach r = {0};
    size_t differ = 0, n = 0;
    static const int kset[] = {1, 2, 3, 31, 32, 33, 255, 256, 257, 258, 511, 513, 514};
    const int all = WRITE | ACCUMULATE | BF16_OUT;
    for (Layout lay = NT; lay <= TN; lay++) {
        for (int m = 0; m < 12; m++) {
            differ += sweep_one(lay, 36 + m, 40, 259, 1, all, &r, &n);
            differ += sweep_one(lay, 12 + m, 100, 259, 1, all, &r, &n);
        }
        for (int m = 1; m <= 4; m++) differ += sweep_one(lay, m, 40, 259, 1, all, &r, &n);
    }
    for (int nn = 32; nn < 64; nn++) {
        differ += sweep_one((Layout)(nn % 3), 5, nn, 37, 1, 1 << nn % 3, &r, &n);
        differ += sweep_one((Layout)(nn % 3), 61, nn, 37, 1, 1 << (nn + 1) % 3, &r, &n);
    }
    for (int k = 0; k < (int)(sizeof kset / sizeof kset[0]); k++) {
        differ += sweep_one((Layout)(k % 3), 13, 70, kset[k], 1, all, &r, &n);
        differ += sweep_one((Layout)((k + 1) % 3), 50, 20, kset[k], 1, all, &r, &n);
    }
    for (int t = 1; t <= 3; t++) {
        differ += sweep_one(NT, 100, 500, 37, t, BF16_OUT, &r, &n);
        differ += sweep_one(NT, 119, 500, 37, t, BF16_OUT, &r, &n);
    }
    r.rows_kernels = gemm_bf16_test_rows_kernels_run();
    unsetenv("SEEDGPT_GEMM_BF16");
    expect(differ == 0, name, "%zu of %zu elements differ (guard columns included)", differ, n);
    int reached = r.row_blocks;
    for (int d = GEMM_A_BLOCKED; d <= GEMM_B_BLOCKED; d++)
        for (int mode = 0; mode < 3; mode++)
            reached &= r.one_chunk[d][mode] && (mode == 2 || r.chunks[d][mode]);
    const unsigned want_rows = g == GEMM_BF16_PORTABLE ? 0u : 0xffeu;   /* kernels over 1..11 rows */
    expect(reached && r.rows_kernels == want_rows, reach_name,
           "over several slices, written/accumulated/bf16: A-blocked %d/%d/%d, B-blocked %d/%d/%d; "
           "in several chunks, written/accumulated: A-blocked %d/%d, B-blocked %d/%d; a bf16 "
           "result in row blocks %d; fewer-row kernels run: mask 0x%x (want 0x%x)",
           r.one_chunk[GEMM_A_BLOCKED][0], r.one_chunk[GEMM_A_BLOCKED][1],
           r.one_chunk[GEMM_A_BLOCKED][2], r.one_chunk[GEMM_B_BLOCKED][0],
           r.one_chunk[GEMM_B_BLOCKED][1], r.one_chunk[GEMM_B_BLOCKED][2],
           r.chunks[GEMM_A_BLOCKED][0], r.chunks[GEMM_A_BLOCKED][1], r.chunks[GEMM_B_BLOCKED][0],
           r.chunks[GEMM_B_BLOCKED][1], r.row_blocks, r.rows_kernels, want_rows);
}

/* Each path at 1, 2 and 3 threads, where the blocked operand is cut into blocks (several per
 * thread, the last one short): 203 x 40 (A-blocked) and 22 x 600 (B-blocked), K 259, every
 * layout, every mode, at both pack limits. Every result bitwise its chain, so bitwise the same at
 * every thread count and blocking. */
static void test_path_threads(GemmBf16Path g) {
    char name[128];
    snprintf(name, sizeof name, "%s_bitwise_the_pair_chain_at_1_2_3_threads_in_blocks_and_chunks",
             gemm_bf16_path_name(g));
    if (!gemm_bf16_path_supported(g)) {
        skip(name, lacks(g));
        return;
    }
    set_path(g);
    Reach r = {0};
    size_t differ = 0, n = 0;
    for (Layout lay = NT; lay <= TN; lay++)
        for (int t = 1; t <= 3; t++) {
            differ += sweep_one(lay, 203, 40, 259, t, WRITE | ACCUMULATE | BF16_OUT, &r, &n);
            differ += sweep_one(lay, 22, 600, 259, t, WRITE | ACCUMULATE | BF16_OUT, &r, &n);
        }
    (void)gemm_bf16_test_rows_kernels_run();
    unsetenv("SEEDGPT_GEMM_BF16");
    expect(differ == 0 && r.chunks[GEMM_A_BLOCKED][0] && r.chunks[GEMM_B_BLOCKED][0], name,
           "%zu of %zu elements differ (guard columns included); several chunks reached: "
           "A-blocked %d, B-blocked %d", differ, n, r.chunks[GEMM_A_BLOCKED][0],
           r.chunks[GEMM_B_BLOCKED][0]);
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
    for (GemmBf16Path g = GEMM_BF16_PORTABLE; g <= GEMM_BF16_LAST; g++) {
        test_every_path_and_remainder(g);
        test_path_threads(g);
    }
    return test_finish();
}
