/* tests/test_profile.c — the per-op-class profile (model/profile.h) on the CPU: a profiled step is
 * the plain step bit for bit; FLOPs land in the classes the header names, in the amounts its
 * formulas give; a recompute's re-run forward counts as recompute and nowhere else; the classes
 * add up to no more than the step; ops outside a step are not counted. No timing is asserted
 * beyond "not negative" and "not more than the step": the machine may be shared.
 */
#include "tests/test.h"
#include "model/gpt.h"
#include "model/profile.h"
#include "tests/model_util.h"

enum { L = 2, NH = 2, C = 32, V = 60, MAXT = 16, B = 2, T = 16 };

static GPTConfig config(void) {
    GPTConfig c;
    memset(&c, 0, sizeof(c));
    c.max_seq_len = MAXT;
    c.vocab_size = V;
    c.padded_vocab_size = gpt_pad_vocab(V);
    c.num_layers = L;
    c.num_heads = NH;
    c.num_kv_heads = NH;
    c.channels = C;
    return c;
}

/* A model under `policy` with the tests' weights and dropout at every site. */
static void build(GPT* m, const char* policy) {
    GPTConfig c = config();
    RecomputePolicy p;
    memset(&p, 0, sizeof(p));   /* captured seeds; recompute_parse keeps these two fields */
    p.check = CHECK_WARN;
    char err[256];
    if (recompute_parse(policy, &p, err) != 0 || gpt_build_policy(m, &c, B, T, &p, err) != 0) {
        fprintf(stderr, "test_profile: %s\n", err);
        exit(1);
    }
    test_rng_state = 12345;
    randomize_weights(m, 0.05);
    set_site_dropout(m, 99, SITE_RATES);
}

/* `steps` training steps as train.c runs them; profile_step_begin/_end around each. */
static void run_steps(GPT* m, int steps, float* losses) {
    int in[B * T], tg[B * T];
    test_rng_state = 777;
    for (int s = 0; s < steps; s++) {
        random_tokens(in, B * T, V);
        random_tokens(tg, B * T, V);
        profile_step_begin();
        gpt_zero_grad(m);
        losses[s] = gpt_forward(m, in, tg, B, T, 0, (uint32_t)s, 1);
        gpt_backward(m, 1.0f / (B * T));
        gpt_clip_grads(m, 1.0f);
        gpt_adamw(m, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s + 1);
        profile_step_end();
    }
}

/* model FLOPs of one step's matmul forwards: every linear of the blocks and the LM head */
static double matmul_fwd_flops(void) {
    GPTConfig c = config();
    double N = B * T, QKV = gpt_qkv_channels(&c);
    return 2.0 * N * (L * (QKV * C + C * C + 8.0 * C * C) + (double)c.padded_vocab_size * C);
}
static double block_matmul_fwd_flops(void) {
    GPTConfig c = config();
    double N = B * T, QKV = gpt_qkv_channels(&c);
    return 2.0 * N * L * (QKV * C + C * C + 8.0 * C * C);
}
static double attn_fwd_flops(void) { return L * 4.0 * B * NH * (double)T * T * (C / NH) / 2.0; }

