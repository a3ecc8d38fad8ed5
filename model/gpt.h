/* model/gpt.h — the GPT-2 model: configuration, parameter and activation layout, and the
 * backend-neutral orchestration of one training step (forward, backward, clip, AdamW).
 *
 * Three structs tell the story: GPTConfig (the blueprint), ParameterTensors (the weights, one
 * allocation with a table of named tensors), and the activations (one allocation; per-layer
 * tables of pointers into it). Every op the orchestrator calls is declared in model/ops.h; which
 * backend implements it is invisible here.
 */
#ifndef SEEDGPT_GPT_H
#define SEEDGPT_GPT_H

#include <stddef.h>
#include <stdint.h>
#include "random/philox.h"
#include "checkpoint/checkpoint.h"
#include "model/backend.h"
#include "model/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int max_seq_len;        /* maxT: positions of wpe */
    int vocab_size;         /* V: real tokens */
    int padded_vocab_size;  /* Vp: V rounded up to a multiple of 128 (LM head rows) */
    int num_layers;         /* L */
    int num_heads;          /* NH: query heads */
    int num_kv_heads;       /* NKV: key/value heads; divides NH (NKV == NH: plain GPT-2) */
    int channels;           /* C = NH * HD */
    /* model options (README "Model options"); 0 in every field is plain GPT-2 */
    int pos_kind;           /* POS_LEARNED: wpe added to the embedding; POS_ROPE: no wpe, q and k
                               rotated after the QKV linear */
    int rope_base;          /* RoPE: theta_d = rope_base^(-2d/HD); 0 with learned positions */
    int rope_layout;        /* RoPE pairs: ROPE_NEOX (d, d + HD/2) or ROPE_GPTJ (2d, 2d + 1) */
    int block_kind;         /* BLOCK_SEQUENTIAL: x += attn(LN1 x); x += mlp(LN2 x).
                               BLOCK_PARALLEL: x = x + attn(LN1 x) + mlp(LN2 x) */
} GPTConfig;

enum { POS_LEARNED = 0, POS_ROPE = 1 };
enum { BLOCK_SEQUENTIAL = 0, BLOCK_PARALLEL = 1 };
#define ROPE_DEFAULT_BASE 10000

/* The angle table of RoPE: cos[t * HD/2 + d] = cos(t * theta_d), sin likewise, for t < maxT and
 * d < HD/2, theta_d = base^(-2d/HD); computed in double on the host and rounded once to float,
 * so every backend (and the sampler) uses the same bits. */
void gpt_rope_table(const GPTConfig* c, float* cos_out, float* sin_out);

static inline int gpt_head_dim(const GPTConfig* c) { return c->channels / c->num_heads; }
/* width of the fused q,k,v projection: NH query heads then NKV key heads then NKV value heads */
static inline int gpt_qkv_channels(const GPTConfig* c) {
    return (c->num_heads + 2 * c->num_kv_heads) * gpt_head_dim(c);
}
static inline int gpt_pad_vocab(int V) { return (V + 127) / 128 * 128; }

/* Checks a configuration; returns NULL if fine, else a message naming the problem. */
const char* gpt_config_problem(const GPTConfig* c);
/* The first field in which a and b differ, e.g. "num_heads (NH)", with the two values in *va and
 * *vb; NULL when the configurations are equal. */
const char* gpt_config_diff(const GPTConfig* a, const GPTConfig* b, int* va, int* vb);

