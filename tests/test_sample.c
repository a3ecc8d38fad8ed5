/* tests/test_sample.c — generation with the key/value cache (model/sample.c) against recomputing
 * the whole context with gpt_forward at every step, and the token draw against the softmax it
 * claims to sample from. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "tests/test.h"
#include "model/gpt.h"
#include "model/mem.h"
#include "model/sample.h"

#define GEN 40

/* Generates from prompt[0..np) until GEN tokens in all, both ways; returns the worst per-position
 * logit error and the number of positions where the tokens differ. */
static void compare(GPT* m, double temperature, int top_k, uint64_t seed, const char* name) {
    const GPTConfig* c = &m->config;
    int V = c->vocab_size, Vp = c->padded_vocab_size;
    int prompt[3] = {5, 17, 42}, np = 3;
    int seq_cache[GEN], seq_full[GEN];
    memcpy(seq_cache, prompt, sizeof(prompt));
    memcpy(seq_full, prompt, sizeof(prompt));
    uint64_t sseed = philox_stream_seed(seed, STREAM_SAMPLE);
    Sampler s;
    sampler_init(&s, m);
    int order[512];
    double worst = 0.0;
    int differ = 0;
    const float* lg = NULL;
    for (int t = 0; t < GEN - 1; t++) {
        lg = sampler_feed(&s, seq_cache[t]);
        /* the full recompute: the context 0..t, dropout off, the last position's logits */
        gpt_forward(m, seq_full, NULL, 1, t + 1, 0, 0, 0);
        const float* full = m->logits + (size_t)t * Vp;
        double e = rel_err_ff(lg, full, (size_t)V);
        if (e > worst) worst = e;
        if (t + 1 >= np) {
            seq_cache[t + 1] = sample_pick(lg, V, temperature, top_k, sseed, t + 1, 0, order);
            seq_full[t + 1] = sample_pick(full, V, temperature, top_k, sseed, t + 1, 0, order);
            if (seq_cache[t + 1] != seq_full[t + 1]) differ++;
            seq_full[t + 1] = seq_cache[t + 1];   /* keep one context, so the logits stay comparable */
        }
    }
    int distinct = 0;
    for (int t = np; t < GEN; t++) {
        int seen = 0;
        for (int u = np; u < t; u++) seen |= seq_cache[u] == seq_cache[t];
        distinct += !seen;
    }
    char nm[160];
    snprintf(nm, sizeof(nm), "kv_cache_logits_match_full_forward_%s", name);
    expect(worst < 1e-5, nm, "worst per-position ||cache - full|| / ||full|| = %.2e over %d positions",
           worst, GEN - 1);
    snprintf(nm, sizeof(nm), "kv_cache_sampling_equals_full_recompute_%s", name);
    expect(differ == 0, nm, "%d of %d sampled tokens differ (temperature %g, top-k %d; %d distinct)",
           differ, GEN - np, temperature, top_k, distinct);
    sampler_free(&s);
}

