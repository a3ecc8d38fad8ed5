/* tests/test_gemm.c — seedgpt's GEMM (cpu/gemm_cpu.c): each output element is the fmaf chain
 * over k in order (so: close to a float64 reference, and bitwise independent of the thread count,
 * the row split, the instruction-set path), accumulate semantics, and no write outside C.
 *
 * The three layouts are matmul's products: "nt" out = x . W^T (B stored (N,K)), "nn" dx = dy . W
 * (B stored (K,N)), "tn" dW += dy^T . x (A stored (K,M)).
 */
#include <omp.h>
#include <stdint.h>
#include "tests/test.h"
#include "cpu/gemm_cpu.h"

typedef enum { NT, NN, TN } Layout;
static const char* layout_name[] = {"nt", "nn", "tn"};

typedef struct {
    Layout lay;
    int M, N, K;
    float *A, *B;          /* A: (M,K) or for TN (K,M); B: (N,K) for NT, else (K,N) */
} Prob;

static uint32_t rng = 12345;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static float* fbuf(size_t n) {
    float* p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

static Prob prob_new(Layout lay, int M, int N, int K) {
    Prob p = {lay, M, N, K, fbuf((size_t)M * K), fbuf((size_t)N * K)};
    return p;
}
static void prob_free(Prob* p) { free(p->A); free(p->B); }

static float a_at(const Prob* p, int i, int k) {
    return p->lay == TN ? p->A[(size_t)k * p->M + i] : p->A[(size_t)i * p->K + k];
}
static float b_at(const Prob* p, int k, int j) {
    return p->lay == NT ? p->B[(size_t)j * p->K + k] : p->B[(size_t)k * p->N + j];
}

/* Rows [i0, i1) of C (rows ldc apart, C pointing at row i0) through gemm_f32. */
static void run_rows(const Prob* p, int i0, int i1, int accumulate, float* C, size_t ldc) {
    int M = p->M, N = p->N, K = p->K;
    if (p->lay == NT)
        gemm_f32(i1 - i0, N, K, p->A + (size_t)i0 * K, K, 1, p->B, 1, K, accumulate, C, ldc);
    else if (p->lay == NN)
        gemm_f32(i1 - i0, N, K, p->A + (size_t)i0 * K, K, 1, p->B, N, 1, accumulate, C, ldc);
    else
        gemm_f32(i1 - i0, N, K, p->A + i0, 1, M, p->B, N, 1, accumulate, C, ldc);
}
static void run_all(const Prob* p, int accumulate, float* C) {
    run_rows(p, 0, p->M, accumulate, C, (size_t)p->N);
}

static size_t count_differ(const float* a, const float* b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

static void set_path(GemmPath g) { setenv("SEEDGPT_GEMM", gemm_path_name(g), 1); }

static const int dims[] = {1, 4, 7, 33, 65};
static const int ks[] = {1, 7, 33, 65, 300};
#define NDIMS 5
#define NKS 5

/* Against float64, within the chain's error bound K * eps * sum |a b| (plus one rounding), and
 * bitwise against the chain itself, written out here as the specification: fmaf over k in
 * order, from 0 (written) or from the old value (accumulated). */
static void test_reference(Layout lay, int accumulate) {
    double worst = 0.0;
    size_t chain_differ = 0, n_total = 0;
    int bound_ok = 1;
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
                        float chain = accumulate ? C0[i * N + j] : 0.0f;
                        double ref = accumulate ? C0[i * N + j] : 0.0, mag = fabs(ref);
                        for (int k = 0; k < K; k++) {
                            chain = fmaf(a_at(&p, i, k), b_at(&p, k, j), chain);
                            ref += (double)a_at(&p, i, k) * b_at(&p, k, j);
                            mag += fabs((double)a_at(&p, i, k) * b_at(&p, k, j));
                        }
                        double err = fabs(C[i * N + j] - ref);
                        double bound = (K + 1) * 0x1p-24 * mag + 1e-30;
                        if (err > bound) bound_ok = 0;
                        if (mag > 0 && err / mag > worst) worst = err / mag;
                        chain_differ += memcmp(&chain, &C[i * N + j], sizeof(float)) != 0;
                        n_total++;
                    }
                free(C); free(C0); prob_free(&p);
            }
    char name[96];
    snprintf(name, sizeof name, "%s_%s_within_chain_error_bound_of_float64_on_odd_shapes",
             layout_name[lay], accumulate ? "accumulate" : "write");
    expect(bound_ok, name, "%zu elements, worst |err| / sum|ab| = %.3g", n_total, worst);
    snprintf(name, sizeof name, "%s_%s_equals_the_fmaf_chain_over_k_bitwise",
             layout_name[lay], accumulate ? "accumulate" : "write");
    expect(chain_differ == 0, name, "%zu of %zu elements differ", chain_differ, n_total);
}

