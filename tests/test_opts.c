/* tests/test_opts.c — the model options (README "Model options"): rotary position embeddings,
 * the parallel block and stochastic depth, on the CPU.
 *   1. the rope op against a float64 reference (tests/ref_ops.c) in both pair layouts, with
 *      grouped-query heads and rows at an offset; its backward against central differences of
 *      the reference; the relative-position property of rotated dot products;
 *   2. stochastic depth: keep bits are Philox word 0 of counter (0, 0, 0, g), the keep fraction is
 *      within 3 sigma, p = 0 and evaluation are bitwise the plain path;
 *   3. the whole model with each option against the float64 reference model (tests/ref_gpt.c),
 *      whose own gradient is checked against central differences; a wrong mask is detected;
 *   4. every recompute policy bitwise equal to none with dropout and drop-path on, the value
 *      check clean, and the fresh-seed negative control caught;
 *   5. model files and training states carry the options; a mismatched model refuses the file;
 *   6. sampling with the key/value cache equals the full forward at every position.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "model/gpt.h"
#include "model/mem.h"
#include "model/modelfile.h"
#include "model/ops.h"
#include "model/sample.h"
#include "model/state.h"
#include "random/philox.h"
#include "tests/ref_gpt.h"
#include "tests/ref_ops.h"
#include "tests/test.h"
#include "tests/model_util.h"

static GPTConfig make_config(int L, int NH, int NKV, int C, int V, int maxT, int pos, int base,
                             int layout, int block) {
    GPTConfig c = {maxT, V, gpt_pad_vocab(V), L, NH, NKV, C, pos, pos == POS_ROPE ? base : 0,
                   pos == POS_ROPE ? layout : 0, block};
    return c;
}

static const char* lname(int layout) { return layout == ROPE_GPTJ ? "gptj" : "neox"; }

static double* drand(size_t n, double scale) {
    double* x = malloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) x[i] = scale * test_normal();
    return x;
}

static float* to_float(const double* x, size_t n) {
    float* f = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
    return f;
}

/* ---- 1. the rope op ----------------------------------------------------------------------- */

static void test_rope_vs_reference(int B, int T, int NH, int NKV, int HD, int layout, int pos0) {
    GPTConfig c = make_config(1, NH, NKV, NH * HD, 10, pos0 + T, POS_ROPE, 10000, layout, 0);
    int H2 = HD / 2;
    float* cs = mem_alloc_floats((size_t)c.max_seq_len * H2);
    float* sn = mem_alloc_floats((size_t)c.max_seq_len * H2);
    gpt_rope_table(&c, cs, sn);
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HD;
    double* xd = drand(n, 1.0);
    float* x = to_float(xd, n);
    double* ref = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) ref[i] = x[i];
    ref_rope_forward(ref, B, T, NH, NKV, HD, c.rope_base, layout, pos0);
    rope_forward(x, cs, sn, B, T, NH, NKV, HD, layout, pos0);
    char name[160];
    double e = rel_err_fd(x, ref, n);
    snprintf(name, sizeof(name), "rope_forward_matches_float64_reference[%s NH%d NKV%d HD%d pos0 %d]",
             lname(layout), NH, NKV, HD, pos0);
    expect(e < 1e-6, name, "rel err %.2e over %zu values", e, n);

    /* the backward against central differences of the reference: L = sum w . rope(x), so
     * dL/dx is the backward of w; h = 1e-6 in float64 */
    double* w = drand(n, 1.0);
    float* g = to_float(w, n);
    rope_backward(g, cs, sn, B, T, NH, NKV, HD, layout, pos0);
    double* fd = malloc(n * sizeof(double));
    double* y = malloc(n * sizeof(double));
    const double h = 1e-6;
    for (size_t i = 0; i < n; i++) {
        double lp = 0, lm = 0;
        double save = xd[i];
        xd[i] = save + h;
        memcpy(y, xd, n * sizeof(double));
        ref_rope_forward(y, B, T, NH, NKV, HD, c.rope_base, layout, pos0);
        for (size_t k = 0; k < n; k++) lp += w[k] * y[k];
        xd[i] = save - h;
        memcpy(y, xd, n * sizeof(double));
        ref_rope_forward(y, B, T, NH, NKV, HD, c.rope_base, layout, pos0);
        for (size_t k = 0; k < n; k++) lm += w[k] * y[k];
        xd[i] = save;
        fd[i] = (lp - lm) / (2 * h);
    }
    e = rel_err_fd(g, fd, n);
    snprintf(name, sizeof(name), "rope_backward_matches_central_differences[%s NH%d NKV%d HD%d pos0 %d]",
             lname(layout), NH, NKV, HD, pos0);
    expect(e < 1e-6, name, "rel err %.2e over %zu values", e, n);
    free(xd); free(x); free(ref); free(w); free(g); free(fd); free(y);
    mem_free(cs); mem_free(sn);
}

