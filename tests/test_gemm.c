/* tests/test_gemm.c — seedgpt's GEMM (cpu/gemm_cpu.c): each output element is the fmaf chain
 * over k in order (so: close to a float64 reference, and bitwise independent of the thread count,
 * the row split, the instruction-set path), accumulate semantics, and no write outside C.
 *
 * The three layouts are matmul's products: "nt" out = x . W^T (B stored (N,K)), "nn" dx = dy . W
 * (B stored (K,N)), "tn" dW += dy^T . x (A stored (K,M)).
 *
 * Every path this CPU runs is forced in turn (SEEDGPT_GEMM) and swept over the remainders: M mod
 * 12, N mod 32, K around the slices of 256, through each driver (A-blocked, B-blocked, direct),
 * written and accumulated, and with the k chunks cut small (the test build's pack limit) so that
 * every chunk restart runs; a path the CPU lacks is a SKIP.
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

/* ---- every path, every remainder, every driver -------------------------------------------- */

/* element (i, j) as the specification says: fmaf over k in order, from 0 or from the old value */
static float chain_of(const Prob* p, int i, int j, int accumulate, float old) {
    float acc = accumulate ? old : 0.0f;
    for (int k = 0; k < p->K; k++) acc = fmaf(a_at(p, i, k), b_at(p, k, j), acc);
    return acc;
}

#define GUARD_COLS 3          /* C's rows are N + 3 apart; the 3 columns past N must stay as set */
static const float guard_value = 1234.5f;

/* What a path's sweep reached: per driver, written (0) and accumulated (1), products in one k
 * chunk over several 256-value slices, and in several chunks; the fewer-row kernels that ran. */
typedef struct {
    int one_chunk[3][2], chunks[3][2];
    unsigned rows_kernels;
} Reach;

/* One product of the sweep at `threads` threads, written and accumulated (modes: bit 0 written,
 * bit 1 accumulated), at the default pack limit and (K > 256) at the smallest, where every 256
 * values of k are a chunk of their own. Returns the elements (in C and the guard columns) that
 * differ from the chains. */
static size_t sweep_one(Layout lay, int M, int N, int K, int threads, int modes, Reach* r,
                        size_t* n) {
    Prob p = prob_new(lay, M, N, K);
    const size_t ldc = (size_t)N + GUARD_COLS;
    float* init = fbuf((size_t)M * ldc);
    float* want = malloc(sizeof(float) * M * ldc);
    float* c = malloc(sizeof(float) * M * ldc);
    size_t differ = 0;
    for (int i = 0; i < M; i++)
        for (size_t j = N; j < ldc; j++) init[i * ldc + j] = guard_value;
    omp_set_num_threads(threads);
    for (int acc = 0; acc <= 1; acc++) {
        if (!(modes >> acc & 1)) continue;
        memcpy(want, init, sizeof(float) * M * ldc);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) want[i * ldc + j] = chain_of(&p, i, j, acc, init[i * ldc + j]);
        for (int small = 0; small <= (K > 256); small++) {
            gemm_test_pack_limit(small ? 1 : 0);
            memcpy(c, init, sizeof(float) * M * ldc);
            run_rows(&p, 0, M, acc, c, ldc);
            differ += count_differ(want, c, (size_t)M * ldc);
            *n += (size_t)M * ldc;
            GemmPacking g = gemm_f32_last_packing();
            if (g.chunks > 1) r->chunks[g.driver][acc] = 1;
            else if (K > 256) r->one_chunk[g.driver][acc] = 1;
        }
    }
    gemm_test_pack_limit(0);
    omp_set_num_threads(2);
    free(init); free(want); free(c); prob_free(&p);
    return differ;
}