/* The same product at 1, 2 and 3 threads, on shapes with many tiles and ragged edges. */
static void test_threads(Layout lay) {
    const int shapes[][3] = {{200, 300, 520}, {65, 1000, 33}, {517, 45, 777}, {13, 70, 1},
                             {3, 500, 100}};
    size_t differ = 0, n = 0;
    for (int s = 0; s < 5; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        Prob p = prob_new(lay, M, N, K);
        float* ref = fbuf((size_t)M * N);
        float* got = malloc(sizeof(float) * M * N);
        float* init = malloc(sizeof(float) * M * N);
        memcpy(init, ref, sizeof(float) * M * N);
        int accumulate = lay == TN;
        omp_set_num_threads(1);
        run_all(&p, accumulate, ref);
        for (int t = 2; t <= 3; t++) {
            memcpy(got, init, sizeof(float) * M * N);
            omp_set_num_threads(t);
            run_all(&p, accumulate, got);
            differ += count_differ(ref, got, (size_t)M * N);
            n += (size_t)M * N;
        }
        free(ref); free(got); free(init); prob_free(&p);
    }
    omp_set_num_threads(2);
    char name[96];
    snprintf(name, sizeof name, "%s_bitwise_identical_at_1_2_3_threads", layout_name[lay]);
    expect(differ == 0, name, "%zu of %zu elements differ", differ, n);
}

/* Rows [0,M) in one call against [0,M1) and [M1,M) in two (a batch cut into micro-batches). For
 * the accumulated product (tn) the cut runs through k too: two calls over [0,K1) and [K1,K) of
 * the rows of dy and x equal one. */
static void test_row_split(Layout lay) {
    const int shapes[][4] = {{100, 77, 300, 37}, {33, 65, 7, 1}, {256, 96, 40, 128}};
    size_t differ = 0, n = 0;
    for (int s = 0; s < 3; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], M1 = shapes[s][3];
        Prob p = prob_new(lay, M, N, K);
        float* once = fbuf((size_t)M * N);
        float* twice = malloc(sizeof(float) * M * N);
        memcpy(twice, once, sizeof(float) * M * N);
        run_all(&p, 0, once);
        run_rows(&p, 0, M1, 0, twice, (size_t)N);
        run_rows(&p, M1, M, 0, twice + (size_t)M1 * N, (size_t)N);
        differ += count_differ(once, twice, (size_t)M * N);
        n += (size_t)M * N;
        if (lay == TN) {   /* k cut: A (K,M) and B (K,N) rows [0,K1), then [K1,K) */
            int K1 = K / 3 + 1;
            float* C1 = fbuf((size_t)M * N);
            float* C2 = malloc(sizeof(float) * M * N);
            memcpy(C2, C1, sizeof(float) * M * N);
            gemm_f32(M, N, K, p.A, 1, M, p.B, N, 1, 1, C1, N);
            gemm_f32(M, N, K1, p.A, 1, M, p.B, N, 1, 1, C2, N);
            gemm_f32(M, N, K - K1, p.A + (size_t)K1 * M, 1, M, p.B + (size_t)K1 * N, N, 1, 1, C2, N);
            differ += count_differ(C1, C2, (size_t)M * N);
            n += (size_t)M * N;
            free(C1); free(C2);
        }
        free(once); free(twice); prob_free(&p);
    }
    char name[96];
    snprintf(name, sizeof name, "%s_bitwise_identical_when_rows_are_computed_in_two_pieces",
             layout_name[lay]);
    expect(differ == 0, name, "%zu of %zu elements differ", differ, n);
}

