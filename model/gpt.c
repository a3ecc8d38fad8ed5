/* model/gpt.c — the one orchestrator: layout of parameters and activations, initialisation,
 * forward, backward, gradient clipping and AdamW. Backend-neutral: every computation and every
 * touch of the model's memory goes through the backend table m->be (model/backend.h), whose ops
 * have the contracts of model/ops.h and attention/attention.h.
 *
 * The step reads: forward (each layer draws its seeds into its record, then runs its kernels with
 * those seeds) -> loss -> backward (each layer's dropout masks regenerated from its record) ->
 * clip -> AdamW.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "model/gpt.h"
#include "model/mem.h"
#ifdef SEEDGPT_TEST_BUILD
#include "attention/attention.h"
#include "model/state.h"   /* fault_fires */
#endif

const char* const gpt_param_names[NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
const int gpt_param_decay[NUM_PARAMETER_TENSORS] = {
    1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
/* qkvw, attprojw, fcw, fcprojw: read only by the products (the encoder reads wte's and wpe's rows,
 * the LayerNorms and biases their fp32 values) */
const int gpt_param_operand_only[NUM_PARAMETER_TENSORS] = {
    0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

const char* gpt_config_problem(const GPTConfig* c) {
    if (c->max_seq_len <= 0) return "max sequence length must be positive";
    if (c->vocab_size <= 0 || c->vocab_size > 65536) return "vocab size must be in 1..65536";
    if (c->padded_vocab_size < c->vocab_size) return "padded vocab smaller than vocab";
    if (c->num_layers <= 0) return "number of layers must be positive";
    if (c->num_heads <= 0 || c->channels <= 0) return "heads and channels must be positive";
    if (c->channels % c->num_heads != 0) return "channels must be a multiple of heads";
    if (c->num_kv_heads <= 0 || c->num_heads % c->num_kv_heads != 0)
        return "kv heads must divide heads";
    if (c->pos_kind != POS_LEARNED && c->pos_kind != POS_ROPE)
        return "position kind must be 0 (learned) or 1 (rope)";
    if (c->block_kind != BLOCK_SEQUENTIAL && c->block_kind != BLOCK_PARALLEL)
        return "block kind must be 0 (sequential) or 1 (parallel)";
    if (c->pos_kind == POS_ROPE) {
        if (c->rope_base < 2) return "rope base must be at least 2";
        if (c->rope_layout != ROPE_NEOX && c->rope_layout != ROPE_GPTJ)
            return "rope layout must be 0 (neox) or 1 (gptj)";
        if ((c->channels / c->num_heads) % 2 != 0) return "rope needs an even head dimension";
    } else if (c->rope_base != 0 || c->rope_layout != 0) {
        return "rope base and layout must be 0 with learned positions";
    }
    /* sizes are computed in size_t, a few in int: refuse shapes that overflow either */
    double C = c->channels, HD = C / c->num_heads, L = c->num_layers;
    double qkv = (c->num_heads + 2.0 * c->num_kv_heads) * HD;
    double params = (double)c->padded_vocab_size * C + (double)c->max_seq_len * C +
                    L * (qkv * C + 8.0 * C * C + 12.0 * C);
    if (qkv > 1 << 30 || 4.0 * C > 1 << 30 || params > 1099511627776.0)
        return "model too large (over 2^40 parameters or 2^30 channels)";
    return NULL;
}

const char* gpt_config_diff(const GPTConfig* a, const GPTConfig* b, int* va, int* vb) {
    static const char* const names[11] = {"max_seq_len (maxT)", "vocab_size (V)",
                                          "padded_vocab_size (Vp)", "num_layers (L)",
                                          "num_heads (NH)", "num_kv_heads (NKV)", "channels (C)",
                                          "position kind (0 learned, 1 rope)", "rope base",
                                          "rope layout (0 neox, 1 gptj)",
                                          "block kind (0 sequential, 1 parallel)"};
    int fa[11] = {a->max_seq_len, a->vocab_size, a->padded_vocab_size, a->num_layers,
                  a->num_heads, a->num_kv_heads, a->channels, a->pos_kind, a->rope_base,
                  a->rope_layout, a->block_kind};
    int fb[11] = {b->max_seq_len, b->vocab_size, b->padded_vocab_size, b->num_layers,
                  b->num_heads, b->num_kv_heads, b->channels, b->pos_kind, b->rope_base,
                  b->rope_layout, b->block_kind};
    for (int i = 0; i < 11; i++) {
        if (fa[i] != fb[i]) { *va = fa[i]; *vb = fb[i]; return names[i]; }
    }
    return NULL;
}

void gpt_param_sizes(const GPTConfig* c, size_t s[NUM_PARAMETER_TENSORS]) {
    size_t Vp = c->padded_vocab_size, C = c->channels, L = c->num_layers;
    size_t maxT = c->max_seq_len, QKV = gpt_qkv_channels(c);
    s[0] = Vp * C;        /* wte */
    s[1] = c->pos_kind == POS_ROPE ? 0 : maxT * C;   /* wpe: none with RoPE */
    s[2] = L * C;         /* ln1w */
    s[3] = L * C;         /* ln1b */
    s[4] = L * QKV * C;   /* qkvw */
    s[5] = L * QKV;       /* qkvb */
    s[6] = L * C * C;     /* attprojw */
    s[7] = L * C;         /* attprojb */
    s[8] = L * C;         /* ln2w */
    s[9] = L * C;         /* ln2b */
    s[10] = L * 4 * C * C; /* fcw */
    s[11] = L * 4 * C;    /* fcb */
    s[12] = L * C * 4 * C; /* fcprojw */
    s[13] = L * C;        /* fcprojb */
    s[14] = C;            /* lnfw */
    s[15] = C;            /* lnfb */
}

void gpt_layer_act_sizes(const GPTConfig* c, int B, int T, size_t s[NUM_LAYER_ACTS]) {
    size_t BT = (size_t)B * T, C = c->channels, QKV = gpt_qkv_channels(c), NH = c->num_heads;
    s[0] = BT * C;      /* ln1 */
    s[1] = BT;          /* ln1_mean */
    s[2] = BT;          /* ln1_rstd */
    s[3] = BT * QKV;    /* qkv */
    s[4] = BT * C;      /* atty */
    s[5] = BT * NH;     /* lse */
    s[6] = BT * C;      /* resid2 */
    s[7] = BT * C;      /* ln2 */
    s[8] = BT;          /* ln2_mean */
    s[9] = BT;          /* ln2_rstd */
    s[10] = BT * 4 * C; /* fch */
    s[11] = BT * 4 * C; /* fch_gelu */
}

int gpt_layer_act_is_operand(int i) {
    return i == 0 || i == 3 || i == 4 || i == 7 || i == 10 || i == 11;   /* ln1 qkv atty ln2 fch fch_gelu */
}

void gpt_layer_act_bytes(const GPTConfig* c, int B, int T, int dtype, size_t bytes[NUM_LAYER_ACTS]) {
    gpt_layer_act_sizes(c, B, T, bytes);
    for (int i = 0; i < NUM_LAYER_ACTS; i++)
        bytes[i] *= gpt_layer_act_is_operand(i) ? dtype_bytes(dtype) : sizeof(float);
}

/* bytes rounded up to a multiple of 64: every tensor starts 64-byte aligned */
static size_t align64(size_t bytes) { return (bytes + 63) / 64 * 64; }

/* Carves n tensors of the given byte sizes out of one block (64-byte aligned each); with
 * base == NULL it only counts. Returns the bytes. */
static size_t carve_bytes(char* base, void* ptrs[], const size_t* bytes, int n) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (base != NULL) ptrs[i] = base + off;
        off += align64(bytes[i]);
    }
    return off;
}

/* Carves n tensors of the given sizes out of one block; every tensor starts 64-byte aligned.
 * With base == NULL it only counts the floats needed. */
static size_t carve(float* base, float** ptrs[], const size_t* sizes, int n) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (base != NULL && ptrs != NULL) *ptrs[i] = base + off;
        off += mem_align_floats(sizes[i]);
    }
    return off;
}

static void param_ptrs(ParameterTensors* p, float** ptrs[NUM_PARAMETER_TENSORS]) {
    float** q[NUM_PARAMETER_TENSORS] = {
        &p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->attprojw, &p->attprojb,
        &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb};
    memcpy(ptrs, q, sizeof(q));
}

static void layer_act_set(LayerActs* a, void* const q[NUM_LAYER_ACTS], int dtype) {
    a->dtype = dtype;
    a->ln1 = q[0]; a->ln1_mean = q[1]; a->ln1_rstd = q[2]; a->qkv = q[3]; a->atty = q[4];
    a->lse = q[5]; a->resid2 = q[6]; a->ln2 = q[7]; a->ln2_mean = q[8]; a->ln2_rstd = q[9];
    a->fch = q[10]; a->fch_gelu = q[11];
}

/* The activation block, in order: the kept residual streams, the tail (lnf, lnf_mean, lnf_rstd,
 * logits, losses, dlnf), then the layer slots, and under a recompute policy the residual-stream
 * slots inside a segment and the check buffer. Under none every layer has its own slot and every
 * residual stream is kept; under every:K there are K slots, and only segment inputs and the final
 * LayerNorm's input are kept. The operands of products (the layers' and lnf) take
 * dtype_bytes(act_dtype) a element, everything else 4. Sets the counts (and the pointers when
 * base != NULL, the kept byte figures when fig != NULL); returns the floats needed (every region
 * is a multiple of 64 bytes). */
