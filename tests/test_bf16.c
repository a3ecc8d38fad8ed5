/* tests/test_bf16.c — --precision bf16 on the CPU (README "Precision"), as a specification:
 *   1. every recompute policy (none, layer, every:2, selective, selective+layer,
 *      selective+every:2) gives the losses, weights and AdamW moments of `none`, bit for bit, over
 *      TRAIN_STEPS AdamW steps with dropout at every site (a different rate per site, stochastic
 *      depth too); the value check stays clean; the fresh-seed control differs;
 *   2. the same bits at 1, 2 and 3 threads;
 *   3. the gradient of one step with dropout is within BF16_GRAD_TOL of the float64 reference
 *      (tests/ref_gpt.c) for every tensor, and the same comparison against another step's masks
 *      fails that bound by far;
 *   4. the masks do not depend on the precision: the embedding site's output (fp32 in both) is
 *      bitwise the fp32 model's, and the bf16 attention is within the P-rounding bound of the fp32
 *      attention on the same bf16 inputs with dropout on, while another seed's masks are far;
 *   5. the products read the weights' bf16 copy made at the update: a change of the masters
 *      reaches the loss only after the next update (or gpt_to_backend), and the copy is the
 *      masters rounded;
 *   6. memory: the plan equals the counted build under bf16 and the layout formula written in this
 *      test (every policy, selective storage too), and the per-layer kept activations take at
 *      most 0.55x fp32's bytes at GPT-2 124M B4 T1024 and at the bench shape;
 *   7. --log-attn-stats: the attention forward with statistics gives the plain forward's bits,
 *      its max |scaled score| is the float64 maximum over the causal scores (within fp32
 *      rounding) and its LSE range the output's; a recompute adds nothing to a model's statistics;
 *   8. the classifier in 1, 2 and 3 chunks, its gradient in the forward or in the backward, in
 *      bf16 and in fp32: the one chunk's loss and gradients, bit for bit.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include "model/gpt.h"
#include "model/mem.h"
#include "cpu/ops_bf16_cpu.h"
#include "attention/attention.h"
#include "util/bf16.h"
#include "tests/test.h"
#include "tests/model_util.h"
#include "tests/model_case.h"
#include "tests/ref_gpt.h"

#define TRAIN_STEPS 6
/* Per-tensor relative gradient error against float64 at one step: each bf16 rounding is at most
 * 2^-8 relative; a gradient passes through a few dozen of them (operands of every product, the
 * stored activations, P and dS in attention), each adding an independent error, so the tensor
 * norms land near 1e-2 (measured: see the ok lines). A wrong mask moves them by ~1. */
#define BF16_GRAD_TOL 5e-2

static const Backend* bf16(void) { return backend_lookup("cpu", "bf16"); }

/* a model on be from weights w (through gpt_to_backend: the bf16 copy is made there) */
static GPT model_at(const Case* k, RecomputePolicy p, const Backend* be, const float* w) {
    GPT m = build_on(k, p, be);
    memcpy(m.host_params_memory, w, block_floats(&m) * sizeof(float));
    gpt_to_backend(&m);
    set_site_dropout(&m, 0x5eedULL, SITE_RATES);
    gpt_set_drop_path(&m, 0.15);
    return m;
}

static float step_grad(GPT* m, const Case* k, int batch, uint32_t step, int* mismatches) {
    gpt_zero_grad(m);
    float loss = gpt_forward(m, k->in[batch], k->tg[batch], k->B, k->T, step * (uint32_t)k->B,
                             step, 1);
    int mm = gpt_backward(m, 1.0f / (float)(k->B * k->T));
    if (mismatches != NULL) *mismatches += mm;
    return loss;
}

typedef struct {
    float loss[TRAIN_STEPS];
    float *params, *mom, *var;
    int mismatches;
} Run;

