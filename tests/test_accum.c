/* tests/test_accum.c — gradient accumulation (train.c --total-batch) equals the one big batch,
 * with dropout on (a different rate per site: SITE_RATES): A micro-batches of B sequences, micro-batch a at global sequence offset
 * g0 = a*B and each position's loss weighted 1/(A*B*T), against one batch of A*B sequences at
 * g0 = 0 weighted 1/(A*B*T). Both are built from the same explicit token arrays (a loader's window
 * of B*A sequences is not the same tokens as A windows of B sequences), and run through
 * gpt_forward / gpt_backward / clip / AdamW as train.c's step does. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "tests/test.h"
#include "model/gpt.h"
#include "model/mem.h"
#include "tests/model_util.h"

enum { BIG = 4, T = 16, STEPS = 4 };

static const GPTConfig cfg = {.max_seq_len = T, .vocab_size = 97, .padded_vocab_size = 128,
                              .num_layers = 2, .num_heads = 4, .num_kv_heads = 2, .channels = 32};

static int X[STEPS][BIG * T], Y[STEPS][BIG * T];

/* STEPS optimizer steps of A micro-batches of BIG/A sequences each; g0 of micro-batch a is
 * a*B (or 0 for every one when wrong_g0, the negative control). losses[s] the step's loss;
 * grads0: the first step's gradient (before clipping), copied out. */
static void run(GPT* m, int A, int wrong_g0, const RecomputePolicy* pol, float losses[STEPS],
                float* grads0) {
    char err[256];
    int B = BIG / A;
    if (gpt_build_policy(m, &cfg, B, T, pol, err) != 0) { printf("FAIL build: %s\n", err); exit(1); }
    gpt_init_weights(m, 5);
    set_site_dropout(m, 5, SITE_RATES);
    for (int s = 0; s < STEPS; s++) {
        double sum = 0.0;
        gpt_zero_grad(m);
        for (int a = 0; a < A; a++) {
            sum += gpt_forward(m, X[s] + a * B * T, Y[s] + a * B * T, B, T,
                               wrong_g0 ? 0 : (uint32_t)(a * B), (uint32_t)s, 1);
            gpt_backward(m, 1.0f / ((float)B * T * A));
        }
        losses[s] = (float)(sum / A);
        if (s == 0) memcpy(grads0, m->grads_memory, m->num_parameters * sizeof(float));
        gpt_clip_grads(m, 1.0f);
        gpt_adamw(m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
    }
}

static void compare(const char* policy_name, const RecomputePolicy* pol) {
    GPT big, acc, bad;
    float lb[STEPS], la[STEPS], lw[STEPS];
    size_t P;
    {
        size_t sizes[NUM_PARAMETER_TENSORS];
        gpt_param_sizes(&cfg, sizes);
        P = 0;
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) P += sizes[k];
    }
    float* gb = mem_alloc_floats(P);
    float* ga = mem_alloc_floats(P);
    float* gw = mem_alloc_floats(P);
    run(&big, 1, 0, pol, lb, gb);
    run(&acc, 2, 0, pol, la, ga);
    run(&bad, 2, 1, pol, lw, gw);
    double loss_err = 0.0;
    for (int s = 0; s < STEPS; s++) {
        double e = fabs((double)la[s] - lb[s]) / fabs((double)lb[s]);
        if (e > loss_err) loss_err = e;
    }
    double grad_err = rel_err_ff(ga, gb, P), bad_err = rel_err_ff(gw, gb, P);
    double w_err = rel_err_ff(acc.params_memory, big.params_memory, P);
    char name[160];
    snprintf(name, sizeof(name), "accumulation_B2xA2_gradient_equals_B4_with_dropout_%s", policy_name);
    expect(grad_err < 1e-6, name, "||g_acc - g_big|| / ||g_big|| = %.2e (first step)", grad_err);
    snprintf(name, sizeof(name), "accumulation_B2xA2_trajectory_equals_B4_with_dropout_%s", policy_name);
    expect(loss_err < 1e-6 && w_err < 2e-6, name,
           "worst loss rel. error %.2e over %d steps (%.6f vs %.6f at the last), weights after "
           "%d steps %.2e", loss_err, STEPS, la[STEPS - 1], lb[STEPS - 1], STEPS, w_err);
    snprintf(name, sizeof(name), "accumulation_with_every_micro_batch_at_g0_0_differs_%s", policy_name);
    expect(bad_err > 1e-3, name, "negative control (masks repeat across micro-batches): gradient "
           "rel. error %.2e", bad_err);
    gpt_free(&big); gpt_free(&acc); gpt_free(&bad);
    mem_free(gb); mem_free(ga); mem_free(gw);
}

int main(void) {
    for (int s = 0; s < STEPS; s++)
        for (int i = 0; i < BIG * T; i++) {
            X[s][i] = (int)(test_uniform() * cfg.vocab_size);
            Y[s][i] = (int)(test_uniform() * cfg.vocab_size);
        }
    RecomputePolicy none = {.every = 0, .fresh_seeds = 0, .check = CHECK_WARN};
    RecomputePolicy layer = {.every = 1, .fresh_seeds = 0, .check = CHECK_WARN};
    compare("none", &none);
    compare("recompute_layer", &layer);
    return test_finish();
}
