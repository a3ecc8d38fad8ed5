/* cpu/ops_cpu.c — CPU implementations of model/ops.h: plain C + OpenMP, the model's dense
 * products through seedgpt's own GEMM (cpu/gemm_cpu.c). The reference for the CUDA twins.
 *
 * Determinism (DESIGN §4): per-row work is split over rows; reductions across rows (bias and
 * LayerNorm parameter gradients, embedding gradients, norms) are split over columns or fixed
 * blocks, each output summed by one thread in a fixed order, so the number of threads never
 * changes a bit. No OpenMP reduction clause on floats.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/ops.h"
#include "random/philox_x16.h"
#include "cpu/gemm_cpu.h"
#include "model/adamw.h"
#include "cpu/ln_rows.h"
#include "util/vexp.h"

/* Columns per block in column-partitioned reductions (a multiple of 16 floats = 64 bytes). */
#define COL_BLOCK 64

/* ---- dropout of one (b, t) row ------------------------------------------------------------ */

/* Philox calls per batch in dropout_row: DROP_QUADS independent calls (4 channels each), in the
 * lanes of AVX-512 registers where the CPU has them (random/philox_x16.h), else one loop of
 * scalar calls. The draws are the same ones, in any batching. */
#define DROP_QUADS 16

/* y[c] = res[c] + x[c] * keep(g, t, c) * scale over one row of C channels (res NULL: no residual
 * term, y[c] = x[c] * keep * scale). y may alias x or res. thr == 0 skips the generator: every
 * element is kept (scale is 1 exactly when p = 0). */
static inline void dropout_row(float* y, const float* x, const float* res, int C, uint32_t g,
                               uint32_t t, uint64_t seed, Dropout drop) {
    if (!dropout_active(drop)) {
        if (res != NULL) for (int c = 0; c < C; c++) y[c] = res[c] + x[c] * drop.scale;
        else for (int c = 0; c < C; c++) y[c] = x[c] * drop.scale;
        return;
    }
    const int x16 = philox_x16_supported();
    (void)x16;
    for (int c0 = 0; c0 < C; c0 += 4 * DROP_QUADS) {
        uint32_t r[DROP_QUADS][4];   /* r[q][w]: channel c0 + 4 q + w */
#if PHILOX_X16
        if (x16) philox_elem_draw64_x16(seed, g, t, (uint32_t)c0 >> 2, r);
        else
#endif
        for (int q = 0; q < DROP_QUADS; q++)
            philox_elem_draw4(seed, g, t, ((uint32_t)c0 >> 2) + (uint32_t)q, r[q]);
        const uint32_t* rk = &r[0][0];   /* rk[k]: channel c0 + k */
        int n = C - c0 < 4 * DROP_QUADS ? C - c0 : 4 * DROP_QUADS;
        /* simd: y may alias x or res, but only element for element */
        if (res != NULL) {
            #pragma omp simd
            for (int k = 0; k < n; k++)
                y[c0 + k] = res[c0 + k] + (rk[k] >= drop.thr ? x[c0 + k] * drop.scale : 0.0f);
        } else {
            #pragma omp simd
            for (int k = 0; k < n; k++)
                y[c0 + k] = rk[k] >= drop.thr ? x[c0 + k] * drop.scale : 0.0f;
        }
    }
}

/* ---- embedding ---------------------------------------------------------------------------- */

void encoder_forward_at(float* out, const int* inp, const float* wte, const float* wpe,
                        int B, int T, int t0, int C, uint32_t g0, uint64_t embd_seed, Dropout drop) {
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int b = bt / T, t = t0 + bt % T;
        float* o = out + (size_t)bt * C;
        const float* e = wte + (size_t)inp[bt] * C;
        if (wpe != NULL) {
            const float* p = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        } else {
            for (int c = 0; c < C; c++) o[c] = e[c];
        }
        dropout_row(o, o, NULL, C, g0 + (uint32_t)b, (uint32_t)t, embd_seed, drop);
    }
}

