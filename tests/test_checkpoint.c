/* tests/test_checkpoint.c — activation checkpointing (DESIGN §4), as a specification:
 *   1. every recompute policy gives the loss and every gradient of `none`, bit for bit, with
 *      dropout on at every site (a different rate per site: SITE_RATES), and 20 training steps
 *      give the same losses and weights;
 *   2. the negative control (fresh pass-1 seeds at recompute) gives clearly wrong gradients, and
 *      the value check names the first recomputed segment; at dropout 0 it changes nothing;
 *   3. the value check can be turned off and never changes the gradients, and it compares every
 *      value of a segment's output: one flipped bit in the first or the last value is caught;
 *   4. the kept activations and the recompute scratch match a layout this test computes from the
 *      shapes; nothing is allocated after step 0 and the peak does not grow;
 *   5. the layer policy gives the same bits at 1, 2 and 3 threads.
 * It uses only the public model API (model/gpt.h, model/mem.h); test builds of model/gpt.c fill
 * the recompute scratch with NaN before every recompute, so a stale read shows up as NaN.
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
#include "tests/test.h"
#include "tests/model_util.h"
#include "tests/model_case.h"

void openblas_set_num_threads(int);
int openblas_get_num_threads(void);

/* How many training steps the bitwise comparisons and the allocation check run: fewer under
 * ASan (TEST_SANITIZED, tests/test.h), the full counts in make test's plain pass. The check names
 * carry the count. */
#define TRAIN_STEPS (TEST_SANITIZED ? 6 : 20)
#define ALLOC_STEPS (TEST_SANITIZED ? 6 : 50)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* ---- fixtures ------------------------------------------------------------------------------- */

static RecomputePolicy policy_sel(int every, int fresh, RecomputeCheck check, int selective) {
    RecomputePolicy p = {every, fresh, check, selective};
    return p;
}
static RecomputePolicy policy(int every, int fresh, RecomputeCheck check) {
    return policy_sel(every, fresh, check, 0);
}

static const char* pname(const RecomputePolicy* p, char buf[32]) {
    const char* sel = p->selective ? "selective_" : "";
    if (p->every == 0) snprintf(buf, 32, "%s", p->selective ? "selective" : "none");
    else if (p->every == 1) snprintf(buf, 32, "%slayer", sel);
    else snprintf(buf, 32, "%severy%d", sel, p->every);
    return buf;
}

static GPT build(const Case* k, RecomputePolicy p) { return build_on(k, p, &backend_cpu); }

/* A model under policy p, starting from weights w, with dropout rates r. */
static GPT model_at(const Case* k, RecomputePolicy p, const float* w, SiteRates r) {
    GPT m = build(k, p);
    memcpy(m.params_memory, w, block_floats(&m) * sizeof(float));
    set_site_dropout(&m, 0x5eedULL, r);
    return m;
}

/* Forward (train) + backward of one step; returns the loss, sets *mismatches. */
static float loss_and_grad(GPT* m, const Case* k, int batch, uint32_t step, int* mismatches) {
    gpt_zero_grad(m);
    float loss = gpt_forward(m, k->in[batch], k->tg[batch], k->B, k->T, (uint32_t)(step * k->B),
                             step, 1);
    int mm = gpt_backward(m, 1.0f / (float)(k->B * k->T));
    if (mismatches != NULL) *mismatches = mm;
    return loss;
}

/* ---- gradient comparison -------------------------------------------------------------------- */

typedef struct {
    int tensors_differ;    /* tensors whose bytes are not identical to the reference's */
    size_t floats_differ;
    double rel_err;        /* ||g - ref|| / ||ref|| over every parameter */
    int worst;             /* tensor of the largest relative error */
    double worst_err;
    size_t non_finite;     /* NaN or inf gradient entries */
} GradDiff;

/* m's gradients against ref, a copy of another model's whole gradient block (same layout). */
static GradDiff grad_diff(const GPT* m, const float* ref) {
    GradDiff d = {0, 0, 0.0, 0, 0.0, 0};
    float* g[NT];
    tensor_table(&m->grads, g);
    double num = 0, den = 0;
    for (int i = 0; i < NT; i++) {
        const float* r = ref + (g[i] - m->grads_memory);
        size_t n = m->param_sizes[i];
        if (memcmp(g[i], r, n * sizeof(float)) != 0) d.tensors_differ++;
        double tn = 0, td = 0;
        for (size_t j = 0; j < n; j++) {
            d.floats_differ += memcmp(&g[i][j], &r[j], sizeof(float)) != 0;
            d.non_finite += !isfinite(g[i][j]);
            double e = (double)g[i][j] - r[j];
            tn += e * e;
            td += (double)r[j] * r[j];
        }
        num += tn;
        den += td;
        double te = td > 0 ? sqrt(tn / td) : sqrt(tn);
        if (!(te <= d.worst_err) && !isnan(d.worst_err)) { d.worst_err = te; d.worst = i; }
    }
    d.rel_err = den > 0 ? sqrt(num / den) : sqrt(num);
    return d;
}

