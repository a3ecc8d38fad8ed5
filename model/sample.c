/* model/sample.c — generation with a key/value cache (model/sample.h). Uses the CPU ops of
 * model/ops.h with N = 1 for the layer norms, the linear layers and GELU; the attention of one
 * query against the cache is written here (the fused kernel works on whole blocks of queries).
 * Owns no weights; never touches the GPT's activations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/sample.h"
#include "model/mem.h"
#include "model/ops.h"

void sampler_init(Sampler* s, const GPT* m) {
    const GPTConfig* c = &m->config;
    size_t C = c->channels, KV = (size_t)c->num_kv_heads * gpt_head_dim(c);
    size_t cache = (size_t)c->num_layers * c->max_seq_len * KV;
    memset(s, 0, sizeof(*s));
    s->model = m;
    s->kcache = mem_alloc_floats(cache);
    s->vcache = mem_alloc_floats(cache);
    s->x = mem_alloc_floats(C);
    s->ln = mem_alloc_floats(C);
    s->qkv = mem_alloc_floats(gpt_qkv_channels(c));
    s->atty = mem_alloc_floats(C);
    s->branch = mem_alloc_floats(C);
    s->fch = mem_alloc_floats(4 * C);
    s->scores = mem_alloc_floats(c->max_seq_len);
    s->logits = mem_alloc_floats(c->padded_vocab_size);
    s->order = mem_alloc((size_t)c->vocab_size * sizeof(int));
    s->x_in = mem_alloc_floats(C);
    if (c->pos_kind == POS_ROPE) {
        size_t n = (size_t)c->max_seq_len * (gpt_head_dim(c) / 2);
        s->rope_cos = mem_alloc_floats(n);
        s->rope_sin = mem_alloc_floats(n);
        gpt_rope_table(c, s->rope_cos, s->rope_sin);
    }
}

size_t sampler_bytes(const GPTConfig* c) {
    size_t C = c->channels, KV = (size_t)c->num_kv_heads * gpt_head_dim(c);
    size_t cache = (size_t)c->num_layers * c->max_seq_len * KV;
    /* the caches; x, ln, atty, branch, x_in; qkv; fch; scores; logits */
    size_t floats = 2 * cache + 5 * C + gpt_qkv_channels(c) + 4 * C + c->max_seq_len +
                    c->padded_vocab_size;
    if (c->pos_kind == POS_ROPE) floats += 2 * (size_t)c->max_seq_len * (gpt_head_dim(c) / 2);
    return floats * sizeof(float) + (size_t)c->vocab_size * sizeof(int);
}

void sampler_free(Sampler* s) {
    mem_free(s->kcache); mem_free(s->vcache); mem_free(s->x); mem_free(s->ln); mem_free(s->qkv);
    mem_free(s->atty); mem_free(s->branch); mem_free(s->fch); mem_free(s->scores);
    mem_free(s->logits); mem_free(s->order); mem_free(s->x_in);
    if (s->rope_cos != NULL) { mem_free(s->rope_cos); mem_free(s->rope_sin); }
    memset(s, 0, sizeof(*s));
}

void sampler_reset(Sampler* s) { s->pos = 0; }

/* Attention of the query at position t (qkv: this position's q, k, v) over positions 0..t of
 * layer l's cache, into atty (C). Softmax in float with the running max subtracted, as the fused
 * kernel does; the sums in double. */
static void attend_one(Sampler* s, int l, int t) {
    const GPTConfig* c = &s->model->config;
    int NH = c->num_heads, NKV = c->num_kv_heads, HD = gpt_head_dim(c), T = c->max_seq_len;
    size_t KV = (size_t)NKV * HD;
    const float* kc = s->kcache + (size_t)l * T * KV;
    const float* vc = s->vcache + (size_t)l * T * KV;
    float scale = 1.0f / sqrtf((float)HD);
    for (int h = 0; h < NH; h++) {
        int kvh = h / (NH / NKV);
        const float* q = s->qkv + (size_t)h * HD;
        float mx = -INFINITY;
        for (int j = 0; j <= t; j++) {
            const float* k = kc + (size_t)j * KV + (size_t)kvh * HD;
            float dot = 0.0f;
            for (int d = 0; d < HD; d++) dot += q[d] * k[d];
            s->scores[j] = dot * scale;
            if (s->scores[j] > mx) mx = s->scores[j];
        }
        double sum = 0.0;
        for (int j = 0; j <= t; j++) {
            s->scores[j] = expf(s->scores[j] - mx);
            sum += s->scores[j];
        }
        float* out = s->atty + (size_t)h * HD;
        for (int d = 0; d < HD; d++) {
            double acc = 0.0;
            for (int j = 0; j <= t; j++) acc += (double)s->scores[j] * vc[(size_t)j * KV + (size_t)kvh * HD + d];
            out[d] = (float)(acc / sum);
        }
    }
}

