/* tests/test_attention.c — the CPU flash attention (attention/flash_cpu.c) as a specification.
 *
 * The float64 reference (tests/ref_attention.c) is checked against central finite differences of
 * itself; the fp32 kernel is checked against the reference, forward and backward, over shapes that
 * hit every edge of the tiling (T = 1, T not a multiple of a tile, grouped-query heads, head dims
 * 1 to 128, several sequences with g0 != 0) and dropout 0, 0.1 and 0.5. Then the properties the
 * rest of seedgpt relies on: p = 0 is bitwise the no-dropout path; results are bitwise identical
 * at 1, 2 and 3 threads and at any buffer alignment; dropout really drops about p of the
 * probabilities, without bias; every keep bit the forward, the dK/dV pass and the dQ pass apply
 * is exactly philox_attn_draw's; every output element is written; the backward's scratch grows
 * like T, not T^2. Other tile sizes: tests/test_attention_tiles.c.
 *
 * Tolerance for fp32 against float64, per tensor ||a - ref|| / ||ref||: 1e-5. A float32 rounding
 * is u = 6e-8; each output is a chain of dot products over HD <= 128 terms and sums over T <= 512
 * keys, whose rounding errors grow like u sqrt(n) for independent roundings, i.e. a few 1e-7, which
 * is what is measured (printed). 1e-5 leaves a margin of about 20x, and is far below what a
 * boundary or scale fault produces (a causal boundary off by one or a missing scale moves whole
 * rows). It cannot see one wrong keep bit: that moves one row of one head by m p_ij scale |v_j|
 * (or the like in a gradient), a small fraction of the tensor's norm, and for a low-probability
 * weight less than the bound (measured: one bit flipped in the dQ pass at (g 7, h 1, i 80, j 6)
 * of the T = 100 case moves dq by 3.6e-7). So the keep bits are checked exactly, one by one, by
 * test_keep_bits_exact.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "attention/attention.h"
#include "tests/ref_attention.h"
#include "tests/test.h"

#define TOL_FP32 1e-5

typedef struct {
    int B, T, NH, NKV, HD;
    uint32_t g0;
    double p;     /* dropout probability */
    double amp;   /* standard deviation of q, k, v: larger is a peakier softmax */
} Shape;

/* One problem: fp32 inputs, and their exact float64 copies for the reference. */
typedef struct {
    Shape s;
    size_t n_qkv, n_out, n_lse;
    float* qkv;      /* (B, T, (NH + 2 NKV) HD) */
    float* dout;     /* (B, T, NH HD) */
    double* qkv_d;
    double* dout_d;
} Problem;

static size_t qkv_width(Shape s) { return (size_t)(s.NH + 2 * s.NKV) * s.HD; }

static Problem problem_make(Shape s) {
    Problem pr;
    pr.s = s;
    pr.n_qkv = (size_t)s.B * s.T * qkv_width(s);
    pr.n_out = (size_t)s.B * s.T * s.NH * s.HD;
    pr.n_lse = (size_t)s.B * s.NH * s.T;
    pr.qkv = malloc(sizeof(float) * pr.n_qkv);
    pr.dout = malloc(sizeof(float) * pr.n_out);
    pr.qkv_d = malloc(sizeof(double) * pr.n_qkv);
    pr.dout_d = malloc(sizeof(double) * pr.n_out);
    for (size_t x = 0; x < pr.n_qkv; x++) {
        pr.qkv[x] = (float)(s.amp * test_normal());
        pr.qkv_d[x] = pr.qkv[x];
    }
    for (size_t x = 0; x < pr.n_out; x++) {
        pr.dout[x] = (float)test_normal();
        pr.dout_d[x] = pr.dout[x];
    }
    return pr;
}

static void problem_free(Problem* pr) {
    free(pr->qkv); free(pr->dout); free(pr->qkv_d); free(pr->dout_d);
}

/* The kernel's outputs for one problem. */
typedef struct {
    float* out;    /* (B, T, NH HD) */
    float* lse;    /* (B, NH, T) */
    float* dqkv;   /* like qkv */
} KernelRun;

static KernelRun kernel_run(const Problem* pr, uint64_t seed, Dropout drop) {
    const Shape s = pr->s;
    KernelRun k;
    k.out = malloc(sizeof(float) * pr->n_out);
    k.lse = malloc(sizeof(float) * pr->n_lse);
    k.dqkv = malloc(sizeof(float) * pr->n_qkv);
    /* NaN everywhere first: every element must be written */
    for (size_t x = 0; x < pr->n_out; x++) k.out[x] = NAN;
    for (size_t x = 0; x < pr->n_lse; x++) k.lse[x] = NAN;
    for (size_t x = 0; x < pr->n_qkv; x++) k.dqkv[x] = NAN;
    size_t n_scratch = attention_backward_scratch_floats(s.B, s.T, s.NH, s.NKV, s.HD,
                                                         omp_get_max_threads());
    float* scratch = aligned_alloc(64, ((sizeof(float) * n_scratch + 63) / 64) * 64);
    attention_forward(k.out, k.lse, pr->qkv, s.B, s.T, s.NH, s.NKV, s.HD, s.g0, seed, drop);
    attention_backward(k.dqkv, scratch, pr->dout, pr->qkv, k.out, k.lse, s.B, s.T, s.NH, s.NKV,
                       s.HD, s.g0, seed, drop);
    free(scratch);
    return k;
}

static void kernel_free(KernelRun* k) { free(k->out); free(k->lse); free(k->dqkv); }

