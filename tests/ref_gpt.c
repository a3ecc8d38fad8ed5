/* tests/ref_gpt.c — float64 reference of the whole GPT: forward, mean cross-entropy and the
 * backward, written naively from DESIGN §2–3 and the layout documented in model/gpt.h. It calls
 * none of the fp32 ops and none of the model's layout code; it shares with the model only the
 * Philox header (the definition of the masks) and dropout_make (p -> threshold, scale).
 *
 * Test code: plain loops, every activation kept in double, the attention probabilities kept as
 * full (T, T) matrices, every dropout mask kept as an array of (0 or scale).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "random/philox.h"
#include "tests/ref_gpt.h"

enum { RG_WTE, RG_WPE, RG_LN1W, RG_LN1B, RG_QKVW, RG_QKVB, RG_ATTPROJW, RG_ATTPROJB,
       RG_LN2W, RG_LN2B, RG_FCW, RG_FCB, RG_FCPROJW, RG_FCPROJB, RG_LNFW, RG_LNFB };

size_t ref_gpt_param_sizes(const GPTConfig* c, size_t s[REF_GPT_NUM_TENSORS]) {
    size_t Vp = c->padded_vocab_size, C = c->channels, L = c->num_layers, T = c->max_seq_len;
    size_t HD = C / c->num_heads, QKV = (size_t)(c->num_heads + 2 * c->num_kv_heads) * HD;
    s[RG_WTE] = Vp * C;          s[RG_WPE] = c->pos_kind == POS_ROPE ? 0 : T * C;
    s[RG_LN1W] = L * C;          s[RG_LN1B] = L * C;
    s[RG_QKVW] = L * QKV * C;    s[RG_QKVB] = L * QKV;
    s[RG_ATTPROJW] = L * C * C;  s[RG_ATTPROJB] = L * C;
    s[RG_LN2W] = L * C;          s[RG_LN2B] = L * C;
    s[RG_FCW] = L * 4 * C * C;   s[RG_FCB] = L * 4 * C;
    s[RG_FCPROJW] = L * C * 4 * C; s[RG_FCPROJB] = L * C;
    s[RG_LNFW] = C;              s[RG_LNFB] = C;
    size_t total = 0;
    for (int k = 0; k < REF_GPT_NUM_TENSORS; k++) total += s[k];
    return total;
}

static double* rg_zeros(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

/* keep factor of one element: 0 or scale; thr == 0 keeps everything (times scale, 1 at p = 0) */
static double rg_keep(uint32_t draw, Dropout d) {
    if (d.thr == 0) return (double)d.scale;
    return draw >= d.thr ? (double)d.scale : 0.0;
}

/* mask (B, T, C) of a residual or embedding site */
static void rg_elem_mask(double* mask, int B, int T, int C, uint32_t g0, uint64_t seed,
                         Dropout d) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                mask[((size_t)b * T + t) * C + c] =
                    d.thr == 0 ? (double)d.scale
                               : rg_keep(philox_elem_draw(seed, g0 + (uint32_t)b, (uint32_t)t,
                                                          (uint32_t)c), d);
}

/* ---- layers, float64 ------------------------------------------------------------------------ */

static void rg_layernorm_fwd(double* out, double* mean, double* rstd, const double* x,
                             const double* w, const double* bias, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double* xr = x + (size_t)n * C;
        double m = 0;
        for (int c = 0; c < C; c++) m += xr[c];
        m /= C;
        double v = 0;
        for (int c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);
        v /= C;
        double r = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (xr[c] - m) * r * w[c] + bias[c];
        mean[n] = m;
        rstd[n] = r;
    }
}

/* dx accumulated, dw and db accumulated */
static void rg_layernorm_bwd(double* dx, double* dw, double* db, const double* dout,
                             const double* x, const double* w, const double* mean,
                             const double* rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double* xr = x + (size_t)n * C;
        const double* d = dout + (size_t)n * C;
        double m = mean[n], r = rstd[n];
        /* y = xhat * w + b, xhat = (x - m) r: dxhat = dout w;
         * dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) */
        double a = 0, bb = 0;
        for (int c = 0; c < C; c++) {
            double xhat = (xr[c] - m) * r;
            a += d[c] * w[c];
            bb += d[c] * w[c] * xhat;
            dw[c] += d[c] * xhat;
            db[c] += d[c];
        }
        a /= C;
        bb /= C;
        for (int c = 0; c < C; c++) {
            double xhat = (xr[c] - m) * r;
            dx[(size_t)n * C + c] += r * (d[c] * w[c] - a - xhat * bb);
        }
    }
}

