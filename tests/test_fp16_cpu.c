/* tests/test_fp16_cpu.c — --precision fp16 on the CPU (README "Precision"), as a specification:
 *   1. each fp16 op is the fp32 table's op (cpu/ops_cpu.c, attention/flash_cpu.c) with fp16
 *      rounding at exactly the bf16 table's sites: the LayerNorm, GELU and RoPE outputs and a
 *      product's fp16 output are the fp32 op's values rounded once (util/fp16.h), bit for bit; a
 *      product reads its fp16 operands exactly and its backward takes dout rounded to fp16 (the
 *      fp32 product of the rounded dout, bit for bit; without that rounding the bits differ); and
 *      the fp32 products themselves are within fp32 accumulation of a float64 reference;
 *   2. the attention twin, on fp16 q, k, v with dropout: the output within the P-rounding bound
 *      of the float64 attention and the LSE within fp32's, while it differs from the fp32
 *      attention rounded (P is rounded to fp16 before P.V); its backward within its bound of the
 *      float64 backward and not the fp32 backward's bits (dO, m p scale and dS rounded); the
 *      operand rounding is sg_fp16_round over every length and edge case;
 *   3. the weights' fp16 copy is the masters rounded, after AdamW and after gpt_to_backend;
 *   4. every recompute policy (none, layer, every:2, selective, selective+layer,
 *      selective+every:2) gives the losses, weights and AdamW moments of `none`, bit for bit, over
 *      TRAIN_STEPS steps with dropout at every site, the loss gradient scaled by 2^16 and the
 *      gradients unscaled through gpt_clip_grads_unscaled, as ./train does in fp16;
 *   5. a step's gradient with dropout is within FP16_GRAD_TOL of the float64 model
 *      (tests/ref_gpt.c), the loss scaled by 2^16 and unscaled; another step's masks are far.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include "model/gpt.h"
#include "model/ops.h"
#include "cpu/ops_bf16_cpu.h"
#include "attention/attention.h"
#include "util/fp16.h"
#include "tests/test.h"
#include "tests/model_util.h"
#include "tests/model_case.h"
#include "tests/ref_gpt.h"
#include "tests/ref_ops.h"
#include "tests/ref_attention.h"

#define TRAIN_STEPS 6
#define LOSS_SCALE 65536.0f
/* Per-tensor relative gradient error against float64 at one step: each fp16 rounding is at most
 * 2^-11 relative, 8x finer than bf16 (test_bf16.c allows 5e-2 there; measured here near 1.2e-3,
 * where bf16 roundings would land near 1e-2); a wrong mask moves the
 * gradients by ~1. */
#define FP16_GRAD_TOL 4e-3

static const Backend* fp16(void) { return backend_lookup("cpu", "fp16"); }