static int kernel_bitwise_equal(const KernelRun* a, const KernelRun* b, const Problem* pr) {
    return memcmp(a->out, b->out, sizeof(float) * pr->n_out) == 0
        && memcmp(a->lse, b->lse, sizeof(float) * pr->n_lse) == 0
        && memcmp(a->dqkv, b->dqkv, sizeof(float) * pr->n_qkv) == 0;
}

static size_t count_nonfinite(const float* x, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !isfinite(x[i]);
    return bad;
}

/* ||a - ref|| / ||ref|| over the query (part 0), key (1) or value (2) slices of a qkv-shaped
 * gradient. */
static double rel_err_qkv_part(const float* a, const double* ref, Shape s, int part) {
    const size_t W = qkv_width(s);
    const size_t off = part == 0 ? 0 : part == 1 ? (size_t)s.NH * s.HD : (size_t)(s.NH + s.NKV) * s.HD;
    const size_t len = part == 0 ? (size_t)s.NH * s.HD : (size_t)s.NKV * s.HD;
    double num = 0, den = 0;
    for (size_t row = 0; row < (size_t)s.B * s.T; row++)
        for (size_t x = 0; x < len; x++) {
            const double d = (double)a[row * W + off + x] - ref[row * W + off + x];
            num += d * d;
            den += ref[row * W + off + x] * ref[row * W + off + x];
        }
    return den == 0 ? sqrt(num) : sqrt(num / den);
}

/* ---- the reference against finite differences --------------------------------------------- */

/* loss = sum(out * wts): a deterministic function of qkv once the seed fixes the masks. */
static double ref_loss(const double* qkv, const double* wts, Shape s, uint64_t seed, Dropout drop,
                       double* out, double* lse) {
    ref_attention_forward(out, lse, qkv, s.B, s.T, s.NH, s.NKV, s.HD, s.g0, seed, drop);
    double L = 0;
    for (size_t x = 0; x < (size_t)s.B * s.T * s.NH * s.HD; x++) L += out[x] * wts[x];
    return L;
}

static void test_ref_backward_matches_finite_differences(double p) {
    const Shape s = {2, 9, 2, 1, 5, 5, p, 1.0};   /* GQA, two sequences, g0 = 5 */
    const uint64_t seed = 0xfdfdULL;
    const Dropout drop = dropout_make(p);
    Problem pr = problem_make(s);
    double* out = malloc(sizeof(double) * pr.n_out);
    double* lse = malloc(sizeof(double) * pr.n_lse);
    double* grad = malloc(sizeof(double) * pr.n_qkv);
    double* fd = malloc(sizeof(double) * pr.n_qkv);
    double* x = malloc(sizeof(double) * pr.n_qkv);
    memcpy(x, pr.qkv_d, sizeof(double) * pr.n_qkv);
    ref_attention_backward(grad, pr.dout_d, x, s.B, s.T, s.NH, s.NKV, s.HD, s.g0, seed, drop);
    /* central differences, step 1e-5: truncation ~ h^2 ~ 1e-10, rounding ~ 1e-16 / h ~ 1e-11 */
    const double h = 1e-5;
    for (size_t i = 0; i < pr.n_qkv; i++) {
        const double xi = x[i];
        x[i] = xi + h;
        const double Lp = ref_loss(x, pr.dout_d, s, seed, drop, out, lse);
        x[i] = xi - h;
        const double Lm = ref_loss(x, pr.dout_d, s, seed, drop, out, lse);
        x[i] = xi;
        fd[i] = (Lp - Lm) / (2 * h);
    }
    const double err = rel_err_dd(grad, fd, pr.n_qkv);
    char name[96];
    snprintf(name, sizeof name, "ref_backward_matches_finite_differences[p=%.1f]", p);
    expect(err < 1e-7, name, "||grad - fd|| / ||fd|| = %.2e over %zu inputs (bound 1e-7)", err,
           pr.n_qkv);
    free(out); free(lse); free(grad); free(fd); free(x);
    problem_free(&pr);
}

/* ---- the kernel against the reference ------------------------------------------------------ */

static void test_kernel_matches_reference(Shape s) {
    const uint64_t seed = 0xa77e5eedULL ^ (uint64_t)s.T;
    const Dropout drop = dropout_make(s.p);
    Problem pr = problem_make(s);
    KernelRun k = kernel_run(&pr, seed, drop);
    double* out = malloc(sizeof(double) * pr.n_out);
    double* lse = malloc(sizeof(double) * pr.n_lse);
    double* dqkv = malloc(sizeof(double) * pr.n_qkv);
    ref_attention_forward(out, lse, pr.qkv_d, s.B, s.T, s.NH, s.NKV, s.HD, s.g0, seed, drop);
    ref_attention_backward(dqkv, pr.dout_d, pr.qkv_d, s.B, s.T, s.NH, s.NKV, s.HD, s.g0, seed, drop);
    const double e_out = rel_err_fd(k.out, out, pr.n_out);
    const double e_lse = rel_err_fd(k.lse, lse, pr.n_lse);
    const double e_dq = rel_err_qkv_part(k.dqkv, dqkv, s, 0);
    const double e_dk = rel_err_qkv_part(k.dqkv, dqkv, s, 1);
    const double e_dv = rel_err_qkv_part(k.dqkv, dqkv, s, 2);
    double worst = e_out;
    const double errs[4] = {e_lse, e_dq, e_dk, e_dv};
    for (int i = 0; i < 4; i++) worst = errs[i] > worst ? errs[i] : worst;
    char name[160];
    snprintf(name, sizeof name,
             "kernel_matches_float64_reference[B=%d T=%d NH=%d NKV=%d HD=%d g0=%u p=%.1f amp=%.0f]",
             s.B, s.T, s.NH, s.NKV, s.HD, s.g0, s.p, s.amp);
    expect(worst < TOL_FP32, name, "out %.1e lse %.1e dq %.1e dk %.1e dv %.1e (bound %.0e)",
           e_out, e_lse, e_dq, e_dk, e_dv, TOL_FP32);
    free(out); free(lse); free(dqkv);
    kernel_free(&k);
    problem_free(&pr);
}

