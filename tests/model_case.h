/* tests/model_case.h — the fixture of the whole-model training tests (test_checkpoint, test_bf16,
 * test_fp16_cpu): a Case is a model shape with two fixed random batches; its models are built on
 * a backend under a recompute policy, and all start from one block of random weights. Include
 * after tests/model_util.h. */
#ifndef SEEDGPT_TESTS_MODEL_CASE_H
#define SEEDGPT_TESTS_MODEL_CASE_H

#include "tests/model_util.h"

typedef struct {
    const char* name;
    GPTConfig c;
    int B, T;
    int* in[2];    /* two fixed batches, (B, T) each */
    int* tg[2];
} Case;

/* plain GPT-2 model options; the batches drawn from the test's generator */
static inline Case make_case(const char* name, int L, int NH, int NKV, int C, int V, int B, int T) {
    Case k;
    k.name = name;
    GPTConfig c = {T, V, gpt_pad_vocab(V), L, NH, NKV, C, 0, 0, 0, 0};
    k.c = c;
    k.B = B;
    k.T = T;
    for (int i = 0; i < 2; i++) {
        k.in[i] = (int*)malloc(sizeof(int) * B * T);
        k.tg[i] = (int*)malloc(sizeof(int) * B * T);
        random_tokens(k.in[i], B * T, V);
        random_tokens(k.tg[i], B * T, V);
    }
    return k;
}

static inline void free_case(Case* k) {
    for (int i = 0; i < 2; i++) { free(k->in[i]); free(k->tg[i]); }
}

/* k's model on backend be under policy p; a failure to build ends the test (status 2) */
static inline GPT build_on(const Case* k, RecomputePolicy p, const Backend* be) {
    GPT m;
    char err[256];
    if (gpt_build_on(&m, &k->c, k->B, k->T, &p, be, err) != 0) {
        fprintf(stderr, "%s: gpt_build_on: %s\n", k->name, err);
        exit(2);
    }
    return m;
}

/* Floats of the whole parameter block (padding included); the same for every policy. */
static inline size_t block_floats(const GPT* m) {
    return (size_t)(m->params.lnfb - m->params_memory) + m->param_sizes[NT - 1];
}

/* Random weights of a useful scale (biases and LN parameters non-trivial too), written by the
 * test; padded vocab rows zero. Returns a copy of the block, to start every model from. */
static inline float* random_weights(const Case* k) {
    RecomputePolicy none = {0, 0, CHECK_OFF, 0};
    GPT m = build_on(k, none, &backend_cpu);
    randomize_weights_scaled(&m, 0.08, 0.05);
    size_t n = block_floats(&m);
    float* w = (float*)malloc(n * sizeof(float));
    memcpy(w, m.params_memory, n * sizeof(float));
    gpt_free(&m);
    return w;
}

/* copies of m's weights and AdamW moments (block_floats each), as a run ends; the caller frees */
static inline void copy_trained(const GPT* m, float** params, float** mom, float** var) {
    size_t n = block_floats(m);
    *params = (float*)malloc(n * sizeof(float));
    *mom = (float*)malloc(n * sizeof(float));
    *var = (float*)malloc(n * sizeof(float));
    memcpy(*params, m->params_memory, n * sizeof(float));
    memcpy(*mom, m->m_memory, n * sizeof(float));
    memcpy(*var, m->v_memory, n * sizeof(float));
}

/* how many of the n floats differ in their bits */
static inline size_t differ(const float* a, const float* b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

#endif
