/* model/sample.h — text generation: a forward of one position at a time with a key/value cache,
 * and the draw of the next token.
 *
 * The Sampler reads the weights of a GPT (never its activations, gradients or records), so it can
 * sample from a model in the middle of training without disturbing the step. Each layer keeps the
 * keys and values of every position fed so far: (L, maxT, NKV*HD) each. Feeding position t costs
 * O(t) in attention and O(params) in the matmuls, so a sequence of n tokens costs O(n) matmul work
 * (linear in length), not the O(n^2) of recomputing the whole context at every step. Dropout is
 * off (this is inference). With RoPE the new token's q and k are rotated at its absolute position
 * (the cache holds rotated keys), exactly as the training forward rotates row t. The context ends at the model's max_seq_len: sampler_feed refuses a
 * position beyond it.
 *
 * Randomness (DESIGN §3): the draw that picks the token at sequence position t is one word of
 *   Philox4x32-10(counter = (t, stream, 0, 0), key = sample_seed), word 0,
 * where sample_seed = philox_stream_seed(master, STREAM_SAMPLE) and `stream` tells apart the
 * samples of one run: 0 for `./train sample`, the step number for `--sample-every` during
 * training. u = (word + 0.5) / 2^32 picks the token by inverse CDF over the softmax of the
 * logits divided by the temperature, in double: with top-k, over the k largest logits taken in
 * order of decreasing logit (ties: lower id first; O(V log k)); without, over all V in id order.
 * Temperature 0 is greedy (argmax, lower id on a tie) and draws nothing.
 */
#ifndef SEEDGPT_SAMPLE_H
#define SEEDGPT_SAMPLE_H

#include <stdint.h>
#include <stdio.h>
#include "model/gpt.h"

typedef struct {
    const GPT* model;      /* the weights (read only) */
    int pos;               /* positions fed so far = the next position */
    float* kcache;         /* (L, maxT, NKV*HD) */
    float* vcache;         /* (L, maxT, NKV*HD) */
    /* one position's buffers */
    float* x;              /* (C) the residual stream */
    float* ln;             /* (C) */
    float* qkv;            /* (QKV) */
    float* atty;           /* (C) */
    float* branch;         /* (C) a residual branch's output */
    float* fch;            /* (4C) */
    float* scores;         /* (maxT) one head's attention row */
    float* logits;         /* (Vp) */
    int* order;            /* (V) token ids, sorted by logit for top-k */
    float* x_in;           /* (C) the layer's input (the parallel block feeds it to both branches) */
    float* rope_cos;       /* (maxT, HD/2) RoPE angle table (gpt_rope_table); NULL without RoPE */
    float* rope_sin;       /* (maxT, HD/2) */
} Sampler;

/* Allocates the cache and buffers for m's configuration. Cannot fail (mem_alloc exits). */
void sampler_init(Sampler* s, const GPT* m);
/* The bytes sampler_init allocates for a model of this configuration (model/mem.h counts them). */
size_t sampler_bytes(const GPTConfig* c);
void sampler_free(Sampler* s);
/* Forgets the cache: the next token fed is position 0. */
void sampler_reset(Sampler* s);

/* Feeds `token` at position s->pos, appends its keys and values to the cache and returns the
 * logits (Vp floats; the first V are real) of the next token. NULL when the context is full
 * (s->pos == max_seq_len) or the token is outside the vocabulary. */
const float* sampler_feed(Sampler* s, int token);

/* The next token from logits (V real ones): see the header comment. top_k <= 0 or >= V: all.
 * order: V ints of scratch. */
int sample_pick(const float* logits, int V, double temperature, int top_k, uint64_t sample_seed,
                uint32_t position, uint32_t stream, int* order);

/* Writes n bytes of decoded text to f. escape 0: as they are. escape 1 (stdout is a terminal):
 * control bytes other than newline and tab (0x00-0x1f, 0x7f) are written as \xHH, so a sample
 * cannot move the cursor, clear the screen or retitle the window; bytes from 0x80 up (UTF-8) pass
 * through. */
void sample_write_text(FILE* f, const unsigned char* text, size_t n, int escape);

#endif