/* ---- p = 0 --------------------------------------------------------------------------------- */

static void test_p0_is_the_no_dropout_path(void) {
    const Dropout d0 = dropout_make(0.0);
    expect(d0.thr == 0 && d0.scale == 1.0f, "p0_makes_thr_0_and_scale_1",
           "dropout_make(0): thr %u scale %.9g", d0.thr, (double)d0.scale);

    const Shape s = {2, 77, 4, 2, 32, 3, 0.0, 1.0};
    Problem pr = problem_make(s);
    const Dropout none = {0, 1.0f};   /* the path with no dropout concept: no generator, no scale */
    KernelRun a = kernel_run(&pr, 1, none);
    KernelRun b = kernel_run(&pr, 0xdeadbeefcafeULL, d0);
    expect(kernel_bitwise_equal(&a, &b, &pr), "p0_is_bitwise_the_no_dropout_path_for_any_seed",
           "seed 1 with {thr 0, scale 1} vs seed 0xdeadbeefcafe with dropout_make(0): out, lse, "
           "dqkv identical");

    /* thr = 1 runs the generator and drops only a draw of exactly 0 (probability 2^-32): where
     * nothing is dropped, the dropout arithmetic must give bitwise the same result. */
    const Dropout thr1 = {1, 1.0f};
    const uint64_t seed = 0x1234567ULL;
    long dropped = 0;
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++)
            for (int i = 0; i < s.T; i++)
                for (int j = 0; j <= i; j++)
                    dropped += !ref_attention_keep(seed, s.g0 + (uint32_t)b, (uint32_t)h, (uint32_t)i,
                                                   (uint32_t)j, thr1);
    KernelRun c = kernel_run(&pr, seed, thr1);
    expect(dropped == 0 && kernel_bitwise_equal(&a, &c, &pr),
           "keep_path_dropping_nothing_is_bitwise_the_no_dropout_path",
           "thr 1: %ld probabilities dropped; out, lse, dqkv %s", dropped,
           kernel_bitwise_equal(&a, &c, &pr) ? "identical" : "differ");
    kernel_free(&a); kernel_free(&b); kernel_free(&c);
    problem_free(&pr);
}

/* ---- threads ------------------------------------------------------------------------------- */

static void test_bitwise_identical_across_threads(double p) {
    const Shape s = {2, 203, 4, 2, 64, 11, p, 1.0};
    Problem pr = problem_make(s);
    const Dropout drop = dropout_make(p);
    const int saved = omp_get_max_threads();
    KernelRun runs[3];
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(t + 1);
        runs[t] = kernel_run(&pr, 77, drop);
    }
    omp_set_num_threads(saved);
    const int same12 = kernel_bitwise_equal(&runs[0], &runs[1], &pr);
    const int same13 = kernel_bitwise_equal(&runs[0], &runs[2], &pr);
    char name[96];
    snprintf(name, sizeof name, "bitwise_identical_at_1_2_3_threads[p=%.1f]", p);
    expect(same12 && same13, name, "forward and backward: 1 vs 2 threads %s, 1 vs 3 threads %s",
           same12 ? "identical" : "DIFFER", same13 ? "identical" : "DIFFER");
    for (int t = 0; t < 3; t++) kernel_free(&runs[t]);
    problem_free(&pr);
}

/* ---- alignment ----------------------------------------------------------------------------- */

/* DESIGN §4 asks for 64-byte aligned tensors so that no vectorised sum depends on the address; the
 * kernel has no such sum, and this checks it: every buffer (scratch included) one float off
 * alignment gives bitwise the aligned result. */
static void test_alignment_does_not_matter(void) {
    const Shape s = {2, 91, 4, 2, 64, 4, 0.1, 1.0};
    Problem pr = problem_make(s);
    const Dropout drop = dropout_make(s.p);
    KernelRun a = kernel_run(&pr, 21, drop);
    const size_t n_scratch = attention_backward_scratch_floats(s.B, s.T, s.NH, s.NKV, s.HD,
                                                               omp_get_max_threads());
    float* qkv = malloc(sizeof(float) * (pr.n_qkv + 1));
    float* dout = malloc(sizeof(float) * (pr.n_out + 1));
    float* out = malloc(sizeof(float) * (pr.n_out + 1));
    float* lse = malloc(sizeof(float) * (pr.n_lse + 1));
    float* dqkv = malloc(sizeof(float) * (pr.n_qkv + 1));
    float* scratch = malloc(sizeof(float) * (n_scratch + 1));
    memcpy(qkv + 1, pr.qkv, sizeof(float) * pr.n_qkv);
    memcpy(dout + 1, pr.dout, sizeof(float) * pr.n_out);
    attention_forward(out + 1, lse + 1, qkv + 1, s.B, s.T, s.NH, s.NKV, s.HD, s.g0, 21, drop);
    attention_backward(dqkv + 1, scratch + 1, dout + 1, qkv + 1, out + 1, lse + 1, s.B, s.T, s.NH,
                       s.NKV, s.HD, s.g0, 21, drop);
    const int same = memcmp(out + 1, a.out, sizeof(float) * pr.n_out) == 0
                  && memcmp(lse + 1, a.lse, sizeof(float) * pr.n_lse) == 0
                  && memcmp(dqkv + 1, a.dqkv, sizeof(float) * pr.n_qkv) == 0;
    expect(same, "bitwise_identical_with_unaligned_buffers",
           "every buffer 4 bytes off 64-byte alignment: out, lse, dqkv %s",
           same ? "identical" : "DIFFER");
    free(qkv); free(dout); free(out); free(lse); free(dqkv); free(scratch);
    kernel_free(&a);
    problem_free(&pr);
}

