/* tests/test_attention_tiles.c — the CPU flash attention built with other tile sizes, and its
 * internal pieces checked one by one.
 *
 * This file #includes attention/flash_cpu.c itself, so it gets its own tile sizes (FLASH_BQ x
 * FLASH_BK, 16 x 48 unless the build passes others) and sees the file's static helpers; it must not
 * be linked with the core object of flash_cpu.c. The Makefile builds it twice:
 *   test_attention_tiles       16 x 48: BQ != BK, BK not a multiple of 32 (Philox blocks straddle
 *                              tiles), the AVX-512 tile product where the machine has it
 *   test_attention_tiles_odd   -DFLASH_BQ=7 -DFLASH_BK=5 -DFLASH_PORTABLE: tiles smaller than a
 *                              register block, every loop in its tail, the plain C tile product
 * Each checks against the float64 reference with tests/test_attention.c's tolerance (1e-5, argued
 * there): results of different tile sizes differ only by rounding, never by a mask or a boundary.
 */
#ifndef FLASH_BQ
#define FLASH_BQ 16
#endif
#ifndef FLASH_BK
#define FLASH_BK 48
#endif
#include "attention/flash_cpu.c"

#include <stdlib.h>
#include <omp.h>
#include "tests/ref_attention.h"
#include "tests/test.h"

#define TOL_FP32 1e-5

/* ---- pieces ------------------------------------------------------------------------------- */

static void test_exp_accuracy(void) {
    double worst = 0, worst_x = 0;
    for (int n = 0; n <= 2000000; n++) {
        const float x = (float)(-87.0 + 175.0 * n / 2000000.0);
        const double ref = exp((double)x);
        const double e = fabs((double)vexpf(x) - ref) / ref;
        if (e > worst) { worst = e; worst_x = x; }
    }
    const int edges = vexpf(-INFINITY) == 0.0f && vexpf(-100.0f) == 0.0f
                   && vexpf(0.0f) == 1.0f && isnan(vexpf(NAN));
    expect(worst < 2e-7 && edges, "vexpf_within_2e-7_relative",
           "max relative error %.2e at x = %.4f over [-87, 88] (bound 2e-7); exp(-inf) = %g, "
           "exp(-100) = %g, exp(0) = %g, exp(NaN) = %g", worst, worst_x, (double)vexpf(-INFINITY),
           (double)vexpf(-100.0f), (double)vexpf(0.0f), (double)vexpf(NAN));
}

/* tile_mm against a double product, at sizes that cover whole blocks and every tail, in both
 * operand layouts the kernel uses, with and without accumulation. */
static void test_tile_product(void) {
    const int sizes[][3] = {{1, 1, 1}, {8, 32, 64}, {13, 45, 7}, {64, 64, 64}, {3, 70, 33}, {17, 5, 130}};
    double worst = 0;
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++)
        for (int transposed = 0; transposed < 2; transposed++)
            for (int accumulate = 0; accumulate < 2; accumulate++) {
                const int M = sizes[t][0], N = sizes[t][1], K = sizes[t][2];
                const int ldc = N + 3, ldb = N + 5;
                float* A = malloc(sizeof(float) * M * K);
                float* Bm = malloc(sizeof(float) * K * ldb);
                float* C = malloc(sizeof(float) * M * ldc);
                double* R = malloc(sizeof(double) * M * N);
                for (int x = 0; x < M * K; x++) A[x] = (float)test_normal();
                for (int x = 0; x < K * ldb; x++) Bm[x] = (float)test_normal();
                for (int x = 0; x < M * ldc; x++) C[x] = (float)test_normal();
                const int a_rs = transposed ? 1 : K, a_ks = transposed ? M : 1;
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) {
                        double r = accumulate ? C[m * ldc + n] : 0.0;
                        for (int k = 0; k < K; k++) r += (double)A[m * a_rs + k * a_ks] * Bm[k * ldb + n];
                        R[m * N + n] = r;
                    }
                tile_mm(C, ldc, accumulate, A, a_rs, a_ks, Bm, ldb, M, N, K);
                double num = 0, den = 0;
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) {
                        num += (C[m * ldc + n] - R[m * N + n]) * (C[m * ldc + n] - R[m * N + n]);
                        den += R[m * N + n] * R[m * N + n];
                    }
                const double e = sqrt(num / den);
                worst = e > worst ? e : worst;
                free(A); free(Bm); free(C); free(R);
            }
    expect(worst < 1e-6, "tile_product_matches_float64", "worst ||C - ref|| / ||ref|| = %.2e over "
           "%zu sizes x 2 layouts x accumulate on/off (bound 1e-6)", worst,
           sizeof sizes / sizeof sizes[0]);
}

/* keep_tile must give exactly the bit philox_attn_draw gives for every (i, j), whatever the tile
 * offsets (aligned to 32 or not), the layout, and with zeros in the future and the padding. */
