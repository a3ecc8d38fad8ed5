/* tests/test_ops.c — the layer ops of model/ops.h (CPU implementation, cpu/ops_cpu.c).
 *
 *  1. every fp32 op, forward and every backward output, against the float64 reference
 *     (tests/ref_ops.c) on the same random inputs;
 *  2. the float64 reference's backward against central finite differences of the float64
 *     reference's forward, with dropout off and with p = 0.5;
 *  3. ops.h semantics: accumulated outputs accumulate, written outputs overwrite garbage, the
 *     in-place aliasing ops.h allows gives the same bits as separate buffers;
 *  4. every op bitwise identical at 1, 2 and 3 threads (OpenMP and OpenBLAS), at GPT-2 small
 *     shapes and, for matmul, at a row count that is not a multiple of 32;
 *  5. dropout keep bits: exactly philox_elem_draw >= thr (equality included), p = 0 is the plain
 *     path, the kept fraction, masks that change with step/layer/site/pass/sequence, batch-split
 *     invariance;
 *  6. cross-entropy: padded columns, uniform logits.
 *
 * Owns no code under test; tolerances are per-tensor relative norms ||a - ref|| / ||ref||.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include "tests/test.h"
#include "util/vexp.h"
#include "tests/ref_ops.h"
#include "model/ops.h"

void openblas_set_num_threads(int);
int openblas_get_num_threads(void);

/* ---- buffers and data --------------------------------------------------------------------- */

/* 64-byte aligned and zeroed, as model/mem.c gives the model (DESIGN §4). */
static void* xalloc(size_t bytes) {
    size_t n = (bytes + 63) / 64 * 64;
    void* p = aligned_alloc(64, n ? n : 64);
    if (p == NULL) { fprintf(stderr, "test_ops: out of memory (%zu bytes)\n", bytes); exit(2); }
    memset(p, 0, n ? n : 64);
    return p;
}
static float* falloc(size_t n) { return (float*)xalloc(n * sizeof(float)); }
static double* dalloc(size_t n) { return (double*)xalloc(n * sizeof(double)); }

/* f and d get the same values: normal(0, sd) + mean, rounded to float once. */
static void fill_fd(float* f, double* d, size_t n, double mean, double sd) {
    for (size_t i = 0; i < n; i++) {
        float v = (float)(mean + sd * test_normal());
        if (f) f[i] = v;
        if (d) d[i] = (double)v;
    }
}
static void fill_d(double* d, size_t n, double sd) { fill_fd(NULL, d, n, 0.0, sd); }
static void fill_f(float* f, size_t n, double sd) { fill_fd(f, NULL, n, 0.0, sd); }
static void to_double(double* d, const float* f, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = (double)f[i];
}
static void fill_value(float* f, size_t n, float v) { for (size_t i = 0; i < n; i++) f[i] = v; }
static void fill_tokens(int* tok, size_t n, int V) {
    for (size_t i = 0; i < n; i++) tok[i] = (int)(test_uniform() * V);
}
static int same_bits(const void* a, const void* b, size_t bytes) { return memcmp(a, b, bytes) == 0; }
static size_t count_nonfinite(const float* f, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += !isfinite(f[i]);
    return k;
}

static void set_threads(int n) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

/* ---- 1. fp32 ops against the float64 reference ---------------------------------------------
 * Bounds. fp32 has eps = 2^-24 ~ 6e-8 per rounding.
 *  - elementwise ops (embedding sum, dropout, residual add, GELU, AdamW, scaling): a handful of
 *    roundings (tanhf is within ~2 ulp) per element: measured ~1e-7; bound TOL_ELEM = 1e-6.
 *  - ops with fp32 sums of length K (layernorm over C = 768, matmul over K up to 768, parameter
 *    gradients summed over N rows): the rounding errors add like a random walk, ~sqrt(K) eps
 *    ~ 2e-6 at K = 768 in the worst case of a plain running sum; bound TOL_SUM = 1e-5.
 *  - cross-entropy sums its exponentials in double; only (logit - max) is rounded in fp32 and
 *    the probability once: bound TOL_ELEM.
 */
#define TOL_ELEM 1e-6
#define TOL_SUM 1e-5

static void test_encoder_vs_ref(void) {
    int B = 3, T = 33, C = 202, Vp = 50, maxT = 40;   /* C % 4 != 0: the tail of a Philox call */
    uint32_t g0 = 7;
    uint64_t seed = philox_site_seed(1234, 5, 0, SITE_EMBD, PASS_FORWARD);
    Dropout drop = dropout_make(0.1);
    size_t nout = (size_t)B * T * C;
    int* inp = malloc(sizeof(int) * B * T);
    fill_tokens(inp, (size_t)B * T, Vp);
    float *wte = falloc((size_t)Vp * C), *wpe = falloc((size_t)maxT * C), *out = falloc(nout);
    double *wte_d = dalloc((size_t)Vp * C), *wpe_d = dalloc((size_t)maxT * C), *out_d = dalloc(nout);
    fill_fd(wte, wte_d, (size_t)Vp * C, 0, 0.1);
    fill_fd(wpe, wpe_d, (size_t)maxT * C, 0, 0.1);
    encoder_forward(out, inp, wte, wpe, B, T, C, g0, seed, drop);
    ref_encoder_forward(out_d, inp, wte_d, wpe_d, B, T, C, g0, seed, drop);
    double e = rel_err_fd(out, out_d, nout);
    expect(e < TOL_ELEM, "encoder_forward_matches_float64_reference", "rel err %.2e (bound %.0e), p=0.1", e, TOL_ELEM);

    float *dout = falloc(nout), *dwte = falloc((size_t)Vp * C), *dwpe = falloc((size_t)maxT * C);
    double *dout_d = dalloc(nout), *dwte_d = dalloc((size_t)Vp * C), *dwpe_d = dalloc((size_t)maxT * C);
    fill_fd(dout, dout_d, nout, 0, 1.0);
    fill_fd(dwte, dwte_d, (size_t)Vp * C, 0, 1.0);   /* accumulated into: start non-zero */
    fill_fd(dwpe, dwpe_d, (size_t)maxT * C, 0, 1.0);
    encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    ref_encoder_backward(dwte_d, dwpe_d, dout_d, inp, B, T, C);
    double e1 = rel_err_fd(dwte, dwte_d, (size_t)Vp * C), e2 = rel_err_fd(dwpe, dwpe_d, (size_t)maxT * C);
    expect(e1 < TOL_ELEM && e2 < TOL_ELEM, "encoder_backward_matches_float64_reference",
           "rel err dwte %.2e dwpe %.2e (bound %.0e)", e1, e2, TOL_ELEM);
    free(inp); free(wte); free(wpe); free(out); free(wte_d); free(wpe_d); free(out_d);
    free(dout); free(dwte); free(dwpe); free(dout_d); free(dwte_d); free(dwpe_d);
}

/* The LayerNorm's row sums run sixteen rows side by side (cpu/ln_rows.h); each must be llm.c's
 * sequential loop, bit for bit. Written out here as llm.c writes it, at shapes with a last partial
 * group of rows and a C that is not a multiple of 16. */
static void test_layernorm_is_the_sequential_loop_bitwise(void) {
    const int shapes[][2] = {{37, 200}, {48, 768}, {5, 33}, {19, 16}};
    long differ = 0, values = 0;
    for (int k = 0; k < 4; k++) {
        const int N = shapes[k][0], C = shapes[k][1];
        const size_t n = (size_t)N * C;
        float *x = falloc(n), *d = falloc(n), *w = falloc(C), *b = falloc(C), *out = falloc(n);
        float *mean = falloc(N), *rstd = falloc(N), *dx = falloc(n), *dw = falloc(C), *db = falloc(C);
        fill_fd(x, NULL, n, 0.3, 2.0);
        fill_fd(d, NULL, n, 0.0, 1.0);
        fill_fd(w, NULL, C, 1.0, 0.5);
        fill_fd(b, NULL, C, 0.0, 0.5);
        memset(dx, 0, n * sizeof(float)); memset(dw, 0, C * sizeof(float)); memset(db, 0, C * sizeof(float));
        layernorm_forward(out, mean, rstd, x, w, b, N, C);
        layernorm_backward(dx, dw, db, d, x, w, mean, rstd, N, C);
        for (int r = 0; r < N; r++) {
            const float* xr = x + (size_t)r * C;
            const float* dr = d + (size_t)r * C;
            float m = 0.0f;
            for (int c = 0; c < C; c++) m += xr[c];
            m = m / C;
            float v = 0.0f;
            for (int c = 0; c < C; c++) { float t = xr[c] - m; v += t * t; }
            v = v / C;
            const float s = 1.0f / sqrtf(v + 1e-5f);
            differ += mean[r] != m || rstd[r] != s;
            float dm = 0.0f, dnm = 0.0f;
            for (int c = 0; c < C; c++) {
                float norm = (xr[c] - m) * s, dnorm = w[c] * dr[c];
                dm += dnorm;
                dnm += dnorm * norm;
            }
            dm = dm / C;
            dnm = dnm / C;
            for (int c = 0; c < C; c++) {
                float norm = (xr[c] - m) * s, dnorm = w[c] * dr[c];
                float want_out = (s * (xr[c] - m)) * w[c] + b[c];
                float want_dx = 0.0f + (dnorm - dm - norm * dnm) * s;
                differ += memcmp(&out[(size_t)r * C + c], &want_out, 4) != 0;
                differ += memcmp(&dx[(size_t)r * C + c], &want_dx, 4) != 0;
            }
            values += 2 + 2 * C;
        }
        free(x); free(d); free(w); free(b); free(out); free(mean); free(rstd); free(dx); free(dw); free(db);
    }
    expect(differ == 0, "layernorm_rows_are_the_sequential_loop_bitwise",
           "%ld of %ld means, rstds, outputs and input gradients differ (N 37, 48, 5, 19; C 200, 768, 33, 16)",
           differ, values);
}