/* q.k after rotation depends only on i - j: one q row and one k row, copied to every position,
 * rotated; the dot product at (i, j) must equal the one at (i + s, j + s). Query head h reads kv
 * head h / (NH / NKV). The control compares (i, j) with (i + s, j): that must differ. */
static void test_rope_relative_position(int layout) {
    int NH = 4, NKV = 2, HD = 16, T = 64, group = NH / NKV;
    GPTConfig c = make_config(1, NH, NKV, NH * HD, 10, T, POS_ROPE, 10000, layout, 0);
    int H2 = HD / 2, QKV = (NH + 2 * NKV) * HD;
    float* cs = mem_alloc_floats((size_t)T * H2);
    float* sn = mem_alloc_floats((size_t)T * H2);
    gpt_rope_table(&c, cs, sn);
    double* rowd = drand((size_t)QKV, 1.0);
    float* row = to_float(rowd, (size_t)QKV);
    free(rowd);
    float* qkv = malloc(sizeof(float) * T * QKV);
    for (int t = 0; t < T; t++) memcpy(qkv + (size_t)t * QKV, row, sizeof(float) * QKV);
    rope_forward(qkv, cs, sn, 1, T, NH, NKV, HD, layout, 0);
    double worst = 0, control = 0;
    int pairs = 0;
    for (int h = 0; h < NH; h++) {
        const float* q0 = row + h * HD;
        const float* k0 = row + (NH + h / group) * HD;
        double nq = 0, nk = 0;
        for (int d = 0; d < HD; d++) { nq += q0[d] * q0[d]; nk += k0[d] * k0[d]; }
        double norm = sqrt(nq * nk);
        for (int i = 0; i < T; i += 3)
            for (int j = 0; j <= i; j += 5)
                for (int s = 1; i + s < T; s += 7) {
                    double a = 0, b = 0, ctl = 0;
                    const float* qi = qkv + (size_t)i * QKV + h * HD;
                    const float* kj = qkv + (size_t)j * QKV + (NH + h / group) * HD;
                    const float* qs = qkv + (size_t)(i + s) * QKV + h * HD;
                    const float* ks = qkv + (size_t)(j + s) * QKV + (NH + h / group) * HD;
                    for (int d = 0; d < HD; d++) {
                        a += (double)qi[d] * kj[d];
                        b += (double)qs[d] * ks[d];
                        ctl += (double)qs[d] * kj[d];
                    }
                    if (fabs(a - b) / norm > worst) worst = fabs(a - b) / norm;
                    if (fabs(a - ctl) / norm > control) control = fabs(a - ctl) / norm;
                    pairs++;
                }
    }
    char name[128];
    snprintf(name, sizeof(name), "rope_dot_products_depend_only_on_i_minus_j[%s gqa]", lname(layout));
    expect(worst < 1e-6 && control > 1e-2, name,
           "worst |q_i.k_j - q_(i+s).k_(j+s)| / (|q||k|) = %.2e over %d pairs; control (i+s, j): "
           "%.2e", worst, pairs, control);
    free(row); free(qkv); mem_free(cs); mem_free(sn);
}

/* ---- 2. stochastic depth ------------------------------------------------------------------ */