/* out (N, OC) = in (N, IC) W(OC, IC)^T + b */
static void rg_linear_fwd(double* out, const double* in, const double* W, const double* b,
                          int N, int IC, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b != NULL ? b[o] : 0.0;
            for (int i = 0; i < IC; i++) s += in[(size_t)n * IC + i] * W[(size_t)o * IC + i];
            out[(size_t)n * OC + o] = s;
        }
}

/* din written (if not NULL), dW and db accumulated */
static void rg_linear_bwd(double* din, double* dW, double* db, const double* dout,
                          const double* in, const double* W, int N, int IC, int OC) {
    if (din != NULL) memset(din, 0, (size_t)N * IC * sizeof(double));
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double d = dout[(size_t)n * OC + o];
            if (db != NULL) db[o] += d;
            for (int i = 0; i < IC; i++) {
                if (din != NULL) din[(size_t)n * IC + i] += d * W[(size_t)o * IC + i];
                dW[(size_t)o * IC + i] += d * in[(size_t)n * IC + i];
            }
        }
}

static const double RG_GELU_S = 0.79788456080286535588; /* sqrt(2/pi) */

static double rg_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(RG_GELU_S * (x + 0.044715 * x * x * x)));
}

static double rg_gelu_grad(double x) {
    double u = RG_GELU_S * (x + 0.044715 * x * x * x);
    double th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * RG_GELU_S * (1.0 + 3 * 0.044715 * x * x);
}

/* Causal attention, GQA. qkv (B, T, (NH + 2 NKV) HD); out (B, T, NH HD).
 * P (B, NH, T, T): softmax probabilities; M (B, NH, T, T): keep factor (0 or scale). */
typedef struct { int B, T, NH, NKV, HD; } RgAttnShape;

static size_t rg_qoff(RgAttnShape s, int b, int t, int h) {   /* query head h of (b, t) */
    return ((size_t)b * s.T + t) * (size_t)((s.NH + 2 * s.NKV) * s.HD) + (size_t)h * s.HD;
}
static size_t rg_koff(RgAttnShape s, int b, int t, int kh) {
    return rg_qoff(s, b, t, s.NH + kh);
}
static size_t rg_voff(RgAttnShape s, int b, int t, int kh) {
    return rg_qoff(s, b, t, s.NH + s.NKV + kh);
}
static size_t rg_poff(RgAttnShape s, int b, int h, int i, int j) {
    return (((size_t)b * s.NH + h) * s.T + i) * s.T + j;
}

static void rg_attention_fwd(double* out, double* P, double* M, const double* qkv, RgAttnShape s,
                             uint32_t g0, uint64_t seed, Dropout d) {
    double sigma = 1.0 / sqrt((double)s.HD);
    int C = s.NH * s.HD, group = s.NH / s.NKV;
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++) {
            int kh = h / group;
            for (int i = 0; i < s.T; i++) {
                const double* q = qkv + rg_qoff(s, b, i, h);
                double mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const double* k = qkv + rg_koff(s, b, j, kh);
                    double dot = 0;
                    for (int e = 0; e < s.HD; e++) dot += q[e] * k[e];
                    P[rg_poff(s, b, h, i, j)] = sigma * dot;
                    if (sigma * dot > mx) mx = sigma * dot;
                }
                double z = 0;
                for (int j = 0; j <= i; j++) {
                    double* p = &P[rg_poff(s, b, h, i, j)];
                    *p = exp(*p - mx);
                    z += *p;
                }
                double* o = out + ((size_t)b * s.T + i) * C + (size_t)h * s.HD;
                for (int e = 0; e < s.HD; e++) o[e] = 0;
                for (int j = 0; j <= i; j++) {
                    size_t pj = rg_poff(s, b, h, i, j);
                    P[pj] /= z;
                    M[pj] = d.thr == 0 ? (double)d.scale
                                       : rg_keep(philox_attn_draw(seed, g0 + (uint32_t)b,
                                                                  (uint32_t)h, (uint32_t)i,
                                                                  (uint32_t)j), d);
                    const double* v = qkv + rg_voff(s, b, j, kh);
                    for (int e = 0; e < s.HD; e++) o[e] += P[pj] * M[pj] * v[e];
                }
                for (int j = i + 1; j < s.T; j++) {
                    P[rg_poff(s, b, h, i, j)] = 0;
                    M[rg_poff(s, b, h, i, j)] = 0;
                }
            }
        }
}