static void test_keep_tile_matches_philox(void) {
    const uint64_t seed = 0x0123456789abcdefULL;
    const Dropout drop = dropout_make(0.3);
    const int rows = 24, cols = 70;
    float* keep = malloc(sizeof(float) * rows * cols);
    long checked = 0, wrong = 0;
    for (int i0 = 0; i0 < 140; i0 += 23)
        for (int j0 = 0; j0 < 150; j0 += 11)
            for (int layout = 0; layout < 2; layout++) {
                const int nq = rows - (i0 % 5), nk = cols - (j0 % 7);
                const int rs = layout ? 1 : cols, cs = layout ? rows : 1;
                keep_tile(keep, rs, cs, rows, cols, i0, nq, j0, nk, seed, 3, 5, drop.thr);
                for (int r = 0; r < rows; r++)
                    for (int c = 0; c < cols; c++, checked++) {
                        const int i = i0 + r, j = j0 + c;
                        const float want = (r < nq && c < nk && j <= i)
                            ? (float)ref_attention_keep(seed, 3, 5, (uint32_t)i, (uint32_t)j, drop)
                            : 0.0f;
                        wrong += keep[r * rs + c * cs] != want;
                    }
            }
    expect(wrong == 0, "keep_tile_bits_equal_philox_attn_draw",
           "%ld of %ld entries differ (tiles at unaligned offsets, both layouts)", wrong, checked);
    free(keep);
}

/* ---- the kernel at these tile sizes -------------------------------------------------------- */

typedef struct { int B, T, NH, NKV, HD; uint32_t g0; double p; } TShape;

static void test_kernel_matches_reference(TShape s) {
    const size_t W = (size_t)(s.NH + 2 * s.NKV) * s.HD;
    const size_t n_qkv = (size_t)s.B * s.T * W, n_out = (size_t)s.B * s.T * s.NH * s.HD;
    const size_t n_lse = (size_t)s.B * s.NH * s.T;
    const Dropout drop = dropout_make(s.p);
    const uint64_t seed = 0x7117e5ULL + (uint64_t)s.T;
    float* qkv = malloc(sizeof(float) * n_qkv);
    float* dout = malloc(sizeof(float) * n_out);
    double* qkv_d = malloc(sizeof(double) * n_qkv);
    double* dout_d = malloc(sizeof(double) * n_out);
    for (size_t x = 0; x < n_qkv; x++) qkv_d[x] = qkv[x] = (float)test_normal();
    for (size_t x = 0; x < n_out; x++) dout_d[x] = dout[x] = (float)test_normal();

    float* out = malloc(sizeof(float) * n_out);
    float* lse = malloc(sizeof(float) * n_lse);
    float* dqkv[3];
    double* out_d = malloc(sizeof(double) * n_out);
    double* lse_d = malloc(sizeof(double) * n_lse);
    double* dqkv_d = malloc(sizeof(double) * n_qkv);
    ref_attention_forward(out_d, lse_d, qkv_d, s.B, s.T, s.NH, s.NKV, s.HD, s.g0, seed, drop);
    ref_attention_backward(dqkv_d, dout_d, qkv_d, s.B, s.T, s.NH, s.NKV, s.HD, s.g0, seed, drop);

    /* run at 1, 2 and 3 threads: the error from the first, bitwise identity across all three */
    const int saved = omp_get_max_threads();
    float* scratch = malloc(sizeof(float) * attention_backward_scratch_floats(s.B, s.T, s.NH, s.NKV, s.HD, 3));
    float* out1 = malloc(sizeof(float) * n_out);
    int same = 1;
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(t + 1);
        dqkv[t] = malloc(sizeof(float) * n_qkv);
        attention_forward(t ? out : out1, lse, qkv, s.B, s.T, s.NH, s.NKV, s.HD, s.g0, seed, drop);
        attention_backward(dqkv[t], scratch, dout, qkv, t ? out : out1, lse, s.B, s.T, s.NH, s.NKV,
                           s.HD, s.g0, seed, drop);
        if (t) same &= memcmp(out, out1, sizeof(float) * n_out) == 0
                    && memcmp(dqkv[t], dqkv[0], sizeof(float) * n_qkv) == 0;
    }
    omp_set_num_threads(saved);

    const double e_out = rel_err_fd(out1, out_d, n_out), e_lse = rel_err_fd(lse, lse_d, n_lse);
    const double e_d = rel_err_fd(dqkv[0], dqkv_d, n_qkv);
    char name[160];
    snprintf(name, sizeof name,
             "kernel_at_tiles_%dx%d_matches_float64_reference[B=%d T=%d NH=%d NKV=%d HD=%d p=%.1f]",
             BQ, BK, s.B, s.T, s.NH, s.NKV, s.HD, s.p);
    expect(e_out < TOL_FP32 && e_lse < TOL_FP32 && e_d < TOL_FP32 && same, name,
           "out %.1e lse %.1e dqkv %.1e (bound %.0e); 1, 2, 3 threads %s", e_out, e_lse, e_d,
           TOL_FP32, same ? "bitwise identical" : "DIFFER");
    free(qkv); free(dout); free(qkv_d); free(dout_d); free(out); free(out1); free(lse);
    for (int t = 0; t < 3; t++) free(dqkv[t]);
    free(out_d); free(lse_d); free(dqkv_d); free(scratch);
}

int main(void) {
    test_exp_accuracy();
    test_tile_product();
    test_keep_tile_matches_philox();
    const TShape shapes[] = {
        {1,   1, 2, 1, 32, 0, 0.5},
        {2,  50, 4, 2, 64, 9, 0.1},
        {1, 101, 2, 1, 40, 0, 0.5},
        {2,  48, 2, 2, 128, 4, 0.0},
        {1, 130, 3, 3, 32, 77, 0.1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_kernel_matches_reference(shapes[i]);
    return test_finish();
}