static void test_layernorm_vs_ref(void) {
    int N = 96, C = 768;
    size_t n = (size_t)N * C;
    float *x = falloc(n), *w = falloc(C), *b = falloc(C), *out = falloc(n), *mean = falloc(N), *rstd = falloc(N);
    double *x_d = dalloc(n), *w_d = dalloc(C), *b_d = dalloc(C), *out_d = dalloc(n), *mean_d = dalloc(N), *rstd_d = dalloc(N);
    fill_fd(x, x_d, n, 0.3, 2.0);   /* non-zero mean: the centring matters */
    fill_fd(w, w_d, C, 1.0, 0.2);
    fill_fd(b, b_d, C, 0.0, 0.2);
    layernorm_forward(out, mean, rstd, x, w, b, N, C);
    ref_layernorm_forward(out_d, mean_d, rstd_d, x_d, w_d, b_d, N, C);
    double eo = rel_err_fd(out, out_d, n), em = rel_err_fd(mean, mean_d, N), er = rel_err_fd(rstd, rstd_d, N);
    expect(eo < TOL_SUM && em < TOL_SUM && er < TOL_SUM, "layernorm_forward_matches_float64_reference",
           "rel err out %.2e mean %.2e rstd %.2e (bound %.0e)", eo, em, er, TOL_SUM);

    float *dout = falloc(n), *dx = falloc(n), *dw = falloc(C), *db = falloc(C);
    double *dout_d = dalloc(n), *dx_d = dalloc(n), *dw_d = dalloc(C), *db_d = dalloc(C);
    fill_fd(dout, dout_d, n, 0, 1.0);
    fill_fd(dx, dx_d, n, 0, 1.0);   /* all three are accumulated into */
    fill_fd(dw, dw_d, C, 0, 1.0);
    fill_fd(db, db_d, C, 0, 1.0);
    /* both backwards from the same (fp32) saved statistics, as the model runs them */
    double* meanf_d = dalloc(N), *rstdf_d = dalloc(N);
    to_double(meanf_d, mean, N);
    to_double(rstdf_d, rstd, N);
    layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
    ref_layernorm_backward(dx_d, dw_d, db_d, dout_d, x_d, w_d, meanf_d, rstdf_d, N, C);
    double ex = rel_err_fd(dx, dx_d, n), ew = rel_err_fd(dw, dw_d, C), eb = rel_err_fd(db, db_d, C);
    expect(ex < TOL_SUM && ew < TOL_SUM && eb < TOL_SUM, "layernorm_backward_matches_float64_reference",
           "rel err dinp %.2e dweight %.2e dbias %.2e (bound %.0e)", ex, ew, eb, TOL_SUM);
    free(x); free(w); free(b); free(out); free(mean); free(rstd);
    free(x_d); free(w_d); free(b_d); free(out_d); free(mean_d); free(rstd_d);
    free(dout); free(dx); free(dw); free(db); free(dout_d); free(dx_d); free(dw_d); free(db_d);
    free(meanf_d); free(rstdf_d);
}

static void test_matmul_vs_ref(void) {
    int N = 64, C = 768, OC = 320;
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    float *x = falloc(ni), *w = falloc(nw), *b = falloc(OC), *out = falloc(no);
    double *x_d = dalloc(ni), *w_d = dalloc(nw), *b_d = dalloc(OC), *out_d = dalloc(no);
    fill_fd(x, x_d, ni, 0, 1.0);
    fill_fd(w, w_d, nw, 0, 0.02);
    fill_fd(b, b_d, OC, 0, 0.1);
    matmul_forward(out, x, w, b, N, C, OC);
    ref_matmul_forward(out_d, x_d, w_d, b_d, N, C, OC);
    double e = rel_err_fd(out, out_d, no);
    expect(e < TOL_SUM, "matmul_forward_matches_float64_reference", "rel err %.2e (bound %.0e), N=%d C=%d OC=%d",
           e, TOL_SUM, N, C, OC);

    float *dout = falloc(no), *dx = falloc(ni), *dw = falloc(nw), *db = falloc(OC);
    double *dout_d = dalloc(no), *dx_d = dalloc(ni), *dw_d = dalloc(nw), *db_d = dalloc(OC);
    fill_fd(dout, dout_d, no, 0, 1.0);
    fill_fd(dw, dw_d, nw, 0, 1.0);   /* accumulated into */
    fill_fd(db, db_d, OC, 0, 1.0);
    matmul_backward(dx, dw, db, dout, x, w, N, C, OC);
    ref_matmul_backward(dx_d, dw_d, db_d, dout_d, x_d, w_d, N, C, OC);
    double ex = rel_err_fd(dx, dx_d, ni), ew = rel_err_fd(dw, dw_d, nw), eb = rel_err_fd(db, db_d, OC);
    expect(ex < TOL_SUM && ew < TOL_SUM && eb < TOL_SUM, "matmul_backward_matches_float64_reference",
           "rel err dinp %.2e dweight %.2e dbias %.2e (bound %.0e)", ex, ew, eb, TOL_SUM);
    free(x); free(w); free(b); free(out); free(x_d); free(w_d); free(b_d); free(out_d);
    free(dout); free(dx); free(dw); free(db); free(dout_d); free(dx_d); free(dw_d); free(db_d);
}

static void test_gelu_vs_ref(void) {
    size_t n = 100000;
    float *x = falloc(n), *out = falloc(n), *dout = falloc(n), *dx = falloc(n);
    double *x_d = dalloc(n), *out_d = dalloc(n), *dout_d = dalloc(n), *dx_d = dalloc(n);
    fill_fd(x, x_d, n, 0, 3.0);   /* into both tails */
    fill_fd(dout, dout_d, n, 0, 1.0);
    gelu_forward(out, x, n);
    ref_gelu_forward(out_d, x_d, n);
    gelu_backward(dx, x, dout, n);
    ref_gelu_backward(dx_d, x_d, dout_d, n);
    double e = rel_err_fd(out, out_d, n), eb = rel_err_fd(dx, dx_d, n);
    expect(e < TOL_ELEM, "gelu_forward_matches_float64_reference", "rel err %.2e (bound %.0e)", e, TOL_ELEM);
    expect(eb < TOL_ELEM, "gelu_backward_matches_float64_reference", "rel err %.2e (bound %.0e)", eb, TOL_ELEM);
    free(x); free(out); free(dout); free(dx); free(x_d); free(out_d); free(dout_d); free(dx_d);
}

static void test_residual_dropout_vs_ref(void) {
    int B = 3, T = 33, C = 202;
    uint32_t g0 = 11;
    uint64_t seed = philox_site_seed(99, 3, 2, SITE_ATTN_RESID, PASS_FORWARD);
    size_t n = (size_t)B * T * C;
    float *x = falloc(n), *br = falloc(n), *out = falloc(n), *dy = falloc(n);
    double *x_d = dalloc(n), *br_d = dalloc(n), *out_d = dalloc(n), *dy_d = dalloc(n);
    fill_fd(x, x_d, n, 0, 1.0);
    fill_fd(br, br_d, n, 0, 1.0);
    const double ps[3] = {0.0, 0.1, 0.5};
    for (int k = 0; k < 3; k++) {
        Dropout drop = dropout_make(ps[k]);
        residual_dropout_forward(out, x, br, B, T, C, g0, seed, drop);
        ref_residual_dropout_forward(out_d, x_d, br_d, B, T, C, g0, seed, drop);
        dropout_backward(dy, br, B, T, C, g0, seed, drop);
        ref_dropout_backward(dy_d, br_d, B, T, C, g0, seed, drop);
        double e = rel_err_fd(out, out_d, n), eb = rel_err_fd(dy, dy_d, n);
        char name[96];
        snprintf(name, sizeof name, "residual_dropout_forward_matches_float64_reference_p%.1f", ps[k]);
        expect(e < TOL_ELEM, name, "rel err %.2e (bound %.0e)", e, TOL_ELEM);
        snprintf(name, sizeof name, "dropout_backward_matches_float64_reference_p%.1f", ps[k]);
        expect(eb < TOL_ELEM, name, "rel err %.2e (bound %.0e)", eb, TOL_ELEM);
    }
    free(x); free(br); free(out); free(dy); free(x_d); free(br_d); free(out_d); free(dy_d);
}

/* vexpd (util/vexp.h), the cross-entropy's exponential, against long double expl over the
 * softmax's range; its edges: -inf and below -708 give 0, 0 gives 1, NaN stays NaN */
static void test_vexpd_accuracy(void) {
    double worst = 0, worst_x = 0;
    for (int n = 0; n <= 2000000; n++) {
        const double x = -708.0 + 709.0 * n / 2000000.0;
        const long double ref = expl((long double)x);
        const double e = (double)(fabsl((long double)vexpd(x) - ref) / ref);
        if (e > worst) { worst = e; worst_x = x; }
    }
    const int edges = vexpd(-INFINITY) == 0.0 && vexpd(-1000.0) == 0.0 && vexpd(0.0) == 1.0
                   && isnan(vexpd(NAN));
    expect(worst < 4e-16 && edges, "vexpd_within_4e-16_relative",
           "max relative error %.2e at x = %.4f over [-708, 1] (bound 4e-16); exp(-inf) = %g, "
           "exp(-1000) = %g, exp(0) = %g, exp(NaN) = %g", worst, worst_x, vexpd(-INFINITY),
           vexpd(-1000.0), vexpd(0.0), vexpd(NAN));
}