static uint32_t rng = 0x1234567u;
static float urand(void) {   /* uniform in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) * (1.0 / 8388608.0)) - 1.0f;
}

static size_t differ16(const uint16_t* a, const uint16_t* b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += a[i] != b[i];
    return d;
}
/* n random fp16 values of magnitude up to amp, and their exact fp32 values */
static void random_fp16(uint16_t* h, float* f, size_t n, float amp) {
    for (size_t i = 0; i < n; i++) {
        h[i] = sg_fp16_from_float(amp * urand());
        f[i] = sg_fp16_to_float(h[i]);
    }
}
static void round_all(uint16_t* h, const float* f, size_t n) {
    for (size_t i = 0; i < n; i++) h[i] = sg_fp16_from_float(f[i]);
}

/* ---- 1. the element-wise ops and the products ----------------------------------------------- */

static void test_elementwise(void) {
    const int N = 37, C = 48;
    const size_t n = (size_t)N * C;
    float* x = malloc(n * sizeof(float));
    float* w = malloc(C * sizeof(float));
    float* b = malloc(C * sizeof(float));
    float* o32 = malloc(n * sizeof(float));
    uint16_t* o16 = malloc(n * sizeof(uint16_t));
    uint16_t* want = malloc(n * sizeof(uint16_t));
    float m32[37], r32[37], m16[37], r16[37];
    for (size_t i = 0; i < n; i++) x[i] = 3.0f * urand() + 0.5f;
    for (int c = 0; c < C; c++) { w[c] = 1.0f + 0.3f * urand(); b[c] = 0.2f * urand(); }
    layernorm_forward(o32, m32, r32, x, w, b, N, C);
    layernorm_forward_fp16(o16, m16, r16, x, w, b, N, C);
    round_all(want, o32, n);
    size_t d = differ16(o16, want, n), ds = differ(m16, m32, N) + differ(r16, r32, N);
    expect(d == 0 && ds == 0, "fp16_layernorm_is_the_fp32_op_rounded_once",
           "%zu of %zu outputs differ from the fp32 LayerNorm rounded to fp16; %zu statistics differ",
           d, n, ds);

    /* GELU: forward rounded, backward fp32 on the fp16 input */
    uint16_t* h = malloc(n * sizeof(uint16_t));
    float* hf = malloc(n * sizeof(float));
    float* g32 = malloc(n * sizeof(float));
    float* g16 = malloc(n * sizeof(float));
    random_fp16(h, hf, n, 4.0f);
    gelu_forward(o32, hf, n);
    gelu_forward_fp16(o16, h, n);
    round_all(want, o32, n);
    d = differ16(o16, want, n);
    for (size_t i = 0; i < n; i++) x[i] = urand();
    gelu_backward(g32, hf, x, n);
    gelu_backward_fp16(g16, h, x, n);
    size_t db = differ(g16, g32, n);
    expect(d == 0 && db == 0, "fp16_gelu_is_the_fp32_op_on_fp16_inputs_forward_rounded",
           "forward: %zu of %zu differ from the fp32 GELU rounded; backward: %zu differ", d, n, db);

    /* RoPE: q and k rotated in fp32 and rounded again, v untouched */
    const int B = 2, T = 5, NH = 2, NKV = 1, HD = 8, H2 = HD / 2, Q = (NH + 2 * NKV) * HD;
    const size_t nq = (size_t)B * T * Q;
    float cs[5 * 4], sn[5 * 4];
    for (int t = 0; t < T; t++)
        for (int k = 0; k < H2; k++) {
            double a = t * pow(10000.0, -2.0 * k / HD);
            cs[t * H2 + k] = (float)cos(a);
            sn[t * H2 + k] = (float)sin(a);
        }
    int bad = 0;
    for (int layout = 0; layout < 2; layout++) {
        random_fp16(h, hf, nq, 2.0f);
        uint16_t* v0 = malloc(nq * sizeof(uint16_t));
        memcpy(v0, h, nq * sizeof(uint16_t));
        rope_forward(hf, cs, sn, B, T, NH, NKV, HD, layout, 0);
        rope_forward_fp16(h, cs, sn, B, T, NH, NKV, HD, layout, 0);
        round_all(want, hf, nq);
        size_t dr = differ16(h, want, nq), moved = differ16(h, v0, nq);
        if (dr != 0 || moved == 0) {
            bad++;
            printf("# rope layout %d: %zu of %zu differ from the fp32 rotation rounded; %zu moved\n",
                   layout, dr, nq, moved);
        }
        free(v0);
    }
    expect(bad == 0, "fp16_rope_is_the_fp32_rotation_rounded_once",
           "both layouts: q and k rotated, the fp32 rotation's values rounded, v untouched");
    free(x); free(w); free(b); free(o32); free(o16); free(want); free(h); free(hf); free(g32);
    free(g16);
}

/* |got - ref| within fp32 accumulation of K terms: (K + 2) 2^-24 sum |term| */
static int within_f32_chain(float got, double ref, double abs_sum, int K) {
    return fabs((double)got - ref) <= (K + 2) * 0x1p-24 * abs_sum + 1e-30;
}

static void test_products(void) {
    const int N = 29, C = 40, OC = 24;
    const size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    uint16_t *inp = malloc(ni * 2), *wt = malloc(nw * 2), *o16 = malloc(no * 2), *want = malloc(no * 2);
    float *inpf = malloc(ni * 4), *wtf = malloc(nw * 4), *bias = malloc(OC * 4);
    float *o32 = malloc(no * 4), *r32 = malloc(no * 4);
    random_fp16(inp, inpf, ni, 2.0f);
    random_fp16(wt, wtf, nw, 0.5f);
    for (int k = 0; k < OC; k++) bias[k] = 0.1f * urand();
    /* forward, fp32 out and fp16 out */
    matmul_forward_fp16(o32, DT_FP32, inp, wt, bias, N, C, OC);
    matmul_forward(r32, inpf, wtf, bias, N, C, OC);
    size_t d32 = differ(o32, r32, no);
    matmul_forward_fp16(o16, DT_FP16, inp, wt, bias, N, C, OC);
    round_all(want, r32, no);
    size_t d16 = differ16(o16, want, no);
    size_t off = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < OC; j++) {
            double s = bias[j], a = fabs(bias[j]);
            for (int k = 0; k < C; k++) {
                double t = (double)inpf[i * C + k] * wtf[j * C + k];
                s += t;
                a += fabs(t);
            }
            off += !within_f32_chain(o32[i * OC + j], s, a, C);
        }
    expect(d32 == 0 && d16 == 0 && off == 0, "fp16_product_forward_reads_fp16_exactly_fp32_sums",
           "fp32 out: %zu of %zu differ from the fp32 product of the widened operands; fp16 out: "
           "%zu differ from it rounded once; %zu outside fp32 accumulation of float64", d32, no,
           d16, off);

    /* backward: dout rounded to fp16 as the products read it; dbias from the fp32 dout */
    float *dout = malloc(no * 4), *doutr = malloc(no * 4);
    float *dinp = malloc(ni * 4), *rdinp = malloc(ni * 4), *udinp = malloc(ni * 4);
    float *dw = malloc(nw * 4), *rdw = malloc(nw * 4), *udw = malloc(nw * 4);
    float db[24], rdb[24], udb[24];
    for (size_t i = 0; i < no; i++) { dout[i] = urand(); doutr[i] = sg_fp16_round(dout[i]); }
    for (size_t i = 0; i < nw; i++) dw[i] = rdw[i] = udw[i] = 0.01f * urand();
    for (int k = 0; k < OC; k++) db[k] = rdb[k] = udb[k] = 0.01f * urand();
    matmul_backward_fp16(dinp, dw, db, dout, inp, wt, N, C, OC);
    matmul_backward(rdinp, rdw, NULL, doutr, inpf, wtf, N, C, OC);
    matmul_backward(NULL, udw, rdb, dout, inpf, wtf, N, C, OC);   /* dbias: the fp32 dout's */
    matmul_backward(udinp, udw, udb, dout, inpf, wtf, N, C, OC);
    size_t ddi = differ(dinp, rdinp, ni), ddw = differ(dw, rdw, nw), ddb = differ(db, rdb, OC);
    size_t unrounded = differ(dinp, udinp, ni);
    size_t offb = 0;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            double s = 0, a = 0;
            for (int j = 0; j < OC; j++) {
                double t = (double)doutr[i * OC + j] * wtf[j * C + c];
                s += t;
                a += fabs(t);
            }
            offb += !within_f32_chain(dinp[i * C + c], s, a, OC);
        }
    expect(ddi == 0 && ddw == 0 && ddb == 0 && unrounded > ni / 2 && offb == 0,
           "fp16_product_backward_rounds_dout_to_fp16_only",
           "dinp %zu, dweight %zu, dbias %zu differ from the fp32 products of dout rounded to fp16 "
           "(dbias: of the fp32 dout); %zu of %zu dinp differ from those of the unrounded dout; "
           "%zu outside fp32 accumulation of float64", ddi, ddw, ddb, unrounded, ni, offb);
    free(inp); free(wt); free(o16); free(want); free(inpf); free(wtf); free(bias); free(o32);
    free(r32); free(dout); free(doutr); free(dinp); free(rdinp); free(udinp); free(dw); free(rdw);
    free(udw);
}