void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe,
                     int B, int T, int C, uint32_t g0, uint64_t embd_seed, Dropout drop) {
    encoder_forward_at(out, inp, wte, wpe, B, T, 0, C, g0, embd_seed, drop);
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp,
                      int B, int T, int C) {
    int nblocks = (C + COL_BLOCK - 1) / COL_BLOCK;
    /* dwte: rows scattered by token; split over channel blocks, rows in order. */
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
        for (int bt = 0; bt < B * T; bt++) {
            float* dw = dwte + (size_t)inp[bt] * C;
            const float* d = dout + (size_t)bt * C;
            for (int c = c0; c < c1; c++) dw[c] += d[c];
        }
    }
    if (dwpe == NULL) return;   /* no learned positions */
    /* dwpe[t] sums the B rows of position t, in b order. */
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        float* dw = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float* d = dout + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) dw[c] += d[c];
        }
    }
}

/* ---- layernorm ---------------------------------------------------------------------------- */

/* Rows in groups of 16: their means and rstds side by side (cpu/ln_rows.h: each the sequential
 * sum of llm.c's loop, bit for bit), then each row's output. */
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n0 = 0; n0 < N; n0 += 16) {
        const int rows = N - n0 < 16 ? N - n0 : 16;
        ln_stats_rows(inp, n0, rows, C, mean, rstd);
        for (int n = n0; n < n0 + rows; n++) {
            const float* x = inp + (size_t)n * C;
            const float m = mean[n], s = rstd[n];
            float* o = out + (size_t)n * C;
            for (int c = 0; c < C; c++) o[c] = (s * (x[c] - m)) * weight[c] + bias[c];
        }
    }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C) {
    /* in the forward, out = norm * w + b with norm = (x - mean) * rstd, so per row:
     * dnorm = dout * w, and dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) */
    /* rows in groups of 16, their two sums side by side where the CPU can (cpu/ln_rows.h) */
    #pragma omp parallel for schedule(static)
    for (int n0 = 0; n0 < N; n0 += 16) {
        const int rows = N - n0 < 16 ? N - n0 : 16;
        float dm[16], dnm[16];
#if LN_ROWS_X16
        if (rows == 16 && ln_rows_x16())
            ln_bwd_sums16(inp + (size_t)n0 * C, dout + (size_t)n0 * C, weight, C, mean + n0,
                          rstd + n0, dm, dnm);
        else
#endif
        for (int r = 0; r < rows; r++)
            ln_row_bwd_sums(inp + (size_t)(n0 + r) * C, dout + (size_t)(n0 + r) * C, weight, C,
                            mean[n0 + r], rstd[n0 + r], &dm[r], &dnm[r]);
        for (int r = 0; r < rows; r++) {
            const int n = n0 + r;
            const float* x = inp + (size_t)n * C;
            const float* d = dout + (size_t)n * C;
            const float m = mean[n], s = rstd[n], dnorm_mean = dm[r], dnorm_norm_mean = dnm[r];
            float* dx = dinp + (size_t)n * C;
            for (int c = 0; c < C; c++) {
                float norm = (x[c] - m) * s;
                float dnorm = weight[c] * d[c];
                dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
            }
        }
    }
    /* dweight[c] = sum_n dout[n,c] * norm[n,c]; dbias[c] = sum_n dout[n,c]: one thread per block
     * of channels, rows in order, then added to the accumulated gradient. */
    int nblocks = (C + COL_BLOCK - 1) / COL_BLOCK;
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
        float aw[COL_BLOCK], ab[COL_BLOCK];
        for (int c = 0; c < c1 - c0; c++) { aw[c] = 0.0f; ab[c] = 0.0f; }
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* d = dout + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; c++) {
                aw[c - c0] += d[c] * ((x[c] - m) * s);
                ab[c - c0] += d[c];
            }
        }
        for (int c = c0; c < c1; c++) { dweight[c] += aw[c - c0]; dbias[c] += ab[c - c0]; }
    }
}