/* ---- parameters (llm.c order) ------------------------------------------------------------- */
#define NUM_PARAMETER_TENSORS 16
typedef struct {
    float* wte;       /* (Vp, C) token embedding, also the LM head (tied); rows >= V are zero */
    float* wpe;       /* (maxT, C); (0) with RoPE: no learned positions */
    float* ln1w;      /* (L, C) */
    float* ln1b;      /* (L, C) */
    float* qkvw;      /* (L, QKV, C) */
    float* qkvb;      /* (L, QKV) */
    float* attprojw;  /* (L, C, C) */
    float* attprojb;  /* (L, C) */
    float* ln2w;      /* (L, C) */
    float* ln2b;      /* (L, C) */
    float* fcw;       /* (L, 4C, C) */
    float* fcb;       /* (L, 4C) */
    float* fcprojw;   /* (L, C, 4C) */
    float* fcprojb;   /* (L, C) */
    float* lnfw;      /* (C) */
    float* lnfb;      /* (C) */
} ParameterTensors;

extern const char* const gpt_param_names[NUM_PARAMETER_TENSORS];
/* nanoGPT's convention: weight decay on 2-D weights and embeddings, not on biases or LN. */
extern const int gpt_param_decay[NUM_PARAMETER_TENSORS];
/* 1 for the tensors only the products read (qkvw, attprojw, fcw, fcprojw): under bf16 they read
 * the operand copy, so their fp32 masters can live on one ZeRO-1 rank alone */
extern const int gpt_param_operand_only[NUM_PARAMETER_TENSORS];

/* Elements of each parameter tensor, in the order above. */
void gpt_param_sizes(const GPTConfig* c, size_t sizes[NUM_PARAMETER_TENSORS]);
/* Each tensor's first float in the parameter block (every tensor starts 64-byte aligned: the
 * layout gpt_build_on carves); returns the block's floats. Gradients and moments use the same
 * offsets. */
size_t gpt_param_offsets(const GPTConfig* c, size_t off[NUM_PARAMETER_TENSORS]);

/* ---- activations -------------------------------------------------------------------------- */
/* What one layer's backward needs from its forward. B, T are the planned batch shape. The
 * operands of products (void*) are stored in `dtype`, the backend's act_dtype (DT_FP32 or
 * DT_BF16, model/backend.h); everything else is fp32: the residual stream (resid2), the
 * LayerNorm statistics and the attention's LSE. */
typedef struct {
    int dtype;         /* DT_*: the element of ln1, qkv, atty, ln2, fch, fch_gelu */
    void* ln1;         /* (B, T, C) */
    float* ln1_mean;   /* (B, T) */
    float* ln1_rstd;   /* (B, T) */
    void* qkv;         /* (B, T, QKV) with RoPE: q and k rotated (what attention reads) */
    void* atty;        /* (B, T, C) attention output (probabilities dropped inside the kernel) */
    float* lse;        /* (B, NH, T) row log-sum-exp of the scaled scores */
    float* resid2;     /* (B, T, C) x + drop_path(drop(attproj(atty))) */
    void* ln2;         /* (B, T, C) LN2 of resid2 (sequential block) or of x (parallel block) */
    float* ln2_mean;   /* (B, T) */
    float* ln2_rstd;   /* (B, T) */
    void* fch;         /* (B, T, 4C) first MLP linear, before GELU */
    void* fch_gelu;    /* (B, T, 4C) */
} LayerActs;
#define NUM_LAYER_ACTS 12
/* Elements of each of a layer's activations, in the order above (from ln1). */
void gpt_layer_act_sizes(const GPTConfig* c, int B, int T, size_t sizes[NUM_LAYER_ACTS]);
/* 1 for the activations that are operands of products (stored in the act dtype), 0 for fp32. */
int gpt_layer_act_is_operand(int i);
/* Bytes of each (unaligned) when the operands are stored in dtype. */
void gpt_layer_act_bytes(const GPTConfig* c, int B, int T, int dtype, size_t bytes[NUM_LAYER_ACTS]);

/* Context parallelism (DESIGN §9): `size` ranks share each sequence of T positions, cut into
 * 2*size chunks of Tc = T / (2*size); this rank (`rank` in its group) holds chunks rank and
 * 2*size-1-rank. Its rows are laid out chunk-major, (2, B, Tc): every (B, T_local) tensor of the
 * model holds chunk `rank` of every sequence, then chunk 2*size-1-rank. ring_shift sends n floats
 * to the next rank of the group and receives n from the previous one (dist/dist.h provides it and
 * its split form ring_start/ring_wait; NULL when size is 1). */