static size_t plan_activations(GPT* m, float* base_f, GPTMemory* fig) {
    const GPTConfig* c = &m->config;
    const RecomputePolicy* p = &m->policy;
    char* base = (char*)base_f;
    size_t BT = (size_t)m->B * m->T, C = c->channels, F = sizeof(float);
    size_t ab = dtype_bytes(m->act_dtype);
    int L = c->num_layers, K = ckpt_segment_len(p, L);
    size_t off = 0, resid_bytes = align64(BT * C * F);
#define AT(n) (base == NULL ? NULL : base + (n))
    for (int l = 0; l <= L; l++) {
        if (!ckpt_resid_kept(p, L, l)) continue;
        if (base != NULL) m->resid[l] = (float*)(base + off);
        off += resid_bytes;
    }
    size_t kept_resid = off;
    /* the classifier: one chunk of logits, the losses, and the gradient of the final LayerNorm's
     * output, which a training forward computes chunk by chunk for the backward */
    size_t tail[6] = {BT * C * ab, BT * F, BT * F,
                      (size_t)m->classifier_rows * c->padded_vocab_size * F, BT * F, BT * C * F};
    void* tp[6];
    off += carve_bytes(AT(off), tp, tail, 6);
    if (base != NULL) {
        m->lnf = tp[0]; m->lnf_mean = tp[1]; m->lnf_rstd = tp[2];
        m->logits = tp[3]; m->losses = tp[4]; m->dlnf = tp[5];
    }
    size_t kept_tail = off;

    size_t sizes[NUM_LAYER_ACTS];
    gpt_layer_act_bytes(c, m->B, m->T, m->act_dtype, sizes);
    /* selective: ln1, ln2 and fch_gelu have no place in a slot; every layer's point into one
     * shared set at the end, which the forward fills and the backward refills */
    size_t shared[3] = {sizes[0], sizes[7], sizes[11]};
    if (p->selective) sizes[0] = sizes[7] = sizes[11] = 0;
    size_t slot_bytes = carve_bytes(NULL, NULL, sizes, NUM_LAYER_ACTS);
    size_t slots_start = off;
    off += (size_t)K * slot_bytes;
    for (int l = 0; l < L && base != NULL; l++) {
        void* q[NUM_LAYER_ACTS];
        size_t slot = (size_t)ckpt_layer_slot(p, L, l);
        carve_bytes(base + slots_start + slot * slot_bytes, q, sizes, NUM_LAYER_ACTS);
        layer_act_set(&m->layer[l], q, m->act_dtype);
    }
    size_t kept_end;
    if (ckpt_recomputes(p)) {
        /* residual streams inside a segment: slot l % K (never 0: that one is the kept input) */
        size_t rs_start = off;
        off += (size_t)K * resid_bytes;   /* slots 1..K-1, then the check buffer */
        for (int l = 0; l <= L; l++) {
            if (ckpt_resid_kept(p, L, l)) continue;
            if (base != NULL) m->resid[l] = (float*)(base + rs_start + (size_t)((l % K) - 1) * resid_bytes);
        }
        if (base != NULL) m->check = (float*)(base + rs_start + (size_t)(K - 1) * resid_bytes);
        kept_end = kept_tail;
    } else {
        m->check = NULL;
        kept_end = off;
    }
    if (p->selective) {
        void* sp[3];
        off += carve_bytes(AT(off), sp, shared, 3);
        for (int l = 0; l < L && base != NULL; l++) {
            m->layer[l].ln1 = sp[0];
            m->layer[l].ln2 = sp[1];
            m->layer[l].fch_gelu = sp[2];
        }
    }
#undef AT
    m->num_kept_acts = kept_end / F;
    m->num_recompute_acts = (off - kept_end) / F;
    if (fig != NULL) {
        fig->resid = kept_resid;
        fig->logits = align64(tail[3]) + align64(tail[4]) + align64(tail[5]);
        fig->layer_acts = kept_end - kept_tail;
    }
    return off / F;
}

static size_t plan_scratch(GPT* m, float* base) {
    const GPTConfig* c = &m->config;
    size_t BT = (size_t)m->B * m->T, C = c->channels;
    size_t sizes[8] = {BT * C, BT * C, BT * C, BT * C, BT * gpt_qkv_channels(c), BT * 4 * C,
                       m->be->attention_backward_scratch_floats(m->B, m->T, c->num_heads,
                                                                c->num_kv_heads, gpt_head_dim(c),
                                                                m->plan_threads),
                       c->block_kind == BLOCK_PARALLEL ? BT * C : 0};
    GradScratch* g = &m->gs;
    float** ptrs[8] = {&g->dresid, &g->dbranch, &g->dln, &g->datty, &g->dqkv, &g->dfch,
                       &g->attn_scratch, &g->dbranch2};
    return carve(base, ptrs, sizes, 8);
}

/* Context parallelism's backward ring buffers: two (B, T, 2*NKV*HD) blocks of dK, dV partials
 * (the one this rank works on, the one arriving); nothing without context parallelism. */
static size_t plan_cp(GPT* m, float* base) {
    if (m->cp.size <= 1) return 0;
    size_t n = (size_t)m->B * m->T * 2 * m->config.num_kv_heads * gpt_head_dim(&m->config);
    size_t sizes[2] = {n, n};
    float** ptrs[2] = {&m->cp_dkv[0], &m->cp_dkv[1]};
    return carve(base, ptrs, sizes, 2);
}

/* The floats of the weights' operand copy of a parameter block of pfloats floats (0 in fp32). */
static size_t wop_floats(const Backend* be, size_t pfloats) {
    return be->act_dtype == DT_FP32 ? 0 : align64(pfloats * dtype_bytes(be->act_dtype)) / sizeof(float);
}

/* The RoPE angle tables' floats (cos, then sin: each this many); 0 with learned positions. */
static size_t rope_table_floats(const GPTConfig* c) {
    return c->pos_kind == POS_ROPE
               ? mem_align_floats((size_t)c->max_seq_len * (gpt_head_dim(c) / 2)) : 0;
}

/* The one backend arena, in floats: parameters (nmaster: the block, or under sharded masters the
 * compact parts gpt_master_layout gives), gradients (the block), AdamW m and v (nopt floats each:
 * the whole block, or one ZeRO-1 shard of it), activations, gradient scratch, then the tokens and
 * targets (ints, the size of floats) and the RoPE tables. */
static size_t arena_floats(size_t nmaster, size_t pfloats, size_t nopt, size_t wop, size_t acts,
                           size_t scratch, size_t ntok, size_t nrope, size_t ncp) {
    return nmaster + pfloats + 2 * nopt + wop + acts + scratch + 2 * ntok + 2 * nrope + ncp;
}

size_t gpt_master_layout(const GPTConfig* c, int act_dtype, size_t opt_begin, size_t opt_floats,
                         size_t first[NUM_PARAMETER_TENSORS], size_t held[NUM_PARAMETER_TENSORS]) {
    size_t off[NUM_PARAMETER_TENSORS], size[NUM_PARAMETER_TENSORS], total = 0;
    size_t block = gpt_param_offsets(c, off);
    gpt_param_sizes(c, size);
    /* sharded only where an operand copy exists: in fp32 the products read the masters */
    int sharded = act_dtype != DT_FP32 && opt_floats != SIZE_MAX;
    size_t end = opt_floats < block - opt_begin ? opt_begin + opt_floats : block;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        first[k] = 0;
        held[k] = size[k];
        if (sharded && gpt_param_operand_only[k]) {
            size_t lo = off[k] > opt_begin ? off[k] : opt_begin;
            size_t hi = off[k] + size[k] < end ? off[k] + size[k] : end;
            first[k] = lo < hi ? lo - off[k] : 0;
            held[k] = lo < hi ? hi - lo : 0;
        }
        total += mem_align_floats(held[k]);
    }
    return total;
}

size_t gpt_param_offsets(const GPTConfig* c, size_t off[NUM_PARAMETER_TENSORS]) {
    size_t sizes[NUM_PARAMETER_TENSORS], o = 0;
    gpt_param_sizes(c, sizes);
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {   /* carve's layout */
        off[k] = o;
        o += mem_align_floats(sizes[k]);
    }
    return o;
}

/* The host-side tables gpt_build_on allocates through mem_alloc, in bytes. */
static size_t host_table_bytes(const GPTConfig* c, const RecomputePolicy* policy) {
    int L = c->num_layers;
    return (size_t)(L + 1) * sizeof(float*) + (size_t)L * sizeof(LayerActs) +
           (size_t)L * sizeof(LayerRecord) +
           (size_t)ckpt_segment_len(policy, L) * sizeof(LayerRecord) +
           mem_align_floats((size_t)L * 3) * sizeof(float);   /* the attention statistics */
}

/* The calls the model makes to the ops that keep scratch beside the arena (model/backend.h):
 * every dense product of a layer on the stream's rows, and the classifier's on a chunk of rows
 * (no bias; its dinp is dlnf). */
static void op_calls(const GPTConfig* c, int B, int T, int classifier_rows, OpCalls* k) {
    memset(k, 0, sizeof(*k));
    int N = B * T, C = c->channels, QKV = (int)gpt_qkv_channels(c);
    k->B = B;
    k->T = T;
    k->C = C;
    k->V = c->vocab_size;
    k->NH = c->num_heads;
    k->NKV = c->num_kv_heads;
    k->HD = gpt_head_dim(c);
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt_param_sizes(c, sizes);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (sizes[i] > k->largest_tensor) k->largest_tensor = sizes[i];
        k->all_parameters += sizes[i];
    }
    k->n_tensors = NUM_PARAMETER_TENSORS;
    const MatmulCall calls[] = {
        {N, C, QKV, 1, 1},                             /* qkv */
        {N, C, C, 1, 1},                               /* attention projection */
        {N, C, 4 * C, 1, 1},                           /* fc */
        {N, 4 * C, C, 1, 1},                           /* fc projection */
        {classifier_rows, C, c->padded_vocab_size, 0, 1},   /* the classifier's chunk */
    };
    k->n_matmul = (int)(sizeof(calls) / sizeof(calls[0]));
    memcpy(k->matmul, calls, sizeof(calls));
}

/* A configuration and batch a model can be built for: 0, or -1 with one line in err. */
static int check_build_args(const GPTConfig* c, int B, int T, char err[256]) {
    const char* problem = gpt_config_problem(c);
    if (problem != NULL) { snprintf(err, 256, "bad model configuration: %s", problem); return -1; }
    if (B <= 0 || T <= 0 || T > c->max_seq_len) {
        snprintf(err, 256, "batch %d x %d does not fit the model (max sequence length %d)",
                 B, T, c->max_seq_len);
        return -1;
    }
    return 0;
}

int gpt_plan(const GPTConfig* c, int B, int T, const RecomputePolicy* policy, const Backend* be,
             int threads, GPTPlan* out, char err[256]) {
    return gpt_plan_shard(c, B, T, policy, be, threads, 0, SIZE_MAX, out, err);
}