static void test_crossentropy_vs_ref(void) {
    int N = 32, V = 1000, Vp = 1024;
    size_t n = (size_t)N * Vp;
    float *l = falloc(n), *loss = falloc(N);
    double *l_d = dalloc(n), *loss_d = dalloc(N);
    int* tgt = malloc(sizeof(int) * N);
    fill_tokens(tgt, N, V);
    fill_fd(l, l_d, n, 0, 3.0);
    for (int r = 0; r < N; r++) {
        for (int v = V; v < Vp; v++) { l[(size_t)r * Vp + v] = 0.0f; l_d[(size_t)r * Vp + v] = 0.0; }
    }
    crossentropy_forward(loss, l, tgt, N, V, Vp);
    ref_crossentropy_forward(loss_d, l_d, tgt, N, V, Vp);
    double e = rel_err_fd(loss, loss_d, N);
    expect(e < TOL_ELEM, "crossentropy_forward_matches_float64_reference", "rel err %.2e (bound %.0e)", e, TOL_ELEM);
    float dloss = 1.0f / N;
    crossentropy_backward(l, tgt, dloss, N, V, Vp);
    ref_crossentropy_backward(l_d, tgt, (double)dloss, N, V, Vp);
    double eb = rel_err_fd(l, l_d, n);
    expect(eb < TOL_ELEM, "crossentropy_backward_matches_float64_reference", "rel err %.2e (bound %.0e)", eb, TOL_ELEM);
    free(l); free(loss); free(l_d); free(loss_d); free(tgt);
}

/* The loss is exact at any scale of the logits: a row of V equal logits has loss ln V whether
 * they are 1 or 1e30 (max + log(sum) - l[t] in double lost log(sum) to the rounding of a large
 * max: 1e12 gave 5.546875, 1e18 gave 0), and a target logit far below the max gives a loss beyond
 * float's range, +inf, never 0. Forward and fused forward+backward alike. */
static void test_crossentropy_exact_at_any_scale(void) {
    enum { V = 257, Vp = 384, ROWS = 8 };
    const double scales[ROWS - 2] = {1.0, 1e6, 1e12, 1e18, 1e30, -1e30};
    float* l = falloc((size_t)ROWS * Vp);
    float* lf = falloc((size_t)ROWS * Vp);
    float loss[ROWS], fused[ROWS];
    int tgt[ROWS];
    for (int r = 0; r < ROWS; r++) {
        float* row = l + (size_t)r * Vp;
        for (int v = 0; v < Vp; v++) row[v] = v < V && r < ROWS - 2 ? (float)scales[r] : 0.0f;
        tgt[r] = (r * 37) % V;
    }
    /* row 6: the target at -3e38, one other logit at +3e38: the true loss is 6e38 > FLT_MAX;
     * row 7: the target 1e20 above the rest: the true loss is 256 e^-1e20, 0 in float */
    l[6 * (size_t)Vp + tgt[6]] = -3e38f;
    l[6 * (size_t)Vp + (tgt[6] + 1) % V] = 3e38f;
    l[7 * (size_t)Vp + tgt[7]] = 1e20f;
    memcpy(lf, l, sizeof(float) * (size_t)ROWS * Vp);
    crossentropy_forward(loss, l, tgt, ROWS, V, Vp);
    crossentropy_forward_backward(fused, lf, tgt, 1.0f / ROWS, ROWS, V, Vp);
    const float lnV = (float)log((double)V);
    int ok = 1;
    for (int r = 0; r < ROWS - 2; r++) ok &= loss[r] == lnV && fused[r] == lnV;
    ok &= isinf(loss[6]) && loss[6] > 0 && isinf(fused[6]) && fused[6] > 0;
    ok &= loss[7] == 0.0f && fused[7] == 0.0f;
    expect(ok, "crossentropy_loss_exact_at_any_scale",
           "equal logits at 1, 1e6, 1e12, 1e18, 1e30, -1e30: losses %.7g %.7g %.7g %.7g %.7g %.7g "
           "(ln %d = %.7g expected; fused: %.7g %.7g %.7g %.7g); target 6e38 below the max: %g "
           "(fused %g; +inf expected); target 1e20 above the rest: %g (0 expected)", loss[0],
           loss[1], loss[2], loss[3], loss[4], loss[5], V, lnV, fused[1], fused[2], fused[3],
           fused[4], loss[6], fused[6], loss[7]);
    free(l);
    free(lf);
}

static void test_norm_adamw_vs_ref(void) {
    size_t n = 100003;
    float *x = falloc(n);
    double *x_d = dalloc(n);
    fill_fd(x, x_d, n, 0, 1.0);
    double s = sum_squares(x, n), s_d = ref_sum_squares(x_d, n);
    double e = fabs(s - s_d) / s_d;
    expect(e < 1e-12, "sum_squares_matches_float64_reference", "rel err %.2e (bound 1e-12: both sum in double)", e);
    scale_inplace(x, n, 0.37f);
    ref_scale_inplace(x_d, n, (double)0.37f);
    e = rel_err_fd(x, x_d, n);
    expect(e < TOL_ELEM, "scale_inplace_matches_float64_reference", "rel err %.2e (bound %.0e)", e, TOL_ELEM);

    float *p = falloc(n), *g = falloc(n), *m = falloc(n), *v = falloc(n);
    double *p_d = dalloc(n), *g_d = dalloc(n), *m_d = dalloc(n), *v_d = dalloc(n), *p0 = dalloc(n);
    fill_fd(p, p_d, n, 0, 1.0);
    fill_fd(g, g_d, n, 0, 0.1);
    fill_fd(m, m_d, n, 0, 0.05);
    for (size_t i = 0; i < n; i++) { v[i] = (float)(0.01 * test_uniform()); v_d[i] = v[i]; }
    memcpy(p0, p_d, n * sizeof(double));
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    int t = 5;
    adamw_update(p, g, 1.0f, m, v, n, lr, b1, b2, eps, wd, t);
    ref_adamw_update(p_d, g_d, m_d, v_d, n, lr, b1, b2, eps, wd, t);
    double ep = rel_err_fd(p, p_d, n), em = rel_err_fd(m, m_d, n), ev = rel_err_fd(v, v_d, n);
    /* the update itself, p_new - p_old, is a small difference of O(1) numbers: it carries
     * ulp(p)/|update| ~ 6e-8/1e-2 of relative error from the fp32 subtraction alone */
    double* du = dalloc(n), *du_d = dalloc(n);
    for (size_t i = 0; i < n; i++) { du[i] = (double)p[i] - p0[i]; du_d[i] = p_d[i] - p0[i]; }
    double eu = rel_err_dd(du, du_d, n);
    expect(ep < TOL_ELEM && em < TOL_ELEM && ev < TOL_ELEM && eu < 1e-4, "adamw_update_matches_float64_reference",
           "rel err params %.2e m %.2e v %.2e (bound %.0e), update p_new-p_old %.2e (bound 1e-4)",
           ep, em, ev, TOL_ELEM, eu);
    free(x); free(x_d); free(p); free(g); free(m); free(v); free(p_d); free(g_d); free(m_d); free(v_d);
    free(p0); free(du); free(du_d);
}

/* ---- 2. the float64 reference against central finite differences --------------------------
 * Scalar loss L = sum(out * W) with fixed random W, so dL/dout = W. Central differences with
 * h = 1e-5: truncation error ~ h^2 |f'''| ~ 1e-10, rounding ~ 1e-16 |L| / h ~ 1e-10: the bound
 * FD_TOL = 1e-6 leaves room and still catches any wrong term (which costs >= 1e-3). */
#define FD_H 1e-5
#define FD_TOL 1e-6

typedef double (*LossFn)(void* ctx);

/* relative error of grad (n) against central differences of loss() in each element of x */
static double fd_check(LossFn loss, void* ctx, double* x, const double* grad, size_t n) {
    double* fd = dalloc(n);
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + FD_H;
        double lp = loss(ctx);
        x[i] = keep - FD_H;
        double lm = loss(ctx);
        x[i] = keep;
        fd[i] = (lp - lm) / (2 * FD_H);
    }
    double e = rel_err_dd(grad, fd, n);
    free(fd);
    return e;
}