typedef struct {
    int size, rank;
    void (*ring_shift)(const float* send, float* recv, size_t n);
    /* the same shift in two halves, so that compute runs while it travels: ring_start begins it,
     * ring_wait returns once recv holds the data and send may be written again */
    void (*ring_start)(const float* send, float* recv, size_t n);
    void (*ring_wait)(void);
} ContextParallel;

/* The gradients of one layer's activations: reused by every layer in the backward. */
typedef struct {
    float* dresid;   /* (B, T, C) gradient of the residual stream, carried from layer to layer */
    float* dbranch;  /* (B, T, C) gradient of a residual branch's output (after its dropout) */
    float* dln;      /* (B, T, C) */
    float* datty;    /* (B, T, C) */
    float* dqkv;     /* (B, T, QKV) */
    float* dfch;     /* (B, T, 4C) also holds d(fch_gelu) first */
    float* dbranch2; /* (B, T, C) parallel block: the attention branch's output gradient, while
                        the MLP branch's backward uses dbranch; (0) for the sequential block */
    float* attn_scratch; /* attention_backward_scratch_floats(...) */
} GradScratch;

typedef struct {
    GPTConfig config;
    int B, T;                    /* the batch shape the buffers are planned for (at most) */
    int plan_threads;            /* OpenMP threads the scratch is planned for (at most; CPU) */
    const Backend* be;           /* where every buffer below lives and every op runs */
    void* arena;                 /* the one backend allocation all buffers below are carved from */

    ParameterTensors params;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    size_t num_parameters;       /* including the zero padded-vocab rows */
    float* params_memory;        /* the fp32 weights held: the block, or less (sharded masters) */
    /* Sharded masters (ZeRO-1 with an operand copy, model/zero.h): of an operand-only tensor k
     * the model holds the fp32 masters of elements [master_first[k], master_first[k] +
     * master_held[k]) only, those in [opt_begin, opt_begin + opt_floats), and params.X points at
     * element master_first[k] (params_memory is then compact, not the block's layout). Every
     * other tensor, and every tensor without sharding: first 0, held its size. */
    int masters_sharded;
    size_t master_first[NUM_PARAMETER_TENSORS];
    size_t master_held[NUM_PARAMETER_TENSORS];
    ParameterTensors grads;
    float* grads_memory;
    /* the weights as products read them: under a bf16 act dtype a bf16 copy of the whole
     * parameter block (element offsets those of params_memory), rounded from the fp32 masters
     * once per update (gpt_adamw, gpt_to_backend); NULL under fp32: the products read the masters */
    void* wop_memory;
    float* m_memory;             /* AdamW first moment */
    float* v_memory;             /* AdamW second moment */
    /* the floats of the parameter block whose moments m_memory and v_memory hold:
     * [opt_begin, opt_begin + opt_floats), m_memory[i] the moment of float opt_begin + i. The
     * whole block (0, all its floats) unless built for one ZeRO-1 shard (gpt_build_shard) */
    size_t opt_begin, opt_floats;
    /* Host copies of the weights and the AdamW state, for initialisation, model and state files
     * and sampling; gpt_to_host / gpt_to_backend move them. On the CPU backend they are the
     * backend memory itself (the copies are no-ops). */
    float* host_params_memory;
    float* host_m_memory;
    float* host_v_memory;
    ParameterTensors host_params; /* the table into host_params_memory */
    float* host_losses;          /* (B, T) the last forward's losses, on the host */

    /* activations: one allocation. Which of them survive from the forward to the backward is
     * the recompute policy's choice (checkpoint/checkpoint.h): the tables below point either at
     * kept memory or at the recompute scratch. */
    RecomputePolicy policy;
    int act_dtype;               /* be->act_dtype: the element of the operand activations (and lnf) */
    float* acts_memory;
    size_t num_acts;             /* floats of the whole block */
    size_t num_kept_acts;        /* floats kept from the forward to the backward */
    size_t num_recompute_acts;   /* floats of the recompute scratch (0 under none) */
    float** resid;               /* (L+1) pointers to (B, T, C): resid[0] = dropped embedding,
                                    resid[l+1] = output of layer l (input of layer l+1) */
    LayerActs* layer;            /* (L) tables; layer l lives in slot ckpt_layer_slot(l) */
    float* check;                /* (B, T, C) a recomputed segment's output, compared bit for bit
                                    with the stored input of the next segment (NULL under none) */
    void* lnf;                   /* (B, T, C) in act_dtype: the LM head's operand */
    float* lnf_mean;             /* (B, T) */
    float* lnf_rstd;             /* (B, T) */
    int classifier_rows;         /* rows of one classifier chunk (gpt_classifier_rows) */
    float* logits;               /* (classifier_rows, Vp): one chunk's logits, then its dlogits in
                                    place; after a forward, the last chunk's (all of them when
                                    B*T <= classifier_rows) */
    float* losses;               /* (B, T) */
    float* dlnf;                 /* (B, T, C) gradient of the final LayerNorm's output */
    float grad_scale;            /* the clip's coefficient for the next AdamW (1: none); the
                                    clipped gradient is grads * grad_scale */
    float loss_scale;            /* the next backward's dloss, told before a training forward (0:
                                    not told); the forward then computes the classifier's
                                    gradient chunk by chunk */
    int head_grads_done;         /* the last forward did the classifier's gradient */
    int head_logits_kept;        /* the last forward's one chunk holds all the logits */
    int* inputs;                 /* (B, T) copy of the last forward's tokens */
    int* targets;                /* (B, T) */
    GradScratch gs;

    /* context parallelism: T above is this rank's share (2 chunks); cp.size 1: none */
    ContextParallel cp;
    int cp_T;                    /* the global sequence length (T * cp.size) */
    float* cp_dkv[2];            /* (2, B, Tc, 2*NKV*HD) each: the dK, dV partials that travel
                                    back around the ring in the backward. The forward's ring
                                    buffers live in the gradient scratch (dfch, datty, dln), idle
                                    in a forward and in a recompute */
    size_t num_cp_floats;        /* the two above */

    /* randomness: dropout probabilities turned into (thr, scale) once, on the host */
    uint64_t master_seed;
    Dropout drop_embd, drop_attn, drop_resid;
    Dropout drop_path;           /* stochastic depth of each residual branch (sites 4 and 5) */
    float* rope_cos;             /* (maxT, HD/2) RoPE angle table in backend memory; NULL without */
    float* rope_sin;             /* (maxT, HD/2) */
    LayerRecord* records;        /* (L) seeds drawn by each layer's forward */
    /* --log-attn-stats (gpt_set_attn_stats): per layer, max |scaled score|, min LSE, max LSE over
     * the training forwards since gpt_attn_stats_reset, from inside the attention forward; a
     * recompute does not add to them. (L, 3) host floats, always there; attn_stats_on: kept */
    float* attn_stats;
    int attn_stats_on;
    LayerRecord* fresh_records;  /* (K) pass-1 seeds of the negative control's recompute */

    /* the value check of the last backward */
    int check_mismatches;        /* recomputed segments whose output differed from the stored one */
    int check_first_layer;       /* the first recomputed layer (in backward order) that differed */

    /* the last forward */
    int cur_B, cur_T;
    uint32_t cur_g0;             /* global sequence index of row 0 */
    int cur_train;               /* dropout was on */
    int recomputing;             /* a recompute forward is running (not the step's forward) */
    float mean_loss;             /* -1 if no targets */
} GPT;