/* ---- matmul ------------------------------------------------------------------------------- */

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC) {
    /* out (N,OC) = inp (N,C) . weight (OC,C)^T: B's element (k, j) is weight[j*C + k] */
    gemm_f32(N, OC, C, inp, C, 1, weight, 1, C, 0, out, OC);
    if (bias != NULL) {
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float* o = out + (size_t)n * OC;
            for (int k = 0; k < OC; k++) o[k] += bias[k];
        }
    }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC) {
    /* in the forward, out = inp . weight^T + bias, so:
     * dinp (N,C) = dout (N,OC) . weight (OC,C); dweight (OC,C) += dout^T . inp; dbias += colsum */
    if (dinp != NULL) {
        gemm_f32(N, C, OC, dout, OC, 1, weight, C, 1, 0, dinp, C);
    }
    /* A's element (o, n) is dout[n*OC + o]; each dweight element's chain continues over the rows */
    gemm_f32(OC, C, N, dout, 1, OC, inp, C, 1, 1, dweight, C);
    if (dbias != NULL) {
        int nblocks = (OC + COL_BLOCK - 1) / COL_BLOCK;
        #pragma omp parallel for schedule(static)
        for (int blk = 0; blk < nblocks; blk++) {
            int k0 = blk * COL_BLOCK, k1 = k0 + COL_BLOCK < OC ? k0 + COL_BLOCK : OC;
            float acc[COL_BLOCK];
            for (int k = 0; k < k1 - k0; k++) acc[k] = 0.0f;
            for (int n = 0; n < N; n++) {
                const float* d = dout + (size_t)n * OC;
                for (int k = k0; k < k1; k++) acc[k - k0] += d[k];
            }
            for (int k = k0; k < k1; k++) dbias[k] += acc[k - k0];
        }
    }
}

/* ---- GELU (tanh approximation) ------------------------------------------------------------ */

#define GELU_SCALING_FACTOR 0.7978845608028654f  /* sqrt(2 / pi) */

/* tanh(u) = 1 - 2 / (1 + e^(2u)) through the vectorisable vexpf: libm's tanhf is a scalar call
 * that dominated the whole MLP's non-matmul time. Saturates to +-1 correctly at both ends. */
static inline float gelu_tanh(float u) { return 1.0f - 2.0f / (1.0f + vexpf(2.0f * u)); }

void gelu_forward(float* out, const float* inp, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + gelu_tanh(GELU_SCALING_FACTOR * (x + cube)));
    }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        float th = gelu_tanh(GELU_SCALING_FACTOR * (x + cube));
        float sech2 = 1.0f - th * th;
        float local = 0.5f * (1.0f + th)
                    + 0.5f * x * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = local * dout[i];
    }
}

/* ---- residual + dropout ------------------------------------------------------------------- */

void residual_dropout_forward_at(float* out, const float* x, const float* branch,
                                 int B, int T, int t0, int C, uint32_t g0, uint64_t seed,
                                 Dropout drop) {
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int b = bt / T, t = t0 + bt % T;
        dropout_row(out + (size_t)bt * C, branch + (size_t)bt * C, x + (size_t)bt * C, C,
                    g0 + (uint32_t)b, (uint32_t)t, seed, drop);
    }
}

void residual_dropout_forward(float* out, const float* x, const float* branch,
                              int B, int T, int C, uint32_t g0, uint64_t seed, Dropout drop) {
    residual_dropout_forward_at(out, x, branch, B, T, 0, C, g0, seed, drop);
}