/* ---- 2. attention --------------------------------------------------------------------------- */

static void test_attention(void) {
    const int B = 2, T = 40, NH = 4, NKV = 2, HD = 16, Q = (NH + 2 * NKV) * HD;
    const size_t nq = (size_t)B * T * Q, no = (size_t)B * T * NH * HD, nl = (size_t)B * NH * T;
    const Dropout drop = dropout_make(0.2);
    const uint64_t seed = 0xa77e11ULL;
    const uint32_t g0 = 3;
    uint16_t *q16 = malloc(nq * 2), *o16 = malloc(no * 2), *want = malloc(no * 2);
    float *qf = malloc(nq * 4), *o32 = malloc(no * 4), *of16 = malloc(no * 4);
    float *lse16 = malloc(nl * 4), *lse32 = malloc(nl * 4);
    double *qd = malloc(nq * 8), *od = malloc(no * 8), *ld = malloc(nl * 8), *od2 = malloc(no * 8);
    random_fp16(q16, qf, nq, 1.5f);
    for (size_t i = 0; i < nq; i++) qd[i] = qf[i];
    attention_forward_fp16(o16, lse16, q16, B, T, NH, NKV, HD, g0, seed, drop);
    attention_forward(o32, lse32, qf, B, T, NH, NKV, HD, g0, seed, drop);
    ref_attention_forward(od, ld, qd, B, T, NH, NKV, HD, g0, seed, drop);
    ref_attention_forward(od2, ld, qd, B, T, NH, NKV, HD, g0, seed ^ 1, drop);
    ref_attention_forward(od, ld, qd, B, T, NH, NKV, HD, g0, seed, drop);
    round_all(want, o32, no);
    size_t not_fp32 = differ16(o16, want, no);
    /* P in [0, 1] rounded to fp16 (2^-11 relative) and scaled 1/(1-p), summed over |v| <= 1.5,
     * then the output rounded: 2^-11 * scale * sum_j p_ij |v_j| <= 2^-11 * 1.5 * scale, plus a
     * half ulp of the output */
    double worst = 0, worst_other = 0, lworst = 0;
    for (size_t i = 0; i < no; i++) {
        of16[i] = sg_fp16_to_float(o16[i]);
        double bound = 0x1p-11 * 1.5 * drop.scale + 0x1p-11 * fabs(od[i]) + 1e-6;
        double e = fabs(of16[i] - od[i]) / bound, e2 = fabs(of16[i] - od2[i]) / bound;
        if (e > worst) worst = e;
        if (e2 > worst_other) worst_other = e2;
    }
    for (size_t i = 0; i < nl; i++) {
        double e = fabs(lse16[i] - ld[i]) / (1e-6 * (1.0 + fabs(ld[i])));
        if (e > lworst) lworst = e;
    }
    expect(worst <= 1.0 && lworst <= 1.0 && not_fp32 > no / 20 && worst_other > 20,
           "fp16_attention_forward_rounds_p_within_its_bound",
           "worst error %.3g x the P-rounding bound, LSE %.3g x 1e-6; %zu of %zu outputs are not "
           "the fp32 attention's rounded (P rounded before P.V); another seed's masks %.3g x",
           worst, lworst, not_fp32, no, worst_other);

    /* backward: the fp16 forward's out and lse, dout fp32 */
    float* dout = malloc(no * 4);
    for (size_t i = 0; i < no; i++) dout[i] = urand();
    int th = omp_get_max_threads();
    float* scr = malloc(attention_backward_scratch_floats_fp16(B, T, NH, NKV, HD, th) * 4 + 64);
    float* scr32 = malloc(attention_backward_scratch_floats(B, T, NH, NKV, HD, th) * 4 + 64);
    float *dq16 = malloc(nq * 4), *dq32 = malloc(nq * 4);
    double *dqd = malloc(nq * 8), *doutd = malloc(no * 8);
    attention_backward_fp16(dq16, scr, dout, q16, o16, lse16, B, T, NH, NKV, HD, g0, seed, drop);
    attention_backward(dq32, scr32, dout, qf, of16, lse16, B, T, NH, NKV, HD, g0, seed, drop);
    for (size_t i = 0; i < no; i++) doutd[i] = dout[i];
    ref_attention_backward(dqd, doutd, qd, B, T, NH, NKV, HD, g0, seed, drop);
    double num = 0, den = 0;
    for (size_t i = 0; i < nq; i++) {
        num += (dq16[i] - dqd[i]) * (dq16[i] - dqd[i]);
        den += dqd[i] * dqd[i];
    }
    double rel = sqrt(num / den);
    size_t d = differ(dq16, dq32, nq);
    expect(rel < 5e-3 && d > nq / 20, "fp16_attention_backward_rounds_its_operands",
           "dqkv relative L2 error %.3g against float64 (bound 5e-3); %zu of %zu differ from the "
           "fp32 backward's on the same inputs (dO, m p scale, dS rounded)", rel, d, nq);

    /* the operand rounding over lengths 1..70 and fp16's edge cases */
    static const uint32_t special[] = {0x477ff000u, 0x477fefffu, 0x477fe000u, 0x38800000u,
                                       0x33800000u, 0x33000000u, 0x33000001u, 0x387fc000u,
                                       0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                       0x3f801000u, 0x3f803000u, 0x3f800fffu, 0xc77ff000u};
    const size_t ns = sizeof(special) / sizeof(special[0]);
    size_t badr = 0, total = 0;
    for (size_t n = 1; n <= 70; n++) {
        float xr[70], wr[70];
        for (size_t i = 0; i < n; i++) {
            rng = rng * 1664525u + 1013904223u;
            uint32_t bits = (i + n) % 3 == 0 ? special[(i * 7 + n) % ns] : (rng & 0x8fffffffu) | 0x30000000u;
            memcpy(&xr[i], &bits, 4);
            wr[i] = sg_fp16_round(xr[i]);
        }
        attention_round_operands_fp16(xr, n);
        for (size_t i = 0; i < n; i++, total++) badr += memcmp(&xr[i], &wr[i], 4) != 0;
    }
    expect(badr == 0, "fp16_attention_operand_rounding_is_sg_fp16_round",
           "%zu of %zu differ (ties, the overflow threshold 65520, denormals, infinities, NaN)",
           badr, total);
    free(q16); free(o16); free(want); free(qf); free(o32); free(of16); free(lse16); free(lse32);
    free(qd); free(od); free(ld); free(od2); free(dout); free(scr); free(scr32); free(dq16);
    free(dq32); free(dqd); free(doutd);
}