/* Each path against the chains over the remainders:
 *   rows, in every layout: M = 36..47 x N 40 (A has the more panels on every path: A-blocked)
 *         and M = 12..23 x N 100 (B-blocked), K 300 (a 256 slice and 44), so each M mod 12 (mod
 *         6, mod 4) ends a panel beside a whole column panel, the fewer-row kernel's case; M = 1..4
 *         (direct);
 *   columns: N = 32..63 at M 5 (B-blocked) and M 61 (A-blocked), K 37, the layouts in turn;
 *   k: K = 1, 2, 15, 16, 17, 255, 256, 257, 511, 512, 513 at 13 x 70 (B) and 50 x 20 (A), the
 *         layouts in turn.
 * Written and accumulated (the columns alternately), at two chunkings, at 1 thread (the blocks
 * of several threads: test_path_threads below). And the sweep must reach what it means to: both
 * drivers written and accumulated, in one chunk and in several, the direct one, and on AVX-512
 * each kernel over 1 to 11 rows. */
static void test_every_path_and_remainder(GemmPath g) {
    char name[128], reach_name[128];
    snprintf(name, sizeof name, "%s_every_remainder_and_driver_equals_the_chain",
             gemm_path_name(g));
    snprintf(reach_name, sizeof reach_name,
             "%s_sweep_reaches_each_driver_chunk_restart_and_fewer_row_kernel", gemm_path_name(g));
    if (!gemm_path_supported(g)) {
        const char* why = g == GEMM_AVX2 ? "this CPU lacks AVX2 and FMA" : "this CPU lacks AVX-512F";
        skip(name, why);
        skip(reach_name, why);
        return;
    }
    set_path(g);
    (void)gemm_test_rows_kernels_run();
    Reach r = {0};
    size_t differ = 0, n = 0;
    static const int kset[] = {1, 2, 15, 16, 17, 255, 256, 257, 511, 512, 513};
    for (Layout lay = NT; lay <= TN; lay++) {
        for (int m = 0; m < 12; m++) {
            differ += sweep_one(lay, 36 + m, 40, 300, 1, 3, &r, &n);
            differ += sweep_one(lay, 12 + m, 100, 300, 1, 3, &r, &n);
        }
        for (int m = 1; m <= 4; m++) differ += sweep_one(lay, m, 40, 300, 1, 3, &r, &n);
    }
    for (int nn = 32; nn < 64; nn++) {
        differ += sweep_one((Layout)(nn % 3), 5, nn, 37, 1, 1 + nn % 2, &r, &n);
        differ += sweep_one((Layout)(nn % 3), 61, nn, 37, 1, 2 - nn % 2, &r, &n);
    }
    for (int k = 0; k < (int)(sizeof kset / sizeof kset[0]); k++) {
        differ += sweep_one((Layout)(k % 3), 13, 70, kset[k], 1, 3, &r, &n);
        differ += sweep_one((Layout)((k + 1) % 3), 50, 20, kset[k], 1, 3, &r, &n);
    }
    r.rows_kernels = gemm_test_rows_kernels_run();
    unsetenv("SEEDGPT_GEMM");
    expect(differ == 0, name, "%zu of %zu elements differ (guard columns included)", differ, n);
    int blocked = 1;
    for (int d = GEMM_A_BLOCKED; d <= GEMM_B_BLOCKED; d++)
        for (int acc = 0; acc <= 1; acc++) blocked &= r.one_chunk[d][acc] && r.chunks[d][acc];
    const unsigned want_rows = g == GEMM_AVX512 ? 0xffeu : 0u;   /* kernels over 1..11 rows */
    expect(blocked && r.one_chunk[GEMM_DIRECT][0] && r.rows_kernels == want_rows, reach_name,
           "A-blocked written/accumulated in one chunk %d/%d, in several %d/%d; B-blocked %d/%d, "
           "%d/%d; direct %d; fewer-row kernels run: mask 0x%x (want 0x%x)",
           r.one_chunk[GEMM_A_BLOCKED][0], r.one_chunk[GEMM_A_BLOCKED][1],
           r.chunks[GEMM_A_BLOCKED][0], r.chunks[GEMM_A_BLOCKED][1],
           r.one_chunk[GEMM_B_BLOCKED][0], r.one_chunk[GEMM_B_BLOCKED][1],
           r.chunks[GEMM_B_BLOCKED][0], r.chunks[GEMM_B_BLOCKED][1], r.one_chunk[GEMM_DIRECT][0],
           r.rows_kernels, want_rows);
}