void dropout_backward_at(float* dy, const float* dout, int B, int T, int t0, int C, uint32_t g0,
                         uint64_t seed, Dropout drop) {
    /* in the forward y = x * keep * scale, so dx = dout * keep * scale: the same mask, redrawn */
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int b = bt / T, t = t0 + bt % T;
        dropout_row(dy + (size_t)bt * C, dout + (size_t)bt * C, NULL, C, g0 + (uint32_t)b,
                    (uint32_t)t, seed, drop);
    }
}

void dropout_backward(float* dy, const float* dout, int B, int T, int C, uint32_t g0,
                      uint64_t seed, Dropout drop) {
    dropout_backward_at(dy, dout, B, T, 0, C, g0, seed, drop);
}

/* ---- rotary position embedding ----------------------------------------------------------- */

/* The rotation of every q and k head of every row: sign = +1 rotates by +angle (the forward),
 * -1 by -angle (the backward: the transpose of a rotation is its inverse). Pair d of a head sits
 * at (d, d + HD/2) in the NeoX layout and (2d, 2d + 1) in the GPT-J layout. */
static void rope_rotate(float* qkv, const float* cos, const float* sin, int B, int T, int NH,
                        int NKV, int HD, int layout, int pos0, float sign) {
    int H2 = HD / 2, heads = NH + NKV;   /* the q heads, then the k heads: contiguous */
    size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        const float* cs = cos + (size_t)(pos0 + t) * H2;
        const float* sn = sin + (size_t)(pos0 + t) * H2;
        float* row = qkv + (size_t)bt * QKV;
        for (int h = 0; h < heads; h++) {
            float* x = row + (size_t)h * HD;
            for (int d = 0; d < H2; d++) {
                int i0 = layout == ROPE_GPTJ ? 2 * d : d;
                int i1 = layout == ROPE_GPTJ ? 2 * d + 1 : d + H2;
                float c = cs[d], s = sign * sn[d];
                float x0 = x[i0], x1 = x[i1];
                x[i0] = x0 * c - x1 * s;
                x[i1] = x0 * s + x1 * c;
            }
        }
    }
}

void rope_forward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int HD, int layout, int pos0) {
    rope_rotate(qkv, cos, sin, B, T, NH, NKV, HD, layout, pos0, 1.0f);
}

void rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int HD, int layout, int pos0) {
    /* in the forward y = R x with R the rotation by +angle, so dx = R^T dy = rotation by -angle */
    rope_rotate(dqkv, cos, sin, B, T, NH, NKV, HD, layout, pos0, -1.0f);
}

/* ---- stochastic depth --------------------------------------------------------------------- */

void drop_path(float* y, const float* x, int B, int T, int C, uint32_t g0, uint64_t seed,
               Dropout drop) {
    for (int b = 0; b < B; b++) {
        /* one draw per sequence: the whole (T, C) block is kept (times scale) or zeroed */
        float f = drop.scale;
        if (dropout_active(drop) && philox_depth_draw(seed, g0 + (uint32_t)b) < drop.thr) f = 0.0f;
        size_t n = (size_t)T * C;
        float* yb = y + (size_t)b * n;
        const float* xb = x + (size_t)b * n;
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) yb[i] = f == 0.0f ? 0.0f : xb[i] * f;
    }
}

/* ---- cross-entropy over the real vocabulary ----------------------------------------------- */

/* The softmax of a row of logits: its max, and the sum of e^(l - max) in double. Both run over
 * interleaved lanes combined in a fixed order (so gcc vectorises them, vexpd included, and the
 * bits do not depend on the threads); the max is exact in any order. */
enum { XENT_MAX_LANES = 16, XENT_SUM_LANES = 16 };

static float row_max(const float* l, int V) {
    float mx[XENT_MAX_LANES];
    for (int j = 0; j < XENT_MAX_LANES; j++) mx[j] = -INFINITY;
    int v = 0;
    for (; v + XENT_MAX_LANES <= V; v += XENT_MAX_LANES)
        for (int j = 0; j < XENT_MAX_LANES; j++) mx[j] = l[v + j] > mx[j] ? l[v + j] : mx[j];
    for (; v < V; v++) mx[0] = l[v] > mx[0] ? l[v] : mx[0];
    float maxv = -INFINITY;
    for (int j = 0; j < XENT_MAX_LANES; j++) maxv = mx[j] > maxv ? mx[j] : maxv;
    return maxv;
}

