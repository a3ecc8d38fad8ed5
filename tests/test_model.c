/* tests/test_model.c — the whole model (model/gpt.c over cpu/ops_cpu.c and the attention
 * kernel): its gradient against a float64 reference (tests/ref_gpt.c) whose own gradient is
 * checked against central finite differences; bitwise determinism across thread counts; batch
 * splitting; the p = 0 path; step-dependent masks; no allocation after step 0; AdamW and
 * gradient clipping semantics.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <omp.h>
#include "model/gpt.h"
#include "model/mem.h"
#include "random/philox.h"
#include "tests/ref_gpt.h"
#include "tests/test.h"
#include "tests/model_util.h"

void openblas_set_num_threads(int);
int openblas_get_num_threads(void);

static GPTConfig make_config(int L, int NH, int NKV, int C, int V, int maxT) {
    GPTConfig c = {maxT, V, gpt_pad_vocab(V), L, NH, NKV, C, 0, 0, 0, 0};  /* plain GPT-2 model options */
    return c;
}

static GPT build(const GPTConfig* c, int B, int T) {
    GPT m;
    char err[256];
    if (gpt_build(&m, c, B, T, err) != 0) {
        fprintf(stderr, "test_model: gpt_build: %s\n", err);
        exit(2);
    }
    return m;
}