static Run train(const Case* k, RecomputePolicy p, const float* w) {
    GPT m = model_at(k, p, bf16(), w);
    Run r;
    r.mismatches = 0;
    for (int s = 0; s < TRAIN_STEPS; s++) {
        r.loss[s] = step_grad(&m, k, s % 2, (uint32_t)s, &r.mismatches);
        gpt_clip_grads(&m, 0.5f);
        gpt_adamw(&m, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
    }
    copy_trained(&m, &r.params, &r.mom, &r.var);
    gpt_free(&m);
    return r;
}

static void free_run(Run* r) { free(r->params); free(r->mom); free(r->var); }

/* ---- 1. recompute policies, 2. threads ---------------------------------------------------- */

static void test_policies(const Case* k, const float* w) {
    RecomputePolicy none = {0, 0, CHECK_WARN, 0};
    Run ref = train(k, none, w);
    size_t n = (size_t)k->c.num_layers;   /* silence unused warnings on odd builds */
    (void)n;
    const struct { int every, sel; const char* name; } ps[] = {
        {1, 0, "layer"}, {2, 0, "every2"}, {0, 1, "selective"}, {1, 1, "selective_layer"},
        {2, 1, "selective_every2"}};
    GPT probe = build_on(k, none, bf16());
    size_t nf = block_floats(&probe);
    gpt_free(&probe);
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
        RecomputePolicy p = {ps[i].every, 0, CHECK_WARN, ps[i].sel};
        Run r = train(k, p, w);
        size_t dl = differ(r.loss, ref.loss, TRAIN_STEPS);
        size_t dp = differ(r.params, ref.params, nf), dm = differ(r.mom, ref.mom, nf),
               dv = differ(r.var, ref.var, nf);
        char name[160];
        snprintf(name, sizeof(name), "bf16_%s_equals_none_bitwise_over_%d_adamw_steps[%s]",
                 ps[i].name, TRAIN_STEPS, k->name);
        expect(dl == 0 && dp == 0 && dm == 0 && dv == 0 && r.mismatches == 0, name,
               "losses differ %zu, weights %zu, m %zu, v %zu of %zu; value-check failures %d; "
               "last loss %.7f vs %.7f", dl, dp, dm, dv, nf, r.mismatches,
               r.loss[TRAIN_STEPS - 1], ref.loss[TRAIN_STEPS - 1]);
        free_run(&r);
    }
    /* the negative control: fresh pass-1 seeds at the recompute give other gradients */
    {
        RecomputePolicy p = {1, 1, CHECK_WARN, 0};
        GPT a = model_at(k, none, bf16(), w), b = model_at(k, p, bf16(), w);
        step_grad(&a, k, 0, 0, NULL);
        int mm = 0;
        step_grad(&b, k, 0, 0, &mm);
        size_t d = differ(a.grads_memory, b.grads_memory, nf);
        expect(d > nf / 4 && mm > 0, "bf16_fresh_seed_recompute_is_caught",
               "%zu of %zu gradient floats differ, %d segments failed the value check", d, nf, mm);
        gpt_free(&a);
        gpt_free(&b);
    }
    free_run(&ref);
}

static void test_threads(const Case* k, const float* w) {
    RecomputePolicy p = {1, 0, CHECK_WARN, 0};
    int saved = omp_get_max_threads();
    Run r[3];
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        r[t - 1] = train(k, p, w);
    }
    omp_set_num_threads(saved);
    GPT probe = build_on(k, p, bf16());
    size_t nf = block_floats(&probe);
    gpt_free(&probe);
    size_t d2 = differ(r[1].params, r[0].params, nf) + differ(r[1].loss, r[0].loss, TRAIN_STEPS);
    size_t d3 = differ(r[2].params, r[0].params, nf) + differ(r[2].loss, r[0].loss, TRAIN_STEPS);
    expect(d2 == 0 && d3 == 0, "bf16_same_bits_at_1_2_3_threads",
           "after %d steps under layer: 2 threads differ in %zu values, 3 threads in %zu",
           TRAIN_STEPS, d2, d3);
    for (int t = 0; t < 3; t++) free_run(&r[t]);
}

/* ---- 3. gradient against float64 ---------------------------------------------------------- */