static double row_exp_sum(const float* l, int V, float maxv) {
    double acc[XENT_SUM_LANES] = {0};
    int v = 0;
    for (; v + XENT_SUM_LANES <= V; v += XENT_SUM_LANES)
        for (int j = 0; j < XENT_SUM_LANES; j++) acc[j] += vexpd((double)(l[v + j] - maxv));
    for (; v < V; v++) acc[0] += vexpd((double)(l[v] - maxv));
    double sum = 0.0;
    for (int j = 0; j < XENT_SUM_LANES; j++) sum += acc[j];
    return sum;
}

/* A row's loss, -log softmax(l)[t] = (max - l[t]) + log(sum of e^(l - max)), in double: the
 * difference of two floats first, so that it stays exact however large the logits are (max +
 * log(sum) first would lose log(sum) to the rounding of a large max: every logit at 1e18 gave 0,
 * not ln V). A loss beyond float's range (a target logit far below the max) rounds to +inf, which
 * the non-finite guard sees; it never turns into 0. cuda/ops_cuda.cu computes the same expression. */
static inline float xent_loss(float maxv, float target_logit, double sum) {
    return (float)(((double)maxv - (double)target_logit) + log(sum));
}

void crossentropy_forward(float* losses, const float* logits, const int* targets,
                          int N, int V, int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vp;
        float maxv = row_max(l, V);
        double sum = row_exp_sum(l, V, maxv);
        losses[n] = xent_loss(maxv, l[targets[n]], sum);
    }
}

/* row_exp_sum that also keeps each e^(l - max) in e (V doubles): the same terms in the same
 * lanes and order, so the same sum; the gradient then reads e instead of evaluating them again */
static double row_exp_sum_kept(const float* l, int V, float maxv, double* e) {
    double acc[XENT_SUM_LANES] = {0};
    int v = 0;
    for (; v + XENT_SUM_LANES <= V; v += XENT_SUM_LANES)
        for (int j = 0; j < XENT_SUM_LANES; j++) {
            e[v + j] = vexpd((double)(l[v + j] - maxv));
            acc[j] += e[v + j];
        }
    for (; v < V; v++) {
        e[v] = vexpd((double)(l[v] - maxv));
        acc[0] += e[v];
    }
    double sum = 0.0;
    for (int j = 0; j < XENT_SUM_LANES; j++) sum += acc[j];
    return sum;
}

/* A row's dlogits in place from its kept e^(l - max) and 1 / their sum (padding: +0). */
static void row_dlogits(float* l, const double* e, double inv, int target, float dloss, int V,
                        int Vp) {
    for (int v = 0; v < V; v++) l[v] = (float)(e[v] * inv) * dloss;
    /* the target's (p - 1) * dloss, as one expression: not p * dloss - dloss */
    l[target] = ((float)(e[target] * inv) - 1.0f) * dloss;
    for (int v = V; v < Vp; v++) l[v] = 0.0f;
}

/* The rows' kept exponentials: V doubles per thread, grown to the largest call seen and kept, so
 * the step allocates nothing (called from outside a parallel region; not reentrant). */
static double* exp_rows = NULL;
static size_t exp_rows_cap = 0;

static double* exp_rows_buffer(int V) {
    const size_t n = (size_t)V * (size_t)omp_get_max_threads();
    if (n > exp_rows_cap) {
        free(exp_rows);
        exp_rows = malloc(sizeof(double) * n);
        if (exp_rows == NULL) {
            fprintf(stderr, "seedgpt: out of memory for the cross-entropy's %d-wide rows\n", V);
            exit(1);
        }
        exp_rows_cap = n;
    }
    return exp_rows;
}