/* ---- dropout happens, at the right rate, without bias -------------------------------------- */

static void test_dropout_happens(void) {
    const Shape s = {2, 150, 4, 2, 32, 9, 0.5, 1.0};
    Problem pr = problem_make(s);
    KernelRun k0 = kernel_run(&pr, 5, dropout_make(0.0));
    const double ps[2] = {0.5, 0.1};
    for (int t = 0; t < 2; t++) {
        const double p = ps[t];
        const Dropout drop = dropout_make(p);
        KernelRun k = kernel_run(&pr, 5, drop);
        double num = 0, den = 0;
        for (size_t x = 0; x < pr.n_out; x++) {
            num += ((double)k.out[x] - k0.out[x]) * ((double)k.out[x] - k0.out[x]);
            den += (double)k0.out[x] * k0.out[x];
        }
        const double moved = sqrt(num / den);
        long kept = 0, total = 0;
        for (int b = 0; b < s.B; b++)
            for (int h = 0; h < s.NH; h++)
                for (int i = 0; i < s.T; i++)
                    for (int j = 0; j <= i; j++, total++)
                        kept += ref_attention_keep(5, s.g0 + (uint32_t)b, (uint32_t)h, (uint32_t)i,
                                                   (uint32_t)j, drop);
        const double frac = (double)kept / total, sd = sqrt(p * (1 - p) / total);
        const int lse_same = memcmp(k.lse, k0.lse, sizeof(float) * pr.n_lse) == 0;
        char name[96];
        snprintf(name, sizeof name, "dropout_drops_about_p_of_the_probabilities[p=%.1f]", p);
        expect(fabs(frac - (1 - p)) < 5 * sd && moved > 0.1 && lse_same, name,
               "kept %.4f of %ld (expected %.2f +- %.4f); ||out - out(p=0)|| / ||out(p=0)|| = %.3f; "
               "lse (before dropout) %s", frac, total, 1 - p, 5 * sd, moved,
               lse_same ? "unchanged" : "CHANGED");
        kernel_free(&k);
    }
    kernel_free(&k0);
    problem_free(&pr);

    /* E[out] over masks is the undropped output: average over many seeds. The per-seed spread of
     * out is about its own size at p = 0.5, so over N seeds the mean's relative error is about
     * 1/sqrt(N) (0.05 at N = 400); a missing or doubled scale gives 0.5 or 1. */
    const Shape u = {1, 16, 2, 1, 8, 0, 0.5, 1.0};
    Problem pu = problem_make(u);
    const Dropout drop = dropout_make(0.5);
    float* o = malloc(sizeof(float) * pu.n_out);
    float* l = malloc(sizeof(float) * pu.n_lse);
    float* o0 = malloc(sizeof(float) * pu.n_out);
    double* mean = calloc(pu.n_out, sizeof(double));
    attention_forward(o0, l, pu.qkv, u.B, u.T, u.NH, u.NKV, u.HD, 0, 0, dropout_make(0.0));
    const int N = 400;
    for (int n = 0; n < N; n++) {
        attention_forward(o, l, pu.qkv, u.B, u.T, u.NH, u.NKV, u.HD, 0, 1000 + (uint64_t)n, drop);
        for (size_t x = 0; x < pu.n_out; x++) mean[x] += o[x] / (double)N;
    }
    double num = 0, den = 0;
    for (size_t x = 0; x < pu.n_out; x++) {
        num += (mean[x] - o0[x]) * (mean[x] - o0[x]);
        den += (double)o0[x] * o0[x];
    }
    const double bias = sqrt(num / den);
    expect(bias < 0.15, "dropout_is_unbiased_over_seeds",
           "||mean over %d seeds - out(p=0)|| / ||out(p=0)|| = %.3f (bound 0.15; 1/sqrt(N) = %.3f)",
           N, bias, 1 / sqrt((double)N));
    free(o); free(l); free(o0); free(mean);
    problem_free(&pu);
}

/* ---- the keep bits, exactly ---------------------------------------------------------------- */

/* Which probabilities the kernel dropped, read off exactly and held to philox_attn_draw for every
 * (b, h, i, j), once for each place the kernel applies keep bits: the forward, the backward's dK/dV
 * pass and its dQ pass. The norm bound above cannot see one wrong bit: a flipped bit moves one
 * row of one head by m p_ij scale |v_j|, and where p_ij is small that is ~1e-5 of the tensor or
 * less, inside the bound. Here a one-hot operand isolates each weight m_ij p_ij scale in an output
 * element of its own (the other terms of its sum are exact zeros), so a kept key gives a non-zero
 * element and a dropped one an exact 0 (p_ij > 0 always: the scores stay far from exp's underflow).
 * With amp 2 the scores have a standard deviation of 4, so the probabilities span ten orders of
 * magnitude and a kernel that mishandles the bits of negligible weights is caught too. Keys and
 * queries are taken in windows of HD positions [lo, lo + HD), the one-hot position is d = j - lo
 * (or i - lo):
 *   forward   v_j = e_{j-lo} in the window, 0 outside:     o_id = m_{i,lo+d} p scale
 *   dK/dV     do_i = e_{i-lo} for one query head h only:    dv_jd = m_{lo+d,j} p scale
 *   dQ        k_j = a e_{j-lo} (a = amp sqrt(HD): scores of the same spread), v_j = (1, .., 1),
 *             do_i = e_0 for head h, out = 0 passed to the backward (so D_i = do_i.o_i = 0 and
 *             ds_ij = m_ij p_ij scale):  dq_id = sigma a m p scale
 * Elements of future keys (j > i) must be exact zeros too. */