static void test_reference(void) {
    Case k = make_case("L2_NH4_KV2_C32", 2, 4, 2, 32, 40, 2, 9);
    RecomputePolicy none = {0, 0, CHECK_OFF, 0};
    GPT m = build_on(&k, none, bf16());
    randomize_weights(&m, 0.15);
    gpt_to_backend(&m);
    uint64_t master = 0x5eed0002ULL;
    uint32_t step = 3, g0 = 5;
    set_site_dropout(&m, master, SITE_RATES);
    gpt_zero_grad(&m);
    float loss = gpt_forward(&m, k.in[0], k.tg[0], k.B, k.T, g0, step, 1);
    gpt_backward(&m, 1.0f / (float)(k.B * k.T));
    double* w = malloc(m.num_parameters * sizeof(double));
    double* gref = malloc(m.num_parameters * sizeof(double));
    tensors_to_double(&m, &m.params, w);
    const SiteRates r = SITE_RATES;
    double lref = ref_gpt_loss_and_grad(&k.c, w, gref, k.in[0], k.tg[0], k.B, k.T, g0, master,
                                        step, r.embd, r.attn, r.resid);
    expect(fabs(loss - lref) / lref < 1e-2, "bf16_loss_within_1e-2_of_float64_reference",
           "bf16 %.6f, float64 %.6f, rel %.2e", loss, lref, fabs(loss - lref) / lref);
    double worst = compare_grads(&m, gref, "bf16 L2 dropout", BF16_GRAD_TOL, 1);
    /* wrong masks: the reference at the next step's seeds */
    ref_gpt_loss_and_grad(&k.c, w, gref, k.in[0], k.tg[0], k.B, k.T, g0, master, step + 1,
                          r.embd, r.attn, r.resid);
    double other = compare_grads(&m, gref, "bf16 wrong masks", BF16_GRAD_TOL, 0);
    expect(other > BF16_GRAD_TOL && other > 5 * worst, "bf16_vs_reference_detects_wrong_masks",
           "worst per-tensor rel err with the right masks %.2e, with step+1's masks %.2e "
           "(bound %.0e)", worst, other, BF16_GRAD_TOL);
    free(w); free(gref);
    gpt_free(&m);
    for (int i = 0; i < 2; i++) { free(k.in[i]); free(k.tg[i]); }
}

/* ---- 4. masks ------------------------------------------------------------------------------ */

static void test_masks(const Case* k, const float* w) {
    RecomputePolicy none = {0, 0, CHECK_OFF, 0};
    GPT a = model_at(k, none, &backend_cpu, w), b = model_at(k, none, bf16(), w);
    gpt_forward(&a, k->in[0], k->tg[0], k->B, k->T, 7, 2, 1);
    gpt_forward(&b, k->in[0], k->tg[0], k->B, k->T, 7, 2, 1);
    size_t n = (size_t)k->B * k->T * k->c.channels, zeros = 0;
    for (size_t i = 0; i < n; i++) zeros += a.resid[0][i] == 0.0f;
    size_t d = differ(a.resid[0], b.resid[0], n);
    expect(d == 0 && zeros > n / 20, "bf16_embedding_dropout_is_the_fp32_bits",
           "%zu of %zu values differ; %zu dropped", d, n, zeros);
    gpt_free(&a);
    gpt_free(&b);

    /* attention: the bf16 twin against the fp32 kernel on the same (bf16) q, k, v with dropout,
     * element by element. Their only differences are P rounded to bf16 before P.V (at most 2^-8
     * of each weight m p scale: 8 significant bits, to nearest) and o rounded to bf16 (2^-8 of
     * it), so
     *   |o16_id - o32_id| <= 2^-8 (A_id + |o32_id|) + 2^-20 A_id,  A_id = sum_j m p scale |v_jd|,
     * A computed by the fp32 kernel itself on |v| (the same masks). One wrong keep bit of a row's
     * weight moves that row by p scale |v|, far above 2^-8 A in the first rows; another seed's
     * masks break the bound everywhere. */
    int B = 2, T = 70, NH = 4, NKV = 2, HD = 16, C = NH * HD, QKV = (NH + 2 * NKV) * HD;
    size_t nq = (size_t)B * T * QKV, no = (size_t)B * T * C;
    uint16_t* q16 = malloc(nq * 2);
    float *q32 = malloc(nq * 4), *qabs = malloc(nq * 4);
    for (size_t i = 0; i < nq; i++) {
        q16[i] = sg_bf16_from_float((float)(1.5 * test_normal()));
        q32[i] = sg_bf16_to_float(q16[i]);
        int is_v = (int)(i % QKV) >= (NH + NKV) * HD;
        qabs[i] = is_v ? fabsf(q32[i]) : q32[i];
    }
    uint16_t* o16 = malloc(no * 2);
    float *o32 = malloc(no * 4), *o32b = malloc(no * 4), *amag = malloc(no * 4),
          *lse16 = malloc((size_t)B * NH * T * 4), *lse32 = malloc((size_t)B * NH * T * 4);
    Dropout dr = dropout_make(0.3);
    attention_forward_bf16(o16, lse16, q16, B, T, NH, NKV, HD, 11, 0xabcULL, dr);
    attention_forward(o32, lse32, q32, B, T, NH, NKV, HD, 11, 0xabcULL, dr);
    attention_forward(amag, lse32, qabs, B, T, NH, NKV, HD, 11, 0xabcULL, dr);
    attention_forward(o32b, lse32, q32, B, T, NH, NKV, HD, 11, 0xabdULL, dr);
    double worst = 0, worst_other = 0;
    for (size_t i = 0; i < no; i++) {
        double x = sg_bf16_to_float(o16[i]);
        double bound = ldexp(1.0, -8) * (amag[i] + fabs(o32[i])) + ldexp(1.0, -20) * amag[i] + 1e-30;
        double r = fabs(x - o32[i]) / bound, rb = fabs(x - o32b[i]) / bound;
        if (r > worst) worst = r;
        if (rb > worst_other) worst_other = rb;
    }
    expect(worst <= 1.0 && worst_other > 10.0, "bf16_attention_masks_are_the_fp32_masks",
           "every |o_bf16 - o_fp32| within 2^-8 (sum m p scale |v| + |o|): worst %.3f of the bound; "
           "against another seed's masks %.3g x the bound", worst, worst_other);
    free(q16); free(q32); free(qabs); free(o16); free(o32); free(o32b); free(amag); free(lse16);
    free(lse32);
}

