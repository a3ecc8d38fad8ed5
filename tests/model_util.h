/* tests/model_util.h — what the whole-model tests share: which parameter tensors are matrices
 * and LayerNorm weights, the tensor table of a ParameterTensors, random weights of a useful
 * scale, the tensors in float64 (the reference model's layout), random tokens. Include after
 * model/gpt.h and tests/test.h. */
#ifndef SEEDGPT_TESTS_MODEL_UTIL_H
#define SEEDGPT_TESTS_MODEL_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/gpt.h"
#include "tests/test.h"

#define NT NUM_PARAMETER_TENSORS

/* Tensors that are 2-D weights or embeddings (decayed by AdamW, random in these tests); the rest
 * are LayerNorm parameters and biases. Written here from gpt.h's documented list, on purpose not
 * read from gpt_param_decay. */
static const int is_matrix[NT] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
static const int is_ln_weight[NT] = {0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0};

static inline void tensor_table(const ParameterTensors* p, float* t[NT]) {
    float* q[NT] = {p->wte, p->wpe, p->ln1w, p->ln1b, p->qkvw, p->qkvb, p->attprojw, p->attprojb,
                    p->ln2w, p->ln2b, p->fcw, p->fcb, p->fcprojw, p->fcprojb, p->lnfw, p->lnfb};
    memcpy(t, q, sizeof(q));
}

/* Matrices N(0, wstd), LN weights 1 + N(0, 0.1), biases and LN biases N(0, bstd); padded vocab
 * rows zero. */
static inline void randomize_weights_scaled(GPT* m, double wstd, double bstd) {
    float* t[NT];
    tensor_table(&m->params, t);
    for (int k = 0; k < NT; k++)
        for (size_t i = 0; i < m->param_sizes[k]; i++)
            t[k][i] = (float)(is_matrix[k] ? wstd * test_normal()
                              : is_ln_weight[k] ? 1.0 + 0.1 * test_normal() : bstd * test_normal());
    const GPTConfig* c = &m->config;
    memset(m->params.wte + (size_t)c->vocab_size * c->channels, 0,
           (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels * sizeof(float));
}

static inline void randomize_weights(GPT* m, double wstd) { randomize_weights_scaled(m, wstd, 0.1); }

/* the model's tensors, back to back, in double: the reference's layout */
static inline void tensors_to_double(const GPT* m, const ParameterTensors* p, double* out) {
    float* t[NT];
    tensor_table(p, t);
    size_t o = 0;
    for (int k = 0; k < NT; k++)
        for (size_t i = 0; i < m->param_sizes[k]; i++) out[o++] = t[k][i];
}

/* The dropout rates of the model tests: a different rate at each site the model has one for
 * (embedding; attention probabilities; the two residual branches, which share one), so that a
 * rate applied at the wrong site moves the result. */
typedef struct { double embd, attn, resid; } SiteRates;
static const SiteRates SITE_RATES = {0.10, 0.20, 0.05};
static const SiteRates NO_DROPOUT = {0.0, 0.0, 0.0};

static inline void set_site_dropout(GPT* m, uint64_t master_seed, SiteRates r) {
    gpt_set_dropout(m, master_seed, r.embd, r.attn, r.resid);
}

static inline int site_rates_on(SiteRates r) { return r.embd > 0 || r.attn > 0 || r.resid > 0; }

/* "embd 0.10 attn 0.20 resid 0.05", for test labels and messages */
static inline const char* site_rates_str(SiteRates r, char buf[64]) {
    snprintf(buf, 64, "embd %.2f attn %.2f resid %.2f", r.embd, r.attn, r.resid);
    return buf;
}

static inline void random_tokens(int* x, int n, int V) {
    for (int i = 0; i < n; i++) x[i] = (int)(test_uniform() * V) % V;
}

/* The model's gradient against the reference's (float64, the same layout), tensor by tensor:
 * the worst relative error; with report, one check per tensor against tol. Empty tensors (wpe
 * with RoPE) are passed over. */
static inline double compare_grads(const GPT* m, const double* ref, const char* label, double tol,
                                   int report) {
    double* mine = (double*)malloc(m->num_parameters * sizeof(double));
    tensors_to_double(m, &m->grads, mine);
    double worst = 0;
    size_t o = 0;
    for (int k = 0; k < NT; k++) {
        if (m->param_sizes[k] == 0) continue;
        double e = rel_err_dd(mine + o, ref + o, m->param_sizes[k]);
        if (e > worst) worst = e;
        if (report) {
            char name[192];
            snprintf(name, sizeof(name), "model_grad_matches_float64_reference[%s] %s", label,
                     gpt_param_names[k]);
            expect(e < tol, name, "rel err %.2e (bound %.0e)", e, tol);
        }
        o += m->param_sizes[k];
    }
    free(mine);
    return worst;
}

#endif