typedef struct {
    long checked, dropped, wrong, future_nonzero;
    int first_b, first_h, first_i, first_j;   /* the first wrong bit, -1 if none */
} KeepCount;

static void keep_count_add(KeepCount* kc, float value, int b, int h, int i, int j, uint64_t seed,
                           uint32_t g0, Dropout drop) {
    if (j > i) { kc->future_nonzero += value != 0.0f; return; }
    const int kept = philox_attn_draw(seed, g0 + (uint32_t)b, (uint32_t)h, (uint32_t)i,
                                      (uint32_t)j) >= drop.thr;
    kc->checked++;
    kc->dropped += !kept;
    if ((value != 0.0f) != kept || !isfinite(value)) {
        if (kc->wrong++ == 0) { kc->first_b = b; kc->first_h = h; kc->first_i = i; kc->first_j = j; }
    }
}

static void keep_count_report(const KeepCount* kc, const char* pass, Shape s, const char* tag) {
    char name[200], first[80] = "";
    snprintf(name, sizeof name, "%s_keep_bits_equal_philox_attn_draw[B=%d T=%d NH=%d NKV=%d HD=%d p=%.1f]%s",
             pass, s.B, s.T, s.NH, s.NKV, s.HD, s.p, tag);
    if (kc->wrong)
        snprintf(first, sizeof first, ", the first at (b %d, h %d, i %d, j %d)", kc->first_b,
                 kc->first_h, kc->first_i, kc->first_j);
    expect(kc->checked > 0 && kc->dropped > 0 && kc->wrong == 0 && kc->future_nonzero == 0, name,
           "%ld of %ld keep bits differ%s (%ld dropped, %.3f); %ld future elements non-zero",
           kc->wrong, kc->checked, first, kc->dropped,
           kc->checked ? (double)kc->dropped / kc->checked : 0.0, kc->future_nonzero);
}

static uint64_t keep_seed(Shape s) { return 0x6b656570ULL ^ (uint64_t)s.T; }   /* "keep" */

/* tag: appended to the test names (empty for drop = dropout_make(s.p)) */
static void keep_bits_exact(Shape s, Dropout drop, const char* tag) {
    const uint64_t seed = keep_seed(s);
    const int HD = s.HD, G = s.NH / s.NKV;
    const float a = (float)(s.amp * sqrt((double)HD));
    const size_t W = qkv_width(s), C = (size_t)s.NH * HD;
    const size_t vo = (size_t)(s.NH + s.NKV) * HD, ko = (size_t)s.NH * HD;   /* value, key heads */
    Problem pr = problem_make(s);   /* random q, k, v */
    float* qkv = malloc(sizeof(float) * pr.n_qkv);
    float* out = malloc(sizeof(float) * pr.n_out);
    float* zero_out = calloc(pr.n_out, sizeof(float));
    float* lse = malloc(sizeof(float) * pr.n_lse);
    float* dout = malloc(sizeof(float) * pr.n_out);
    float* dqkv = malloc(sizeof(float) * pr.n_qkv);
    float* scratch = malloc(sizeof(float) * attention_backward_scratch_floats(
        s.B, s.T, s.NH, s.NKV, HD, omp_get_max_threads()));
    KeepCount fwd = {0, 0, 0, 0, -1, -1, -1, -1}, kv = fwd, q = fwd;
    double pmin = 1.0;   /* the smallest weight m p scale read (forward), to print */
    for (int lo = 0; lo < s.T; lo += HD) {
        const int hi = lo + HD < s.T ? lo + HD : s.T;
        /* forward and dK/dV: q, k random; v one-hot in the window */
        memcpy(qkv, pr.qkv, sizeof(float) * pr.n_qkv);
        for (int b = 0; b < s.B; b++)
            for (int j = 0; j < s.T; j++)
                for (int kvh = 0; kvh < s.NKV; kvh++) {
                    float* v = qkv + ((size_t)b * s.T + j) * W + vo + (size_t)kvh * HD;
                    for (int d = 0; d < HD; d++) v[d] = (j >= lo && j < hi && d == j - lo) ? 1.0f : 0.0f;
                }
        attention_forward(out, lse, qkv, s.B, s.T, s.NH, s.NKV, HD, s.g0, seed, drop);
        for (int b = 0; b < s.B; b++)
            for (int i = 0; i < s.T; i++)
                for (int h = 0; h < s.NH; h++)
                    for (int j = lo; j < hi; j++) {
                        const float o = out[((size_t)b * s.T + i) * C + (size_t)h * HD + (j - lo)];
                        keep_count_add(&fwd, o, b, h, i, j, seed, s.g0, drop);
                        if (o != 0.0f && o < pmin) pmin = o;
                    }
        for (int h = 0; h < s.NH; h++) {
            memset(dout, 0, sizeof(float) * pr.n_out);
            for (int b = 0; b < s.B; b++)
                for (int i = lo; i < hi; i++) dout[((size_t)b * s.T + i) * C + (size_t)h * HD + (i - lo)] = 1.0f;
            attention_backward(dqkv, scratch, dout, qkv, out, lse, s.B, s.T, s.NH, s.NKV, HD, s.g0,
                               seed, drop);
            for (int b = 0; b < s.B; b++)
                for (int j = 0; j < s.T; j++)
                    for (int i = lo; i < hi; i++)
                        keep_count_add(&kv, dqkv[((size_t)b * s.T + j) * W + vo + (size_t)(h / G) * HD + (i - lo)],
                                       b, h, i, j, seed, s.g0, drop);
        }
        /* dQ: k one-hot in the window, v all ones, do_i = e_0 for one head, D = 0 */
        memcpy(qkv, pr.qkv, sizeof(float) * pr.n_qkv);
        for (int b = 0; b < s.B; b++)
            for (int j = 0; j < s.T; j++)
                for (int kvh = 0; kvh < s.NKV; kvh++) {
                    float* k = qkv + ((size_t)b * s.T + j) * W + ko + (size_t)kvh * HD;
                    float* v = qkv + ((size_t)b * s.T + j) * W + vo + (size_t)kvh * HD;
                    for (int d = 0; d < HD; d++) {
                        k[d] = (j >= lo && j < hi && d == j - lo) ? a : 0.0f;
                        v[d] = 1.0f;
                    }
                }
        attention_forward(out, lse, qkv, s.B, s.T, s.NH, s.NKV, HD, s.g0, seed, drop);
        for (int h = 0; h < s.NH; h++) {
            memset(dout, 0, sizeof(float) * pr.n_out);
            for (int b = 0; b < s.B; b++)
                for (int i = 0; i < s.T; i++) dout[((size_t)b * s.T + i) * C + (size_t)h * HD] = 1.0f;
            attention_backward(dqkv, scratch, dout, qkv, zero_out, lse, s.B, s.T, s.NH, s.NKV, HD,
                               s.g0, seed, drop);
            for (int b = 0; b < s.B; b++)
                for (int i = 0; i < s.T; i++)
                    for (int j = lo; j < hi; j++)
                        keep_count_add(&q, dqkv[((size_t)b * s.T + i) * W + (size_t)h * HD + (j - lo)],
                                       b, h, i, j, seed, s.g0, drop);
        }
    }
    printf("# keep bits [T=%d amp=%.0f]: the smallest kept weight m p scale read off is %.2e\n",
           s.T, s.amp, pmin);
    keep_count_report(&fwd, "forward", s, tag);
    keep_count_report(&kv, "backward_dkdv_pass", s, tag);
    keep_count_report(&q, "backward_dq_pass", s, tag);
    free(qkv); free(out); free(zero_out); free(lse); free(dout); free(dqkv); free(scratch);
    problem_free(&pr);
}