/* ---- 5. the weights' copy ----------------------------------------------------------------- */

static void test_weight_copy(const Case* k, const float* w) {
    RecomputePolicy none = {0, 0, CHECK_OFF, 0};
    GPT m = model_at(k, none, bf16(), w);
    step_grad(&m, k, 0, 0, NULL);
    gpt_adamw(&m, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    size_t nf = block_floats(&m), bad = 0;
    const uint16_t* cp = m.wop_memory;
    for (size_t i = 0; i < nf; i++) bad += cp[i] != sg_bf16_from_float(m.params_memory[i]);
    expect(cp != NULL && bad == 0, "bf16_weight_copy_is_the_masters_rounded_after_adamw",
           "%zu of %zu differ", bad, nf);
    float l0 = gpt_forward(&m, k->in[1], k->tg[1], k->B, k->T, 0, 1, 0);
    /* the masters of the QKV weights doubled, behind the copy's back */
    size_t nq = m.param_sizes[4];
    for (size_t i = 0; i < nq; i++) m.params.qkvw[i] *= 2.0f;
    float l1 = gpt_forward(&m, k->in[1], k->tg[1], k->B, k->T, 0, 1, 0);
    gpt_to_backend(&m);
    float l2 = gpt_forward(&m, k->in[1], k->tg[1], k->B, k->T, 0, 1, 0);
    expect(memcmp(&l0, &l1, 4) == 0 && l2 != l0, "bf16_products_read_the_copy_made_at_the_update",
           "loss %.7f; masters changed: %.7f (the copy unchanged); after gpt_to_backend %.7f",
           l0, l1, l2);
    gpt_free(&m);
}

/* ---- 6. memory ---------------------------------------------------------------------------- */

static void test_memory(const Case* k) {
    const struct { int every, sel; } ps[] = {{0, 0}, {1, 0}, {0, 1}, {2, 1}};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
        RecomputePolicy p = {ps[i].every, 0, CHECK_WARN, ps[i].sel};
        GPTPlan plan;
        char err[256], name[160];
        int rc = gpt_plan(&k->c, k->B, k->T, &p, bf16(), omp_get_max_threads(), &plan, err);
        MemStats before = mem_stats();
        GPT m = build_on(k, p, bf16());
        MemStats after = mem_stats();
        GPTMemory mem = gpt_memory(&m);
        size_t built = after.live_bytes - before.live_bytes;
        size_t parts = plan.params + plan.grads + plan.adamw + plan.weights_op + plan.activations +
                       plan.logits + plan.recompute + plan.grad_scratch + plan.attn_scratch +
                       plan.other;
        snprintf(name, sizeof(name), "bf16_planned_bytes_equal_the_counted_build[%s every%d sel%d]",
                 k->name, ps[i].every, ps[i].sel);
        expect(rc == 0 && built == plan.arena + plan.host && parts == plan.arena &&
               plan.activations + plan.logits == mem.activations &&
               plan.layer_acts == mem.layer_acts && plan.resid == mem.resid &&
               plan.weights_op == mem.weights_op && plan.recompute == mem.recompute, name,
               "built %zu B, plan %zu B (regions %zu), bf16 weights %zu B, layers %zu B",
               built, plan.arena + plan.host, parts, plan.weights_op, plan.layer_acts);
        gpt_free(&m);
    }
    /* the per-layer kept activations, bf16 against fp32 (the policy none: every layer kept) */
    struct { const char* name; GPTConfig c; int B, T; } shapes[2] = {
        {"gpt2_124M_B4_T1024", {1024, 50257, gpt_pad_vocab(50257), 12, 12, 12, 768, 0, 0, 0, 0}, 4, 1024},
        {"bench_L4_C256_B8_T256", {256, 257, gpt_pad_vocab(257), 4, 4, 4, 256, 0, 0, 0, 0}, 8, 256}};
    for (int s = 0; s < 2; s++) {
        RecomputePolicy none = {0, 0, CHECK_OFF, 0};
        GPTPlan p32, p16;
        char err[256], name[160];
        gpt_plan(&shapes[s].c, shapes[s].B, shapes[s].T, &none, &backend_cpu, 2, &p32, err);
        gpt_plan(&shapes[s].c, shapes[s].B, shapes[s].T, &none, bf16(), 2, &p16, err);
        double ratio = (double)p16.layer_acts / (double)p32.layer_acts;
        snprintf(name, sizeof(name), "bf16_layer_activations_at_most_0.55x_fp32[%s]", shapes[s].name);
        expect(ratio <= 0.55 && p16.layer_acts > 0, name,
               "per layer %zu B in bf16, %zu B in fp32: %.3fx; kept in all %zu B vs %zu B",
               p16.layer_acts / shapes[s].c.num_layers, p32.layer_acts / shapes[s].c.num_layers,
               ratio, p16.activations + p16.logits, p32.activations + p32.logits);
    }
}