static double dot(const double* a, const double* b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

typedef struct {
    int B, T, C, Vp, maxT;
    uint32_t g0;
    uint64_t seed;
    Dropout drop;
    const int* inp;
    double *wte, *wpe, *W, *out;
} EncCtx;
static double enc_loss(void* p) {
    EncCtx* c = p;
    ref_encoder_forward(c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C, c->g0, c->seed, c->drop);
    return dot(c->out, c->W, (size_t)c->B * c->T * c->C);
}

static void fd_encoder(double p) {
    EncCtx c = {.B = 2, .T = 5, .C = 10, .Vp = 7, .maxT = 6, .g0 = 3,
                .seed = philox_site_seed(42, 1, 0, SITE_EMBD, PASS_FORWARD), .drop = dropout_make(p)};
    size_t n = (size_t)c.B * c.T * c.C;
    int* inp = malloc(sizeof(int) * c.B * c.T);
    fill_tokens(inp, (size_t)c.B * c.T, c.Vp - 1);   /* token Vp-1 never used: its gradient is 0 */
    inp[1] = inp[0];                                  /* a repeated token accumulates */
    c.inp = inp;
    c.wte = dalloc((size_t)c.Vp * c.C); c.wpe = dalloc((size_t)c.maxT * c.C);
    c.W = dalloc(n); c.out = dalloc(n);
    fill_d(c.wte, (size_t)c.Vp * c.C, 1.0); fill_d(c.wpe, (size_t)c.maxT * c.C, 1.0); fill_d(c.W, n, 1.0);
    double *dy = dalloc(n), *dwte = dalloc((size_t)c.Vp * c.C), *dwpe = dalloc((size_t)c.maxT * c.C);
    /* the chain the model runs: dropout's backward, then the embedding's */
    ref_dropout_backward(dy, c.W, c.B, c.T, c.C, c.g0, c.seed, c.drop);
    ref_encoder_backward(dwte, dwpe, dy, inp, c.B, c.T, c.C);
    double e1 = fd_check(enc_loss, &c, c.wte, dwte, (size_t)c.Vp * c.C);
    double e2 = fd_check(enc_loss, &c, c.wpe, dwpe, (size_t)c.maxT * c.C);
    char name[96];
    snprintf(name, sizeof name, "ref_encoder_backward_matches_finite_differences_p%.1f", p);
    expect(e1 < FD_TOL && e2 < FD_TOL, name, "rel err dwte %.2e dwpe %.2e (bound %.0e)", e1, e2, FD_TOL);
    free(inp); free(c.wte); free(c.wpe); free(c.W); free(c.out); free(dy); free(dwte); free(dwpe);
}

typedef struct { int N, C; double *x, *w, *b, *W, *out, *mean, *rstd; } LnCtx;
static double ln_loss(void* p) {
    LnCtx* c = p;
    ref_layernorm_forward(c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C);
    return dot(c->out, c->W, (size_t)c->N * c->C);
}

static void fd_layernorm(void) {
    LnCtx c = {.N = 4, .C = 16};
    size_t n = (size_t)c.N * c.C;
    c.x = dalloc(n); c.w = dalloc(c.C); c.b = dalloc(c.C); c.W = dalloc(n); c.out = dalloc(n);
    c.mean = dalloc(c.N); c.rstd = dalloc(c.N);
    fill_d(c.x, n, 1.0); fill_d(c.w, c.C, 1.0); fill_d(c.b, c.C, 1.0); fill_d(c.W, n, 1.0);
    for (size_t i = 0; i < n; i++) c.x[i] += 0.5;
    double *dx = dalloc(n), *dw = dalloc(c.C), *db = dalloc(c.C);
    ln_loss(&c);
    ref_layernorm_backward(dx, dw, db, c.W, c.x, c.w, c.mean, c.rstd, c.N, c.C);
    double ex = fd_check(ln_loss, &c, c.x, dx, n);
    double ew = fd_check(ln_loss, &c, c.w, dw, c.C);
    double eb = fd_check(ln_loss, &c, c.b, db, c.C);
    expect(ex < FD_TOL && ew < FD_TOL && eb < FD_TOL, "ref_layernorm_backward_matches_finite_differences",
           "rel err dinp %.2e dweight %.2e dbias %.2e (bound %.0e)", ex, ew, eb, FD_TOL);
    free(c.x); free(c.w); free(c.b); free(c.W); free(c.out); free(c.mean); free(c.rstd);
    free(dx); free(dw); free(db);
}

typedef struct { int N, C, OC; double *x, *w, *b, *W, *out; } MmCtx;
static double mm_loss(void* p) {
    MmCtx* c = p;
    ref_matmul_forward(c->out, c->x, c->w, c->b, c->N, c->C, c->OC);
    return dot(c->out, c->W, (size_t)c->N * c->OC);
}

static void fd_matmul(void) {
    MmCtx c = {.N = 5, .C = 8, .OC = 6};
    size_t ni = (size_t)c.N * c.C, nw = (size_t)c.OC * c.C, no = (size_t)c.N * c.OC;
    c.x = dalloc(ni); c.w = dalloc(nw); c.b = dalloc(c.OC); c.W = dalloc(no); c.out = dalloc(no);
    fill_d(c.x, ni, 1.0); fill_d(c.w, nw, 1.0); fill_d(c.b, c.OC, 1.0); fill_d(c.W, no, 1.0);
    double *dx = dalloc(ni), *dw = dalloc(nw), *db = dalloc(c.OC);
    ref_matmul_backward(dx, dw, db, c.W, c.x, c.w, c.N, c.C, c.OC);
    double ex = fd_check(mm_loss, &c, c.x, dx, ni);
    double ew = fd_check(mm_loss, &c, c.w, dw, nw);
    double eb = fd_check(mm_loss, &c, c.b, db, c.OC);
    expect(ex < FD_TOL && ew < FD_TOL && eb < FD_TOL, "ref_matmul_backward_matches_finite_differences",
           "rel err dinp %.2e dweight %.2e dbias %.2e (bound %.0e)", ex, ew, eb, FD_TOL);
    free(c.x); free(c.w); free(c.b); free(c.W); free(c.out); free(dx); free(dw); free(db);
}

typedef struct { size_t n; double *x, *W, *out; } GeluCtx;
static double gelu_loss(void* p) {
    GeluCtx* c = p;
    ref_gelu_forward(c->out, c->x, c->n);
    return dot(c->out, c->W, c->n);
}

static void fd_gelu(void) {
    GeluCtx c = {.n = 200};
    c.x = dalloc(c.n); c.W = dalloc(c.n); c.out = dalloc(c.n);
    fill_d(c.x, c.n, 2.5); fill_d(c.W, c.n, 1.0);
    double* dx = dalloc(c.n);
    ref_gelu_backward(dx, c.x, c.W, c.n);
    double e = fd_check(gelu_loss, &c, c.x, dx, c.n);
    expect(e < FD_TOL, "ref_gelu_backward_matches_finite_differences", "rel err %.2e (bound %.0e)", e, FD_TOL);
    free(c.x); free(c.W); free(c.out); free(dx);
}

typedef struct {
    int B, T, C;
    uint32_t g0;
    uint64_t seed;
    Dropout drop;
    double *x, *br, *W, *out;
} ResCtx;
static double res_loss(void* p) {
    ResCtx* c = p;
    ref_residual_dropout_forward(c->out, c->x, c->br, c->B, c->T, c->C, c->g0, c->seed, c->drop);
    return dot(c->out, c->W, (size_t)c->B * c->T * c->C);
}

static void fd_residual_dropout(double p) {
    ResCtx c = {.B = 2, .T = 4, .C = 13, .g0 = 5,
                .seed = philox_site_seed(42, 2, 1, SITE_MLP_RESID, PASS_FORWARD), .drop = dropout_make(p)};
    size_t n = (size_t)c.B * c.T * c.C;
    c.x = dalloc(n); c.br = dalloc(n); c.W = dalloc(n); c.out = dalloc(n);
    fill_d(c.x, n, 1.0); fill_d(c.br, n, 1.0); fill_d(c.W, n, 1.0);
    double* dbr = dalloc(n);
    ref_dropout_backward(dbr, c.W, c.B, c.T, c.C, c.g0, c.seed, c.drop);
    double eb = fd_check(res_loss, &c, c.br, dbr, n);
    double ex = fd_check(res_loss, &c, c.x, c.W, n);   /* the residual path: dL/dx = dout */
    char name[96];
    snprintf(name, sizeof name, "ref_dropout_backward_matches_finite_differences_p%.1f", p);
    expect(eb < FD_TOL && ex < FD_TOL, name, "rel err dbranch %.2e dx %.2e (bound %.0e)", eb, ex, FD_TOL);
    free(c.x); free(c.br); free(c.W); free(c.out); free(dbr);
}

typedef struct { int N, V, Vp; const int* tgt; double dloss; double *l, *losses; } CeCtx;
static double ce_loss(void* p) {
    CeCtx* c = p;
    ref_crossentropy_forward(c->losses, c->l, c->tgt, c->N, c->V, c->Vp);
    double s = 0;
    for (int i = 0; i < c->N; i++) s += c->losses[i];
    return c->dloss * s;
}

static void fd_crossentropy(void) {
    int tgt[3] = {0, 6, 10};
    CeCtx c = {.N = 3, .V = 11, .Vp = 16, .tgt = tgt, .dloss = 1.0 / 3};
    size_t n = (size_t)c.N * c.Vp;
    c.l = dalloc(n); c.losses = dalloc(c.N);
    fill_d(c.l, n, 2.0);
    double* dl = dalloc(n);
    memcpy(dl, c.l, n * sizeof(double));
    ref_crossentropy_backward(dl, tgt, c.dloss, c.N, c.V, c.Vp);
    double e = fd_check(ce_loss, &c, c.l, dl, n);   /* every column: the padded ones too */
    expect(e < FD_TOL, "ref_crossentropy_backward_matches_finite_differences",
           "rel err %.2e over all Vp columns (bound %.0e)", e, FD_TOL);
    free(c.l); free(c.losses); free(dl);
}

/* ---- 3. write vs accumulate, aliasing ----------------------------------------------------- */

/* ||g2 - 2 g1|| / ||2 g1||: 0 when a second call into the same gradient adds the same amount */
static double doubling_err(const float* g1, const float* g2, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)g2[i] - 2.0 * (double)g1[i];
        num += d * d;
        den += 4.0 * (double)g1[i] * (double)g1[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void test_accumulate_and_write(void) {
    int B = 2, T = 16, C = 200, Vp = 30, OC = 72;
    int N = B * T;
    size_t n = (size_t)N * C, no = (size_t)N * OC;
    float nanv = NAN;
    int* inp = malloc(sizeof(int) * N);
    fill_tokens(inp, N, Vp);
    float *dout = falloc(n), *dwte = falloc((size_t)Vp * C), *dwpe = falloc((size_t)T * C);
    float *dwte1 = falloc((size_t)Vp * C), *dwpe1 = falloc((size_t)T * C);
    fill_f(dout, n, 1.0);

    /* accumulated: a second call into the same gradient doubles it (an overwrite would read
     * 0.5). Where an op adds one finished sum per element (layernorm's rows, bias columns), g1 = d
     * and g2 = d + d = 2d exactly in fp32: checked bitwise. encoder_backward adds each row
     * straight into the gradient, so the second call's running sums start from g1 instead of 0
     * and a token seen several times may round differently: bound 1e-6. */
    encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    memcpy(dwte1, dwte, sizeof(float) * Vp * C);
    memcpy(dwpe1, dwpe, sizeof(float) * T * C);
    encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    double e1 = doubling_err(dwte1, dwte, (size_t)Vp * C), e2 = doubling_err(dwpe1, dwpe, (size_t)T * C);
    expect(e1 < 1e-6 && e2 < 1e-6, "encoder_backward_accumulates_into_dwte_dwpe",
           "second call: ||g2-2g1||/||2g1|| dwte %.2e dwpe %.2e (bound 1e-6)", e1, e2);

    float *x = falloc(n), *w = falloc(C), *b = falloc(C), *mean = falloc(N), *rstd = falloc(N), *out = falloc(n);
    float *dx = falloc(n), *dw = falloc(C), *db = falloc(C), *dx1 = falloc(n), *dw1 = falloc(C), *db1 = falloc(C);
    fill_f(x, n, 1.0); fill_fd(w, NULL, C, 1.0, 0.2); fill_f(b, C, 0.2);
    layernorm_forward(out, mean, rstd, x, w, b, N, C);
    layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
    memcpy(dx1, dx, n * 4); memcpy(dw1, dw, C * 4); memcpy(db1, db, C * 4);
    layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
    double ex = doubling_err(dx1, dx, n), ew = doubling_err(dw1, dw, C), eb = doubling_err(db1, db, C);
    expect(ex == 0 && ew == 0 && eb == 0, "layernorm_backward_accumulates_into_dinp_dweight_dbias",
           "||g2-2g1||/||2g1|| dinp %.2e dweight %.2e dbias %.2e (want 0)", ex, ew, eb);

    /* written: outputs pre-filled with NaN garbage give the bits of outputs pre-filled with 0 */
    float *out_g = falloc(n), *mean_g = falloc(N), *rstd_g = falloc(N);
    fill_value(out_g, n, nanv); fill_value(mean_g, N, nanv); fill_value(rstd_g, N, nanv);
    layernorm_forward(out_g, mean_g, rstd_g, x, w, b, N, C);
    expect(same_bits(out_g, out, n * 4) && same_bits(mean_g, mean, N * 4) && same_bits(rstd_g, rstd, N * 4),
           "layernorm_forward_overwrites_out_mean_rstd", "%zu non-finite left", count_nonfinite(out_g, n));

    /* matmul: dweight and dbias accumulate. OpenBLAS adds its K-blocks one by one into C (beta
     * = 1), so d + (k1 + k2) and (d + k1) + k2 may differ in the last bit: relative bound 1e-6
     * (an overwrite would read 0.5). */
    float *wm = falloc((size_t)OC * C), *bm = falloc(OC), *om = falloc(no), *dom = falloc(no);
    float *dxm = falloc(n), *dwm = falloc((size_t)OC * C), *dbm = falloc(OC), *dwm1 = falloc((size_t)OC * C), *dbm1 = falloc(OC);
    fill_f(wm, (size_t)OC * C, 0.05); fill_f(bm, OC, 0.1); fill_f(dom, no, 1.0);
    matmul_backward(dxm, dwm, dbm, dom, x, wm, N, C, OC);
    memcpy(dwm1, dwm, sizeof(float) * OC * C); memcpy(dbm1, dbm, sizeof(float) * OC);
    matmul_backward(dxm, dwm, dbm, dom, x, wm, N, C, OC);
    double emw = doubling_err(dwm1, dwm, (size_t)OC * C), emb = doubling_err(dbm1, dbm, OC);
    expect(emw < 1e-6 && emb == 0, "matmul_backward_accumulates_into_dweight_dbias",
           "||g2-2g1||/||2g1|| dweight %.2e (bound 1e-6) dbias %.2e (want 0)", emw, emb);

    float *dxm_g = falloc(n), *dwm_n = falloc((size_t)OC * C), *dwm_z = falloc((size_t)OC * C);
    fill_value(dxm_g, n, nanv);
    matmul_backward(dxm_g, dwm_z, NULL, dom, x, wm, N, C, OC);
    matmul_backward(NULL, dwm_n, NULL, dom, x, wm, N, C, OC);
    expect(same_bits(dxm_g, dxm, n * 4), "matmul_backward_overwrites_dinp",
           "%zu non-finite left of %zu", count_nonfinite(dxm_g, n), n);
    expect(same_bits(dwm_n, dwm_z, sizeof(float) * OC * C), "matmul_backward_dinp_null_skips_only_dinp",
           "dweight with dinp=NULL %s dweight with dinp", same_bits(dwm_n, dwm_z, sizeof(float) * OC * C) ? "==" : "!=");

    float *om_g = falloc(no), *om_nb = falloc(no), *om_zb = falloc(no), *zb = falloc(OC);
    matmul_forward(om, x, wm, bm, N, C, OC);
    fill_value(om_g, no, nanv);
    matmul_forward(om_g, x, wm, bm, N, C, OC);
    expect(same_bits(om_g, om, no * 4), "matmul_forward_overwrites_out", "%zu non-finite left", count_nonfinite(om_g, no));
    fill_value(om_nb, no, nanv);
    matmul_forward(om_nb, x, wm, NULL, N, C, OC);
    matmul_forward(om_zb, x, wm, zb, N, C, OC);
    expect(same_bits(om_nb, om_zb, no * 4), "matmul_forward_null_bias_is_zero_bias", "%zu non-finite",
           count_nonfinite(om_nb, no));

    /* encoder, gelu, residual dropout, dropout backward: written over garbage */
    float *wte = falloc((size_t)Vp * C), *wpe = falloc((size_t)T * C), *e_a = falloc(n), *e_g = falloc(n);
    fill_f(wte, (size_t)Vp * C, 0.1); fill_f(wpe, (size_t)T * C, 0.1);
    Dropout d5 = dropout_make(0.5);
    uint64_t seed = philox_site_seed(7, 0, 0, SITE_EMBD, PASS_FORWARD);
    encoder_forward(e_a, inp, wte, wpe, B, T, C, 0, seed, d5);
    fill_value(e_g, n, nanv);
    encoder_forward(e_g, inp, wte, wpe, B, T, C, 0, seed, d5);
    int ok_enc = same_bits(e_g, e_a, n * 4);

    float *ga = falloc(n), *gg = falloc(n), *gba = falloc(n), *gbg = falloc(n);
    gelu_forward(ga, x, n);
    fill_value(gg, n, nanv);
    gelu_forward(gg, x, n);
    gelu_backward(gba, x, dout, n);
    fill_value(gbg, n, nanv);
    gelu_backward(gbg, x, dout, n);
    int ok_gelu = same_bits(gg, ga, n * 4) && same_bits(gbg, gba, n * 4);

    float *ra = falloc(n), *rg = falloc(n), *da = falloc(n), *dg = falloc(n);
    residual_dropout_forward(ra, x, dout, B, T, C, 0, seed, d5);
    fill_value(rg, n, nanv);
    residual_dropout_forward(rg, x, dout, B, T, C, 0, seed, d5);
    dropout_backward(da, dout, B, T, C, 0, seed, d5);
    fill_value(dg, n, nanv);
    dropout_backward(dg, dout, B, T, C, 0, seed, d5);
    int ok_res = same_bits(rg, ra, n * 4) && same_bits(dg, da, n * 4);
    expect(ok_enc && ok_gelu && ok_res, "elementwise_ops_overwrite_their_outputs",
           "encoder_forward %s, gelu fwd/bwd %s, residual_dropout_forward/dropout_backward %s",
           ok_enc ? "ok" : "differs", ok_gelu ? "ok" : "differs", ok_res ? "ok" : "differs");

    /* aliasing that ops.h allows: same bits as separate buffers */
    float* al = falloc(n);
    memcpy(al, dout, n * 4);
    residual_dropout_forward(al, x, al, B, T, C, 0, seed, d5);   /* out == branch */
    int a1 = same_bits(al, ra, n * 4);
    memcpy(al, dout, n * 4);
    gelu_backward(al, x, al, n);                                  /* dinp == dout */
    int a2 = same_bits(al, gba, n * 4);
    memcpy(al, dout, n * 4);
    dropout_backward(al, al, B, T, C, 0, seed, d5);               /* dy == dout */
    int a3 = same_bits(al, da, n * 4);
    memcpy(al, x, n * 4);
    gelu_forward(al, al, n);                                      /* out == inp */
    int a4 = same_bits(al, ga, n * 4);
    expect(a1, "residual_dropout_forward_out_may_alias_branch", "in place %s separate", a1 ? "==" : "!=");
    expect(a2, "gelu_backward_in_place_matches_separate", "in place %s separate", a2 ? "==" : "!=");
    expect(a3, "dropout_backward_in_place_matches_separate", "in place %s separate", a3 ? "==" : "!=");
    expect(a4, "gelu_forward_in_place_matches_separate", "in place %s separate", a4 ? "==" : "!=");

    free(inp); free(dout); free(dwte); free(dwpe); free(dwte1); free(dwpe1);
    free(x); free(w); free(b); free(mean); free(rstd); free(out); free(dx); free(dw); free(db);
    free(dx1); free(dw1); free(db1); free(out_g); free(mean_g); free(rstd_g);
    free(wm); free(bm); free(om); free(dom); free(dxm); free(dwm); free(dbm); free(dwm1); free(dbm1);
    free(dxm_g); free(dwm_n); free(dwm_z); free(om_g); free(om_nb); free(om_zb); free(zb);
    free(wte); free(wpe); free(e_a); free(e_g); free(ga); free(gg); free(gba); free(gbg);
    free(ra); free(rg); free(da); free(dg); free(al);
}

/* ---- 4. the same bits at 1, 2 and 3 threads ------------------------------------------------ */

/* Shapes of a GPT-2 small layer (N = 512 rows, C = 768, 4C = 3072), so every parallel loop and
 * OpenBLAS split their work between threads. */
enum { TH_B = 4, TH_T = 128, TH_N = TH_B * TH_T, TH_C = 768, TH_OC = 3072, TH_VP = 1024,
       TH_CE_N = 256, TH_CE_V = 8000, TH_CE_VP = 8064 };
#define TH_ADAM_N ((size_t)1 << 20)
#define TH_NORM_N ((size_t)3000017)

typedef struct {   /* inputs, shared by every thread count */
    int *inp, *tgt;
    float *x, *w, *b, *wm, *bm, *dmm, *wte, *wpe, *dout, *logits, *gr, *p0, *m0, *v0, *big;
} ThIn;

typedef struct {   /* every output of every op at one thread count */
    float *enc, *dwte, *dwpe, *ln, *mean, *rstd, *dln, *dlw, *dlb;
    float *mm, *dmx, *dmw, *dmb, *gelu, *dgelu, *res, *dy, *loss, *dlogits, *p, *m, *v, *scaled;
    double ss;
} ThOut;

#define TH_FIELDS(X) X(enc, (size_t)TH_N * TH_C) X(dwte, (size_t)TH_VP * TH_C) X(dwpe, (size_t)TH_T * TH_C) \
    X(ln, (size_t)TH_N * TH_C) X(mean, TH_N) X(rstd, TH_N) X(dln, (size_t)TH_N * TH_C) X(dlw, TH_C) X(dlb, TH_C) \
    X(mm, (size_t)TH_N * TH_OC) X(dmx, (size_t)TH_N * TH_C) X(dmw, (size_t)TH_OC * TH_C) X(dmb, TH_OC) \
    X(gelu, (size_t)TH_N * TH_OC) X(dgelu, (size_t)TH_N * TH_OC) X(res, (size_t)TH_N * TH_C) X(dy, (size_t)TH_N * TH_C) \
    X(loss, TH_CE_N) X(dlogits, (size_t)TH_CE_N * TH_CE_VP) X(p, TH_ADAM_N) X(m, TH_ADAM_N) X(v, TH_ADAM_N) \
    X(scaled, TH_NORM_N)

static void th_run(const ThIn* in, ThOut* o) {
    int B = TH_B, T = TH_T, N = TH_N, C = TH_C, OC = TH_OC;
    size_t nc = (size_t)N * C, noc = (size_t)N * OC;
    Dropout d = dropout_make(0.1);
    uint64_t s_e = philox_site_seed(5, 9, 0, SITE_EMBD, 0), s_r = philox_site_seed(5, 9, 3, SITE_MLP_RESID, 0);
#define X(f, n) o->f = falloc(n);
    TH_FIELDS(X)
#undef X
    encoder_forward(o->enc, in->inp, in->wte, in->wpe, B, T, C, 8, s_e, d);
    memcpy(o->dwte, in->wte, sizeof(float) * TH_VP * C);   /* accumulated into non-zero */
    memcpy(o->dwpe, in->wpe, sizeof(float) * T * C);
    encoder_backward(o->dwte, o->dwpe, in->dout, in->inp, B, T, C);
    layernorm_forward(o->ln, o->mean, o->rstd, in->x, in->w, in->b, N, C);
    memcpy(o->dln, in->x, nc * 4);
    memcpy(o->dlw, in->w, C * 4);
    memcpy(o->dlb, in->b, C * 4);
    layernorm_backward(o->dln, o->dlw, o->dlb, in->dout, in->x, in->w, o->mean, o->rstd, N, C);
    matmul_forward(o->mm, in->x, in->wm, in->bm, N, C, OC);
    memcpy(o->dmw, in->wm, sizeof(float) * OC * C);
    memcpy(o->dmb, in->bm, sizeof(float) * OC);
    matmul_backward(o->dmx, o->dmw, o->dmb, in->dmm, in->x, in->wm, N, C, OC);
    gelu_forward(o->gelu, o->mm, noc);
    gelu_backward(o->dgelu, o->mm, in->dmm, noc);
    residual_dropout_forward(o->res, in->x, in->dout, B, T, C, 8, s_r, d);
    dropout_backward(o->dy, in->dout, B, T, C, 8, s_r, d);
    crossentropy_forward(o->loss, in->logits, in->tgt, TH_CE_N, TH_CE_V, TH_CE_VP);
    memcpy(o->dlogits, in->logits, sizeof(float) * TH_CE_N * TH_CE_VP);
    crossentropy_backward(o->dlogits, in->tgt, 1.0f / TH_CE_N, TH_CE_N, TH_CE_V, TH_CE_VP);
    memcpy(o->p, in->p0, TH_ADAM_N * 4);
    memcpy(o->m, in->m0, TH_ADAM_N * 4);
    memcpy(o->v, in->v0, TH_ADAM_N * 4);
    adamw_update(o->p, in->gr, 1.0f, o->m, o->v, TH_ADAM_N, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
    o->ss = sum_squares(in->big, TH_NORM_N);
    memcpy(o->scaled, in->big, TH_NORM_N * 4);
    scale_inplace(o->scaled, TH_NORM_N, 0.731f);
}

static void th_free(ThOut* o) {
#define X(f, n) free(o->f);
    TH_FIELDS(X)
#undef X
}

static void test_thread_invariance(int default_threads) {
    ThIn in;
    size_t nc = (size_t)TH_N * TH_C;
    in.inp = malloc(sizeof(int) * TH_N); fill_tokens(in.inp, TH_N, TH_VP);
    in.tgt = malloc(sizeof(int) * TH_CE_N); fill_tokens(in.tgt, TH_CE_N, TH_CE_V);
    in.x = falloc(nc); fill_f(in.x, nc, 1.0);
    in.w = falloc(TH_C); fill_fd(in.w, NULL, TH_C, 1.0, 0.2);
    in.b = falloc(TH_C); fill_f(in.b, TH_C, 0.2);
    in.wm = falloc((size_t)TH_OC * TH_C); fill_f(in.wm, (size_t)TH_OC * TH_C, 0.02);
    in.bm = falloc(TH_OC); fill_f(in.bm, TH_OC, 0.1);
    in.dmm = falloc((size_t)TH_N * TH_OC); fill_f(in.dmm, (size_t)TH_N * TH_OC, 1.0);
    in.wte = falloc((size_t)TH_VP * TH_C); fill_f(in.wte, (size_t)TH_VP * TH_C, 0.02);
    in.wpe = falloc((size_t)TH_T * TH_C); fill_f(in.wpe, (size_t)TH_T * TH_C, 0.02);
    in.dout = falloc(nc); fill_f(in.dout, nc, 1.0);
    in.logits = falloc((size_t)TH_CE_N * TH_CE_VP); fill_f(in.logits, (size_t)TH_CE_N * TH_CE_VP, 2.0);
    in.gr = falloc(TH_ADAM_N); fill_f(in.gr, TH_ADAM_N, 0.01);
    in.p0 = falloc(TH_ADAM_N); fill_f(in.p0, TH_ADAM_N, 0.02);
    in.m0 = falloc(TH_ADAM_N); fill_f(in.m0, TH_ADAM_N, 0.001);
    in.v0 = falloc(TH_ADAM_N);
    for (size_t i = 0; i < TH_ADAM_N; i++) in.v0[i] = (float)(1e-4 * test_uniform());
    in.big = falloc(TH_NORM_N); fill_f(in.big, TH_NORM_N, 1.0);

    ThOut ref, o;
    set_threads(1);
    th_run(&in, &ref);
    for (int nt = 2; nt <= 3; nt++) {
        set_threads(nt);
        th_run(&in, &o);
        char diff[512] = "";
        int ndiff = 0;
#define X(f, n) if (!same_bits(o.f, ref.f, (n) * sizeof(float))) { \
            ndiff++; strncat(diff, " " #f, sizeof diff - strlen(diff) - 1); }
        TH_FIELDS(X)
#undef X
        if (memcmp(&o.ss, &ref.ss, sizeof(double)) != 0) { ndiff++; strncat(diff, " sum_squares", sizeof diff - strlen(diff) - 1); }
        char name[64];
        snprintf(name, sizeof name, "every_op_bitwise_identical_at_1_and_%d_threads", nt);
        expect(ndiff == 0, name, "%d of 24 outputs differ%s (omp max threads %d, openblas threads %d)", ndiff,
               ndiff ? diff : "", omp_get_max_threads(), openblas_get_num_threads());
        th_free(&o);
    }
    th_free(&ref);
    set_threads(default_threads);
    free(in.inp); free(in.tgt); free(in.x); free(in.w); free(in.b); free(in.wm); free(in.bm); free(in.dmm);
    free(in.wte); free(in.wpe); free(in.dout); free(in.logits); free(in.gr); free(in.p0); free(in.m0);
    free(in.v0); free(in.big);
}

/* The same for a row count that is not a multiple of 32 (B*T = 5*100 = 500): N is the inner
 * dimension K of the dweight product. OpenBLAS cuts a long K into blocks whose sizes differ between
 * its one-thread and its threaded driver, so such shapes are where thread counts can change bits. */
static void test_matmul_thread_invariance_odd_rows(int default_threads) {
    int N = 500, C = 768, OC = 2304;
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    float *x = falloc(ni), *w = falloc(nw), *b = falloc(OC), *dout = falloc(no);
    fill_f(x, ni, 1.0); fill_f(w, nw, 0.02); fill_f(b, OC, 0.1); fill_f(dout, no, 1.0);
    float *out[3], *dx[3], *dw[3], *db[3];
    for (int k = 0; k < 3; k++) {
        set_threads(k + 1);
        out[k] = falloc(no); dx[k] = falloc(ni); dw[k] = falloc(nw); db[k] = falloc(OC);
        memcpy(dw[k], w, nw * 4);   /* accumulated into non-zero */
        memcpy(db[k], b, OC * 4);
        matmul_forward(out[k], x, w, b, N, C, OC);
        matmul_backward(dx[k], dw[k], db[k], dout, x, w, N, C, OC);
    }
    set_threads(default_threads);
    char msg[256] = "";
    int ok = 1;
    for (int k = 1; k < 3; k++) {
        int so = same_bits(out[k], out[0], no * 4), sx = same_bits(dx[k], dx[0], ni * 4);
        int sw = same_bits(dw[k], dw[0], nw * 4), sb = same_bits(db[k], db[0], OC * 4);
        ok &= so && sx && sw && sb;
        snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "%d vs 1 thread: out %s dinp %s dweight %s dbias %s; ",
                 k + 1, so ? "same" : "DIFFERS", sx ? "same" : "DIFFERS", sw ? "same" : "DIFFERS", sb ? "same" : "DIFFERS");
    }
    expect(ok, "matmul_bitwise_identical_at_1_2_3_threads_rows_not_multiple_of_32", "N=%d C=%d OC=%d: %s", N, C, OC, msg);
    for (int k = 0; k < 3; k++) { free(out[k]); free(dx[k]); free(dw[k]); free(db[k]); }
    free(x); free(w); free(b); free(dout);
}

/* ---- 5. dropout keep bits ------------------------------------------------------------------ */

/* Elements of out = 0 + drop(1): scale where kept, 0 where dropped. */
static void keep_mask(float* out, int B, int T, int C, uint32_t g0, uint64_t seed, Dropout d) {
    size_t n = (size_t)B * T * C;
    float *zero = falloc(n), *one = falloc(n);
    fill_value(one, n, 1.0f);
    residual_dropout_forward(out, zero, one, B, T, C, g0, seed, d);
    free(zero); free(one);
}

static double mask_diff_fraction(const float* a, const float* b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += (a[i] != 0) != (b[i] != 0);
    return (double)k / n;
}

static void test_keep_bits(void) {
    /* residual dropout: kept exactly where philox_elem_draw >= thr, kept values = scale; the
     * kept fraction within 3 sigma of 1 - p over 2^20 elements */
    int B = 2, T = 512, C = 1024;
    uint32_t g0 = 5;
    size_t n = (size_t)B * T * C;
    uint64_t seed = philox_site_seed(2024, 17, 4, SITE_ATTN_RESID, PASS_FORWARD);
    float* out = falloc(n);
    const double ps[3] = {0.1, 0.5, 0.9};
    for (int k = 0; k < 3; k++) {
        Dropout d = dropout_make(ps[k]);
        keep_mask(out, B, T, C, g0, seed, d);
        size_t kept = 0, wrong = 0, badval = 0;
        for (int b = 0; b < B; b++) for (int t = 0; t < T; t++) for (int c = 0; c < C; c++) {
            float v = out[((size_t)b * T + t) * C + c];
            int want = philox_elem_draw(seed, g0 + b, t, c) >= d.thr;
            int got = v != 0.0f;
            kept += got;
            wrong += want != got;
            badval += got && v != d.scale;
        }
        double expect_kept = n * (1 - ps[k]), sigma = sqrt(n * ps[k] * (1 - ps[k]));
        double z = ((double)kept - expect_kept) / sigma;
        char name[96];
        snprintf(name, sizeof name, "residual_dropout_keeps_exactly_draw_ge_thr_p%.1f", ps[k]);
        expect(wrong == 0 && badval == 0, name, "%zu of %zu elements disagree with philox_elem_draw >= %u, "
               "%zu kept values != scale %.9g", wrong, n, d.thr, badval, d.scale);
        snprintf(name, sizeof name, "kept_fraction_within_3_sigma_p%.1f", ps[k]);
        expect(fabs(z) <= 3.0, name, "kept %.6f of %zu, expected %.6f, z = %+.2f", (double)kept / n, n,
               1 - ps[k], z);
    }
    /* keep iff draw >= thr at equality too: with thr set to the draw of one element, that element
     * is kept (a kernel comparing draw > thr differs there alone; at dropout_make's thresholds
     * equality is a 2^-32 event that the checks above never meet) */
    {
        const int eb = 1, et = 300, ec = 777;   /* ec % 4 = 1: word 1 of its Philox call */
        uint32_t draw = philox_elem_draw(seed, g0 + eb, et, ec);
        Dropout at = {draw, (float)(4294967296.0 / (4294967296.0 - draw))};
        keep_mask(out, B, T, C, g0, seed, at);
        size_t wrong = 0;
        for (int b = 0; b < B; b++) for (int t = 0; t < T; t++) for (int c = 0; c < C; c++) {
            int want = philox_elem_draw(seed, g0 + b, t, c) >= at.thr;
            wrong += want != (out[((size_t)b * T + t) * C + c] != 0.0f);
        }
        int kept_at = out[((size_t)eb * T + et) * C + ec] != 0.0f;
        expect(kept_at && wrong == 0 && draw != 0, "residual_dropout_keeps_the_element_whose_draw_equals_thr",
               "thr = %u, the draw of (b %d, t %d, c %d): that element %s; %zu of %zu elements "
               "disagree with philox_elem_draw >= thr", at.thr, eb, et, ec,
               kept_at ? "kept" : "DROPPED", wrong, n);
    }
    free(out);

    /* encoder and dropout_backward keep the same elements, C % 4 != 0 */
    {
        int B2 = 3, T2 = 7, C2 = 37, Vp = 9;
        size_t m = (size_t)B2 * T2 * C2;
        Dropout d = dropout_make(0.5);
        uint64_t s = philox_site_seed(3, 1, 0, SITE_EMBD, PASS_FORWARD);
        int* inp = malloc(sizeof(int) * B2 * T2);
        fill_tokens(inp, (size_t)B2 * T2, Vp);
        float *wte = falloc((size_t)Vp * C2), *wpe = falloc((size_t)T2 * C2), *e = falloc(m), *ones = falloc(m), *dy = falloc(m);
        for (size_t i = 0; i < (size_t)Vp * C2; i++) wte[i] = (float)(1.0 + test_uniform());   /* never 0 */
        fill_value(ones, m, 1.0f);
        encoder_forward(e, inp, wte, wpe, B2, T2, C2, 2, s, d);
        dropout_backward(dy, ones, B2, T2, C2, 2, s, d);
        size_t we = 0, wd = 0;
        for (int b = 0; b < B2; b++) for (int t = 0; t < T2; t++) for (int c = 0; c < C2; c++) {
            size_t i = ((size_t)b * T2 + t) * C2 + c;
            int want = philox_elem_draw(s, 2 + b, t, c) >= d.thr;
            float ev = wte[(size_t)inp[b * T2 + t] * C2 + c] * d.scale;
            we += want ? e[i] != ev : e[i] != 0.0f;
            wd += want ? dy[i] != d.scale : dy[i] != 0.0f;
        }
        expect(we == 0 && wd == 0, "encoder_and_dropout_backward_keep_exactly_draw_ge_thr",
               "wrong elements: encoder_forward %zu, dropout_backward %zu of %zu (C=%d)", we, wd, m, C2);

        /* p = 0 is the plain path, bitwise */
        Dropout d0 = dropout_make(0.0);
        float *plain = falloc(m), *got = falloc(m), *x = falloc(m), *br = falloc(m);
        fill_f(wpe, (size_t)T2 * C2, 1.0); fill_f(x, m, 1.0); fill_f(br, m, 1.0);
        encoder_forward(got, inp, wte, wpe, B2, T2, C2, 2, s, d0);
        for (int bt = 0; bt < B2 * T2; bt++) for (int c = 0; c < C2; c++)
            plain[(size_t)bt * C2 + c] = wte[(size_t)inp[bt] * C2 + c] + wpe[(size_t)(bt % T2) * C2 + c];
        int z1 = same_bits(got, plain, m * 4);
        residual_dropout_forward(got, x, br, B2, T2, C2, 2, s, d0);
        for (size_t i = 0; i < m; i++) plain[i] = x[i] + br[i];
        int z2 = same_bits(got, plain, m * 4);
        dropout_backward(got, br, B2, T2, C2, 2, s, d0);
        int z3 = same_bits(got, br, m * 4);
        expect(d0.thr == 0 && d0.scale == 1.0f && z1 && z2 && z3, "dropout_p0_is_bitwise_the_plain_path",
               "thr %u scale %g; encoder %s wte+wpe, residual %s x+branch, dropout_backward %s identity",
               d0.thr, d0.scale, z1 ? "==" : "!=", z2 ? "==" : "!=", z3 ? "==" : "!=");
        free(inp); free(wte); free(wpe); free(e); free(ones); free(dy); free(plain); free(got); free(x); free(br);
    }

    /* masks change with each of step, layer, site, pass, and with the sequence g */
    {
        int Bm = 2, Tm = 64, Cm = 64;
        size_t per_row = (size_t)Tm * Cm, m = (size_t)Bm * per_row;
        Dropout d = dropout_make(0.5);
        uint64_t master = 0x5eed5eed12345678ULL;
        uint32_t st = 7, ly = 3, si = SITE_ATTN_RESID, pa = PASS_FORWARD;
        uint64_t seeds[5] = {
            philox_site_seed(master, st, ly, si, pa),
            philox_site_seed(master, st + 1, ly, si, pa),
            philox_site_seed(master, st, ly + 1, si, pa),
            philox_site_seed(master, st, ly, si + 1, pa),
            philox_site_seed(master, st, ly, si, PASS_FRESH),
        };
        const char* what[5] = {"base", "step", "layer", "site", "pass"};
        float* base = falloc(m), *other = falloc(m);
        keep_mask(base, Bm, Tm, Cm, 0, seeds[0], d);
        /* independent masks at p = 0.5 differ in half the elements, sigma = 0.5/sqrt(n) ~ 0.008
         * over 4096: [0.44, 0.56] is > 7 sigma wide, and a mask that did not change reads 0 */
        char msg[256] = "";
        int ok = 1;
        for (int k = 1; k < 5; k++) {
            keep_mask(other, Bm, Tm, Cm, 0, seeds[k], d);
            double f = mask_diff_fraction(base, other, per_row);
            ok &= f > 0.44 && f < 0.56 && seeds[k] != seeds[0];
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "%s %.3f ", what[k], f);
        }
        expect(ok, "masks_differ_when_step_layer_site_or_pass_changes",
               "fraction of differing keep bits vs base: %s(want 0.44..0.56)", msg);
        double fg = mask_diff_fraction(base, base + per_row, per_row);
        expect(fg > 0.44 && fg < 0.56, "masks_differ_between_sequences_g",
               "g=0 vs g=1 differ in %.3f of %zu (want 0.44..0.56)", fg, per_row);
        free(base); free(other);
    }

    /* batch-split invariance: sequence g = 3 is row 3 of a B=4 batch at g0=0 and row 1 of a B=2
     * micro-batch at g0=2: the same bits */
    {
        int Bb = 4, Tb = 16, Cb = 70, Vp = 20;
        size_t row = (size_t)Tb * Cb, m = (size_t)Bb * row;
        Dropout d = dropout_make(0.5);
        uint64_t s = philox_site_seed(11, 2, 5, SITE_MLP_RESID, PASS_FORWARD);
        float *x = falloc(m), *br = falloc(m), *full = falloc(m), *half = falloc(m / 2);
        float *dfull = falloc(m), *dhalf = falloc(m / 2), *efull = falloc(m), *ehalf = falloc(m / 2);
        float *wte = falloc((size_t)Vp * Cb), *wpe = falloc(row);
        int* inp = malloc(sizeof(int) * Bb * Tb);
        fill_tokens(inp, (size_t)Bb * Tb, Vp);
        fill_f(x, m, 1.0); fill_f(br, m, 1.0); fill_f(wte, (size_t)Vp * Cb, 1.0); fill_f(wpe, row, 1.0);
        residual_dropout_forward(full, x, br, Bb, Tb, Cb, 0, s, d);
        residual_dropout_forward(half, x + 2 * row, br + 2 * row, 2, Tb, Cb, 2, s, d);
        dropout_backward(dfull, br, Bb, Tb, Cb, 0, s, d);
        dropout_backward(dhalf, br + 2 * row, 2, Tb, Cb, 2, s, d);
        encoder_forward(efull, inp, wte, wpe, Bb, Tb, Cb, 0, s, d);
        encoder_forward(ehalf, inp + 2 * Tb, wte, wpe, 2, Tb, Cb, 2, s, d);
        int r = same_bits(full + 3 * row, half + row, row * 4) && same_bits(full + 2 * row, half, row * 4);
        int db = same_bits(dfull + 3 * row, dhalf + row, row * 4) && same_bits(dfull + 2 * row, dhalf, row * 4);
        int en = same_bits(efull + 3 * row, ehalf + row, row * 4) && same_bits(efull + 2 * row, ehalf, row * 4);
        expect(r && db && en, "dropout_masks_invariant_to_batch_splitting",
               "g=2,3 as rows 2,3 of B=4 (g0=0) vs rows 0,1 of B=2 (g0=2): residual %s, dropout_backward %s, "
               "encoder %s", r ? "same bits" : "DIFFER", db ? "same bits" : "DIFFER", en ? "same bits" : "DIFFER");
        free(x); free(br); free(full); free(half); free(dfull); free(dhalf); free(efull); free(ehalf);
        free(wte); free(wpe); free(inp);
    }
}

/* ---- 6. cross-entropy over a padded row ---------------------------------------------------- */

static void test_crossentropy_padding(void) {
    int N = 8, V = 300, Vp = 384;
    size_t n = (size_t)N * Vp;
    int* tgt = malloc(sizeof(int) * N);
    fill_tokens(tgt, N, V);
    tgt[0] = V - 1;   /* the last real column */
    float *l = falloc(n), *lg = falloc(n), *loss = falloc(N), *lossg = falloc(N);
    fill_f(l, n, 2.0);
    for (int r = 0; r < N; r++) for (int v = V; v < Vp; v++) l[(size_t)r * Vp + v] = 0.0f;
    memcpy(lg, l, n * 4);
    /* garbage in the padded columns: never read by the forward, overwritten with 0 by the backward */
    for (int r = 0; r < N; r++) for (int v = V; v < Vp; v++) lg[(size_t)r * Vp + v] = (v & 1) ? NAN : 1e30f;
    crossentropy_forward(loss, l, tgt, N, V, Vp);
    crossentropy_forward(lossg, lg, tgt, N, V, Vp);
    expect(same_bits(loss, lossg, N * 4), "crossentropy_forward_ignores_padded_columns",
           "losses with NaN/1e30 padding %s losses with 0 padding", same_bits(loss, lossg, N * 4) ? "==" : "!=");
    crossentropy_backward(lg, tgt, 0.125f, N, V, Vp);
    size_t nonzero = 0;
    for (int r = 0; r < N; r++) for (int v = V; v < Vp; v++) {
        float g = lg[(size_t)r * Vp + v];
        nonzero += !(g == 0.0f && !signbit(g));
    }
    expect(nonzero == 0, "crossentropy_backward_padded_columns_exactly_zero",
           "%zu of %d padded gradients not +0.0", nonzero, N * (Vp - V));

    /* uniform logits: loss = log V, gradient 1/V - onehot */
    for (size_t i = 0; i < n; i++) l[i] = 3.7f;
    crossentropy_forward(loss, l, tgt, N, V, Vp);
    double worst = 0;
    for (int r = 0; r < N; r++) worst = fmax(worst, fabs(loss[r] - log((double)V)) / log((double)V));
    expect(worst < 1e-7, "crossentropy_uniform_logits_loss_is_log_V",
           "max |loss - log %d| / log %d = %.2e (bound 1e-7, one fp32 rounding)", V, V, worst);
    crossentropy_backward(l, tgt, 1.0f, N, V, Vp);
    double* want = dalloc(n);
    for (int r = 0; r < N; r++) for (int v = 0; v < V; v++)
        want[(size_t)r * Vp + v] = 1.0 / V - (v == tgt[r] ? 1.0 : 0.0);
    double e = rel_err_fd(l, want, n);
    expect(e < TOL_ELEM, "crossentropy_uniform_logits_gradient_is_1_over_V_minus_onehot",
           "rel err %.2e (bound %.0e)", e, TOL_ELEM);
    free(tgt); free(l); free(lg); free(loss); free(lossg); free(want);
}

/* The fused classifier op against the two it stands for, bitwise: losses and dlogits, on rows
 * with a wide range of logits and garbage in the padding. */
static void test_crossentropy_forward_backward(void) {
    int N = 37, V = 1000, Vp = 1024;
    size_t n = (size_t)N * Vp;
    int* tgt = malloc(sizeof(int) * N);
    fill_tokens(tgt, N, V);
    tgt[1] = 0;
    tgt[2] = V - 1;
    float *l = falloc(n), *l2 = falloc(n), *loss = falloc(N), *loss2 = falloc(N);
    fill_f(l, n, 6.0);
    for (int r = 0; r < N; r++) for (int v = V; v < Vp; v++) l[(size_t)r * Vp + v] = (v & 1) ? NAN : 1e30f;
    memcpy(l2, l, n * 4);
    crossentropy_forward(loss, l, tgt, N, V, Vp);
    crossentropy_backward(l, tgt, 0.3f, N, V, Vp);
    crossentropy_forward_backward(loss2, l2, tgt, 0.3f, N, V, Vp);
    expect(same_bits(loss, loss2, N * 4) && same_bits(l, l2, n * 4),
           "crossentropy_forward_backward_equals_the_two_calls_bitwise",
           "losses %s, dlogits %s", same_bits(loss, loss2, N * 4) ? "==" : "!=",
           same_bits(l, l2, n * 4) ? "==" : "!=");
    free(tgt); free(l); free(l2); free(loss); free(loss2);
}

/* sum_squares against its specification written out: blocks of 16384 values; in each, 16 lanes,
 * lane j summing x[i]^2 (in double) for i = j mod 16 in order, the tail under 16 into lane 0,
 * the lanes added in order 0..15; the blocks' sums added in order. Bitwise. */
static void test_sum_squares_order(void) {
    size_t n = 3 * 16384 + 1000 + 7;
    float* x = falloc(n);
    fill_f(x, n, 3.0);
    double total = 0.0;
    for (size_t b0 = 0; b0 < n; b0 += 16384) {
        size_t b1 = b0 + 16384 < n ? b0 + 16384 : n, i = b0;
        double acc[16] = {0};
        for (; i + 16 <= b1; i += 16)
            for (int j = 0; j < 16; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
        for (; i < b1; i++) acc[0] += (double)x[i] * (double)x[i];
        double s = 0.0;
        for (int j = 0; j < 16; j++) s += acc[j];
        total += s;
    }
    double got = sum_squares(x, n);
    expect(memcmp(&got, &total, sizeof got) == 0, "sum_squares_is_its_lane_order_bitwise",
           "%.17g vs the specification's %.17g", got, total);
    free(x);
}

int main(void) {
    int default_threads = omp_get_max_threads();
    printf("# test_ops: %d OpenMP threads by default\n", default_threads);
    test_encoder_vs_ref();
    test_layernorm_vs_ref();
    test_matmul_vs_ref();
    test_gelu_vs_ref();
    test_residual_dropout_vs_ref();
    test_vexpd_accuracy();
    test_layernorm_is_the_sequential_loop_bitwise();
    test_crossentropy_vs_ref();
    test_crossentropy_exact_at_any_scale();
    test_norm_adamw_vs_ref();

    fd_encoder(0.0);
    fd_encoder(0.5);
    fd_layernorm();
    fd_matmul();
    fd_gelu();
    fd_residual_dropout(0.0);
    fd_residual_dropout(0.5);
    fd_crossentropy();

    test_accumulate_and_write();
    test_thread_invariance(default_threads);
    test_matmul_thread_invariance_odd_rows(default_threads);
    test_keep_bits();
    test_crossentropy_padding();
    test_crossentropy_forward_backward();
    test_sum_squares_order();
    return test_finish();
}