/* Plans and allocates everything for batches of up to B x T under a recompute policy on a
 * backend: parameters, gradients, AdamW state, kept activations, recompute and gradient scratch,
 * in one backend allocation (plus the host copies when the backend's memory is not host memory).
 * Nothing is allocated after this. Returns 0 or -1 (message in err). */
int gpt_build_on(GPT* m, const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                 const Backend* be, char err[256]);
/* The same with a classifier chunk of classifier_rows rows (0: gpt_classifier_rows's). */
int gpt_build_rows(GPT* m, const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                   const Backend* be, int classifier_rows, char err[256]);
/* The classifier's chunk for batches of B x T: its logits hold no more floats than the MLP's
 * hidden activation of the batch (4C per position), at least 1024 rows (smaller chunks repack
 * wte more often than they save), at most B*T. No path holds the whole (B, T, Vp) logits: at
 * GPT-2's vocabulary they were the largest buffer. */
int gpt_classifier_rows(const GPTConfig* c, int B, int T);
/* The same for context parallelism: T is the global sequence length, which must be a multiple of
 * 2 * cp->size; the model holds T / cp->size positions per sequence (model/gpt.h's chunk-major
 * layout), and every forward must be given exactly that many. cp->size 1 is gpt_build_on. */
int gpt_build_cp(GPT* m, const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                 const Backend* be, const ContextParallel* cp, char err[256]);
/* gpt_build_on with AdamW's moments for floats [opt_begin, opt_begin + opt_floats) of the
 * parameter block only (ZeRO-1, model/zero.h): the arena holds 2 x opt_floats of moments instead
 * of twice the block. Under an operand copy (bf16, fp16) the masters of the operand-only tensors
 * are held for those floats only too (masters_sharded): the rest of their operand copy comes from
 * the other ranks (train.c), and such a model cannot sample from its host weights. Such a model
 * is updated by zero_adamw_shard, never by gpt_adamw. */