/* The bf16 plan against its layout written out here (not gpt.c's functions): every tensor 64-byte
 * aligned; the products' operand activations (ln1, qkv, atty, ln2, fch, fch_gelu and lnf) 2 bytes
 * an element, everything else 4; the weights' bf16 copy 2 bytes a parameter (each fp32 tensor
 * padded to 16 floats), one block. Kept: the residual streams (none: all L + 1; every:K: one per
 * segment and the final LayerNorm's input), the tail (lnf, its mean and rstd, one classifier chunk
 * of logits, the losses, dlnf), under none every layer's slot; the recompute scratch: K slots, the
 * K - 1 streams inside a segment and the check buffer; selective storage takes ln1, ln2 and
 * fch_gelu out of the slots into one shared set counted with the recompute scratch. */
static size_t b64(size_t bytes) { return (bytes + 63) / 64 * 64; }

static void test_plan_layout_formula(const Case* k) {
    const GPTConfig* c = &k->c;
    size_t BT = (size_t)k->B * k->T, C = c->channels, NH = c->num_heads, L = c->num_layers;
    size_t QKV = (size_t)(c->num_heads + 2 * c->num_kv_heads) * (C / NH), Vp = c->padded_vocab_size;
    /* the documented chunk: 4C floats a position, at least 1024 rows, at most BT */
    size_t rows = 4 * BT * C / Vp;
    if (rows < 1024) rows = 1024;
    if (rows > BT) rows = BT;
    size_t resid = b64(BT * C * 4);
    size_t tail = b64(BT * C * 2) + b64(BT * 4) + b64(BT * 4) + b64(rows * Vp * 4) + b64(BT * 4) +
                  b64(BT * C * 4);
    /* ln1, ln2, fch_gelu; then the means and rstds, qkv, atty, lse, resid2, fch */
    size_t shared = b64(BT * C * 2) + b64(BT * C * 2) + b64(BT * 4 * C * 2);
    size_t others = 4 * b64(BT * 4) + b64(BT * QKV * 2) + b64(BT * C * 2) + b64(BT * NH * 4) +
                    b64(BT * C * 4) + b64(BT * 4 * C * 2);
    const size_t psizes[16] = {Vp * C, (size_t)c->max_seq_len * C, L * C, L * C, L * QKV * C,
                               L * QKV, L * C * C, L * C, L * C, L * C, L * 4 * C * C, L * 4 * C,
                               L * 4 * C * C, L * C, C, C};
    size_t pfloats = 0;
    for (int i = 0; i < 16; i++) pfloats += (psizes[i] + 15) / 16 * 16;
    size_t wop = b64(pfloats * 2);
    const struct { int every, sel; const char* name; } ps[] = {
        {0, 0, "none"}, {1, 0, "layer"}, {2, 0, "every2"}, {0, 1, "selective"},
        {1, 1, "selective_layer"}, {2, 1, "selective_every2"}};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
        RecomputePolicy p = {ps[i].every, 0, CHECK_WARN, ps[i].sel};
        size_t slot = others + (ps[i].sel ? 0 : shared);
        size_t K = ps[i].every == 0 ? L : ((size_t)ps[i].every < L ? (size_t)ps[i].every : L);
        size_t streams = ps[i].every == 0 ? L + 1 : (L + K - 1) / K + 1;
        size_t kept = streams * resid + tail + (ps[i].every == 0 ? L * slot : 0);
        size_t layer = ps[i].every == 0 ? L * slot : 0;
        size_t rec = (ps[i].every == 0 ? 0 : K * slot + K * resid) + (ps[i].sel ? shared : 0);
        GPTPlan plan;
        char err[256], name[160];
        int rc = gpt_plan(c, k->B, k->T, &p, bf16(), omp_get_max_threads(), &plan, err);
        snprintf(name, sizeof(name), "bf16_plan_equals_the_layout_formula[%s %s]", k->name,
                 ps[i].name);
        expect(rc == 0 && plan.activations + plan.logits == kept && plan.recompute == rec &&
               plan.layer_acts == layer && plan.resid == streams * resid && plan.weights_op == wop,
               name, "plan: kept %zu B, recompute %zu B, layers %zu B, streams %zu B, bf16 weights "
               "%zu B; formula: %zu, %zu, %zu, %zu, %zu B", plan.activations + plan.logits,
               plan.recompute, plan.layer_acts, plan.resid, plan.weights_op, kept, rec, layer,
               streams * resid, wop);
    }
}