static void test_drop_path_bits(void) {
    const double p = 0.3;
    Dropout d = dropout_make(p);
    uint64_t seed = philox_site_seed(0x1234abcdULL, 7, 2, SITE_DEPTH_MLP, PASS_FORWARD);
    int B = 20000;
    uint32_t g0 = 1000;
    float* x = malloc(sizeof(float) * B);
    float* y = malloc(sizeof(float) * B);
    for (int b = 0; b < B; b++) x[b] = 1.0f;
    drop_path(y, x, B, 1, 1, g0, seed, d);
    int kept = 0, bad = 0;
    for (int b = 0; b < B; b++) {
        /* the contract written out: Philox4x32-10(counter (0, 0, 0, g), key = seed), word 0 */
        uint32_t ctr[4] = {0, 0, 0, g0 + (uint32_t)b}, out[4];
        philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32), out);
        int keep = out[0] >= d.thr;
        kept += keep;
        bad += keep ? y[b] != d.scale : y[b] != 0.0f;
    }
    expect(bad == 0, "drop_path_keep_bit_is_philox_word0_of_counter_0_0_0_g",
           "%d of %d sequences disagree with the Philox word", bad, B);
    double mean = (1 - p) * B, sigma = sqrt(B * p * (1 - p));
    expect(fabs(kept - mean) <= 3 * sigma, "drop_path_keep_fraction_within_3_sigma",
           "kept %d of %d (expected %.0f, sigma %.1f)", kept, B, mean, sigma);
    free(x); free(y);
}

/* ---- helpers for whole models --------------------------------------------------------------- */

static GPT build(const GPTConfig* c, int B, int T, int every, int fresh) {
    GPT m;
    char err[256];
    RecomputePolicy p = {every, fresh, every > 0 ? CHECK_WARN : CHECK_OFF, 0};
    if (gpt_build_policy(&m, c, B, T, &p, err) != 0) {
        fprintf(stderr, "test_opts: gpt_build: %s\n", err);
        exit(2);
    }
    return m;
}

static float loss_grad(GPT* m, const int* in, const int* tg, int B, int T, uint32_t g0,
                       uint32_t step, int* mismatches) {
    gpt_zero_grad(m);
    float loss = gpt_forward(m, in, tg, B, T, g0, step, 1);
    int mm = gpt_backward(m, 1.0f / (float)(B * T));
    if (mismatches) *mismatches = mm;
    return loss;
}

/* ---- 3. the reference's own gradient, then the model against it -------------------------- */

/* The float64 reference with the options against central differences of its own loss, every
 * coordinate of a tiny model (the padded wte rows skipped: test_model covers them). */
/* Every coordinate in the plain pass, every TEST_FD_STRIDE-th under ASan (tests/test.h). */
static void test_reference_fd(const char* label, GPTConfig c, SiteRates r, double pdp) {
    int B = 4, T = 5;
    uint32_t g0 = 3, step = 2;
    uint64_t master = 0x5eed0002ULL;
    size_t sz[REF_GPT_NUM_TENSORS];
    size_t n = ref_gpt_param_sizes(&c, sz);
    double* w = malloc(n * sizeof(double));
    double* g = malloc(n * sizeof(double));
    size_t o = 0;
    for (int k = 0; k < NT; k++)
        for (size_t i = 0; i < sz[k]; i++, o++)
            w[o] = is_matrix[k] ? 0.3 * test_normal()
                 : is_ln_weight[k] ? 1.0 + 0.1 * test_normal() : 0.1 * test_normal();
    size_t real = (size_t)c.vocab_size * c.channels;
    for (size_t i = real; i < sz[0]; i++) w[i] = 0.0;
    int in[20], tg[20];
    random_tokens(in, B * T, c.vocab_size);
    random_tokens(tg, B * T, c.vocab_size);
    ref_gpt_loss_and_grad_opts(&c, w, g, NULL, in, tg, B, T, g0, master, step, r.embd, r.attn,
                               r.resid, pdp);
    const double h = 1e-5;
    double worst = 0;
    size_t coords = 0;
    o = 0;
    for (int k = 0; k < NT; k++) {
        size_t cnt = k == 0 ? real : sz[k], m = 0;
        double* fd = malloc((cnt ? cnt : 1) * sizeof(double));
        double* an = malloc((cnt ? cnt : 1) * sizeof(double));
        for (size_t i = 0; i < cnt; i += TEST_FD_STRIDE) {
            double save = w[o + i];
            w[o + i] = save + h;
            double lp = ref_gpt_loss_and_grad_opts(&c, w, NULL, NULL, in, tg, B, T, g0, master,
                                                   step, r.embd, r.attn, r.resid, pdp);
            w[o + i] = save - h;
            double lm = ref_gpt_loss_and_grad_opts(&c, w, NULL, NULL, in, tg, B, T, g0, master,
                                                   step, r.embd, r.attn, r.resid, pdp);
            w[o + i] = save;
            fd[m] = (lp - lm) / (2 * h);
            an[m] = g[o + i];
            m++;
        }
        double e = m ? rel_err_dd(an, fd, m) : 0;
        if (e > worst) worst = e;
        coords += m;
        free(fd); free(an);
        o += sz[k];
    }
    char name[160];
    snprintf(name, sizeof(name), "reference_grad_matches_central_differences[%s]", label);
    expect(worst < 1e-6, name, "worst per-tensor rel err %.2e over %zu coordinates", worst, coords);
    free(w); free(g);
}