static void test_keep_bits_exact(Shape s) { keep_bits_exact(s, dropout_make(s.p), ""); }

/* keep iff draw >= thr at equality too. At dropout_make's thresholds a draw equal to thr is a
 * 2^-32 event the reads above never meet, so here thr is set to the draw of one element (b 0,
 * head 1, query 37, key j) and every bit is read off again: that element must read kept in the
 * forward and in both backward passes. Key 5 lies in a block of 32 keys the query sees whole,
 * key 33 in the block it sees in part: the kernel fills the two kinds of block apart. */
static void test_keep_bit_at_threshold(void) {
    const int keys[2] = {5, 33};
    for (int k = 0; k < 2; k++) {
        Shape s = {1, 40, 2, 2, 32, 3, 0.0, 1.0};
        const uint32_t draw = philox_attn_draw(keep_seed(s), s.g0, 1, 37, (uint32_t)keys[k]);
        s.p = draw / 4294967296.0;   /* printed in the names; thr below is the draw exactly */
        const Dropout at = {draw, (float)(1.0 / (1.0 - s.p))};
        char tag[64];
        snprintf(tag, sizeof tag, "_at_thr_equal_to_the_draw_of_i37_j%d", keys[k]);
        keep_bits_exact(s, at, tag);
    }
}

/* ---- every output written ------------------------------------------------------------------ */

static void test_every_output_written(void) {
    /* GQA with NKV = 1, T not a multiple of any tile, dropout: the kernel run starts from NaN */
    const Shape s = {3, 70, 4, 1, 32, 2, 0.1, 1.0};
    Problem pr = problem_make(s);
    KernelRun k = kernel_run(&pr, 3, dropout_make(s.p));
    const size_t bad_out = count_nonfinite(k.out, pr.n_out), bad_lse = count_nonfinite(k.lse, pr.n_lse);
    const size_t bad_d = count_nonfinite(k.dqkv, pr.n_qkv);
    expect(bad_out == 0 && bad_lse == 0 && bad_d == 0, "every_out_lse_dqkv_element_written",
           "elements still NaN: out %zu of %zu, lse %zu of %zu, dqkv %zu of %zu", bad_out, pr.n_out,
           bad_lse, pr.n_lse, bad_d, pr.n_qkv);
    kernel_free(&k);
    problem_free(&pr);
}

/* ---- memory -------------------------------------------------------------------------------- */

static void test_scratch_grows_linearly(void) {
    const size_t s4 = attention_backward_scratch_floats(1, 4096, 12, 12, 64, 2);
    const size_t s8 = attention_backward_scratch_floats(1, 8192, 12, 12, 64, 2);
    const size_t s16 = attention_backward_scratch_floats(1, 16384, 12, 12, 64, 2);
    const double ratio = (double)s8 / (double)s4;
    /* linear in T: doubling the step in T doubles the increment (T^2 would quadruple it) */
    const int linear = (s16 - s8) == 2 * (s8 - s4);
    expect(ratio <= 2.0 && linear && s8 - s4 == (size_t)12 * 4096, "backward_scratch_grows_linearly_in_T",
           "B=1 NH=12 HD=64 2 threads: %zu floats at T=4096, %zu at 8192 (ratio %.2f), %zu at 16384;"
           " growth per key row %.1f floats (B*NH = 12)", s4, s8, ratio, s16,
           (double)(s8 - s4) / 4096);
}


/* ---- context parallelism: blocks at global positions ---------------------------------------- */