static float* copy_grads(const GPT* m) {
    size_t n = block_floats(m);
    float* g = malloc(n * sizeof(float));
    memcpy(g, m->grads_memory, n * sizeof(float));
    return g;
}

/* ---- 1. every policy equals none, bit for bit ------------------------------------------------ */

typedef struct {
    float loss[TRAIN_STEPS];
    float* params;   /* after TRAIN_STEPS AdamW steps */
    float* mom;      /* AdamW m, v */
    float* var;
    int mismatches;  /* value-check failures over all steps */
} TrainRun;

/* TRAIN_STEPS steps: forward, backward, clip (to 0.5: it bites), AdamW; the batch alternates. */
static TrainRun train(const Case* k, RecomputePolicy p, const float* w) {
    GPT m = model_at(k, p, w, SITE_RATES);
    TrainRun r;
    r.mismatches = 0;
    for (int s = 0; s < TRAIN_STEPS; s++) {
        int mm;
        r.loss[s] = loss_and_grad(&m, k, s % 2, (uint32_t)s, &mm);
        r.mismatches += mm;
        gpt_clip_grads(&m, 0.5f);
        gpt_adamw(&m, 2e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
    }
    copy_trained(&m, &r.params, &r.mom, &r.var);
    gpt_free(&m);
    return r;
}

static size_t count_differ(const float* a, const float* b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

static void test_policies_equal_none(const Case* k, const float* w, const int* everys, int np,
                                     int sel) {
    char name[160], pb[32], rs[64];
    int L = k->c.num_layers;
    site_rates_str(SITE_RATES, rs);

    /* the reference: none, one step */
    GPT ref = model_at(k, policy(0, 0, CHECK_WARN), w, SITE_RATES);
    float ref_loss = loss_and_grad(&ref, k, 0, 3, NULL);
    float* ref_grads = copy_grads(&ref);
    size_t n = block_floats(&ref);
    /* dropout must really be on, or bitwise equality below would prove little */
    GPT nodrop = model_at(k, policy(0, 0, CHECK_OFF), w, NO_DROPOUT);
    float loss0 = loss_and_grad(&nodrop, k, 0, 3, NULL);
    GradDiff d0 = grad_diff(&nodrop, ref_grads);
    snprintf(name, sizeof(name), "%s_dropout_changes_loss_and_gradients", k->name);
    expect(loss0 != ref_loss && d0.rel_err > 1e-3, name,
           "loss %.7f with %s vs %.7f at p=0; gradient rel diff %.3e", ref_loss, rs, loss0,
           d0.rel_err);
    gpt_free(&nodrop);

    TrainRun tref = train(k, policy(0, 0, CHECK_WARN), w);
    for (int i = 0; i < np; i++) {
        RecomputePolicy p = policy_sel(everys[i], 0, CHECK_WARN, sel);
        pname(&p, pb);
        /* one step: loss, every gradient tensor, the value check */
        GPT m = model_at(k, p, w, SITE_RATES);
        int mm;
        float loss = loss_and_grad(&m, k, 0, 3, &mm);
        GradDiff d = grad_diff(&m, ref_grads);
        snprintf(name, sizeof(name), "%s_%s_loss_and_every_gradient_bitwise_equal_none", k->name,
                 pb);
        expect(memcmp(&loss, &ref_loss, sizeof(float)) == 0 && d.tensors_differ == 0, name,
               "L=%d, every:%d, dropout %s: loss %.9g vs %.9g; %d of %d tensors differ "
               "(%zu floats; rel err %.2e, worst %s %.2e)", L, everys[i], rs, loss, ref_loss,
               d.tensors_differ, NT, d.floats_differ, d.rel_err, gpt_param_names[d.worst],
               d.worst_err);
        snprintf(name, sizeof(name), "%s_%s_gradients_finite_after_nan_filled_recompute", k->name,
                 pb);
        expect(d.non_finite == 0, name, "%zu non-finite of %zu gradient entries", d.non_finite,
               m.num_parameters);
        snprintf(name, sizeof(name), "%s_%s_value_check_passes_with_captured_seeds", k->name, pb);
        expect(mm == 0 && m.check_first_layer == -1, name,
               "%d mismatching segments, first layer %d", mm, m.check_first_layer);
        gpt_free(&m);

        /* 20 steps of training */
        TrainRun r = train(k, p, w);
        size_t dp = count_differ(r.params, tref.params, n);
        size_t dm = count_differ(r.mom, tref.mom, n) + count_differ(r.var, tref.var, n);
        int same_losses = memcmp(r.loss, tref.loss, sizeof(r.loss)) == 0;
        snprintf(name, sizeof(name), "%s_%s_%d_training_steps_bitwise_equal_none", k->name, pb,
                 TRAIN_STEPS);
        expect(same_losses && dp == 0 && dm == 0 && r.mismatches == 0, name,
               "losses step 0 %.7f / %.7f, step %d %.7f / %.7f (%s); after %d AdamW steps "
               "%zu weights and %zu moments of %zu differ; %d value-check failures",
               r.loss[0], tref.loss[0], TRAIN_STEPS - 1, r.loss[TRAIN_STEPS - 1],
               tref.loss[TRAIN_STEPS - 1], same_losses ? "all identical" : "DIFFER",
               TRAIN_STEPS, dp, dm, n, r.mismatches);
        free(r.params); free(r.mom); free(r.var);
    }
    free(tref.params); free(tref.mom); free(tref.var);
    free(ref_grads);
    gpt_free(&ref);
}

/* ---- 2 and 3. the negative control and the value check --------------------------------------- */

/* The first layer of the top segment: the segments are [0, K), [K, 2K), ... and the last may be
 * shorter; the backward recomputes the top one first. */
static int top_segment_first_layer(int L, int K) {
    int first = 0;
    while (first + K < L) first += K;
    return first;
}

static int num_segments(int L, int K) { return (L + K - 1) / K; }

static void test_fresh_seeds(const Case* k, const float* w, const int* everys, int np, int sel) {
    char name[160], pb[32];
    int L = k->c.num_layers;
    for (int drop = 0; drop < 2; drop++) {
        SiteRates rates = drop ? SITE_RATES : NO_DROPOUT;
        GPT ref = model_at(k, policy(0, 0, CHECK_WARN), w, rates);
        float ref_loss = loss_and_grad(&ref, k, 1, 5, NULL);
        float* ref_grads = copy_grads(&ref);
        for (int i = 0; i < np; i++) {
            RecomputePolicy p = policy_sel(everys[i], 1, CHECK_WARN, sel);
            pname(&p, pb);
            GPT m = model_at(k, p, w, rates);
            int mm;
            float loss = loss_and_grad(&m, k, 1, 5, &mm);
            GradDiff d = grad_diff(&m, ref_grads);
            int K = everys[i] < L ? everys[i] : L;
            if (drop) {
                int first = top_segment_first_layer(L, K), nseg = num_segments(L, K);
                snprintf(name, sizeof(name),
                         "%s_%s_fresh_seeds_with_dropout_give_wrong_gradients", k->name, pb);
                expect(d.rel_err > 1e-3 && d.non_finite == 0, name,
                       "rel gradient error vs none %.3e (worst %s %.3e), %zu non-finite",
                       d.rel_err, gpt_param_names[d.worst], d.worst_err, d.non_finite);
                snprintf(name, sizeof(name),
                         "%s_%s_fresh_seeds_leave_the_forward_loss_unchanged", k->name, pb);
                expect(memcmp(&loss, &ref_loss, sizeof(float)) == 0, name,
                       "loss %.9g vs none %.9g (the forward draws pass-0 seeds either way)",
                       loss, ref_loss);
                snprintf(name, sizeof(name),
                         "%s_%s_value_check_flags_every_segment_first_the_top_one", k->name, pb);
                expect(mm == nseg && m.check_mismatches == nseg && m.check_first_layer == first,
                       name, "gpt_backward returned %d, expected %d segments of every:%d over L=%d;"
                       " first mismatching layer %d, expected %d", mm, nseg, K, L,
                       m.check_first_layer, first);
            } else {
                snprintf(name, sizeof(name),
                         "%s_%s_fresh_seeds_at_dropout_0_change_nothing", k->name, pb);
                expect(memcmp(&loss, &ref_loss, sizeof(float)) == 0 && d.tensors_differ == 0 &&
                       mm == 0, name, "loss %.9g vs %.9g; %d tensors differ (rel err %.2e); "
                       "%d value-check failures", loss, ref_loss, d.tensors_differ, d.rel_err, mm);
            }
            gpt_free(&m);
        }
        free(ref_grads);
        gpt_free(&ref);
    }
}

/* CHECK_OFF reports nothing even when the recompute is wrong, and the check never changes a
 * gradient: it only reads. */
static void test_check_off(const Case* k, const float* w) {
    char name[160];
    int L = k->c.num_layers;
    for (int fresh = 0; fresh < 2; fresh++) {
        GPT on = model_at(k, policy(1, fresh, CHECK_WARN), w, SITE_RATES);
        GPT off = model_at(k, policy(1, fresh, CHECK_OFF), w, SITE_RATES);
        int mm_on, mm_off;
        loss_and_grad(&on, k, 0, 7, &mm_on);
        float* g_on = copy_grads(&on);
        loss_and_grad(&off, k, 0, 7, &mm_off);
        GradDiff d = grad_diff(&off, g_on);
        if (fresh) {
            snprintf(name, sizeof(name), "%s_value_check_off_reports_nothing_even_when_wrong",
                     k->name);
            expect(mm_off == 0 && off.check_mismatches == 0 && mm_on == L, name,
                   "fresh seeds, layer policy: check off reports %d, check warn reports %d of %d "
                   "segments", mm_off, mm_on, L);
        }
        snprintf(name, sizeof(name), "%s_value_check_does_not_change_gradients_%s_seeds", k->name,
                 fresh ? "fresh" : "captured");
        expect(d.tensors_differ == 0, name, "check off vs warn: %d tensors differ (%zu floats)",
               d.tensors_differ, d.floats_differ);
        free(g_on);
        gpt_free(&on);
        gpt_free(&off);
    }
}

/* The value check compares all B*T*C values of a segment's output, bit for bit: the lowest bit of
 * one value of the final LayerNorm's stored input, flipped between the forward and the backward,
 * is caught in the top segment and in no other, whether it is the first value or the last. (The
 * final LayerNorm's input is no segment's input, so the flip changes no recompute.) */
static void test_check_sees_one_bit(const Case* k, const float* w) {
    char name[160], pb[32];
    const int everys[3] = {1, 2, 4};
    int L = k->c.num_layers;
    size_t n = (size_t)k->B * k->T * k->c.channels;
    const size_t where[2] = {0, n - 1};
    for (int i = 0; i < 3; i++) {
        for (int e = 0; e < 2; e++) {
            RecomputePolicy p = policy(everys[i], 0, CHECK_WARN);
            pname(&p, pb);
            GPT m = model_at(k, p, w, SITE_RATES);
            gpt_zero_grad(&m);
            gpt_forward(&m, k->in[0], k->tg[0], k->B, k->T, 0, 3, 1);
            uint32_t bits;
            memcpy(&bits, &m.resid[L][where[e]], sizeof(bits));
            bits ^= 1u;
            memcpy(&m.resid[L][where[e]], &bits, sizeof(bits));
            int mm = gpt_backward(&m, 1.0f / (float)(k->B * k->T));
            int first = top_segment_first_layer(L, everys[i] < L ? everys[i] : L);
            snprintf(name, sizeof(name), "%s_%s_value_check_sees_one_flipped_bit_in_the_%s_value",
                     k->name, pb, e ? "last" : "first");
            expect(mm == 1 && m.check_mismatches == 1 && m.check_first_layer == first, name,
                   "lowest bit of value %zu of %zu of the final LayerNorm's input flipped: %d "
                   "mismatching segments (expected 1), first at layer %d (expected %d)",
                   where[e], n, mm, m.check_first_layer, first);
            gpt_free(&m);
        }
    }
}

/* ---- 4. memory ------------------------------------------------------------------------------- */

/* floats rounded up to 16 (64-byte alignment of every tensor), written here on purpose */
static size_t a16(size_t n) { return (n + 15) / 16 * 16; }

/* One layer's activations, per DESIGN §4 and gpt.h: ln1 C, ln1_mean 1, ln1_rstd 1, qkv QKV,
 * atty C, lse NH, resid2 C, ln2 C, ln2_mean 1, ln2_rstd 1, fch 4C, fch_gelu 4C per position. */
static size_t layer_floats(const GPTConfig* c, size_t BT) {
    size_t C = c->channels, NH = c->num_heads;
    size_t QKV = (size_t)(c->num_heads + 2 * c->num_kv_heads) * (C / NH);
    return a16(BT * C) + a16(BT) + a16(BT) + a16(BT * QKV) + a16(BT * C) + a16(BT * NH) +
           a16(BT * C) + a16(BT * C) + a16(BT) + a16(BT) + a16(BT * 4 * C) + a16(BT * 4 * C);
}

/* Kept from the forward to the backward: the residual streams (under every:K the segment inputs
 * and the final LayerNorm's input; under none all L + 1), the tail (lnf, lnf_mean, lnf_rstd,
 * logits, losses) and under none every layer's activations. */
static size_t expected_kept(const GPTConfig* c, int B, int T, int every) {
    size_t BT = (size_t)B * T, C = c->channels, Vp = c->padded_vocab_size;
    int L = c->num_layers;
    /* lnf, its mean and rstd, one classifier chunk of logits, the losses, dlnf; the chunk's rows
     * by the documented rule: 4C floats per position of the batch, at least 1024 rows, at most BT */
    size_t rows = 4 * BT * C / Vp;
    if (rows < 1024) rows = 1024;
    if (rows > BT) rows = BT;
    size_t tail = a16(BT * C) + a16(BT) + a16(BT) + a16(rows * Vp) + a16(BT) + a16(BT * C);
    if (every == 0) return (size_t)(L + 1) * a16(BT * C) + tail + (size_t)L * layer_floats(c, BT);
    int K = every < L ? every : L;
    return (size_t)(num_segments(L, K) + 1) * a16(BT * C) + tail;
}

/* The recompute scratch: K layers' activations, the K - 1 residual streams inside a segment and
 * the buffer the segment's recomputed output goes to for the value check. */
static size_t expected_recompute(const GPTConfig* c, int B, int T, int every) {
    if (every == 0) return 0;
    size_t BT = (size_t)B * T;
    int K = every < c->num_layers ? every : c->num_layers;
    return (size_t)K * (layer_floats(c, BT) + a16(BT * c->channels));
}

static void test_memory_layout(const Case* k, const int* everys, int np, int sel) {
    char name[160], pb[32];
    size_t kept_none = 0, kept_layer = 0;
    for (int i = -1; i < np; i++) {
        int every = i < 0 ? 0 : everys[i];
        RecomputePolicy p = policy_sel(every, 0, CHECK_WARN, sel);
        pname(&p, pb);
        GPTPlan plan;
        char err[256];
        int prc = gpt_plan(&k->c, k->B, k->T, &p, &backend_cpu, omp_get_max_threads(), &plan, err);
        MemStats before = mem_stats();
        GPT m = build(k, p);
        MemStats after = mem_stats();
        GPTMemory mem = gpt_memory(&m);
        /* the plan, made without allocating, is every byte the build counted */
        size_t built = after.live_bytes - before.live_bytes;
        size_t parts = plan.params + plan.grads + plan.adamw + plan.activations + plan.logits +
                       plan.recompute + plan.grad_scratch + plan.attn_scratch + plan.other;
        snprintf(name, sizeof(name), "%s_%s_planned_bytes_equal_the_counted_build", k->name, pb);
        expect(prc == 0 && built == plan.arena + plan.host && parts == plan.arena &&
               plan.activations + plan.logits == mem.activations &&
               plan.recompute == mem.recompute &&
               plan.grad_scratch + plan.attn_scratch == mem.scratch, name,
               "build counted %zu B, plan %zu B (arena %zu = the regions' sum %zu, host tables %zu); "
               "kept %zu + logits %zu vs %zu, recompute %zu vs %zu", built,
               plan.arena + plan.host, plan.arena, parts, plan.host, plan.activations,
               plan.logits, mem.activations, plan.recompute, mem.recompute);
        if (sel) {   /* selective storage: the plan above, and the formula below */
            size_t BT = (size_t)k->B * k->T, C = k->c.channels;
            size_t per_layer = a16(BT * C) + a16(BT * 4 * C) + a16(BT * C);   /* ln1, fch_gelu, ln2 */
            size_t plain_kept = expected_kept(&k->c, k->B, k->T, every);
            size_t plain_rec = expected_recompute(&k->c, k->B, k->T, every);
            int K = every == 0 ? k->c.num_layers : every < k->c.num_layers ? every : k->c.num_layers;
            size_t want_kept = every == 0 ? plain_kept - (size_t)K * per_layer : plain_kept;
            size_t want_rec = (every == 0 ? 0 : plain_rec - (size_t)K * per_layer) + per_layer;
            snprintf(name, sizeof(name), "%s_%s_keeps_no_ln_or_gelu_output_per_layer", k->name, pb);
            expect(m.num_kept_acts == want_kept && m.num_recompute_acts == want_rec, name,
                   "kept %zu floats (%zu expected: the plain policy's less ln1, ln2, fch_gelu of "
                   "%d slot(s)), recompute %zu (%zu expected: one shared set)", m.num_kept_acts,
                   want_kept, K, m.num_recompute_acts, want_rec);
            gpt_free(&m);
            continue;
        }
        size_t ek = expected_kept(&k->c, k->B, k->T, every);
        size_t er = expected_recompute(&k->c, k->B, k->T, every);
        snprintf(name, sizeof(name), "%s_%s_kept_activations_match_layout_formula", k->name, pb);
        expect(m.num_kept_acts == ek && mem.activations == ek * sizeof(float), name,
               "num_kept_acts %zu floats, gpt_memory().activations %zu B; formula %zu floats "
               "(%.1f KiB)", m.num_kept_acts, mem.activations, ek, ek * 4 / 1024.0);
        snprintf(name, sizeof(name), "%s_%s_recompute_scratch_matches_layout_formula", k->name,
                 pb);
        expect(m.num_recompute_acts == er && mem.recompute == er * sizeof(float), name,
               "num_recompute_acts %zu floats, gpt_memory().recompute %zu B; formula %zu floats",
               m.num_recompute_acts, mem.recompute, er);
        if (every == 0) kept_none = m.num_kept_acts;
        if (every == 1) kept_layer = m.num_kept_acts;
        gpt_free(&m);
    }
    if (k->c.num_layers >= 4 && !sel) {
        snprintf(name, sizeof(name), "%s_layer_policy_keeps_less_than_none", k->name);
        expect(kept_layer < kept_none, name, "kept activations: layer %zu floats, none %zu (%.1fx)",
               kept_layer, kept_none, (double)kept_none / (double)kept_layer);
    }
}

/* ALLOC_STEPS steps (50; 6 under ASan) under each policy: nothing allocated after step 0, the
 * same peak after step 1 as after the last step, and that peak is the larger of the peak before
 * the model and the live bytes right after building it (run first, in order of growing size,
 * this is each model's own size). */
static void test_no_allocation_after_step0(const Case* k) {
    /* in order of growing size, so that each model's own live bytes set the peak it is held to */
    RecomputePolicy ps[4] = {policy(1, 1, CHECK_OFF), policy(1, 0, CHECK_WARN),
                             policy(3, 0, CHECK_WARN), policy(0, 0, CHECK_WARN)};
    const char* names[4] = {"layer_fresh_seeds", "layer", "every3", "none"};
    char name[160];
    for (int i = 0; i < 4; i++) {
        MemStats before = mem_stats();
        GPT m = build(k, ps[i]);
        gpt_init_weights(&m, 7);
        set_site_dropout(&m, 7, SITE_RATES);
        MemStats built = mem_stats(), s0 = {0}, s1 = {0};
        for (int s = 0; s < ALLOC_STEPS; s++) {
            loss_and_grad(&m, k, s % 2, (uint32_t)s, NULL);
            gpt_clip_grads(&m, 1.0f);
            gpt_adamw(&m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
            if (s == 0) s0 = mem_stats();
            if (s == 1) s1 = mem_stats();
        }
        gpt_forward(&m, k->in[0], k->tg[0], 1, k->T / 2, 0, 0, 0);   /* an eval forward, smaller */
        MemStats sN = mem_stats();
        size_t expect_peak = before.peak_bytes > built.live_bytes ? before.peak_bytes
                                                                  : built.live_bytes;
        snprintf(name, sizeof(name), "%s_%s_no_allocation_after_step_0", k->name, names[i]);
        expect(sN.allocations == s0.allocations && s0.allocations == built.allocations &&
               sN.live_bytes == built.live_bytes, name,
               "allocations: %zu after build, %zu after step 0, %zu after %d steps and an eval "
               "forward; live %zu B after build, %zu B after", built.allocations, s0.allocations,
               sN.allocations, ALLOC_STEPS, built.live_bytes, sN.live_bytes);
        snprintf(name, sizeof(name), "%s_%s_peak_after_step_1_equals_peak_after_step_%d", k->name,
                 names[i], ALLOC_STEPS);
        expect(s1.peak_bytes == sN.peak_bytes && sN.peak_bytes == expect_peak, name,
               "peak %zu B after step 1, %zu B after step %d; max(peak before build, live after "
               "build) = %zu B", s1.peak_bytes, sN.peak_bytes, ALLOC_STEPS, expect_peak);
        gpt_free(&m);
    }
}

/* ---- 5. threads -------------------------------------------------------------------------------- */

typedef struct {
    float loss[3];
    float* grads;    /* (3, n) each step's gradients before clipping */
    float* params;   /* after 3 AdamW steps */
} ThreadRun;

static ThreadRun three_steps(GPT* m, const Case* k, const float* w, int nthreads) {
    omp_set_num_threads(nthreads);
    openblas_set_num_threads(nthreads);
    size_t n = block_floats(m);
    memcpy(m->params_memory, w, n * sizeof(float));
    memset(m->m_memory, 0, n * sizeof(float));
    memset(m->v_memory, 0, n * sizeof(float));
    ThreadRun r;
    r.grads = malloc(3 * n * sizeof(float));
    r.params = malloc(n * sizeof(float));
    for (int s = 0; s < 3; s++) {
        r.loss[s] = loss_and_grad(m, k, s % 2, (uint32_t)s, NULL);
        memcpy(r.grads + s * n, m->grads_memory, n * sizeof(float));
        gpt_clip_grads(m, 0.5f);
        gpt_adamw(m, 2e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
    }
    memcpy(r.params, m->params_memory, n * sizeof(float));
    return r;
}

static void test_threads(const Case* k, const float* w) {
    int orig = omp_get_max_threads(), orig_blas = openblas_get_num_threads();
    /* gpt_build records the thread count it sizes the attention scratch for: build at 3 */
    omp_set_num_threads(3);
    GPT m = model_at(k, policy(1, 0, CHECK_WARN), w, SITE_RATES);
    size_t n = block_floats(&m);
    ThreadRun r3 = three_steps(&m, k, w, 3);
    char name[160];
    for (int nt = 2; nt >= 1; nt--) {
        ThreadRun r = three_steps(&m, k, w, nt);
        size_t dg = count_differ(r.grads, r3.grads, 3 * n), dp = count_differ(r.params, r3.params, n);
        int same = memcmp(r.loss, r3.loss, sizeof(r.loss)) == 0;
        snprintf(name, sizeof(name), "%s_layer_policy_bitwise_identical_at_%d_and_3_threads",
                 k->name, nt);
        expect(same && dg == 0 && dp == 0, name,
               "losses %.7f %.7f %.7f vs %.7f %.7f %.7f; differing floats: gradients of 3 steps "
               "%zu, weights after 3 AdamW steps %zu of %zu", r.loss[0], r.loss[1], r.loss[2],
               r3.loss[0], r3.loss[1], r3.loss[2], dg, dp, n);
        free(r.grads); free(r.params);
    }
    free(r3.grads); free(r3.params);
    gpt_free(&m);
    omp_set_num_threads(orig);
    openblas_set_num_threads(orig_blas);
}

/* ---- the classifier in chunks ------------------------------------------------------------- */

/* One step with the classifier in chunks of `rows` rows (k->B * k->T: one chunk, the whole
 * logits), its gradient in the forward (fused: gpt_set_loss_scale) or in the backward with the
 * chunk's logits computed again. Returns the loss; *grads gets a copy of every gradient. */
static float chunked_step(const Case* k, const float* w, int rows, int fused, int threads,
                          float** grads) {
    GPT m;
    char err[256];
    RecomputePolicy p = policy(0, 0, CHECK_WARN);
    int orig = omp_get_max_threads();
    omp_set_num_threads(threads);
    if (gpt_build_rows(&m, &k->c, k->B, k->T, &p, &backend_cpu, rows, err) != 0) {
        fprintf(stderr, "test_checkpoint: gpt_build_rows: %s\n", err);
        exit(2);
    }
    memcpy(m.params_memory, w, block_floats(&m) * sizeof(float));
    set_site_dropout(&m, 0x5eedULL, SITE_RATES);
    float dloss = 1.0f / (float)(k->B * k->T);
    gpt_zero_grad(&m);
    if (fused) gpt_set_loss_scale(&m, dloss);
    float loss = gpt_forward(&m, k->in[0], k->tg[0], k->B, k->T, 0, 3, 1);
    gpt_backward(&m, dloss);
    *grads = copy_grads(&m);
    gpt_free(&m);
    omp_set_num_threads(orig);
    return loss;
}

/* The whole-logits path (one chunk, gradient in the backward) against chunks of 1, 7, 64 and
 * N-1 rows, each both ways: the loss and every gradient the same bits (the CPU GEMM continues
 * wte's gradient chain across calls, and a row's dlnf and loss are its own); and a chunked fused
 * step the same bits at 1, 2 and 3 threads. */
static void test_classifier_chunks(const Case* k, const float* w) {
    int N = k->B * k->T;
    float* ref;
    float ref_loss = chunked_step(k, w, N, 0, 1, &ref);
    GPT probe = build(k, policy(0, 0, CHECK_OFF));
    size_t n = block_floats(&probe);
    gpt_free(&probe);
    const int rows[4] = {1, 7, 64, N - 1};
    int bad = 0, runs = 0;
    size_t worst_differ = 0;
    for (int i = 0; i < 4; i++)
        for (int fused = 0; fused < 2; fused++) {
            float* g;
            float loss = chunked_step(k, w, rows[i], fused, 1, &g);
            size_t d = count_differ(g, ref, n);
            if (d > worst_differ) worst_differ = d;
            bad += d != 0 || memcmp(&loss, &ref_loss, sizeof(float)) != 0;
            runs++;
            free(g);
        }
    char name[160];
    snprintf(name, sizeof(name), "%s_classifier_in_chunks_bitwise_equals_the_whole_logits", k->name);
    expect(bad == 0, name, "chunks of 1, 7, 64 and %d of %d rows, gradient in the forward and in "
           "the backward: %d of %d runs differ (at most %zu of %zu gradient floats)", N - 1, N,
           bad, runs, worst_differ, n);
    float* g1;
    float l1 = chunked_step(k, w, 7, 1, 1, &g1);
    size_t dt = 0;
    int same = 1;
    for (int t = 2; t <= 3; t++) {
        float* gt;
        float lt = chunked_step(k, w, 7, 1, t, &gt);
        dt += count_differ(gt, g1, n);
        same &= memcmp(&lt, &l1, sizeof(float)) == 0;
        free(gt);
    }
    snprintf(name, sizeof(name), "%s_classifier_in_chunks_bitwise_identical_at_1_2_3_threads", k->name);
    expect(same && dt == 0, name, "chunks of 7 rows, fused: loss %s, %zu gradient floats differ",
           same ? "identical" : "DIFFERS", dt);
    free(g1);
    free(ref);
}

int main(void) {
    double t0 = now();
    /* Everything but test_threads runs on one thread: the results do not depend on it (that is
     * what test_threads checks), and on a 2-core machine shared with another busy process an
     * OpenMP team spinning at its many small barriers (and OpenBLAS's own threads competing with
     * it) made this file 30x slower (250 s instead of 8 s). */
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    /* L = 6: every:2 and every:3 divide it, every:4 does not, every:6 = L, every:8 > L.
     * The GQA case has L = 5: every:2 and every:3 leave a short top segment, every:5 = L. */
    Case plain = make_case("L6_mha", 6, 4, 4, 32, 97, 3, 64);
    Case gqa = make_case("L5_gqa", 5, 4, 2, 32, 97, 2, 40);
    const int ev_plain[6] = {1, 2, 3, 4, 6, 8};
    const int ev_gqa[5] = {1, 2, 3, 5, 7};
    /* first, before anything else is allocated: the peak checks are tight only here */
    test_no_allocation_after_step0(&plain);
    double t1 = now();
    float* w_plain = random_weights(&plain);
    float* w_gqa = random_weights(&gqa);
    test_memory_layout(&plain, ev_plain, 6, 0);
    test_memory_layout(&gqa, ev_gqa, 5, 0);
    const int ev_sel[3] = {1, 2, 4};   /* and, at i = -1, selective alone */
    test_memory_layout(&plain, ev_sel, 3, 1);
    /* B*T = 39 and B*T*NH = 117 are not multiples of 16: the 64-byte rounding shows */
    Case odd = make_case("L4_odd_shapes", 4, 3, 1, 24, 50, 3, 13);
    const int ev_odd[4] = {1, 2, 3, 5};
    test_memory_layout(&odd, ev_odd, 4, 0);
    free_case(&odd);
    /* RoPE (its angle tables in the arena) and the parallel block (its second branch buffer) */
    Case rope = make_case("L3_rope_parallel", 3, 4, 2, 32, 61, 2, 24);
    rope.c.pos_kind = POS_ROPE;
    rope.c.rope_base = 10000;
    rope.c.rope_layout = ROPE_NEOX;
    rope.c.block_kind = BLOCK_PARALLEL;
    const int ev_rope[2] = {1, 2};
    test_memory_layout(&rope, ev_rope, 2, 0);
    test_memory_layout(&rope, ev_rope, 2, 1);
    free_case(&rope);
    double t2 = now();
    test_policies_equal_none(&plain, w_plain, ev_plain, 6, 0);
    test_policies_equal_none(&gqa, w_gqa, ev_gqa, 5, 0);
    /* selective storage alone (every 0) and with segments */
    const int ev_sel_plain[3] = {0, 1, 4}, ev_sel_gqa[2] = {0, 3};
    test_policies_equal_none(&plain, w_plain, ev_sel_plain, 3, 1);
    test_policies_equal_none(&gqa, w_gqa, ev_sel_gqa, 2, 1);
    double t3 = now();
    const int fresh_plain[4] = {1, 2, 4, 6};
    const int fresh_gqa[2] = {1, 3};
    test_fresh_seeds(&plain, w_plain, fresh_plain, 4, 0);
    test_fresh_seeds(&gqa, w_gqa, fresh_gqa, 2, 0);
    const int fresh_sel[2] = {1, 4};
    test_fresh_seeds(&plain, w_plain, fresh_sel, 2, 1);
    test_check_off(&plain, w_plain);
    test_check_sees_one_bit(&plain, w_plain);
    double t4 = now();
    test_threads(&plain, w_plain);
    test_classifier_chunks(&plain, w_plain);
    double t5 = now();
    printf("# times: allocation %.1f s, layout %.1f s, policies vs none %.1f s, fresh seeds and "
           "check %.1f s, threads (1, 2, 3) %.1f s; the rest on %d thread\n", t1 - t0, t2 - t1,
           t3 - t2, t4 - t3, t5 - t4, omp_get_max_threads());
    free(w_plain); free(w_gqa);
    free_case(&plain); free_case(&gqa);
    return test_finish();
}