static void test_model_vs_reference(const char* label, GPTConfig c, int B, int T, SiteRates r,
                                    double pdp) {
    const uint32_t g0 = 5, step = 3;
    const uint64_t master = 0xfeedbeef12345ULL;
    const double tol = 1e-5;   /* as test_model: fp32 rounding through ~20 ops is a few 1e-7 */
    GPT m = build(&c, B, T, 0, 0);
    randomize_weights(&m, 0.15);
    double* w = malloc(m.num_parameters * sizeof(double));
    double* gref = malloc(m.num_parameters * sizeof(double));
    tensors_to_double(&m, &m.params, w);
    int* in = malloc(sizeof(int) * B * T);
    int* tg = malloc(sizeof(int) * B * T);
    random_tokens(in, B * T, c.vocab_size);
    random_tokens(tg, B * T, c.vocab_size);
    set_site_dropout(&m, master, r);
    gpt_set_drop_path(&m, pdp);
    float loss = loss_grad(&m, in, tg, B, T, g0, step, NULL);
    double lref = ref_gpt_loss_and_grad_opts(&c, w, gref, NULL, in, tg, B, T, g0, master, step,
                                             r.embd, r.attn, r.resid, pdp);
    char name[192];
    snprintf(name, sizeof(name), "model_loss_matches_float64_reference[%s]", label);
    expect(fabs(loss - lref) / lref < 1e-6, name, "fp32 %.8f, float64 %.8f", loss, lref);
    double worst = compare_grads(&m, gref, label, tol, 1);
    if (site_rates_on(r) || pdp > 0) {
        /* the reference with another step's masks must be far off: the bound sees a wrong mask */
        ref_gpt_loss_and_grad_opts(&c, w, gref, NULL, in, tg, B, T, g0, master, step + 1, r.embd,
                                   r.attn, r.resid, pdp);
        double other = compare_grads(&m, gref, label, tol, 0);
        snprintf(name, sizeof(name), "model_vs_reference_detects_wrong_masks[%s]", label);
        expect(other > 1e-2 && other > 100 * worst, name,
               "worst rel err with the right masks %.2e, against step+1 masks %.2e", worst, other);
    }
    if (site_rates_on(r)) {
        /* and with the attention and residual rates swapped: a rate at the wrong site shows */
        ref_gpt_loss_and_grad_opts(&c, w, gref, NULL, in, tg, B, T, g0, master, step, r.embd,
                                   r.resid, r.attn, pdp);
        double swapped = compare_grads(&m, gref, label, tol, 0);
        snprintf(name, sizeof(name), "model_vs_reference_detects_rates_at_the_wrong_site[%s]", label);
        expect(swapped > 1e-2 && swapped > 100 * worst, name,
               "worst rel err with the right rates %.2e, against attention and residual rates "
               "swapped %.2e", worst, swapped);
    }
    if (c.pos_kind == POS_ROPE || c.block_kind == BLOCK_PARALLEL) {
        /* the reference without the option must be far off too: the option is really on */
        GPTConfig plain = c;
        plain.block_kind = BLOCK_SEQUENTIAL;
        if (c.block_kind == BLOCK_SEQUENTIAL && c.rope_layout == ROPE_GPTJ) {
            plain.rope_layout = ROPE_NEOX;   /* the other pair layout */
        } else if (c.block_kind == BLOCK_SEQUENTIAL) {
            plain.rope_layout = ROPE_GPTJ;
        }
        double lother = ref_gpt_loss_and_grad_opts(&plain, w, gref, NULL, in, tg, B, T, g0,
                                                   master, step, r.embd, r.attn, r.resid, pdp);
        double other = compare_grads(&m, gref, label, tol, 0);
        snprintf(name, sizeof(name), "model_vs_reference_detects_the_other_variant[%s]", label);
        expect(other > 1e-2, name, "against the %s: loss %.6f vs %.6f, worst rel err %.2e",
               c.block_kind == BLOCK_PARALLEL ? "sequential block" : "other rope layout", lother,
               lref, other);
    }
    free(w); free(gref); free(in); free(tg);
    gpt_free(&m);
}