int main(void) {
    GPTConfig c = {.max_seq_len = 48, .vocab_size = 300, .padded_vocab_size = gpt_pad_vocab(300),
                   .num_layers = 2, .num_heads = 4, .num_kv_heads = 2, .channels = 32};
    GPT m;
    char err[256];
    if (gpt_build(&m, &c, 1, c.max_seq_len, err) != 0) { printf("FAIL build: %s\n", err); return 1; }
    gpt_init_weights(&m, 99);
    /* dropout configured, as in training: generation must not apply it */
    gpt_set_dropout(&m, 99, 0.1, 0.1, 0.1);
    /* larger weights than the init's, so the logits are not nearly uniform */
    for (size_t i = 0; i < m.num_parameters; i++) m.params_memory[i] *= 4.0f;
    memset(m.params.wte + (size_t)c.vocab_size * c.channels, 0,
           (size_t)(c.padded_vocab_size - c.vocab_size) * c.channels * sizeof(float));

    compare(&m, 1.0, 0, 7, "temperature1");
    compare(&m, 0.8, 20, 8, "top_k20");
    compare(&m, 0.0, 0, 9, "greedy");

    /* the draw: empirical frequencies over many positions against the softmax of logits/T, and
     * top-k never leaving the k largest */
    {
        enum { NV = 6, DRAWS = 200000 };
        float logits[NV] = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f};
        double temp = 0.7, p[NV], z = 0.0, count[NV] = {0};
        for (int i = 0; i < NV; i++) { p[i] = exp(logits[i] / temp); z += p[i]; }
        int order[NV];
        uint64_t sseed = philox_stream_seed(1, STREAM_SAMPLE);
        for (uint32_t d = 0; d < DRAWS; d++) count[sample_pick(logits, NV, temp, 0, sseed, d, 3, order)]++;
        double worst = 0.0;
        for (int i = 0; i < NV; i++) {
            double e = fabs(count[i] / DRAWS - p[i] / z);
            if (e > worst) worst = e;
        }
        expect(worst < 0.005, "sample_pick_frequencies_match_softmax",
               "worst |frequency - probability| = %.4f over %d draws", worst, DRAWS);
        int outside = 0, hit[NV] = {0};
        for (uint32_t d = 0; d < 20000; d++) {
            int k = sample_pick(logits, NV, temp, 2, sseed, d, 4, order);
            hit[k] = 1;
            outside += k != 3 && k != 5;   /* the two largest logits: ids 3 (2.0) and 5 (1.5) */
        }
        expect(outside == 0 && hit[3] && hit[5], "sample_pick_top_k_keeps_only_the_k_largest",
               "%d draws outside the top 2; both drawn: %d", outside, hit[3] && hit[5]);
        /* top-3: frequencies against the softmax renormalised over ids 3, 5, 0 */
        double c3[NV] = {0}, z3 = p[3] + p[5] + p[0], worst3 = 0.0;
        for (uint32_t d = 0; d < DRAWS; d++) c3[sample_pick(logits, NV, temp, 3, sseed, d, 5, order)]++;
        for (int i = 0; i < NV; i++) {
            double want = (i == 3 || i == 5 || i == 0) ? p[i] / z3 : 0.0;
            double e = fabs(c3[i] / DRAWS - want);
            if (e > worst3) worst3 = e;
        }
        expect(worst3 < 0.005, "sample_pick_top_k_frequencies_match_renormalised_softmax",
               "top-3: worst |frequency - probability| = %.4f over %d draws", worst3, DRAWS);
        int a = sample_pick(logits, NV, 0.0, 0, sseed, 0, 0, order);
        expect(a == 3, "sample_pick_temperature_zero_is_argmax", "picked %d, argmax 3", a);
    }
    /* the top-k selection: the draw at u just above 0 returns the best id, and the k candidates
     * are exactly the k best by (logit, then lower id): checked by counting, for every k, which
     * ids temperature-1e-3 top-k draws over many positions can return (only the best) and which
     * ids a temperature-1e3 draw returns (all k, near uniformly), against a plain O(V^2) rank */
    {
        enum { NV = 200 };
        float lg[NV];
        for (int i = 0; i < NV; i++) lg[i] = (float)((int)(test_uniform() * 40) - 20) / 4.0f;  /* ties */
        int rank[NV], order[NV];
        for (int i = 0; i < NV; i++) {
            rank[i] = 0;
            for (int j = 0; j < NV; j++) rank[i] += lg[j] > lg[i] || (lg[j] == lg[i] && j < i);
        }
        int ks[] = {1, 2, 7, 50, 199}, bad = 0;
        uint64_t sseed = philox_stream_seed(2, STREAM_SAMPLE);
        for (size_t q = 0; q < sizeof(ks) / sizeof(ks[0]); q++) {
            int k = ks[q], seen[NV] = {0};
            for (uint32_t d = 0; d < 4000; d++) seen[sample_pick(lg, NV, 1e3, k, sseed, d, 9, order)] = 1;
            for (int i = 0; i < NV; i++) bad += seen[i] != (rank[i] < k);
        }
        expect(bad == 0, "sample_pick_top_k_draws_exactly_the_k_best_ids",
               "%d ids drawn outside, or never drawn inside, the top k (k = 1, 2, 7, 50, 199 of %d, "
               "tied logits)", bad, NV);
    }
    /* a terminal gets no raw control bytes: ESC, BEL, CR, DEL become \xHH; newline, tab and
     * UTF-8 pass; without escaping the bytes pass unchanged */
    {
        const unsigned char text[] = {'a', 0x1b, '[', '2', 'J', '\n', '\t', 0x07, '\r', 0x7f, 0xc3,
                                      0xa9, 0x00, 'z'};
        char esc[128] = "", raw[64] = "";
        FILE* f = fmemopen(esc, sizeof(esc), "w");
        sample_write_text(f, text, sizeof(text), 1);
        fclose(f);
        const char* want = "a\\x1b[2J\n\t\\x07\\x0d\\x7f\xc3\xa9\\x00z";
        expect(strcmp(esc, want) == 0, "sample_text_to_a_terminal_escapes_control_bytes",
               "%zu bytes written, %zu expected, %s", strlen(esc), strlen(want),
               strcmp(esc, want) == 0 ? "the same" : "they differ");
        f = fmemopen(raw, sizeof(raw), "w");
        sample_write_text(f, text, sizeof(text), 0);
        fclose(f);
        expect(memcmp(raw, text, sizeof(text)) == 0, "sample_text_to_a_file_is_written_unchanged",
               "%s", memcmp(raw, text, sizeof(text)) == 0 ? "14 bytes as given" : "bytes differ");
    }
    gpt_free(&m);
    return test_finish();
}