/* ---- models: 3. the weights' copy, 4. recompute, 5. the gradient ---------------------------- */

static GPT model_at(const Case* k, RecomputePolicy p, const float* w) {
    GPT m = build_on(k, p, fp16());
    memcpy(m.host_params_memory, w, block_floats(&m) * sizeof(float));
    gpt_to_backend(&m);
    set_site_dropout(&m, 0x5eedULL, SITE_RATES);
    gpt_set_drop_path(&m, 0.15);
    return m;
}
/* one step's gradient at LOSS_SCALE times the mean loss, as ./train computes it in fp16 */
static float step_grad(GPT* m, const Case* k, int batch, uint32_t step, int* mismatches) {
    float dloss = LOSS_SCALE / (float)(k->B * k->T);
    gpt_zero_grad(m);
    gpt_set_loss_scale(m, dloss);
    float loss = gpt_forward(m, k->in[batch], k->tg[batch], k->B, k->T, step * (uint32_t)k->B,
                             step, 1);
    int mm = gpt_backward(m, dloss);
    if (mismatches != NULL) *mismatches += mm;
    return loss;
}
static void test_weight_copy(const Case* k, const float* w) {
    GPT m = model_at(k, (RecomputePolicy){0, 0, CHECK_OFF, 0}, w);
    size_t nf = block_floats(&m), bad0 = 0, bad1 = 0;
    const uint16_t* cp = m.wop_memory;
    for (size_t i = 0; i < nf; i++) bad0 += cp[i] != sg_fp16_from_float(m.params_memory[i]);
    step_grad(&m, k, 0, 0, NULL);
    gpt_clip_grads_unscaled(&m, 1.0f, LOSS_SCALE);
    gpt_adamw(&m, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    for (size_t i = 0; i < nf; i++) bad1 += cp[i] != sg_fp16_from_float(m.params_memory[i]);
    size_t moved = differ(m.params_memory, w, nf);
    expect(cp != NULL && m.act_dtype == DT_FP16 && bad0 == 0 && bad1 == 0 && moved > nf / 2,
           "fp16_weight_copy_is_the_masters_rounded",
           "after gpt_to_backend %zu, after AdamW %zu of %zu differ (%zu masters moved)", bad0,
           bad1, nf, moved);
    gpt_free(&m);
}

typedef struct {
    float loss[TRAIN_STEPS];
    float *params, *mom, *var;
    int mismatches;
} Run;

static Run train(const Case* k, RecomputePolicy p, const float* w) {
    GPT m = model_at(k, p, w);
    Run r;
    r.mismatches = 0;
    for (int s = 0; s < TRAIN_STEPS; s++) {
        r.loss[s] = step_grad(&m, k, s % 2, (uint32_t)s, &r.mismatches);
        gpt_clip_grads_unscaled(&m, 0.5f, LOSS_SCALE);
        gpt_adamw(&m, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
    }
    copy_trained(&m, &r.params, &r.mom, &r.var);
    gpt_free(&m);
    return r;
}
static void free_run(Run* r) { free(r->params); free(r->mom); free(r->var); }

static void test_policies(const Case* k, const float* w) {
    RecomputePolicy none = {0, 0, CHECK_WARN, 0};
    Run ref = train(k, none, w);
    GPT probe = build_on(k, none, fp16());
    size_t nf = block_floats(&probe);
    gpt_free(&probe);
    const struct { int every, sel; const char* name; } ps[] = {
        {1, 0, "layer"}, {2, 0, "every2"}, {0, 1, "selective"}, {1, 1, "selective_layer"},
        {2, 1, "selective_every2"}};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
        RecomputePolicy p = {ps[i].every, 0, CHECK_WARN, ps[i].sel};
        Run r = train(k, p, w);
        size_t dl = differ(r.loss, ref.loss, TRAIN_STEPS);
        size_t dp = differ(r.params, ref.params, nf), dm = differ(r.mom, ref.mom, nf),
               dv = differ(r.var, ref.var, nf);
        char name[160];
        snprintf(name, sizeof(name), "fp16_%s_equals_none_bitwise_over_%d_scaled_adamw_steps[%s]",
                 ps[i].name, TRAIN_STEPS, k->name);
        expect(dl == 0 && dp == 0 && dm == 0 && dv == 0 && r.mismatches == 0 &&
               isfinite(ref.loss[TRAIN_STEPS - 1]), name,
               "losses differ %zu, weights %zu, m %zu, v %zu of %zu; value-check failures %d; "
               "last loss %.7f vs %.7f", dl, dp, dm, dv, nf, r.mismatches,
               r.loss[TRAIN_STEPS - 1], ref.loss[TRAIN_STEPS - 1]);
        free_run(&r);
    }
    free_run(&ref);
}

static void test_reference(void) {
    Case k = make_case("L2_NH4_KV2_C32", 2, 4, 2, 32, 40, 2, 9);
    GPT m = build_on(&k, (RecomputePolicy){0, 0, CHECK_OFF, 0}, fp16());
    randomize_weights(&m, 0.15);
    gpt_to_backend(&m);
    uint64_t master = 0x5eed0002ULL;
    uint32_t step = 3, g0 = 5;
    set_site_dropout(&m, master, SITE_RATES);
    float dloss = LOSS_SCALE / (float)(k.B * k.T);
    gpt_zero_grad(&m);
    gpt_set_loss_scale(&m, dloss);
    float loss = gpt_forward(&m, k.in[0], k.tg[0], k.B, k.T, g0, step, 1);
    gpt_backward(&m, dloss);
    /* the unscaled gradient, as AdamW reads it: grads * gpt_grad_scale */
    float norm = gpt_clip_grads_unscaled(&m, 0.0f, LOSS_SCALE);
    float gs = gpt_grad_scale(&m);
    for (size_t i = 0; i < m.num_parameters; i++) m.grads_memory[i] *= gs;
    double* w = malloc(m.num_parameters * sizeof(double));
    double* gref = malloc(m.num_parameters * sizeof(double));
    tensors_to_double(&m, &m.params, w);
    const SiteRates r = SITE_RATES;
    double lref = ref_gpt_loss_and_grad(&k.c, w, gref, k.in[0], k.tg[0], k.B, k.T, g0, master,
                                        step, r.embd, r.attn, r.resid);
    double rn = 0;
    for (size_t i = 0; i < m.num_parameters; i++) rn += gref[i] * gref[i];
    rn = sqrt(rn);
    expect(fabs(loss - lref) / lref < 2e-3 && fabs(norm - rn) / rn < FP16_GRAD_TOL,
           "fp16_loss_and_unscaled_norm_near_float64",
           "fp16 loss %.6f, float64 %.6f; unscaled norm %.6g, float64 %.6g (loss scale %g)", loss,
           lref, norm, rn, (double)LOSS_SCALE);
    double worst = compare_grads(&m, gref, "fp16 L2 dropout", FP16_GRAD_TOL, 1);
    ref_gpt_loss_and_grad(&k.c, w, gref, k.in[0], k.tg[0], k.B, k.T, g0, master, step + 1,
                          r.embd, r.attn, r.resid);
    double other = compare_grads(&m, gref, "fp16 wrong masks", FP16_GRAD_TOL, 0);
    expect(other > FP16_GRAD_TOL && other > 5 * worst, "fp16_vs_reference_detects_wrong_masks",
           "worst per-tensor rel err with the right masks %.2e, with step+1's masks %.2e "
           "(bound %.0e)", worst, other, FP16_GRAD_TOL);
    free(w); free(gref);
    gpt_free(&m);
    free_case(&k);
}

/* 6. where an overflow is reported: the first non-finite gradient in the backward's order of
 * visit (final LayerNorm, layers L-1 down to 0 from the MLP projection down to ln1, wpe, wte) */
static void test_first_nonfinite(const Case* k) {
    RecomputePolicy none = {0, 0, CHECK_OFF, 0};
    GPT m = build_on(k, none, fp16());
    gpt_zero_grad(&m);
    const int L = m.config.num_layers;
    int layer = 99, got[6], lay[6];
    got[0] = gpt_first_nonfinite_grad(&m, &layer); lay[0] = layer;
    size_t per = m.param_sizes[4] / (size_t)L;   /* qkvw of one layer */
    m.grads.qkvw[0 * per + 5] = INFINITY;          /* layer 0 */
    got[1] = gpt_first_nonfinite_grad(&m, &layer); lay[1] = layer;
    m.grads.qkvw[1 * per + 7] = NAN;               /* layer 1: met before layer 0 */
    got[2] = gpt_first_nonfinite_grad(&m, &layer); lay[2] = layer;
    size_t perfc = m.param_sizes[12] / (size_t)L;  /* fcprojw: layer 1's, met before its qkvw */
    m.grads.fcprojw[1 * perfc + perfc - 1] = -INFINITY;
    got[3] = gpt_first_nonfinite_grad(&m, &layer); lay[3] = layer;
    m.grads.wte[3] = NAN;                          /* wte is visited last */
    got[4] = gpt_first_nonfinite_grad(&m, &layer); lay[4] = layer;
    m.grads.lnfb[0] = INFINITY;                    /* the final LayerNorm first of all */
    got[5] = gpt_first_nonfinite_grad(&m, &layer); lay[5] = layer;
    expect(got[0] == -1 && got[1] == 4 && lay[1] == 0 && got[2] == 4 && lay[2] == 1 &&
           got[3] == 12 && lay[3] == 1 && got[4] == 12 && lay[4] == 1 && got[5] == 15 &&
           lay[5] == -1, "fp16_overflow_names_the_first_nonfinite_gradient_of_the_backward",
           "finite: %d; layer 0 qkvw: %d/%d; + layer 1 qkvw: %d/%d; + layer 1 fcprojw: %d/%d; "
           "+ wte: %d/%d; + lnfb: %d/%d (tensor/layer; expected -1, 4/0, 4/1, 12/1, 12/1, 15/-1)",
           got[0], got[1], lay[1], got[2], lay[2], got[3], lay[3], got[4], lay[4], got[5], lay[5]);
    gpt_free(&m);
}

int main(void) {
    test_elementwise();
    test_products();
    test_attention();
    Case k = make_case("L3_NH4_KV2_C32_T24", 3, 4, 2, 32, 70, 2, 24);
    float* w = random_weights(&k);
    test_weight_copy(&k, w);
    test_policies(&k, w);
    test_reference();
    test_first_nonfinite(&k);
    free(w);
    free_case(&k);
    return test_finish();
}