/* p = 0 is bitwise the plain path; evaluation ignores drop-path */
static void test_drop_path_off_paths(void) {
    GPTConfig c = make_config(2, 4, 2, 32, 70, 16, POS_ROPE, 10000, ROPE_NEOX, BLOCK_PARALLEL);
    int B = 4, T = 16;
    int in[64], tg[64];
    random_tokens(in, B * T, c.vocab_size);
    random_tokens(tg, B * T, c.vocab_size);
    GPT a = build(&c, B, T, 0, 0), b = build(&c, B, T, 0, 0);
    randomize_weights(&a, 0.15);
    memcpy(b.params_memory, a.params_memory, (size_t)(a.grads_memory - a.params_memory) * sizeof(float));
    set_site_dropout(&a, 11, SITE_RATES);
    set_site_dropout(&b, 11, SITE_RATES);
    gpt_set_drop_path(&b, 0.0);
    float la = loss_grad(&a, in, tg, B, T, 0, 1, NULL), lb = loss_grad(&b, in, tg, B, T, 0, 1, NULL);
    size_t n = (size_t)(a.m_memory - a.grads_memory);
    int same = memcmp(&la, &lb, sizeof(float)) == 0 &&
               memcmp(a.grads_memory, b.grads_memory, n * sizeof(float)) == 0;
    expect(same, "drop_path_zero_is_bitwise_the_plain_path", "loss %.8f vs %.8f, gradients %s",
           la, lb, same ? "same bits" : "DIFFER");
    gpt_set_drop_path(&b, 0.5);
    float ea = gpt_forward(&a, in, tg, B, T, 0, 1, 0), eb = gpt_forward(&b, in, tg, B, T, 0, 1, 0);
    float tb = loss_grad(&b, in, tg, B, T, 0, 1, NULL);
    expect(memcmp(&ea, &eb, sizeof(float)) == 0 && tb != la, "drop_path_is_off_in_evaluation",
           "eval loss %.8f (p 0) vs %.8f (p 0.5); training loss with p 0.5 %.8f vs %.8f", ea, eb,
           tb, la);
    gpt_free(&a);
    gpt_free(&b);
}

/* ---- 4. recompute policies ---------------------------------------------------------------- */

static void test_policies(const char* label, GPTConfig c, SiteRates rates, double pdp) {
    int B = 4, T = 12;
    int in[48], tg[48];
    random_tokens(in, B * T, c.vocab_size);
    random_tokens(tg, B * T, c.vocab_size);
    GPT none = build(&c, B, T, 0, 0);
    randomize_weights(&none, 0.15);
    size_t pf = (size_t)(none.grads_memory - none.params_memory);
    set_site_dropout(&none, 77, rates);
    gpt_set_drop_path(&none, pdp);
    float l0 = loss_grad(&none, in, tg, B, T, 8, 4, NULL);
    int everys[3] = {1, 2, 3};
    char name[192];
    for (int e = 0; e < 3; e++) {
        GPT r = build(&c, B, T, everys[e], 0);
        memcpy(r.params_memory, none.params_memory, pf * sizeof(float));
        set_site_dropout(&r, 77, rates);
        gpt_set_drop_path(&r, pdp);
        int mm = 0;
        float l = loss_grad(&r, in, tg, B, T, 8, 4, &mm);
        size_t differ = 0;
        for (size_t i = 0; i < pf; i++)
            differ += memcmp(&r.grads_memory[i], &none.grads_memory[i], sizeof(float)) != 0;
        snprintf(name, sizeof(name), "recompute_every%d_bitwise_equals_none[%s]", everys[e], label);
        expect(differ == 0 && memcmp(&l, &l0, sizeof(float)) == 0 && mm == 0, name,
               "loss %.8f vs %.8f, %zu of %zu gradient floats differ, %d check mismatches", l, l0,
               differ, pf, mm);
        gpt_free(&r);
    }
    /* the negative control: fresh (pass 1) seeds at recompute */
    GPT f = build(&c, B, T, 1, 1);
    memcpy(f.params_memory, none.params_memory, pf * sizeof(float));
    set_site_dropout(&f, 77, rates);
    gpt_set_drop_path(&f, pdp);
    int mm = 0;
    loss_grad(&f, in, tg, B, T, 8, 4, &mm);
    double worst = 0;
    float* t0[NT];
    float* t1[NT];
    tensor_table(&none.grads, t0);
    tensor_table(&f.grads, t1);
    for (int k = 0; k < NT; k++) {
        double e = rel_err_ff(t1[k], t0[k], none.param_sizes[k]);
        if (e > worst) worst = e;
    }
    snprintf(name, sizeof(name), "fresh_seed_recompute_is_caught[%s]", label);
    expect(mm > 0 && worst > 1e-2, name,
           "%d segments failed the value check; worst gradient tensor rel err %.2e", mm, worst);
    gpt_free(&f);
    gpt_free(&none);
}

