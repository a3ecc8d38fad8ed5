/* tests/cuda/test_cuda_model.cu — the whole model on the CUDA backend against the CPU backend,
 * through the one orchestrator (model/gpt.c):
 *   1. one training step with dropout 0.1 at every site: loss, every gradient tensor and the
 *      weights after clip + AdamW agree with the CPU's to fp32 tolerance (the masks are the same
 *      bits on both: a wrong mask would show as an error of the order of the dropout itself);
 *   2. on the CUDA backend, every recompute policy gives the loss and gradients of `none` bit for
 *      bit, the value check passes, and the negative control (fresh seeds) fails it and moves the
 *      gradients clearly;
 *   with the model options on too (RoPE in GPT-J pairs, the parallel block, drop-path 0.3);
 *   3. the host copies: weights and AdamW state moved to the host and back are unchanged, and a
 *      model whose weights were written on the CPU runs the same on CUDA;
 *   4. --precision bf16 (the dense products and attention on bf16 operands, fp32 accumulation):
 *      the loss within 1e-2 and every gradient tensor within BF16_GRAD_TOL of the CPU's fp32 step
 *      with the same masks, while the CPU step with other dropout seeds is clearly further off
 *      (so the comparison does see a wrong mask); recompute policies bitwise equal to `none` and
 *      the fresh-seed control caught, as in fp32. Head dim 64 (the tensor-core attention) and 16
 *      (attention on bf16-rounded operands in the fp32 kernel);
 *   5. bf16 storage (the bf16 table keeps ln1, qkv, atty, ln2, fch, fch_gelu, lnf in bf16): three
 *      AdamW steps against the CPU's bf16 table with dropout at distinct rates per site, losses
 *      and gradients close while other masks are far; every recompute policy bitwise equal to
 *      `none` with the model options too (RoPE, parallel block, drop-path); the layers' kept
 *      bytes at most 0.55x fp32's, and the plan the counted build;
 *   6. --precision fp16: the same three steps against the CPU's fp16 table (head dim 64 on the
 *      fp16 tensor cores, and the options case), every recompute policy bitwise equal to `none`,
 *      the plan the counted build, and the overflow locator (gpt_first_nonfinite_grad) reading
 *      the device's gradients: planted infinities and NaNs found where the backward meets them.
 * It builds two ways (tests/cuda/): with nvcc for a GPU (make test-cuda) and as C++ against the
 * emulation (make test-cuda-emu), where it is kept small.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "model/gpt.h"
#include "model/backend.h"
#include "model/mem.h"
#include "cuda/device_memory.h"
#include "tests/test.h"
#include <omp.h>

#define NT NUM_PARAMETER_TENSORS
#define P_DROP 0.1
#define TOL 1e-5

typedef struct {
    GPTConfig c;
    int B, T;
    int* in;
    int* tg;
    double drop_path;   /* stochastic depth (0: off) */
} Case;

static Case make_case(int L, int NH, int NKV, int C, int V, int B, int T) {
    Case k;
    GPTConfig c = {T, V, gpt_pad_vocab(V), L, NH, NKV, C, 0, 0, 0, 0};  /* plain GPT-2 model options */
    k.c = c;
    k.B = B;
    k.T = T;
    k.drop_path = 0.0;
    k.in = (int*)malloc(sizeof(int) * B * T);
    k.tg = (int*)malloc(sizeof(int) * B * T);
    for (int j = 0; j < B * T; j++) {
        k.in[j] = (int)(test_uniform() * V) % V;
        k.tg[j] = (int)(test_uniform() * V) % V;
    }
    return k;
}

/* every < 0: selective storage with segments of -every - 1 layers (-1: selective alone) */
static GPT build_seeded(const Case* k, const Backend* be, int every, int fresh, uint64_t drop_seed) {
    GPT m;
    char err[256];
    int selective = every < 0;
    if (selective) every = -every - 1;
    RecomputePolicy p = {every, fresh, every > 0 ? CHECK_WARN : CHECK_OFF, selective};
    if (gpt_build_on(&m, &k->c, k->B, k->T, &p, be, err) != 0) {
        fprintf(stderr, "test_cuda_model: build: %s\n", err);
        exit(1);
    }
    gpt_init_weights(&m, 1234);
    gpt_set_dropout(&m, drop_seed, P_DROP, P_DROP, P_DROP);
    gpt_set_drop_path(&m, k->drop_path);
    return m;
}