/* ---- 7. attention statistics --------------------------------------------------------------- */

static void test_attn_stats(const Case* k, const float* w) {
    int B = 2, T = 37, NH = 4, NKV = 2, HD = 16, QKV = (NH + 2 * NKV) * HD, C = NH * HD;
    size_t nq = (size_t)B * T * QKV, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = malloc(nq * 4), *o1 = malloc(no * 4), *o2 = malloc(no * 4), *l1 = malloc(nl * 4),
          *l2 = malloc(nl * 4);
    for (size_t i = 0; i < nq; i++) qkv[i] = (float)(2.0 * test_normal());
    Dropout dr = dropout_make(0.2);
    float st[3];
    attention_forward(o1, l1, qkv, B, T, NH, NKV, HD, 3, 77, dr);
    attention_forward_stats(o2, l2, qkv, B, T, NH, NKV, HD, 3, 77, dr, st);
    double smax = 0, lmin = INFINITY, lmax = -INFINITY, sigma = 1.0 / sqrt((double)HD);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++) {
                    const float* q = qkv + ((size_t)b * T + i) * QKV + (size_t)h * HD;
                    const float* kk = qkv + ((size_t)b * T + j) * QKV + (size_t)(NH + h / (NH / NKV)) * HD;
                    double s = 0;
                    for (int d = 0; d < HD; d++) s += (double)q[d] * kk[d];
                    smax = fmax(smax, fabs(s * sigma));
                }
    for (size_t i = 0; i < nl; i++) { lmin = fmin(lmin, l1[i]); lmax = fmax(lmax, l1[i]); }
    int same = memcmp(o1, o2, no * 4) == 0 && memcmp(l1, l2, nl * 4) == 0;
    double se = fabs(st[0] - smax) / smax;
    expect(same && se < 1e-5 && st[1] == (float)lmin && st[2] == (float)lmax,
           "attn_stats_come_from_the_forward_itself",
           "outputs bitwise the plain forward's: %s; max |s| %.7g vs float64 %.7g (rel %.1e); LSE "
           "range [%.7g, %.7g] vs the output's [%.7g, %.7g]", same ? "yes" : "no", st[0], smax, se,
           st[1], st[2], lmin, lmax);
    free(qkv); free(o1); free(o2); free(l1); free(l2);

    /* a model's statistics: a training forward fills them; the recompute of the backward adds
     * nothing (sentinels written after the forward stay) */
    RecomputePolicy layer = {1, 0, CHECK_WARN, 0};
    GPT m = model_at(k, layer, bf16(), w);
    char err[256];
    int rc = gpt_set_attn_stats(&m, 1, err);
    gpt_zero_grad(&m);
    gpt_forward(&m, k->in[0], k->tg[0], k->B, k->T, 0, 0, 1);
    int L = k->c.num_layers, filled = 1;
    for (int l = 0; l < L; l++)
        filled &= m.attn_stats[3 * l] > 0 && isfinite(m.attn_stats[3 * l + 1]) &&
                  m.attn_stats[3 * l + 1] <= m.attn_stats[3 * l + 2];
    for (int l = 0; l < L; l++) {
        m.attn_stats[3 * l] = -1.0f;
        m.attn_stats[3 * l + 1] = 1e30f;
        m.attn_stats[3 * l + 2] = -1e30f;
    }
    gpt_backward(&m, 1.0f / (float)(k->B * k->T));
    int kept = 1;
    for (int l = 0; l < L; l++)
        kept &= m.attn_stats[3 * l] == -1.0f && m.attn_stats[3 * l + 1] == 1e30f &&
                m.attn_stats[3 * l + 2] == -1e30f;
    expect(rc == 0 && filled && kept, "attn_stats_logged_once_not_by_the_recompute",
           "set %d; the forward filled every layer: %s; after a backward that recomputed every "
           "layer the statistics are untouched: %s", rc, filled ? "yes" : "no", kept ? "yes" : "no");
    gpt_free(&m);
}