/* ---- 5. files ----------------------------------------------------------------------------- */

static char dir[64];

static void test_files(void) {
    GPTConfig c = make_config(2, 4, 4, 32, 70, 16, POS_ROPE, 500, ROPE_GPTJ, BLOCK_PARALLEL);
    GPT m = build(&c, 1, 4, 0, 0);
    randomize_weights(&m, 0.1);
    char path[160], err[256];
    snprintf(path, sizeof(path), "%s/opts.bin", dir);
    int rc = modelfile_save(&m, path, err);
    /* the header on disk: seedgpt's own (all heads full, but RoPE and the parallel block are
     * not llm.c's GPT-2), version 2, the options in slots 9..12 */
    int32_t h[256] = {0};
    FILE* f = fopen(path, "rb");
    size_t got = f ? fread(h, 4, 256, f) : 0;
    if (f) fclose(f);
    expect(rc == 0 && got == 256 && h[0] == 0x44454553 && h[1] == 2 && h[9] == POS_ROPE &&
           h[10] == BLOCK_PARALLEL && h[11] == 500 && h[12] == ROPE_GPTJ, "model_file_header_holds_the_options",
           "rc %d, magic 0x%08x version %d, pos %d block %d base %d layout %d %s", rc, h[0], h[1],
           h[9], h[10], h[11], h[12], rc ? err : "");
    GPTConfig r;
    rc = modelfile_read_config(path, &r, err);
    expect(rc == 0 && memcmp(&r, &c, sizeof(c)) == 0, "model_file_config_round_trips_with_options",
           "rc %d: pos %d base %d layout %d block %d %s", rc, r.pos_kind, r.rope_base,
           r.rope_layout, r.block_kind, rc ? err : "");
    GPT b = build(&c, 1, 4, 0, 0);
    rc = modelfile_load(&b, path, err);
    size_t pf = (size_t)(m.grads_memory - m.params_memory);
    int same = rc == 0 && memcmp(b.params_memory, m.params_memory, pf * sizeof(float)) == 0;
    expect(same, "model_file_weights_round_trip_with_options", "rc %d, %s %s", rc,
           same ? "same bits" : "DIFFER", rc ? err : "");
    gpt_free(&b);

    /* a model of another configuration refuses the file, naming the field, in one line */
    struct { const char* name; GPTConfig c; const char* field; } mis[4] = {
        {"learned_positions", make_config(2, 4, 4, 32, 70, 16, POS_LEARNED, 0, 0, BLOCK_PARALLEL), "position kind"},
        {"rope_base", make_config(2, 4, 4, 32, 70, 16, POS_ROPE, 10000, ROPE_GPTJ, BLOCK_PARALLEL), "rope base"},
        {"rope_layout", make_config(2, 4, 4, 32, 70, 16, POS_ROPE, 500, ROPE_NEOX, BLOCK_PARALLEL), "rope layout"},
        {"sequential_block", make_config(2, 4, 4, 32, 70, 16, POS_ROPE, 500, ROPE_GPTJ, BLOCK_SEQUENTIAL), "block kind"},
    };
    for (int i = 0; i < 4; i++) {
        GPT o = build(&mis[i].c, 1, 4, 0, 0);
        randomize_weights(&o, 0.1);
        float before = o.params.lnfw[0];
        err[0] = '\0';
        rc = modelfile_load(&o, path, err);
        char name[128];
        snprintf(name, sizeof(name), "model_file_refused_by_mismatched_%s", mis[i].name);
        expect(rc != 0 && strstr(err, mis[i].field) && strstr(err, path) && !strchr(err, '\n') &&
               o.params.lnfw[0] == before, name, "rc %d: %s", rc, err);
        gpt_free(&o);
    }

    /* the training state carries the options, and refuses a mismatched model too */
    StateInfo info;
    memset(&info, 0, sizeof(info));
    info.step = 3;
    info.master_seed = 5;
    info.batch = 1;
    info.seq = 4;
    info.ranks = 1;
    info.loader.num_windows = 10;
    info.loader.pos = 2;
    snprintf(info.options, sizeof(info.options), "--drop-path 0.25\n");
    char spath[160];
    snprintf(spath, sizeof(spath), "%s/state.bin", dir);
    rc = state_save(spath, &m, &info, err);
    StateInfo back;
    int rc2 = rc == 0 ? state_read_info(spath, &back, err) : -1;
    expect(rc == 0 && rc2 == 0 && memcmp(&back.config, &c, sizeof(c)) == 0 &&
           strcmp(back.options, info.options) == 0, "state_carries_the_model_options",
           "save %d read %d: pos %d base %d layout %d block %d, option text %s %s", rc, rc2,
           back.config.pos_kind, back.config.rope_base, back.config.rope_layout,
           back.config.block_kind, rc2 == 0 && strcmp(back.options, info.options) == 0
           ? "kept" : "CHANGED", rc2 ? err : "");
    GPT s = build(&c, 1, 4, 0, 0);
    rc = state_load(spath, &s, &back, err);
    same = rc == 0 && memcmp(s.params_memory, m.params_memory, pf * sizeof(float)) == 0;
    expect(same, "state_loads_into_the_same_options", "rc %d %s", rc, rc ? err : "");
    gpt_free(&s);
    GPT o = build(&mis[3].c, 1, 4, 0, 0);
    err[0] = '\0';
    rc = state_load(spath, &o, &back, err);
    expect(rc != 0 && strstr(err, "block kind") && !strchr(err, '\n'),
           "state_refused_by_mismatched_block", "rc %d: %s", rc, err);
    gpt_free(&o);
    unlink(spath);
    unlink(path);
    gpt_free(&m);
}