/* The rows' dlogits in place and, where losses != NULL, first their losses (crossentropy_forward's
 * expression, before the row is overwritten): one exponential pass per row. */
static void crossentropy_rows(float* losses, float* logits, const int* targets, float dloss,
                              int N, int V, int Vp) {
    double* e_all = exp_rows_buffer(V);
    #pragma omp parallel
    {
        double* e = e_all + (size_t)V * omp_get_thread_num();
        #pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            float* l = logits + (size_t)n * Vp;
            float maxv = row_max(l, V);
            double sum = row_exp_sum_kept(l, V, maxv, e);
            if (losses != NULL) losses[n] = xent_loss(maxv, l[targets[n]], sum);
            row_dlogits(l, e, 1.0 / sum, targets[n], dloss, V, Vp);
        }
    }
}

void crossentropy_backward(float* logits, const int* targets, float dloss, int N, int V, int Vp) {
    crossentropy_rows(NULL, logits, targets, dloss, N, V, Vp);
}

void crossentropy_forward_backward(float* losses, float* logits, const int* targets, float dloss,
                                   int N, int V, int Vp) {
    crossentropy_rows(losses, logits, targets, dloss, N, V, Vp);
}

/* ---- norms and the optimizer -------------------------------------------------------------- */

#define NORM_BLOCK 16384

/* A block's sum of squares: 16 lanes, lane l summing (double) x[i]^2 for i = l mod 16 in order
 * (the products are exact in double), then the lanes added in order 0..15 with the tail (under
 * 16 values) in lane 0 first. Written as two vectors of 8 doubles so every compiler vectorises
 * it; the lanes and their order are the specification. */
typedef float sq_v8f __attribute__((vector_size(32)));
typedef double sq_v8d __attribute__((vector_size(64)));

static double block_sum_squares(const float* x, size_t n) {
    sq_v8d lo = {0}, hi = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        sq_v8f a, b;
        memcpy(&a, x + i, sizeof a);
        memcpy(&b, x + i + 8, sizeof b);
        sq_v8d da = __builtin_convertvector(a, sq_v8d), db = __builtin_convertvector(b, sq_v8d);
        lo += da * da;
        hi += db * db;
    }
    double acc[16];
    memcpy(acc, &lo, sizeof lo);
    memcpy(acc + 8, &hi, sizeof hi);
    for (; i < n; i++) acc[0] += (double)x[i] * (double)x[i];
    double s = 0.0;
    for (int l = 0; l < 16; l++) s += acc[l];
    return s;
}

double sum_squares(const float* x, size_t n) {
    size_t nblocks = (n + NORM_BLOCK - 1) / NORM_BLOCK;
    double total = 0.0;
    /* one partial per fixed block, then the partials added in block order: the same bits for
     * any number of threads */
    enum { STACK_PARTIALS = 4096 };
    double partial[STACK_PARTIALS];
    for (size_t base = 0; base < nblocks; base += STACK_PARTIALS) {
        size_t nb = nblocks - base < STACK_PARTIALS ? nblocks - base : STACK_PARTIALS;
        #pragma omp parallel for schedule(static)
        for (size_t k = 0; k < nb; k++) {
            size_t i0 = (base + k) * NORM_BLOCK, i1 = i0 + NORM_BLOCK < n ? i0 + NORM_BLOCK : n;
            partial[k] = block_sum_squares(x + i0, i1 - i0);
        }
        for (size_t k = 0; k < nb; k++) total += partial[k];
    }
    return total;
}

void scale_inplace(float* x, size_t n, float s) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void adamw_update(float* params, const float* grads, float grad_scale, float* m, float* v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        adamw_element(&params[i], grads[i] * grad_scale, &m[i], &v[i], lr, beta1, beta2, eps,
                      weight_decay, bc1, bc2);
    }
}