/* Each available path against the portable one, bitwise. */
static void test_paths(void) {
    const int shapes[][3] = {{200, 300, 520}, {7, 33, 65}, {65, 1, 300}, {1, 100, 1000}};
    for (GemmPath g = GEMM_AVX2; g <= GEMM_AVX512; g++) {
        char name[96];
        snprintf(name, sizeof name, "%s_path_bitwise_identical_to_portable", gemm_path_name(g));
        if (!gemm_path_supported(g)) { skip(name, "this CPU lacks the instruction set"); continue; }
        size_t differ = 0, n = 0;
        for (Layout lay = NT; lay <= TN; lay++)
            for (int s = 0; s < 4; s++) {
                int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                Prob p = prob_new(lay, M, N, K);
                float* a = fbuf((size_t)M * N);
                float* b = malloc(sizeof(float) * M * N);
                memcpy(b, a, sizeof(float) * M * N);
                set_path(GEMM_PORTABLE);
                run_all(&p, lay == TN, a);
                set_path(g);
                run_all(&p, lay == TN, b);
                differ += count_differ(a, b, (size_t)M * N);
                n += (size_t)M * N;
                free(a); free(b); prob_free(&p);
            }
        unsetenv("SEEDGPT_GEMM");
        expect(differ == 0, name, "%zu of %zu elements differ (nt, nn, tn)", differ, n);
    }
}

/* C inside a larger buffer (ldc > N, guard rows above and below): only the M x N block changes. */
static void test_no_write_outside(void) {
    const int shapes[][3] = {{7, 33, 65}, {65, 7, 1}, {1, 1, 300}, {37, 50, 260}};
    size_t touched = 0, changed_inside = 0, inside = 0;
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
                else { inside++; changed_inside += buf[i] != 1234.5f; }
            }
            free(buf); prob_free(&p);
        }
    expect(touched == 0, "never_writes_outside_the_output_block",
           "%zu elements outside changed; %zu of %zu inside written", touched, changed_inside,
           inside);
}

/* K = 0: a written product is zero, an accumulated one unchanged. */
static void test_empty_k(void) {
    float C[6] = {1, 2, 3, 4, 5, 6}, A[1] = {0}, B[1] = {0};
    gemm_f32(2, 3, 0, A, 0, 1, B, 3, 1, 1, C, 3);
    int unchanged = C[0] == 1 && C[5] == 6;
    gemm_f32(2, 3, 0, A, 0, 1, B, 3, 1, 0, C, 3);
    int zero = 1;
    for (int i = 0; i < 6; i++) zero &= C[i] == 0.0f;
    expect(unchanged && zero, "empty_k_writes_zero_and_accumulates_nothing",
           "accumulate kept C: %d, write zeroed C: %d", unchanged, zero);
}

/* A K long enough that the shared operand is packed in several k chunks: 5 x 17 written (B has
 * as many panels as A: A is the shared one; two chunks on the AVX-512 path) and 13 x 1
 * accumulated (A has more: B is shared; several chunks on every path). Every element equals its
 * chain. */
static void test_long_k(void) {
    const int shapes[][4] = {{5, 17, 750001, 0}, {13, 1, 1500001, 1}};  /* M, N, K, accumulate */
    size_t differ = 0, n = 0;
    for (int s = 0; s < 2; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], acc = shapes[s][3];
        Prob p = prob_new(NN, M, N, K);
        float* init = fbuf((size_t)M * N);
        float* c = malloc(sizeof(float) * M * N);
        for (GemmPath g = GEMM_PORTABLE; g <= GEMM_AVX512; g++) {
            if (!gemm_path_supported(g)) continue;
            set_path(g);
            memcpy(c, init, sizeof(float) * M * N);
            run_all(&p, acc, c);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    float chain = acc ? init[i * N + j] : 0.0f;
                    for (int k = 0; k < K; k++)
                        chain = fmaf(p.A[(size_t)i * K + k], p.B[(size_t)k * N + j], chain);
                    differ += memcmp(&c[i * N + j], &chain, sizeof chain) != 0;
                    n++;
                }
        }
        free(init); free(c); prob_free(&p);
    }
    unsetenv("SEEDGPT_GEMM");
    expect(differ == 0, "long_k_packed_in_chunks_equals_the_chain",
           "%zu of %zu elements x paths differ", differ, n);
}

int main(void) {
    printf("# gemm path by default: %s\n", gemm_path_name(gemm_path_selected()));
    omp_set_num_threads(2);
    for (Layout lay = NT; lay <= TN; lay++) {
        test_reference(lay, 0);
        test_reference(lay, 1);
        test_threads(lay);
        test_row_split(lay);
    }
    test_paths();
    test_no_write_outside();
    test_empty_k();
    test_long_k();
    return test_finish();
}