int gpt_plan_shard(const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                   const Backend* be, int threads, size_t opt_begin, size_t opt_floats, GPTPlan* out,
                   char err[256]) {
    memset(out, 0, sizeof(*out));
    if (check_build_args(c, B, T, err) != 0) return -1;
    /* a model with no buffers: the layout functions only count when given no base */
    GPT m;
    memset(&m, 0, sizeof(m));
    m.config = *c;
    m.policy = *policy;
    m.be = be;
    m.act_dtype = be->act_dtype;
    m.B = B;
    m.T = T;
    m.plan_threads = threads;
    m.classifier_rows = gpt_classifier_rows(c, B, T);
    size_t BT = (size_t)B * T, sizes[NUM_PARAMETER_TENSORS], nparams = 0;
    gpt_param_sizes(c, sizes);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) nparams += sizes[i];
    size_t pfloats = carve(NULL, NULL, sizes, NUM_PARAMETER_TENSORS);
    size_t nopt = mem_align_floats(opt_floats < pfloats ? opt_floats : pfloats);
    size_t first[NUM_PARAMETER_TENSORS], held[NUM_PARAMETER_TENSORS];
    size_t nmaster = gpt_master_layout(c, be->act_dtype, opt_begin, opt_floats, first, held);
    GPTMemory fig;
    size_t acts = plan_activations(&m, NULL, &fig), scratch = plan_scratch(&m, NULL);
    size_t wop = wop_floats(be, pfloats);
    size_t ntok = mem_align_floats(BT), nrope = rope_table_floats(c);
    size_t logits = mem_align_floats((size_t)m.classifier_rows * c->padded_vocab_size) +
                    mem_align_floats(BT) + mem_align_floats(BT * c->channels);
    size_t attn = mem_align_floats(be->attention_backward_scratch_floats(
        B, T, c->num_heads, c->num_kv_heads, gpt_head_dim(c), threads));
    out->params = nmaster * sizeof(float);
    out->grads = pfloats * sizeof(float);
    out->adamw = 2 * nopt * sizeof(float);
    out->weights_op = wop * sizeof(float);
    out->layer_acts = fig.layer_acts;
    out->resid = fig.resid;
    out->logits = logits * sizeof(float);
    out->activations = (m.num_kept_acts - logits) * sizeof(float);
    out->recompute = m.num_recompute_acts * sizeof(float);
    out->attn_scratch = attn * sizeof(float);
    out->grad_scratch = (scratch - attn) * sizeof(float);
    out->other = (2 * ntok + 2 * nrope) * sizeof(float);
    out->arena = arena_floats(nmaster, pfloats, nopt, wop, acts, scratch, ntok, nrope, 0) * sizeof(float);
    out->host = host_table_bytes(c, policy) +
                (be->host_memory ? 0 : (nmaster + 2 * nopt + mem_align_floats(BT)) * sizeof(float));
    out->host_transient = 2 * nrope * sizeof(float);
    OpCalls calls;
    op_calls(c, B, T, m.classifier_rows, &calls);
    out->op_scratch = be->scratch_bytes != NULL ? be->scratch_bytes(&calls) : 0;
    out->batch = 2 * BT * sizeof(int);
    /* FLOPs: 6 per parameter per token plus the attention's 12 L C T; a layer's forward is a
     * third of its share, and a recompute runs every layer's forward once more */
    size_t layer_params = 0;
    for (int k = 2; k < 14; k++) layer_params += sizes[k];
    double L = c->num_layers, C = c->channels;
    out->step_flops = (6.0 * (double)nparams + 12.0 * L * C * T) * (double)BT;
    out->recompute_flops = ckpt_recomputes(policy)
                               ? (2.0 * (double)layer_params + 4.0 * L * C * T) * (double)BT : 0.0;
    /* selective: two LayerNorms (~8 operations an element: mean, variance, normalise, scale and
     * shift) and a GELU (~16 with its tanh) per layer, per position, again */
    if (policy->selective) out->recompute_flops += (2.0 * 8.0 * C + 16.0 * 4.0 * C) * L * (double)BT;
    return 0;
}

int gpt_build(GPT* m, const GPTConfig* c, int B, int T, char err[256]) {
    RecomputePolicy none = {0, 0, CHECK_OFF, 0};
    return gpt_build_policy(m, c, B, T, &none, err);
}

int gpt_build_policy(GPT* m, const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                     char err[256]) {
    return gpt_build_on(m, c, B, T, policy, &backend_cpu, err);
}

int gpt_classifier_rows(const GPTConfig* c, int B, int T) {
    long N = (long)B * T, rows = 4L * N * c->channels / c->padded_vocab_size;
    if (rows < 1024) rows = 1024;   /* smaller chunks pay more for packing wte than they save */
    return (int)(rows < N ? rows : N);
}

static int build_model(GPT* m, const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                       const Backend* be, int classifier_rows, const ContextParallel* cp,
                       size_t opt_begin, size_t opt_floats, char err[256]);

int gpt_build_on(GPT* m, const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                 const Backend* be, char err[256]) {
    return gpt_build_rows(m, c, B, T, policy, be, 0, err);
}

int gpt_build_rows(GPT* m, const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                   const Backend* be, int classifier_rows, char err[256]) {
    return build_model(m, c, B, T, policy, be, classifier_rows, NULL, 0, SIZE_MAX, err);
}

int gpt_build_shard(GPT* m, const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                    const Backend* be, size_t opt_begin, size_t opt_floats, char err[256]) {
    return build_model(m, c, B, T, policy, be, 0, NULL, opt_begin, opt_floats, err);
}

int gpt_build_cp(GPT* m, const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                 const Backend* be, const ContextParallel* cp, char err[256]) {
    if (cp == NULL || cp->size <= 1) return gpt_build_on(m, c, B, T, policy, be, err);
    memset(m, 0, sizeof(*m));
    m->grad_scale = 1.0f;
    if (check_build_args(c, B, T, err) != 0) return -1;
    if (T % (2 * cp->size) != 0) {
        snprintf(err, 256, "--context-parallel %d: the sequence length %d must be a multiple of "
                 "2 x %d = %d (each of the %d chunks the same length)", cp->size, T, cp->size,
                 2 * cp->size, 2 * cp->size);
        return -1;
    }
    if (cp->rank < 0 || cp->rank >= cp->size || cp->ring_shift == NULL || cp->ring_start == NULL ||
        cp->ring_wait == NULL) {
        snprintf(err, 256, "context parallelism: rank %d of %d without a ring", cp->rank, cp->size);
        return -1;
    }
    if (be->attention_block_forward == NULL || be->attention_block_backward == NULL ||
        be->attention_merge == NULL || be->copy_rows == NULL || be->encoder_forward_at == NULL ||
        be->residual_dropout_forward_at == NULL || be->dropout_backward_at == NULL) {
        snprintf(err, 256, "--context-parallel %d: the %s backend in %s has no context-parallel "
                 "ops yet (context parallelism runs in --precision fp32)", cp->size, be->name,
                 be->precision);
        return -1;
    }
    return build_model(m, c, B, T / cp->size, policy, be, 0, cp, 0, SIZE_MAX, err);
}

static int build_model(GPT* m, const GPTConfig* c, int B, int T, const RecomputePolicy* policy,
                       const Backend* be, int classifier_rows, const ContextParallel* cp,
                       size_t opt_begin, size_t opt_floats, char err[256]) {
    memset(m, 0, sizeof(*m));
    m->grad_scale = 1.0f;
    if (check_build_args(c, B, T, err) != 0) return -1;
    if (be->check_device != NULL && be->check_device(be, err, 256) != 0) return -1;
    size_t offsets[NUM_PARAMETER_TENSORS], block = gpt_param_offsets(c, offsets);
    size_t nmaster = gpt_master_layout(c, be->act_dtype, opt_begin, opt_floats, m->master_first,
                                       m->master_held);
    m->masters_sharded = be->act_dtype != DT_FP32 && opt_floats != SIZE_MAX;
    if (opt_floats == SIZE_MAX) {   /* the whole block */
        opt_begin = 0;
        opt_floats = block;
    }
    if (opt_begin > block || opt_floats > block - opt_begin) {
        snprintf(err, 256, "optimizer shard of %zu floats at %zu: outside the parameter block of "
                 "%zu floats", opt_floats, opt_begin, block);
        return -1;
    }
    m->cp.size = 1;
    if (cp != NULL) m->cp = *cp;
    m->cp_T = T * m->cp.size;
    if (classifier_rows < 0 || classifier_rows > B * T) {
        snprintf(err, 256, "classifier chunk of %d rows: expected 1 to %d (0: the default)",
                 classifier_rows, B * T);
        return -1;
    }
    m->classifier_rows = classifier_rows > 0 ? classifier_rows : gpt_classifier_rows(c, B, T);
    m->config = *c;
    m->policy = *policy;
    m->be = be;
    m->act_dtype = be->act_dtype;
    m->B = B;
    m->T = T;
    m->plan_threads = omp_get_max_threads();
    int L = c->num_layers;
    size_t BT = (size_t)B * T;

    /* the host-side tables first: the activation plan fills them */
    m->resid = mem_alloc((size_t)(L + 1) * sizeof(float*));
    m->layer = mem_alloc((size_t)L * sizeof(LayerActs));
    m->records = mem_alloc((size_t)L * sizeof(LayerRecord));
    m->fresh_records = mem_alloc((size_t)ckpt_segment_len(policy, L) * sizeof(LayerRecord));
    m->attn_stats = mem_alloc_floats(mem_align_floats((size_t)L * 3));

    /* one backend arena: parameters, gradients, AdamW m and v, activations, gradient scratch,
     * then the tokens (ints, the size of floats) */
    gpt_param_sizes(c, m->param_sizes);
    float** pp[NUM_PARAMETER_TENSORS];
    size_t pfloats = carve(NULL, pp, m->param_sizes, NUM_PARAMETER_TENSORS);
    m->num_parameters = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) m->num_parameters += m->param_sizes[i];
    m->num_acts = plan_activations(m, NULL, NULL);
    size_t nscratch = plan_scratch(m, NULL);
    size_t ntok = mem_align_floats(BT);
    size_t nrope = rope_table_floats(c);
    m->num_cp_floats = plan_cp(m, NULL);
    size_t nwop = wop_floats(be, pfloats);
    m->opt_begin = opt_begin;
    m->opt_floats = opt_floats;
    size_t nopt = mem_align_floats(opt_floats);
    size_t total = arena_floats(nmaster, pfloats, nopt, nwop, m->num_acts, nscratch, ntok, nrope,
                                m->num_cp_floats);
    float* base = be->alloc(total * sizeof(float));
    m->arena = base;
    m->params_memory = base;
    m->grads_memory = base + nmaster;
    m->m_memory = m->grads_memory + pfloats;
    m->v_memory = m->m_memory + nopt;
    m->wop_memory = nwop > 0 ? m->v_memory + nopt : NULL;
    m->acts_memory = m->v_memory + nopt + nwop;
    plan_activations(m, m->acts_memory, NULL);
    plan_scratch(m, m->acts_memory + m->num_acts);
    if (be->reserve_scratch != NULL) {   /* the ops' own scratch, now: none grows after the build */
        OpCalls calls;
        op_calls(c, B, T, m->classifier_rows, &calls);
        be->reserve_scratch(&calls);
    }
    m->inputs = (int*)(m->acts_memory + m->num_acts + nscratch);
    m->targets = m->inputs + ntok;
    if (nrope > 0) {
        /* the RoPE angle table: built once on the host, then identical bits on every backend */
        m->rope_cos = (float*)(m->targets + ntok);
        m->rope_sin = m->rope_cos + nrope;
        float* host = mem_alloc_floats(2 * nrope);
        gpt_rope_table(c, host, host + nrope);
        be->to_backend(m->rope_cos, host, 2 * nrope * sizeof(float));
        mem_free(host);
    }
    plan_cp(m, (float*)(m->targets + ntok) + 2 * nrope);
    param_ptrs(&m->params, pp);
    carve(m->params_memory, pp, m->master_held, NUM_PARAMETER_TENSORS);
    param_ptrs(&m->grads, pp);
    carve(m->grads_memory, pp, m->param_sizes, NUM_PARAMETER_TENSORS);

    if (be->host_memory) {
        m->host_params_memory = m->params_memory;
        m->host_m_memory = m->m_memory;
        m->host_v_memory = m->v_memory;
        m->host_losses = m->losses;
    } else {
        m->host_params_memory = mem_alloc_floats(nmaster + 2 * nopt + mem_align_floats(BT));
        m->host_m_memory = m->host_params_memory + nmaster;
        m->host_v_memory = m->host_m_memory + nopt;
        m->host_losses = m->host_v_memory + nopt;
    }
    param_ptrs(&m->host_params, pp);
    carve(m->host_params_memory, pp, m->master_held, NUM_PARAMETER_TENSORS);

    m->drop_embd = m->drop_attn = m->drop_resid = m->drop_path = dropout_make(0.0);
    m->mean_loss = -1.0f;
    return 0;
}