/* dqkv written */
static void rg_attention_bwd(double* dqkv, const double* dout, const double* qkv, const double* P,
                             const double* M, RgAttnShape s) {
    double sigma = 1.0 / sqrt((double)s.HD);
    int C = s.NH * s.HD, group = s.NH / s.NKV;
    size_t QKV = (size_t)(s.NH + 2 * s.NKV) * s.HD;
    memset(dqkv, 0, (size_t)s.B * s.T * QKV * sizeof(double));
    double* dP = rg_zeros((size_t)s.T);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++) {
            int kh = h / group;
            for (int i = 0; i < s.T; i++) {
                const double* q = qkv + rg_qoff(s, b, i, h);
                const double* dO = dout + ((size_t)b * s.T + i) * C + (size_t)h * s.HD;
                /* o_i = sum_j P_ij M_ij v_j */
                double rowdot = 0;   /* sum_j P_ij dP_ij (softmax backward) */
                for (int j = 0; j <= i; j++) {
                    size_t pj = rg_poff(s, b, h, i, j);
                    const double* v = qkv + rg_voff(s, b, j, kh);
                    double* dv = dqkv + rg_voff(s, b, j, kh);
                    double dov = 0;
                    for (int e = 0; e < s.HD; e++) {
                        dov += dO[e] * v[e];
                        dv[e] += P[pj] * M[pj] * dO[e];
                    }
                    dP[j] = dov * M[pj];
                    rowdot += P[pj] * dP[j];
                }
                double* dq = dqkv + rg_qoff(s, b, i, h);
                for (int j = 0; j <= i; j++) {
                    size_t pj = rg_poff(s, b, h, i, j);
                    double dS = P[pj] * (dP[j] - rowdot);   /* d score (after sigma) */
                    const double* k = qkv + rg_koff(s, b, j, kh);
                    double* dk = dqkv + rg_koff(s, b, j, kh);
                    for (int e = 0; e < s.HD; e++) {
                        dq[e] += sigma * dS * k[e];
                        dk[e] += sigma * dS * q[e];
                    }
                }
            }
        }
    free(dP);
}

/* RoPE in float64, in place on the q and k heads of qkv (B, T, QKV): pair d of a head at (d, d +
 * HD/2) (NeoX) or (2d, 2d + 1) (GPT-J) turns by the angle sign * t * base^(-2d/HD). sign -1 is
 * the inverse rotation, the backward of sign +1 (rotations are orthogonal). */
static void rg_rope(double* qkv, RgAttnShape s, int base, int layout, double sign) {
    int H2 = s.HD / 2;
    for (int b = 0; b < s.B; b++)
        for (int t = 0; t < s.T; t++)
            for (int h = 0; h < s.NH + s.NKV; h++) {   /* the q heads, then the k heads */
                double* x = qkv + rg_qoff(s, b, t, h);
                for (int d = 0; d < H2; d++) {
                    double a = sign * t * pow((double)base, -2.0 * d / s.HD);
                    int i0 = layout == ROPE_GPTJ ? 2 * d : d;
                    int i1 = layout == ROPE_GPTJ ? 2 * d + 1 : d + H2;
                    double x0 = x[i0], x1 = x[i1];
                    x[i0] = x0 * cos(a) - x1 * sin(a);
                    x[i1] = x0 * sin(a) + x1 * cos(a);
                }
            }
}

/* stochastic depth factor of each sequence: 0 or scale (scale alone when p = 0) */
static void rg_depth(double* f, int B, uint32_t g0, uint64_t seed, Dropout d) {
    for (int b = 0; b < B; b++)
        f[b] = d.thr == 0 ? (double)d.scale
                          : rg_keep(philox_depth_draw(seed, g0 + (uint32_t)b), d);
}

/* ---- the model ------------------------------------------------------------------------------ */

typedef struct {
    double *x;                  /* (N, C) layer input */
    double *ln1, *mean1, *rstd1, *qkv, *P, *M, *atty, *mask2, *r2;
    double *ln2, *mean2, *rstd2, *fch, *gel, *mask3;
    double *depth2, *depth3;    /* (B) stochastic depth of the attention and MLP branches */
} RgLayer;

double ref_gpt_loss_and_grad(const GPTConfig* c, const double* params, double* grads,
                             const int* inputs, const int* targets, int B, int T, uint32_t g0,
                             uint64_t master, uint32_t step, double p_embd, double p_attn,
                             double p_resid) {
    return ref_gpt_loss_and_grad_rows(c, params, grads, NULL, inputs, targets, B, T, g0, master,
                                      step, p_embd, p_attn, p_resid);
}