/* ---- 6. sampling ---------------------------------------------------------------------------- */

static void test_sampling(const char* label, GPTConfig c) {
    GPT m = build(&c, 1, c.max_seq_len, 0, 0);
    randomize_weights(&m, 0.2);
    gpt_set_drop_path(&m, 0.5);   /* must not act: sampling is inference */
    int n = c.max_seq_len, Vp = c.padded_vocab_size;
    int* tok = malloc(sizeof(int) * n);
    random_tokens(tok, n, c.vocab_size);
    gpt_forward(&m, tok, NULL, 1, n, 0, 0, 0);
    Sampler s;
    sampler_init(&s, &m);
    double worst = 0, control = 0;
    for (int t = 0; t < n; t++) {
        const float* lg = sampler_feed(&s, tok[t]);   /* token t at absolute position t */
        double e = rel_err_ff(lg, m.logits + (size_t)t * Vp, (size_t)c.vocab_size);
        if (e > worst) worst = e;
        if (t > 0) {
            double e2 = rel_err_ff(lg, m.logits + (size_t)(t - 1) * Vp, (size_t)c.vocab_size);
            if (control == 0 || e2 < control) control = e2;
        }
    }
    char name[128];
    snprintf(name, sizeof(name), "sampling_at_each_offset_equals_full_forward[%s]", label);
    expect(worst < 1e-5 && control > 1e-2, name,
           "worst ||cache - full|| / ||full|| %.2e over %d positions (control, position t-1: "
           "%.2e at least)", worst, n, control);
    sampler_free(&s);
    free(tok);
    gpt_free(&m);
}