int gpt_build_shard(GPT* m, const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                    const Backend* be, size_t opt_begin, size_t opt_floats, char err[256]);
/* The global position of local row t (0 <= t < T / cp->size) of a context-parallel model. */
int gpt_cp_position(const GPT* m, int t);
/* The same on the CPU backend. */
int gpt_build_policy(GPT* m, const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                     char err[256]);
/* The same with the policy none (every activation kept), on the CPU. */
int gpt_build(GPT* m, const GPTConfig* c, int B, int T, char err[256]);
void gpt_free(GPT* m);

/* Weights and AdamW state: backend -> host copies, and host copies -> backend (no-ops on the CPU).
 * Call gpt_to_host before writing a model or state file or sampling, gpt_to_backend after
 * loading one. */
void gpt_to_host(GPT* m);
void gpt_to_backend(GPT* m);
/* The weights' operand copy (bf16, fp16) rounded again from the masters the model holds, on the
 * backend (nothing in fp32): gpt_to_backend's last step alone, for weights that changed on the
 * backend (ZeRO-1's gathered shards, train.c). */
void gpt_round_weights(GPT* m);

/* GPT-2 initialisation from the master seed's INIT stream: N(0, 0.02), residual projections
 * N(0, 0.02 / sqrt(2L)), LayerNorm weights 1, biases 0, padded vocab rows 0. Written to the host
 * copy and moved to the backend; the AdamW state is zeroed. */
void gpt_init_weights(GPT* m, uint64_t master_seed);

void gpt_set_dropout(GPT* m, uint64_t master_seed, double p_embd, double p_attn, double p_resid);
/* Stochastic depth: each residual branch of each sequence dropped with probability p (kept ones
 * scaled 1/(1-p)) in training forwards; p in [0, 1), 0 = off (bitwise the plain path). */
void gpt_set_drop_path(GPT* m, double p);