void gpt_free(GPT* m) {
    if (m->be == NULL) return;
    m->be->free(m->arena);
    if (!m->be->host_memory) mem_free(m->host_params_memory);
    mem_free(m->resid);
    mem_free(m->layer);
    mem_free(m->records);
    mem_free(m->fresh_records);
    mem_free(m->attn_stats);
    memset(m, 0, sizeof(*m));
}

static size_t param_block_floats(const GPT* m) {
    float** pp[NUM_PARAMETER_TENSORS];
    return carve(NULL, pp, m->param_sizes, NUM_PARAMETER_TENSORS);
}

/* The floats of the fp32 weights the model holds: the block, or less under sharded masters. */
static size_t master_floats(const GPT* m) {
    float** pp[NUM_PARAMETER_TENSORS];
    return carve(NULL, pp, m->master_held, NUM_PARAMETER_TENSORS);
}

void gpt_to_host(GPT* m) {
    if (m->be->host_memory) return;
    size_t bytes = master_floats(m) * sizeof(float), obytes = m->opt_floats * sizeof(float);
    m->be->to_host(m->host_params_memory, m->params_memory, bytes);
    m->be->to_host(m->host_m_memory, m->m_memory, obytes);
    m->be->to_host(m->host_v_memory, m->v_memory, obytes);
}

/* The weights' operand copy made again from the masters (nothing in fp32). Under sharded
 * masters, of the floats the model holds only: the rest of the copy arrives from the ranks that
 * own it (train.c). */
void gpt_round_weights(GPT* m) {
    if (m->wop_memory == NULL) return;
    if (!m->masters_sharded) {
        m->be->round_to_act(m->wop_memory, m->params_memory, param_block_floats(m));
        return;
    }
    float* p[NUM_PARAMETER_TENSORS];
    memcpy(p, &m->params, sizeof(p));
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
        if (m->master_held[k] > 0) m->be->round_to_act(gpt_wop_at(m, k, m->master_first[k]), p[k],
                                                       m->master_held[k]);
}

void* gpt_wop_at(const GPT* m, int k, size_t i) {
    float* g[NUM_PARAMETER_TENSORS];
    memcpy(g, &m->grads, sizeof(g));
    return (char*)m->wop_memory + (size_t)(g[k] - m->grads_memory + i) * dtype_bytes(m->act_dtype);
}

/* The weights as the products read them, found by their gradient's address (the gradient block
 * is whole and has the parameter block's layout, which the masters under ZeRO-1 do not): the
 * operand copy's tensor there, or in fp32 the masters themselves (whole in fp32). */
static const void* wop(const GPT* m, const float* grad) {
    size_t off = (size_t)(grad - m->grads_memory);
    if (m->wop_memory == NULL) return m->params_memory + off;
    return (const char*)m->wop_memory + off * dtype_bytes(m->act_dtype);
}

/* rows r0.. of an operand activation of C columns (lnf) */
static const void* act_rows(const GPT* m, const void* base, size_t r0, size_t C) {
    return (const char*)base + r0 * C * dtype_bytes(m->act_dtype);
}

void gpt_to_backend(GPT* m) {
    if (!m->be->host_memory) {
        size_t bytes = master_floats(m) * sizeof(float), obytes = m->opt_floats * sizeof(float);
        m->be->to_backend(m->params_memory, m->host_params_memory, bytes);
        m->be->to_backend(m->m_memory, m->host_m_memory, obytes);
        m->be->to_backend(m->v_memory, m->host_v_memory, obytes);
    }
    gpt_round_weights(m);
}

GPTMemory gpt_memory(const GPT* m) {
    GPTMemory r;
    float** pp[NUM_PARAMETER_TENSORS];
    size_t pf = carve(NULL, pp, m->param_sizes, NUM_PARAMETER_TENSORS);
    r.params = master_floats(m) * sizeof(float);
    r.grads = pf * sizeof(float);
    r.optimizer = 2 * mem_align_floats(m->opt_floats) * sizeof(float);
    r.weights_op = wop_floats(m->be, pf) * sizeof(float);
    plan_activations((GPT*)m, NULL, &r);   /* the figures only: counting leaves m as it is */
    r.activations = m->num_kept_acts * sizeof(float);
    r.recompute = m->num_recompute_acts * sizeof(float);
    r.scratch = plan_scratch((GPT*)m, NULL) * sizeof(float);
    r.cp = m->num_cp_floats * sizeof(float);
    return r;
}

/* ---- initialisation ----------------------------------------------------------------------- */

/* N(0, std) for element i of tensor k: Box-Muller on one Philox call of the INIT stream. A pure
 * function of (seed, k, i), so the weights do not depend on threads, nor on which elements are
 * made: x[j] is element first + j (a ZeRO-1 rank makes the part of the masters it holds). */
