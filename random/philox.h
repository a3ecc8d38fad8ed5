/* random/philox.h — the one random number generator of seedgpt.
 *
 * Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11), the generator cuRAND calls PHILOX4_32_10. It is counter-based: the output is a pure
 * function of a 128-bit counter and a 64-bit key, so any element's random word can be computed
 * from its coordinates alone, in any order, on any thread, on the CPU or the GPU.
 *
 * This header owns: the generator, the derivation of a dropout site's seed from the master seed,
 * the mapping from an element's coordinates to (counter, word) for every kind of stochastic element,
 * and the host-side conversion of a probability into (threshold, scale). Every kernel and every
 * test uses these functions; nothing else in seedgpt computes a Philox counter.
 * See docs/dropout-rng.md for the contract in prose.
 *
 * Plain C99 / CUDA C: no architecture-specific branch, no global state.
 */
#ifndef SEEDGPT_PHILOX_H
#define SEEDGPT_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define PHILOX_HD __host__ __device__ __forceinline__
#else
#define PHILOX_HD static inline
#endif

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u   /* golden ratio */
#define PHILOX_W1 0xBB67AE85u   /* sqrt(3) - 1 */

/* Philox4x32-10: out = bijection_{key}(ctr). ctr (c0..c3), key (k0, k1). */
PHILOX_HD void philox4x32_10(const uint32_t ctr[4], uint32_t k0, uint32_t k1, uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;   /* the key schedule: bumped after every round (the last bump is unused) */
        k1 += PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* One 32-bit word of Philox4x32-10(counter, key = seed). */
PHILOX_HD uint32_t philox_word(uint64_t seed, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                               int word) {
    uint32_t ctr[4] = {c0, c1, c2, c3};
    uint32_t out[4];
    philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32), out);
    return out[word & 3];
}

/* ---- seeds -------------------------------------------------------------------------------- */

/* Dropout sites (DESIGN §3). Later stochastic ops take the next numbers. */
enum {
    SITE_EMBD = 0,        /* embedding dropout, on wte[token] + wpe[t]; drawn for layer 0 */
    SITE_ATTN_PROB = 1,   /* attention probabilities p_ij (inside the fused kernel) */
    SITE_ATTN_RESID = 2,  /* attention output projection (bias included), before the residual add */
    SITE_MLP_RESID = 3,   /* second MLP linear (bias included), before the residual add */
    SITE_DEPTH_ATTN = 4,  /* stochastic depth of the attention branch */
    SITE_DEPTH_MLP = 5,   /* stochastic depth of the MLP branch */
    NUM_SITES = 6
};

/* pass 0: the forward and every correct recompute. pass 1: the deliberately wrong "fresh seeds"
 * recompute (the negative control). */
enum { PASS_FORWARD = 0, PASS_FRESH = 1 };

/* seed(step, layer, site, pass) = w0 | w1 << 32 of Philox(counter = (step, layer, site, pass),
 * key = master seed). */
PHILOX_HD uint64_t philox_site_seed(uint64_t master, uint32_t step, uint32_t layer, uint32_t site,
                                    uint32_t pass) {
    uint32_t ctr[4] = {step, layer, site, pass};
    uint32_t out[4];
    philox4x32_10(ctr, (uint32_t)master, (uint32_t)(master >> 32), out);
    return (uint64_t)out[0] | ((uint64_t)out[1] << 32);
}

/* Streams for everything that is random but not dropout (weight init, data shuffling, evaluation,
 * sampling). Same derivation with counter (0, 0, 0, tag): tags are far from the pass values 0 and
 * 1, so a stream seed never equals a dropout site seed's counter. */
#define STREAM_INIT    0x494e4954u  /* "INIT" */
#define STREAM_SHUFFLE 0x53485546u  /* "SHUF" */
#define STREAM_EVAL    0x4556414cu  /* "EVAL" */
#define STREAM_SAMPLE  0x53414d50u  /* "SAMP" */
PHILOX_HD uint64_t philox_stream_seed(uint64_t master, uint32_t tag) {
    return philox_site_seed(master, 0, 0, 0, tag);
}

/* ---- keep bits: coordinates -> draw ------------------------------------------------------- */

/* Attention probability of sequence g, query head h, query position i, key position j:
 * counter = (i, ((j >> 5) << 3) | (j & 7), h, g), word = (j >> 3) & 3. One Philox call covers
 * the four key positions j, j+8, j+16, j+24 (within an aligned block of 32). */
PHILOX_HD uint32_t philox_attn_draw(uint64_t seed, uint32_t g, uint32_t h, uint32_t i, uint32_t j) {
    return philox_word(seed, i, ((j >> 5) << 3) | (j & 7), h, g, (int)((j >> 3) & 3));
}

/* The four draws of one attention Philox call: out[w] is the draw of key j = 32*(j>>5) + 8*w +
 * (j & 7), for w = 0..3. Kernels use this to pay one call per four elements. */
PHILOX_HD void philox_attn_draw4(uint64_t seed, uint32_t g, uint32_t h, uint32_t i, uint32_t jblock32,
                                 uint32_t jlow3, uint32_t out[4]) {
    uint32_t ctr[4] = {i, (jblock32 << 3) | jlow3, h, g};
    philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32), out);
}

/* Residual or embedding element of sequence g, position t, channel c:
 * counter = (t, c >> 2, 0, g), word = c & 3. */
PHILOX_HD uint32_t philox_elem_draw(uint64_t seed, uint32_t g, uint32_t t, uint32_t c) {
    return philox_word(seed, t, c >> 2, 0, g, (int)(c & 3));
}

/* The four draws of channels 4q .. 4q+3 of (g, t): one Philox call. */
PHILOX_HD void philox_elem_draw4(uint64_t seed, uint32_t g, uint32_t t, uint32_t q, uint32_t out[4]) {
    uint32_t ctr[4] = {t, q, 0, g};
    philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32), out);
}

/* Stochastic depth of sequence g: counter = (0, 0, 0, g), word = 0. */
PHILOX_HD uint32_t philox_depth_draw(uint64_t seed, uint32_t g) {
    return philox_word(seed, 0, 0, 0, g, 0);
}

/* ---- probability -> (threshold, scale), on the host only ---------------------------------- */

/* Kernels receive thr and scale, never p. keep iff draw >= thr; kept values are multiplied by
 * scale. p = 0 gives thr = 0, scale = 1: kernels then skip the generator entirely, which is
 * bitwise the no-dropout path. */
typedef struct {
    uint32_t thr;   /* keep iff draw >= thr */
    float scale;    /* 1 / (1 - p), rounded once to float */
} Dropout;

/* A host function: under nvcc it is compiled for the host only (device code never calls it), but
 * it must stay visible in nvcc's device pass, which also parses the host code of a .cu file. */
#include <math.h>
static inline Dropout dropout_make(double p) {
    Dropout d;
    double t = (double)llround(p * 4294967296.0);
    if (t > 4294967295.0) t = 4294967295.0;
    d.thr = (uint32_t)t;
    d.scale = (float)(1.0 / (1.0 - p));
    return d;
}

PHILOX_HD int dropout_active(Dropout d) { return d.thr != 0; }

#endif /* SEEDGPT_PHILOX_H */
