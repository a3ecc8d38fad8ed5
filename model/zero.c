/* model/zero.c — ZeRO-1's shards, the norm from the shards and AdamW on one shard (zero.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "model/mem.h"
#include "model/zero.h"

/* The layout the shards cut: each tensor's offset and size, and the span (the end of the last
 * tensor; the gaps between tensors are zeros and belong to the shard before them). */
static size_t layout(const GPTConfig* c, size_t off[NUM_PARAMETER_TENSORS],
                     size_t size[NUM_PARAMETER_TENSORS], size_t* nblocks) {
    gpt_param_offsets(c, off);
    gpt_param_sizes(c, size);
    size_t span = 0, nb = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        if (size[k] > 0 && off[k] + size[k] > span) span = off[k] + size[k];
        nb += (size[k] + ZERO_NORM_BLOCK - 1) / ZERO_NORM_BLOCK;
    }
    *nblocks = nb;
    return span;
}

/* Where shard r begins: the first block that starts at or after r/R of the span (whole blocks,
 * as even as they allow; a shard may be empty when the blocks are fewer than the ranks). Its
 * block index in *block, its float offset returned (span when no block is left). */
static size_t shard_start(const size_t off[], const size_t size[], size_t span, int ranks, int r,
                          size_t* block) {
    size_t target = (size_t)((double)span * r / ranks), b = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
        for (size_t i = 0; i < size[k]; i += ZERO_NORM_BLOCK, b++)
            if (off[k] + i >= target) {
                *block = b;
                return r == 0 ? 0 : off[k] + i;
            }
    *block = b;
    return span;
}

size_t zero_shard(const GPTConfig* c, int ranks, int rank, size_t* begin) {
    size_t off[NUM_PARAMETER_TENSORS], size[NUM_PARAMETER_TENSORS], nb, b0, b1;
    size_t span = layout(c, off, size, &nb);
    *begin = shard_start(off, size, span, ranks, rank, &b0);
    size_t end = rank + 1 == ranks ? span : shard_start(off, size, span, ranks, rank + 1, &b1);
    return end - *begin;
}

size_t zero_table_bytes(const GPTConfig* c, int ranks) {
    size_t off[NUM_PARAMETER_TENSORS], size[NUM_PARAMETER_TENSORS], nb;
    layout(c, off, size, &nb);
    return 2 * (size_t)(ranks + 1) * sizeof(size_t) +
           (nb + 1) * (2 * sizeof(size_t) + sizeof(int) + sizeof(double));
}

size_t zero_save_buffer_bytes(const GPTConfig* c) {
    size_t size[NUM_PARAMETER_TENSORS], largest = 0;
    gpt_param_sizes(c, size);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
        if (size[k] > largest) largest = size[k];
    return largest * sizeof(float);
}

int zero_init(Zero* z, const GPTConfig* c, int ranks, int rank, char err[256]) {
    memset(z, 0, sizeof(*z));
    if (ranks < 2 || rank < 0 || rank >= ranks) {
        snprintf(err, 256, "ZeRO-1 needs at least 2 ranks (got rank %d of %d)", rank, ranks);
        return -1;
    }
    size_t nblocks;
    size_t span = layout(c, z->tensor_off, z->tensor_size, &nblocks);
    z->ranks = ranks;
    z->rank = rank;
    z->span = span;
    z->nblocks = (int)nblocks;
    /* zero_table_bytes counts exactly these */
    z->bounds = mem_alloc((size_t)(ranks + 1) * sizeof(size_t));
    z->block_bounds = mem_alloc((size_t)(ranks + 1) * sizeof(size_t));
    z->block_off = mem_alloc((nblocks + 1) * sizeof(size_t));
    z->block_len = mem_alloc((nblocks + 1) * sizeof(size_t));
    z->block_tensor = mem_alloc((nblocks + 1) * sizeof(int));
    z->partials = mem_alloc((nblocks + 1) * sizeof(double));
    size_t b = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
        for (size_t i = 0; i < z->tensor_size[k]; i += ZERO_NORM_BLOCK, b++) {
            size_t left = z->tensor_size[k] - i;
            z->block_off[b] = z->tensor_off[k] + i;
            z->block_len[b] = left < ZERO_NORM_BLOCK ? left : ZERO_NORM_BLOCK;
            z->block_tensor[b] = k;
        }
    for (int r = 0; r < ranks; r++)
        z->bounds[r] = shard_start(z->tensor_off, z->tensor_size, span, ranks, r, &z->block_bounds[r]);
    z->block_bounds[ranks] = nblocks;
    z->bounds[ranks] = span;
    return 0;
}