int main(void) {
    snprintf(dir, sizeof(dir), "/tmp/seedgpt_test_opts.XXXXXX");
    if (!mkdtemp(dir)) { printf("FAIL mkdtemp\n"); return 1; }

    test_rope_vs_reference(2, 5, 4, 2, 6, ROPE_NEOX, 0);
    test_rope_vs_reference(2, 5, 4, 2, 6, ROPE_GPTJ, 0);
    test_rope_vs_reference(1, 3, 2, 1, 8, ROPE_NEOX, 11);
    test_rope_vs_reference(1, 3, 2, 1, 8, ROPE_GPTJ, 11);
    test_rope_relative_position(ROPE_NEOX);
    test_rope_relative_position(ROPE_GPTJ);
    test_drop_path_bits();
    test_drop_path_off_paths();

    test_reference_fd("rope neox gqa", make_config(2, 4, 2, 16, 20, 8, POS_ROPE, 10000, ROPE_NEOX, 0),
                      SITE_RATES, 0.0);
    test_reference_fd("rope gptj parallel drop-path",
                      make_config(2, 4, 2, 16, 20, 8, POS_ROPE, 100, ROPE_GPTJ, BLOCK_PARALLEL),
                      SITE_RATES, 0.4);
    test_reference_fd("learned sequential drop-path",
                      make_config(2, 4, 4, 16, 20, 8, POS_LEARNED, 0, 0, BLOCK_SEQUENTIAL),
                      NO_DROPOUT, 0.4);

    /* "dropout": the per-site rates SITE_RATES (embd 0.1, attn 0.2, resid 0.05) */
    struct { const char* label; GPTConfig c; SiteRates r; double pdp; } cases[] = {
        {"rope neox gqa dropout", make_config(2, 6, 3, 36, 130, 16, POS_ROPE, 10000, ROPE_NEOX, 0),
         SITE_RATES, 0},
        {"rope gptj p=0", make_config(2, 4, 4, 32, 70, 40, POS_ROPE, 10000, ROPE_GPTJ, 0),
         NO_DROPOUT, 0},
        {"parallel dropout", make_config(2, 4, 2, 32, 70, 16, POS_LEARNED, 0, 0, BLOCK_PARALLEL),
         SITE_RATES, 0},
        {"drop-path 0.3", make_config(2, 4, 2, 32, 70, 16, POS_LEARNED, 0, 0, 0), NO_DROPOUT, 0.3},
        {"all dropout drop-path 0.3",
         make_config(2, 4, 2, 32, 70, 16, POS_ROPE, 10000, ROPE_GPTJ, BLOCK_PARALLEL), SITE_RATES,
         0.3},
    };
    int Bs[] = {3, 2, 3, 8, 6}, Ts[] = {13, 37, 11, 9, 10};
    for (int i = 0; i < 5; i++)
        test_model_vs_reference(cases[i].label, cases[i].c, Bs[i], Ts[i], cases[i].r, cases[i].pdp);

    test_policies("all options", make_config(3, 4, 2, 32, 70, 12, POS_ROPE, 10000, ROPE_NEOX,
                                             BLOCK_PARALLEL), SITE_RATES, 0.3);
    test_policies("drop-path only", make_config(3, 4, 4, 32, 70, 12, POS_LEARNED, 0, 0, 0),
                  NO_DROPOUT, 0.3);
    test_policies("rope gptj sequential", make_config(3, 4, 2, 32, 70, 12, POS_ROPE, 10000,
                                                      ROPE_GPTJ, 0), SITE_RATES, 0.0);

    test_files();
    test_sampling("rope neox gqa", make_config(2, 4, 2, 32, 70, 24, POS_ROPE, 10000, ROPE_NEOX, 0));
    test_sampling("rope gptj parallel", make_config(2, 4, 4, 32, 70, 24, POS_ROPE, 10000, ROPE_GPTJ,
                                                    BLOCK_PARALLEL));
    test_sampling("learned parallel", make_config(2, 4, 4, 32, 70, 24, POS_LEARNED, 0, 0,
                                                  BLOCK_PARALLEL));
    rmdir(dir);
    return test_finish();
}