double ref_gpt_loss_and_grad_rows(const GPTConfig* c, const double* params, double* grads,
                                  double* losses, const int* inputs, const int* targets,
                                  int B, int T, uint32_t g0, uint64_t master, uint32_t step,
                                  double p_embd, double p_attn, double p_resid) {
    return ref_gpt_loss_and_grad_opts(c, params, grads, losses, inputs, targets, B, T, g0, master,
                                      step, p_embd, p_attn, p_resid, 0.0);
}

double ref_gpt_loss_and_grad_opts(const GPTConfig* c, const double* params, double* grads,
                                  double* losses, const int* inputs, const int* targets,
                                  int B, int T, uint32_t g0, uint64_t master, uint32_t step,
                                  double p_embd, double p_attn, double p_resid,
                                  double p_drop_path) {
    int rope = c->pos_kind == POS_ROPE, parallel = c->block_kind == BLOCK_PARALLEL;
    Dropout ddp = dropout_make(p_drop_path);
    int L = c->num_layers, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    int NH = c->num_heads, NKV = c->num_kv_heads, HD = C / NH, QKV = (NH + 2 * NKV) * HD;
    int N = B * T;
    size_t NC = (size_t)N * C;
    RgAttnShape as = {B, T, NH, NKV, HD};
    size_t PT = (size_t)B * NH * T * T;
    Dropout de = dropout_make(p_embd), da = dropout_make(p_attn), dr = dropout_make(p_resid);

    /* parameter views */
    size_t sz[REF_GPT_NUM_TENSORS], off[REF_GPT_NUM_TENSORS];
    size_t total = ref_gpt_param_sizes(c, sz);
    off[0] = 0;
    for (int k = 1; k < REF_GPT_NUM_TENSORS; k++) off[k] = off[k - 1] + sz[k - 1];
    const double* P_[REF_GPT_NUM_TENSORS];
    for (int k = 0; k < REF_GPT_NUM_TENSORS; k++) P_[k] = params + off[k];
    const double *wte = P_[RG_WTE], *wpe = P_[RG_WPE];

    /* ---- forward ---- */
    double* mask0 = rg_zeros(NC);
    rg_elem_mask(mask0, B, T, C, g0, philox_site_seed(master, step, 0, SITE_EMBD, PASS_FORWARD),
                 de);
    RgLayer* ly = calloc((size_t)L, sizeof(RgLayer));
    double* x = rg_zeros(NC);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int ch = 0; ch < C; ch++) {
                size_t i = ((size_t)b * T + t) * C + ch;
                x[i] = (wte[(size_t)inputs[b * T + t] * C + ch] +
                        (rope ? 0.0 : wpe[(size_t)t * C + ch])) * mask0[i];
            }
    for (int l = 0; l < L; l++) {
        RgLayer* a = &ly[l];
        uint64_t s_attn = philox_site_seed(master, step, l, SITE_ATTN_PROB, PASS_FORWARD);
        uint64_t s_res2 = philox_site_seed(master, step, l, SITE_ATTN_RESID, PASS_FORWARD);
        uint64_t s_res3 = philox_site_seed(master, step, l, SITE_MLP_RESID, PASS_FORWARD);
        a->depth2 = rg_zeros((size_t)B);
        a->depth3 = rg_zeros((size_t)B);
        rg_depth(a->depth2, B, g0, philox_site_seed(master, step, l, SITE_DEPTH_ATTN, PASS_FORWARD), ddp);
        rg_depth(a->depth3, B, g0, philox_site_seed(master, step, l, SITE_DEPTH_MLP, PASS_FORWARD), ddp);
        a->x = x;
        a->ln1 = rg_zeros(NC); a->mean1 = rg_zeros(N); a->rstd1 = rg_zeros(N);
        a->qkv = rg_zeros((size_t)N * QKV);
        a->P = rg_zeros(PT); a->M = rg_zeros(PT);
        a->atty = rg_zeros(NC); a->mask2 = rg_zeros(NC); a->r2 = rg_zeros(NC);
        a->ln2 = rg_zeros(NC); a->mean2 = rg_zeros(N); a->rstd2 = rg_zeros(N);
        a->fch = rg_zeros(NC * 4); a->gel = rg_zeros(NC * 4); a->mask3 = rg_zeros(NC);

        rg_layernorm_fwd(a->ln1, a->mean1, a->rstd1, x, P_[RG_LN1W] + (size_t)l * C,
                         P_[RG_LN1B] + (size_t)l * C, N, C);
        rg_linear_fwd(a->qkv, a->ln1, P_[RG_QKVW] + (size_t)l * QKV * C,
                      P_[RG_QKVB] + (size_t)l * QKV, N, C, QKV);
        if (rope) rg_rope(a->qkv, as, c->rope_base, c->rope_layout, 1.0);
        rg_attention_fwd(a->atty, a->P, a->M, a->qkv, as, g0, s_attn, da);
        double* proj = rg_zeros(NC);
        rg_linear_fwd(proj, a->atty, P_[RG_ATTPROJW] + (size_t)l * C * C,
                      P_[RG_ATTPROJB] + (size_t)l * C, N, C, C);
        rg_elem_mask(a->mask2, B, T, C, g0, s_res2, dr);
        for (size_t i = 0; i < NC; i++) a->r2[i] = x[i] + a->depth2[i / ((size_t)T * C)] * a->mask2[i] * proj[i];
        /* the parallel block feeds the layer input to the MLP's LayerNorm too */
        rg_layernorm_fwd(a->ln2, a->mean2, a->rstd2, parallel ? x : a->r2, P_[RG_LN2W] + (size_t)l * C,
                         P_[RG_LN2B] + (size_t)l * C, N, C);
        rg_linear_fwd(a->fch, a->ln2, P_[RG_FCW] + (size_t)l * 4 * C * C,
                      P_[RG_FCB] + (size_t)l * 4 * C, N, C, 4 * C);
        for (size_t i = 0; i < NC * 4; i++) a->gel[i] = rg_gelu(a->fch[i]);
        rg_linear_fwd(proj, a->gel, P_[RG_FCPROJW] + (size_t)l * C * 4 * C,
                      P_[RG_FCPROJB] + (size_t)l * C, N, 4 * C, C);
        rg_elem_mask(a->mask3, B, T, C, g0, s_res3, dr);
        x = rg_zeros(NC);
        for (size_t i = 0; i < NC; i++) x[i] = a->r2[i] + a->depth3[i / ((size_t)T * C)] * a->mask3[i] * proj[i];
        free(proj);
    }
    double *lnf = rg_zeros(NC), *meanf = rg_zeros(N), *rstdf = rg_zeros(N);
    rg_layernorm_fwd(lnf, meanf, rstdf, x, P_[RG_LNFW], P_[RG_LNFB], N, C);
    double* logits = rg_zeros((size_t)N * Vp);
    rg_linear_fwd(logits, lnf, wte, NULL, N, C, Vp);   /* tied LM head over all Vp rows */
    double loss = 0;
    double* prob = rg_zeros((size_t)N * V);   /* softmax over the real vocab */
    for (int n = 0; n < N; n++) {
        const double* lg = logits + (size_t)n * Vp;
        double mx = -INFINITY;
        for (int v = 0; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
        double z = 0;
        for (int v = 0; v < V; v++) z += exp(lg[v] - mx);
        for (int v = 0; v < V; v++) prob[(size_t)n * V + v] = exp(lg[v] - mx) / z;
        double ln = mx + log(z) - lg[targets[n]];
        if (losses != NULL) losses[n] = ln;
        loss += ln;
    }
    loss /= N;

    /* ---- backward ---- */
    if (grads != NULL) {
        memset(grads, 0, total * sizeof(double));
        double* G[REF_GPT_NUM_TENSORS];
        for (int k = 0; k < REF_GPT_NUM_TENSORS; k++) G[k] = grads + off[k];
        /* loss = mean_n (logsumexp(logits[n, :V]) - logits[n, target]) */
        double* dlogits = rg_zeros((size_t)N * Vp);
        for (int n = 0; n < N; n++)
            for (int v = 0; v < V; v++)
                dlogits[(size_t)n * Vp + v] =
                    (prob[(size_t)n * V + v] - (v == targets[n] ? 1.0 : 0.0)) / N;
        double* dlnf = rg_zeros(NC);
        rg_linear_bwd(dlnf, G[RG_WTE], NULL, dlogits, lnf, wte, N, C, Vp);
        double* dx = rg_zeros(NC);
        rg_layernorm_bwd(dx, G[RG_LNFW], G[RG_LNFB], dlnf, x, P_[RG_LNFW], meanf, rstdf, N, C);
        double* dbr = rg_zeros(NC);
        double* dln = rg_zeros(NC);
        double* dgel = rg_zeros(NC * 4);
        double* datty = rg_zeros(NC);
        double* dqkv = rg_zeros((size_t)N * QKV);
        double* dbr2 = rg_zeros(NC);
        size_t TC = (size_t)T * C;
        for (int l = L - 1; l >= 0; l--) {
            RgLayer* a = &ly[l];
            /* parallel: r2 = x + attn branch and out = r2 + mlp branch, so d r2 = d out, taken
             * for the attention branch before the MLP's LayerNorm adds to dx */
            if (parallel)
                for (size_t i = 0; i < NC; i++) dbr2[i] = dx[i] * a->mask2[i] * a->depth2[i / TC];
            /* out = r2 + depth3 * mask3 * fcproj(gelu(fc(ln2(r2 or x)))) */
            for (size_t i = 0; i < NC; i++) dbr[i] = dx[i] * a->mask3[i] * a->depth3[i / TC];
            rg_linear_bwd(dgel, G[RG_FCPROJW] + (size_t)l * C * 4 * C,
                          G[RG_FCPROJB] + (size_t)l * C, dbr, a->gel,
                          P_[RG_FCPROJW] + (size_t)l * C * 4 * C, N, 4 * C, C);
            for (size_t i = 0; i < NC * 4; i++) dgel[i] *= rg_gelu_grad(a->fch[i]);
            rg_linear_bwd(dln, G[RG_FCW] + (size_t)l * 4 * C * C, G[RG_FCB] + (size_t)l * 4 * C,
                          dgel, a->ln2, P_[RG_FCW] + (size_t)l * 4 * C * C, N, C, 4 * C);
            /* dx now stands for d r2: the identity path plus the LN2 branch */
            rg_layernorm_bwd(dx, G[RG_LN2W] + (size_t)l * C, G[RG_LN2B] + (size_t)l * C, dln,
                             parallel ? a->x : a->r2, P_[RG_LN2W] + (size_t)l * C, a->mean2,
                             a->rstd2, N, C);
            /* r2 = x + depth2 * mask2 * attproj(attn(rope(qkv(ln1(x))))) */
            if (!parallel)
                for (size_t i = 0; i < NC; i++) dbr2[i] = dx[i] * a->mask2[i] * a->depth2[i / TC];
            rg_linear_bwd(datty, G[RG_ATTPROJW] + (size_t)l * C * C,
                          G[RG_ATTPROJB] + (size_t)l * C, dbr2, a->atty,
                          P_[RG_ATTPROJW] + (size_t)l * C * C, N, C, C);
            rg_attention_bwd(dqkv, datty, a->qkv, a->P, a->M, as);
            if (rope) rg_rope(dqkv, as, c->rope_base, c->rope_layout, -1.0);
            rg_linear_bwd(dln, G[RG_QKVW] + (size_t)l * QKV * C, G[RG_QKVB] + (size_t)l * QKV,
                          dqkv, a->ln1, P_[RG_QKVW] + (size_t)l * QKV * C, N, C, QKV);
            rg_layernorm_bwd(dx, G[RG_LN1W] + (size_t)l * C, G[RG_LN1B] + (size_t)l * C, dln,
                             a->x, P_[RG_LN1W] + (size_t)l * C, a->mean1, a->rstd1, N, C);
        }
        /* x0 = mask0 * (wte[token] + wpe[t]) */
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int ch = 0; ch < C; ch++) {
                    size_t i = ((size_t)b * T + t) * C + ch;
                    double d = dx[i] * mask0[i];
                    G[RG_WTE][(size_t)inputs[b * T + t] * C + ch] += d;
                    if (!rope) G[RG_WPE][(size_t)t * C + ch] += d;
                }
        free(dlogits); free(dlnf); free(dx); free(dbr); free(dln); free(dgel); free(datty);
        free(dqkv); free(dbr2);
    }

    for (int l = 0; l < L; l++) {
        RgLayer* a = &ly[l];
        free(a->x); free(a->ln1); free(a->mean1); free(a->rstd1); free(a->qkv); free(a->P);
        free(a->M); free(a->atty); free(a->mask2); free(a->r2); free(a->ln2); free(a->mean2);
        free(a->rstd2); free(a->fch); free(a->gel); free(a->mask3); free(a->depth2);
        free(a->depth3);
    }
    free(ly); free(x); free(mask0); free(lnf); free(meanf); free(rstdf); free(logits); free(prob);
    return loss;
}
