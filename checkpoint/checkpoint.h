/* checkpoint/checkpoint.h — per-layer records of a training step's forward.
 *
 * A layer draws its dropout site seeds into its record before any of its kernels runs (DESIGN §3),
 * and every kernel of that layer receives its seed from the record as an argument. The backward
 * (and, with activation checkpointing, the recompute) reads the same record, so it regenerates
 * exactly the masks of the forward. This folder knows layer shapes and seeds, not data or the
 * optimizer.
 */
#ifndef SEEDGPT_CHECKPOINT_H
#define SEEDGPT_CHECKPOINT_H

#include <stdint.h>
#include "random/philox.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint32_t step;              /* the optimizer step these seeds belong to */
    uint32_t layer;
    uint64_t seed[NUM_SITES];   /* seed[site] = philox_site_seed(master, step, layer, site, pass 0);
                                   site 0 (embedding) only in layer 0's record */
} LayerRecord;

/* Draw the layer's site seeds for this step (pass selects the forward or the negative control). */
static inline void layer_record_draw(LayerRecord* rec, uint64_t master_seed, uint32_t step,
                                     uint32_t layer, uint32_t pass) {
    rec->step = step;
    rec->layer = layer;
    for (uint32_t site = 0; site < NUM_SITES; site++) {
        rec->seed[site] = (site == SITE_EMBD && layer != 0)
                              ? 0 : philox_site_seed(master_seed, step, layer, site, pass);
    }
}

/* ---- recompute policies (DESIGN §4) -------------------------------------------------------
 *
 * none     every activation of every layer is kept for the backward.
 * every:K  the layers form segments of K consecutive layers (the last may be shorter). Only each
 *          segment's input (the residual stream entering its first layer) and the input of the
 *          final LayerNorm are kept; before a segment's backward its layers are recomputed from
 *          that input, with the seeds in their records, into a scratch sized for K layers.
 * layer    every:1.
 */
typedef enum { CHECK_OFF = 0, CHECK_WARN = 1, CHECK_STOP = 2 } RecomputeCheck;

typedef struct {
    int every;              /* K; 0 = none */
    int fresh_seeds;        /* the negative control: recompute (and its backward) with pass-1 seeds */
    RecomputeCheck check;   /* compare each recomputed segment output with the stored input above */
    int selective;          /* keep only what the products and the attention need: ln1, ln2 and
                               the GELU output are not kept per layer but recomputed in the
                               backward (from the kept residual input, mean and rstd, and fch) */
} RecomputePolicy;

/* "none", "layer", "every:K" (K >= 1), "selective", or "selective+layer" / "selective+every:K"
 * (the segments' layers keep selective storage). Returns 0, or -1 with one line in err. */
int recompute_parse(const char* s, RecomputePolicy* p, char err[256]);
/* "off", "warn" or "stop". */
int recompute_check_parse(const char* s, RecomputeCheck* c, char err[256]);
/* A short name: "none", "layer", "every:3", "selective", "selective+every:3". */
const char* recompute_name(const RecomputePolicy* p, char buf[32]);

/* Layers per segment: K, or L for none (one segment that is never recomputed). */
static inline int ckpt_segment_len(const RecomputePolicy* p, int L) {
    return p->every > 0 && p->every < L ? p->every : L;
}
static inline int ckpt_recomputes(const RecomputePolicy* p) { return p->every > 0; }
/* Is the residual stream entering layer l (l = L: the final LayerNorm's input) kept from the
 * forward to the backward? */
static inline int ckpt_resid_kept(const RecomputePolicy* p, int L, int l) {
    return !ckpt_recomputes(p) || l % ckpt_segment_len(p, L) == 0 || l == L;
}
static inline int ckpt_num_resid_kept(const RecomputePolicy* p, int L) {
    int n = 0;
    for (int l = 0; l <= L; l++) n += ckpt_resid_kept(p, L, l);
    return n;
}
/* The scratch slot that layer l's activations live in: l for none, l % K otherwise. */
static inline int ckpt_layer_slot(const RecomputePolicy* p, int L, int l) {
    return l % ckpt_segment_len(p, L);
}

#ifdef __cplusplus
}
#endif
#endif