static GPT build(const Case* k, const Backend* be, int every, int fresh) {
    return build_seeded(k, be, every, fresh, 99);
}

static size_t block_floats(const GPT* m) {
    return (size_t)(m->params.lnfb - m->params_memory) + m->param_sizes[NT - 1];
}

/* the gradients of the last backward, on the host */
static float* grads_host(const GPT* m) {
    size_t n = block_floats(m);
    float* g = (float*)malloc(n * sizeof(float));
    m->be->to_host(g, m->grads_memory, n * sizeof(float));
    return g;
}

static float step(GPT* m, const Case* k, int* mismatches) {
    gpt_zero_grad(m);
    float loss = gpt_forward(m, k->in, k->tg, k->B, k->T, 0, 3, 1);
    int mm = gpt_backward(m, 1.0f / (k->B * k->T));
    if (mismatches) *mismatches = mm;
    return loss;
}

static double worst_tensor_err(const GPT* m, const float* a, const float* ref, const char** which) {
    double worst = 0;
    const float* t[NT];
    memcpy(t, &m->params, sizeof(t));
    for (int i = 0; i < NT; i++) {
        size_t off = (size_t)(t[i] - m->params_memory);
        double e = rel_err_ff(a + off, ref + off, m->param_sizes[i]);
        /* a NaN is the worst error and stays so (a comparison with it is false) */
        if (e > worst || (isnan(e) && !isnan(worst))) { worst = e; *which = gpt_param_names[i]; }
    }
    return worst;
}