static void init_normal(float* x, size_t first, size_t n, float std, uint64_t init_seed,
                        uint32_t k) {
    #pragma omp parallel for schedule(static)
    for (size_t i = first; i < first + n; i++) {
        uint32_t ctr[4] = {(uint32_t)i, (uint32_t)((uint64_t)i >> 32), k, 0};
        uint32_t r[4];
        philox4x32_10(ctr, (uint32_t)init_seed, (uint32_t)(init_seed >> 32), r);
        double u1 = ((double)r[0] + 1.0) / 4294967297.0;  /* (0, 1) */
        double u2 = (double)r[1] / 4294967296.0;          /* [0, 1) */
        x[i - first] = (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

void gpt_init_weights(GPT* m, uint64_t master_seed) {
    const GPTConfig* c = &m->config;
    uint64_t s = philox_stream_seed(master_seed, STREAM_INIT);
    float proj_std = 0.02f / sqrtf(2.0f * c->num_layers);
    float* ptr[NUM_PARAMETER_TENSORS];
    memcpy(ptr, &m->host_params, sizeof(ptr));
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t n = m->param_sizes[k];
        const char* name = gpt_param_names[k];
        if (!strcmp(name, "ln1w") || !strcmp(name, "ln2w") || !strcmp(name, "lnfw")) {
            for (size_t i = 0; i < n; i++) ptr[k][i] = 1.0f;
        } else if (!gpt_param_decay[k]) {
            memset(ptr[k], 0, n * sizeof(float));   /* biases and LN biases */
        } else {   /* under sharded masters the part the model holds: elements first .. */
            int proj = !strcmp(name, "attprojw") || !strcmp(name, "fcprojw");
            init_normal(ptr[k], m->master_first[k], m->master_held[k], proj ? proj_std : 0.02f, s,
                        (uint32_t)k);
        }
    }
    /* padded vocab rows are zero and stay zero (their gradient is zero) */
    memset(m->host_params.wte + (size_t)c->vocab_size * c->channels, 0,
           (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels * sizeof(float));
    memset(m->host_m_memory, 0, m->opt_floats * sizeof(float));
    memset(m->host_v_memory, 0, m->opt_floats * sizeof(float));
    gpt_to_backend(m);
}

void gpt_set_dropout(GPT* m, uint64_t master_seed, double p_embd, double p_attn, double p_resid) {
    if (!(p_embd >= 0 && p_embd < 1 && p_attn >= 0 && p_attn < 1 && p_resid >= 0 && p_resid < 1)) {
        fprintf(stderr, "seedgpt: internal error: dropout probabilities must be in [0, 1)\n");
        exit(1);
    }
    m->master_seed = master_seed;
    m->drop_embd = dropout_make(p_embd);
    m->drop_attn = dropout_make(p_attn);
    m->drop_resid = dropout_make(p_resid);
}

void gpt_set_drop_path(GPT* m, double p) {
    if (!(p >= 0 && p < 1)) {
        fprintf(stderr, "seedgpt: internal error: drop-path probability must be in [0, 1)\n");
        exit(1);
    }
    m->drop_path = dropout_make(p);
}

void gpt_rope_table(const GPTConfig* c, float* cos_out, float* sin_out) {
    int H2 = gpt_head_dim(c) / 2;
    for (int t = 0; t < c->max_seq_len; t++)
        for (int d = 0; d < H2; d++) {
            double theta = pow((double)c->rope_base, -2.0 * d / (2.0 * H2));
            double angle = (double)t * theta;
            cos_out[(size_t)t * H2 + d] = (float)cos(angle);
            sin_out[(size_t)t * H2 + d] = (float)sin(angle);
        }
}

/* ---- forward ------------------------------------------------------------------------------ */

/* The LM head's backward for a chunk of rows whose logits already hold dlogits. */
static void classifier_chunk_head_backward(GPT* m, int r0, int rows) {
    const GPTConfig* c = &m->config;
    int C = c->channels;
    m->be->matmul_backward(m->dlnf + (size_t)r0 * C, m->grads.wte, NULL, m->logits,
                           act_rows(m, m->lnf, (size_t)r0, (size_t)C), wop(m, m->grads.wte), rows,
                           C, c->padded_vocab_size);
}

/* The classifier's gradient for rows [r0, r0 + rows), whose logits are in m->logits: in the
 * forward, loss = crossentropy(logits), logits = lnf . wte^T (the LM head, tied to wte), so now
 * dlogits (in place), wte's gradient += dlogits^T . lnf, and dlnf = dlogits . wte for those rows.
 * The chunks come in row order, so wte's gradient sums its rows in the order one call would. */
static void classifier_chunk_backward(GPT* m, int r0, int rows, float dloss) {
    const GPTConfig* c = &m->config;
    m->be->crossentropy_backward(m->logits, m->targets + r0, dloss, rows, c->vocab_size,
                                 c->padded_vocab_size);
    classifier_chunk_head_backward(m, r0, rows);
}

void gpt_set_loss_scale(GPT* m, float dloss) { m->loss_scale = dloss; }

int gpt_set_attn_stats(GPT* m, int on, char err[256]) {
    if (on && m->be->attention_forward_stats == NULL) {
        snprintf(err, 256, "--log-attn-stats: the %s backend's attention has no statistics",
                 m->be->name);
        return -1;
    }
    m->attn_stats_on = on;
    gpt_attn_stats_reset(m);
    return 0;
}

void gpt_attn_stats_reset(GPT* m) {
    for (int l = 0; l < m->config.num_layers; l++) {
        m->attn_stats[3 * l] = 0.0f;
        m->attn_stats[3 * l + 1] = INFINITY;
        m->attn_stats[3 * l + 2] = -INFINITY;
    }
}

/* 1 when the n floats at x (the backend's memory) are all finite; a device's are read through
 * `host`, a buffer of at least n floats (NULL on a host-memory backend) */
static int floats_finite(const GPT* m, const float* x, size_t n, float* host) {
    if (host != NULL) {
        m->be->to_host(host, x, n * sizeof(float));
        x = host;
    }
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

int gpt_first_nonfinite_grad(const GPT* m, int* layer) {
    *layer = -1;
    float* g[NUM_PARAMETER_TENSORS];
    memcpy(g, &m->grads, sizeof(g));
    const int L = m->config.num_layers;
    /* on a device, each piece is copied to the host as it is looked at (only after an overflow) */
    float* host = NULL;
    if (!m->be->host_memory) {
        size_t most = 0;
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++)
            if (m->param_sizes[k] > most) most = m->param_sizes[k];
        host = (float*)malloc(most * sizeof(float) + 1);
        if (host == NULL) return -1;   /* the line then names no tensor */
    }
    int found = -1;
    for (int k = 14; k <= 15 && found < 0; k++)   /* lnfw, lnfb */
        if (!floats_finite(m, g[k], m->param_sizes[k], host)) found = k;
    for (int l = L - 1; l >= 0 && found < 0; l--)
        for (int k = 13; k >= 2 && found < 0; k--) {   /* fcprojb down to ln1w: the layer's tensors */
            size_t n = m->param_sizes[k] / (size_t)L;
            if (!floats_finite(m, g[k] + (size_t)l * n, n, host)) { *layer = l; found = k; }
        }
    for (int k = 1; k >= 0 && found < 0; k--)   /* wpe, wte */
        if (!floats_finite(m, g[k], m->param_sizes[k], host)) found = k;
    free(host);
    return found;
}

/* Layer l's parameters. */
typedef struct {
    const float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    const float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerParams;

static LayerParams layer_params(const ParameterTensors* p, const GPTConfig* c, int l) {
    size_t C = c->channels, QKV = gpt_qkv_channels(c);
    LayerParams lp = {
        p->ln1w + l * C, p->ln1b + l * C, p->qkvw + l * QKV * C, p->qkvb + l * QKV,
        p->attprojw + l * C * C, p->attprojb + l * C,
        p->ln2w + l * C, p->ln2b + l * C, p->fcw + l * 4 * C * C, p->fcb + l * 4 * C,
        p->fcprojw + l * C * 4 * C, p->fcprojb + l * C};
    return lp;
}

static Dropout no_dropout(void) { return dropout_make(0.0); }

/* Tells the backend which part of the step runs now (only a profiler listens: model/profile.h). */
static inline void set_phase(const GPT* m, int phase) {
    if (m->be->phase != NULL) m->be->phase(phase);
}

/* ---- context parallelism (DESIGN §9) -------------------------------------------------------
 * With cp.size N > 1 a (B, T) tensor of the model is this rank's two chunks of every sequence,
 * chunk-major: (2, B, Tc), Tc = T / 2; local chunk k (0 or 1) is global chunk `rank` or
 * `2N-1-rank`, so its row t is global position chunk * Tc + t. Position-wise ops that depend on
 * the position (embedding, dropout keep bits, RoPE) run once per chunk with its first global
 * position; the others (LayerNorm, products, GELU, loss) run over all rows at once. Without
 * context parallelism the plain ops run, as before. */

static int cp_on(const GPT* m) { return m->cp.size > 1; }

#ifdef SEEDGPT_TEST_BUILD
/* Test builds: two switches the context-parallel tests need.
 *
 * SEEDGPT_KEEP_EXPORT=STEP:LAYER:PATH writes the attention keep bits the forward of (STEP, LAYER)
 * used to PATH.R (R this rank's place in its context-parallel group; .0 in one process): one byte
 * per (b, h, i, j) of the micro-batch's B sequences at global positions, 0 not used (the future,
 * or another rank's query), 1 dropped, 2 kept. The union over the ranks must be the one-process
 * file, byte for byte.
 *
 * SEEDGPT_FAULT=cp_recompute_push:S-E plants the leak class of docs/context-parallel.md: in steps
 * S..E every recompute forward pushes a copy of the K, V blocks it received (a per-step cache,
 * meant for a backward that never comes) and keeps it. The constant-allocation check must catch
 * it. */
static unsigned char* keep_export_map;
static int keep_export_T, keep_export_NH;
static uint32_t keep_export_g0;
static void keep_export_hook(uint32_t g, int h, int i, int j, int kept) {
    size_t T = keep_export_T;
    keep_export_map[(((size_t)(g - keep_export_g0) * keep_export_NH + h) * T + i) * T + j] =
        kept ? 2 : 1;
}

/* Before layer l's attention forward: 1 when this is the forward to export (the hook is set). */
static int keep_export_begin(GPT* m, int l, uint32_t step, int B, uint32_t g0) {
    static int done = 0;
    const char* spec = getenv("SEEDGPT_KEEP_EXPORT");
    unsigned S, Lx;
    if (done || m->recomputing || spec == NULL || sscanf(spec, "%u:%u:", &S, &Lx) != 2 ||
        S != step || Lx != (unsigned)l)
        return 0;
    done = 1;
    keep_export_T = m->cp_T;
    keep_export_NH = m->config.num_heads;
    keep_export_g0 = g0;
    keep_export_map = calloc((size_t)B * keep_export_NH * keep_export_T * keep_export_T, 1);
    attention_keep_hook = keep_export_hook;
    return 1;
}

static void keep_export_end(GPT* m, int B) {
    attention_keep_hook = NULL;
    const char* spec = strchr(strchr(getenv("SEEDGPT_KEEP_EXPORT"), ':') + 1, ':') + 1;
    char path[4200];
    snprintf(path, sizeof(path), "%s.%d", spec, m->cp.rank);
    FILE* f = fopen(path, "wb");
    size_t n = (size_t)B * keep_export_NH * keep_export_T * keep_export_T;
    if (f == NULL || fwrite(keep_export_map, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "seedgpt: SEEDGPT_KEEP_EXPORT: cannot write %s\n", path);
        exit(1);
    }
    free(keep_export_map);
}

/* The planted leak: a per-step cache of the received K, V blocks, pushed and never popped. */
typedef struct PushedCache { struct PushedCache* next; float* kv; } PushedCache;
static PushedCache* pushed_caches;
static void recompute_push_fault(GPT* m, uint32_t step, const float* kv, size_t n) {
    if (!m->recomputing || !fault_fires("cp_recompute_push", (long)step)) return;
    PushedCache* c = mem_alloc(sizeof(PushedCache));
    c->kv = mem_alloc_floats(n);
    memcpy(c->kv, kv, n * sizeof(float));
    c->next = pushed_caches;
    pushed_caches = c;
}
#endif

/* The global chunk held as local chunk k. */
static int cp_chunk(const GPT* m, int k) { return k == 0 ? m->cp.rank : 2 * m->cp.size - 1 - m->cp.rank; }

int gpt_cp_position(const GPT* m, int t) {
    if (!cp_on(m)) return t;
    int Tc = m->T / 2;
    return cp_chunk(m, t / Tc) * Tc + t % Tc;
}

static void pos_encoder_forward(GPT* m, float* out, const int* inp, const float* wpe, int B, int T,
                                uint32_t g0, uint64_t seed, Dropout drop) {
    int C = m->config.channels;
    if (!cp_on(m)) {
        m->be->encoder_forward(out, inp, m->params.wte, wpe, B, T, C, g0, seed, drop);
        return;
    }
    int Tc = T / 2;
    for (int k = 0; k < 2; k++)
        m->be->encoder_forward_at(out + (size_t)k * B * Tc * C, inp + (size_t)k * B * Tc,
                                  m->params.wte, wpe, B, Tc, cp_chunk(m, k) * Tc, C, g0, seed, drop);
}

static void pos_encoder_backward(GPT* m, const float* dout, int B, int T) {
    int C = m->config.channels;
    float* dwpe = m->config.pos_kind == POS_ROPE ? NULL : m->grads.wpe;
    if (!cp_on(m)) {
        m->be->encoder_backward(m->grads.wte, dwpe, dout, m->inputs, B, T, C);
        return;
    }
    int Tc = T / 2;
    for (int k = 0; k < 2; k++)
        m->be->encoder_backward(m->grads.wte, dwpe ? dwpe + (size_t)cp_chunk(m, k) * Tc * C : NULL,
                                dout + (size_t)k * B * Tc * C, m->inputs + (size_t)k * B * Tc, B,
                                Tc, C);
}

static void pos_residual_dropout(GPT* m, float* out, const float* x, const float* branch, int B,
                                 int T, uint32_t g0, uint64_t seed, Dropout drop) {
    int C = m->config.channels;
    if (!cp_on(m)) {
        m->be->residual_dropout_forward(out, x, branch, B, T, C, g0, seed, drop);
        return;
    }
    int Tc = T / 2;
    for (int k = 0; k < 2; k++) {
        size_t o = (size_t)k * B * Tc * C;
        m->be->residual_dropout_forward_at(out + o, x + o, branch + o, B, Tc, cp_chunk(m, k) * Tc,
                                           C, g0, seed, drop);
    }
}

static void pos_dropout_backward(GPT* m, float* dy, const float* dout, int B, int T, uint32_t g0,
                                 uint64_t seed, Dropout drop) {
    int C = m->config.channels;
    if (!cp_on(m)) {
        m->be->dropout_backward(dy, dout, B, T, C, g0, seed, drop);
        return;
    }
    int Tc = T / 2;
    for (int k = 0; k < 2; k++) {
        size_t o = (size_t)k * B * Tc * C;
        m->be->dropout_backward_at(dy + o, dout + o, B, Tc, cp_chunk(m, k) * Tc, C, g0, seed, drop);
    }
}

/* Stochastic depth keys by the sequence alone; under context parallelism row b of each chunk is
 * sequence g0 + b, so the op runs once per chunk. */
static void pos_drop_path(GPT* m, float* y, const float* x, int B, int T, uint32_t g0,
                          uint64_t seed) {
    int C = m->config.channels;
    if (!cp_on(m)) {
        m->be->drop_path(y, x, B, T, C, g0, seed, m->drop_path);
        return;
    }
    int Tc = T / 2;
    for (int k = 0; k < 2; k++) {
        size_t o = (size_t)k * B * Tc * C;
        m->be->drop_path(y + o, x + o, B, Tc, C, g0, seed, m->drop_path);
    }
}

static void pos_rope(GPT* m, void* qkv, int B, int T, int backward) {
    const GPTConfig* c = &m->config;
    int NH = c->num_heads, NKV = c->num_kv_heads, HD = gpt_head_dim(c), L = c->rope_layout;
    if (!cp_on(m)) {   /* the forward's qkv in the activations' dtype; the backward's fp32 */
        if (backward)
            m->be->rope_backward(qkv, m->rope_cos, m->rope_sin, B, T, NH, NKV, HD, L, 0);
        else
            m->be->rope_forward(qkv, m->rope_cos, m->rope_sin, B, T, NH, NKV, HD, L, 0);
        return;
    }
    /* context parallelism runs on fp32 activations (a bf16 table has no context parallelism) */
    int Tc = T / 2;
    for (int k = 0; k < 2; k++) {
        float* x = (float*)qkv + (size_t)k * B * Tc * gpt_qkv_channels(c);
        if (backward)
            m->be->rope_backward(x, m->rope_cos, m->rope_sin, B, Tc, NH, NKV, HD, L, cp_chunk(m, k) * Tc);
        else
            m->be->rope_forward(x, m->rope_cos, m->rope_sin, B, Tc, NH, NKV, HD, L, cp_chunk(m, k) * Tc);
    }
}

/* Attention over the ring. Step s of N: this rank holds the K, V rows of rank (rank - s) mod N
 * (its chunks src and 2N-1-src) and attends its two query chunks to every key chunk that is not
 * wholly in their future, merging each block's output into atty by the LSEs (fp32); meanwhile the
 * K, V block moves on to the next rank (the transfer overlaps the step's compute). The buffers are the gradient scratch, idle in a forward
 * and in a recompute: K, V in dfch (two blocks of 2*NKV*HD per row: the one in use, the one
 * arriving), a block's output in datty, its LSE in dln. Nothing is kept beyond atty and lse, what
 * the plain kernel keeps. */
static void cp_attention_forward(GPT* m, LayerActs* a, int B, int T, uint32_t g0, uint64_t seed,
                                 Dropout drop) {
    const GPTConfig* c = &m->config;
    int NH = c->num_heads, NKV = c->num_kv_heads, HD = gpt_head_dim(c), N = m->cp.size;
    int Tc = T / 2;
    size_t QKV = gpt_qkv_channels(c), KVW = 2 * (size_t)NKV * HD, C = c->channels;
    size_t rows = (size_t)B * T;
    /* context parallelism runs on fp32 activations (a bf16 table has none) */
    float* qkv = (float*)a->qkv;
    float* atty = (float*)a->atty;
    float* kv[2] = {m->gs.dfch, m->gs.dfch + rows * KVW};
    float* blk = m->gs.datty;
    float* blk_lse = m->gs.dln;
    m->be->fill(a->lse, (size_t)B * NH * T, -INFINITY);   /* "no key yet" for the merge */
    m->be->copy_rows(kv[0], KVW, qkv + (size_t)NH * HD, QKV, rows, KVW);
    for (int s = 0; s < N; s++) {
        float* cur = kv[s % 2];
        /* the block moves on to the next rank while this one computes with it */
        if (s < N - 1) m->cp.ring_start(cur, kv[(s + 1) % 2], rows * KVW);
#ifdef SEEDGPT_TEST_BUILD
        if (s > 0) recompute_push_fault(m, m->records[0].step, cur, rows * KVW);
#endif
        int src = ((m->cp.rank - s) % N + N) % N;
        for (int qa = 0; qa < 2; qa++)
            for (int ka = 0; ka < 2; ka++) {
                int qc = cp_chunk(m, qa), kc = ka == 0 ? src : 2 * N - 1 - src;
                if (kc > qc) continue;   /* wholly in the future of every query of the chunk */
                const float* k = cur + (size_t)ka * B * Tc * KVW;
                m->be->attention_block_forward(blk, blk_lse, qkv + (size_t)qa * B * Tc * QKV, QKV,
                                               Tc, qc * Tc, k, k + (size_t)NKV * HD, KVW, Tc,
                                               kc * Tc, B, NH, NKV, HD, g0, seed, drop);
                m->be->attention_merge(atty + (size_t)qa * B * Tc * C,
                                       a->lse + (size_t)qa * B * NH * Tc, blk, blk_lse, B, Tc, NH, HD);
            }
        if (s < N - 1) m->cp.ring_wait();
    }
}

/* The backward over the ring: the same steps, each block's dq added to this rank's rows of dqkv,
 * its dK, dV to the travelling partials of the K, V block's owner (cp_dkv), which move on with it
 * and are home after N steps. K, V travel in dfch as in the forward (dfch is idle between the
 * GELU's backward and the next layer). */
static void cp_attention_backward(GPT* m, LayerActs* a, int B, int T, uint32_t g0, uint64_t seed,
                                  Dropout drop) {
    const GPTConfig* c = &m->config;
    int NH = c->num_heads, NKV = c->num_kv_heads, HD = gpt_head_dim(c), N = m->cp.size;
    int Tc = T / 2;
    size_t QKV = gpt_qkv_channels(c), KVW = 2 * (size_t)NKV * HD, C = c->channels;
    size_t rows = (size_t)B * T;
    /* context parallelism runs on fp32 activations (a bf16 table has none) */
    float* qkv = (float*)a->qkv;
    float* atty = (float*)a->atty;
    float* kv[2] = {m->gs.dfch, m->gs.dfch + rows * KVW};
    m->be->fill(m->gs.dqkv, rows * QKV, 0.0f);
    m->be->fill(m->cp_dkv[0], rows * KVW, 0.0f);
    m->be->copy_rows(kv[0], KVW, qkv + (size_t)NH * HD, QKV, rows, KVW);
    for (int s = 0; s < N; s++) {
        float* cur = kv[s % 2];
        float* dcur = m->cp_dkv[s % 2];
        if (s < N - 1) m->cp.ring_start(cur, kv[(s + 1) % 2], rows * KVW);
        int src = ((m->cp.rank - s) % N + N) % N;
        for (int qa = 0; qa < 2; qa++)
            for (int ka = 0; ka < 2; ka++) {
                int qc = cp_chunk(m, qa), kc = ka == 0 ? src : 2 * N - 1 - src;
                if (kc > qc) continue;
                size_t qo = (size_t)qa * B * Tc, ko = (size_t)ka * B * Tc * KVW;
                m->be->attention_block_backward(m->gs.dqkv + qo * QKV, QKV, dcur + ko,
                                                dcur + ko + (size_t)NKV * HD, KVW, m->gs.attn_scratch,
                                                m->gs.datty + qo * C, atty + qo * C,
                                                a->lse + qo * NH, qkv + qo * QKV, QKV, Tc, qc * Tc,
                                                cur + ko, cur + ko + (size_t)NKV * HD, KVW, Tc, kc * Tc,
                                                B, NH, NKV, HD, g0, seed, drop);
            }
        if (s < N - 1) m->cp.ring_wait();
        /* the partials are this step's result: they travel after it */
        m->cp.ring_shift(dcur, m->cp_dkv[(s + 1) % 2], rows * KVW);
    }
    /* the partials of this rank's own K, V, back from the whole ring */
    m->be->copy_rows(m->gs.dqkv + (size_t)NH * HD, QKV, m->cp_dkv[N % 2], KVW, rows, KVW);
}

/* One block: x -> out, with the seeds of rec; the activations go to layer l's slot. In the
 * forward x = resid[l] and out = resid[l+1]; a recompute writes a segment's last output to the
 * check buffer instead, so the stored value stays to be compared with. */
static void layer_forward(GPT* m, int l, const float* x, float* out, const LayerRecord* rec,
                          int B, int T, uint32_t g0, int train, float* attn_stats) {
    const GPTConfig* c = &m->config;
    int N = B * T, C = c->channels, QKV = gpt_qkv_channels(c);
    LayerParams p = layer_params(&m->params, c, l);
    LayerParams gp = layer_params(&m->grads, c, l);   /* the products' weights: wop(m, gp.X) */
    LayerActs* a = &m->layer[l];
    Dropout dattn = train ? m->drop_attn : no_dropout();
    Dropout dres = train ? m->drop_resid : no_dropout();
    int depth = train && dropout_active(m->drop_path);   /* p = 0: the plain path, bitwise */
    /* the parallel block normalises the layer input for both branches (GPT-NeoX's parallel
     * residual, two LayerNorms); the sequential one feeds the MLP the attention's output */
    const float* mlp_in = c->block_kind == BLOCK_PARALLEL ? x : a->resid2;

    m->be->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p.ln1w, p.ln1b, N, C);
    m->be->matmul_forward(a->qkv, m->act_dtype, a->ln1, wop(m, gp.qkvw), p.qkvb, N, C, QKV);
    if (c->pos_kind == POS_ROPE) pos_rope(m, a->qkv, B, T, 0);
#ifdef SEEDGPT_TEST_BUILD
    int exporting = train && keep_export_begin(m, l, rec->step, B, g0);
#endif
    if (cp_on(m)) {   /* the ring (fp32 activations: a bf16 table has no context parallelism) */
        cp_attention_forward(m, a, B, T, g0, rec->seed[SITE_ATTN_PROB], dattn);
    } else if (attn_stats != NULL) {
        float s[3];
        m->be->attention_forward_stats(a->atty, a->lse, a->qkv, B, T, c->num_heads,
                                       c->num_kv_heads, gpt_head_dim(c), g0,
                                       rec->seed[SITE_ATTN_PROB], dattn, s);
        attn_stats[0] = fmaxf(attn_stats[0], s[0]);
        attn_stats[1] = fminf(attn_stats[1], s[1]);
        attn_stats[2] = fmaxf(attn_stats[2], s[2]);
    } else {
        m->be->attention_forward(a->atty, a->lse, a->qkv, B, T, c->num_heads, c->num_kv_heads,
                                 gpt_head_dim(c), g0, rec->seed[SITE_ATTN_PROB], dattn);
    }
#ifdef SEEDGPT_TEST_BUILD
    if (exporting) keep_export_end(m, B);
#endif
    m->be->matmul_forward(a->resid2, DT_FP32, a->atty, wop(m, gp.attprojw), p.attprojb, N, C, C);
    /* branch = drop_path(dropout(proj)): the per-sequence factor, then the residual dropout */
    if (depth) pos_drop_path(m, a->resid2, a->resid2, B, T, g0, rec->seed[SITE_DEPTH_ATTN]);
    if (m->be->residual_layernorm_forward != NULL && !cp_on(m) && mlp_in == a->resid2) {
        /* the residual add and the MLP's LayerNorm of its result, in one op */
        m->be->residual_layernorm_forward(a->resid2, x, a->resid2, B, T, C, g0,
                                          rec->seed[SITE_ATTN_RESID], dres, a->ln2, a->ln2_mean,
                                          a->ln2_rstd, p.ln2w, p.ln2b);
    } else {
        pos_residual_dropout(m, a->resid2, x, a->resid2, B, T, g0, rec->seed[SITE_ATTN_RESID], dres);
        m->be->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, mlp_in, p.ln2w, p.ln2b, N, C);
    }
    if (m->be->matmul_forward_gelu != NULL) {   /* the product and its GELU in one op */
        m->be->matmul_forward_gelu(a->fch, a->fch_gelu, a->ln2, wop(m, gp.fcw), p.fcb, N, C, 4 * C);
    } else {
        m->be->matmul_forward(a->fch, m->act_dtype, a->ln2, wop(m, gp.fcw), p.fcb, N, C, 4 * C);
        m->be->gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C);
    }
    m->be->matmul_forward(out, DT_FP32, a->fch_gelu, wop(m, gp.fcprojw), p.fcprojb, N, 4 * C, C);
    if (depth) pos_drop_path(m, out, out, B, T, g0, rec->seed[SITE_DEPTH_MLP]);
    pos_residual_dropout(m, out, a->resid2, out, B, T, g0, rec->seed[SITE_MLP_RESID], dres);
}

float gpt_forward(GPT* m, const int* inputs, const int* targets, int B, int T, uint32_t g0,
                  uint32_t step, int train) {
    const GPTConfig* c = &m->config;
    int N = B * T, C = c->channels, L = c->num_layers;
    if (B > m->B || T > m->T) {
        fprintf(stderr, "seedgpt: internal error: batch %dx%d exceeds the planned %dx%d\n",
                B, T, m->B, m->T);
        exit(1);
    }
    if (cp_on(m) && T != m->T) {
        fprintf(stderr, "seedgpt: internal error: a context-parallel forward takes this rank's %d "
                "positions, not %d\n", m->T, T);
        exit(1);
    }
    for (int i = 0; i < B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= c->vocab_size ||
            (targets != NULL && (targets[i] < 0 || targets[i] >= c->vocab_size))) {
            fprintf(stderr, "seedgpt: internal error: token out of vocabulary at position %d\n", i);
            exit(1);
        }
    }
    m->be->to_backend(m->inputs, inputs, (size_t)N * sizeof(int));
    if (targets != NULL) m->be->to_backend(m->targets, targets, (size_t)N * sizeof(int));
    m->cur_B = B;
    m->cur_T = T;
    m->cur_g0 = g0;
    m->cur_train = train;
    set_phase(m, BE_PHASE_FORWARD);

    /* layer 0's record holds the embedding's seed (site 0), so it is drawn before the embedding */
    layer_record_draw(&m->records[0], m->master_seed, step, 0, PASS_FORWARD);
    const float* wpe = c->pos_kind == POS_ROPE ? NULL : m->params.wpe;
    pos_encoder_forward(m, m->resid[0], m->inputs, wpe, B, T, g0, m->records[0].seed[SITE_EMBD],
                        train ? m->drop_embd : no_dropout());
    for (int l = 0; l < L; l++) {
        if (l > 0) layer_record_draw(&m->records[l], m->master_seed, step, l, PASS_FORWARD);
        layer_forward(m, l, m->resid[l], m->resid[l + 1], &m->records[l], B, T, g0, train,
                      m->attn_stats_on && train ? m->attn_stats + 3 * l : NULL);
    }
    m->be->layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, m->resid[L], m->params.lnfw,
                      m->params.lnfb, N, C);
    /* the classifier, a chunk of rows at a time: the chunk's logits, its losses and, when the
     * backward's dloss is known (gpt_set_loss_scale), its gradient at once; no path holds the
     * whole (B, T, Vp) logits */
    int fuse = targets != NULL && train && m->loss_scale != 0.0f;
    int R = m->classifier_rows;
    for (int r0 = 0; r0 < N; r0 += R) {
        int rows = N - r0 < R ? N - r0 : R;
        m->be->matmul_forward(m->logits, DT_FP32, act_rows(m, m->lnf, (size_t)r0, (size_t)C),
                              wop(m, m->grads.wte), NULL, rows, C, c->padded_vocab_size);
        if (fuse && m->be->crossentropy_forward_backward_act != NULL) {
            /* dlogits in act_dtype over the logits' memory, read there by the head's product */
            m->be->crossentropy_forward_backward_act(m->losses + r0, m->logits, m->targets + r0,
                                                     m->loss_scale, rows, c->vocab_size,
                                                     c->padded_vocab_size);
            int ld = (int)((size_t)c->padded_vocab_size * sizeof(float) / dtype_bytes(m->act_dtype));
            m->be->matmul_backward_dout_act(m->dlnf + (size_t)r0 * C, m->grads.wte, NULL, m->logits, ld,
                                            act_rows(m, m->lnf, (size_t)r0, (size_t)C),
                                            wop(m, m->grads.wte), rows, C, c->padded_vocab_size);
            continue;
        }
        if (fuse && m->be->crossentropy_forward_backward != NULL) {
            m->be->crossentropy_forward_backward(m->losses + r0, m->logits, m->targets + r0,
                                                 m->loss_scale, rows, c->vocab_size,
                                                 c->padded_vocab_size);
            classifier_chunk_head_backward(m, r0, rows);
            continue;
        }
        if (targets != NULL)
            m->be->crossentropy_forward(m->losses + r0, m->logits, m->targets + r0, rows,
                                        c->vocab_size, c->padded_vocab_size);
        if (fuse) classifier_chunk_backward(m, r0, rows, m->loss_scale);
    }
    m->head_grads_done = fuse;
    m->head_logits_kept = targets != NULL && !fuse && R >= N;   /* the one chunk is all of them */

    m->mean_loss = -1.0f;
    if (targets != NULL) {
        m->be->to_host(m->host_losses, m->losses, (size_t)N * sizeof(float));
        double sum = 0.0;
        for (int i = 0; i < N; i++) sum += m->host_losses[i];
        m->mean_loss = (float)(sum / N);
    }
    return m->mean_loss;
}