/* The keep bits a forward used, by (b, h, i, j): 0 not used, 1 dropped, 2 kept. */
static unsigned char* keep_map;
static Shape keep_map_shape;
static void keep_map_hook(uint32_t g, int h, int i, int j, int kept) {
    const Shape s = keep_map_shape;
    size_t at = (((size_t)(g - s.g0) * s.NH + h) * s.T + i) * s.T + j;
    keep_map[at] = kept ? 2 : 1;
}

/* Copies chunk c (Tc positions from c*Tc) of every sequence of x (B, T, W) into y (B, Tc, W), or
 * back (to_chunk = 0). */
static void chunk_copy(float* y, float* x, int B, int T, int Tc, int c, size_t W, int to_chunk) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tc; t++) {
            float* a = y + ((size_t)b * Tc + t) * W;
            float* z = x + ((size_t)b * T + c * Tc + t) * W;
            if (to_chunk) memcpy(a, z, W * sizeof(float)); else memcpy(z, a, W * sizeof(float));
        }
}

/* The zigzag split of DESIGN §9 run in one process: N ranks, rank r holding chunks r and 2N-1-r of
 * 2N; in ring step s it attends to the chunks of rank (r - s) mod N, merging each block by the
 * LSEs; the backward runs the same blocks against the merged lse and output. The whole-sequence
 * kernel is the reference: out, lse and dqkv to rounding (the merge and the block sums group the
 * terms differently), and every keep bit equal, bit for bit, with every causal (i, j) used once. */
static void test_context_parallel_blocks(Shape s, int N) {
    Problem pr = problem_make(s);
    const int Tc = s.T / (2 * N);
    const size_t W = qkv_width(s), C = (size_t)s.NH * s.HD, NC = 2 * (size_t)N;
    const uint64_t seed = 0x7a69677aULL;   /* "zigz" */
    Dropout drop = dropout_make(s.p);
    size_t cells = (size_t)s.B * s.NH * s.T * s.T;
    unsigned char* whole_map = calloc(cells, 1);
    unsigned char* cp_map = calloc(cells, 1);
    keep_map_shape = s;
    keep_map = whole_map;
    attention_keep_hook = keep_map_hook;
    KernelRun ref = kernel_run(&pr, seed, drop);
    keep_map = cp_map;

    /* every chunk in its own buffers: q/k/v rows, out, lse, dout, dqkv */
    float *qkv_c[16], *out_c[16], *lse_c[16], *dout_c[16], *dqkv_c[16];
    for (size_t c = 0; c < NC; c++) {
        qkv_c[c] = malloc(sizeof(float) * s.B * Tc * W);
        out_c[c] = malloc(sizeof(float) * s.B * Tc * C);
        dout_c[c] = malloc(sizeof(float) * s.B * Tc * C);
        lse_c[c] = malloc(sizeof(float) * s.B * s.NH * Tc);
        dqkv_c[c] = calloc((size_t)s.B * Tc * W, sizeof(float));
        chunk_copy(qkv_c[c], pr.qkv, s.B, s.T, Tc, (int)c, W, 1);
        chunk_copy(dout_c[c], pr.dout, s.B, s.T, Tc, (int)c, C, 1);
        for (size_t x = 0; x < (size_t)s.B * s.NH * Tc; x++) lse_c[c][x] = -INFINITY;
    }
    float* blk = malloc(sizeof(float) * s.B * Tc * C);
    float* blk_lse = malloc(sizeof(float) * s.B * s.NH * Tc);
    size_t n_scratch = attention_backward_scratch_floats(s.B, Tc, s.NH, s.NKV, s.HD, omp_get_max_threads());
    float* scratch = aligned_alloc(64, ((sizeof(float) * n_scratch + 63) / 64) * 64);
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < N; r++) {
            const int mine[2] = {r, 2 * N - 1 - r};
            for (int st = 0; st < N; st++) {
                const int src = ((r - st) % N + N) % N, theirs[2] = {src, 2 * N - 1 - src};
                for (int a = 0; a < 2; a++)
                    for (int k = 0; k < 2; k++) {
                        const int qc = mine[a], kc = theirs[k];
                        if (kc > qc) continue;   /* the future: nothing visible */
                        const float* kv = qkv_c[kc];
                        if (pass == 0) {
                            attention_block_forward(blk, blk_lse, qkv_c[qc], W, Tc, qc * Tc,
                                                    kv + s.NH * s.HD, kv + (s.NH + s.NKV) * s.HD, W,
                                                    Tc, kc * Tc, s.B, s.NH, s.NKV, s.HD, s.g0, seed, drop);
                            attention_merge(out_c[qc], lse_c[qc], blk, blk_lse, s.B, Tc, s.NH, s.HD);
                        } else {
                            float* dkv = dqkv_c[kc];
                            attention_block_backward(dqkv_c[qc], W, dkv + s.NH * s.HD,
                                                     dkv + (s.NH + s.NKV) * s.HD, W, scratch,
                                                     dout_c[qc], out_c[qc], lse_c[qc], qkv_c[qc], W,
                                                     Tc, qc * Tc, kv + s.NH * s.HD,
                                                     kv + (s.NH + s.NKV) * s.HD, W, Tc, kc * Tc, s.B,
                                                     s.NH, s.NKV, s.HD, s.g0, seed, drop);
                        }
                    }
            }
        }
    attention_keep_hook = NULL;
    float* out = malloc(sizeof(float) * pr.n_out);
    float* dqkv = malloc(sizeof(float) * pr.n_qkv);
    float* lse = malloc(sizeof(float) * pr.n_lse);
    for (size_t c = 0; c < NC; c++) {
        chunk_copy(out_c[c], out, s.B, s.T, Tc, (int)c, C, 0);
        chunk_copy(dqkv_c[c], dqkv, s.B, s.T, Tc, (int)c, W, 0);
        for (int bh = 0; bh < s.B * s.NH; bh++)
            memcpy(lse + (size_t)bh * s.T + c * Tc, lse_c[c] + (size_t)bh * Tc, Tc * sizeof(float));
    }
    double e_out = 0, e_lse = 0, e_d = 0, n_out = 0, n_lse = 0, n_d = 0;
    for (size_t x = 0; x < pr.n_out; x++) { e_out += pow(out[x] - ref.out[x], 2); n_out += pow(ref.out[x], 2); }
    for (size_t x = 0; x < pr.n_lse; x++) { e_lse += pow(lse[x] - ref.lse[x], 2); n_lse += pow(ref.lse[x], 2); }
    for (size_t x = 0; x < pr.n_qkv; x++) { e_d += pow(dqkv[x] - ref.dqkv[x], 2); n_d += pow(ref.dqkv[x], 2); }
    e_out = sqrt(e_out / n_out); e_lse = sqrt(e_lse / n_lse); e_d = sqrt(e_d / n_d);
    size_t differ = 0, unused = 0, dropped = 0;
    for (size_t x = 0; x < cells; x++) {
        size_t i = (x / s.T) % s.T, j = x % s.T;
        differ += whole_map[x] != cp_map[x];
        unused += j <= i && cp_map[x] == 0;
        dropped += cp_map[x] == 1;
    }
    char name[128];
    snprintf(name, sizeof(name), "zigzag_%d_ranks_equals_one_process_T%d_p%g", N, s.T, s.p);
    expect(e_out < TOL_FP32 && e_lse < TOL_FP32 && e_d < TOL_FP32 && !isnan(e_out + e_lse + e_d), name,
           "relative out %.1e lse %.1e dqkv %.1e (bound %.0e)", e_out, e_lse, e_d, TOL_FP32);
    snprintf(name, sizeof(name), "zigzag_%d_ranks_keep_bits_are_the_global_ones_T%d_p%g", N, s.T, s.p);
    expect(differ == 0 && (s.p == 0 ? dropped == 0 : unused == 0 && dropped > 0), name,
           "%zu of %zu (b, h, i, j) cells differ from one process, %zu causal cells unused, %zu dropped",
           differ, cells, unused, dropped);
    for (size_t c = 0; c < NC; c++) {
        free(qkv_c[c]); free(out_c[c]); free(dout_c[c]); free(lse_c[c]); free(dqkv_c[c]);
    }
    free(blk); free(blk_lse); free(scratch); free(out); free(dqkv); free(lse);
    free(whole_map); free(cp_map);
    kernel_free(&ref);
    problem_free(&pr);
}