static float model_loss_grad(GPT* m, const int* in, const int* tg, int B, int T, uint32_t g0,
                             uint32_t step, int train) {
    gpt_zero_grad(m);
    float loss = gpt_forward(m, in, tg, B, T, g0, step, train);
    gpt_backward(m, 1.0f / (float)(B * T));
    return loss;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* ---- 0. the reference's layout is the model's layout ---------------------------------------- */

static void test_layout(void) {
    GPTConfig cs[2] = {make_config(2, 4, 2, 16, 40, 8), make_config(3, 6, 3, 30, 130, 13)};
    for (int i = 0; i < 2; i++) {
        size_t a[NT], b[REF_GPT_NUM_TENSORS];
        gpt_param_sizes(&cs[i], a);
        ref_gpt_param_sizes(&cs[i], b);
        int same = 1;
        for (int k = 0; k < NT; k++) same &= a[k] == b[k];
        expect(same, "param_sizes_match_documented_shapes",
               "config %d: qkvw %zu vs %zu, wte %zu vs %zu", i, a[4], b[4], a[0], b[0]);
    }
}

/* ---- 1. the float64 reference's gradient against central differences of its own loss -------- */

static void test_reference_fd(void) {
    GPTConfig c = make_config(2, 4, 2, 16, 40, 8);
    int B = 2, T = 5;
    uint32_t g0 = 3, step = 2;
    uint64_t master = 0x5eed0001ULL;
    const SiteRates r = SITE_RATES;
    size_t sz[REF_GPT_NUM_TENSORS];
    size_t n = ref_gpt_param_sizes(&c, sz);
    double* w = malloc(n * sizeof(double));
    double* g = malloc(n * sizeof(double));
    size_t o = 0;
    for (int k = 0; k < NT; k++)
        for (size_t i = 0; i < sz[k]; i++, o++)
            w[o] = is_matrix[k] ? 0.3 * test_normal()
                 : is_ln_weight[k] ? 1.0 + 0.1 * test_normal() : 0.1 * test_normal();
    size_t real = (size_t)c.vocab_size * c.channels;   /* wte rows < V */
    for (size_t i = real; i < sz[0]; i++) w[i] = 0.0;
    int in[10], tg[10];
    random_tokens(in, B * T, c.vocab_size);
    random_tokens(tg, B * T, c.vocab_size);

    double loss = ref_gpt_loss_and_grad(&c, w, g, in, tg, B, T, g0, master, step, r.embd,
                                        r.attn, r.resid);
    double loss_nodrop = ref_gpt_loss_and_grad(&c, w, NULL, in, tg, B, T, g0, master, step,
                                               0, 0, 0);
    char rs[64];
    expect(loss != loss_nodrop, "reference_dropout_is_active_in_fd_check",
           "loss %.12f with %s, %.12f without", loss, site_rates_str(r, rs), loss_nodrop);

    /* every coordinate of every tensor (the real wte rows; a sample of the padded ones) */
    const double h = 1e-5;
    double worst = 0;
    o = 0;
    for (int k = 0; k < NT; k++) {
        size_t cnt = sz[k];
        double* fd = malloc(cnt * sizeof(double));
        double* an = malloc(cnt * sizeof(double));
        size_t m = 0;
        for (size_t i = 0; i < cnt; i += TEST_FD_STRIDE) {   /* every one, but under ASan */
            if (k == 0 && i >= real && (i - real) % 97 != 0) continue;   /* padded sample */
            double save = w[o + i];
            w[o + i] = save + h;
            double lp = ref_gpt_loss_and_grad(&c, w, NULL, in, tg, B, T, g0, master, step,
                                              r.embd, r.attn, r.resid);
            w[o + i] = save - h;
            double lm = ref_gpt_loss_and_grad(&c, w, NULL, in, tg, B, T, g0, master, step,
                                              r.embd, r.attn, r.resid);
            w[o + i] = save;
            fd[m] = (lp - lm) / (2 * h);
            an[m] = g[o + i];
            m++;
        }
        double e = rel_err_dd(an, fd, m), gn = 0;
        for (size_t i = 0; i < m; i++) gn += an[i] * an[i];
        if (e > worst) worst = e;
        char name[128];
        snprintf(name, sizeof(name), "reference_grad_matches_central_differences %s",
                 gpt_param_names[k]);
        expect(e < 1e-6, name, "rel err %.2e over %zu coords (|grad| %.3e)", e, m, sqrt(gn));
        if (k == 0) {
            /* padded vocab rows: exactly zero gradient, and the loss does not depend on them */
            int zero = 1;
            double change = 0;
            for (size_t i = real; i < cnt; i++) zero &= g[i] == 0.0;
            for (size_t i = real; i < cnt; i += 97) {
                double save = w[i];
                w[i] = save + 0.5;
                double lp = ref_gpt_loss_and_grad(&c, w, NULL, in, tg, B, T, g0, master, step,
                                                  r.embd, r.attn, r.resid);
                w[i] = save;
                if (fabs(lp - loss) > change) change = fabs(lp - loss);
            }
            expect(zero && change == 0.0, "reference_padded_vocab_rows_get_zero_gradient",
                   "all padded grads zero: %d; max |loss change| moving a padded weight by 0.5: "
                   "%.1e", zero, change);
        }
        free(fd);
        free(an);
        o += cnt;
    }
    printf("# reference vs central differences: worst per-tensor rel err %.2e (h = %g)\n",
           worst, h);
    free(w);
    free(g);
}

/* ---- 2. the fp32 model against the float64 reference ---------------------------------------- */

/* Per-tensor ||g_model - g_ref|| / ||g_ref||; returns the worst. */
static void test_model_vs_reference(void) {
    struct { const char* name; GPTConfig c; int B, T; } cases[2] = {
        /* plain: T > 32 crosses an attention key block of the keep-bit mapping */
        {"plain", make_config(2, 4, 4, 32, 70, 40), 3, 37},
        /* GQA (two query heads per kv head), HD 5, C = 30 not a multiple of 4, V > 128 */
        {"gqa", make_config(2, 6, 3, 30, 130, 16), 2, 13},
    };
    const uint32_t g0 = 5, step = 3;
    const uint64_t master = 0xfeedbeef12345ULL;
    /* fp32 rounding (6e-8) through ~20 ops whose sums run over at most 4C = 128 terms (the
     * weight gradients over B*T <= 111 rows) leaves per-tensor errors of a few 1e-7; 1e-5 keeps a
     * margin of >10x for other summation orders (tiles, BLAS kernels) while one wrong keep bit in
     * a (B, T, C) site moves a gradient tensor by ~1e-3 and wrong masks by ~1 (checked below). */
    const double tol = 1e-5;
    for (int ci = 0; ci < 2; ci++) {
        GPTConfig c = cases[ci].c;
        int B = cases[ci].B, T = cases[ci].T;
        GPT m = build(&c, B, T);
        randomize_weights(&m, 0.15);
        double* w = malloc(m.num_parameters * sizeof(double));
        double* gref = malloc(m.num_parameters * sizeof(double));
        tensors_to_double(&m, &m.params, w);
        int* in = malloc(sizeof(int) * B * T);
        int* tg = malloc(sizeof(int) * B * T);
        random_tokens(in, B * T, c.vocab_size);
        random_tokens(tg, B * T, c.vocab_size);
        for (int pi = 0; pi < 2; pi++) {
            const SiteRates r = pi == 0 ? NO_DROPOUT : SITE_RATES;
            char label[96], rs[64];
            snprintf(label, sizeof(label), "%s %s", cases[ci].name,
                     pi == 0 ? "p=0" : site_rates_str(r, rs));
            set_site_dropout(&m, master, r);
            float loss = model_loss_grad(&m, in, tg, B, T, g0, step, 1);
            double lref = ref_gpt_loss_and_grad(&c, w, gref, in, tg, B, T, g0, master, step,
                                                r.embd, r.attn, r.resid);
            char name[160];
            snprintf(name, sizeof(name), "model_loss_matches_float64_reference[%s]", label);
            expect(fabs(loss - lref) / lref < 1e-6, name, "fp32 %.8f, float64 %.8f, rel %.2e",
                   loss, lref, fabs(loss - lref) / lref);
            double worst = compare_grads(&m, gref, label, tol, 1);
            /* the padded vocab rows of the model's gradient are exactly zero */
            const float* pad = m.grads.wte + (size_t)c.vocab_size * c.channels;
            size_t npad = (size_t)(c.padded_vocab_size - c.vocab_size) * c.channels;
            size_t nonzero = 0;
            for (size_t i = 0; i < npad; i++) nonzero += pad[i] != 0.0f;
            snprintf(name, sizeof(name), "model_padded_vocab_rows_get_zero_gradient[%s]", label);
            expect(nonzero == 0, name, "%zu of %zu padded gradient entries non-zero", nonzero,
                   npad);
            if (pi > 0) {
                /* negative control: the same comparison against the reference's masks of
                 * another step must fail by far, so the bound above can see a wrong mask */
                ref_gpt_loss_and_grad(&c, w, gref, in, tg, B, T, g0, master, step + 1, r.embd,
                                      r.attn, r.resid);
                double other = compare_grads(&m, gref, label, tol, 0);
                ref_gpt_loss_and_grad(&c, w, gref, in, tg, B, T, g0 + 1, master, step, r.embd,
                                      r.attn, r.resid);
                double shifted = compare_grads(&m, gref, label, tol, 0);
                snprintf(name, sizeof(name), "model_vs_reference_detects_wrong_masks[%s]", label);
                expect(other > 1e-2 && shifted > 1e-2 && other > 100 * worst &&
                       shifted > 100 * worst, name,
                       "worst per-tensor rel err with the right masks %.2e; against step+1 "
                       "masks %.2e, against g0+1 masks %.2e", worst, other, shifted);
                /* and against the reference with two sites' rates swapped: a model that applied
                 * a rate at the wrong site would fail the per-tensor bound above by as much */
                ref_gpt_loss_and_grad(&c, w, gref, in, tg, B, T, g0, master, step, r.embd,
                                      r.resid, r.attn);
                double attn_resid = compare_grads(&m, gref, label, tol, 0);
                ref_gpt_loss_and_grad(&c, w, gref, in, tg, B, T, g0, master, step, r.attn,
                                      r.embd, r.resid);
                double embd_attn = compare_grads(&m, gref, label, tol, 0);
                snprintf(name, sizeof(name), "model_vs_reference_detects_rates_at_the_wrong_site[%s]",
                         label);
                expect(attn_resid > 1e-2 && embd_attn > 1e-2 && attn_resid > 100 * worst &&
                       embd_attn > 100 * worst, name,
                       "worst per-tensor rel err with the right rates %.2e; against attention "
                       "and residual rates swapped %.2e, embedding and attention swapped %.2e",
                       worst, attn_resid, embd_attn);
            }
        }
        free(w); free(gref); free(in); free(tg);
        gpt_free(&m);
    }
}

/* ---- 3. bitwise identical at 1, 2 and 3 threads ----------------------------------------------- */

typedef struct {
    float loss[3];
    float norm[3];
    float* grads;    /* (3, n) the gradients of each step, before clipping */
    float* params;   /* after 3 AdamW steps */
    float* mom;      /* AdamW m and v after 3 steps */
    float* var;
    size_t n;
} ThreadRun;

/* Three training steps (dropout at SITE_RATES, clipping that bites, AdamW) at nthreads threads. The model is
 * built after the thread count is set: gpt_build plans the attention scratch for
 * omp_get_max_threads() threads. */
static ThreadRun run_three_steps(const GPTConfig* c, int B, int T, const int* in, const int* tg,
                                 int nthreads) {
    omp_set_num_threads(nthreads);
    openblas_set_num_threads(nthreads);
    GPT m = build(c, B, T);
    gpt_init_weights(&m, 42);
    set_site_dropout(&m, 42, SITE_RATES);
    ThreadRun r;
    /* the whole block, padding included: same layout for every run */
    r.n = (size_t)(m.params.lnfb - m.params_memory) + m.param_sizes[NT - 1];
    r.grads = malloc(3 * r.n * sizeof(float));
    r.params = malloc(r.n * sizeof(float));
    r.mom = malloc(r.n * sizeof(float));
    r.var = malloc(r.n * sizeof(float));
    for (int s = 0; s < 3; s++) {
        r.loss[s] = model_loss_grad(&m, in, tg, B, T, 0, (uint32_t)s, 1);
        memcpy(r.grads + s * r.n, m.grads_memory, r.n * sizeof(float));
        r.norm[s] = gpt_clip_grads(&m, 0.05f);
        gpt_adamw(&m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
    }
    memcpy(r.params, m.params_memory, r.n * sizeof(float));
    memcpy(r.mom, m.m_memory, r.n * sizeof(float));
    memcpy(r.var, m.v_memory, r.n * sizeof(float));
    gpt_free(&m);
    return r;
}

static void test_threads(void) {
    GPTConfig c = make_config(2, 4, 2, 128, 500, 64);
    int B = 4, T = 64;
    int* in = malloc(sizeof(int) * B * T);
    int* tg = malloc(sizeof(int) * B * T);
    random_tokens(in, B * T, c.vocab_size);
    random_tokens(tg, B * T, c.vocab_size);
    int orig = omp_get_max_threads(), orig_blas = openblas_get_num_threads();
    ThreadRun r1 = run_three_steps(&c, B, T, in, tg, 1);
    for (int nt = 2; nt <= 3; nt++) {
        ThreadRun r = run_three_steps(&c, B, T, in, tg, nt);
        int loss_same = memcmp(r.loss, r1.loss, sizeof(r.loss)) == 0 &&
                        memcmp(r.norm, r1.norm, sizeof(r.norm)) == 0;
        size_t dg = 0, dp = 0, dm = 0;
        for (size_t i = 0; i < 3 * r.n; i++)
            dg += memcmp(&r.grads[i], &r1.grads[i], sizeof(float)) != 0;
        for (size_t i = 0; i < r.n; i++) {
            dp += memcmp(&r.params[i], &r1.params[i], sizeof(float)) != 0;
            dm += memcmp(&r.mom[i], &r1.mom[i], sizeof(float)) != 0 ||
                  memcmp(&r.var[i], &r1.var[i], sizeof(float)) != 0;
        }
        char name[96];
        snprintf(name, sizeof(name), "training_steps_bitwise_identical_at_1_and_%d_threads", nt);
        expect(loss_same && dg == 0 && dp == 0 && dm == 0, name,
               "losses %.7f %.7f %.7f vs %.7f %.7f %.7f (pre-clip norms %.4f %.4f %.4f, clip "
               "0.05); differing floats: gradients of the 3 steps %zu, weights after 3 AdamW steps %zu, "
               "moments %zu of %zu", r.loss[0], r.loss[1], r.loss[2], r1.loss[0], r1.loss[1],
               r1.loss[2], r.norm[0], r.norm[1], r.norm[2], dg, dp, dm, r.n);
        free(r.grads); free(r.params); free(r.mom); free(r.var);
    }
    free(r1.grads); free(r1.params); free(r1.mom); free(r1.var);
    omp_set_num_threads(orig);
    openblas_set_num_threads(orig_blas);
    free(in); free(tg);
}

/* ---- 4. splitting a batch into micro-batches -------------------------------------------------- */

static void test_batch_split(void) {
    GPTConfig c = make_config(2, 4, 2, 64, 200, 32);
    int B = 4, T = 32;
    GPT m = build(&c, B, T);
    randomize_weights(&m, 0.1);
    set_site_dropout(&m, 7, SITE_RATES);
    int* in = malloc(sizeof(int) * B * T);
    int* tg = malloc(sizeof(int) * B * T);
    random_tokens(in, B * T, c.vocab_size);
    random_tokens(tg, B * T, c.vocab_size);
    float dloss = 1.0f / (float)(B * T);
    int half = 2 * T;

    /* one batch of 4 sequences, g0 = 0 */
    gpt_zero_grad(&m);
    gpt_forward(&m, in, tg, B, T, 0, 1, 1);
    float* full_losses = malloc(sizeof(float) * B * T);
    memcpy(full_losses, m.losses, sizeof(float) * B * T);
    gpt_backward(&m, dloss);
    double* gfull = malloc(m.num_parameters * sizeof(double));
    tensors_to_double(&m, &m.grads, gfull);

    /* two micro-batches of 2 (g0 = 0 and g0 = 2), gradients accumulated, same dloss */
    gpt_zero_grad(&m);
    gpt_forward(&m, in, tg, 2, T, 0, 1, 1);
    gpt_backward(&m, dloss);
    gpt_forward(&m, in + half, tg + half, 2, T, 2, 1, 1);
    int same_rows = memcmp(m.losses, full_losses + half, sizeof(float) * half) == 0;
    gpt_backward(&m, dloss);
    double worst = compare_grads(&m, gfull, "", 0, 0);
    double* gsplit = malloc(m.num_parameters * sizeof(double));
    tensors_to_double(&m, &m.grads, gsplit);
    char detail[512];
    int len = 0;
    size_t o = 0;
    for (int k = 0; k < NT; k++) {
        len += snprintf(detail + len, sizeof(detail) - len, "%s%s %.1e", k ? ", " : "",
                        gpt_param_names[k], rel_err_dd(gsplit + o, gfull + o, m.param_sizes[k]));
        o += m.param_sizes[k];
    }
    expect(worst < 1e-6, "micro_batch_gradients_sum_to_full_batch_gradient",
           "worst per-tensor rel err %.2e: %s", worst, detail);
    expect(same_rows, "micro_batch_losses_bitwise_equal_full_batch_rows",
           "per-position losses of micro-batch g0=2 vs rows 2,3 of the batch: first %.8f vs "
           "%.8f", m.losses[0], full_losses[half]);

    /* control: the same rows forwarded as if they were sequences 0 and 1 get other masks */
    gpt_forward(&m, in + half, tg + half, 2, T, 0, 1, 1);
    size_t differ = 0;
    for (int i = 0; i < half; i++) differ += m.losses[i] != full_losses[half + i];
    expect(differ > 0, "micro_batch_masks_follow_global_sequence_index",
           "rows 2,3 forwarded with g0=0: %zu of %d losses differ from the batch's", differ,
           half);
    free(gfull); free(gsplit); free(full_losses); free(in); free(tg);
    gpt_free(&m);
}

/* ---- 5, 6. p = 0, evaluation, and step-dependent masks ------------------------------------- */

static int grads_equal(const GPT* m, const float* ref) {
    size_t n = (size_t)(m->grads.lnfb - m->grads_memory) + m->param_sizes[NT - 1];
    return memcmp(m->grads_memory, ref, n * sizeof(float)) == 0;
}

static void test_dropout_paths(void) {
    GPTConfig c = make_config(2, 4, 2, 32, 100, 16);
    int B = 2, T = 16;
    GPT m = build(&c, B, T);
    randomize_weights(&m, 0.1);
    int* in = malloc(sizeof(int) * B * T);
    int* tg = malloc(sizeof(int) * B * T);
    random_tokens(in, B * T, c.vocab_size);
    random_tokens(tg, B * T, c.vocab_size);
    size_t n = (size_t)(m.grads.lnfb - m.grads_memory) + m.param_sizes[NT - 1];
    float* g_eval = malloc(n * sizeof(float));
    float* g_a = malloc(n * sizeof(float));

    set_site_dropout(&m, 11, NO_DROPOUT);
    float l_eval = model_loss_grad(&m, in, tg, B, T, 1, 4, 0);
    memcpy(g_eval, m.grads_memory, n * sizeof(float));
    float l_p0 = model_loss_grad(&m, in, tg, B, T, 1, 4, 1);
    expect(memcmp(&l_eval, &l_p0, sizeof(float)) == 0 && grads_equal(&m, g_eval),
           "dropout_p0_is_bitwise_the_no_dropout_path",
           "loss train p=0 %.9g vs eval %.9g; gradients identical: %d", l_p0, l_eval,
           grads_equal(&m, g_eval));

    set_site_dropout(&m, 11, SITE_RATES);
    char rs[64];
    site_rates_str(SITE_RATES, rs);
    float l_p1 = model_loss_grad(&m, in, tg, B, T, 1, 4, 1);
    expect(l_p1 != l_eval, "dropout_changes_the_loss", "%s: %.7f vs p=0 %.7f", rs, l_p1,
           l_eval);
    float l_eval1 = model_loss_grad(&m, in, tg, B, T, 1, 4, 0);
    expect(memcmp(&l_eval1, &l_eval, sizeof(float)) == 0 && grads_equal(&m, g_eval),
           "evaluation_ignores_dropout", "train=0 with %s %.9g vs with p=0 %.9g; gradients "
           "identical: %d", rs, l_eval1, l_eval, grads_equal(&m, g_eval));

    /* masks are a pure function of (master, step, layer, site, coordinates) */
    float l_s0 = model_loss_grad(&m, in, tg, B, T, 1, 0, 1);
    memcpy(g_a, m.grads_memory, n * sizeof(float));
    float l_s1 = model_loss_grad(&m, in, tg, B, T, 1, 1, 1);
    expect(l_s0 != l_s1 && !grads_equal(&m, g_a), "dropout_masks_change_with_step",
           "step 0 loss %.7f, step 1 loss %.7f", l_s0, l_s1);
    float l_s0b = model_loss_grad(&m, in, tg, B, T, 1, 0, 1);
    expect(memcmp(&l_s0, &l_s0b, sizeof(float)) == 0 && grads_equal(&m, g_a),
           "same_step_twice_is_bitwise_identical",
           "step 0 loss %.9g then %.9g (a step 1 in between); gradients identical: %d", l_s0,
           l_s0b, grads_equal(&m, g_a));
    set_site_dropout(&m, 12, SITE_RATES);
    float l_m = model_loss_grad(&m, in, tg, B, T, 1, 0, 1);
    expect(l_m != l_s0, "dropout_masks_change_with_master_seed", "seed 11: %.7f, seed 12: %.7f",
           l_s0, l_m);
    free(g_eval); free(g_a); free(in); free(tg);
    gpt_free(&m);
}

/* ---- 7. memory: nothing allocated after the first step --------------------------------------- */

static void test_memory(void) {
    GPTConfig c = make_config(2, 4, 2, 64, 200, 32);
    int B = 2, T = 32;
    int* in = malloc(sizeof(int) * B * T);
    int* tg = malloc(sizeof(int) * B * T);
    random_tokens(in, B * T, c.vocab_size);
    random_tokens(tg, B * T, c.vocab_size);
    GPT m = build(&c, B, T);
    gpt_init_weights(&m, 3);
    set_site_dropout(&m, 3, SITE_RATES);
    MemStats s1 = {0}, s5 = {0};
    for (int s = 0; s < 6; s++) {
        model_loss_grad(&m, in, tg, B, T, 0, (uint32_t)s, 1);
        gpt_clip_grads(&m, 1.0f);
        gpt_adamw(&m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
        if (s == 0) s1 = mem_stats();
    }
    /* an evaluation forward at a smaller shape also allocates nothing */
    gpt_forward(&m, in, tg, 1, T / 2, 0, 0, 0);
    s5 = mem_stats();
    expect(s5.allocations == s1.allocations && s5.peak_bytes == s1.peak_bytes &&
           s5.live_bytes == s1.live_bytes, "no_allocation_after_first_step",
           "after step 1: %zu allocations, peak %zu B, live %zu B; after 5 more steps and an "
           "eval forward: %zu allocations, peak %zu B, live %zu B", s1.allocations,
           s1.peak_bytes, s1.live_bytes, s5.allocations, s5.peak_bytes, s5.live_bytes);
    gpt_free(&m);
    free(in); free(tg);
}

/* ---- 8. AdamW and clipping semantics ----------------------------------------------------------- */

static void test_adamw_and_clip(void) {
    GPTConfig c = make_config(2, 4, 2, 32, 100, 16);
    GPT m = build(&c, 1, 8);
    randomize_weights(&m, 0.5);
    float *P[NT], *G[NT];
    tensor_table(&m.params, P);
    tensor_table(&m.grads, G);
    /* non-decayed tensors get values of order 1 so a wrongly applied decay would show */
    for (int k = 0; k < NT; k++)
        if (!is_matrix[k])
            for (size_t i = 0; i < m.param_sizes[k]; i++) P[k][i] = (float)(1.0 + test_normal());
    const double lr = 0.01, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    size_t n = m.num_parameters;
    double* p = malloc(n * sizeof(double));
    double* mm = calloc(n, sizeof(double));
    double* vv = calloc(n, sizeof(double));
    double* upd_ref = malloc(n * sizeof(double));
    double* upd = malloc(n * sizeof(double));
    for (int t = 1; t <= 2; t++) {
        /* a known gradient, of a different scale per tensor */
        for (int k = 0; k < NT; k++)
            for (size_t i = 0; i < m.param_sizes[k]; i++)
                G[k][i] = (float)(1e-3 * (k + 1) * test_normal());
        tensors_to_double(&m, &m.params, p);
        double worst_dec = 0, worst_nodec = 0;
        char detail[600];
        int len = 0;
        size_t o = 0;
        for (int k = 0; k < NT; k++) {
            double dk = is_matrix[k] ? wd : 0.0;
            for (size_t i = 0; i < m.param_sizes[k]; i++, o++) {
                double g = G[k][i];
                mm[o] = b1 * mm[o] + (1 - b1) * g;
                vv[o] = b2 * vv[o] + (1 - b2) * g * g;
                double mhat = mm[o] / (1 - pow(b1, t)), vhat = vv[o] / (1 - pow(b2, t));
                upd_ref[o] = p[o] * (1 - lr * dk) - lr * mhat / (sqrt(vhat) + eps) - p[o];
            }
        }
        gpt_adamw(&m, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, t);
        o = 0;
        for (int k = 0; k < NT; k++) {
            for (size_t i = 0; i < m.param_sizes[k]; i++) upd[o + i] = P[k][i] - p[o + i];
            double e = rel_err_dd(upd + o, upd_ref + o, m.param_sizes[k]);
            if (is_matrix[k]) worst_dec = fmax(worst_dec, e);
            else worst_nodec = fmax(worst_nodec, e);
            len += snprintf(detail + len, sizeof(detail) - len, "%s%s %.1e", k ? ", " : "",
                            gpt_param_names[k], e);
            o += m.param_sizes[k];
        }
        char name[96];
        snprintf(name, sizeof(name), "adamw_update_matches_float64_formula_t%d", t);
        /* the update is ~lr = 1e-2 while the weights are ~1: their fp32 rounding (6e-8) is
         * ~1e-5 of the update at worst */
        expect(worst_dec < 3e-5 && worst_nodec < 3e-5, name,
               "per-tensor rel err of the update, decayed worst %.2e, not decayed (LN, biases) "
               "worst %.2e: %s", worst_dec, worst_nodec, detail);
    }

    /* clipping */
    for (int k = 0; k < NT; k++)
        for (size_t i = 0; i < m.param_sizes[k]; i++) G[k][i] = (float)(0.02 * test_normal());
    size_t nb = (size_t)(m.grads.lnfb - m.grads_memory) + m.param_sizes[NT - 1];
    float* before = malloc(nb * sizeof(float));
    double ss = 0;
    for (int k = 0; k < NT; k++)
        for (size_t i = 0; i < m.param_sizes[k]; i++) ss += (double)G[k][i] * G[k][i];
    double norm_ref = sqrt(ss);
    memcpy(before, m.grads_memory, nb * sizeof(float));
    float ret0 = gpt_clip_grads(&m, 0.0f);
    expect(memcmp(before, m.grads_memory, nb * sizeof(float)) == 0 &&
           fabs(ret0 - norm_ref) / norm_ref < 1e-6, "clip_zero_disables_clipping",
           "returned %.7f (float64 norm %.7f), gradients unchanged: %d", ret0, norm_ref,
           memcmp(before, m.grads_memory, nb * sizeof(float)) == 0);
    float ret_big = gpt_clip_grads(&m, (float)(2 * norm_ref));
    expect(memcmp(before, m.grads_memory, nb * sizeof(float)) == 0,
           "clip_above_norm_leaves_gradients_unchanged",
           "max_norm %.4f > norm %.4f: returned %.7f", 2 * norm_ref, norm_ref, ret_big);
    double max_norm = 0.25 * norm_ref;
    float ret = gpt_clip_grads(&m, (float)max_norm);
    const float gs = gpt_grad_scale(&m);   /* the clipped gradient is grads * gs */
    ss = 0;
    for (int k = 0; k < NT; k++)
        for (size_t i = 0; i < m.param_sizes[k]; i++) {
            const double gi = G[k][i] * gs;
            ss += gi * gi;
        }
    double after = sqrt(ss);
    expect(fabs(ret - norm_ref) / norm_ref < 1e-6, "clip_returns_pre_clip_norm",
           "returned %.8f, float64 norm %.8f, rel %.2e", ret, norm_ref,
           fabs(ret - norm_ref) / norm_ref);
    expect(fabs(after - max_norm) / max_norm < 1e-6, "clip_scales_norm_to_max_norm",
           "norm after clipping %.8f, max_norm %.8f, rel %.2e", after, max_norm,
           fabs(after - max_norm) / max_norm);
    /* the clip's coefficient applied inside AdamW gives the bits of scaling the gradients in
     * place and then updating with them */
    size_t np = m.num_parameters;
    float *p0 = malloc(np * sizeof(float)), *m0 = malloc(np * sizeof(float));
    float *v0 = malloc(np * sizeof(float)), *g0 = malloc(np * sizeof(float));
    float *pa = malloc(np * sizeof(float)), *ma = malloc(np * sizeof(float)), *va = malloc(np * sizeof(float));
    memcpy(g0, before, nb * sizeof(float));
    memcpy(m.grads_memory, g0, np * sizeof(float));
    memcpy(p0, m.params_memory, np * sizeof(float));
    memcpy(m0, m.m_memory, np * sizeof(float));
    memcpy(v0, m.v_memory, np * sizeof(float));
    gpt_clip_grads(&m, (float)max_norm);
    const float coef = gpt_grad_scale(&m);
    gpt_adamw(&m, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, 3);
    memcpy(pa, m.params_memory, np * sizeof(float));
    memcpy(ma, m.m_memory, np * sizeof(float));
    memcpy(va, m.v_memory, np * sizeof(float));
    memcpy(m.params_memory, p0, np * sizeof(float));
    memcpy(m.m_memory, m0, np * sizeof(float));
    memcpy(m.v_memory, v0, np * sizeof(float));
    for (size_t i = 0; i < np; i++) m.grads_memory[i] = g0[i] * coef;   /* scaled in place */
    const float scale_after = gpt_grad_scale(&m);                        /* 1 after an update */
    gpt_adamw(&m, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, 3);
    int same = !memcmp(pa, m.params_memory, np * sizeof(float)) &&
               !memcmp(ma, m.m_memory, np * sizeof(float)) && !memcmp(va, m.v_memory, np * sizeof(float));
    expect(same && coef < 1.0f && scale_after == 1.0f, "clip_inside_adamw_is_scaling_then_adamw_bitwise",
           "coefficient %.6f; weights, m and v %s those of scaling the gradients first",
           coef, same ? "equal" : "DIFFER from");
    free(p0); free(m0); free(v0); free(g0); free(pa); free(ma); free(va);
    free(before); free(p); free(mm); free(vv); free(upd_ref); free(upd);
    gpt_free(&m);
}

/* The CPU backend's fill (zero_grad's): every element of the range, nothing outside it, at the
 * serial, parallel and streamed sizes, from an address off 16-byte alignment, at 1, 2 and 3 threads. */
static void test_backend_fill(void) {
    const size_t sizes[] = {3, 70001, ((size_t)16 << 20) + 37};
    size_t wrong = 0, outside = 0, checked = 0;
    for (int s = 0; s < 3; s++)
        for (int th = 1; th <= 3; th++) {
            size_t n = sizes[s];
            float* buf = malloc((n + 8) * sizeof(float));
            for (size_t i = 0; i < n + 8; i++) buf[i] = -7.0f;
            float value = th == 2 ? 1.5f : 0.0f;
            omp_set_num_threads(th);
            backend_cpu.fill(buf + 3, n, value);   /* 12 bytes past malloc's alignment */
            for (size_t i = 0; i < n + 8; i++) {
                int in = i >= 3 && i < n + 3;
                if (in) wrong += memcmp(&buf[i], &value, sizeof(float)) != 0;
                else outside += buf[i] != -7.0f;
            }
            checked += n;
            free(buf);
        }
    omp_set_num_threads(2);
    expect(wrong == 0 && outside == 0, "cpu_backend_fill_sets_the_range_and_nothing_else",
           "%zu of %zu elements wrong, %zu outside the range changed (n 3, 70001, 16 Mi + 37; 1-3 threads)",
           wrong, checked, outside);
}

int main(void) {
    double t0 = now();
    test_layout();
    test_reference_fd();
    double t1 = now();
    test_model_vs_reference();
    double t2 = now();
    test_threads();
    double t3 = now();
    test_batch_split();
    test_dropout_paths();
    test_memory();
    test_adamw_and_clip();
    test_backend_fill();
    double t4 = now();
    printf("# times: reference fd %.1f s, model vs reference %.1f s, threads %.1f s, rest %.1f s"
           " (%d threads)\n", t1 - t0, t2 - t1, t3 - t2, t4 - t3, omp_get_max_threads());
    return test_finish();
}