/* ---- 8. the attention's operand rounding ------------------------------------------------------ */

/* attention_round_operands_bf16 (the bf16 twin's P, dO, m p scale and dS roundings, 16 lanes at a
 * time where the CPU can) against sg_bf16_round element by element: the rounding's edge cases at
 * every position of a vector and in the scalar tail, among random values */
static void test_operand_rounding(void) {
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3f807fffu,
                                       0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x807fffffu,
                                       0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                       0xffc00001u, 0x7f800001u, 0x00008000u, 0x00018000u};
    const size_t ns = sizeof(special) / sizeof(special[0]);
    size_t bad = 0, total = 0;
    uint32_t rng = 12345;
    for (size_t n = 1; n <= 70; n++) {
        float x[70], want[70];
        for (size_t i = 0; i < n; i++) {
            rng = rng * 1664525u + 1013904223u;
            uint32_t bits = (i + n) % 3 == 0 ? special[(i * 7 + n) % ns] : rng;
            memcpy(&x[i], &bits, 4);
            want[i] = sg_bf16_round(x[i]);
        }
        attention_round_operands_bf16(x, n);
        for (size_t i = 0; i < n; i++, total++) bad += memcmp(&x[i], &want[i], 4) != 0;
    }
    expect(bad == 0, "bf16_attention_operand_rounding_is_sg_bf16_round",
           "%zu of %zu elements differ (lengths 1..70: whole vectors and tails; ties both ways, "
           "carries, overflow, denormals, infinities, NaNs)", bad, total);
}

/* ---- 8. the classifier in chunks ------------------------------------------------------------ */

/* One step on be with the classifier in chunks of `rows` rows, its gradient in the forward
 * (fused: gpt_set_loss_scale) or in the backward (each chunk's logits computed again). Returns the
 * loss; *grads gets a copy of every gradient. */