/* ---- backward ----------------------------------------------------------------------------- */

void gpt_zero_grad(GPT* m) {
    set_phase(m, BE_PHASE_OPTIMIZER);
    m->grad_scale = 1.0f;
    m->be->fill(m->grads_memory, param_block_floats(m), 0.0f);
}

/* Backward of layer l: on entry gs.dresid holds d resid[l+1]; on exit d resid[l]. */
static void layer_backward(GPT* m, int l, const LayerRecord* rec) {
    const GPTConfig* c = &m->config;
    int B = m->cur_B, T = m->cur_T, N = B * T, C = c->channels, QKV = gpt_qkv_channels(c);
    uint32_t g0 = m->cur_g0;
    LayerParams p = layer_params(&m->params, c, l);
    LayerParams gp = layer_params(&m->grads, c, l);
    float *dln1w = (float*)gp.ln1w, *dln1b = (float*)gp.ln1b;
    float *dqkvw = (float*)gp.qkvw, *dqkvb = (float*)gp.qkvb;
    float *dattprojw = (float*)gp.attprojw, *dattprojb = (float*)gp.attprojb;
    float *dln2w = (float*)gp.ln2w, *dln2b = (float*)gp.ln2b;
    float *dfcw = (float*)gp.fcw, *dfcb = (float*)gp.fcb;
    float *dfcprojw = (float*)gp.fcprojw, *dfcprojb = (float*)gp.fcprojb;
    LayerActs* a = &m->layer[l];
    GradScratch* g = &m->gs;
    Dropout dattn = m->cur_train ? m->drop_attn : no_dropout();
    Dropout dres = m->cur_train ? m->drop_resid : no_dropout();
    int depth = m->cur_train && dropout_active(m->drop_path);
    int parallel = c->block_kind == BLOCK_PARALLEL;
    if (m->policy.selective) {
        /* selective storage: ln1, ln2 and the GELU output were not kept; the same ops on the
         * same kept inputs give the forward's bits again (mean and rstd are rewritten with the
         * values they hold). A profile counts them as recompute. */
        set_phase(m, BE_PHASE_RECOMPUTE);
        m->be->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, m->resid[l], p.ln1w, p.ln1b, N, C);
        m->be->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, parallel ? m->resid[l] : a->resid2,
                                 p.ln2w, p.ln2b, N, C);
        m->be->gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C);
        set_phase(m, BE_PHASE_BACKWARD);
    }
    /* the attention branch's output gradient: computed below from d resid2 (sequential), or here
     * from d out, before the MLP's LayerNorm adds to dresid (parallel: resid2 = x + attn branch
     * and out = resid2 + mlp branch, so d resid2 = d out) */
    float* dattn_branch = parallel ? g->dbranch2 : g->dbranch;
    if (parallel) {
        pos_dropout_backward(m, dattn_branch, g->dresid, B, T, g0, rec->seed[SITE_ATTN_RESID], dres);
        if (depth) pos_drop_path(m, dattn_branch, dattn_branch, B, T, g0, rec->seed[SITE_DEPTH_ATTN]);
    }

    /* in the forward, out = resid2 + drop_path(drop(fcproj(gelu(fc(ln2(mlp_in)))))), mlp_in =
     * resid2 (sequential) or x (parallel) */
    pos_dropout_backward(m, g->dbranch, g->dresid, B, T, g0, rec->seed[SITE_MLP_RESID], dres);
    if (depth) pos_drop_path(m, g->dbranch, g->dbranch, B, T, g0, rec->seed[SITE_DEPTH_MLP]);
    m->be->matmul_backward(g->dfch, dfcprojw, dfcprojb, g->dbranch, a->fch_gelu, wop(m, gp.fcprojw),
                           N, 4 * C, C);
    m->be->gelu_backward(g->dfch, a->fch, g->dfch, (size_t)N * 4 * C);
    m->be->matmul_backward(g->dln, dfcw, dfcb, g->dfch, a->ln2, wop(m, gp.fcw), N, C, 4 * C);
    m->be->layernorm_backward(g->dresid, dln2w, dln2b, g->dln, parallel ? m->resid[l] : a->resid2,
                       p.ln2w, a->ln2_mean, a->ln2_rstd, N, C);
    /* sequential: now dresid = d resid2; in the forward,
     * resid2 = x + drop_path(drop(attproj(attn(rope(qkv(ln1(x))))))) */
    if (!parallel) {
        pos_dropout_backward(m, dattn_branch, g->dresid, B, T, g0, rec->seed[SITE_ATTN_RESID], dres);
        if (depth) pos_drop_path(m, dattn_branch, dattn_branch, B, T, g0, rec->seed[SITE_DEPTH_ATTN]);
    }
    m->be->matmul_backward(g->datty, dattprojw, dattprojb, dattn_branch, a->atty, wop(m, gp.attprojw),
                           N, C, C);
    if (cp_on(m))
        cp_attention_backward(m, a, B, T, g0, rec->seed[SITE_ATTN_PROB], dattn);
    else
        m->be->attention_backward(g->dqkv, g->attn_scratch, g->datty, a->qkv, a->atty, a->lse, B,
                                  T, c->num_heads, c->num_kv_heads, gpt_head_dim(c), g0,
                                  rec->seed[SITE_ATTN_PROB], dattn);
    /* a->qkv holds the rotated q and k (what attention saw); dqkv is their gradient: rotate it
     * back to the gradient of the QKV linear's output */
    if (c->pos_kind == POS_ROPE) pos_rope(m, g->dqkv, B, T, 1);
    m->be->matmul_backward(g->dln, dqkvw, dqkvb, g->dqkv, a->ln1, wop(m, gp.qkvw), N, C, QKV);
    m->be->layernorm_backward(g->dresid, dln1w, dln1b, g->dln, m->resid[l], p.ln1w, a->ln1_mean,
                       a->ln1_rstd, N, C);
}