static int same_bits(const float* a, const float* b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static void profiled_steps_match_plain_bitwise(const char* policy) {
    enum { STEPS = 3 };
    GPT plain, prof;
    float lp[STEPS], lq[STEPS];
    build(&plain, policy);
    run_steps(&plain, STEPS, lp);   /* its table is the plain one: nothing is timed */
    build(&prof, policy);
    prof.be = profile_wrap(prof.be, NULL);
    run_steps(&prof, STEPS, lq);
    size_t n = prof.num_parameters;
    char name[96];
    snprintf(name, sizeof name, "profiled_steps_match_plain_bitwise_%s", policy);
    expect(same_bits(lp, lq, STEPS) && same_bits(plain.params_memory, prof.params_memory, n) &&
           same_bits(plain.grads_memory, prof.grads_memory, n) &&
           same_bits(plain.m_memory, prof.m_memory, n) && same_bits(plain.v_memory, prof.v_memory, n),
           name, "%d steps with dropout: losses %.9g / %.9g ... %.9g / %.9g, weights, gradients and "
           "AdamW moments compared bit for bit", STEPS, lp[0], lq[0], lp[STEPS - 1], lq[STEPS - 1]);

    ProfileTotals t = profile_totals();
    int recomputes = strcmp(policy, "none") != 0;
    double mf = matmul_fwd_flops() * STEPS, af = attn_fwd_flops() * STEPS;
    double rf = recomputes ? (block_matmul_fwd_flops() + attn_fwd_flops()) * STEPS : 0.0;
    snprintf(name, sizeof name, "profile_flops_per_class_%s", policy);
    expect(t.steps == STEPS && t.flops[PROF_MATMUL_FWD] == mf && t.flops[PROF_MATMUL_BWD] == 2 * mf &&
           t.flops[PROF_ATTN_FWD] == af && t.flops[PROF_ATTN_BWD] == 2.5 * af &&
           t.flops[PROF_RECOMPUTE] == rf && t.flops[PROF_LAYERNORM] == 0,
           name, "%d steps; matmul fwd %.0f (formula %.0f), bwd %.0f (%.0f), attention fwd %.0f "
           "(%.0f), bwd %.0f (%.0f), recompute %.0f (%.0f: the blocks' forward %s)", t.steps,
           t.flops[PROF_MATMUL_FWD], mf, t.flops[PROF_MATMUL_BWD], 2 * mf, t.flops[PROF_ATTN_FWD], af,
           t.flops[PROF_ATTN_BWD], 2.5 * af, t.flops[PROF_RECOMPUTE], rf,
           recomputes ? "once more" : "never");

    double sum = 0;
    int nonneg = 1;
    for (int k = 0; k < NUM_PROF_CLASSES; k++) { sum += t.ms[k]; nonneg = nonneg && t.ms[k] >= 0; }
    snprintf(name, sizeof name, "profile_classes_fit_in_the_step_%s", policy);
    expect(nonneg && sum <= t.step_ms && t.ms[PROF_MATMUL_FWD] > 0 && t.ms[PROF_OPTIMIZER] > 0 &&
           (t.ms[PROF_RECOMPUTE] > 0) == recomputes, name,
           "classes %.3f ms, steps %.3f ms; recompute %.3f ms (%s expected)", sum, t.step_ms,
           t.ms[PROF_RECOMPUTE], recomputes ? "> 0" : "0");

    /* an evaluation between steps: not in the profile */
    int in[B * T];
    random_tokens(in, B * T, V);
    gpt_forward(&prof, in, in, B, T, 0, 0, 0);
    ProfileTotals after = profile_totals();
    snprintf(name, sizeof name, "ops_between_steps_are_not_counted_%s", policy);
    expect(memcmp(&after, &t, sizeof(t)) == 0, name, "matmul fwd %.0f FLOPs before and %.0f after "
           "a forward outside a step", t.flops[PROF_MATMUL_FWD], after.flops[PROF_MATMUL_FWD]);
    gpt_free(&plain);
    gpt_free(&prof);
}

/* --profile's table (profile_totals_steady) leaves out the first PROFILE_WARMUP_STEPS steps and
 * gives the first step's wall time on its own; a run of fewer steps falls back to the steps after
 * the first, or to the one step it has. FLOPs per step are exact, so the steps counted show in
 * them. */
static void steady_profile_leaves_out_the_warmup(int steps) {
    GPT m;
    float losses[8];
    build(&m, "none");
    m.be = profile_wrap(m.be, NULL);
    run_steps(&m, steps, losses);
    ProfileTotals all = profile_totals(), st = profile_totals_steady();
    int want = steps > PROFILE_WARMUP_STEPS ? steps - PROFILE_WARMUP_STEPS : steps > 1 ? steps - 1 : 1;
    int want_warm = steps - want;
    double per_step = matmul_fwd_flops();
    char name[96], text[4096] = "";
    FILE* f = fmemopen(text, sizeof text - 1, "w");
    profile_print(f, &st, 0);
    fclose(f);
    int first_line = strstr(text, "profile: first step") != NULL;
    snprintf(name, sizeof name, "steady_profile_leaves_out_the_warmup_of_%d_steps", steps);
    expect(all.steps == steps && st.steps == want && st.warmup == want_warm &&
           st.flops[PROF_MATMUL_FWD] == want * per_step && (st.first_step_ms > 0) == (steps > 1) &&
           first_line == (steps > 1) && st.step_ms <= all.step_ms, name,
           "%d steps measured: the table counts %d (want %d) after %d warm-up (want %d), matmul fwd "
           "%.0f FLOPs (want %.0f); first step %.3f ms on its own line: %s (want %s)", all.steps,
           st.steps, want, st.warmup, want_warm, st.flops[PROF_MATMUL_FWD], want * per_step,
           st.first_step_ms, first_line ? "yes" : "no", steps > 1 ? "yes" : "no");
    gpt_free(&m);
}

int main(void) {
    steady_profile_leaves_out_the_warmup(1);
    steady_profile_leaves_out_the_warmup(2);
    steady_profile_leaves_out_the_warmup(4);
    profiled_steps_match_plain_bitwise("none");
    profiled_steps_match_plain_bitwise("layer");
    return test_finish();
}