static float classifier_step(const Case* k, const Backend* be, const float* w, int rows, int fused,
                             float** grads) {
    GPT m;
    char err[256];
    RecomputePolicy none = {0, 0, CHECK_WARN, 0};
    if (gpt_build_rows(&m, &k->c, k->B, k->T, &none, be, rows, err) != 0) {
        fprintf(stderr, "test_bf16: gpt_build_rows: %s\n", err);
        exit(2);
    }
    size_t n = block_floats(&m);
    memcpy(m.host_params_memory, w, n * sizeof(float));
    gpt_to_backend(&m);
    set_site_dropout(&m, 0x5eedULL, SITE_RATES);
    float dloss = 1.0f / (float)(k->B * k->T);
    gpt_zero_grad(&m);
    if (fused) gpt_set_loss_scale(&m, dloss);
    float loss = gpt_forward(&m, k->in[0], k->tg[0], k->B, k->T, 0, 3, 1);
    gpt_backward(&m, dloss);
    *grads = malloc(n * sizeof(float));
    memcpy(*grads, m.grads_memory, n * sizeof(float));
    gpt_free(&m);
    return loss;
}

/* The classifier in 1, 2 and 3 chunks (N, N/2 and 20 rows of N = 48: 20, 20, 8), its gradient in
 * the forward and in the backward, in fp32 and in bf16: the loss and every gradient the bits of
 * the one chunk with the gradient in the backward (a chunk's rows start C elements of the
 * activation's type apart; each row's logits, loss and dlnf are its own, and the product
 * continues wte's gradient chain across the chunks). */
static void test_classifier_chunks(const Case* k, const float* w) {
    int N = k->B * k->T;
    const int rows[3] = {N, N / 2, 20};
    const char* prec[2] = {"fp32", "bf16"};
    for (int p = 0; p < 2; p++) {
        const Backend* be = backend_lookup("cpu", prec[p]);
        GPT probe = build_on(k, (RecomputePolicy){0, 0, CHECK_OFF, 0}, be);
        size_t n = block_floats(&probe);
        gpt_free(&probe);
        float* ref;
        float ref_loss = classifier_step(k, be, w, N, 0, &ref);
        int bad = 0, runs = 0;
        size_t worst = 0;
        char detail[400] = "";
        for (int i = 0; i < 3; i++)
            for (int fused = 0; fused < 2; fused++) {
                float* g;
                float loss = classifier_step(k, be, w, rows[i], fused, &g);
                size_t d = differ(g, ref, n);
                int same_loss = memcmp(&loss, &ref_loss, sizeof(float)) == 0;
                if (d > worst) worst = d;
                if (d != 0 || !same_loss) {
                    if (bad == 0)
                        snprintf(detail, sizeof(detail), "; first: %d chunk(s) %s, loss %.7g vs "
                                 "%.7g, %zu gradient floats differ", (N + rows[i] - 1) / rows[i],
                                 fused ? "fused" : "in the backward", loss, ref_loss, d);
                    bad++;
                }
                runs++;
                free(g);
            }
        char name[160];
        snprintf(name, sizeof(name), "%s_classifier_in_1_2_3_chunks_bitwise_equals_one_chunk[%s]",
                 prec[p], k->name);
        expect(bad == 0 && isfinite(ref_loss), name,
               "chunks of %d, %d and %d of %d rows, the gradient in the forward and in the "
               "backward: %d of %d runs differ (at most %zu of %zu gradient floats); loss %.7f%s", rows[0],
               rows[1], rows[2], N, bad, runs, worst, n, ref_loss, detail);
        free(ref);
    }
}

int main(void) {
    test_operand_rounding();
    Case k = make_case("L3_NH4_KV2_C32_T24", 3, 4, 2, 32, 70, 2, 24);
    float* w = random_weights(&k);
    test_policies(&k, w);
    test_threads(&k, w);
    test_reference();
    test_masks(&k, w);
    test_weight_copy(&k, w);
    test_memory(&k);
    test_plan_layout_formula(&k);
    {   /* B*T = 39, C = 24: the 64-byte rounding shows in every tensor of B*T rows */
        Case odd = make_case("L2_NH3_KV1_C24_B3_T13", 2, 3, 1, 24, 50, 3, 13);
        test_plan_layout_formula(&odd);
        for (int i = 0; i < 2; i++) { free(odd.in[i]); free(odd.tg[i]); }
    }
    test_attn_stats(&k, w);
    test_classifier_chunks(&k, w);
    free(w);
    for (int i = 0; i < 2; i++) { free(k.in[i]); free(k.tg[i]); }
    return test_finish();
}