#ifdef SEEDGPT_TEST_BUILD
/* Test builds fill the recompute scratch with NaN before each recompute: a backward that read an
 * activation the recompute did not write would turn the gradients into NaN. The pattern
 * 0x7fc07fc0 is a NaN as one fp32 and as each of two bf16. */
static void poison_recompute_scratch(GPT* m) {
    uint32_t bits = 0x7fc07fc0u;
    float nan2;
    memcpy(&nan2, &bits, sizeof(nan2));
    m->be->fill(m->acts_memory + m->num_kept_acts, m->num_recompute_acts, nan2);
}
#endif

/* Recomputes layers [first, end) from the kept resid[first], with the records' seeds (or, for
 * the negative control, fresh pass-1 seeds drawn into m->fresh_records), and checks the segment's
 * output against the stored resid[end]. Returns the records the segment's backward must use. */
static const LayerRecord* recompute_segment(GPT* m, int first, int end) {
    int B = m->cur_B, T = m->cur_T, C = m->config.channels, L = m->config.num_layers;
    set_phase(m, BE_PHASE_RECOMPUTE);
#ifdef SEEDGPT_TEST_BUILD
    poison_recompute_scratch(m);
#endif
    const LayerRecord* recs = m->records + first;
    if (m->policy.fresh_seeds) {
        for (int l = first; l < end; l++)
            layer_record_draw(&m->fresh_records[l - first], m->master_seed, m->records[l].step,
                              (uint32_t)l, PASS_FRESH);
        recs = m->fresh_records;
    }
    m->recomputing = 1;
    for (int l = first; l < end; l++) {
        float* out = l == end - 1 ? m->check : m->resid[l + 1];
        /* the forward's attention statistics are logged once: a recompute adds none */
        layer_forward(m, l, m->resid[l], out, &recs[l - first], B, T, m->cur_g0, m->cur_train,
                      NULL);
    }
    m->recomputing = 0;
    if (m->policy.check != CHECK_OFF) {
        size_t n = (size_t)B * T * C;
        size_t differ = m->be->count_differ(m->check, m->resid[end], n);
        if (differ > 0) {
            if (m->check_mismatches == 0) m->check_first_layer = first;
            m->check_mismatches++;
            fprintf(stderr, "seedgpt: recompute check: step %u, layers %d..%d: the recomputed "
                    "output differs from the stored %s in %zu of %zu values\n",
                    m->records[first].step, first, end - 1,
                    end == L ? "input of the final LayerNorm" : "input of the next segment",
                    differ, n);
        }
    }
    set_phase(m, BE_PHASE_BACKWARD);
    return recs - first;   /* indexed by layer */
}