/* --log-attn-stats: 0, or -1 when the backend's attention has no statistics (err says so). */
int gpt_set_attn_stats(GPT* m, int on, char err[256]);
/* Starts a step's statistics (max |s| 0, min LSE +inf, max LSE -inf per layer). */
void gpt_attn_stats_reset(GPT* m);

/* Where a non-finite gradient is first met in the backward's order of visit (the final
 * LayerNorm, then layers L-1 down to 0, each from its MLP projection down to ln1, then wpe and
 * wte): the tensor's index into gpt_param_names, and *layer its layer (-1 for wte, wpe and the
 * final LayerNorm). -1 when every gradient is finite. A device backend's gradients are copied to
 * the host piece by piece as they are looked at (through to_host). For the fp16 overflow line:
 * where the scaled gradient left the range. */
int gpt_first_nonfinite_grad(const GPT* m, int* layer);

/* Forward over inputs (B, T) (B <= m->B, T <= m->T). Row b is global sequence g0 + b (DESIGN §2).
 * train != 0 turns dropout on and draws the step's seeds into the layer records. With targets,
 * returns the mean loss over the B*T positions, else -1. */
float gpt_forward(GPT* m, const int* inputs, const int* targets, int B, int T, uint32_t g0,
                  uint32_t step, int train);

/* Tells the next training forward the dloss its backward will take: the forward then computes
 * the classifier's gradient chunk by chunk (the chunk's logits are still there) instead of the
 * backward computing every chunk's logits again. The same bits either way. The backward must be
 * given the same dloss; it forgets the scale. */
void gpt_set_loss_scale(GPT* m, float dloss);

void gpt_zero_grad(GPT* m);
/* Backward of the last forward, accumulating into the parameter gradients. dloss is the
 * derivative of the objective with respect to each position's loss (1/(B*T) for a mean).
 * Under a recompute policy each segment is recomputed first, with the seeds of its layers'
 * records. Returns the number of recomputed segments whose output failed the value check (0 when
 * the check is off). */
int gpt_backward(GPT* m, float dloss);

/* Global L2 norm of the gradients (deterministic: fixed partition, fixed order). */
float gpt_grad_norm(GPT* m);
/* Clips the gradients' norm to at most max_norm (0 disables); returns the norm before. The
 * gradient buffers are left as they are: the coefficient min(1, max_norm / (norm + 1e-6)) is kept
 * (gpt_grad_scale) and gpt_adamw applies it as it reads each gradient, the same float product
 * an in-place scaling would have stored, so the update's bits are the same without that pass
 * over the gradients. Until the next gpt_adamw or gpt_zero_grad, the clipped gradient is
 * grads * gpt_grad_scale(m). */
float gpt_clip_grads(GPT* m, float max_norm);
/* gpt_clip_grads for gradients computed at loss_scale times the loss (--precision fp16's dynamic
 * loss scaling; a power of two): returns the norm of the unscaled gradients (the scaled norm over
 * loss_scale, exact) and keeps the coefficient times 1 / loss_scale, so gpt_adamw reads the
 * unscaled, clipped gradient. loss_scale 1 is gpt_clip_grads, bit for bit. */
float gpt_clip_grads_unscaled(GPT* m, float max_norm, float loss_scale);
float gpt_grad_scale(const GPT* m);
/* AdamW with bias correction (t: the updates applied so far, this one included; a step skipped
 * as non-finite is not counted) and decoupled weight decay on decaying tensors. The moments must
 * cover the whole block (not a gpt_build_shard model). */
void gpt_adamw(GPT* m, float lr, float beta1, float beta2, float eps, float weight_decay, int t);