static void test_step_matches_cpu(const Case* k, const char* name) {
    const Backend* cuda = backend_by_name("cuda");
    GPT cpu = build(k, &backend_cpu, 0, 0), dev = build(k, cuda, 0, 0);
    float lc = step(&cpu, k, NULL), ld = step(&dev, k, NULL);
    float* gc = grads_host(&cpu);
    float* gd = grads_host(&dev);
    const char* which = "";
    double gerr = worst_tensor_err(&cpu, gd, gc, &which);
    char tname[128];
    snprintf(tname, sizeof(tname), "%s_step_matches_cpu_with_dropout", name);
    double lerr = fabs((double)ld - lc) / fabs((double)lc);
    expect(lerr <= TOL && gerr <= 1e-4, tname,
           "loss %.8f (cuda) vs %.8f (cpu), rel %.2e; worst gradient tensor %s rel err %.2e",
           ld, lc, lerr, which, gerr);

    /* clip + AdamW, then the weights */
    float nc = gpt_clip_grads(&cpu, 0.5f), nd = gpt_clip_grads(&dev, 0.5f);
    gpt_adamw(&cpu, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    gpt_adamw(&dev, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    gpt_to_host(&dev);
    /* AdamW's first step is lr * g / (|g| + eps): about lr * sign(g) whatever the gradient's
     * size. A difference d between the backends' gradients moves the step by about
     * lr * d * eps / (|g| + eps)^2, which near g = 0 is the fp32 noise of the gradient multiplied
     * by 1/eps = 1e8 (the key bias, whose gradient is zero in exact arithmetic and rounding noise
     * in fp32 since softmax ignores q.b_k, is all such elements). Elements where that moves the
     * step by more than 1e-6 lr are left out of the weight comparison (the gradient comparison
     * above covers them); they must be a small minority. The rest check the update itself. */
    int L = k->c.num_layers, NH = k->c.num_heads, NKV = k->c.num_kv_heads;
    int QKV = gpt_qkv_channels(&k->c), HD = gpt_head_dim(&k->c);
    size_t qkvb_off = (size_t)(cpu.params.qkvb - cpu.params_memory);
    size_t amplified = 0, key_bias = 0, n = block_floats(&cpu);
    double clip = nc > 0.5f ? 0.5 / nc : 1.0, eps = 1e-8;
    for (size_t i = 0; i < n; i++) {
        double g = fabs((double)gc[i] * clip), d = fabs((double)gd[i] - gc[i]) * clip;
        if (d * eps / ((g + eps) * (g + eps)) > 1e-6) {
            size_t r = i - qkvb_off;
            if (i >= qkvb_off && r < (size_t)L * QKV && (int)(r % QKV) >= NH * HD &&
                (int)(r % QKV) < (NH + NKV) * HD)
                key_bias++;
            dev.host_params_memory[i] = cpu.params_memory[i];
            amplified++;
        }
    }
    double werr = worst_tensor_err(&cpu, dev.host_params_memory, cpu.params_memory, &which);
    snprintf(tname, sizeof(tname), "%s_clip_and_adamw_match_cpu", name);
    expect(fabs((double)nd - nc) / nc <= 1e-4 && werr <= 1e-5 && amplified * 20 <= n, tname,
           "grad norm %.6f vs %.6f; worst weight tensor %s rel err %.2e after one step (left out: "
           "%zu of %zu weights whose gradient noise AdamW amplifies, %zu of them key bias)", nd, nc,
           which, werr, amplified, n, key_bias);
    free(gc); free(gd);
    gpt_free(&cpu); gpt_free(&dev);
}

static void test_policies_on_sel(const Backend* cuda, const Case* k, const char* name, int sel);
static void test_policies_on(const Backend* cuda, const Case* k, const char* name) {
    test_policies_on_sel(cuda, k, name, 1);
}
/* sel 0: layer and every:2 only (the selective policies are checked on the other cases) */
static void test_policies_on_sel(const Backend* cuda, const Case* k, const char* name, int sel) {
    GPT none = build(k, cuda, 0, 0);
    float l0 = step(&none, k, NULL);
    float* g0 = grads_host(&none);
    size_t n = block_floats(&none);
    int everys[4] = {1, 2, -1, -3};   /* layer, every:2, selective, selective+every:2 */
    for (int e = 0; e < (sel ? 4 : 2); e++) {
        GPT r = build(k, cuda, everys[e], 0);
        int mm = 0;
        float l = step(&r, k, &mm);
        float* g = grads_host(&r);
        size_t differ = 0;
        for (size_t i = 0; i < n; i++) differ += memcmp(&g[i], &g0[i], sizeof(float)) != 0;
        char tname[128];
        if (everys[e] > 0)
            snprintf(tname, sizeof(tname), "%s_cuda_recompute_every%d_bitwise_equals_none", name,
                     everys[e]);
        else
            snprintf(tname, sizeof(tname), "%s_cuda_selective%s_bitwise_equals_none", name,
                     everys[e] == -1 ? "" : "_every2");
        expect(differ == 0 && memcmp(&l, &l0, sizeof(float)) == 0 && mm == 0, tname,
               "loss %.8f vs %.8f, %zu of %zu gradient floats differ, %d check mismatches",
               l, l0, differ, n, mm);
        free(g);
        gpt_free(&r);
    }
    /* the negative control: fresh seeds at recompute */
    GPT f = build(k, cuda, 1, 1);
    int mm = 0;
    step(&f, k, &mm);
    float* g = grads_host(&f);
    const char* which = "";
    double err = worst_tensor_err(&f, g, g0, &which);
    char tname[128];
    snprintf(tname, sizeof(tname), "%s_cuda_fresh_seed_recompute_is_caught", name);
    expect(mm > 0 && err > 1e-2, tname,
           "%d segments failed the value check; worst gradient tensor %s rel err %.2e", mm, which,
           err);
    free(g);
    gpt_free(&f);
    free(g0);
    gpt_free(&none);
}

static void test_host_copies(const Case* k) {
    const Backend* cuda = backend_by_name("cuda");
    GPT cpu = build(k, &backend_cpu, 0, 0), dev = build(k, cuda, 0, 0);
    size_t n = block_floats(&cpu);
    /* weights written on the host (as a model file load does) and moved to the device */
    for (size_t i = 0; i < n; i++) {
        cpu.params_memory[i] += 0.01f * (float)(test_uniform() - 0.5);
        cpu.m_memory[i] = 0.001f * (float)test_uniform();
        cpu.v_memory[i] = 1e-6f * (float)test_uniform();
    }
    memcpy(dev.host_params_memory, cpu.params_memory, n * sizeof(float));
    memcpy(dev.host_m_memory, cpu.m_memory, n * sizeof(float));
    memcpy(dev.host_v_memory, cpu.v_memory, n * sizeof(float));
    gpt_to_backend(&dev);
    memset(dev.host_params_memory, 0, n * sizeof(float));
    memset(dev.host_m_memory, 0, n * sizeof(float));
    memset(dev.host_v_memory, 0, n * sizeof(float));
    gpt_to_host(&dev);
    int same = memcmp(dev.host_params_memory, cpu.params_memory, n * sizeof(float)) == 0 &&
               memcmp(dev.host_m_memory, cpu.m_memory, n * sizeof(float)) == 0 &&
               memcmp(dev.host_v_memory, cpu.v_memory, n * sizeof(float)) == 0;
    expect(same, "host_copies_round_trip_bitwise", "%zu floats each of weights, m and v", n);
    float lc = gpt_forward(&cpu, k->in, k->tg, k->B, k->T, 0, 0, 0);
    float ld = gpt_forward(&dev, k->in, k->tg, k->B, k->T, 0, 0, 0);
    expect(fabs((double)ld - lc) / fabs((double)lc) <= TOL, "weights_from_the_host_give_the_cpu_loss",
           "eval loss %.8f (cuda) vs %.8f (cpu)", ld, lc);
    gpt_free(&cpu);
    gpt_free(&dev);
}

static void test_policies_on_cuda(const Case* k, const char* name) {
    test_policies_on(backend_by_name("cuda"), k, name);
}

/* bf16 against the CPU's fp32. Each product's operands carry a relative rounding of up to 2^-9
 * (nearest-even to 8 significant bits), which through a few layers and both passes leaves the
 * gradients a few 1e-3 off in norm; a different dropout mask moves them by the order of the
 * dropout itself (tens of percent per tensor). */
#define BF16_LOSS_TOL 1e-2
#define BF16_GRAD_TOL 3e-2
static void test_bf16_step_matches_cpu(const Case* k, const char* name) {
    const Backend* bf16 = backend_lookup("cuda", "bf16");
    GPT cpu = build(k, &backend_cpu, 0, 0), dev = build(k, bf16, 0, 0);
    GPT other = build_seeded(k, &backend_cpu, 0, 0, 100);   /* the same model, other masks */
    float lc0 = gpt_forward(&cpu, k->in, k->tg, k->B, k->T, 0, 4, 0);   /* eval, before AdamW */
    float lc = step(&cpu, k, NULL), ld = step(&dev, k, NULL), lo = step(&other, k, NULL);
    float* gc = grads_host(&cpu);
    float* gd = grads_host(&dev);
    float* go = grads_host(&other);
    const char *which = "", *which_o = "";
    double gerr = worst_tensor_err(&cpu, gd, gc, &which);
    double oerr = worst_tensor_err(&cpu, go, gc, &which_o);
    double lerr = fabs((double)ld - lc) / fabs((double)lc);
    char tname[128];
    snprintf(tname, sizeof(tname), "%s_bf16_step_matches_cpu_fp32_with_dropout", name);
    expect(lerr <= BF16_LOSS_TOL && gerr <= BF16_GRAD_TOL, tname,
           "loss %.6f (cuda bf16) vs %.6f (cpu fp32), rel %.2e (<= %.0e); worst gradient tensor "
           "%s rel err %.2e (<= %.0e)", ld, lc, lerr, BF16_LOSS_TOL, which, gerr, BF16_GRAD_TOL);
    snprintf(tname, sizeof(tname), "%s_bf16_tolerance_sees_other_masks", name);
    expect(oerr > 3 * BF16_GRAD_TOL, tname,
           "the CPU step with other dropout seeds: worst gradient tensor %s rel err %.2e (> %.0e), "
           "loss %.6f", which_o, oerr, 3 * BF16_GRAD_TOL, lo);
    /* AdamW runs on the fp32 masters: one step moves them the same way on both (up to the
     * gradients' difference, which AdamW's first step mostly normalises away) */
    gpt_clip_grads(&cpu, 1.0f);
    gpt_clip_grads(&dev, 1.0f);
    gpt_adamw(&cpu, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    gpt_adamw(&dev, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    gpt_to_host(&dev);
    float lc2 = gpt_forward(&cpu, k->in, k->tg, k->B, k->T, 0, 4, 0);
    float ld2 = gpt_forward(&dev, k->in, k->tg, k->B, k->T, 0, 4, 0);
    snprintf(tname, sizeof(tname), "%s_bf16_after_adamw_eval_loss_matches_cpu", name);
    expect(fabs((double)ld2 - lc2) / fabs((double)lc2) <= BF16_LOSS_TOL && lc2 != lc0, tname,
           "eval loss after one step %.6f (cuda bf16) vs %.6f (cpu); %.6f before it", ld2, lc2, lc0);
    free(gc); free(gd); free(go);
    gpt_free(&cpu); gpt_free(&dev); gpt_free(&other);
}

/* CUDA bf16 against the CPU bf16 table: both store the same activations in bf16, rounded by the
 * same producers, and sum every product in fp32, in other orders. An fp32 sum's last bits then
 * decide a bf16 rounding now and then (one bf16 step, 2^-8 of the value, in a small fraction of
 * the elements), so the two runs stay within a few 1e-4 of each other where a different mask
 * moves them by the dropout's own size. Dropout at distinct rates per site (embedding 0.05,
 * attention 0.15, residual 0.25): a site's keep bits drawn under another site's rate would show.
 * Three AdamW steps: the losses at every step within BF16_TWIN_LOSS_TOL, the first step's
 * gradient tensors within BF16_TWIN_GRAD_TOL, and the CPU run with other seeds well outside. */
#define BF16_TWIN_LOSS_TOL 1e-3
#define BF16_TWIN_GRAD_TOL 1e-2
static GPT build_rates(const Case* k, const Backend* be, uint64_t seed) {
    GPT m;
    char err[256];
    RecomputePolicy p = {0, 0, CHECK_OFF, 0};
    if (gpt_build_on(&m, &k->c, k->B, k->T, &p, be, err) != 0) {
        fprintf(stderr, "test_cuda_model: build: %s\n", err);
        exit(1);
    }
    gpt_init_weights(&m, 1234);
    gpt_set_dropout(&m, seed, 0.05, 0.15, 0.25);
    gpt_set_drop_path(&m, k->drop_path);
    return m;
}
/* prec "bf16" or "fp16": the CUDA table against the CPU table of that precision (fp16 rounds at
 * the same sites with 3 more significant bits: the same bounds hold with room) */
static void test_act16_matches_cpu(const char* prec, const Case* k, const char* name) {
    const Backend* cuda = backend_lookup("cuda", prec);
    const Backend* cpu_be = backend_lookup("cpu", prec);
    GPT dev = build_rates(k, cuda, 99), cpu = build_rates(k, cpu_be, 99), other = build_rates(k, cpu_be, 100);
    double worst_loss = 0, worst_grad = 0, other_grad = 0;
    const char *which = "-", *which_o = "-";
    float ld[3], lc[3];
    for (int t = 1; t <= 3; t++) {
        ld[t - 1] = step(&dev, k, NULL);
        lc[t - 1] = step(&cpu, k, NULL);
        double le = fabs((double)ld[t - 1] - lc[t - 1]) / fabs((double)lc[t - 1]);
        if (le > worst_loss) worst_loss = le;
        if (t == 1) {
            step(&other, k, NULL);
            float *gd = grads_host(&dev), *gc = grads_host(&cpu), *go = grads_host(&other);
            worst_grad = worst_tensor_err(&cpu, gd, gc, &which);
            other_grad = worst_tensor_err(&cpu, go, gc, &which_o);
            free(gd); free(gc); free(go);
        }
        gpt_clip_grads(&dev, 1.0f);
        gpt_clip_grads(&cpu, 1.0f);
        gpt_adamw(&dev, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        gpt_adamw(&cpu, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }
    char tname[128];
    snprintf(tname, sizeof(tname), "%s_cuda_%s_steps_match_cpu_%s", name, prec, prec);
    expect(worst_loss <= BF16_TWIN_LOSS_TOL && worst_grad <= BF16_TWIN_GRAD_TOL, tname,
           "losses (cuda, cpu) %.6f %.6f, %.6f %.6f, %.6f %.6f: worst rel %.2e (<= %.0e); step 1's worst "
           "gradient tensor %s rel err %.2e (<= %.0e)", ld[0], lc[0], ld[1], lc[1], ld[2], lc[2], worst_loss,
           BF16_TWIN_LOSS_TOL, which, worst_grad, BF16_TWIN_GRAD_TOL);
    snprintf(tname, sizeof(tname), "%s_cuda_%s_twin_tolerance_sees_other_masks", name, prec);
    expect(other_grad > 3 * BF16_TWIN_GRAD_TOL, tname, "the CPU %s step with other dropout seeds: worst gradient "
           "tensor %s rel err %.2e (> %.0e)", prec, which_o, other_grad, 3 * BF16_TWIN_GRAD_TOL);
    gpt_free(&dev); gpt_free(&cpu); gpt_free(&other);
}

/* gpt_first_nonfinite_grad on a device backend: the gradients are copied to the host piece by
 * piece. After a finite backward it finds nothing; with an infinity planted in layer 1's fcw
 * gradient and a NaN in layer 0's qkvb, it names the one the backward meets first (layer 1's fcw);
 * with one in lnfb only, lnfb. */
static void test_overflow_locator_on_device(const Backend* be, const Case* k) {
    GPT m = build_rates(k, be, 99);
    step(&m, k, NULL);
    int layer = 7, none = gpt_first_nonfinite_grad(&m, &layer);
    const int L = k->c.num_layers;
    float inf = INFINITY, nan = NAN;
    float* fcw = m.grads.fcw + (size_t)1 * (m.param_sizes[10] / (size_t)L) + 5;   /* layer 1's fcw */
    float* qkvb = m.grads.qkvb + 3;                                              /* layer 0's qkvb */
    be->to_backend(fcw, &inf, sizeof(float));
    be->to_backend(qkvb, &nan, sizeof(float));
    int l1 = 7, t1 = gpt_first_nonfinite_grad(&m, &l1);
    step(&m, k, NULL);   /* finite again */
    be->to_backend(m.grads.lnfb + 1, &inf, sizeof(float));
    int l2 = 7, t2 = gpt_first_nonfinite_grad(&m, &l2);
    expect(none == -1 && layer == -1 && t1 == 10 && l1 == 1 && t2 == 15 && l2 == -1,
           "cuda_fp16_overflow_locator_reads_the_device_gradients", "finite: %d (layer %d); planted fcw of layer 1 "
           "and qkvb of layer 0: %s of layer %d; planted lnfb: %s (layer %d)", none, layer,
           t1 >= 0 ? gpt_param_names[t1] : "none", l1, t2 >= 0 ? gpt_param_names[t2] : "none", l2);
    gpt_free(&m);
}

/* The memory bf16 storage saves on CUDA: the layers' kept activations of the counted build (the
 * arena's layout, gpt_memory) in bf16 at most 0.55 of fp32's (per position a layer keeps 15C + NH
 * + 4 floats in fp32, 14C bf16 + (C + NH + 4) floats in bf16: about 0.53), the device arena
 * counted by the backend's allocator smaller by at least that saving less the weights' bf16 copy
 * and the larger attention scratch (the fused backward's dQ slices), and the plan's figures the
 * counted ones. */
static void test_bf16_layer_memory(const Case* k, const char* name) {
    size_t layer[2], arena[2], planned_layer[2], planned_arena[2], attn[2], wop = 0;
    const char* prec[2] = {"fp32", "bf16"};
    for (int i = 0; i < 2; i++) {
        const Backend* be = backend_lookup("cuda", prec[i]);
        RecomputePolicy p = {0, 0, CHECK_OFF, 0};
        GPTPlan plan;
        char err[256];
        if (gpt_plan(&k->c, k->B, k->T, &p, be, omp_get_max_threads(), &plan, err) != 0) {
            fprintf(stderr, "test_cuda_model: plan: %s\n", err);
            exit(1);
        }
        size_t d0 = device_live_bytes_cuda();
        GPT m;
        if (gpt_build_on(&m, &k->c, k->B, k->T, &p, be, err) != 0) {
            fprintf(stderr, "test_cuda_model: build: %s\n", err);
            exit(1);
        }
        GPTMemory mem = gpt_memory(&m);
        layer[i] = mem.layer_acts;
        if (i == 1) wop = mem.weights_op;
        size_t d1 = device_live_bytes_cuda();
        gpt_free(&m);
        arena[i] = d1 - device_live_bytes_cuda();   /* what gpt_free gives back: the arena */
        (void)d0;
        planned_layer[i] = plan.layer_acts;
        planned_arena[i] = plan.arena;
        attn[i] = plan.attn_scratch;
    }
    const size_t attn_more = attn[1] > attn[0] ? attn[1] - attn[0] : 0;
    double ratio = (double)layer[1] / (double)layer[0];
    char tname[128];
    snprintf(tname, sizeof(tname), "%s_cuda_bf16_keeps_at_most_0.55x_the_layer_bytes", name);
    expect(ratio <= 0.55 && arena[1] + (layer[0] - layer[1]) <= arena[0] + wop + attn_more &&
           planned_layer[0] == layer[0] && planned_layer[1] == layer[1] && planned_arena[0] == arena[0] &&
           planned_arena[1] == arena[1], tname,
           "layers' kept activations %zu B (fp32) -> %zu B (bf16): %.3fx; device arena %zu -> %zu B (bf16 weights "
           "%zu B, the attention backward's scratch %zu -> %zu B: the fused backward's dQ slices); planned layers "
           "%zu, %zu B, arena %zu, %zu B", layer[0], layer[1], ratio, arena[0], arena[1], wop, attn[0], attn[1],
           planned_layer[0], planned_layer[1], planned_arena[0], planned_arena[1]);
}

/* The classifier in chunks on a CUDA backend (fp32, and bf16 whose chunks start C bf16 elements
 * apart): 1, 2 and 3 chunks, the gradient in the forward (gpt_set_loss_scale) or in the backward
 * (each chunk's logits computed again), against one chunk with the gradient in the backward (the
 * whole logits): the loss and every gradient tensor within 1e-6 relative. */
#define CHUNKINGS 4
static void test_classifier_chunks_on(const Backend* be, const Case* k, const char* name) {
    int N = k->B * k->T;
    const int rows[CHUNKINGS] = {N, 19, 13, 16};   /* of 38: 19, 19; 13, 13, 12; 16, 16, 6 */
    float loss[CHUNKINGS][2], *g[CHUNKINGS][2];
    size_t n = 0;
    GPT probe;
    for (int i = 0; i < CHUNKINGS; i++)
        for (int fused = 0; fused < 2; fused++) {
            char err[256];
            RecomputePolicy p = {0, 0, CHECK_OFF, 0};
            if (gpt_build_rows(&probe, &k->c, k->B, k->T, &p, be, rows[i], err) != 0) {
                fprintf(stderr, "test_cuda_model: build: %s\n", err);
                exit(1);
            }
            gpt_init_weights(&probe, 1234);
            gpt_set_dropout(&probe, 99, P_DROP, P_DROP, P_DROP);
            gpt_zero_grad(&probe);
            if (fused) gpt_set_loss_scale(&probe, 1.0f / N);
            loss[i][fused] = gpt_forward(&probe, k->in, k->tg, k->B, k->T, 0, 3, 1);
            gpt_backward(&probe, 1.0f / N);
            g[i][fused] = grads_host(&probe);
            n = block_floats(&probe);
            if (i < CHUNKINGS - 1 || fused < 1) gpt_free(&probe);
        }
    double worst = 0, lerr = 0;
    const char* which = "-";
    for (int i = 0; i < CHUNKINGS; i++)
        for (int fused = 0; fused < 2; fused++) {
            const char* w = "-";
            double e = worst_tensor_err(&probe, g[i][fused], g[0][0], &w);
            if (e > worst || (isnan(e) && !isnan(worst))) { worst = e; which = w; }
            double le = fabs((double)loss[i][fused] - loss[0][0]) / fabs((double)loss[0][0]);
            if (le > lerr || (isnan(le) && !isnan(lerr))) lerr = le;
        }
    gpt_free(&probe);
    int finite = isfinite(loss[0][0]);
    for (int i = 0; i < CHUNKINGS; i++) { free(g[i][0]); free(g[i][1]); }
    char full[128];
    snprintf(full, sizeof(full), "%s_classifier_in_1_2_3_chunks_matches_the_whole_logits_on_%s_%s",
             name, be->name, be->precision);
    expect(finite && worst <= 1e-6 && lerr <= 1e-6, full, "chunks of 19, 13 and 16 of %d rows, "
           "both ways: worst gradient tensor %s rel err %.2e, loss %.6f, rel err %.2e (%zu floats)", N,
           which, worst, loss[0][0], lerr, n);
}

/* The plan (gpt_plan, nothing allocated) against the build on a CUDA backend: the device arena
 * is every byte of the build that gpt_free gives back, the ops' scratch the build reserves beside
 * it grows by no more than the plan's op_scratch (it is grow-only and shared by the process's
 * models, so an earlier build may have reserved it already; tests/cuda/test_cross_backend.sh
 * holds a fresh process's counted peak to the plan's to the byte), and the host tables and host
 * copies are every byte model/mem.h counts. */
static void test_plan_equals_counted(const Backend* be, const Case* k, const char* name) {
    const int everys[3] = {0, 1, 2};
    int bad = 0;
    size_t dev = 0, host = 0, grown = 0, planned_dev = 0, planned_host = 0, planned_scratch = 0;
    for (int i = 0; i < 3; i++) {
        RecomputePolicy p = {everys[i], 0, CHECK_WARN, 0};
        GPTPlan plan;
        char err[256];
        if (gpt_plan(&k->c, k->B, k->T, &p, be, omp_get_max_threads(), &plan, err) != 0) {
            fprintf(stderr, "test_cuda_model: plan: %s\n", err);
            exit(1);
        }
        size_t d0 = device_live_bytes_cuda(), h0 = mem_stats().live_bytes;
        GPT m;
        if (gpt_build_on(&m, &k->c, k->B, k->T, &p, be, err) != 0) {
            fprintf(stderr, "test_cuda_model: build: %s\n", err);
            exit(1);
        }
        size_t d1 = device_live_bytes_cuda();
        host = mem_stats().live_bytes - h0;
        gpt_free(&m);
        size_t d2 = device_live_bytes_cuda();
        dev = d1 - d2;
        grown = d2 - d0;
        planned_dev = plan.arena;
        planned_host = plan.host;
        planned_scratch = plan.op_scratch;
        bad += dev != planned_dev || host != planned_host || grown > planned_scratch ||
               planned_scratch == 0;
    }
    char full[96];
    snprintf(full, sizeof(full), "%s_planned_bytes_equal_the_counted_build_on_%s_%s", name,
             be->name, be->precision);
    expect(bad == 0, full, "none, layer, every:2: %d differ; last: device arena %zu B counted, %zu "
           "planned; op scratch grown by %zu B, %zu planned; host %zu counted, %zu planned", bad,
           dev, planned_dev, grown, planned_scratch, host, planned_host);
}

int main(void) {
    if (backend_by_name("cuda") == NULL) {
        skip("cuda_model", "this build has no CUDA backend");
        return test_finish();
    }
    /* small enough for the emulation: every GPU thread is a CPU thread there */
    Case mha = make_case(3, 2, 2, 32, 67, 2, 19);
    Case gqa = make_case(2, 4, 2, 32, 50, 2, 16);
    test_plan_equals_counted(backend_lookup("cuda", "fp32"), &mha, "mha");
    test_plan_equals_counted(backend_lookup("cuda", "bf16"), &gqa, "gqa");
    test_classifier_chunks_on(backend_lookup("cuda", "fp32"), &mha, "mha");
    test_classifier_chunks_on(backend_lookup("cuda", "bf16"), &mha, "mha");
    test_step_matches_cpu(&mha, "mha");
    test_step_matches_cpu(&gqa, "gqa");
    test_policies_on_cuda(&mha, "mha");
    test_host_copies(&gqa);
    /* the model options: RoPE (GPT-J pairs, GQA), the parallel block, drop-path; B = 4 so that
     * some branches are dropped and some kept */
    Case opts = make_case(2, 4, 2, 32, 50, 4, 16);
    opts.c.pos_kind = POS_ROPE;
    opts.c.rope_base = 10000;
    opts.c.rope_layout = ROPE_GPTJ;
    opts.c.block_kind = BLOCK_PARALLEL;
    opts.drop_path = 0.3;
    test_plan_equals_counted(backend_lookup("cuda", "fp32"), &opts, "opts");
    test_step_matches_cpu(&opts, "opts");
    test_policies_on_sel(backend_by_name("cuda"), &opts, "opts", 0);

    /* --precision bf16: head dim 64 (tensor-core attention; its grouped-query heads are
     * tests/cuda/test_cuda_flash_tc.cu's), and head dim 16 */
    const Backend* bf16 = backend_lookup("cuda", "bf16");
    Case tc = make_case(2, 1, 1, 64, 67, 2, 19);
    test_bf16_step_matches_cpu(&tc, "hd64");
    test_bf16_step_matches_cpu(&mha, "hd16");
    test_policies_on(bf16, &tc, "hd64_bf16");
    /* bf16 storage against the CPU's bf16 table; the model options under bf16 (RoPE on bf16 q and
     * k, the parallel block, drop-path; head dim 8: the attention's fp32 fallback on bf16 values) */
    test_plan_equals_counted(bf16, &tc, "hd64");
    test_bf16_layer_memory(&tc, "hd64");
    test_act16_matches_cpu("bf16", &tc, "hd64");
    test_act16_matches_cpu("bf16", &opts, "opts");
    test_policies_on(bf16, &opts, "opts_bf16");

    /* --precision fp16: the same against the CPU fp16 table (head dim 64: the fp16 tensor-core
     * attention; the options case's head dim 8: its fallback), every policy bitwise equal to none,
     * the plan, and the overflow locator reading the device's gradients */
    const Backend* fp16 = backend_lookup("cuda", "fp16");
    test_act16_matches_cpu("fp16", &tc, "hd64");
    test_act16_matches_cpu("fp16", &opts, "opts");
    test_policies_on(fp16, &tc, "hd64_fp16");
    test_plan_equals_counted(fp16, &tc, "hd64_fp16");
    test_overflow_locator_on_device(fp16, &opts);
    return test_finish();
}