int gpt_backward(GPT* m, float dloss) {
    const GPTConfig* c = &m->config;
    if (m->be->host_memory && omp_get_max_threads() > m->plan_threads) {
        fprintf(stderr, "seedgpt: internal error: backward on %d threads, scratch planned for %d\n",
                omp_get_max_threads(), m->plan_threads);
        exit(1);
    }
    int B = m->cur_B, T = m->cur_T, N = B * T, C = c->channels, L = c->num_layers;
    GradScratch* g = &m->gs;
    m->check_mismatches = 0;
    m->check_first_layer = -1;
    set_phase(m, BE_PHASE_BACKWARD);

    /* loss -> logits -> LM head (tied to wte) -> final LayerNorm. A training forward told the
     * dloss (gpt_set_loss_scale) did the classifier's part already; otherwise it is done here,
     * chunk by chunk, each chunk's logits computed again (the same bits) unless the forward's
     * one chunk still holds them */
    if (m->head_grads_done) {
        if (m->loss_scale != dloss) {
            fprintf(stderr, "seedgpt: internal error: backward with dloss %g after a forward told "
                    "%g\n", dloss, m->loss_scale);
            exit(1);
        }
    } else {
        int R = m->classifier_rows;
        for (int r0 = 0; r0 < N; r0 += R) {
            int rows = N - r0 < R ? N - r0 : R;
            if (!m->head_logits_kept)
                m->be->matmul_forward(m->logits, DT_FP32, act_rows(m, m->lnf, (size_t)r0, (size_t)C),
                                      wop(m, m->grads.wte), NULL, rows, C, c->padded_vocab_size);
            classifier_chunk_backward(m, r0, rows, dloss);
        }
    }
    m->head_grads_done = m->head_logits_kept = 0;
    m->loss_scale = 0.0f;
    m->be->fill(g->dresid, (size_t)N * C, 0.0f);
    m->be->layernorm_backward(g->dresid, m->grads.lnfw, m->grads.lnfb, m->dlnf, m->resid[L],
                       m->params.lnfw, m->lnf_mean, m->lnf_rstd, N, C);
    /* the blocks, one segment at a time from the top; under none one segment, never recomputed */
    int K = ckpt_segment_len(&m->policy, L);
    for (int first = (L - 1) / K * K; first >= 0; first -= K) {
        int end = first + K < L ? first + K : L;
        const LayerRecord* recs = m->records;
        if (ckpt_recomputes(&m->policy)) recs = recompute_segment(m, first, end);
        for (int l = end - 1; l >= first; l--) layer_backward(m, l, &recs[l]);
    }
    /* in the forward, resid[0] = drop(wte[tok] + wpe[t]) (no wpe with RoPE) */
    pos_dropout_backward(m, g->dbranch, g->dresid, B, T, m->cur_g0, m->records[0].seed[SITE_EMBD],
                         m->cur_train ? m->drop_embd : no_dropout());
    pos_encoder_backward(m, g->dbranch, B, T);
    return m->check_mismatches;
}

/* ---- clipping and the optimizer ----------------------------------------------------------- */

float gpt_grad_norm(GPT* m) {
    set_phase(m, BE_PHASE_OPTIMIZER);
    float* g[NUM_PARAMETER_TENSORS];
    memcpy(g, &m->grads, sizeof(g));
    double ss = 0.0, t[NUM_PARAMETER_TENSORS];
    if (m->be->sum_squares_tensors != NULL) {   /* every tensor in one call, the same sums */
        size_t off[NUM_PARAMETER_TENSORS];
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) off[k] = (size_t)(g[k] - m->grads_memory);
        m->be->sum_squares_tensors(t, m->grads_memory, NUM_PARAMETER_TENSORS, off, m->param_sizes);
    } else {
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) t[k] = m->be->sum_squares(g[k], m->param_sizes[k]);
    }
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) ss += t[k];
    return (float)sqrt(ss);
}

float gpt_clip_grads_unscaled(GPT* m, float max_norm, float loss_scale) {
    float unscale = 1.0f / loss_scale;            /* exact: loss_scale is a power of two */
    float norm = gpt_grad_norm(m) * unscale;
    m->grad_scale = unscale;
    if (max_norm > 0.0f && isfinite(norm)) {
        float coef = max_norm / (norm + 1e-6f);   /* as torch.nn.utils.clip_grad_norm_ */
        if (coef < 1.0f) m->grad_scale = coef * unscale;   /* applied by gpt_adamw as it reads each gradient */
    }
    return norm;
}

float gpt_clip_grads(GPT* m, float max_norm) { return gpt_clip_grads_unscaled(m, max_norm, 1.0f); }

float gpt_grad_scale(const GPT* m) { return m->grad_scale; }

void gpt_adamw(GPT* m, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    set_phase(m, BE_PHASE_OPTIMIZER);
    float *p[NUM_PARAMETER_TENSORS], *g[NUM_PARAMETER_TENSORS];
    memcpy(p, &m->params, sizeof(p));
    memcpy(g, &m->grads, sizeof(g));
    if (m->be->adamw_update_tensors != NULL) {   /* every tensor, and the bf16 copy, in one call */
        size_t off[NUM_PARAMETER_TENSORS];
        float wd[NUM_PARAMETER_TENSORS];
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
            off[k] = (size_t)(p[k] - m->params_memory);
            wd[k] = gpt_param_decay[k] ? weight_decay : 0.0f;
        }
        m->be->adamw_update_tensors(m->params_memory, m->wop_memory, m->grads_memory, m->grad_scale,
                                    m->m_memory, m->v_memory, NUM_PARAMETER_TENSORS, off,
                                    m->param_sizes, wd, lr, beta1, beta2, eps, t);
        m->grad_scale = 1.0f;
        return;
    }
    /* the products' bf16 copy, once per update: in AdamW's own pass where the table can */
    int fused = m->wop_memory != NULL && m->be->adamw_update_act != NULL;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t off = (size_t)(p[k] - m->params_memory);
        float wd = gpt_param_decay[k] ? weight_decay : 0.0f;
        if (fused)
            m->be->adamw_update_act(p[k], (char*)m->wop_memory + off * dtype_bytes(m->act_dtype),
                                    g[k], m->grad_scale, m->m_memory + off, m->v_memory + off,
                                    m->param_sizes[k],
                                    lr, beta1, beta2, eps, wd, t);
        else
            m->be->adamw_update(p[k], g[k], m->grad_scale, m->m_memory + off, m->v_memory + off,
                                m->param_sizes[k], lr, beta1, beta2, eps, wd, t);
    }
    if (!fused) gpt_round_weights(m);
    m->grad_scale = 1.0f;   /* the clip's coefficient is this update's */
}