/* Bytes of each planned region (for the start-up memory report). */
typedef struct {
    size_t params, grads, optimizer;
    size_t weights_op;    /* the weights' bf16 operand copy (0 in fp32) */
    size_t activations;   /* kept from the forward to the backward: the sum of the three below */
    size_t layer_acts;    /* of which the layers' activations (ln1 ... fch_gelu of kept slots) */
    size_t resid;         /* of which the kept residual streams (fp32) */
    size_t logits;        /* of which the classifier: one chunk of logits, the losses and dlnf
                             (the rest of activations: lnf and its statistics) */
    size_t recompute;     /* scratch the recompute fills (K layers); 0 under none */
    size_t scratch;       /* the backward's gradient scratch (one layer) */
    size_t cp;            /* context parallelism's ring buffers of the backward; 0 without */
} GPTMemory;
GPTMemory gpt_memory(const GPT* m);

/* What gpt_build_on(c, B, T, policy, be) would allocate, from the same layout functions it
 * allocates with, without allocating: every byte of the one backend arena, split by use, and of
 * the host-side tables. `threads` is the OpenMP thread count the build would see (the CPU
 * attention scratch is per thread). The regions sum exactly to `arena`. */
typedef struct {
    size_t params, grads, adamw;   /* bytes; adamw: the moments m and v */
    size_t weights_op;    /* the weights' bf16 operand copy (0 when the products read the fp32
                             masters) */
    size_t activations;   /* kept from the forward to the backward, the logits excluded */
    size_t layer_acts;    /* of activations: the layers' kept activations (0 under a recompute
                             policy, whose layers live in the recompute scratch) */
    size_t resid;         /* of activations: the kept residual streams (fp32) */
    size_t logits;        /* the classifier: one chunk of logits (classifier_rows x Vp), the
                             (B, T) losses and the (B, T, C) gradient of lnf's output */
    size_t recompute;     /* what a recompute fills (K layers' slots, their residual streams and
                             the check buffer); 0 under none */
    size_t grad_scratch;  /* the backward's gradient buffers (one layer), attention's excluded */
    size_t attn_scratch;  /* the attention backward's scratch */
    size_t other;         /* the token ids and targets, the RoPE tables */
    size_t arena;         /* the sum: the one be->alloc of the build */
    size_t host;          /* host-side tables (and a device backend's host copies of the
                             weights and moments), allocated through model/mem.h */
    size_t host_transient;   /* freed before the build returns (the RoPE table, built on the
                                host): counts in the peak, not in what stays */
    size_t op_scratch;    /* a device backend's scratch beside the arena (Backend.scratch_bytes:
                             partial sums, token buckets, bf16 operand copies), reserved by the
                             build; 0 on the CPU */
    size_t batch;         /* host: a training loop's copy of one batch's token ids and targets
                             (2 B T ints), which the trainer allocates after the build */
    double step_flops;       /* model FLOPs of one step, nanoGPT's 6N + 12 L C T per token */
    double recompute_flops;  /* forward FLOPs the policy computes again per step */
} GPTPlan;
int gpt_plan(const GPTConfig* c, int B, int T, const RecomputePolicy* policy, const Backend* be,
             int threads, GPTPlan* out, char err[256]);
/* The same for a model built by gpt_build_shard with a shard of opt_floats floats (SIZE_MAX:
 * the whole block, gpt_plan). */
int gpt_plan_shard(const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                   const Backend* be, int threads, size_t opt_begin, size_t opt_floats,
                   GPTPlan* out, char err[256]);
/* The floats of the fp32 weights a model built for the moments of [opt_begin, opt_begin +
 * opt_floats) holds (opt_floats SIZE_MAX: the whole block, unsharded), each tensor's part in
 * first[k], held[k] as GPT's master_first, master_held: the masters are sharded with the moments
 * when act_dtype has an operand copy. */
size_t gpt_master_layout(const GPTConfig* c, int act_dtype, size_t opt_begin, size_t opt_floats,
                         size_t first[NUM_PARAMETER_TENSORS], size_t held[NUM_PARAMETER_TENSORS]);
/* The operand copy of element i of tensor k (a model with an operand copy). */
void* gpt_wop_at(const GPT* m, int k, size_t i);

#ifdef __cplusplus
}
#endif
#endif