/* Each path at 1, 2 and 3 threads, where the blocked operand is cut into blocks (several per
 * thread, the last one short): 203 x 40 (A-blocked: 17 to 51 panels of A) and 22 x 600 (B-blocked:
 * 19 to 38 panels of B), K 300, every layout, written and accumulated, at both chunkings. Every
 * result bitwise its chain, so bitwise the same at every thread count and blocking. */
static void test_path_threads(GemmPath g) {
    char name[128];
    snprintf(name, sizeof name, "%s_bitwise_the_chain_at_1_2_3_threads_in_blocks_and_chunks",
             gemm_path_name(g));
    if (!gemm_path_supported(g)) {
        skip(name, g == GEMM_AVX2 ? "this CPU lacks AVX2 and FMA" : "this CPU lacks AVX-512F");
        return;
    }
    set_path(g);
    Reach r = {0};
    size_t differ = 0, n = 0;
    for (Layout lay = NT; lay <= TN; lay++)
        for (int t = 1; t <= 3; t++) {
            differ += sweep_one(lay, 203, 40, 300, t, 3, &r, &n);
            differ += sweep_one(lay, 22, 600, 300, t, 3, &r, &n);
        }
    (void)gemm_test_rows_kernels_run();
    unsetenv("SEEDGPT_GEMM");
    expect(differ == 0 && r.chunks[GEMM_A_BLOCKED][0] && r.chunks[GEMM_B_BLOCKED][0], name,
           "%zu of %zu elements differ (guard columns included); several chunks reached: "
           "A-blocked %d, B-blocked %d", differ, n, r.chunks[GEMM_A_BLOCKED][0],
           r.chunks[GEMM_B_BLOCKED][0]);
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

/* A K long enough that the shared operand is packed in several k chunks at the built-in pack
 * limit: 5 x 17 written (B has as many panels as A: A is the shared one; two chunks on the
 * AVX-512 path) and 13 x 1 written and accumulated (A has more: B is shared; several chunks on
 * every path: the classifier's dlnf product, K 50304, is this case). Every element equals its
 * chain. */
static void test_long_k(void) {
    /* M, N, K, modes (bit 0 written, bit 1 accumulated) */
    const int shapes[][4] = {{5, 17, 750001, 1}, {13, 1, 1500001, 3}};
    size_t differ = 0, n = 0;
    for (int s = 0; s < 2; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], modes = shapes[s][3];
        Prob p = prob_new(NN, M, N, K);
        float* init = fbuf((size_t)M * N);
        float* c = malloc(sizeof(float) * M * N);
        for (int acc = 0; acc <= 1; acc++) {
            if (!(modes >> acc & 1)) continue;
            for (GemmPath g = GEMM_PORTABLE; g <= GEMM_AVX512; g++) {
                if (!gemm_path_supported(g)) continue;
                set_path(g);
                memcpy(c, init, sizeof(float) * M * N);
                run_all(&p, acc, c);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        float chain = chain_of(&p, i, j, acc, init[i * N + j]);
                        differ += memcmp(&c[i * N + j], &chain, sizeof chain) != 0;
                        n++;
                    }
            }
        }
        free(init); free(c); prob_free(&p);
    }
    unsetenv("SEEDGPT_GEMM");
    expect(differ == 0, "long_k_packed_in_chunks_equals_the_chain",
           "%zu of %zu elements x paths differ (A shared written; B shared written and "
           "accumulated)", differ, n);
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
    for (GemmPath g = GEMM_PORTABLE; g <= GEMM_AVX512; g++) {
        test_every_path_and_remainder(g);
        test_path_threads(g);
    }
    test_no_write_outside();
    test_empty_k();
    test_long_k();
    return test_finish();
}