int main(void) {
    test_ref_backward_matches_finite_differences(0.5);
    test_ref_backward_matches_finite_differences(0.0);

    const Shape shapes[] = {
        /* B  T   NH NKV HD  g0    p    amp */
        /* T = 1: one key has probability 1 and no softmax gradient, so dq = dk = 0 exactly and
         * the "relative" error printed for them is the absolute one (test.h's rule for ref = 0) */
        {1,   1, 2, 2,  32,  0,   0.0, 1.0},
        {2,   1, 4, 1,  64,  41,  0.5, 1.0},   /* T = 1, dropout, GQA */
        {2, 100, 4, 2,  64,  7,   0.1, 1.0},   /* T not a multiple of the tile, GQA 2:1 */
        {1, 130, 4, 1,  32,  0,   0.5, 1.0},   /* GQA 4:1 */
        {2,  64, 2, 2, 128,  1,   0.0, 1.0},   /* exactly one tile, HD = 128 */
        {1, 200, 3, 3,  48,  12,  0.1, 1.0},   /* HD not a power of two */
        {3,  33, 4, 4,  64,  1000, 0.5, 1.0},  /* three sequences, g0 = 1000 */
        {1, 257, 2, 1,  64,  5,   0.1, 1.0},   /* one past a tile multiple */
        {2,  96, 2, 1, 128,  3,   0.5, 1.0},   /* HD = 128 with dropout */
        {1, 150, 2, 2,  64,  2,   0.1, 2.0},   /* peaky softmax: scores with std 4 */
        {1, 512, 4, 2,  64,  0,   0.1, 1.0},   /* eight tiles: long running sums */
        {2,  70, 2, 1,   8,  0,   0.5, 1.0},   /* HD narrower than a vector */
        {1,  40, 2, 2,   1,  6,   0.1, 1.0},   /* HD = 1 */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_kernel_matches_reference(shapes[i]);

    test_p0_is_the_no_dropout_path();
    test_bitwise_identical_across_threads(0.0);
    test_bitwise_identical_across_threads(0.1);
    test_alignment_does_not_matter();
    test_dropout_happens();
    /* B  T   NH NKV HD  g0  p    amp: windows of HD keys, tiles and Philox blocks of 32 crossed */
    test_keep_bits_exact((Shape){2, 100, 4, 2, 48, 7, 0.3, 2.0});
    test_keep_bits_exact((Shape){1, 150, 3, 3, 64, 1000, 0.1, 1.0});
    test_keep_bit_at_threshold();
    test_every_output_written();
    test_scratch_grows_linearly();
    /* B  T   NH NKV HD  g0  p    amp */
    test_context_parallel_blocks((Shape){2, 128, 4, 2, 32, 3, 0.1, 1.0}, 2);
    test_context_parallel_blocks((Shape){1, 120, 2, 2, 16, 0, 0.3, 1.0}, 3);
    test_context_parallel_blocks((Shape){1, 64, 2, 1, 16, 9, 0.0, 1.0}, 2);
    return test_finish();
}