void zero_free(Zero* z) {
    mem_free(z->bounds);
    mem_free(z->block_bounds);
    mem_free(z->block_off);
    mem_free(z->block_len);
    mem_free(z->block_tensor);
    mem_free(z->partials);
    memset(z, 0, sizeof(*z));
}

void zero_block_partials(Zero* z, GPT* m) {
    const Backend* be = m->be;
    if (be->phase != NULL) be->phase(BE_PHASE_OPTIMIZER);   /* --profile's class, as gpt.c's */
    size_t b = z->block_bounds[z->rank], end = z->block_bounds[z->rank + 1];
    while (b < end) {
        if (be->sum_squares_blocks == NULL) {
            z->partials[b] = be->sum_squares(m->grads_memory + z->block_off[b], z->block_len[b]);
            b++;
            continue;
        }
        /* a run of this rank's blocks of one tensor is one piece of it, cut as sum_squares cuts */
        size_t e = b + 1;
        while (e < end && z->block_tensor[e] == z->block_tensor[b]) e++;
        size_t n = z->block_off[e - 1] + z->block_len[e - 1] - z->block_off[b];
        be->sum_squares_blocks(z->partials + b, m->grads_memory + z->block_off[b], n);
        b = e;
    }
}

float zero_clip_from_partials(const Zero* z, GPT* m, float max_norm) {
    /* gpt_grad_norm: each tensor's blocks added as the backend's sum_squares adds them (the
     * CPU's: in order from 0.0), then the tensors in order */
    double ss = 0.0;
    int b = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        int b0 = b;
        double t = 0.0;
        for (; b < z->nblocks && z->block_tensor[b] == k; b++)
            if (m->be->sum_partials == NULL) t += z->partials[b];
        if (m->be->sum_partials != NULL) t = m->be->sum_partials(z->partials + b0, (size_t)(b - b0));
        ss += t;
    }
    float norm = (float)sqrt(ss);
    /* gpt_clip_grads' coefficient */
    m->grad_scale = 1.0f;
    if (max_norm > 0.0f && isfinite(norm)) {
        float coef = max_norm / (norm + 1e-6f);
        if (coef < 1.0f) m->grad_scale = coef;
    }
    return norm;
}

float* zero_master(const GPT* m, int k, size_t i) {
    float* p[NUM_PARAMETER_TENSORS];
    memcpy(p, &m->params, sizeof(p));
    return p[k] + (i - m->master_first[k]);
}

void zero_adamw_shard(const Zero* z, GPT* m, float lr, float beta1, float beta2, float eps,
                      float weight_decay, int t) {
    if (m->be->phase != NULL) m->be->phase(BE_PHASE_OPTIMIZER);
    size_t begin = z->bounds[z->rank], end = z->bounds[z->rank + 1];
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t a = z->tensor_off[k], e = a + z->tensor_size[k];
        size_t lo = a > begin ? a : begin, hi = e < end ? e : end;
        if (lo >= hi) continue;
        /* AdamW is element-wise: a slice of a tensor updates to the bits of the whole tensor's;
         * the moments of float i sit at i - opt_begin */
        float* w = zero_master(m, k, lo - a);
        m->be->adamw_update(w, m->grads_memory + lo, m->grad_scale,
                            m->m_memory + (lo - m->opt_begin), m->v_memory + (lo - m->opt_begin),
                            hi - lo, lr, beta1, beta2, eps, gpt_param_decay[k] ? weight_decay : 0.0f,
                            t);
    }
    m->grad_scale = 1.0f;   /* the clip's coefficient is this update's */
}