const float* sampler_feed(Sampler* s, int token) {
    const GPT* m = s->model;
    const GPTConfig* c = &m->config;
    const ParameterTensors* p = &m->host_params;   /* sampling runs on the CPU */
    int t = s->pos, C = c->channels, L = c->num_layers, QKV = gpt_qkv_channels(c);
    int HD = gpt_head_dim(c), NH = c->num_heads;
    size_t KV = (size_t)c->num_kv_heads * HD;
    float mean, rstd;
    if (t >= c->max_seq_len || token < 0 || token >= c->vocab_size) return NULL;

    int rope = c->pos_kind == POS_ROPE, parallel = c->block_kind == BLOCK_PARALLEL;
    for (int i = 0; i < C; i++)   /* no wpe with RoPE */
        s->x[i] = rope ? p->wte[(size_t)token * C + i]
                       : p->wte[(size_t)token * C + i] + p->wpe[(size_t)t * C + i];
    for (int l = 0; l < L; l++) {
        size_t uC = (size_t)C;
        memcpy(s->x_in, s->x, uC * sizeof(float));
        /* x = x + attproj(attn(rope(qkv(ln1(x))))) */
        layernorm_forward(s->ln, &mean, &rstd, s->x, p->ln1w + l * uC, p->ln1b + l * uC, 1, C);
        matmul_forward(s->qkv, s->ln, p->qkvw + (size_t)l * QKV * C, p->qkvb + (size_t)l * QKV,
                       1, C, QKV);
        if (rope)   /* this token sits at absolute position t */
            rope_forward(s->qkv, s->rope_cos, s->rope_sin, 1, 1, NH, c->num_kv_heads, HD,
                         c->rope_layout, t);
        size_t at = ((size_t)l * c->max_seq_len + t) * KV;
        memcpy(s->kcache + at, s->qkv + (size_t)NH * HD, KV * sizeof(float));
        memcpy(s->vcache + at, s->qkv + (size_t)NH * HD + KV, KV * sizeof(float));
        attend_one(s, l, t);
        matmul_forward(s->branch, s->atty, p->attprojw + (size_t)l * C * C, p->attprojb + l * uC,
                       1, C, C);
        for (int i = 0; i < C; i++) s->x[i] += s->branch[i];
        /* x = x + fcproj(gelu(fc(ln2(x)))); the parallel block normalises the layer's input */
        layernorm_forward(s->ln, &mean, &rstd, parallel ? s->x_in : s->x, p->ln2w + l * uC, p->ln2b + l * uC, 1, C);
        matmul_forward(s->fch, s->ln, p->fcw + (size_t)l * 4 * C * C, p->fcb + (size_t)l * 4 * C,
                       1, C, 4 * C);
        gelu_forward(s->fch, s->fch, (size_t)4 * C);
        matmul_forward(s->branch, s->fch, p->fcprojw + (size_t)l * C * 4 * C,
                       p->fcprojb + l * uC, 1, 4 * C, C);
        for (int i = 0; i < C; i++) s->x[i] += s->branch[i];
    }
    layernorm_forward(s->ln, &mean, &rstd, s->x, p->lnfw, p->lnfb, 1, C);
    matmul_forward(s->logits, s->ln, p->wte, NULL, 1, C, c->padded_vocab_size);
    s->pos++;
    return s->logits;
}

/* "a ranks below b": lower logit, or the same logit and a higher id */
static int ranks_below(const float* logits, int a, int b) {
    return logits[a] < logits[b] || (logits[a] == logits[b] && a > b);
}

/* order[0..k) = the k best ids, best first, in O(V log k): a heap of the k best so far whose
 * root is the worst of them, then a sort of those k. */
static void top_k_ids(const float* logits, int V, int k, int* order) {
    int* h = order;
    for (int i = 0; i < V; i++) {
        int n;
        if (i < k) { n = i + 1; h[i] = i; int c = i;          /* push, sift up */
            while (c > 0 && ranks_below(logits, h[c], h[(c - 1) / 2])) {
                int p = (c - 1) / 2, t = h[p]; h[p] = h[c]; h[c] = t; c = p;
            }
            continue;
        }
        if (!ranks_below(logits, h[0], i)) continue;            /* no better than the worst kept */
        n = k; h[0] = i;
        for (int c = 0;;) {                                     /* sift down */
            int l = 2 * c + 1, r = l + 1, w = c;
            if (l < n && ranks_below(logits, h[l], h[w])) w = l;
            if (r < n && ranks_below(logits, h[r], h[w])) w = r;
            if (w == c) break;
            int t = h[w]; h[w] = h[c]; h[c] = t; c = w;
        }
    }
    /* the heap pops worst first: fill order from the back */
    for (int n = k; n > 1; n--) {
        int t = h[0]; h[0] = h[n - 1]; h[n - 1] = t;
        for (int c = 0;;) {
            int l = 2 * c + 1, r = l + 1, w = c;
            if (l < n - 1 && ranks_below(logits, h[l], h[w])) w = l;
            if (r < n - 1 && ranks_below(logits, h[r], h[w])) w = r;
            if (w == c) break;
            int u = h[w]; h[w] = h[c]; h[c] = u; c = w;
        }
    }
}

int sample_pick(const float* logits, int V, double temperature, int top_k, uint64_t sample_seed,
                uint32_t position, uint32_t stream, int* order) {
    if (temperature <= 0.0) {
        int best = 0;
        for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
        return best;
    }
    int k = V;
    if (top_k > 0 && top_k < V) {
        k = top_k;
        top_k_ids(logits, V, k, order);
    } else {
        for (int i = 0; i < V; i++) order[i] = i;
    }
    double mx = logits[order[0]], total = 0.0;
    for (int r = 1; r < k; r++) if (logits[order[r]] > mx) mx = logits[order[r]];
    for (int r = 0; r < k; r++) total += exp(((double)logits[order[r]] - mx) / temperature);
    uint32_t w = philox_word(sample_seed, position, stream, 0, 0, 0);
    double u = ((double)w + 0.5) / 4294967296.0 * total, acc = 0.0;
    for (int r = 0; r < k; r++) {
        acc += exp(((double)logits[order[r]] - mx) / temperature);
        if (u < acc) return order[r];
    }
    return order[k - 1];
}

void sample_write_text(FILE* f, const unsigned char* text, size_t n, int escape) {
    if (!escape) { fwrite(text, 1, n, f); return; }
    for (size_t i = 0; i < n; i++) {
        unsigned char b = text[i];
        if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7f) fprintf(f, "\\x%02x", b);
        else fputc(b, f);
    }
}
